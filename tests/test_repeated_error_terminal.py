"""repeated_error: what should have stopped each run (a close of its session before it, in
its own file) is found for every run at once, by one join, not a query per run."""

from __future__ import annotations

import json
from pathlib import Path

from loophound.ingest import ingest
from loophound.scan import scan_store
from loophound.store import Store

T0 = 1781826140544


def _log(path: Path, closes: list[int], storms: list[tuple[int, str]]) -> None:
    lines, n = [], 0

    def add(t: int, **fields) -> None:
        lines.append(json.dumps({"level": 30, "time": T0 + t, "pid": 7, "hostname": "h",
                                 **fields}))

    for t in closes:
        n += 1
        add(t, id=f"c{n}", action="session.close", session="s1", event="received", ownerHash="a")
        add(t + 5, id=f"c{n}", event="response", ok=True, elapsed_ms=5, ownerHash="a")
    for start, owner in storms:
        for k in range(12):
            n += 1
            t = start + k * 100
            add(t, id=f"r{n}", action="scroll", session="s1", event="received", ownerHash=owner)
            add(t, id=f"r{n}", event="response", ok=False, elapsed_ms=0,
                error_code="SESSION_NOT_FOUND", ownerHash=owner)
    lines.sort(key=lambda line: json.loads(line)["time"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def test_each_run_gets_the_latest_close_of_its_session_in_its_own_file(tmp_path):
    # a.log: closes at 0 and 1000, a run at 2000 and one at 60,000 (after the second close);
    # b.log (another daemon, the same session name): a run and no close
    _log(tmp_path / "logs" / "a.log", [0, 1000], [(2000, "x"), (60_000, "y")])
    _log(tmp_path / "logs" / "b.log", [], [(3000, "z")])
    store = Store(tmp_path / "st")
    ingest([str(tmp_path / "logs")], store)
    doc = scan_store(store, save=False).document
    runs = {f["actors"][0]: f for f in doc["findings"] if f["detector"] == "repeated_error"}
    assert sorted(runs) == ["7:x", "7:y", "7:z"]
    for actor in ("7:x", "7:y"):
        signal = runs[actor]["details"]["terminal_signal"]
        assert signal["line"] == 3 and signal["file"].endswith("a.log"), actor
    assert runs["7:z"]["details"]["terminal_signal"] is None

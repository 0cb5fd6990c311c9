"""rate_spike, unusual_actor and repair_loop, used the way a user runs them: write a synthetic
log (incident, clean twin, or a borderline case), ingest it into a store, scan, and read the
findings document."""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path

import pytest

from loophound.detect import DETECTORS, settings
from loophound.ingest import ingest
from loophound.scan import scan_store
from loophound.store import Store
from loophound.synth import write_bproxy_log, write_labtrust_run

MINE = ("rate_spike", "unusual_actor", "repair_loop")
SERIOUS = ("high", "critical")


def scan(tmp: Path, logs: Path) -> list[dict]:
    store = Store(tmp / "store")
    ingest([str(logs)], store)
    return scan_store(store).document["findings"]


def of(findings: list[dict], detector: str) -> list[dict]:
    return [f for f in findings if f["detector"] == detector]


def close(value: float, expected: float, tolerance: float = 0.02) -> bool:
    return abs(value - expected) <= tolerance * abs(expected)


@pytest.fixture(scope="module")
def bproxy(tmp_path_factory) -> tuple[dict, list[dict], Path]:
    root = tmp_path_factory.mktemp("bproxy")
    truth = write_bproxy_log(root / "logs", seed=7, incident=True)
    return truth, scan(root, root / "logs"), root / "store"


@pytest.fixture(scope="module")
def labtrust(tmp_path_factory) -> tuple[dict, list[dict]]:
    root = tmp_path_factory.mktemp("labtrust")
    truth = write_labtrust_run(root / "logs", seed=7, incident=True)
    return truth, scan(root, root / "logs")


# --- rate_spike ------------------------------------------------------------------------------


def test_rate_spike_finds_the_dead_session_storm(bproxy):
    truth, findings, _ = bproxy
    storm = truth["incidents"][0]
    spikes = of(findings, "rate_spike")
    assert len(spikes) == 1
    spike = spikes[0]
    assert spike["severity"] == "high"
    assert spike["sessions"] == [storm["session"]]
    assert spike["actors"] == [storm["actor"]]
    assert close(spike["events"], storm["requests"])
    assert close(spike["details"]["count"], storm["requests"])
    assert spike["start"] == storm["start"] and spike["end"] == storm["end"]
    assert spike["details"]["machine_cadence"]  # ~100 ms gaps: bproxy's metronome would fire
    assert spike["details"]["ratio"] > 10
    assert any("metronome" in e.get("note", "") for e in spike["evidence"])
    assert spike["evidence"][0]["line"] == storm["first_line"]


def test_rate_spike_on_trimmed_excerpt_without_actors(tmp_path):
    truth = write_bproxy_log(tmp_path / "logs", seed=7, incident=True, trimmed=True)
    spikes = of(scan(tmp_path, tmp_path / "logs"), "rate_spike")
    assert [s["sessions"] for s in spikes] == [["6afr3v"]]
    assert spikes[0]["actors"] == []
    assert close(spikes[0]["events"], truth["incidents"][0]["requests"])


def test_clean_twins_have_no_serious_findings(tmp_path):
    write_bproxy_log(tmp_path / "logs" / "bproxy", seed=7, incident=False)
    truth = write_labtrust_run(tmp_path / "logs" / "labtrust", seed=7, incident=False)
    assert truth["healthy"][0]["kind"] == "repairs_succeed"  # repairs pass on attempt 2
    mine = [f for f in scan(tmp_path, tmp_path / "logs") if f["detector"] in MINE]
    assert not [f for f in mine if f["severity"] in SERIOUS]
    assert not of(mine, "rate_spike") and not of(mine, "repair_loop")


# --- borderline bproxy cases, written line by line --------------------------------------------

T0 = 1_781_820_000_000


class BproxyLog:
    """A few callers of one daemon, written as the daemon logs them."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.lines: list[tuple[int, int, dict]] = []

    def request(self, t: int, owner: str, action: str, session: str, error: str | None = None,
                pacing: int = 0) -> int:
        rid = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        base = {"level": 30, "pid": 4242, "hostname": "h", "id": rid}
        self.add(t, base | {"action": action, "session": session, "destructive": False,
                            "event": "received", "ownerHash": owner})
        now = t
        if pacing:
            now += pacing
            self.add(now, base | {"event": "pacing_wait", "delay_ms": pacing})
        now += self.rng.randint(40, 900)
        if error:
            delay = self.rng.randint(500, 2000)
            now += delay
            self.add(now, base | {"event": "error_delay", "delay_ms": delay})
        response = {"event": "response", "ok": error is None, "elapsed_ms": now - t}
        if error:
            response["error_code"] = error
        self.add(now, base | response | {"ownerHash": owner})
        return now

    def add(self, t: int, record: dict) -> None:
        self.lines.append((t, len(self.lines), {"level": 30, "time": t} | record))

    def browse(self, owner: str, session: str, start: int, end: int, gap_s: tuple) -> None:
        t = start
        while t < end:
            action = self.rng.choice(("click", "scroll", "snapshot", "navigate"))
            pacing = self.rng.randint(900, 1600) if self.rng.random() < 0.3 else 0
            t = self.request(t, owner, action, session, pacing=pacing)
            t += int(self.rng.uniform(*gap_s) * 1000)

    def write(self, path: Path) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        out = path / "2026-06-18.log"
        rows = sorted(self.lines, key=lambda r: (r[0], r[1]))
        out.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for _, _, r in rows))
        return out


def background(log: BproxyLog) -> None:
    log.browse("a1b2c3d4", "qqqqq2", T0, T0 + 60 * 60_000, (6, 45))
    log.browse("e5f6a7b8", "rrrrr3", T0 + 90_000, T0 + 60 * 60_000, (6, 45))


@pytest.fixture(scope="module")
def borderline(tmp_path_factory) -> list[dict]:
    """Two healthy callers around two borderline ones: a person who picks up the pace for a
    quarter of an hour (a rate change, no loop), and a caller retrying through an outage,
    waiting 1.3× longer each time, then going back to work."""
    root = tmp_path_factory.mktemp("borderline")
    log = BproxyLog(seed=3)
    background(log)
    log.browse("0badcafe", "busyss", T0, T0 + 40 * 60_000, (10, 40))
    log.browse("0badcafe", "busyss", T0 + 40 * 60_000, T0 + 55 * 60_000, (0.3, 1.5))
    log.browse("5eed5eed", "pollss", T0, T0 + 30 * 60_000, (8, 40))
    t, wait = T0 + 31 * 60_000, 200.0
    for _ in range(45):
        t = log.request(t, "5eed5eed", "snapshot", "pollss", error="NO_EXTENSION")
        t += int(wait)
        wait *= 1.3
    log.browse("5eed5eed", "pollss", t, T0 + 60 * 60_000, (8, 40))
    return scan(root, log.write(root / "logs").parent)


def test_busy_but_healthy_session_is_not_serious(borderline):
    mine = [f for f in borderline if f["detector"] in MINE]
    assert not [f for f in mine if f["severity"] in SERIOUS]
    spikes = [f for f in of(mine, "rate_spike") if "busyss" in f["sessions"]]
    assert spikes, "the change of pace is a rate spike, reported as what it is"
    assert not spikes[0]["details"]["machine_rate"] and spikes[0]["severity"] != "high"


def test_polling_with_exponential_backoff_is_not_serious(borderline):
    polling = [f for f in borderline if f["detector"] in MINE and "pollss" in f["sessions"]]
    assert not [f for f in polling if f["severity"] in SERIOUS]
    assert not of(polling, "rate_spike")


# --- unusual_actor -----------------------------------------------------------------------------


def test_unusual_actor_is_deterministic_and_capped_at_medium(bproxy):
    truth, findings, store_path = bproxy
    unusual = of(findings, "unusual_actor")
    assert unusual, "the storm window is unlike every other window of the log"
    assert all(f["severity"] in ("low", "medium") for f in unusual)
    storm = [f for f in unusual if f["actors"] == [truth["incidents"][0]["actor"]]
             and f["start"] >= "2026-06-18T23:42"]
    assert storm and storm[0]["severity"] == "medium"
    assert "rate_per_min" in storm[0]["details"]["unusual_features"]
    assert storm[0]["details"]["corroborated_by"]
    runs = [DETECTORS["unusual_actor"].run(Store(store_path).connect(),
                                           settings()["unusual_actor"]) for _ in range(2)]
    same = [[(f.key, f.severity, f.title, f.summary, f.start, f.end, f.details["score"],
              f.details["z_scores"]) for f in r] for r in runs]
    assert same[0] == same[1]
    assert sorted(f.title for f in runs[0]) == sorted(f["title"] for f in unusual)


def test_unusual_actor_windows_do_not_depend_on_the_batches_read(bproxy, monkeypatch):
    """The events are read a batch at a time; an actor's window cut by a batch boundary (every
    few events here) has the same features as one read whole."""
    from loophound.detect import unusual_actor

    _, _, store_path = bproxy
    p = settings()["unusual_actor"]
    whole = unusual_actor.windows(Store(store_path).connect(), p)
    assert len(whole) >= p.min_windows
    for rows in (7, 1000):
        monkeypatch.setattr(unusual_actor, "BATCH_ROWS", rows)
        assert unusual_actor.windows(Store(store_path).connect(), p) == whole


def test_unusual_actor_needs_enough_windows(tmp_path):
    log = BproxyLog(seed=5)
    log.browse("a1b2c3d4", "qqqqq2", T0, T0 + 5 * 60_000, (5, 20))
    for i in range(40):  # a burst, but there is no "rest of the log" to compare it with
        log.request(T0 + 6 * 60_000 + i * 100, "e5f6a7b8", "scroll", "rrrrr3",
                    error="SESSION_NOT_FOUND")
    store = Store(tmp_path / "store")
    ingest([str(log.write(tmp_path / "logs"))], store)
    con = store.connect()
    assert DETECTORS["unusual_actor"].run(con, settings()["unusual_actor"]) == []


def test_unusual_actor_fits_no_forest_when_no_window_is_loop_like(tmp_path, monkeypatch):
    from loophound.detect import isolation

    def refuse(*args, **kwargs):
        raise AssertionError("no window is loop-like: the forest could not flag any")

    monkeypatch.setattr(isolation, "anomaly_scores", refuse)
    log = BproxyLog(seed=11)
    for owner, session in (("a1b2c3d4", "qqqqq2"), ("e5f6a7b8", "rrrrr3"), ("c9d0e1f2", "sssss4")):
        log.browse(owner, session, T0, T0 + 3 * 3600_000, (20, 40))  # steady, human-paced
    store = Store(tmp_path / "store")
    ingest([str(log.write(tmp_path / "logs"))], store)
    con = store.connect()
    p = settings()["unusual_actor"]
    from loophound.detect.unusual_actor import windows

    wins = windows(con, p)
    assert len(wins) >= p.min_windows  # enough to score: the forest is skipped for another reason
    assert DETECTORS["unusual_actor"].run(con, p) == []


def test_detectors_whose_kinds_are_absent_are_not_run(bproxy, monkeypatch):
    import dataclasses

    from loophound import detect

    ran = []

    def record(name):
        def run(con, p):
            ran.append(name)
            return []
        return run

    for name in DETECTORS:
        monkeypatch.setitem(detect.DETECTORS, name,
                            dataclasses.replace(DETECTORS[name], run=record(name)))
    _, _, store_path = bproxy
    detect.run_detectors(Store(store_path).connect(), settings())
    # a bproxy log has requests, not messages, hooks or LabTrust repair attempts (in any
    # order: those that prepared something run last); runaway_subagents reads requests (an
    # agent span under another is one) and finds none that invokes an agent
    assert sorted(ran) == sorted(["repeated_error", "rate_spike", "unusual_actor",
                                  "repeated_action", "alternating_action", "runaway_subagents"])


# --- repair_loop -------------------------------------------------------------------------------


def test_repair_loop_finds_the_frozen_planner(labtrust):
    truth, findings = labtrust
    loop = next(i for i in truth["incidents"] if i["kind"] == "repair_loop")
    found = of(findings, "repair_loop")
    assert len(found) == 1
    f = found[0]
    d = f["details"]
    assert f["severity"] == "critical"
    assert (d["first_step"], d["last_step"], d["steps"]) == (
        loop["first_step"], loop["last_step"], loop["steps"])
    assert f["events"] == loop["attempt_lines"] == d["attempts"]
    assert d["max_attempts"] == loop["attempts_per_step"]
    assert d["proposal_hashes"] == [loop["proposal_hash"]]
    assert d["identical_hash_steps"] == loop["steps"] and d["validation_failed_throughout"]
    assert d["tokens_growing"]
    assert close(d["tokens_in"], loop["tokens_in"])
    assert close(d["cost_usd_stated"], loop["cost_usd"])
    assert close(f["cost_usd"], loop["cost_usd"])  # attribution prices the claimed llm_calls
    assert f["actors"] == ["anthropic_live_coord"] and d["models"] == [loop["model"]]
    lines = {e["line"] for e in f["evidence"]}
    assert {loop["first_line"], loop["last_line"]} <= lines
    # the stock-out repeats belong to repeated_error, not here
    assert all(f2["detector"] != "repair_loop" or f2 is f for f2 in findings)


def test_repair_loop_keeps_two_runs_episodes_apart(tmp_path):
    """LabTrust numbers episodes from 1 in each run: the frozen planner's run and a healthy run
    of the same seed beside it share `episode-1`, step ids and proposal ids. The loop is the
    first run's alone, with its own proposal hash and its own results.json, and the same
    finding on every scan (merged, a step's hash came from whichever run's row came first)."""
    truth = write_labtrust_run(tmp_path / "logs" / "run-a", seed=7, incident=True)
    write_labtrust_run(tmp_path / "logs" / "run-b", seed=7, incident=False)
    loop = next(i for i in truth["incidents"] if i["kind"] == "repair_loop")
    answers = []
    for n in range(3):
        store = Store(tmp_path / f"store{n}")
        ingest([str(tmp_path / "logs")], store)
        found = of(scan_store(store).document["findings"], "repair_loop")
        assert len(found) == 1
        f = found[0]
        assert f["details"]["proposal_hashes"] == [loop["proposal_hash"]]
        assert f["events"] == loop["attempt_lines"]
        assert {e["file"] for e in f["evidence"]} == {str(tmp_path / "logs/run-a/episodes.jsonl")}
        answers.append((f["id"], f["details"], f["events"], f["cost_usd"]))
    assert answers[0] == answers[1] == answers[2]

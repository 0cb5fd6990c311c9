"""What the tests of the agent-transcript formats (claude-code, codex) share: the sample
section and its answer key, a store to read, a scan's findings, a file written line by line."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from loophound.cli import app
from loophound.ingest import ingest
from loophound.store import Store

ROOT = Path(__file__).resolve().parents[1]
SERIOUS = {"high", "critical"}


def section(name: str) -> tuple[dict, Path]:
    """The answer key of a sample section and the folder it describes."""
    key = json.loads((ROOT / "sample_logs" / "EXPECTED.json").read_text())["sections"][name]
    return key, ROOT / "sample_logs" / key["dir"]


def ingested(paths: list[Path], root: Path) -> Store:
    store = Store(root / "st")
    report = ingest([str(p) for p in paths], store)
    assert {f.status for f in report.files} == {"new"}
    return store


def rows(store: Store, sql: str, params=None) -> list[tuple]:
    return store.connect().execute(sql, params or []).fetchall()


def scan(path: Path, tmp: Path) -> tuple[dict, int]:
    """`loophound scan PATH --json`: the findings document and the exit status."""
    out = tmp / "findings.json"
    res = CliRunner().invoke(app, ["scan", str(path), "--store", str(tmp / "scan"), "--json",
                                   str(out)])
    return json.loads(out.read_text()), res.exit_code


def write(path: Path, records: list[dict], mode: str = "w") -> Path:
    """Records as compact JSON lines (written anew, or appended with mode `a`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open(mode) as fh:
        fh.write("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records))
    return path

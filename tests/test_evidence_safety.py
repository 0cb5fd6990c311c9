"""Evidence is never written over: every option that names a file or folder to write refuses a
log the store was read from (or the command reads), the store's catalog, one of its Parquet
files, or a store folder, with exit status 2 and the files exactly as they were."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loophound.cli import app
from loophound.errors import OutputRefused
from loophound.outputs import atomic_file, check_output, write_atomically
from loophound.store import Store

ROOT = Path(__file__).resolve().parents[1]
HOOKS = ROOT / "sample_logs" / "hooks" / "hooks.jsonl"


def run(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args])


def digests(*roots: Path) -> dict[str, str]:
    """Every file under `roots` (or each root, a file) with its SHA-256."""
    files = [f for r in roots for f in ([r] if r.is_file() else sorted(r.rglob("*")))
             if f.is_file()]
    return {str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


@pytest.fixture(scope="module")
def evidence(tmp_path_factory) -> tuple[Path, Path]:
    """A log and a scanned store of it (a saved run, so `report` reads it as it is)."""
    tmp = tmp_path_factory.mktemp("evidence")
    log = tmp / "hooks.jsonl"
    shutil.copy(HOOKS, log)
    done = run("scan", log, "--store", tmp / "st", "--fail-on", "never")
    assert done.exit_code == 0, done.output
    return log, tmp / "st"


# each writing option of each command: its arguments, with {T} the path to write, {S} the store
# and {L} the log
WRITERS = {
    "report --out": ["report", "--store", "{S}", "--out", "{T}"],
    "investigate --out (logs)": ["investigate", "{L}", "--out", "{T}"],
    "investigate --out (store)": ["investigate", "--store", "{S}", "--out", "{T}"],
    "scan --json": ["scan", "--store", "{S}", "--json", "{T}"],
    "scan PATH --json": ["scan", "{L}", "--store", "{S}", "--json", "{T}"],
    "scan --findings-dir": ["scan", "--store", "{S}", "--findings-dir", "{T}"],
    "scan --incremental --alerts": ["scan", "--store", "{S}", "--incremental", "--alerts", "{T}"],
    "scan --incremental --json": ["scan", "--store", "{S}", "--incremental", "--json", "{T}"],
    "guards --json": ["guards", "--store", "{S}", "--preset", "had", "--json", "{T}"],
    "guards --report": ["guards", "--store", "{S}", "--preset", "had", "--report", "{T}"],
    "sql --out": ["sql", "SELECT 1 AS x", "--store", "{S}", "--format", "csv", "--out", "{T}"],
    "query --out": ["query", "top_errors", "--store", "{S}", "--format", "csv", "--out", "{T}"],
    "watch --alerts": ["watch", "{L}", "--store", "{S}", "--max-runs", "1", "--alerts", "{T}"],
    "synth samples": ["synth", "samples", "{T}"],
    "synth twins": ["synth", "twins", "{T}"],
    "synth full-incident": ["synth", "full-incident", "{T}"],
}


def _targets(log: Path, store: Path) -> dict[str, Path]:
    return {"the log": log, "the catalog": store / "catalog.duckdb",
            "an events file": next((store / "events").glob("*.parquet")),
            "the store folder": store, "a folder in the store": store / "events"}


TARGET_NAMES = ("the log", "the catalog", "an events file", "the store folder",
                "a folder in the store")


@pytest.mark.parametrize("target", TARGET_NAMES)
@pytest.mark.parametrize("writer", WRITERS)
def test_no_writing_option_writes_over_evidence(evidence, writer, target):
    log, store = evidence
    if writer.startswith("synth") and target == "the log":
        pytest.skip("synth reads no logs and names no store: a log is any file to it")
    path = _targets(log, store)[target]
    args = [a.replace("{T}", str(path)).replace("{S}", str(store)).replace("{L}", str(log))
            for a in WRITERS[writer]]
    before = digests(log, store)
    done = run(*args)
    assert done.exit_code == 2, done.output
    assert "never writes over evidence" in done.output
    assert str(path.name) in done.output
    after = digests(log, store)
    after.pop(str(store / "clean"), None), before.pop(str(store / "clean"), None)
    assert after == before


def test_another_stores_files_are_refused_too(evidence, tmp_path):
    """A report aimed into a store other than the one read is refused all the same."""
    _, store = evidence
    log = tmp_path / "other.jsonl"
    shutil.copy(HOOKS, log)
    assert run("ingest", log, "--store", tmp_path / "other").exit_code == 0
    with pytest.raises(OutputRefused, match="inside the store folder"):
        check_output(tmp_path / "other" / "catalog.duckdb", "--out", Store(store))


def test_a_hard_link_to_a_log_is_the_log(evidence, tmp_path):
    log, store = evidence
    link = tmp_path / "innocent.html"
    link.hardlink_to(log)
    with pytest.raises(OutputRefused, match="a log the store"):
        check_output(link, "--out", Store(store))


def test_a_file_in_a_folder_of_logs_read_is_refused(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    shutil.copy(HOOKS, logs / "a.jsonl")
    with pytest.raises(OutputRefused, match="folder of logs"):
        check_output(logs / "a.jsonl", "--out", None, [str(logs)])
    with pytest.raises(OutputRefused, match="a log this command reads"):
        check_output(logs / "a.jsonl", "--out", None, [str(logs / "*.jsonl")])
    assert check_output(logs / "new.html", "--out", None, [str(logs)]) == logs / "new.html"


def test_an_ordinary_output_is_written_whole_and_in_place(evidence, tmp_path):
    _, store = evidence
    out = tmp_path / "reports" / "f.json"
    done = run("scan", "--store", store, "--json", out, "--fail-on", "never")
    assert done.exit_code == 0, done.output
    assert out.read_text().startswith("{")
    assert [p.name for p in out.parent.iterdir()] == ["f.json"]  # no temporary file left


def test_a_write_that_fails_leaves_the_old_file(tmp_path):
    target = tmp_path / "out.csv"
    target.write_text("old\n")
    with pytest.raises(RuntimeError), atomic_file(target) as fh:
        fh.write("half of the new")
        raise RuntimeError("disk full, say")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.csv"]
    assert write_atomically(target, "new\n") == 4 and target.read_text() == "new\n"


# -- the report quotes only what still hashes to what the store recorded ----------------------

BPROXY = ROOT / "sample_logs" / "bproxy" / "2026-06-18.log"


def _blanked(data: bytes, line: int, fill: bytes = b"S") -> bytes:
    """`data` with line `line` (1-based) overwritten by `fill`, keeping its length and newline."""
    lines = data.splitlines(keepends=True)
    lines[line - 1] = fill * (len(lines[line - 1]) - 1) + b"\n"
    return b"".join(lines)


@pytest.fixture()
def scanned_log(tmp_path):
    from loophound.ingest import ingest
    from loophound.scan import scan_store

    log = tmp_path / "bproxy.log"
    shutil.copy(BPROXY, log)
    store = Store(tmp_path / "st")
    ingest([str(log)], store)
    last = log.read_bytes().count(b"\n")
    return log, store, scan_store(store).con, last


def test_a_same_size_replacement_with_the_same_first_lines_is_not_quoted(scanned_log):
    from loophound.report.evidence import quote

    log, _, con, last = scanned_log
    key = (str(log), last - 1)  # far past the head hashed to recognise the file
    original = log.read_bytes()
    assert quote(con, [key])[key].text == original.splitlines()[last - 2].decode()
    log.write_bytes(_blanked(original, last - 1))
    got = quote(con, [key])[key]
    assert got.text is None and "changed since it was read" in got.problem


def test_a_shared_copy_naming_another_file_quotes_none_of_it(scanned_log, tmp_path):
    """A copy of a store whose `inputs` name a file of the reader's (same size, its lines
    where the log's were) and record no head hash: nothing of that file reaches the report."""
    import duckdb

    from loophound.report.evidence import quote
    from loophound.scan import scan_store

    log, store, _, last = scanned_log
    secret = tmp_path / "home" / "credentials"
    secret.parent.mkdir()
    secret.write_bytes(_blanked(log.read_bytes(), last - 1, b"K"))
    copy = tmp_path / "shared"
    shutil.copytree(store.root, copy)
    with duckdb.connect(str(copy / "catalog.duckdb")) as cat:
        cat.execute("UPDATE inputs SET path = ?, display_path = ?, head_sha256 = NULL, "
                    "head_len = 0", [str(secret), str(secret)])
    con = scan_store(Store(copy), save=False).con
    key = (str(log), last - 1)
    got = quote(con, [key])[key]
    assert got.text is None and "changed since it was read" in got.problem
    everything = quote(con, [(str(log), n) for n in range(1, last + 1)])
    assert not any(e.text and "KKKK" in e.text for e in everything.values())


STORE_WRITERS = {
    "ingest": ["ingest", "{L}", "--store", "{T}"],
    "scan": ["scan", "{L}", "--store", "{T}", "--fail-on", "never"],
    "investigate": ["investigate", "{L}", "--store", "{T}", "--out", "{O}"],
    "guards": ["guards", "{L}", "--store", "{T}", "--preset", "had"],
    "watch": ["watch", "{L}", "--store", "{T}", "--max-runs", "1"],
}


@pytest.mark.parametrize("target", ["the log", "an events file", "a folder in the store"])
@pytest.mark.parametrize("writer", STORE_WRITERS)
def test_a_store_is_never_made_over_evidence(evidence, tmp_path, writer, target):
    log, store = evidence
    path = _targets(log, store)[target]
    if target == "a folder in the store":
        path = path / "inner"
    args = [a.replace("{T}", str(path)).replace("{L}", str(log))
            .replace("{O}", str(tmp_path / "r.html")) for a in STORE_WRITERS[writer]]
    before = digests(log, store)
    done = run(*args)
    assert done.exit_code == 2, done.output
    assert done.output.startswith("error: --store")
    assert not (store / "events" / "inner").exists()
    after = digests(log, store)
    after.pop(str(store / "clean"), None), before.pop(str(store / "clean"), None)
    assert after == before

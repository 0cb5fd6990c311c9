"""Evidence that cannot be lost: a copy of a store's Parquet folders is read, never changed;
a report reads the saved run, takes no lock and writes nothing; the library API gives the
same answers as the CLI."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import loophound
from loophound.cli import app

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_logs"
WHEN = "2026-01-01T00:00:00Z"


def hashes(folder: Path) -> dict[str, str]:
    """Every file below `folder` (and only files) with its SHA-256."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def invoke(*args: str):
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result


@pytest.fixture(scope="module")
def original(tmp_path_factory) -> tuple[Path, Path]:
    """A store of the sample logs, scanned, and the report `investigate` made of it."""
    tmp = tmp_path_factory.mktemp("evidence")
    store, html = tmp / "store", tmp / "investigate.html"
    done = invoke("investigate", SAMPLES, "--store", store, "--out", html, "--generated-at", WHEN)
    assert done.exit_code == 0, done.output
    return store, html


def test_a_copy_of_the_parquet_folders_is_read_and_never_changed(original, tmp_path):
    store, investigated = original
    copy = tmp_path / "copy"
    copy.mkdir()
    for sub in ("events", "quarantine", "findings"):
        shutil.copytree(store / sub, copy / sub)
    before = hashes(copy)
    assert not (copy / "catalog.duckdb").exists() and loophound.open(copy).store.is_bare

    ours, theirs = tmp_path / "original.json", tmp_path / "copy.json"
    assert invoke("scan", "--store", store, "--json", ours, "--fail-on", "never").exit_code == 0
    scanned = invoke("scan", "--store", copy, "--json", theirs, "--fail-on", "never",
                     "--findings-dir", tmp_path / "runs")
    assert scanned.exit_code == 0, scanned.output
    said = " ".join(scanned.stderr.split())  # a long path moves the words to a new line
    assert "read-only evidence" in said and str(tmp_path / "runs") in said
    assert json.loads(ours.read_text()) == json.loads(theirs.read_text())  # inputs too
    assert (tmp_path / "runs" / "run-000001.json").exists()

    report = invoke("report", "--store", copy, "--out", tmp_path / "r.html", "--generated-at", WHEN)
    assert report.exit_code == 0, report.output
    assert (tmp_path / "r.html").read_bytes() == investigated.read_bytes()
    from_run = invoke("report", "--store", copy, "--findings-dir", tmp_path / "runs",
                      "--out", tmp_path / "r2.html", "--generated-at", WHEN)
    assert from_run.exit_code == 0 and "saved run 1" in from_run.stderr
    assert (tmp_path / "r2.html").read_bytes() == investigated.read_bytes()

    again = invoke("investigate", "--store", copy, "--out", tmp_path / "i.html",
                   "--generated-at", WHEN)
    assert again.exit_code == 0, again.output
    assert (tmp_path / "i.html").read_bytes() == investigated.read_bytes()

    counted = invoke("sql", "--store", copy, "--format", "csv",
                     "SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM findings), "
                     "(SELECT count(*) FROM inputs)")
    assert counted.exit_code == 0
    doc = json.loads(ours.read_text())
    assert counted.stdout.splitlines()[-1] == (f"{doc['totals']['lines']},{len(doc['findings'])},"
                                              f"{len(doc['inputs'])}")

    verified = invoke("verify", "--store", copy)
    assert verified.exit_code == 0 and "readable" in verified.stdout
    assert "no catalog" in verified.stderr

    assert hashes(copy) == before  # not a byte changed, nothing added, nothing deleted


def test_a_copy_refuses_ingest_and_says_why(original, tmp_path):
    store, _ = original
    copy = tmp_path / "copy"
    shutil.copytree(store / "events", copy / "events")
    before = hashes(copy)
    refused = invoke("ingest", SAMPLES / "hooks", "--store", copy)
    assert refused.exit_code == 2 and "Traceback" not in refused.output
    assert "no catalog" in refused.stderr and "--store NEW" in refused.stderr
    assert hashes(copy) == before


def test_report_takes_no_lock_and_writes_nothing_in_the_store(original, tmp_path):
    """Another process holds the store's write lock (a long ingest): the report is still made
    at once, from the saved run, and no file of the store changes."""
    store, investigated = original
    before = hashes(store)
    fd = os.open(store / "lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as a writer in another process would
    try:
        done = subprocess.run(
            [sys.executable, "-c", "from loophound.cli import run; run()", "report",
             "--store", str(store), "--out", str(tmp_path / "r.html"), "--generated-at", WHEN],
            capture_output=True, text=True, timeout=120)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    assert done.returncode == 0, done.stderr
    assert "saved run" in done.stderr
    assert (tmp_path / "r.html").read_bytes() == investigated.read_bytes()
    assert hashes(store) == before


def test_report_with_other_settings_scans_in_memory_and_still_writes_nothing(original, tmp_path):
    store, _ = original
    before = hashes(store)
    done = invoke("report", "--store", store, "--out", tmp_path / "r.html",
                  "--set", "repeated_error.min_count=100000", "--generated-at", WHEN)
    assert done.exit_code == 0 and "scan in memory" in done.stderr
    assert hashes(store) == before


def test_the_api_reads_what_the_cli_wrote(original, tmp_path):
    import polars as pl

    store, _ = original
    ev = loophound.open(store)
    run = ev.last_run()
    assert run is not None and run.full
    n_events = ev.events().select(pl.len()).collect().item()
    assert n_events == run.document["totals"]["lines"]
    errors = (ev.events().filter(pl.col("error") == "SESSION_NOT_FOUND")
              .select(pl.len()).collect().item())
    assert errors == ev.sql("SELECT count(*) FROM events WHERE error = $e",
                            {"e": "SESSION_NOT_FOUND"}).fetchall()[0][0] > 0
    assert sorted(ev.findings().collect()["id"].to_list()) == sorted(
        f["id"] for f in run.document["findings"])
    assert ev.quarantine().collect().height >= 0
    with pytest.raises(loophound.errors.StoreMissing):
        loophound.open(tmp_path / "nowhere")
    with pytest.raises(loophound.errors.ReadOnlyViolation):
        ev.sql("COPY events TO 'x.csv'")

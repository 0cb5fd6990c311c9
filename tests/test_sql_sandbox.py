"""The store's files against tampering (issue "Hostile input and faults", the security class).

Every committed file's SHA-256 is recorded, so `verify` notices one that changed; and a
committed file is read-only on disk.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from loophound.cli import app

ROOT = Path(__file__).resolve().parents[1]
HOOKS = ROOT / "sample_logs" / "hooks" / "hooks.jsonl"

runner = CliRunner()


def run(*args, input=None, env=None):
    return runner.invoke(app, [str(a) for a in args], input=input, env=env)


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != "lock"}


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """A store of the hooks sample, scanned: events, findings and a saved run."""
    root = tmp_path_factory.mktemp("sandbox") / "store"
    scanned = run("scan", HOOKS, "--store", root, "--fail-on", "never")
    assert scanned.exit_code == 0, scanned.output
    return root


def events_file(root: Path) -> Path:
    return sorted((root / "events").glob("*.parquet"))[0]


# --- if a write ever got past the check ----------------------------------------------------------


def test_committed_files_are_read_only_on_disk(store):
    committed = [p for p in store.rglob("*") if p.parent.name in ("events", "quarantine",
                                                                    "findings")]
    assert committed
    for p in committed:
        assert p.stat().st_mode & 0o222 == 0, p


# --- verify -------------------------------------------------------------------------------------


def test_verify_names_a_committed_events_file_that_changed(store, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(store, copy)
    assert run("verify", "--store", copy).exit_code == 0
    target = events_file(copy)
    target.chmod(0o644)
    pq.write_table(pa.table({"x": [1]}), target)  # another Parquet file in its place
    result = run("verify", "--store", copy)
    assert result.exit_code == 1
    lines = [line for line in result.stdout.splitlines() if "changed" in line]
    assert len(lines) == 1 and target.name in lines[0]


def test_verify_names_a_saved_runs_file_that_changed_or_went(store, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(store, copy)
    findings = next((copy / "findings").glob("findings-*.parquet"))
    findings.chmod(0o644)
    findings.write_bytes(findings.read_bytes()[:-1] + b"!")
    next((copy / "findings").glob("run-*.json")).unlink()
    result = run("verify", "--store", copy)
    assert result.exit_code == 1
    assert any("changed" in line and findings.name in line for line in result.stdout.splitlines())
    assert any("gone" in line and "run-" in line for line in result.stdout.splitlines())


def test_files_of_a_store_from_before_hashes_say_so_and_do_not_fail(store, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(store, copy)
    with duckdb.connect(str(copy / "catalog.duckdb")) as cat:
        cat.execute("ALTER TABLE batches DROP COLUMN events_sha256")
        cat.execute("ALTER TABLE batches DROP COLUMN quarantine_sha256")
        cat.execute("DROP TABLE sealed_files")
    result = run("verify", "--store", copy)
    assert result.exit_code == 0, result.output
    assert "no hash recorded" in result.stdout and "changed" not in result.stdout
    from loophound import api

    verdicts = {Path(v.path).name: v for v in api.verify(copy)}
    ev = verdicts[events_file(copy).name]
    assert ev.verdict == "no hash recorded" and ev.ok
    assert ev.sha256 == hashlib.sha256(events_file(copy).read_bytes()).hexdigest()


def test_the_catalog_records_each_committed_files_hash(store):
    with duckdb.connect(str(store / "catalog.duckdb"), read_only=True) as cat:
        rows = cat.execute("SELECT events_file, events_sha256 FROM batches").fetchall()
        sealed = dict(cat.execute("SELECT file, sha256 FROM sealed_files").fetchall())
    for rel, sha in rows:
        assert sha == hashlib.sha256((store / rel).read_bytes()).hexdigest()
    assert any(f.startswith("findings/findings-") for f in sealed)
    for rel, sha in sealed.items():
        assert sha == hashlib.sha256((store / rel).read_bytes()).hexdigest()

"""Changing how a file is read re-reads it: the catalog keeps the format and mapping each
input was read with; another one replaces that input's events, nothing counted twice, and
a later plain ingest reads new lines the way the last mapping said."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from loophound.cli import app
from loophound.store import Store

ROOT = Path(__file__).resolve().parents[1]


def rows(store: Path, sql: str) -> list[tuple]:
    return Store(store).connect().execute(sql).fetchall()


def write(log: Path, start: int, n: int) -> None:
    with log.open("a") as fh:
        fh.writelines(json.dumps({"timestamp": 1750000000 + i, "who": {"name": f"agent{i % 2}"},
                                  "conv": "c1", "err": "E" if i % 3 else None}) + "\n"
                      for i in range(start, start + n))


def test_a_new_mapping_reads_the_file_again_in_place(tmp_path):
    log, store = tmp_path / "app.jsonl", tmp_path / "st"
    write(log, 0, 30)
    mapping = tmp_path / "m.toml"
    mapping.write_text('[fields]\ntime = "timestamp"\nactor = "who.name"\nsession = "conv"\n'
                       'error = "err"\n')
    runner = CliRunner()
    first = runner.invoke(app, ["ingest", str(log), "--store", str(store)])
    assert first.exit_code == 0
    assert rows(store, "SELECT count(*), count(actor) FROM events") == [(30, 0)]
    again = runner.invoke(app, ["ingest", str(log), "--store", str(store), "--mapping",
                                str(mapping)])
    assert again.exit_code == 0, again.output
    assert "replaced" in again.output
    assert rows(store, "SELECT count(*), count(actor), count(DISTINCT event_id) FROM events") \
        == [(30, 30, 30)]  # the same lines, now understood, nothing twice
    assert runner.invoke(app, ["ingest", str(log), "--store", str(store)]).exit_code == 0
    assert rows(store, "SELECT count(*) FROM events") == [(30,)]  # plain ingest: unchanged
    write(log, 30, 10)
    runner.invoke(app, ["ingest", str(log), "--store", str(store)])
    assert rows(store, "SELECT count(*), count(actor) FROM events") == [(40, 40)]  # as mapped
    assert runner.invoke(app, ["verify", "--store", str(store)]).exit_code == 0


def test_another_format_reads_the_file_again_in_place(tmp_path):
    store = tmp_path / "st"
    hooks = ROOT / "sample_logs" / "hooks" / "hooks.jsonl"
    runner = CliRunner()
    runner.invoke(app, ["ingest", str(hooks), "--store", str(store), "--format", "generic"])
    assert rows(store, "SELECT DISTINCT format FROM events") == [("generic",)]
    done = runner.invoke(app, ["ingest", str(hooks), "--store", str(store), "--format", "hooks"])
    assert done.exit_code == 0, done.output
    n = hooks.read_bytes().count(b"\n")
    assert rows(store, "SELECT format, count(*) FROM events GROUP BY 1") == [("hooks", n)]
    assert rows(store, "SELECT count(*) FROM inputs") == [(1,)]

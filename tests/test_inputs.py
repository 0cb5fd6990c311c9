"""What is not a log is refused (exit 2, saying what loophound reads), never scanned into an
empty report; the store is said missing the same way everywhere; a report asked for in a
folder goes inside it; ingest hints at the quarantine only when something was quarantined."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from loophound.cli import app
from loophound.errors import no_store
from loophound.synth import write_bproxy_log

NOT_LOGS = {
    "empty": None,
    "table.csv": b"user,action,ok\nann,scroll,1\nbob,click,0\n",
    "app.log": b"Dec  6 05:00:00 host app[1]: started\nDec  6 05:00:01 host app[1]: error foo\n",
    "shot.png": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10",
}


@pytest.mark.parametrize("name", NOT_LOGS)
def test_inputs_that_are_not_logs_are_refused_with_what_loophound_reads(tmp_path, name):
    target = tmp_path / name
    if NOT_LOGS[name] is None:
        target.mkdir()
    else:
        target.write_bytes(NOT_LOGS[name])
    for args in (["investigate", str(target), "--out", str(tmp_path / "r.html")],
                 ["scan", str(target), "--store", str(tmp_path / "st")],
                 ["ingest", str(target), "--store", str(tmp_path / "st2")]):
        done = CliRunner().invoke(app, args)
        assert done.exit_code == 2, (args, done.output)
        assert "loophound reads" in done.stderr and "loophound formats" in done.stderr
        assert not (tmp_path / "r.html").exists()
    said = done.stderr
    if name == "table.csv":
        assert "a table (CSV or TSV)" in said
    elif name == "shot.png":
        assert "a binary file, not text" in said
    elif name == "app.log":
        assert "plain text" in said


def test_no_store_is_said_the_same_way_by_every_command(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    said = str(no_store(".loophound"))
    for args in (["scan"], ["report"], ["sql", "SELECT 1"], ["verify"]):
        done = runner.invoke(app, args)
        assert done.exit_code == 2, (args, done.output)
        assert said in " ".join(done.stderr.split()), (args, done.stderr)
    assert list(tmp_path.iterdir()) == []  # scan without a store did not make one


def test_a_report_asked_for_in_a_folder_is_written_inside_it(tmp_path):
    write_bproxy_log(tmp_path / "logs", seed=5, storm_requests=200)
    (tmp_path / "out").mkdir()
    done = CliRunner().invoke(app, ["investigate", str(tmp_path / "logs"), "--out",
                                    str(tmp_path / "out")])
    assert done.exit_code == 0, done.output
    assert (tmp_path / "out" / "incident.html").stat().st_size > 0
    assert "FROM quarantine" not in done.stdout  # nothing was quarantined: no hint about it

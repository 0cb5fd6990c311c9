"""Progress of long commands: each phase named on a terminal, nothing when standard error is
not a terminal (cron, a pipe) or with --quiet."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from typer.testing import CliRunner

from loophound.cli import app
from loophound.commands import shell
from loophound.synth import write_bproxy_log


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("logs")
    write_bproxy_log(d, seed=5, storm_requests=300)
    return d


def _terminal(monkeypatch) -> io.StringIO:
    """Standard error as a terminal: what a person at the keyboard sees."""
    buf = io.StringIO()
    monkeypatch.setattr(shell, "err", Console(file=buf, force_terminal=True, width=120))
    return buf


PHASES = ("reading the logs", "detecting loops and attributing cost")


def test_scan_and_investigate_name_their_phases_on_a_terminal(monkeypatch, tmp_path, log_dir):
    buf = _terminal(monkeypatch)
    done = CliRunner().invoke(app, ["scan", str(log_dir), "--store", str(tmp_path / "st")])
    assert done.exit_code == 1, done.output
    shown = buf.getvalue()
    assert all(f"{p}: " in shown for p in PHASES), shown
    buf.truncate(0)
    done = CliRunner().invoke(app, ["investigate", str(log_dir), "--out", str(tmp_path / "r.html")])
    assert done.exit_code == 0, done.output
    assert all(f"{p}: " in buf.getvalue() for p in (*PHASES, "writing the report"))


def test_no_progress_with_quiet_or_without_a_terminal(monkeypatch, tmp_path, log_dir):
    plain = CliRunner().invoke(app, ["scan", str(log_dir), "--store", str(tmp_path / "a")])
    assert not any(p in plain.stderr for p in PHASES)
    buf = _terminal(monkeypatch)
    done = CliRunner().invoke(app, ["scan", str(log_dir), "--store", str(tmp_path / "b"),
                                    "--quiet"])
    assert done.exit_code == 1 and not any(p in buf.getvalue() for p in PHASES)
    assert done.stdout.startswith("findings: ")  # the result still is said

"""One error hierarchy at the command line: a user's mistake (or the machine's condition) is one
line and exit status 2, never a traceback; only a real bug says "internal error" (exit 3)."""

from __future__ import annotations

import errno
import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import loophound.ingest
from loophound import cli
from loophound.errors import StoreReadOnly, UserError

LOOPHOUND = [sys.executable, "-c", "from loophound.cli import run; run()"]


def log(tmp_path: Path) -> Path:
    path = tmp_path / "agent.jsonl"
    path.write_text("".join(json.dumps({"ts": 1767600000 + i, "from": "a", "to": "b"}) + "\n"
                            for i in range(3)))
    return path


def run_cli(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    """The console entry point in this process: (exit status, stdout + stderr)."""
    monkeypatch.setattr(sys, "argv", ["loophound", *args])
    monkeypatch.delenv("LOOPHOUND_DEBUG", raising=False)
    monkeypatch.setattr(gc, "freeze", lambda: None)  # run() freezes the heap for a quick exit
    with pytest.raises(SystemExit) as stop:
        cli.run()
    captured = capsys.readouterr()
    return stop.value.code, captured.out + captured.err


def one_user_error(code: int, output: str) -> str:
    assert code == 2, output
    assert "Traceback" not in output and "internal error" not in output, output
    line = output.strip()
    assert line.startswith("error: ") and "\n" not in line, output
    return line


def test_an_unknown_mapping_key_names_the_file_the_key_and_the_fix(tmp_path):
    mapping = tmp_path / "mine.toml"
    mapping.write_text('[fields]\nactr = "from"\ntarget = "to"\n')
    res = subprocess.run([*LOOPHOUND, "ingest", str(log(tmp_path)), "--store", str(tmp_path / "st"),
                          "--mapping", str(mapping)], capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if k != "LOOPHOUND_DEBUG"})
    line = one_user_error(res.returncode, res.stdout + res.stderr)
    assert str(mapping) in line and "'actr'" in line
    assert 'did you mean actor = "from"?' in line and "valid names: action, actor," in line
    assert not (tmp_path / "st").exists()  # checked before any ingest work


@pytest.mark.parametrize("text, said", [
    ("[fields\nactor = 1\n", "is not valid TOML"),
    ('[constants]\ntokens_in = "many"\n', "[constants]: tokens_in must be an integer, not 'many'"),
    ('[fields]\nactor = 7\n', "[fields]: actor must be a key name or dotted path"),
    ('[feilds]\nactor = "from"\n', "unknown section or key 'feilds' (did you mean [fields]?)"),
])
def test_a_bad_mapping_file_is_one_sentence(tmp_path, monkeypatch, capsys, text, said):
    mapping = tmp_path / "m.toml"
    mapping.write_text(text)
    code, output = run_cli(monkeypatch, capsys, "ingest", str(log(tmp_path)), "--store",
                           str(tmp_path / "st"), "--mapping", str(mapping))
    line = one_user_error(code, output)
    assert f"mapping file {mapping}" in line and said in line


def test_a_missing_mapping_file_is_said(tmp_path, monkeypatch, capsys):
    code, output = run_cli(monkeypatch, capsys, "ingest", str(log(tmp_path)), "--store",
                           str(tmp_path / "st"), "--mapping", str(tmp_path / "nope.toml"))
    assert "cannot read mapping file" in one_user_error(code, output)


def test_an_unknown_detector_in_set_exits_2(tmp_path, monkeypatch, capsys):
    store = str(tmp_path / "st")
    code, output = run_cli(monkeypatch, capsys, "ingest", str(log(tmp_path)), "--store", store)
    assert code == 0, output
    code, output = run_cli(monkeypatch, capsys, "scan", "--store", store, "--set", "nope.x=1")
    assert "unknown detector 'nope'" in one_user_error(code, output)


def test_an_unknown_named_query_exits_2(tmp_path, monkeypatch, capsys):
    code, output = run_cli(monkeypatch, capsys, "query", "no_such_query", "--store",
                           str(tmp_path / "st"))
    assert "no named query 'no_such_query'" in one_user_error(code, output)


def test_an_unknown_format_exits_2(tmp_path, monkeypatch, capsys):
    code, output = run_cli(monkeypatch, capsys, "ingest", str(log(tmp_path)), "--store",
                           str(tmp_path / "st"), "--format", "nope")
    assert "unknown format 'nope'" in one_user_error(code, output)


def test_a_user_error_that_reaches_the_edge_exits_2(tmp_path, monkeypatch, capsys):
    def refuse(*_args, **_kwargs):  # a command that lets the library's error through
        raise StoreReadOnly("the store /evidence may not be written [it is a copy]")

    monkeypatch.setattr(cli, "run_ingest", refuse)
    code, output = run_cli(monkeypatch, capsys, "ingest", "x.jsonl", "--store", str(tmp_path))
    line = one_user_error(code, output)
    assert line == "error: the store /evidence may not be written [it is a copy]"  # not markup
    assert issubclass(StoreReadOnly, UserError)


@pytest.mark.parametrize("exc, said", [
    (OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/full/st/events/1.parquet"),
     "cannot write /full/st/events/1.parquet: no space left on device"),
    (OSError(errno.EROFS, os.strerror(errno.EROFS), "/mnt/ro/st"),
     "cannot write /mnt/ro/st: the file system is read-only"),
    (PermissionError(errno.EACCES, os.strerror(errno.EACCES), "/root/st"),
     "permission denied on /root/st"),
    (OSError(f"[Errno {errno.ENOSPC}] {os.strerror(errno.ENOSPC)}"), "no space left on device"),
])
def test_the_machines_condition_is_not_a_bug(tmp_path, monkeypatch, capsys, exc, said):
    def fail(*_args, **_kwargs):
        raise exc

    monkeypatch.setattr(loophound.ingest, "discover", fail)
    code, output = run_cli(monkeypatch, capsys, "ingest", str(log(tmp_path)), "--store",
                           str(tmp_path / "st"))
    assert said in one_user_error(code, output)


def test_a_real_bug_is_an_internal_error(tmp_path, monkeypatch, capsys):
    def broken(*_args, **_kwargs):
        raise RuntimeError("something inside broke")

    monkeypatch.setattr(loophound.ingest, "discover", broken)
    code, output = run_cli(monkeypatch, capsys, "ingest", str(log(tmp_path)), "--store",
                           str(tmp_path / "st"))
    assert code == 3
    assert "internal error: RuntimeError: something inside broke" in output
    assert "This is a bug in loophound" in output and "Traceback" not in output


def test_the_command_keeps_numpy_from_spinning_blas_threads_unless_told(monkeypatch):
    """`loophound` sets OPENBLAS_NUM_THREADS=1 for its own process (numpy's idle BLAS
    threads spin on a core the command needs); a value the user set is kept."""
    from loophound import cli

    seen = []
    monkeypatch.setattr(cli, "app", lambda: seen.append(os.environ.get("OPENBLAS_NUM_THREADS")))
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    cli.run()
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "4")
    cli.run()
    assert seen == ["1", "4"]

"""Queries stop: a --timeout, Ctrl-C (the command ends, the shell's prompt stays), every
statement kind run or refused in a sentence, and piped statements split where DuckDB's own
scanner says they end."""

from __future__ import annotations

import _thread
import glob
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from loophound.cli import app
from loophound.commands import sql as sqlcmd

ROOT = Path(__file__).resolve().parents[1]
HOOKS = ROOT / "sample_logs" / "hooks" / "hooks.jsonl"
FOREVER = ("WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t) "
           "SELECT count(*) FROM t")


def run(*args: str, input: str | None = None):
    return CliRunner().invoke(app, [str(a) for a in args], input=input)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("q") / "st"
    assert run("ingest", HOOKS, "--store", root).exit_code == 0
    return root


def test_a_query_that_never_ends_stops_at_the_timeout(store):
    t0 = time.monotonic()
    done = run("sql", FOREVER, "--store", store, "--timeout", "1")
    assert done.exit_code == 2, done.output
    assert "ran longer than 1 s and was stopped" in done.output
    assert time.monotonic() - t0 < 30


def test_ctrl_c_stops_a_running_query_and_its_spill_folder_goes(store):
    proc = subprocess.Popen(
        [sys.executable, "-m", "loophound", "sql", FOREVER, "--store", str(store),
         "--timeout", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(4)  # started, its query running
    assert proc.poll() is None
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "internal error" not in err
    assert glob.glob(f"/tmp/loophound-spill-{proc.pid}-*") == []


def test_ctrl_c_in_the_shell_stops_the_statement_and_keeps_the_prompt(store, tmp_path):
    con = sqlcmd.open_store(store)
    out, errs = tmp_path / "out.txt", tmp_path / "err.txt"
    with out.open("w") as fo, errs.open("w") as fe:
        shell = sqlcmd.Shell(con, Console(file=fo, width=200), Console(file=fe, width=200),
                             store, timeout=0)
        threading.Timer(1.0, _thread.interrupt_main, [signal.SIGINT]).start()
        shell.run_statement(FOREVER + ";")  # Ctrl-C one second in
        shell.run_statement("SELECT 42 AS answer;")
    assert shell.failed == 1
    assert "interrupted: the statement was stopped" in errs.read_text()
    assert "42" in out.read_text()


STATEMENTS = [
    "UPDATE EXTENSIONS", "INSTALL httpfs", "LOAD httpfs", "CHECKPOINT", "VACUUM",
    "ANALYZE", "DETACH x", "USE memory", "SET threads = 1", "RESET threads",
    "PREPARE p AS SELECT 1", "EXECUTE p", "DEALLOCATE p", "BEGIN", "COMMIT", "ROLLBACK",
    "EXPORT DATABASE '/tmp/x'", "IMPORT DATABASE '/tmp/x'", "COPY events TO '/tmp/x.csv'",
    "ATTACH '/tmp/x.db'", "CREATE TABLE t (x INT)", "CREATE SECRET (TYPE s3)",
    "DROP VIEW events", "INSERT INTO events SELECT * FROM events", "CALL pragma_version()",
    "PIVOT events ON kind", "SUMMARIZE events", "DESCRIBE events", "SHOW TABLES",
    "EXPLAIN SELECT 1", "EXPLAIN ANALYZE SELECT 1", "PRAGMA table_info('events')",
    "PRAGMA version", "VALUES (1)", "FROM events LIMIT 1", "UPDATE events SET actor = 'x'",
    "DELETE FROM events", "ALTER VIEW events RENAME TO e", "LOAD 'x.so'", "FORCE INSTALL x",
    "UNPIVOT events ON actor INTO NAME k VALUE v", "MERGE INTO events USING events e ON true "
    "WHEN MATCHED THEN DELETE",
]


@pytest.mark.parametrize("statement", STATEMENTS)
def test_every_statement_kind_runs_or_is_refused_in_a_sentence(store, statement):
    done = run("sql", statement, "--store", store, "--limit", "1")
    assert done.exit_code in (0, 2), done.output
    assert "internal error" not in done.output and "Traceback" not in done.output
    if done.exit_code == 2:
        assert done.output.startswith("error: ")


def test_piped_shell_splits_where_duckdb_says_statements_end(store):
    script = ("SELECT $$a;b$$ AS dollar;\n"
              "SELECT E'\\';' AS escaped;\n"
              "SELECT $tag$ ; $tag$ AS tagged; -- a comment; with a semicolon\n"
              "SELECT 'multi\n;line' AS multi;\n")
    done = run("shell", "--store", store, input=script)
    assert done.exit_code == 0, done.output
    for shown in ("a;b", "';", " ; ", "multi"):
        assert shown in done.stdout
    assert "error" not in done.output


def test_statement_completion_reads_strings_as_duckdb_does():
    done = sqlcmd._statement_complete
    assert done("SELECT $$a;b$$;") and not done("SELECT $$a;b")
    assert done("SELECT E'\\';';") and not done("SELECT E'\\';")
    assert done("SELECT 1; -- trailing; comment") and not done("SELECT 1 /* ; ")

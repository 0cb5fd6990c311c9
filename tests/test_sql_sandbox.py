"""Hostile input against the SQL sandbox and the store's files (issue "Hostile input and
faults", the security class).

Statements that try to write (most of them hidden behind an EXPLAIN and comments) go through
`loophound sql`, `loophound shell` and `loophound query`: each is refused with exit status 2
and a message that says so, no file of the store changes by a byte, and `verify` still
passes. `verify` itself notices a committed file that changed. And what the logs hold reaches
a terminal inert: an escape sequence in an actor name is shown, never obeyed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from loophound import queries
from loophound.cli import app
from loophound.commands import sql as sqlcmd
from loophound.ingest import ingest
from loophound.queries import ReadOnlyViolation
from loophound.store import Store
from loophound.text import inert, json_inert

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


# --- statements that must not run ---------------------------------------------------------------

COPY = "COPY (SELECT 1 AS x) TO '{target}' (FORMAT parquet, USE_TMP_FILE false)"

# Each of these got past the check before it relied on DuckDB's parser, and the COPY overwrote
# a committed events file (8,982 events became 5,216 in the sample store).
SLIPPED_PAST = [
    "EXPLAIN (ANALYZE /* ) SELECT 1 -- */) " + COPY,
    "EXPLAIN (ANALYZE, FORMAT json /* ) SELECT 1 -- */) " + COPY,
    "EXPLAIN (ANALYZE /* ) SELECT 1 /* nested */ -- */) " + COPY,
    "EXPLAIN (FORMAT json, ANALYZE /* ) FROM events -- */) " + COPY,
]

REFUSED = SLIPPED_PAST + [
    "EXPLAIN ANALYZE " + COPY,
    "EXPLAIN (ANALYZE) " + COPY,
    "EXPLAIN (ANALYZE, FORMAT json) " + COPY,
    "EXPLAIN /* SELECT */ (ANALYZE) " + COPY,
    "EXPLAIN (ANALYZE) /* ) */ " + COPY,
    "EXPLAIN (ANALYZE -- ) SELECT 1 /*\n) " + COPY,
    "/* SELECT 1; */ EXPLAIN ANALYZE " + COPY,
    "EXPLAIN " + COPY,
    "EXPLAIN ANALYZE PRAGMA enable_profiling",
    "EXPLAIN (ANALYZE) CREATE TABLE t AS SELECT 1",
    COPY,
    "COPY events TO '{target}' (FORMAT parquet)",
    "SELECT 1; " + COPY,
    "EXPLAIN ANALYZE SELECT 1; " + COPY,
    "PRAGMA enable_profiling",
    "PRAGMA \"enable_profiling\"",
    "/* PRAGMA table_info */ PRAGMA enable_profiling",
    "PRAGMA table_info('events'); PRAGMA enable_profiling",
    "CALL pragma_table_info('events')",
    "CHECKPOINT",
    "SET enable_external_access = true",
    "SET lock_configuration = false",
    "RESET lock_configuration",
    "ATTACH '{store}/catalog.duckdb' AS cat",
    "ATTACH '{store}/other.duckdb' AS other",
    "DETACH memory",
    "INSTALL httpfs",
    "LOAD httpfs",
    "EXPORT DATABASE '{store}/export'",
    "CREATE TABLE t AS SELECT * FROM events",
    "CREATE OR REPLACE TEMP VIEW events AS SELECT 1 AS x",
    "CREATE MACRO m() AS 1",
    "DROP VIEW events",
    "INSERT INTO _inputs SELECT * FROM _inputs",
    "UPDATE _inputs SET lines = 0",
    "DELETE FROM _inputs",
    "WITH a AS (SELECT 1) COPY (SELECT * FROM a) TO '{target}'",
    "SELECT * FROM query('COPY (SELECT 1) TO ''{target}''')",
    "SELECT * FROM read_text('{catalog}')",
    "PIVOT events ON kind USING count(*)",
]


def _statement(template: str, root: Path) -> str:
    return template.format(target=events_file(root), store=root, catalog=root / "catalog.duckdb")


@pytest.mark.parametrize("template", REFUSED)
def test_sql_refuses_and_no_byte_of_the_store_changes(store, template):
    before = tree_digest(store)
    result = run("sql", _statement(template, store), "--store", store)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.startswith("error: ") and "Traceback" not in result.output
    assert any(word in result.stderr for word in (
        "refused", "Parser Error", "disabled by configuration", "single SELECT")), result.stderr
    assert tree_digest(store) == before
    assert run("verify", "--store", store).exit_code == 0


@pytest.mark.parametrize("template", SLIPPED_PAST)
def test_the_explain_disguises_are_refused_by_name(template, store):
    with pytest.raises(ReadOnlyViolation, match="EXPLAIN of anything but a query"):
        queries.check_read_only(_statement(template, store))


def test_the_shell_refuses_each_and_keeps_the_store(store):
    before = tree_digest(store)
    attempts = [_statement(t, store).replace("\n", " ") for t in REFUSED
                if "--" not in t and "/*\n" not in t]
    script = "".join(a + ";\n" for a in attempts) + "SELECT count(*) AS n FROM events;\n"
    result = run("shell", "--store", store, input=script)
    assert result.exit_code == 2
    assert result.stderr.count("error: ") == len(attempts)
    assert "EXPLAIN of anything but a query" in result.stderr
    lines = len(HOOKS.read_text().splitlines())  # one event a line
    assert f" {lines} \n" in result.stdout  # the store's events, still all there
    assert tree_digest(store) == before
    assert run("verify", "--store", store).exit_code == 0


def test_a_named_query_that_writes_is_refused(store, tmp_path):
    before = tree_digest(store)
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "sneaky.sql").write_text("-- title: Sneaky\n" + _statement(SLIPPED_PAST[0], store)
                                       + "\n")
    env = {"LOOPHOUND_QUERIES": str(folder)}
    result = run("query", "sneaky", "--store", store, env=env)
    assert result.exit_code == 2 and "exactly one SELECT" in result.stderr
    shell = run("shell", "--store", store, input=".query sneaky\n", env=env)
    assert shell.exit_code == 2 and "exactly one SELECT" in shell.stderr
    assert tree_digest(store) == before


def test_legitimate_explains_and_pragmas_still_run(store):
    for sql in ("EXPLAIN SELECT count(*) FROM events", "EXPLAIN ANALYZE SELECT 1",
                "EXPLAIN (FORMAT json) SELECT 1", "EXPLAIN (ANALYZE, FORMAT json) FROM events",
                "/* why */ EXPLAIN /* how */ ANALYZE -- plan\n SELECT count(*) FROM requests",
                "PRAGMA table_info('events')", "PRAGMA show_tables", "DESCRIBE events"):
        result = run("sql", sql, "--store", store, "--limit", "0")
        assert result.exit_code == 0, (sql, result.output)
    bound = run("sql", "EXPLAIN SELECT * FROM events WHERE actor = $a", "--param", "a=x",
                "--store", store)
    assert bound.exit_code == 0, bound.output


def test_the_connection_can_write_nowhere_but_its_own_spill_folder(store, tmp_path):
    con = queries.readonly_connection(Store(store))
    for target in (tmp_path / "out.csv", store / "new.csv"):
        with pytest.raises(duckdb.Error, match="disabled by configuration"):
            con.execute(f"COPY (SELECT 1) TO '{target}'")
    assert not (tmp_path / "out.csv").exists() and not (store / "new.csv").exists()
    with pytest.raises(duckdb.Error, match="locked"):
        con.execute("SET allowed_directories = ['/']")
    settings = dict(con.execute(
        "SELECT name, value FROM duckdb_settings() WHERE name IN ('allowed_directories', "
        "'enable_external_access', 'lock_configuration')").fetchall())
    spill = settings.pop("allowed_directories")  # DuckDB adds its temp directory itself
    assert spill.startswith("[") and "loophound-sql-" in spill and str(store) not in spill
    assert "," not in spill  # nothing else
    assert settings == {"enable_external_access": "false", "lock_configuration": "true"}


# --- if a write ever got past the check ----------------------------------------------------------


def test_committed_files_are_read_only_on_disk(store):
    committed = [p for p in store.rglob("*") if p.parent.name in ("events", "quarantine",
                                                                    "findings")]
    assert committed
    for p in committed:
        assert p.stat().st_mode & 0o222 == 0, p


def test_a_write_that_slipped_past_the_check_is_caught(store, tmp_path, monkeypatch):
    """Were DuckDB's parser ever to let a writing statement through the check: for any user
    but root the committed file cannot be opened for writing; and whoever runs it, the
    statement ends in an error naming the changed file, and `verify` names it too."""
    copy = tmp_path / "copy"
    shutil.copytree(store, copy)
    target = events_file(copy)
    before = target.read_bytes()
    monkeypatch.setattr(queries, "_refuse_unless_query", lambda *a: None)
    result = run("sql", COPY.format(target=target), "--store", copy)
    assert result.exit_code == 2 and "Traceback" not in result.output
    if os.geteuid() != 0:
        assert "Permission" in result.stderr or "denied" in result.stderr, result.stderr
        assert target.read_bytes() == before
        return
    assert "the store's files changed while the statement ran" in result.stderr
    assert target.name in result.stderr
    verified = run("verify", "--store", copy)
    assert verified.exit_code == 1
    assert "changed" in verified.stdout and target.name in verified.stdout


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


# --- what reaches the terminal ------------------------------------------------------------------

HOSTILE = "ev\x1b]0;pwned\x07il\x1b[2J\x1b[8mhid\u202eden"
SHOWN = "ev\\x1b]0;pwned\\x07il\\x1b[2J\\x1b[8mhid\\u202eden"
RAW = ("\x1b", "\x07", "\u202e")


def test_inert_escapes_controls_and_bidi_and_nothing_else():
    assert inert(HOSTILE) == SHOWN
    assert inert("tab\there\nnew\x7fdel\x85nel\x9bcsi\u2066iso\u2069") == (
        "tab\\x09here\\x0anew\\x7fdel\\x85nel\\x9bcsi\\u2066iso\\u2069")
    assert inert("line one\nline\x1b two", newlines=True) == "line one\nline\\x1b two"
    plain = "Ünïcødé → 日本語 [bold]x[/] \\x1b é"
    assert inert(plain) == plain
    for c in [*range(0x20), 0x7F, *range(0x80, 0xA0), *range(0x202A, 0x202F),
              *range(0x2066, 0x206A)]:
        assert chr(c) not in inert(chr(c))
    value = {"a": HOSTILE + "\x7f\x85"}
    text = json_inert(json.dumps(value, ensure_ascii=False))
    assert not any(ch in text for ch in (*RAW, "\x7f", "\x85"))
    assert json.loads(text) == value


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Path:
    """A store of the hooks sample in which one looping agent's name is an attack on the
    terminal: a title change, a clear screen, hidden text and a right-to-left override."""
    folder = tmp_path_factory.mktemp("hostile")
    lines = []
    for line in HOOKS.read_text().splitlines():
        d = json.loads(line)
        for k in ("source_agent", "target_agent"):
            if d.get(k) == "annegreet":
                d[k] = HOSTILE
        lines.append(json.dumps(d))
    log = folder / "logs" / "hooks.jsonl"
    log.parent.mkdir()
    log.write_text("\n".join(lines) + "\n")
    return log


def assert_inert(text: str) -> None:
    assert SHOWN in text, text
    assert not any(c in text for c in RAW), repr(text)


def test_scan_shows_hostile_names_inert(hostile, tmp_path):
    result = run("scan", hostile, "--store", tmp_path / "st", "--fail-on", "never")
    assert result.exit_code == 0, result.output
    assert "triggering each other in a cycle" in result.stdout  # the incident's title
    assert_inert(result.stdout)


def test_sql_query_and_shell_show_cells_inert(hostile, tmp_path):
    st = tmp_path / "st"
    ingest([str(hostile)], Store(st))
    sql = f"SELECT DISTINCT actor FROM events WHERE actor = '{HOSTILE}'"
    table = run("sql", sql, "--store", st)
    assert table.exit_code == 0, table.output
    assert_inert(table.stdout)
    assert_inert(run("query", "top_talkers", "--store", st).stdout)
    shell = run("shell", "--store", st, input=sql + ";\n")
    assert_inert(shell.stdout)
    out = tmp_path / "t.txt"
    assert run("sql", sql, "--store", st, "--out", out).exit_code == 0  # a table is display
    assert_inert(out.read_text())
    bad = run("sql", f"SELECT CAST(actor AS INTEGER) FROM events WHERE actor = '{HOSTILE}'",
              "--store", st)
    assert bad.exit_code == 2 and "Conversion Error" in bad.stderr
    assert "\\x1b]0;pwned\\x07" in bad.stderr and not any(c in bad.stderr for c in RAW)


def test_machine_formats_keep_the_data_exact(hostile, tmp_path, monkeypatch):
    st = tmp_path / "st"
    ingest([str(hostile)], Store(st))
    sql = "SELECT DISTINCT actor FROM events WHERE actor LIKE 'ev%'"
    piped = run("sql", sql, "--store", st, "--format", "csv")
    assert piped.stdout.splitlines()[1] == HOSTILE  # to a pipe: the data, byte for byte
    for fmt in ("json", "jsonl"):
        result = run("sql", sql, "--store", st, "--format", fmt)
        assert not any(c in result.stdout for c in RAW)
        rows = (json.loads(result.stdout) if fmt == "json"
                else [json.loads(x) for x in result.stdout.splitlines()])
        assert rows == [{"actor": HOSTILE}]
    out = tmp_path / "a.parquet"
    assert run("sql", sql, "--store", st, "--format", "parquet", "--out", out).exit_code == 0
    assert pq.read_table(out).column("actor").to_pylist() == [HOSTILE]
    # CSV on a terminal is display: inert
    monkeypatch.setattr(sqlcmd, "_is_terminal", lambda stream: True)
    shown = run("sql", sql, "--store", st, "--format", "csv")
    assert_inert(shown.stdout)


def test_ingest_shows_a_hostile_file_name_inert(hostile, tmp_path):
    named = tmp_path / "logs" / "a\x1b[2Jb[red]x[bold].jsonl"
    named.parent.mkdir()
    named.write_bytes(hostile.read_bytes())
    result = run("ingest", named.parent, "--store", tmp_path / "st")
    assert result.exit_code == 0, result.output
    assert "a\\x1b[2Jb[red]x[bold].jsonl" in result.stdout
    assert "\x1b" not in result.output

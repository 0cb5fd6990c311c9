"""SQL over the store: `sql`, `shell`, `query`, the named-query library and the read-only
guarantee, on the sample logs (answers from sample_logs/EXPECTED.json) and on a bare folder of
the store's Parquet files."""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import io
import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from loophound import queries
from loophound.cli import app
from loophound.commands import sql as sqlcmd
from loophound.queries import QueryError, ReadOnlyViolation
from loophound.store import Store

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_logs"
EXPECTED = json.loads((SAMPLES / "EXPECTED.json").read_text())
SECTIONS = EXPECTED["sections"]
BPROXY = f"sample_logs/{SECTIONS['bproxy']['dir']}/{SECTIONS['bproxy']['file']}"
TRIMMED = f"sample_logs/{SECTIONS['bproxy-trimmed']['dir']}/{SECTIONS['bproxy-trimmed']['file']}"
STORM = SECTIONS["bproxy"]["incidents"][0]
TRIMMED_STORM = SECTIONS["bproxy-trimmed"]["incidents"][0]

REQUIRED_QUERIES = {"top_errors", "top_talkers", "events_per_minute", "after_close",
                    "pair_exchanges", "trigger_edges", "cost_by_actor_and_model",
                    "largest_findings"}


@contextmanager
def cwd(path: Path):
    old = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


class Sample:
    def __init__(self, root: Path, scan_error: str | None):
        self.root = root
        self.scan_error = scan_error

    @property
    def store(self) -> Store:
        return Store(self.root)

    def need_findings(self) -> None:
        if self.scan_error:
            pytest.skip(f"scan failed on the sample store: {self.scan_error}")


@pytest.fixture(scope="session")
def sample(tmp_path_factory) -> Sample:
    """The sample logs ingested (file names as `sample_logs/...`) and scanned, once."""
    from loophound.ingest import ingest

    root = tmp_path_factory.mktemp("sql-store") / "store"
    with cwd(ROOT):
        ingest(["sample_logs"], Store(root))
    scan_error = None
    try:
        from loophound.scan import scan_store

        scan_store(Store(root))
    except Exception as exc:  # noqa: BLE001 — detectors are written concurrently
        scan_error = f"{type(exc).__name__}: {exc}"
    return Sample(root, scan_error)


@pytest.fixture(scope="session")
def bare(sample, tmp_path_factory) -> Path:
    """Only the store's Parquet files, copied elsewhere (no catalog)."""
    dest = tmp_path_factory.mktemp("sql-bare") / "shared"
    for f in sample.root.rglob("*.parquet"):
        target = dest / f.relative_to(sample.root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, target)
    assert not (dest / "catalog.duckdb").exists()
    return dest


@pytest.fixture(scope="session")
def con(sample):
    return queries.readonly_connection(sample.store)


def records(con, name, **params):
    return queries.records(con, name, params)


def scalar(con, sql, params=None):
    return con.execute(sql, params).fetchone()[0]


def iso(value: dt.datetime) -> str:
    return value.isoformat(timespec="milliseconds") + "Z"


runner = CliRunner()


def run(*args, input=None):
    return runner.invoke(app, [str(a) for a in args], input=input)


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != "lock"}


# --- the library --------------------------------------------------------------------------


def test_library_has_the_required_queries_each_with_a_header():
    listed = {q.name: q for q in queries.list_queries()}
    assert REQUIRED_QUERIES <= set(listed)
    for q in listed.values():
        assert q.title and q.description, q.name
        assert q.path.parent.name == "queries"
        for p in q.params:
            assert p.help, f"{q.name}.{p.name} has no help"
            assert p.type in queries.TYPES


def test_queries_are_found_from_the_source_checkout():
    assert queries.SOURCE_QUERIES == ROOT / "queries"
    assert queries.load("top_errors").path == ROOT / "queries" / "top_errors.sql"


def test_every_named_query_runs_on_the_sample_store(con):
    for name in queries.names():
        res = queries.execute(con, name)
        assert res.description, name
        res.fetchall()


# --- every named query, with asserted answers ----------------------------------------------


def test_top_errors(con):
    rows = records(con, "top_errors")
    top = rows[0]
    # the storm appears in both bproxy logs (full and trimmed): 1,200 failed scrolls in each
    assert top["error"] == STORM["error"] == "SESSION_NOT_FOUND"
    assert top["attempts"] == STORM["requests"] + TRIMMED_STORM["requests"] == 2400
    assert top["top_session"] == STORM["session"] == "6afr3v"
    assert top["top_action"] == STORM["action"]
    assert [r["attempts"] for r in rows] == sorted((r["attempts"] for r in rows), reverse=True)

    one = records(con, "top_errors", file=BPROXY, limit=1)
    assert len(one) == 1
    r = one[0]
    assert (r["error"], r["attempts"], r["actors"], r["sessions"], r["files"]) == (
        "SESSION_NOT_FOUND", 1200, 1, 1, 1)
    assert r["top_actor"] == STORM["actor"]
    assert (iso(r["first_ts"]), iso(r["last_ts"])) == (STORM["start"], STORM["end"])
    # each attempt once: a request and its response are one attempt
    assert r["attempts"] == scalar(con, "SELECT count(*) FROM events WHERE file = ? AND "
                                   "kind = 'request' AND error = 'SESSION_NOT_FOUND'", [BPROXY])
    lab = {x["error"]: x for x in records(con, "top_errors", file="sample_logs/labtrust/"
                                          "episodes.jsonl")}
    blocked = SECTIONS["labtrust"]["incidents"][1]
    assert lab[blocked["blocked_reason_code"]]["attempts"] == blocked["count"]
    assert lab[blocked["blocked_reason_code"]]["top_actor"] == blocked["agent_id"]


def test_top_talkers(con):
    rows = records(con, "top_talkers", file=BPROXY)
    top = rows[0]
    storm_actor = STORM["actor"]
    browsing = next(h for h in SECTIONS["bproxy"]["healthy"] if h.get("actor") == storm_actor)
    assert top["actor"] == storm_actor
    assert top["events"] == scalar(
        con, "SELECT count(*) FROM events WHERE file = ? AND actor = ? AND kind NOT IN "
             "('response', 'lifecycle', 'session_end')", [BPROXY, storm_actor])
    requests = scalar(con, "SELECT count(*) FROM requests WHERE file = ? AND actor = ?",
                      [BPROXY, storm_actor])
    assert requests == STORM["requests"] + browsing["requests"]  # 1,200 + 172
    assert top["events"] >= requests  # responses are not counted again
    assert top["errors"] >= STORM["requests"]
    assert top["top_target"] == "bproxy" and top["sessions"] == 1
    others = {r["actor"]: r["events"] for r in rows}
    for h in SECTIONS["bproxy"]["healthy"]:
        if h["kind"] == "browsing" and h["actor"] != storm_actor:
            assert h["requests"] <= others[h["actor"]] <= h["requests"] + 5
    assert len(records(con, "top_talkers", limit=3)) == 3
    assert all(r["actor"] is not None for r in records(con, "top_talkers", limit=100))
    # with no_actor, the lines that name none are one more row; every line's bytes count once
    everyone = records(con, "top_talkers", limit=1000, no_actor=True)
    assert [r["actor"] for r in everyone].count(None) == 1
    assert sum(r["bytes"] for r in everyone) == scalar(con, "SELECT sum(byte_length) FROM events")


def test_events_per_minute(con):
    rows = records(con, "events_per_minute", file=BPROXY)
    assert sum(r["events"] for r in rows) == SECTIONS["bproxy"]["lines"]["2026-06-18.log"]
    minutes = [r["minute"] for r in rows]
    assert minutes == sorted(minutes) and len(set(minutes)) == len(minutes)
    assert all(m.second == 0 and m.microsecond == 0 for m in minutes)
    busiest = max(rows, key=lambda r: r["errors"])
    start = dt.datetime.fromisoformat(STORM["start"].rstrip("Z"))
    end = dt.datetime.fromisoformat(STORM["end"].rstrip("Z"))
    assert start.replace(second=0, microsecond=0) <= busiest["minute"] <= end
    assert busiest["top_actor"] == STORM["actor"]

    storm = records(con, "events_per_minute", file=BPROXY, session=STORM["session"])
    in_storm = [r for r in storm if start.replace(second=0, microsecond=0) <= r["minute"] <= end]
    assert sum(r["errors"] for r in in_storm) == STORM["requests"]

    five = records(con, "events_per_minute", file=BPROXY, minutes=5)
    assert sum(r["events"] for r in five) == sum(r["events"] for r in rows)
    assert all(r["minute"].minute % 5 == 0 for r in five)
    assert records(con, "events_per_minute", actor="nobody") == []


def test_after_close_finds_the_dead_session_storm(con):
    rows = {r["file"]: r for r in records(con, "after_close")}
    assert set(rows) == {BPROXY, TRIMMED}  # healthy hook sessions end and stay ended
    full = rows[BPROXY]
    assert full["session"] == STORM["session"]
    assert full["close_line"] == SECTIONS["bproxy"]["close_line"] == 1209
    assert full["close_action"] == "session.close"
    assert full["closed_by"] == STORM["actor"]
    assert full["events_after"] == full["errors_after"] == STORM["requests"] == 1200
    assert (full["first_line_after"], full["last_line_after"]) == (STORM["first_line"],
                                                                   STORM["last_line"])
    assert (full["top_actor"], full["top_action"], full["top_error"]) == (
        STORM["actor"], STORM["action"], STORM["error"])
    assert iso(full["first_after_ts"]) == STORM["start"]
    trimmed = rows[TRIMMED]
    assert trimmed["close_line"] == SECTIONS["bproxy-trimmed"]["close_line"]
    assert trimmed["events_after"] == TRIMMED_STORM["requests"]
    assert (trimmed["first_line_after"], trimmed["last_line_after"]) == (
        TRIMMED_STORM["first_line"], TRIMMED_STORM["last_line"])

    assert len(records(con, "after_close", session="6afr3v")) == 2
    assert records(con, "after_close", session="no-such-session") == []
    assert records(con, "after_close", min_events=1201) == []
    both = records(con, "after_close", same_file=False)
    assert {r["events_after"] for r in both} == {2400}  # the trimmed copy counts too


def test_top_pairs_and_pair_exchanges(con):
    echo = SECTIONS["sven"]["incidents"][0]
    pairs = records(con, "top_pairs")
    top = pairs[0]
    assert top["exchanges"] == echo["messages"] == 400
    assert top["a_to_b"] + top["b_to_a"] == top["exchanges"] and top["a_to_b"] == 200
    assert top["files"] == 1

    # default: the busiest pair, every exchange of it
    rows = records(con, "pair_exchanges")
    assert len(rows) == top["exchanges"]
    assert {frozenset((r["actor"], r["target"])) for r in rows} == {frozenset((top["a"],
                                                                               top["b"]))}
    assert rows[0]["file"].removeprefix("sample_logs/sven/") in echo["files"]
    assert {r["direction"] for r in rows} == {"a→b", "b→a"}
    assert rows[0]["gap_ms"] is None and all(r["gap_ms"] >= 0 for r in rows[1:])
    assert [r["ts"] for r in rows] == sorted(r["ts"] for r in rows)

    # a named pair, either order, and the hook cycle between annegreet and eltjo
    cycle = SECTIONS["hooks"]["incidents"][0]
    a, b = cycle["cycle"]
    ab = records(con, "pair_exchanges", a=a, b=b)
    ba = records(con, "pair_exchanges", a=b, b=a)
    assert len(ab) == len(ba) > 0
    assert {r["kind"] for r in ab} == {"trigger"}
    fired = sum(x["hooks_fired"] for x in SECTIONS["hooks"]["incidents"]
                + SECTIONS["hooks"]["healthy"] if set(x.get("cycle", x.get("agents", [])))
                == {a, b})
    assert len(ab) == fired
    assert len(records(con, "pair_exchanges", a=a, b=b, limit=5)) == 5
    assert records(con, "pair_exchanges", a="nobody", b="no-one") == []


def test_trigger_edges(con):
    edges = {(r["source"], r["target"]): r for r in records(con, "trigger_edges")}
    hooks = SECTIONS["hooks"]
    for incident in hooks["incidents"]:
        members = incident["cycle"]
        ring = list(zip(members, members[1:] + members[:1], strict=True))
        for edge in ring:
            assert edge in edges, edge
        # every hook fired among the members: the cycle's, and healthy chains of the same agents
        fired = sum(x["hooks_fired"] for x in hooks["incidents"] + hooks["healthy"]
                    if set(x.get("cycle", x.get("agents", []))) <= set(members))
        among = sum(r["triggers"] for (s, t), r in edges.items()
                    if s in members and t in members)
        assert among == fired
    assert edges[("annegreet", "eltjo")]["reverse_edge"] is True
    assert edges[("victoria", "nessa")]["reverse_edge"] is False
    assert sum(r["triggers"] for r in edges.values()) == scalar(
        con, "SELECT count(*) FROM triggers WHERE kind = 'trigger' AND actor IS NOT NULL "
             "AND target IS NOT NULL")
    strong = records(con, "trigger_edges", min_count=20)
    assert {(r["source"], r["target"]) for r in strong} == {("annegreet", "eltjo"),
                                                           ("eltjo", "annegreet")}


def test_cost_by_actor_and_model(con):
    rows = records(con, "cost_by_actor_and_model", limit=1000)
    by = {(r["actor"], r["model"], r["basis"]): r for r in rows}
    assert len(by) == len(rows)  # one row per actor, model and basis
    lab = SECTIONS["labtrust"]["cost"]
    priced_model = lab["models"][0]
    coord = next(r for (_, model, _), r in by.items() if model == priced_model)
    assert coord["cost_usd"] == pytest.approx(lab["estimated_cost_usd"])
    unpriced = [r for (_, model, _), r in by.items() if model in lab["unpriced_models"]]
    assert unpriced and all(r["basis"] == "unpriced" for r in unpriced)
    assert sum(r["events"] for r in unpriced) == lab["unpriced_calls"]
    assert all(r["cost_usd"] is None for r in unpriced)  # unpriced, never $0
    assert all(r["tokens"] > 0 for r in unpriced)
    # hooks state their cost: the sum over the hook agents is the logs' own total
    hooks = SECTIONS["hooks"]
    agents = {a for x in hooks["incidents"] + hooks["healthy"]
              for a in x.get("cycle", x.get("agents", []))}
    stated = sum(r["cost_usd"] for (actor, _, _), r in by.items() if actor in agents)
    assert stated == pytest.approx(sum(x["cost_usd"] for x in hooks["incidents"]
                                       + hooks["healthy"]))
    # bproxy requests have no tokens: each is an assumed agent call
    storm = by[(STORM["actor"], None, "assumed")]
    browsing = next(h for h in SECTIONS["bproxy"]["healthy"] if h.get("actor") == STORM["actor"])
    assert storm["events"] == STORM["requests"] + browsing["requests"]
    assert storm["cost_usd"] == pytest.approx(storm["events"] * 0.002)
    costs = [r["cost_usd"] for r in rows if r["cost_usd"] is not None]
    assert costs == sorted(costs, reverse=True)
    owners = {x["actor"] for x in SECTIONS["bproxy"]["incidents"] + SECTIONS["bproxy"]["healthy"]}
    assert len(records(con, "cost_by_actor_and_model", file=BPROXY, limit=1000)) == len(owners)
    assert all(r["actors"] == (r["actor"] is not None) for r in rows)
    # by model: the same events and dollars, the actors counted
    models = records(con, "cost_by_actor_and_model", per_actor=False, limit=None)
    assert all(r["actor"] is None for r in models)
    for basis in ("stated", "priced", "assumed", "unpriced"):
        assert sum(r["events"] for r in models if r["basis"] == basis) == sum(
            r["events"] for r in rows if r["basis"] == basis), basis
    assert sum(r["cost_usd"] or 0 for r in models) == pytest.approx(sum(costs))
    assert next(r for r in models if r["model"] == priced_model)["actors"] == 1


def test_largest_findings_and_their_evidence(sample, con):
    sample.need_findings()
    rows = records(con, "largest_findings")
    assert rows, "the scan found nothing in the sample logs"
    assert rows[0]["events"] == scalar(con, "SELECT max(events) FROM findings")
    assert [r["events"] for r in rows] == sorted((r["events"] for r in rows), reverse=True)
    storms = [r for r in rows if r["detector"] == "repeated_error"
              and STORM["session"] in r["sessions"] and r["events"] == STORM["requests"]]
    assert len(storms) == 2  # the full and the trimmed bproxy log
    assert all(r["claimed_lines"] >= r["events"] for r in rows)
    assert records(con, "largest_findings", detector="no-such-detector") == []
    only = records(con, "largest_findings", detector="repeated_error", limit=100)
    assert only and {r["detector"] for r in only} == {"repeated_error"}
    assert len(records(con, "largest_findings", limit=1)) == 1

    evidence = records(con, "finding_evidence", limit=100_000)
    assert {r["finding_id"] for r in evidence} == {rows[0]["id"]}
    assert len(evidence) == rows[0]["claimed_lines"]
    full = next(r for r in storms if r["actors"] == [STORM["actor"]])
    lines = records(con, "finding_evidence", finding=full["id"], limit=100_000)
    assert {r["file"] for r in lines} == {BPROXY}
    assert (lines[0]["line"], lines[-1]["line"]) == (STORM["first_line"], STORM["last_line"])
    assert sum(r["kind"] == "request" for r in lines) == STORM["requests"]
    assert records(con, "finding_evidence", finding="no-such-id") == []


def test_quarantine_summary(sample, tmp_path):
    # a hand-made bare store with quarantined lines
    (tmp_path / "events").mkdir()
    (tmp_path / "quarantine").mkdir()
    shutil.copy(next((sample.root / "events").glob("*.parquet")), tmp_path / "events")
    pq.write_table(pa.table({
        "file": ["a.log", "a.log", "a.log", "b.log"], "line": [3, 9, 12, 1],
        "byte_offset": [100, 400, 800, 0], "byte_length": [10, 20, 30, 5],
        "reason": ["invalid_json", "invalid_json", "binary", "invalid_utf8"],
        "detail": ["x"] * 4, "preview": ["{oops", "{again", "\\x00", "\\xff"],
    }), tmp_path / "quarantine" / "q.parquet")
    q = queries.readonly_connection(Store(tmp_path))
    rows = records(q, "quarantine_summary")
    assert rows[0] == {"file": "a.log", "reason": "invalid_json", "lines": 2, "bytes": 30,
                       "first_line": 3, "last_line": 9, "first_preview": "{oops"}
    assert len(rows) == 3
    assert len(records(q, "quarantine_summary", file="b.log")) == 1


def test_sample_store_has_no_quarantined_lines(con):
    assert records(con, "quarantine_summary") == []


# --- parameters ----------------------------------------------------------------------------


def test_parameters_are_coerced_from_the_defaults_type():
    q = queries.load("after_close")
    bound = q.bind(["same_file=false", "min_events=7", "session=6afr3v"])
    assert bound == {"session": "6afr3v", "same_file": False, "min_events": 7}
    assert q.bind({"min_events": "3"})["min_events"] == 3
    assert q.bind(["session=null"])["session"] is None
    with pytest.raises(QueryError, match="not a valid int"):
        q.bind(["min_events=many"])
    with pytest.raises(QueryError, match="not a valid bool"):
        q.bind(["same_file=perhaps"])
    with pytest.raises(QueryError, match="has no parameter 'nope'; it has: session"):
        q.bind(["nope=1"])
    with pytest.raises(QueryError, match="expected NAME=VALUE"):
        q.bind(["min_events"])
    assert queries.coerce("2026-06-18T23:42:20.544+02:00", "timestamp") == dt.datetime(
        2026, 6, 18, 21, 42, 20, 544000)
    assert queries.coerce("2.5", "float") == 2.5


def test_parameters_are_bound_not_pasted(con):
    hostile = "6afr3v' OR '1'='1"
    assert records(con, "after_close", session=hostile) == []
    assert records(con, "top_errors", file="x'; DROP VIEW events; --") == []
    assert scalar(con, "SELECT count(*) FROM events") > 0


def test_header_format(tmp_path):
    text = """-- title: Retries
-- description: How often each session retried.
--   A continuation line.
-- param: limit = 20  -- rows
-- param: since: timestamp = '2026-06-18 00:00:00'  -- only after this
-- param: tag = 'a -- b'  -- a default that contains two dashes
-- param: ratio: float = 2  -- a float from an int literal
-- param: flag = true  -- a boolean
--   that goes on
SELECT $limit, $since, $tag, $ratio, $flag
"""
    q = queries.parse(text, "retries")
    assert q.title == "Retries"
    assert q.description == "How often each session retried. A continuation line."
    p = {x.name: x for x in q.params}
    assert (p["limit"].type, p["limit"].default, p["limit"].help) == ("int", 20, "rows")
    assert (p["since"].type, p["since"].default) == ("timestamp", dt.datetime(2026, 6, 18))
    assert p["tag"].default == "a -- b" and p["tag"].help == "a default that contains two dashes"
    assert (p["ratio"].type, p["ratio"].default) == ("float", 2.0)
    assert p["flag"].default is True and p["flag"].help == "a boolean that goes on"
    assert duckdb.connect().execute(q.sql, q.bind()).fetchone() == (
        20, dt.datetime(2026, 6, 18), "a -- b", 2.0, True)

    bad = {
        "-- description: x\nSELECT 1": "title",
        "-- title: t\n-- param: a = 1 -- x\nSELECT $a, $b": r"undeclared parameters \$b",
        "-- title: t\n-- param: a = 1 -- x\nSELECT 1": "unused parameters a",
        "-- title: t\nSELECT 1; SELECT 2": "exactly one SELECT",
        "-- title: t\nCREATE TABLE x (a INT)": "exactly one SELECT",
        "-- title: t\n-- param: a: money = 1\nSELECT $a": "unknown type",
        "-- title: t\n-- param: a =\nSELECT $a": "needs a default",
        "-- title: t\n": "no SQL",
    }
    for text, message in bad.items():
        with pytest.raises(QueryError, match=message):
            queries.parse(text, "bad")


def test_own_queries_folder(tmp_path, monkeypatch, con):
    (tmp_path / "mine.sql").write_text(
        "-- title: Mine\n-- description: mine\n-- param: s = '6afr3v'  -- a session\n"
        "SELECT count(*) AS n FROM requests WHERE session = $s\n")
    (tmp_path / "top_errors.sql").write_text("-- title: Overridden\nSELECT 1 AS one\n")
    monkeypatch.setenv("LOOPHOUND_QUERIES", str(tmp_path))
    assert "mine" in queries.names()
    assert queries.load("top_errors").title == "Overridden"
    assert records(con, "mine")[0]["n"] > 1200


# --- the read-only guarantee ----------------------------------------------------------------


WRITES = [
    "COPY (SELECT 1 AS a) TO '{events_file}' (FORMAT parquet)",
    "COPY (SELECT 1 AS a) TO '{events_file}' (FORMAT parquet, USE_TMP_FILE false)",
    "COPY events TO '{tmp}/out.csv'",
    "EXPLAIN ANALYZE COPY (SELECT 1) TO '{events_file}'",
    "ATTACH '{tmp}/other.duckdb' AS other",
    "ATTACH '{catalog}' AS cat",
    "CREATE TABLE t AS SELECT * FROM events",
    "CREATE OR REPLACE TEMP VIEW events AS SELECT 1 AS x",
    "CREATE MACRO m() AS 1",
    "DROP VIEW events",
    "INSERT INTO _inputs SELECT * FROM _inputs",
    "DELETE FROM _inputs",
    "UPDATE _inputs SET lines = 0",
    "SET enable_external_access = true",
    "RESET lock_configuration",
    "EXPORT DATABASE '{tmp}/export'",
    "INSTALL httpfs",
    "LOAD httpfs",
    "CHECKPOINT",
    "PRAGMA enable_profiling",
    "SELECT * FROM enable_logging(storage = 'file', storage_path = '{store}/events')",
    "SELECT * FROM read_csv('{original_log}')",  # only the store's own files can be read
    "SELECT 1; DROP VIEW events",
    "PIVOT events ON kind USING count(*)",
]


@pytest.mark.parametrize("statement", WRITES)
def test_statements_that_could_write_fail_and_the_store_is_unchanged(sample, tmp_path,
                                                                     statement):
    events_file = sorted((sample.root / "events").glob("*.parquet"))[0]
    before = tree_digest(sample.root)
    sql = statement.format(events_file=events_file, tmp=tmp_path, store=sample.root,
                           catalog=sample.root / "catalog.duckdb",
                           original_log=ROOT / BPROXY)
    result = run("sql", sql, "--store", sample.root)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""  # nothing ran, not even the first of several statements
    message = result.stderr
    assert message.startswith("error: ")
    assert ("refused" in message or "disabled by configuration" in message
            or "configuration has been locked" in message), message
    assert "Traceback" not in result.output
    assert tree_digest(sample.root) == before
    assert list(tmp_path.iterdir()) == []
    after = run("sql", "SELECT count(*) AS n FROM events", "--store", sample.root,
                "--format", "csv")
    assert after.exit_code == 0 and int(after.stdout.splitlines()[1]) > 0


def test_refusals_name_the_statement_and_say_what_is_allowed():
    with pytest.raises(ReadOnlyViolation, match=r"refused statement 2 \(line 3\): DROP"):
        queries.check_read_only("SELECT 1;\n\nDROP VIEW events;")
    with pytest.raises(ReadOnlyViolation, match="COPY statements cannot run here.*--format"):
        queries.check_read_only("COPY events TO 'x.csv'")
    for ok in ("SELECT 1", "WITH a AS (SELECT 1) SELECT * FROM a", "FROM events",
               "DESCRIBE events", "SHOW TABLES", "SUMMARIZE events", "VALUES (1)",
               "EXPLAIN SELECT 1", "-- note\nEXPLAIN ANALYZE SELECT 1",
               "PRAGMA table_info('events')", "PIVOT events ON kind IN ('request') USING count(*)"):
        assert queries.check_read_only(ok), ok


def test_describing_statements_run(sample):
    for sql in ("DESCRIBE requests", "SHOW TABLES", "SUMMARIZE inputs",
                "PRAGMA table_info('findings')", "EXPLAIN SELECT count(*) FROM events"):
        result = run("sql", sql, "--store", sample.root, "--limit", "0")
        assert result.exit_code == 0, (sql, result.output)


def test_out_inside_the_store_is_refused(sample):
    target = sorted((sample.root / "events").glob("*.parquet"))[0]
    before = tree_digest(sample.root)
    for fmt in ("parquet", "csv"):
        result = run("sql", "SELECT 1 AS a", "--store", sample.root, "--format", fmt,
                     "--out", target)
        assert result.exit_code == 2
        assert "inside the store" in result.stderr
    assert tree_digest(sample.root) == before


def test_read_only_connection_still_reads_everything(con):
    for view in queries.VIEWS:
        assert scalar(con, f"SELECT count(*) FROM {view}") >= 0
    with pytest.raises(duckdb.Error, match="locked"):
        con.execute("SET enable_external_access = true")


# --- bad queries ------------------------------------------------------------------------------


def test_a_bad_query_prints_duckdbs_message_with_its_position(sample):
    result = run("sql", "SELECT * FORM events", "--store", sample.root)
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0] == 'error: Parser Error: syntax error at or near "events"'
    assert "LINE 1: SELECT * FORM events" in lines
    caret = lines[lines.index("LINE 1: SELECT * FORM events") + 1]
    assert caret.index("^") == len("LINE 1: SELECT * FORM ")
    assert "Traceback" not in result.output


def test_a_bad_query_on_a_later_line_points_at_that_line(sample, tmp_path):
    script = tmp_path / "q.sql"
    script.write_text("SELECT count(*) FROM events;\n\nSELECT nope\nFROM requests;\n")
    result = run("sql", "--file", script, "--store", sample.root)
    assert result.exit_code == 2
    assert "Binder Error" in result.stderr and "LINE 3: SELECT nope" in result.stderr
    assert "Traceback" not in result.output


def test_other_user_errors_are_messages(sample, tmp_path):
    cases = [
        (["sql", "SELECT 1", "--store", tmp_path / "nowhere"], "no loophound store"),
        (["sql", "SELECT 1", "--store", sample.root, "--format", "xml"], "--format must be"),
        (["sql", "SELECT 1", "--store", sample.root, "--format", "parquet"], "give --out"),
        (["sql", "SELECT $s", "--store", sample.root], "give --param s=VALUE"),
        (["sql", "SELECT 1", "--store", sample.root, "--param", "s=1"], "the SQL has no $s"),
        (["sql", "SELECT 1; SELECT 2", "--store", sample.root, "--format", "csv"],
         "give one statement"),
        (["sql", "--file", tmp_path / "missing.sql", "--store", sample.root], "cannot read"),
        (["query", "top_errorz", "--store", sample.root], "did you mean top_errors"),
        (["query", "top_errors", "--param", "limit=lots", "--store", sample.root],
         "not a valid int"),
        (["query", "top_errors", "--param", "colour=red", "--store", sample.root],
         "has no parameter 'colour'"),
    ]
    for args, message in cases:
        result = run(*args)
        assert result.exit_code == 2, (args, result.output)
        assert message in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.output


# --- output formats -----------------------------------------------------------------------------

STORM_SQL = ("SELECT line, ts, action, error, ok, latency_ms, [action, error] AS pair "
             "FROM requests WHERE file = $f AND session = $s ORDER BY line")


@pytest.fixture(scope="session")
def storm_rows(con) -> int:
    """Requests on the storm's session in the full bproxy log: browsing, the close, 1,200
    failures."""
    n = scalar(con, "SELECT count(*) FROM requests WHERE file = ? AND session = ?",
               [BPROXY, STORM["session"]])
    assert n > STORM["requests"] + 100
    return n


def storm_args(sample, *more):
    return ["sql", STORM_SQL, "--store", sample.root, "--param", f"f={BPROXY}",
            "--param", "s=6afr3v", *more]


def test_table_output_is_text_not_markup(sample):
    result = run("sql", "SELECT '[bold red]boom[/]' AS \"[i]col[/i]\", NULL AS nothing, "
                 "42 AS n", "--store", sample.root)
    assert result.exit_code == 0
    assert "[bold red]boom[/]" in result.stdout and "[i]col[/i]" in result.stdout
    assert "NULL" in result.stdout and "1 row" in result.stdout


def test_table_output_limits_rows(sample, storm_rows):
    result = run(*storm_args(sample))
    assert result.exit_code == 0
    body = [line for line in result.stdout.splitlines() if "│" in line]
    assert len(body) == sqlcmd.TABLE_LIMIT
    assert f"{storm_rows:,} rows (first 50 shown" in result.stdout
    few_sql = STORM_SQL.replace("ORDER BY line", "AND line BETWEEN 1200 AND 1400 ORDER BY line")
    all_rows = run("sql", few_sql, "--store", sample.root, "--param", f"f={BPROXY}",
                   "--param", "s=6afr3v", "--limit", "0")
    n = len([line for line in all_rows.stdout.splitlines() if "│" in line])
    assert n > sqlcmd.TABLE_LIMIT
    assert f"{n:,} rows" in all_rows.stdout and "first" not in all_rows.stdout
    assert "SESSION_NOT_FOUND" in all_rows.stdout
    few = run(*storm_args(sample, "--limit", "3"))
    assert "first 3 shown" in few.stdout


def test_csv_output(sample, storm_rows, tmp_path):
    result = run(*storm_args(sample, "--format", "csv"))
    assert result.exit_code == 0
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert len(rows) == storm_rows
    assert rows[0].keys() == {"line", "ts", "action", "error", "ok", "latency_ms", "pair"}
    fails = [r for r in rows if r["error"] == "SESSION_NOT_FOUND"]
    assert len(fails) == STORM["requests"] and fails[0]["line"] == str(STORM["first_line"])
    assert fails[0]["ts"] == "2026-06-18 23:42:21.514" and fails[0]["ok"] == "false"
    assert json.loads(fails[0]["pair"]) == ["scroll", "SESSION_NOT_FOUND"]
    assert rows[0]["error"] == ""  # NULL is empty
    out = tmp_path / "storm.csv"
    written = run(*storm_args(sample, "--format", "csv", "--out", out, "--limit", "10"))
    assert written.exit_code == 0 and written.stdout == ""
    assert len(out.read_text().splitlines()) == 11


def test_json_output(sample, storm_rows):
    result = run(*storm_args(sample, "--format", "json"))
    assert result.exit_code == 0
    rows = json.loads(result.stdout)
    assert len(rows) == storm_rows
    fail = next(r for r in rows if r["line"] == STORM["first_line"])
    assert fail == {"line": 1213, "ts": "2026-06-18T23:42:21.514000", "action": "scroll",
                    "error": "SESSION_NOT_FOUND", "ok": False, "latency_ms": 0.0,
                    "pair": ["scroll", "SESSION_NOT_FOUND"]}
    empty = run("sql", "SELECT 1 AS a WHERE false", "--store", sample.root, "--format", "json")
    assert json.loads(empty.stdout) == []


def test_jsonl_output(sample):
    result = run(*storm_args(sample, "--format", "jsonl", "--limit", "5"))
    assert result.exit_code == 0
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == 5 and rows[0]["line"] < rows[-1]["line"]
    assert isinstance(rows[0]["latency_ms"], float)
    for fmt in ("jsonl", "csv", "table"):  # a limit beyond the result, and one exactly at it
        for limit in ("3", "100"):
            small = run("sql", "SELECT * FROM range(3) t(i)", "--store", sample.root,
                        "--format", fmt, "--limit", limit)
            assert small.exit_code == 0, small.output
            assert "2" in small.stdout and "first" not in small.stdout


def test_parquet_output(sample, storm_rows, tmp_path):
    out = tmp_path / "storm.parquet"
    result = run(*storm_args(sample, "--format", "parquet", "--out", out))
    assert result.exit_code == 0, result.output
    table = pq.read_table(out)
    assert table.num_rows == storm_rows
    assert table.schema.field("ts").type == pa.timestamp("us")
    assert table.schema.field("pair").type == pa.list_(pa.string())
    assert table.column("error").to_pylist().count("SESSION_NOT_FOUND") == STORM["requests"]
    capped = tmp_path / "capped.parquet"
    assert run(*storm_args(sample, "--format", "parquet", "--out", capped,
                           "--limit", "100")).exit_code == 0
    assert pq.read_table(capped).num_rows == 100
    assert not list(tmp_path.glob(".*loophound-tmp"))


def test_table_to_a_file(sample, tmp_path):
    out = tmp_path / "t.txt"
    result = run("query", "after_close", "--store", sample.root, "--out", out)
    assert result.exit_code == 0 and result.stdout == ""
    text = out.read_text()
    assert "6afr3v" in text and "1209" in text and "\x1b[" not in text


def test_sql_from_a_file_and_from_standard_input(sample, tmp_path):
    script = tmp_path / "q.sql"
    script.write_text("-- how many failures\nSELECT count(*) AS n FROM requests\n"
                      "WHERE error = 'SESSION_NOT_FOUND';\n")
    by_file = run("sql", "--file", script, "--store", sample.root, "--format", "csv")
    piped = run("sql", "--store", sample.root, "--format", "csv", input=script.read_text())
    dash = run("sql", "-", "--store", sample.root, "--format", "csv", input=script.read_text())
    for result in (by_file, piped, dash):
        assert result.exit_code == 0, result.output
        assert result.stdout == "n\n2400\n"


def test_sql_params_are_bound(sample):
    ok = run("sql", "SELECT count(*) AS n FROM requests WHERE session = $s AND error = $e",
             "--store", sample.root, "--param", "s=6afr3v", "--param", "e=SESSION_NOT_FOUND",
             "--format", "csv")
    assert ok.stdout == "n\n2400\n"
    hostile = run("sql", "SELECT count(*) AS n FROM requests WHERE session = $s", "--store",
                  sample.root, "--param", "s=x' OR '1'='1", "--format", "csv")
    assert hostile.stdout == "n\n0\n"
    typed = run("sql", "SELECT $n::INT + 1 AS m", "--store", sample.root, "--param", "n=41",
                "--format", "csv")
    assert typed.stdout == "m\n42\n"


# --- the query command --------------------------------------------------------------------------


def test_query_list(sample):
    result = run("query", "--list")
    assert result.exit_code == 0
    for name in REQUIRED_QUERIES:
        assert name in result.stdout
    assert "same_file=true" in result.stdout.replace("\n", "")


def test_query_runs_with_params_and_formats(sample):
    result = run("query", "after_close", "--store", sample.root, "--param", f"session="
                 f"{STORM['session']}", "--format", "json")
    assert result.exit_code == 0, result.output
    rows = {r["file"]: r for r in json.loads(result.stdout)}
    assert rows[BPROXY]["close_line"] == 1209 and rows[BPROXY]["events_after"] == 1200
    jsonl = run("query", "top_errors", "--store", sample.root, "-p", "limit=2", "--format",
                "jsonl")
    assert [json.loads(x)["error"] for x in jsonl.stdout.splitlines()][0] == "SESSION_NOT_FOUND"
    assert len(jsonl.stdout.splitlines()) == 2


def test_query_sql_shows_the_query_without_a_store(tmp_path):
    result = run("query", "top_errors", "--sql", "--param", "limit=3", "--store",
                 tmp_path / "nowhere")
    assert result.exit_code == 0
    assert "-- $limit (int) = 3" in result.stdout and "LIMIT $limit;" in result.stdout


# --- the shell --------------------------------------------------------------------------------


def test_shell_piped(sample):
    script = "\n".join([
        "SELECT count(*) AS n",
        "FROM requests",
        "WHERE error = 'SESSION_NOT_FOUND';",
        ".tables",
        ".schema requests",
        ".queries",
        ".query after_close session=6afr3v",
        "SELECT 'a;b' AS \"x;y\"; SELECT 7 AS seven;",
        ".format csv",
        "SELECT 1 AS one;",
        ".help",
        ".quit",
        "SELECT 'never run' AS after_quit;",
    ]) + "\n"
    result = run("shell", "--store", sample.root, input=script)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "2400" in out
    assert "finding_events" in out and "event_costs" in out and "_inputs" not in out
    assert "response_line" in out and "latency_ms" in out
    assert "cost_by_actor_and_model" in out
    assert "1209" in out and "1213" in out
    assert "a;b" in out and "seven" in out
    assert "one\n1\n" in out
    assert ".schema NAME" in out
    assert "never run" not in out
    assert "lh>" not in out  # no prompts when input is piped


def test_shell_keeps_going_after_errors_and_exits_2(sample):
    before = tree_digest(sample.root)
    script = ("SELECT * FORM events;\nDROP VIEW events;\n.schema nothing\n.bogus\n"
              "SELECT count(*) AS n FROM events;\nSELECT 'no semicolon at the end' AS tail")
    result = run("shell", "--store", sample.root, input=script)
    assert result.exit_code == 2
    assert "LINE 1: SELECT * FORM events" in result.stderr
    assert "refused" in result.stderr and "no view named 'nothing'" in result.stderr
    assert "unknown command .bogus" in result.stderr
    assert "no semicolon at the end" in result.stdout
    assert "Traceback" not in result.output
    assert tree_digest(sample.root) == before


def test_statement_completion():
    done = sqlcmd._statement_complete
    assert done("SELECT 1;\n")
    assert not done("SELECT 1\n")
    assert not done("SELECT ';\n")
    assert done("SELECT ';' AS x;\n")
    assert not done("SELECT 1 -- ;\n")
    assert not done("SELECT 1 /* ; */ +\n")
    assert done('SELECT 1 AS "a;";')


def test_shell_history_is_saved(tmp_path, monkeypatch):
    readline = pytest.importorskip("readline")
    path = tmp_path / "history"
    monkeypatch.setenv("LOOPHOUND_HISTORY", str(path))
    assert sqlcmd._history_file() == path
    save = sqlcmd._enable_history(path)
    readline.add_history("SELECT 42;")
    save()
    assert "SELECT 42;" in path.read_text()


# --- a bare folder of Parquet files -----------------------------------------------------------


def test_bare_parquet_folder_answers_like_the_store(sample, bare, con):
    assert Store(bare).is_bare
    shared = queries.readonly_connection(Store(bare))
    for name in queries.names():
        assert records(shared, name) == records(con, name), name
    for view in queries.VIEWS:
        assert scalar(shared, f"SELECT count(*) FROM {view}") == scalar(
            con, f"SELECT count(*) FROM {view}"), view
    # the catalog was not shared, but the last scan saved the inputs it saw beside its run
    inputs = "SELECT path, sha256, bytes FROM inputs ORDER BY path"
    assert shared.execute(inputs).fetchall() == con.execute(inputs).fetchall() != []


def test_bare_parquet_folder_from_the_command_line(sample, bare):
    before = tree_digest(bare)
    result = run("query", "after_close", "--store", bare, "--format", "csv")
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert {r["close_line"] for r in rows} == {"1209", "592"}
    refused = run("sql", f"COPY (SELECT 1) TO '{sorted((bare / 'events').glob('*'))[0]}'",
                  "--store", bare)
    assert refused.exit_code == 2
    shell = run("shell", "--store", bare, input="SELECT count(*) AS n FROM events;\n")
    n = scalar(queries.readonly_connection(sample.store), "SELECT count(*) FROM events")
    assert shell.exit_code == 0 and f" {n} " in shell.stdout
    assert tree_digest(bare) == before


def test_requests_carry_their_responses_outcome(con):
    """`requests` reads a request's outcome from its own row, not from a join with its
    response (a one-line query would pay for joining every response): ingest must have
    written each response's outcome on the request it answers, everywhere."""
    answered, differ = con.execute("""
        SELECT count(*), count(*) FILTER (WHERE q.ok IS DISTINCT FROM coalesce(q.ok, r.ok)
                                          OR q.error IS DISTINCT FROM coalesce(q.error, r.error)
                                          OR q.latency_ms IS DISTINCT FROM
                                             coalesce(q.latency_ms, r.latency_ms))
        FROM events q JOIN events r ON r.answers = q.event_id AND r.kind = 'response'
        WHERE q.kind = 'request'""").fetchone()
    assert answered > 3000 and differ == 0
    plan = con.execute("EXPLAIN SELECT count(*) FROM requests WHERE error = 'x'").fetchall()
    assert "answers" not in plan[0][1]  # the answering lines are not read for it
    assert scalar(con, "SELECT count(*) FROM requests WHERE response_ts IS NOT NULL") > 3000


# --- what `loophound sql` imports ---------------------------------------------------------------

# Libraries and modules a one-line query has no use for: each costs start-up time (numpy and the
# formats alone were 0.38 s of a 0.93 s query), so the command line must not load them for it.
NOT_FOR_SQL = ("numpy", "polars", "pandas", "pyarrow", "plotly", "sklearn", "scipy",
               "loophound.formats", "loophound.ingest", "loophound.detect", "loophound.scan",
               "loophound.report", "loophound.guards", "loophound.synth", "loophound.api")

IMPORTS_OF = """
import json, sys
from loophound.cli import run
out = sys.argv.pop(1)
try:
    run()
except SystemExit as exc:
    code = exc.code
with open(out, "w") as f:
    json.dump({"exit": code, "modules": sorted(sys.modules)}, f)
"""


def imports_of(args: list[str], tmp_path: Path) -> tuple[int, set[str], str]:
    """Run `loophound ARGS` in a new interpreter: (exit status, the modules it had imported at
    the end, standard output)."""
    import subprocess
    import sys

    import loophound

    listing = tmp_path / "modules.json"
    env = dict(os.environ, PYTHONPATH=str(Path(loophound.__file__).parents[1]))
    done = subprocess.run([sys.executable, "-c", IMPORTS_OF, str(listing), *args], env=env,
                          capture_output=True, text=True, timeout=120)
    found = json.loads(listing.read_text())
    return found["exit"], set(found["modules"]), done.stdout


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


@pytest.mark.parametrize("fmt", ["csv", "table"])
def test_the_sql_command_imports_only_what_a_query_needs(sample, tmp_path, fmt):
    code, modules, stdout = imports_of(
        ["sql", "SELECT count(*) AS n FROM requests WHERE error = 'SESSION_NOT_FOUND'",
         "--store", str(sample.root), "--format", fmt], tmp_path)
    n = scalar(queries.readonly_connection(sample.store),
               "SELECT count(*) FROM requests WHERE error = 'SESSION_NOT_FOUND'")
    assert code in (0, None) and n > 0 and str(n) in stdout.split(), stdout
    assert loaded(modules, NOT_FOR_SQL) == []


def test_the_preset_help_names_every_shipped_preset_without_importing_the_guards():
    from loophound.commands.guards import preset_files
    from loophound.guards import preset_names

    assert preset_files() == preset_names() and "adopted" in preset_files()


def test_every_command_is_listed_and_its_help_complete_without_its_modules(tmp_path):
    """The command line lists every command without importing what the commands do."""
    code, modules, stdout = imports_of(["--help"], tmp_path)
    assert code in (0, None)
    for command in ("ingest", "scan", "sql", "shell", "query", "report", "investigate",
                    "watch", "synth", "guards", "verify", "formats"):
        assert command in stdout, command
    assert loaded(modules, NOT_FOR_SQL) == []


# --- the README fragment ----------------------------------------------------------------------


def test_docs_cover_every_view_column_and_query(con):
    doc = (ROOT / "docs" / "sql.md").read_text()
    for view in queries.VIEWS:
        assert f"`{view}`" in doc, view
        for (column,) in con.execute("SELECT column_name FROM duckdb_columns() WHERE "
                                     "table_name = ?", [view]).fetchall():
            assert f"`{column}`" in doc or f" {column}," in doc, (view, column)
    for q in queries.list_queries():
        assert f"#### `{q.name}`: {q.title}" in doc, q.name
        for p in q.params:
            assert f"| `{p.name}` | {p.type} |" in doc, (q.name, p.name)
    for command in ("loophound sql", "loophound shell", "loophound query"):
        assert command in doc


def test_a_message_id_two_formats_share_is_two_messages_everywhere(tmp_path):
    """A message is stored twice when both parties keep it (sven, one copy per node), and only
    its own format says so: a generic log that happens to reuse a sven message id is another
    message. The scan's totals and the named queries count it alike."""
    from loophound import api

    node = tmp_path / "node-a"
    shutil.copytree(SAMPLES / "sven" / "node-a", node)
    first = json.loads(next(node.glob("peers/*.jsonl")).read_text().splitlines()[0])
    other = tmp_path / "relay.jsonl"
    other.write_text(json.dumps({"ts": first["timestamp"], "kind": "message", "actor": "relay",
                                 "target": "gw", "message_id": first["message_id"]}) + "\n")
    store = tmp_path / "store"
    api.ingest([str(node), str(other)], store)
    result = api.scan(store, save=False)
    totals = result.document["totals"]
    talkers = queries.records(result.con, "top_talkers", limit=1 << 30, no_actor=True)
    assert sum(r["events"] for r in talkers) == totals["events"]
    assert any(r["actor"] == "relay" and r["events"] == 1 for r in talkers)

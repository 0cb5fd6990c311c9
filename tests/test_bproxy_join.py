"""bproxy's join by request id: computed on the batch read once into Arrow (`_ById`), it must
write what the UPDATEs of `_update_by_id` write, in every case they cover: a request of this
batch or of an earlier one (stored), several files in one batch with the same ids, lines with
and without ids, and, where the UPDATE picks one of several matches, the UPDATE itself."""

from __future__ import annotations

import json
import random
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from loophound.formats import bproxy
from loophound.ingest import ingest
from loophound.schema import COLUMNS
from loophound.store import OUTCOME_COLUMNS, Store

NARROW = ["event_id", "line", "ts", "kind", "corr_id", "parent_id", "actor", "session",
          "action", "answers", "ok", "error", "latency_ms"]
TYPES = {c.name: c.sql_type for c in COLUMNS}
F1, F2 = 1 << 32, 2 << 32  # the event ids of files 1 and 2 start here


def _con(rows: list[dict], stored: list[dict]) -> duckdb.DuckDBPyConnection:
    """A connection as `finish` finds it: `batch` of `rows`, the views of what is stored
    (`stored`), and `late_outcomes`."""
    con = duckdb.connect()
    for name, data in (("batch", rows), ("stored", stored)):
        body = ", ".join(f"{c} {TYPES[c]}" for c in NARROW)
        con.execute(f"CREATE TEMP TABLE {name} ({body})")
        if data:
            con.register("_values", pa.Table.from_pylist(
                [{c: r.get(c) for c in NARROW} for r in data],
                schema=con.sql(f"FROM {name}").arrow().schema))
            con.execute(f"INSERT INTO {name} SELECT * FROM _values")
            con.unregister("_values")
    con.execute("CREATE VIEW stored_events AS SELECT * FROM stored")
    con.execute("CREATE VIEW recent_stored_events AS SELECT * FROM stored")
    con.execute(f"CREATE TEMP TABLE late_outcomes ({OUTCOME_COLUMNS})")
    return con


def _row(event_id: int, kind: str, corr_id: str | None, **fields) -> dict:
    return {"event_id": event_id, "line": event_id & 0xFFFFFFFF, "kind": kind,
            "corr_id": corr_id, **fields}


def _by_join(rows: list[dict], stored: list[dict]) -> tuple[list[tuple], list[tuple], bool]:
    """What `_join_by_id` returns for the rows of `batch` in Arrow, as rows in event order,
    the late outcomes it added, and whether it ran the UPDATEs to get them (in `batch`
    made of the rows, `_load`)."""
    con = _con(rows, stored)
    loaded, load = [], bproxy._load
    bproxy._load = lambda con, rows: (loaded.append(rows), load(con, rows))[-1]
    try:
        table = bproxy._join_by_id(con, con.sql("SELECT * FROM batch").to_arrow_table())
    finally:
        bproxy._load = load
    return (sorted(tuple(r.values()) for r in table.select(NARROW).to_pylist()),
            sorted(con.execute("SELECT * FROM late_outcomes").fetchall()), bool(loaded))


def _by_update(rows: list[dict], stored: list[dict]) -> tuple[list[tuple], list[tuple]]:
    """What the join by id wrote in `batch` before it was done in Arrow (its SQL, as it
    was), and the late outcomes."""
    con = _con(rows, stored)
    con.execute("""CREATE OR REPLACE TEMP TABLE _orphans AS
        SELECT DISTINCT corr_id FROM (
          SELECT event_id >> 32, corr_id FROM batch
          WHERE kind IN ('response', 'lifecycle') AND corr_id IS NOT NULL AND answers IS NULL
          EXCEPT SELECT event_id >> 32, corr_id FROM batch WHERE kind = 'request')""")
    earlier = bool(con.execute("SELECT count(*) FROM _orphans").fetchall()[0][0])
    if earlier:
        bproxy._find_requests(con)
    bproxy._update_by_id(con, earlier)
    return (sorted(con.execute(f"SELECT {', '.join(NARROW)} FROM batch").fetchall()),
            sorted(con.execute("SELECT * FROM late_outcomes").fetchall()))


def _as_dicts(rows: list[tuple]) -> dict[int, dict]:
    return {r[0]: dict(zip(NARROW, r, strict=True)) for r in rows}


def test_each_line_takes_its_own_files_request_and_each_request_its_response():
    """Two files in one batch with the same ids; a request stored by an earlier batch; an
    answer whose request is nowhere; a line without an id; a lifecycle line (it answers but
    gives no outcome); an actor the line names itself is kept."""
    rows = [
        _row(F1 + 1, "request", "a", actor="1:x", session="s1", action="scroll"),
        _row(F2 + 1, "request", "a", actor="2:y", session="s2", action="click"),
        _row(F1 + 2, "lifecycle", "a"),
        _row(F2 + 2, "response", "a", actor="2:own", ok=False, error="E2", latency_ms=7.0),
        _row(F1 + 3, "response", "a", ok=True, latency_ms=3.0),
        _row(F1 + 4, "response", "b", ok=False, error="LATE", latency_ms=9.0),
        _row(F1 + 5, "response", "nowhere", ok=True),
        _row(F1 + 6, "connection", None, actor="c1"),
        _row(F1 + 7, "request", "c", actor="1:x", session="s1", action="noop"),
    ]
    stored = [_row(F1 + 0, "request", "b", actor="1:z", session="s0", action="navigate"),
              _row(F2 + 0, "request", "b", actor="2:z", session="t0", action="type")]
    got, late, updated = _by_join(rows, stored)
    assert not updated  # joined in Arrow, not by the UPDATEs
    by_id = _as_dicts(got)
    assert {e: (r["action"], r["session"], r["actor"], r["answers"]) for e, r in by_id.items()
            if r["kind"] != "request"} == {
        F1 + 2: ("scroll", "s1", "1:x", F1 + 1), F2 + 2: ("click", "s2", "2:own", F2 + 1),
        F1 + 3: ("scroll", "s1", "1:x", F1 + 1), F1 + 4: ("navigate", "s0", "1:z", F1 + 0),
        F1 + 5: (None, None, None, None), F1 + 6: (None, None, "c1", None)}
    assert {e: (r["ok"], r["error"], r["latency_ms"]) for e, r in by_id.items()
            if r["kind"] == "request"} == {
        F1 + 1: (True, None, 3.0), F2 + 1: (False, "E2", 7.0), F1 + 7: (None, None, None)}
    assert late == [(F1 + 0, False, "LATE", 9.0)]  # the stored request's outcome, beside it
    assert (got, late) == _by_update(rows, stored)


@pytest.mark.parametrize("case", ["answered twice", "id used twice", "stored twice"])
def test_where_the_update_picks_one_of_several_it_is_the_update_that_runs(case):
    """A request answered by two responses, two requests under one id, or a stored request
    found twice: the UPDATE picks one as DuckDB meets them, so it runs, and gives what it
    gives."""
    rows = [_row(F1 + 1, "request", "a", action="scroll", session="s1", actor="1:x"),
            _row(F1 + 2, "response", "a", ok=True, latency_ms=1.0)]
    stored = []
    if case == "answered twice":
        rows.append(_row(F1 + 3, "response", "a", ok=False, error="E", latency_ms=2.0))
    elif case == "id used twice":
        rows.append(_row(F1 + 3, "request", "a", action="click", session="s2", actor="1:y"))
    else:
        rows.append(_row(F1 + 3, "response", "b", ok=False))
        stored = [_row(F1 + 0, "request", "b", action="navigate"),
                  _row(F1 + 9, "request", "b", action="type")]
    got, late, updated = _by_join(rows, stored)
    assert updated
    by_id = _as_dicts(got)
    assert by_id[F1 + 2]["answers"] in (F1 + 1, F1 + 3)  # the UPDATE's pick
    if case == "answered twice":
        assert (by_id[F1 + 1]["ok"], by_id[F1 + 1]["latency_ms"]) in ((True, 1.0), (False, 2.0))
    if case == "stored twice":
        assert (by_id[F1 + 3]["answers"], by_id[F1 + 3]["action"]) in (
            (F1 + 0, "navigate"), (F1 + 9, "type"))
        assert late == [(F1 + 0, False, None, None), (F1 + 9, False, None, None)]  # both found


def _random_rows(rng: random.Random, files: list[int], pool: list[str], n: int, start: int,
                 kinds: list[str]) -> list[dict]:
    return [_row(rng.choice(files) + start + i, rng.choice(kinds),
                 rng.choice(pool) if rng.random() < 0.9 else None,
                 actor=rng.choice([None, "1:a", "2:b"]), session=rng.choice([None, "s", ""]),
                 action=rng.choice([None, "scroll", "click"]), ok=rng.choice([None, True, False]),
                 error=rng.choice([None, "E"]), latency_ms=rng.choice([None, 1.5, 30.0]),
                 answers=rng.choice([None, 5])) for i in range(n)]


def _count(rows: list[dict], kinds: set[str]) -> dict[tuple, int]:
    """How many lines of `kinds` each (file, id) has."""
    out: dict[tuple, int] = {}
    for r in rows:
        if r["kind"] in kinds and r["corr_id"] is not None:
            key = (r["event_id"] >> 32, r["corr_id"])
            out[key] = out.get(key, 0) + 1
    return out


def _several_match(batch: list[dict], stored: list[dict]) -> bool:
    """Whether an answering line of `batch` meets several requests (of the batch, or stored
    ones of an id no request of the batch has and a line not joined yet names), or a
    request several responses."""
    asked, answering = _count(batch, {"request"}), _count(batch, {"response", "lifecycle"})
    unjoined = _count([r for r in batch if r.get("answers") is None], {"response", "lifecycle"})
    orphans = {c for (f, c) in unjoined if (f, c) not in asked}
    for key, n in _count([r for r in stored if r["corr_id"] in orphans], {"request"}).items():
        asked[key] = asked.get(key, 0) + n
    told = _count(batch, {"response"})
    return any(asked.get(k, 0) > 1 for k in answering) or any(told.get(k, 0) > 1 for k in asked)


def test_random_batches_are_joined_as_the_updates_join_them():
    """Batches of one or two files, ids unique or not, answers to stored requests or to
    none, lines without ids: the Arrow join gives the UPDATEs' rows and late outcomes
    wherever it is used, and is used wherever no line meets several matches."""
    used = 0
    for seed in range(24):
        rng = random.Random(seed)
        files = [F1] if seed % 2 else [F1, F2]
        pool = [f"id{i}" for i in range(rng.choice([8, 400, 4000]))]
        stored = _random_rows(rng, files, pool, 60, 1000, ["request"])
        batch = _random_rows(rng, files, pool, rng.choice([20, 200]), 2000,
                             ["request", "response", "lifecycle", "connection"])
        got, late, updated = _by_join(batch, stored)
        assert updated == _several_match(batch, stored), seed
        if not updated:
            used += 1
            assert (got, late) == _by_update(batch, stored), seed
    assert 6 <= used <= 20  # both ways taken


def _pino(t: int, **fields) -> str:
    return json.dumps({"level": 30, "time": 1781826140544 + t, "pid": 7, "hostname": "h",
                       **fields}, separators=(",", ":")) + "\n"


def test_small_files_read_together_join_only_within_each_file(tmp_path):
    """Small files are mapped in one batch: the same request id in two of them names two
    requests, each answered in its own file."""
    logs = tmp_path / "logs"
    logs.mkdir()
    for name, action in (("a.log", "scroll"), ("b.log", "click")):
        (logs / name).write_text(
            _pino(0, event="received", id="r1", action=action, session=name, ownerHash="o")
            + _pino(5, event="response", id="r1", ok=name == "a.log", elapsed_ms=5))
    store = Store(tmp_path / "st")
    ingest([str(logs)], store)
    con = store.connect()
    assert con.execute("""SELECT e.file, e.kind, e.action, e.session, e.ok, r.file
        FROM events e LEFT JOIN events r ON r.event_id = e.answers
        ORDER BY e.file, e.line""").fetchall() == [
        (str(logs / "a.log"), "request", "scroll", "a.log", True, None),
        (str(logs / "a.log"), "response", "scroll", "a.log", True, str(logs / "a.log")),
        (str(logs / "b.log"), "request", "click", "b.log", False, None),
        (str(logs / "b.log"), "response", "click", "b.log", False, str(logs / "b.log"))]


def test_small_files_read_together_give_what_each_read_alone_gives(tmp_path, monkeypatch):
    """Files read together in one batch, where the join runs as UPDATEs in `batch` (lines
    with ids and lines without in one batch; a request answered twice): they are mapped
    together (their input ids are the first two, not ids taken by reading them again
    alone), and give the events each gives read alone."""
    from loophound import ingest as ingest_module

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.log").write_text(  # ids, and a request answered twice
        _pino(0, event="received", id="r1", action="scroll", session="s", ownerHash="o")
        + _pino(5, event="response", id="r1", ok=True, elapsed_ms=5)
        + _pino(9, event="response", id="r1", ok=False, error_code="E", elapsed_ms=9))
    (logs / "b.log").write_text(  # no ids
        _pino(0, event="received", action="click", session="t", ownerHash="p")
        + _pino(7, event="response", ok=False, error_code="X", elapsed_ms=7, ownerHash="p"))

    def read(root: Path) -> list[tuple]:
        store = Store(root)
        ingest([str(logs)], store)
        return store.connect().execute("SELECT * FROM events ORDER BY event_id").fetchall()

    together = read(tmp_path / "together")
    assert {r[0] >> 32 for r in together} == {1, 2}
    monkeypatch.setattr(ingest_module, "GROUP_FILE_BYTES", 0)
    assert read(tmp_path / "alone") == together
    by_line = {(r[0] >> 32, r[3]): r for r in together}
    columns = [c.name for c in COLUMNS]
    answers, ok = columns.index("answers"), columns.index("ok")
    assert by_line[(1, 2)][answers] == by_line[(1, 3)][answers] == by_line[(1, 1)][0]
    assert by_line[(2, 2)][answers] == by_line[(2, 1)][0] and by_line[(2, 1)][ok] is False


@pytest.mark.parametrize("name", ["reqId", "no_id"])
def test_chunks_and_runs_joined_in_arrow_give_what_the_updates_give(tmp_path, monkeypatch,
                                                                    name):
    """A log read in small chunks (answers to requests of earlier chunks, lines held back),
    its first half in one run and the rest in the next (answers to stored requests, late
    outcomes): the events and outcomes are those of reads that join with the UPDATEs (a log
    without ids: its lines placed, then joined by the `corr_id` placing gave them)."""
    from loophound import ingest as ingest_module
    from loophound.synth.bproxy_variants import variant, write_bproxy_variant

    monkeypatch.setattr(ingest_module, "GROUP_FILE_BYTES", 0)  # read alone, in small chunks
    monkeypatch.setattr(ingest_module, "CHUNK_BYTES", 16 * 1024)
    monkeypatch.setattr(ingest_module, "HOLD_LINES", 20)
    source = tmp_path / "source.log"
    write_bproxy_variant(source, variant(name), storm_requests=300, storm_hours=30 / 3600,
                         session_minutes=1.0)
    whole = source.read_bytes()
    half = whole[:whole.index(b"\n", len(whole) // 2) + 1]

    def read(root: Path) -> tuple[list, list]:
        log = root / "daemon.log"
        root.mkdir()
        log.write_bytes(half)
        store = Store(root / "st")
        ingest([str(log)], store)
        log.write_bytes(whole)
        ingest([str(log)], store)
        con = store.connect()
        return (con.execute("SELECT * EXCLUDE (file) FROM events ORDER BY event_id").fetchall(),
                con.execute("SELECT * EXCLUDE (file) FROM requests ORDER BY event_id").fetchall())

    in_arrow = read(tmp_path / "arrow")
    monkeypatch.setattr(bproxy._ById, "joined", lambda self, found: None)
    monkeypatch.setattr(bproxy._Placed, "exact", lambda self, con: False)  # placed: joined by id
    by_update = read(tmp_path / "update")
    assert len(in_arrow[0]) > 1000 and in_arrow == by_update


def test_the_line_a_corr_id_names_and_the_ms_of_a_time_are_duckdbs():
    """Placing reads, of each line's `corr_id`, the line it names ('L' + a line, as placing
    writes it) and, of its time, the whole ms: computed in Python and numpy as DuckDB's SQL
    gives them, odd ids and times before 1970 included."""
    ids = ["L12", "L012", "L-5", "L-0", "L+5", "L 5", "L5 ", "L", "L0", "l12", "x", None, "L1_000",
           "L9223372036854775807", "L9223372036854775808", "L-9223372036854775808", "L١٢",
           "LL1", "L1.0", "L1e3"]
    con = duckdb.connect()
    con.register("_ids", pa.table({"corr_id": pa.array(ids, pa.string())}))
    sql = con.execute("""SELECT CASE WHEN corr_id[1] = 'L' AND 'L' || TRY_CAST(corr_id[2:] AS
        BIGINT) = corr_id THEN TRY_CAST(corr_id[2:] AS BIGINT) END FROM _ids""").fetchall()
    assert bproxy._named(pa.chunked_array([pa.array(ids, pa.string())])).to_pylist() == [
        r[0] for r in sql]
    assert [r[0] for r in sql][:4] == [12, None, -5, None]
    times = con.execute(f"""SELECT ts, coalesce(CAST(epoch_ms(ts) AS BIGINT), {bproxy._NO_TIME})
        FROM (SELECT make_timestamp(us) AS ts FROM (VALUES (1400), (1500), (2500), (-1500),
              (-1400), (-500), (499), (-499), (999999), (1781826020544000), (NULL)) t(us))"""
                        ).fetchall()
    ts = pa.chunked_array([pa.array([t for t, _ in times], pa.timestamp("us"))])
    assert bproxy._epoch_ms(ts).tolist() == [ms for _, ms in times] == [
        1, 2, 3, -2, -1, -1, 0, 0, 1000, 1781826020544, bproxy._NO_TIME]

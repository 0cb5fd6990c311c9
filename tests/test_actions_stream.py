"""The stuck detectors' sequences are read a chunk of whole groups at a time (Python holds
a chunk or the largest group): the pieces must be exactly the sequences read whole and
sorted at once, as they were before, and the findings must not depend on the chunk size."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import duckdb
import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings as settings_
from hypothesis import strategies as st

from loophound import db
from loophound.detect import actions as ac
from loophound.detect import alternating_action as aa
from loophound.detect import repeated_action as ra
from loophound.detect import run_detectors, settings
from loophound.ingest import ingest
from loophound.normalise import mask_sql
from loophound.store import Store

SAMPLES = Path(__file__).resolve().parents[1] / "sample_logs"
# sessions of one actor and of several (messages to the actor, others' calls between)
SECTIONS = ("bproxy", "sven", "claude-code", "codex")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Store:
    st = Store(tmp_path_factory.mktemp("seq") / "st")
    ingest([str(SAMPLES / s) for s in SECTIONS], st)
    return st


# the candidates as they were chosen before they were read in chunks
CANDIDATES_BEFORE = """
SELECT actor, session, row_number() OVER (ORDER BY actor, session NULLS FIRST) AS g
FROM (SELECT DISTINCT actor, session FROM (
  SELECT actor, session FROM events
  WHERE list_contains($kinds, kind) AND ts IS NOT NULL AND actor IS NOT NULL
    AND action_key IS NOT NULL
  GROUP BY actor, session, action_key, result_key, ok, error
  HAVING count(*) >= 2))
"""


# as before the arguments were masked once each: every call's masked in SQL
SEQUENCE_BEFORE = ac.SEQUENCE.replace(
    "hash(e.args) AS args_hash",
    f"hash(CASE WHEN e.args IS NOT NULL THEN {mask_sql('e.args', numbers=False)} END) AS loose")


def _whole(con: duckdb.DuckDBPyConnection) -> dict[str, np.ndarray]:
    """The sequences as before the pieces: every row at once, sorted in numpy."""
    kinds = list(ac.ACTION_KINDS)
    found = con.sql(CANDIDATES_BEFORE, params={"kinds": kinds}).to_arrow_table()
    con.register("_stuck_cand", found)
    try:
        table = con.sql(SEQUENCE_BEFORE, params={"kinds": kinds, "told": list(ac.TOLD_KINDS),
                                             "lo": 1, "hi": found.num_rows}).to_arrow_table()
    finally:
        con.unregister("_stuck_cand")
    g, t, eid = (db.arrow_numpy(table[c]) for c in ("g", "t", "event_id"))
    order = np.lexsort((eid, t, g))
    own = db.arrow_numpy(table["own"])[order].astype(bool)
    told = db.arrow_numpy(table["told"])[order].astype(bool)
    idx = np.flatnonzero(own)
    g, t, eid = g[order], t[order], eid[order]
    out = {c: db.arrow_numpy(table[c], unused_nulls=True)[order[idx]]
           for c in ("akey", "fkey", "known", "erred", "loose")}
    known = out["known"].astype(bool)
    prev = ac.anchors(g, own, told)
    has = prev >= 0
    at = np.maximum(prev, 0)
    return out | {"g": g[idx], "t": t[idx], "event_id": eid[idx],
                  "cut": ac.interruptions(g, own, told, known),
                  "before_ms": np.where(has, t[at].astype(float), np.nan),
                  "before_call": np.where(has & own[at], eid[at], -1)}


def _streamed(con: duckdb.DuckDBPyConnection, chunk_rows: int) -> tuple[dict, list]:
    pieces = list(ac.pieces(con, chunk_rows))
    cols = {c: np.concatenate([getattr(p, c) for p in pieces])
            for c in ("g", "t", "event_id", "akey", "fkey", "known", "erred", "loose", "cut")}
    bounds = [p.bounds(i, i) for p in pieces for i in range(len(p))]
    cols["before_ms"] = np.array([b.before_ms for b in bounds])
    cols["before_call"] = np.array([b.before_call for b in bounds])
    return cols, pieces


@pytest.mark.parametrize("chunk_rows", [5, 64, 100_000])
def test_the_pieces_are_the_sequences_read_whole(store, chunk_rows):
    whole = _whole(store.connect())
    assert len(whole["t"]) > 300 and len(np.unique(whole["g"])) > 10
    assert not whole["cut"].all() and whole["cut"][1:].sum() > len(np.unique(whole["g"]))
    streamed, pieces = _streamed(store.connect(), chunk_rows)
    # sessions with others' rows (the general path); in small chunks, a group each, also
    # sessions of the actor alone (their rows as read, no copies)
    kinds = {p.pos is None for p in pieces}
    assert kinds == {True, False} if chunk_rows == 5 else False in kinds
    assert len(pieces) == len(set(whole["g"])) if chunk_rows == 5 else len(pieces) > 1 \
        if chunk_rows == 64 else len(pieces) == 1
    assert streamed.keys() == whole.keys()
    for c, values in whole.items():
        assert np.array_equal(streamed[c], values.astype(streamed[c].dtype), equal_nan=True), c


def test_the_findings_do_not_depend_on_the_chunk_size(store, monkeypatch):
    def found() -> list:
        return [(f.key, f.severity, f.summary, f.claim_params) for f in
                run_detectors(store.connect(), settings(),
                              ["repeated_action", "alternating_action"])]

    default = found()
    assert {k.split("|")[0] for k, *_ in default} and len(default) >= 4
    monkeypatch.setattr(ac, "CHUNK_ROWS", 3)
    assert found() == default


def test_one_pass_serves_both_detectors(store, monkeypatch):
    """Each detector's `prepare` asks for its search; the first to measure runs both in one
    pass over the sequences, the second reads what was found."""
    passes = []
    read = ac.pieces
    monkeypatch.setattr(ac, "pieces", lambda *a: passes.append(1) or read(*a))
    con, p = store.connect(), settings()
    ra.prepare(con, p["repeated_action"])
    aa.prepare(con, p["alternating_action"])
    runs, cycles = (ra.measure(con, p["repeated_action"]),
                    aa.measure(con, p["alternating_action"]))
    assert passes == [1] and runs and cycles
    alone = store.connect()  # without prepare (a detector run on its own), a pass each
    assert aa.measure(alone, p["alternating_action"]) == cycles and passes == [1, 1]


def test_anchors_at_some_positions_are_those_of_all():
    group = np.array([1, 1, 1, 1, 2, 2, 2, 2])
    own = np.array([True, False, True, True, False, True, False, True])
    told = np.array([False, True, False, False, True, False, False, False])
    every = ac.anchors(group, own, told)
    assert every.tolist() == [-1, 1, 2, 4, 5]
    at = np.flatnonzero(own)
    for i in range(len(at)):
        assert ac.anchors(group, own, told, at[i:i + 1]).tolist() == [every[i]]
    assert ac.anchors(group, np.zeros(8, bool), np.zeros(8, bool), np.array([3])).tolist() == [-1]


def test_a_session_of_the_actor_alone_is_cut_only_where_the_group_changes():
    group = np.array([1, 1, 2, 2, 2])
    every = np.ones(5, bool)
    assert ac.interruptions(group, every, ~every, every).tolist() == [True, False, True, False,
                                                                      False]
    # the same as the general rule with another party's row that interrupts nothing
    own = np.array([True, True, False, True, True, True])
    known = np.ones(5, bool)
    assert ac.interruptions(np.array([1, 1, 1, 2, 2, 2]), own, np.zeros(6, bool),
                            known).tolist() == [True, False, True, False, False]


def test_chunks_of_groups_hold_at_most_so_many_rows_or_one_group():
    assert ac.chunks([3, 4, 2, 9, 1, 1], 7) == [(1, 2), (3, 3), (4, 4), (5, 6)]
    assert ac.chunks([3, 4, 2], 100) == [(1, 3)]
    assert ac.chunks([5, 5], 1) == [(1, 1), (2, 2)]
    assert ac.chunks([], 10) == []


# ---------------------------------------------------------------------------------------------
# which groups are read: only those whose calls could hold a loop of a detector that asked


def _group(keys: list[int], failing: set[int], cut: list[bool]) -> ac.Sequences:
    """One (actor, session)'s calls, the i-th the call `keys[i]` (failed: in `failing`), a
    second apart, with something said to the actor before those where `cut` is true."""
    n = len(keys)
    g, t, eid = np.ones(n, dtype=np.int32), np.arange(n, dtype=np.int64) * 1000, np.arange(n)
    key = np.array(keys, dtype=np.uint64)
    own, told = np.ones(n, dtype=bool), np.zeros(n, dtype=bool)
    cuts = ac.interruptions(g, own, told, np.ones(n, dtype=bool)) | np.array(cut, dtype=bool)
    return ac.Sequences(
        groups={1: ("agent", "s1")}, g=g, t=t, event_id=eid, akey=key, fkey=key,
        known=np.ones(n, dtype=bool), erred=np.isin(key, list(failing)), loose=eid, cut=cuts,
        rows={"g": g, "t": t, "event_id": eid, "own": own, "told": told}, pos=None)


def _could(search: ac.Search, params, keys: list[int], failing: set[int]) -> bool:
    """CANDIDATES' condition for the group, as DuckDB evaluates it over its distinct calls."""
    counts = {k: keys.count(k) for k in set(keys)}
    con = duckdb.connect()
    con.execute("CREATE TABLE calls (k BIGINT, erred BOOLEAN)")
    con.executemany("INSERT INTO calls VALUES (?, ?)", [[n, k in failing] for k, n in counts.items()])
    return con.execute(f"SELECT max(k) >= 2 AND ({search.could(params)}) FROM calls").fetchone()[0]


@settings_(max_examples=300, deadline=None)
@given(keys=st.lists(st.integers(0, 3), min_size=1, max_size=24), failing=st.sets(st.integers(0, 3)),
       cut=st.lists(st.booleans(), min_size=24, max_size=24),
       min_cycles=st.sampled_from([0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, float("nan")]),
       min_count=st.integers(1, 5))
def test_a_group_that_is_not_read_holds_nothing_either_detector_would_find(
        keys, failing, cut, min_cycles, min_count):
    """A condition too strict would silently drop loops: wherever repeated_action or
    alternating_action finds something in a group, its condition holds for that group."""
    p = settings()
    runs_p = dataclasses.replace(p["repeated_action"], min_count=min_count)
    cycles_p = dataclasses.replace(p["alternating_action"], min_cycles=min_cycles)
    seq = _group(keys, failing, cut[:len(keys)])
    if ra.runs_in(seq, runs_p):
        assert _could(ra.SEARCH, runs_p, keys, failing)
    if aa.stretches_in(seq, cycles_p):
        assert _could(aa.SEARCH, cycles_p, keys, failing)


def test_a_storm_of_one_failing_call_is_read_by_neither():
    p = settings()
    storm = [9] * 50 + [1, 2, 3]  # one call failing 50 times, three others once each
    for search, params in ((ra.SEARCH, p["repeated_action"]), (aa.SEARCH, p["alternating_action"])):
        assert not _could(search, params, storm, {9})
    # the same calls succeeding are a run; two calls taking turns, a cycle
    assert _could(ra.SEARCH, p["repeated_action"], storm, set())
    assert _could(aa.SEARCH, p["alternating_action"], [1, 2] * 3, {1, 2})
    assert aa.stretches_in(_group([1, 2] * 3, {1, 2}, [False] * 6), p["alternating_action"])


def test_the_findings_are_those_of_every_group_read(store, monkeypatch):
    """On sessions of healthy and looping agents and the storm of the bproxy sample, reading
    only the groups that could hold a loop finds what reading all of them finds."""
    def found() -> list:
        return [(f.key, f.severity, f.summary, f.claim_params) for f in
                run_detectors(store.connect(), settings(), ["repeated_action", "alternating_action"])]

    def groups(could: str) -> int:
        return len(store.connect().sql(ac.CANDIDATES.format(could=could),
                                       params={"kinds": list(ac.ACTION_KINDS)}).fetchall())

    p = settings()
    could = f"({ra.could_repeat(p['repeated_action'])}) OR ({aa.could_cycle(p['alternating_action'])})"
    assert 0 < groups(could) < groups(ac.ANY_GROUP)
    chosen = found()
    assert len(chosen) >= 4
    monkeypatch.setattr(ra, "SEARCH", ac.Search(ra.runs_in, lambda p: ac.ANY_GROUP))
    monkeypatch.setattr(aa, "SEARCH", ac.Search(aa.stretches_in, lambda p: ac.ANY_GROUP))
    assert found() == chosen

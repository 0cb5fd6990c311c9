"""The stuck detectors' sequences are read a chunk of whole groups at a time (Python holds
a chunk or the largest group): the pieces must be exactly the sequences read whole and
sorted at once, as they were before, and the findings must not depend on the chunk size."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pytest

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

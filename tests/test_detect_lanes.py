"""Detectors run side by side (`run_detectors(lanes=...)`), each lane on a sibling connection
(`store.sibling`): the findings are those of one detector after another, in the registry's
order; the detectors of one lane share what they prepared; an error is raised."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import duckdb
import pytest

from loophound import detect
from loophound.detect import DETECTORS, run_detectors, settings
from loophound.detect import actions as ac
from loophound.detect.base import ONE_PASS_OVER_ACTIONS
from loophound.ingest import ingest
from loophound.store import Store, event_kinds, sibling
from loophound.synth import write_subagent_sessions

SAMPLES = Path(__file__).resolve().parents[1] / "sample_logs"


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Store:
    root = tmp_path_factory.mktemp("lanes")
    write_subagent_sessions(root / "subagents")  # the samples hold no runaway sub-agents
    st = Store(root / "st")
    ingest([str(SAMPLES), str(root / "subagents")], st)
    return st


def test_side_by_side_the_findings_are_those_of_one_lane(store):
    one = run_detectors(store.connect(), settings(), lanes=1)
    assert {f.detector for f in one} == set(DETECTORS)  # every detector finds something here
    for lanes in (2, 3):
        assert run_detectors(store.connect(), settings(), lanes=lanes) == one


def test_the_detectors_of_one_lane_share_one_pass(store, monkeypatch):
    passes = []
    read = ac.pieces
    monkeypatch.setattr(ac, "pieces", lambda *a: passes.append(1) or read(*a))
    found = run_detectors(store.connect(), settings(),
                          ["repeated_action", "alternating_action", "repeated_error"], lanes=2)
    assert passes == [1]
    assert {f.detector for f in found} == {"repeated_action", "alternating_action",
                                           "repeated_error"}


def test_a_sibling_reads_what_its_connection_reads(store, tmp_path):
    con = store.connect()
    con.execute("CREATE TEMP TABLE _odd (d DECIMAL(18, 6), t TIMESTAMP, l VARCHAR[])")
    con.execute("INSERT INTO _odd VALUES (1.5, TIMESTAMP '2026-01-02 03:04:05.678', ['a'])")
    kinds = event_kinds(con)
    before = con.execute("SELECT count(*), sum(line) FROM events").fetchall()
    # a later ingest commits more files: the sibling reads the files `con` reads
    (tmp_path / "more.log").write_bytes((SAMPLES / "bproxy" / "2026-06-18.log").read_bytes())
    ingest([str(tmp_path / "more.log")], store)
    other = sibling(con)
    try:
        assert other.execute("SELECT count(*), sum(line) FROM events").fetchall() == before
        assert store.connect().execute("SELECT count(*) FROM events").fetchall() != before[:1]
        for view in ("events", "requests", "inputs", "quarantine", "findings"):
            assert (other.execute(f"DESCRIBE {view}").fetchall()
                    == con.execute(f"DESCRIBE {view}").fetchall())
        assert (other.execute("SELECT *, typeof(d), typeof(l) FROM _odd").fetchall()
                == con.execute("SELECT *, typeof(d), typeof(l) FROM _odd").fetchall())
        assert event_kinds(other) == kinds
    finally:
        other.close()


def test_a_lane_makes_its_connection_in_its_own_thread_and_its_failure_is_raised(
        store, monkeypatch):
    """A lane's sibling is read from the connection in the caller's thread and made in the
    lane's own, while the first lane works: the same findings; a sibling that cannot be
    made is raised in the caller."""
    made_in = []
    to_make = detect.sibling_to_make

    def watched(con):
        make = to_make(con)
        return lambda: made_in.append(threading.current_thread().name) or make()

    monkeypatch.setattr(detect, "sibling_to_make", watched)
    assert (run_detectors(store.connect(), settings(), lanes=2)
            == run_detectors(store.connect(), settings(), lanes=1))
    assert made_in == ["detectors-1"]

    def broken(con):
        def make():
            raise duckdb.IOException("no room for another connection")
        return make

    monkeypatch.setattr(detect, "sibling_to_make", broken)
    with pytest.raises(duckdb.IOException, match="no room"):
        run_detectors(store.connect(), settings(), lanes=2)


def test_a_sibling_that_fails_half_made_is_closed(store, monkeypatch):
    """What `sibling_to_make` opened and could not finish is closed, not left to the lanes
    (which hold only the connections that were made)."""
    import loophound.store as store_module

    half = []

    def fail(other, tables, views):
        half.append(other)
        raise duckdb.CatalogException("a view it reads is gone")

    monkeypatch.setattr(store_module, "_copy_into", fail)
    make = store_module.sibling_to_make(store.connect())
    with pytest.raises(duckdb.CatalogException, match="is gone"):
        make()
    with pytest.raises(duckdb.ConnectionException):
        half[0].execute("SELECT 1")


def test_an_error_stops_the_lanes_and_is_raised(store, monkeypatch):
    ran = []

    def record(name):
        def run(con, p):
            ran.append(name)
            if name == "repeated_error":
                raise RuntimeError("broken detector")
            return []
        return run

    for name in DETECTORS:
        monkeypatch.setitem(detect.DETECTORS, name,
                            dataclasses.replace(DETECTORS[name], run=record(name),
                                                prepare=None))
    with pytest.raises(RuntimeError, match="broken detector"):
        run_detectors(store.connect(), settings(), lanes=1)
    assert ran == ["repeated_error"]  # the first by rank: nothing runs after it
    ran.clear()
    with pytest.raises(RuntimeError, match="broken detector"):  # in the caller, whichever lane ran it
        run_detectors(store.connect(), settings(), lanes=2)
    assert "repeated_error" in ran


def test_the_lanes_run_at_once(store, monkeypatch):
    meet = threading.Barrier(2, timeout=30)  # a job waits for one in the other lane
    threads = set()

    def run(con, p):
        threads.add(threading.current_thread().name)
        meet.wait()
        return []

    for name in DETECTORS:
        monkeypatch.setitem(detect.DETECTORS, name,
                            dataclasses.replace(DETECTORS[name], run=run, prepare=None))
    run_detectors(store.connect(), settings(), ["ping_pong", "depth_violation", "rate_spike",
                                                "trigger_cycle"], lanes=2)
    assert len(threads) == 2


HEAVY = ["repeated_error", "repeated_action", "alternating_action", "unusual_actor"]


def _record_threads(monkeypatch, meeting: tuple[str, str]) -> dict[str, str]:
    """Every detector's run replaced by one that records its thread; the two `meeting` wait
    for each other (so they must run at once, or the barrier times out)."""
    meet = threading.Barrier(2, timeout=30)
    where: dict[str, str] = {}

    def record(name):
        def run(con, p):
            where[name] = threading.current_thread().name
            if name in meeting:
                meet.wait()
            return []
        return run

    for name in DETECTORS:
        monkeypatch.setitem(detect.DETECTORS, name,
                            dataclasses.replace(DETECTORS[name], run=record(name), prepare=None))
    return where


def test_on_a_large_log_the_detectors_whose_memory_grows_with_it_run_one_after_the_other(
        store, monkeypatch):
    """repeated_error, the stuck detectors and unusual_actor hold much of the log (in Python,
    or sorted in DuckDB): above SIDE_BY_SIDE_EVENTS never two at once, on one connection,
    while others run beside."""
    monkeypatch.setattr(detect, "SIDE_BY_SIDE_EVENTS", 10)  # the samples are a large log now
    where = _record_threads(monkeypatch, ("repeated_error", "ping_pong"))
    run_detectors(store.connect(), settings(), [*HEAVY, "ping_pong"], lanes=2)
    assert all(DETECTORS[n].grows_with_log for n in HEAVY)
    assert len({where[n] for n in HEAVY}) == 1 and where["ping_pong"] != where[HEAVY[0]]


def test_on_a_small_log_they_run_side_by_side_but_the_stuck_detectors_share_a_lane(
        store, monkeypatch):
    """Below SIDE_BY_SIDE_EVENTS (the samples: a few thousand events) two of them run at
    once; repeated_action and alternating_action, which share one pass over the actions,
    still run on one connection."""
    assert store.connect().execute("SELECT count(*) FROM events").fetchall()[0][0] \
        <= detect.SIDE_BY_SIDE_EVENTS
    where = _record_threads(monkeypatch, ("repeated_error", "unusual_actor"))
    run_detectors(store.connect(), settings(), HEAVY, lanes=2)
    assert where["repeated_error"] != where["unusual_actor"]
    assert where["repeated_action"] == where["alternating_action"]
    assert {DETECTORS[n].lane for n in ("repeated_action", "alternating_action")} == {
        ONE_PASS_OVER_ACTIONS}


def test_work_beside_the_detectors_runs_once_in_a_lane_and_its_error_is_raised(store):
    """A scan measures its coverage beside the detectors (`beside`): each piece of work runs
    once, on a lane's connection, which reads the events `con` reads; the findings are those
    without it; an error in it is raised like a detector's."""
    names = ["ping_pong", "repeated_error", "rate_spike"]
    counted = []

    def count(c):
        counted.append(c.execute("SELECT count(*) FROM events").fetchall()[0][0])

    alone = run_detectors(store.connect(), settings(), names, lanes=1)
    assert run_detectors(store.connect(), settings(), names, lanes=2, beside=[count]) == alone
    assert counted == [store.connect().execute("SELECT count(*) FROM events").fetchall()[0][0]]

    def broken(c):
        raise RuntimeError("broken beside")

    with pytest.raises(RuntimeError, match="broken beside"):
        run_detectors(store.connect(), settings(), names, lanes=2, beside=[broken])


def test_a_value_worked_out_for_the_lanes_is_worked_out_once(store):
    """`shared_once`: a connection and its siblings (the lanes) share a plain value; two
    lanes asking at once get one computation, the second waiting for the first; a
    connection whose `events` are redefined works it out again, for itself alone."""
    from loophound.store import define_views, shared_once

    con = store.connect()
    lanes = [sibling(con), sibling(con)]
    computed, started = [], threading.Event()

    def slow(c):
        def compute():
            computed.append(c)
            started.set()
            threading.Event().wait(0.2)  # the other lane asks meanwhile
            return c.execute("SELECT count(*) FROM events").fetchall()[0][0]
        return compute

    got = []
    first = threading.Thread(target=lambda: got.append(shared_once(lanes[0], "n", slow(lanes[0]))))
    first.start()
    started.wait(5)
    got.append(shared_once(lanes[1], "n", slow(lanes[1])))
    first.join()
    assert len(computed) == 1 and got[0] == got[1] > 0
    assert shared_once(con, "n", slow(con)) == got[0] and len(computed) == 1
    define_views(con, store)  # `events` redefined: what was derived from them is forgotten
    assert shared_once(con, "n", slow(con)) == got[0] and len(computed) == 2
    assert shared_once(lanes[0], "n", slow(lanes[0])) == got[0] and len(computed) == 2

"""`store.events_of_kinds`: the events of some kinds, each kind's scan filtered inside the
Parquet reader (where a filter on several values only skips row groups, and every column of
every row is read before the filter)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loophound.ingest import ingest
from loophound.store import Store, events_of_kinds

SAMPLES = Path(__file__).resolve().parents[1] / "sample_logs"


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    store = Store(tmp_path_factory.mktemp("kinds") / "st")
    ingest([str(SAMPLES)], store)
    return store.connect()


def test_the_events_are_those_of_the_kinds(con):
    kinds = ("message", "record", "request")
    got = con.execute(f"SELECT * FROM ({events_of_kinds(kinds)}) ORDER BY event_id").fetchall()
    want = con.execute("SELECT * FROM events WHERE list_contains($k, kind) ORDER BY event_id",
                       {"k": list(kinds)}).fetchall()
    assert got == want
    assert {r[0] for r in con.execute(
        f"SELECT DISTINCT kind FROM ({events_of_kinds(kinds)})").fetchall()} == set(kinds)


def test_each_kind_is_filtered_inside_the_scan(con):
    plan = con.execute(f"EXPLAIN SELECT * FROM ({events_of_kinds(('message', 'record'))}) "
                       "WHERE actor IS NOT NULL").fetchall()[0][1]
    assert "kind = 'message'" in plan and "kind = 'record'" in plan
    assert "optional" not in plan

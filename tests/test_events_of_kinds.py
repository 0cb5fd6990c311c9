"""`store.events_of_kinds`: the events of some kinds, each kind's scan filtered inside the
Parquet reader (where a filter on several values only skips row groups, and every column of
every row is read before the filter)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loophound import db
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


@pytest.mark.parametrize(("view", "kinds"), [("messages", ("message", "room_post")),
                                             ("triggers", ("trigger", "session_start",
                                                           "session_end"))])
def test_the_views_of_some_kinds_read_each_kind_inside_the_scan(con, view, kinds):
    # the named queries count a message once through `messages`: on a log with none, a
    # filter on two kinds read every row's request id to find no copy (a fifth of the report)
    got = con.execute(f"SELECT * FROM {view} ORDER BY event_id").fetchall()
    want = con.execute("SELECT * FROM events WHERE list_contains($k, kind) ORDER BY event_id",
                       {"k": list(kinds)}).fetchall()
    assert got == want and got
    plan = con.execute(f"EXPLAIN SELECT * FROM {view} WHERE corr_id IS NOT NULL").fetchall()
    assert all(f"kind = '{k}'" in plan[0][1] for k in kinds)
    assert "optional" not in plan[0][1]


@pytest.mark.parametrize("pick", ["some", "absent", "none"])
def test_one_of_fetches_the_events_a_list_names(con, pick):
    ids = [r[0] for r in con.execute(
        "SELECT event_id FROM events WHERE line % 7 = 3 ORDER BY event_id").fetchall()]
    assert len(ids) > 10
    wanted = {"some": ids[::3] + ids[:2], "absent": [ids[-1] + 10**6, -1], "none": []}[pick]
    got = con.execute(f"SELECT event_id, file, line FROM events WHERE {db.one_of('event_id')} "
                      "ORDER BY event_id", {"ids": wanted}).fetchall()
    want = con.execute("SELECT event_id, file, line FROM events "
                       "WHERE list_contains($ids, event_id) ORDER BY event_id",
                       {"ids": wanted}).fetchall()
    assert got == want
    assert len(got) == len(set(wanted) & set(ids))

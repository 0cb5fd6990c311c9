"""runaway_subagents: sub-agents started without end, the same task again and again or nested
deeper and deeper, with the whole spawn tree's cost. The scenario (synth/subagents.py): a
Claude Code session re-spawning one failing subagent 40 times, and a planner invoking a
planner 40 levels deep (OpenTelemetry); decoys in both it and its clean twin: 3 sub-agents for
3 distinct tasks, a fan-out over 12 modules, a team of three, a chain two deep."""

from __future__ import annotations

import datetime as dt

import pytest

from loophound.detect.runaway_subagents import (
    Params,
    Spawn,
    depths,
    episodes,
    judge,
    tree_of,
)
from loophound.ingest import ingest
from loophound.scan import scan_store
from loophound.store import Store
from loophound.synth.subagents import RESPAWNS, write_subagent_sessions
from loophound.vocabulary import Severity

T = dt.datetime(2026, 7, 3, 9, 0)


def spawns(tasks: list[str | None], depth: list[int] | None = None, gap_s: float = 30) -> list[Spawn]:
    return [Spawn(i, T + dt.timedelta(seconds=gap_s * i), "f", i + 1, "claude", f"agent-{i}", task,
                  task, "Task", (depth or [1] * len(tasks))[i]) for i, task in enumerate(tasks)]


def test_a_spawn_by_a_subagent_is_one_deeper():
    # claude starts a; a starts b; b starts c; claude starts d; a span states its own depth
    rows = [("claude", "a", None), ("a", "b", None), ("b", "c", None), ("claude", "d", None),
            ("orchestrator", "planner", 3)]
    assert depths(rows) == [1, 2, 3, 1, 3]


def test_episodes_split_at_a_long_pause():
    got = episodes(spawns(["x"] * 3 + ["y"], gap_s=2000), 3600)
    assert [len(e) for e in got] == [4]
    got = episodes(spawns(["x"] * 3, gap_s=4000), 3600)
    assert [len(e) for e in got] == [1, 1, 1]


@pytest.mark.parametrize("tasks,depth,want", [
    (["explore", "plan", "review"], None, None),  # three distinct tasks
    ([f"module {i}" for i in range(12)], None, None),  # a fan-out over distinct items
    (["fix"] * 2, None, None),  # tried twice, then done otherwise
    (["fix"] * 5, None, Severity.MEDIUM),
    (["fix"] * 40, None, Severity.HIGH),
    (["fix"] * 100, None, Severity.CRITICAL),
    ([None] * 3, [1, 2, 3], None),  # a chain three deep
    ([None] * 40, list(range(1, 41)), Severity.HIGH),  # 40 nested
    ([f"item {i}" for i in range(50)], None, Severity.MEDIUM),  # a fan-out of 50: look at it
])
def test_judge(tasks, depth, want):
    assert judge(tree_of("s", spawns(tasks, depth)), Params()) == want


def test_the_most_repeated_task_and_its_second_spawn():
    t = tree_of("s", spawns(["a", "b", "b", "a", "b"]))
    assert (t.repeats, t.task.event_id, t.again.event_id, t.tasks) == (3, 1, 2, 2)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    out = tmp_path_factory.mktemp("subagents")
    key = write_subagent_sessions(out / "logs")
    store = Store(out / "st")
    ingest([str(out / "logs")], store)
    return key, out, store, scan_store(store).document


def mine(doc: dict) -> list[dict]:
    return [f for f in doc["findings"] if f["detector"] == "runaway_subagents"]


def test_the_respawned_subagent_is_high_with_its_tree(planted):
    key, out, store, doc = planted
    inc = next(i for i in key["incidents"] if i["kind"] == "respawn")
    f, = [f for f in mine(doc) if f["sessions"] == [inc["session"]]]
    assert f["severity"] == "high"
    assert f["details"]["spawns"] == f["details"]["most_repeated_task"] == RESPAWNS
    assert f["details"]["sub_agents"] == RESPAWNS and f["details"]["depth"] == 1
    assert f["actors"] == ["claude"]
    lines = [e["line"] for e in f["evidence"] if e["file"].endswith(inc["file"])]
    assert lines and all(inc["first_line"] <= n <= inc["last_line"] for n in lines)
    # the claim is the tree: the 40 Task calls and every line of the subagents they ran
    con = store.connect()
    sub_events = con.execute(
        "SELECT count(*) FROM events WHERE session = ? AND actor LIKE 'agent-%'",
        [inc["session"]]).fetchall()[0][0]
    claimed = con.execute(
        "SELECT count(*) FROM finding_events WHERE finding_id = ?", [f["id"]]).fetchall()[0][0]
    assert claimed >= RESPAWNS + sub_events
    sub_tokens = con.execute(
        "SELECT sum(tokens_out) FROM events WHERE session = ? AND actor LIKE 'agent-%'",
        [inc["session"]]).fetchall()[0][0]
    assert sub_tokens > 0 and f["cost_usd"] > 0


def test_the_nested_planner_is_high(planted):
    key, _, _, doc = planted
    inc = next(i for i in key["incidents"] if i["kind"] == "nested")
    f, = [f for f in mine(doc) if f["sessions"] == [inc["session"]]]
    assert f["severity"] == "high" and f["details"]["depth"] == inc["depth"]
    assert set(f["actors"]) == {"orchestrator", "planner"}


def test_only_the_incidents_are_found(planted):
    key, _, _, doc = planted
    assert sorted(f["sessions"][0] for f in mine(doc)) == sorted(i["session"] for i in key["incidents"])


def test_the_clean_twin_is_quiet(tmp_path):
    key = write_subagent_sessions(tmp_path / "logs", incident=False)
    assert {h["kind"] for h in key["healthy"]} == {
        "three_distinct_tasks", "fan_out_over_distinct_modules", "respawn_twice",
        "team_of_three", "chain_two_deep"}
    store = Store(tmp_path / "st")
    ingest([str(tmp_path / "logs")], store)
    doc = scan_store(store).document
    assert mine(doc) == []
    assert [f["title"] for f in doc["findings"] if f["severity"] in ("high", "critical")] == []

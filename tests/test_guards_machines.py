"""The guard lab's pieces without a store: the spec (checked, with clear errors), each guard
type's state machine on small hand-made event lists, and the replay's rules (time order,
descendants that never happened, trips)."""

from __future__ import annotations

import random

import pytest

from loophound.errors import ConfigError
from loophound.guards import TYPES, parse_spec, parse_sweep, preset_names, preset_spec
from loophound.guards.machines import Event, replay, replay_keyed
from loophound.guards.spec import combine, duration_text, parse_duration

S = 1000  # a second in the events' milliseconds


def guard(text: str):
    """The one guard of a spec's TOML text."""
    (g,) = parse_spec(text).guards
    return g


def ev(pos: int, t: float | None, **kw) -> Event:
    return Event(pos=pos, t=None if t is None else int(t * S), **kw)


def blocked(events, g, children=None) -> list[int]:
    kids = children or {}
    return replay(events, g, lambda p: kids.get(p, ())).blocked


# -- the spec --------------------------------------------------------------------------------

ISSUE_SPEC = """
[[guard]]
name = "breaker"
type = "breaker"      # trips after `threshold` consecutive identical errors within one key
key = ["session"]     # canonical columns that scope the guard's state
threshold = 3

[[guard]]
name = "cycle"
type = "cycle"        # refuses a trigger A→B while the last `window` holds a path B→…→A
window = "30m"        # of at most `max_depth` hops
max_depth = 5
"""


def test_the_issues_two_guards_read_as_written():
    breaker, cycle = parse_spec(ISSUE_SPEC, "issue.toml").guards
    assert (breaker.type, breaker.key, breaker.params["threshold"]) == ("breaker", ("session",), 3)
    assert breaker.params["reset"] is None and breaker.params["identical"] is True
    assert (cycle.type, cycle.params["window"], cycle.params["max_depth"]) == ("cycle", 1800.0, 5)
    assert cycle.kinds == ("trigger",)
    assert cycle.describe()["window"] == "30m"


@pytest.mark.parametrize("text, says", [
    ('[[guard]]\nname = "x"\ntype = "breakr"\nthreshold = 3', "did you mean breaker"),
    ('[[guard]]\nname = "x"\ntype = "breaker"\nthreshhold = 3', "unknown parameter 'threshhold'"),
    ('[[guard]]\nname = "x"\ntype = "breaker"', "needs `threshold`"),
    ('[[guard]]\nname = "x"\ntype = "cycle"\nwindow = "30 minutes"', "not a duration"),
    ('[[guard]]\nname = "x"\ntype = "rate"\nlimit = 5\nwindow = "1h"\nkey = ["actr"]',
     "did you mean actor"),
    ('[[guard]]\nname = "x"\ntype = "rate"\nlimit = 5\nwindow = "1h"\nwhere = { sesion = "a" }',
     "not a column a guard can test"),
    ('[[guard]]\nname = "x"\ntype = "rate"\nlimit = 5\nwindow = "1h"\n'
     'where = { error = { nott_in = ["a"] } }', "did you mean not_in"),
    ('[[guard]]\nname = "x"\ntype = "rate"\nlimit = -1\nwindow = "1h"', "at least 0"),
    ('[[guard]]\nname = "x"\ntype = "turns"\nmax = 2\nkinds = ["reqest"]', "did you mean request"),
    ('[[guard]]\nname = "x"\ntype = "error_rate"\nmax_errors = 5', "one of `window`"),
    ('[[guard]]\nname = "x"\ntype = "error_rate"\nwindow = "10s"', "one of `max_errors`"),
    ('[[guard]]\nname = "x"\ntype = "isolation"', "needs `agents`"),
    ('[[guard]]\nname = "a.b"\ntype = "turns"\nmax = 2', "`name` must be"),
    ('[[guard]]\nname = "x"\ntype = "turns"\nmax = 2\n[[guard]]\nname = "x"\ntype = "turns"\n'
     'max = 3', "two guards are named 'x'"),
    ('[[guards]]\nname = "x"', "unknown key 'guards'"),
    ('include = ["adoptd"]', "no guard preset 'adoptd'"),
    ("[[guard]\n", "not valid TOML"),
    ("", "no [[guard]] table"),
])
def test_a_mistake_in_a_spec_is_one_clear_error(text, says):
    with pytest.raises(ConfigError) as exc:
        parse_spec(text, "mine.toml")
    message = str(exc.value)
    assert says in message and "mine.toml" in message, message
    assert "\n" not in message


def test_every_preset_loads_and_its_guards_say_what_they_are():
    names = preset_names()
    assert {"had", "adopted", "frameworks", "bproxy-fix", "hooks-fix", "sven-fix"} <= set(names)
    every = combine([preset_spec(n) for n in ("had", "adopted", "frameworks")])
    assert len({g.name for g in every.guards}) == len(every.guards)
    for g in every.guards:
        assert g.description and g.preset, g.name


def test_durations_and_sweeps():
    assert [parse_duration(x) for x in ("500ms", "10s", "30m", "1h", "1d", 90)] == [
        0.5, 10, 1800, 3600, 86400, 90]
    assert [duration_text(x) for x in (0.5, 10, 1800, 3600, 5400)] == [
        "500ms", "10s", "30m", "1h", "90m"]
    spec = parse_spec(ISSUE_SPEC)
    sw = parse_sweep("breaker.threshold=2..10", spec)
    assert sw.values == tuple(range(2, 11))
    sw = parse_sweep("cycle.window=5m..1h", spec)
    assert sw.values[0] == 300 and sw.values[-1] == 3600 and 1800 in sw.values
    with pytest.raises(ConfigError, match="no guard named 'brker'"):
        parse_sweep("brker.threshold=2..5", spec)
    with pytest.raises(ConfigError, match="no numeric parameter 'identical'"):
        parse_sweep("breaker.identical=1..2", spec)
    with pytest.raises(ConfigError, match="GUARD.PARAM=LO..HI"):
        parse_sweep("breaker.threshold=2-5", spec)


def test_every_type_documents_what_it_blocks():
    assert set(TYPES) == {"breaker", "cycle", "rate", "error_rate", "budget", "depth",
                          "isolation", "turns", "repairs", "stuck"}
    for t in TYPES.values():
        assert t.summary and t.blocks and t.source and t.kinds
        assert all(p.doc for p in t.params)


# -- breaker ---------------------------------------------------------------------------------


def test_breaker_opens_after_three_identical_errors_and_stays_open():
    g = guard('[[guard]]\nname = "b"\ntype = "breaker"\nthreshold = 3')
    events = [ev(i, i * 0.1, session="s1", error="SESSION_NOT_FOUND", ok=False) for i in range(10)]
    events.append(ev(10, 2, session="s2", error="SESSION_NOT_FOUND", ok=False))
    assert blocked(events, g) == list(range(3, 10))  # s2 is another key


def test_breaker_counts_only_identical_errors_in_a_row():
    g = guard('[[guard]]\nname = "b"\ntype = "breaker"\nthreshold = 3')
    errors = ["A", "A", "B", "A", "A", None, "A", "A", "A", "A"]
    events = [ev(i, i, session="s", error=e, ok=e is None) for i, e in enumerate(errors)]
    assert blocked(events, g) == [9]


def test_breaker_with_reset_lets_one_trial_call_through():
    g = guard('[[guard]]\nname = "b"\ntype = "breaker"\nthreshold = 2\nreset = "10s"')
    # open at t=1; refused until 11; the trial at 12 fails (open again until 22); the trial at
    # 23 succeeds and closes it
    times_ok = [(0, False), (1, False), (5, False), (12, False), (15, False), (23, True),
                (24, False)]
    events = [ev(i, t, session="s", ok=ok, error=None if ok else "E")
              for i, (t, ok) in enumerate(times_ok)]
    out = replay(events, g)
    assert out.blocked == [2, 4] and out.trips == 2


def test_breaker_counts_the_errors_asked_for():
    g = guard('[[guard]]\nname = "b"\ntype = "breaker"\nthreshold = 3\nerrors = "terminal"')
    backoff = [ev(i, i * 5, session="s", format="bproxy", error="NO_EXTENSION", ok=False)
               for i in range(6)]
    dead = [ev(6 + i, 100 + i * 0.1, session="d", format="bproxy", error="SESSION_NOT_FOUND",
               ok=False) for i in range(6)]
    assert blocked(backoff + dead, g) == [9, 10, 11]
    g = guard('[[guard]]\nname = "b"\ntype = "breaker"\nthreshold = 3\ngap = "2s"')
    assert blocked(backoff + dead, g) == [9, 10, 11]  # the backoff's errors are 5 s apart


# -- cycle -----------------------------------------------------------------------------------


def trig(pos, t_min, a, b):
    return ev(pos, t_min * 60, kind="trigger", actor=a, target=b)


def test_cycle_refuses_the_first_closing_hop():
    g = guard('[[guard]]\nname = "c"\ntype = "cycle"\nwindow = "30m"')
    events = [trig(0, 0, "annegreet", "eltjo"), trig(1, 8, "eltjo", "annegreet"),
              trig(2, 9, "urszula", "koen"), trig(3, 10, "koen", "marije")]
    assert blocked(events, g) == [1]


def test_cycle_finds_longer_paths_up_to_max_depth_within_the_window():
    three = [trig(0, 0, "v", "n"), trig(1, 10, "n", "m"), trig(2, 20, "m", "v")]
    g = guard('[[guard]]\nname = "c"\ntype = "cycle"\nwindow = "30m"')
    assert blocked(three, g) == [2]
    g = guard('[[guard]]\nname = "c"\ntype = "cycle"\nwindow = "15m"')
    assert blocked(three, g) == []  # v→n is older than 15 minutes at the third hop
    g = guard('[[guard]]\nname = "c"\ntype = "cycle"\nwindow = "30m"\nmax_depth = 1')
    assert blocked(three, g) == []  # v→n→m is two hops
    g = guard('[[guard]]\nname = "c"\ntype = "cycle"\nwindow = "30m"')
    assert blocked([trig(0, 0, "a", "a")], g) == [0]


def test_cycle_a_refused_trigger_is_not_in_the_graph():
    g = guard('[[guard]]\nname = "c"\ntype = "cycle"\nwindow = "1h"')
    events = [trig(0, 0, "a", "b"), trig(1, 1, "b", "a"), trig(2, 2, "c", "b"),
              trig(3, 3, "a", "c")]
    # b→a refused (a→b exists) so a→c later finds no path c→…→a
    assert blocked(events, g) == [1]


# -- rate, error_rate, budget ----------------------------------------------------------------


def test_rate_is_a_sliding_window_per_key():
    g = guard('[[guard]]\nname = "r"\ntype = "rate"\nlimit = 2\nwindow = "10s"\nkey = ["actor"]')
    events = [ev(0, 0, actor="a"), ev(1, 1, actor="a"), ev(2, 2, actor="a"), ev(3, 3, actor="b"),
              ev(4, 10.5, actor="a"), ev(5, 11.5, actor="a")]
    # 2 refused; at 10.5 the event at 0 has left the window; at 11.5 the one at 1 has too
    assert blocked(events, g) == [2]


def test_rate_where_selects_what_is_counted():
    g = guard('[[guard]]\nname = "r"\ntype = "rate"\nlimit = 1\nwindow = "1h"\nkey = ["actor"]\n'
              'where = { actor = ["eltjo"], error = { null = true } }')
    events = [ev(0, 0, actor="eltjo"), ev(1, 1, actor="eltjo"), ev(2, 2, actor="koen"),
              ev(3, 3, actor="koen"), ev(4, 4, actor="eltjo", error="E")]
    assert blocked(events, g) == [1]


def test_error_rate_throttles_with_a_growing_delay():
    g = guard('[[guard]]\nname = "t"\ntype = "error_rate"\nwindow = "10s"\nmax_errors = 3\n'
              'open = "1s"\nbackoff = 2.0\nmax_open = "4s"')
    events = [ev(i, i * 0.25, session="s", error="E", ok=False) for i in range(60)]
    out = replay(events, g)
    allowed = [e.t / S for e in events if e.pos not in set(out.blocked)]
    # 3 errors trip it at 0.5 s; trials at 1.5 (fail: 2 s), 3.5 (4 s), 7.5 (4 s, capped), 11.5
    assert allowed == [0, 0.25, 0.5, 1.5, 3.5, 7.5, 11.5]
    assert out.trips == 5


def test_error_rate_by_ratio_needs_its_minimum_calls():
    g = guard('[[guard]]\nname = "t"\ntype = "error_rate"\ncalls = 4\nmax_ratio = 0.5\n'
              'min_calls = 4\nopen = "1m"')
    outcomes = [True, False, True, False, True, True]  # the 4th call makes 2 of 4 failures
    events = [ev(i, i, session="s", ok=o, error=None if o else "E") for i, o in enumerate(outcomes)]
    assert blocked(events, g) == [4, 5]


def test_budget_refuses_once_the_key_has_spent_its_limit():
    g = guard('[[guard]]\nname = "b"\ntype = "budget"\nlimit = 5.0\nwindow = "1h"\n'
              'kinds = ["trigger"]')
    events = [ev(0, 0, kind="trigger", actor="a"), ev(1, 60, kind="session_end", actor="a",
                                                      cost_usd=3.0),
              ev(2, 120, kind="trigger", actor="a"), ev(3, 180, kind="session_end", actor="a",
                                                        cost_usd=3.0),
              ev(4, 240, kind="trigger", actor="a"), ev(5, 250, kind="trigger", actor="b"),
              ev(6, 3700, kind="trigger", actor="a")]  # the first $3 left the window
    assert blocked(events, g) == [4]
    g = guard('[[guard]]\nname = "b"\ntype = "budget"\nlimit = 100\nunit = "tokens"\n'
              'kinds = ["llm_call"]')
    calls = [ev(i, i, kind="llm_call", actor="a", tokens=60) for i in range(3)]
    assert blocked(calls, g) == [2]


# -- depth, isolation, turns, repairs, stuck ---------------------------------------------------


def msg(pos, t, a, b, role, depth, parents=()):
    return ev(pos, t, kind="message", actor=a, target=b, role=role, depth=depth,
              parents=parents)


def test_depth_as_stated_and_carried():
    echo = [msg(0, 0, "a", "b", "user", 1)] + [
        msg(i, i * 2, "b" if i % 2 else "a", "a" if i % 2 else "b", "assistant", 1, (i - 1,))
        for i in range(1, 8)]
    stated = guard('[[guard]]\nname = "d"\ntype = "depth"\nmax_depth = 4')
    carried = guard('[[guard]]\nname = "d"\ntype = "depth"\nmax_depth = 4\ncarry = true')
    assert blocked(echo, stated) == []  # the echo never raises the depth it states
    children = {i: (i + 1,) for i in range(7)}
    out = replay(echo, carried, lambda p: children.get(p, ()))
    assert out.blocked == [4]  # hop 5; what it would have drawn never happens
    assert out.gone == {4, 5, 6, 7}


def test_depth_a_users_message_states_its_own_depth():
    g = guard('[[guard]]\nname = "d"\ntype = "depth"\nmax_depth = 2\ncarry = true')
    chat = [msg(0, 0, "h", "bot", "user", 1), msg(1, 5, "bot", "h", "assistant", 1, (0,)),
            msg(2, 9, "h", "bot", "user", 1, (1,)), msg(3, 14, "bot", "h", "assistant", 1, (2,))]
    assert blocked(chat, g) == []


def test_isolation():
    g = guard('[[guard]]\nname = "i"\ntype = "isolation"\nagents = ["annegreet", "eltjo"]')
    events = [trig(0, 0, "annegreet", "eltjo"), trig(1, 1, "urszula", "annegreet"),
              trig(2, 2, "eltjo", "eltjo")]
    assert blocked(events, g) == [0]
    g = guard('[[guard]]\nname = "i"\ntype = "isolation"\nself = true')
    assert blocked(events, g) == [2]


def test_turns_and_repairs_count_per_key():
    g = guard('[[guard]]\nname = "t"\ntype = "turns"\nmax = 2')
    calls = [ev(i, i, kind="llm_call", session="s" if i < 4 else "u") for i in range(6)]
    assert blocked(calls, g) == [2, 3]
    g = guard('[[guard]]\nname = "r"\ntype = "repairs"\nmax_repairs = 1')
    attempts = [ev(i, i, kind="repair_attempt", session="e", corr_id=f"p-{i // 3}")
                for i in range(6)]
    assert blocked(attempts, g) == [2, 5]


def test_stuck_stops_an_agent_repeating_itself():
    g = guard('[[guard]]\nname = "s"\ntype = "stuck"\nrepeats = 3\nerror_repeats = 2')
    same = [ev(i, i, kind="tool_call", session="s", act="read a.py", res="r1", ok=True)
            for i in range(3)]
    later = [ev(3, 3, kind="tool_call", session="s", act="edit a.py", res="r2", ok=True)]
    assert blocked(same + later, g) == [3]  # stopped after the third identical call
    unknown = [ev(i, i, kind="tool_call", session="s", act="read a.py", ok=True) for i in range(5)]
    assert blocked(unknown, g) == []  # no result to compare: never the same
    failing = [ev(i, i, kind="tool_call", session="s", act="pytest", error="Exit code 1",
                  ok=False) for i in range(4)]
    assert blocked(failing, g) == [2, 3]


# -- the replay ------------------------------------------------------------------------------


def test_replay_a_refused_events_descendants_never_happened():
    g = guard('[[guard]]\nname = "r"\ntype = "rate"\nlimit = 1\nwindow = "1h"\nkey = []\n'
              'kinds = ["trigger"]')
    events = [trig(0, 0, "a", "b"), trig(1, 1, "b", "c"), trig(2, 2, "c", "d"),
              trig(3, 90, "x", "y")]
    # trigger 1 is refused; trigger 2 is its descendant, so the guard never sees it
    out = replay(events, g, lambda p: {1: (2,)}.get(p, ()))
    assert out.blocked == [1] and out.gone == {1, 2}
    assert blocked(events, g) == [1, 2]  # without the link, 2 is judged (and refused)


def test_replay_judges_only_timed_events_of_its_kinds_and_counts_trips_per_key():
    g = guard('[[guard]]\nname = "t"\ntype = "turns"\nmax = 1\nkinds = ["llm_call"]')
    events = [ev(0, 0, kind="llm_call", session="s"), ev(1, None, kind="llm_call", session="s"),
              ev(2, 1, kind="tool_call", session="s"), ev(3, 2, kind="llm_call", session="s"),
              ev(4, 3, kind="llm_call", session="s"), ev(5, 4, kind="llm_call", session="u"),
              ev(6, 5, kind="llm_call", session="u")]
    out = replay(events, g)
    assert out.blocked == [3, 4, 6] and out.trips == 2


@pytest.mark.parametrize("text", [
    '[[guard]]\nname = "b"\ntype = "breaker"\nthreshold = 3\nreset = "2s"',
    '[[guard]]\nname = "b"\ntype = "breaker"\nthreshold = 2\nidentical = false',
    '[[guard]]\nname = "r"\ntype = "rate"\nlimit = 3\nwindow = "2s"\nkey = ["session"]',
    '[[guard]]\nname = "e"\ntype = "error_rate"\nwindow = "3s"\nmax_errors = 2\nopen = "1s"\n'
    'backoff = 2.0',
    '[[guard]]\nname = "e"\ntype = "error_rate"\ncalls = 5\nmax_ratio = 0.4\nmin_calls = 3\n'
    'open = "2s"',
    '[[guard]]\nname = "t"\ntype = "turns"\nmax = 7\nkinds = ["request"]',
    '[[guard]]\nname = "s"\ntype = "stuck"\nrepeats = 3\nkinds = ["request"]',
])
def test_key_by_key_replay_decides_as_the_event_by_event_one(text):
    """The fast replay (each key alone, a refused stretch skipped at once) is the replay."""
    g = guard(text)
    rng = random.Random(7)
    for _ in range(30):
        events, t = [], 0.0
        for pos in range(rng.randint(1, 80)):
            t += rng.choice([0.05, 0.1, 0.1, 0.5, 1.0, 3.0])
            failed = rng.random() < 0.6
            events.append(ev(pos, t, kind="request", session=rng.choice("ab"),
                             error=rng.choice(["E", "F"]) if failed else None, ok=not failed,
                             act=rng.choice(["x", "y"]), res="r"))
        a, b = replay(events, g), replay_keyed(events, g)
        assert (a.blocked, a.trips) == (b.blocked, b.trips)

"""The guards as state machines: plain Python over events in time order, nothing else.

`replay(events, guard, children)` runs one guard over `events` (time order, ties by file and
line) in event time. Each guard keeps its state per key (the values of its `key` columns).
For each event it judges, `decide` says whether the guard refuses it; a refused event, and
every event it would have caused (its descendants: answers, the child session, child spans,
replies; `children` gives them), count as never having happened: the guard never sees them
and they change none of its later decisions. An event of a kind the guard does not judge,
or with no time, is not judged.

The machines know nothing of stores or SQL: the tests feed them hand-made `Event` lists.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, NamedTuple

from .spec import Guard


class Event(NamedTuple):
    """What a guard may know of one event. `pos` is its place in time order; `t` its time in
    milliseconds (None: no time); `act` what was called (the masked action and arguments,
    else the action) and `res` what came back (the masked result, else the error);
    `parents` the positions of the events that caused it (for carried depth)."""

    pos: int
    t: int | None = None
    kind: str = "request"
    actor: str | None = None
    target: str | None = None
    session: str | None = None
    channel: str | None = None
    action: str | None = None
    ok: bool | None = None
    error: str | None = None
    depth: int | None = None
    role: str | None = None
    model: str | None = None
    format: str | None = None
    file: str | None = None
    event_type: str | None = None
    corr_id: str | None = None
    parent_id: str | None = None
    act: str | None = None
    res: str | None = None
    tokens: int = 0
    cost_usd: float = 0.0
    parents: tuple[int, ...] = ()


FIELDS = Event._fields


def failed(ev: Event) -> bool | None:
    """True for a failure, False for a success, None when the event states no outcome."""
    if ev.error is not None or ev.ok is False:
        return True
    return False if ev.ok is True else None


def terminal_errors(fmt: str | None) -> frozenset[str]:
    """The errors format `fmt` says never to retry (its profile's `terminal_errors`)."""
    from ..formats import FORMATS

    known = FORMATS.get(fmt) if fmt is not None else None
    return frozenset(known.profile.terminal_errors) if known is not None else frozenset()


class _Counts:
    """Which failures a breaker or error_rate guard counts (`errors` parameter)."""

    def __init__(self, errors: Any):
        self.errors = errors
        self._terminal: dict[str | None, frozenset[str]] = {}

    def __call__(self, ev: Event) -> bool | None:
        f = failed(ev)
        if not f or self.errors is None:
            return f
        if self.errors == "terminal":
            codes = self._terminal.get(ev.format)
            if codes is None:
                codes = self._terminal[ev.format] = terminal_errors(ev.format)
            return ev.error in codes
        return ev.error in self.errors


def key_function(columns: Sequence[str]) -> Callable[[Event], Any]:
    if not columns:
        return lambda ev: ()
    return attrgetter(*columns)


def predicate(where: Sequence[tuple[str, str, Any]]) -> Callable[[Event], bool] | None:
    """The `where` conditions as one test over an event (None when there are none)."""
    if not where:
        return None
    tests = []
    for column, op, value in where:
        get = attrgetter(column)
        if op == "eq":
            tests.append(lambda ev, g=get, v=value: g(ev) == v)
        elif op == "ne":
            tests.append(lambda ev, g=get, v=value: g(ev) != v)
        elif op == "in":
            tests.append(lambda ev, g=get, v=frozenset(value): g(ev) in v)
        elif op == "not_in":
            tests.append(lambda ev, g=get, v=frozenset(value): g(ev) not in v)
        elif op == "null":
            tests.append(lambda ev, g=get, v=value: (g(ev) is None) == v)
        else:
            compare = {"lt": float.__lt__, "le": float.__le__, "gt": float.__gt__,
                       "ge": float.__ge__}[op]
            tests.append(lambda ev, g=get, v=float(value), c=compare:
                         g(ev) is not None and c(float(g(ev)), v))
    if len(tests) == 1:
        return tests[0]
    return lambda ev: all(t(ev) for t in tests)


class Machine:
    """A guard's state. `decide(ev)`: True refuses `ev`, False lets it happen (and records it),
    None means the guard does not judge it (it may still record it: a budget's spend).
    `until(ev)`, after refusing `ev`: the time up to which every event of `ev`'s key would be
    refused too, with no change of state (None: it cannot tell)."""

    reads_all = False  # True: fed every event of the key, not only the kinds it judges
    keyed = True  # True: a key's decisions depend on that key's events only

    def __init__(self, guard: Guard):
        self.guard = guard
        self.p = guard.params
        self.key = key_function(guard.key)

    def decide(self, ev: Event) -> bool | None:
        raise NotImplementedError

    def until(self, ev: Event) -> float | None:
        return None


class Breaker(Machine):
    def __init__(self, guard: Guard):
        super().__init__(guard)
        self.counts = _Counts(self.p["errors"])
        self.threshold = self.p["threshold"]
        self.identical = self.p["identical"]
        self.gap = None if self.p["gap"] is None else self.p["gap"] * 1000
        self.reset = None if self.p["reset"] is None else self.p["reset"] * 1000
        # key → [error of the run, failures in a row, time of the last, open until (None:
        # closed; inf: for good), a trial call is being made]
        self.state: dict[Any, list] = {}

    def decide(self, ev: Event) -> bool | None:
        k = self.key(ev)
        s = self.state.get(k)
        if s is None:
            s = self.state[k] = [None, 0, None, None, False]
        trial = False
        if s[3] is not None:
            if ev.t < s[3]:
                return True
            s[3], trial = None, True  # half open: this call goes through
        f = self.counts(ev)  # None: no outcome stated, neither a failure nor a success
        if f is None:
            return False
        if not f:  # a success, or a failure it does not count, ends the run
            s[0], s[1] = None, 0
            return False
        if trial:  # the trial failed: open again
            s[3] = ev.t + self.reset
            return False
        if (self.identical and ev.error != s[0]) or (
                self.gap is not None and s[2] is not None and ev.t - s[2] > self.gap):
            s[1] = 0
        s[0], s[1], s[2] = ev.error, s[1] + 1, ev.t
        if s[1] >= self.threshold:
            s[3] = math.inf if self.reset is None else ev.t + self.reset
            s[1] = 0
        return False

    def until(self, ev: Event) -> float | None:
        return self.state[self.key(ev)][3]


class Cycle(Machine):
    keyed = False  # one graph: a key's triggers change what another's check finds

    def __init__(self, guard: Guard):
        super().__init__(guard)
        self.window = self.p["window"] * 1000
        self.max_depth = self.p["max_depth"]
        self.graphs: dict[Any, dict[str, dict[str, int]]] = {}  # key → source → target → time

    def decide(self, ev: Event) -> bool | None:
        a, b = ev.actor, ev.target
        if a is None or b is None:
            return None
        graph = self.graphs.setdefault(self.key(ev), {})
        since = ev.t - self.window
        if a == b or self._path(graph, b, a, since):
            return True
        graph.setdefault(a, {})[b] = ev.t
        return False

    def _path(self, graph: dict, start: str, goal: str, since: int) -> bool:
        """Whether edges no older than `since` lead from `start` to `goal` in ≤ max_depth hops
        (breadth first, as the write-up's Redis check)."""
        frontier, seen = [start], {start}
        for _ in range(self.max_depth):
            nxt = []
            for node in frontier:
                for target, t in graph.get(node, {}).items():
                    if t < since or target in seen:
                        continue
                    if target == goal:
                        return True
                    seen.add(target)
                    nxt.append(target)
            if not nxt:
                return False
            frontier = nxt
        return False


class Rate(Machine):
    def __init__(self, guard: Guard):
        super().__init__(guard)
        self.limit = self.p["limit"]
        self.window = self.p["window"] * 1000
        self.seen: dict[Any, deque] = {}

    def decide(self, ev: Event) -> bool | None:
        times = self.seen.get(k := self.key(ev))
        if times is None:
            times = self.seen[k] = deque()
        since = ev.t - self.window
        while times and times[0] <= since:
            times.popleft()
        if len(times) >= self.limit:
            return True
        times.append(ev.t)
        return False

    def until(self, ev: Event) -> float | None:
        times = self.seen[self.key(ev)]
        return times[0] + self.window if times else math.inf


class ErrorRate(Machine):
    def __init__(self, guard: Guard):
        super().__init__(guard)
        p = self.p
        self.counts = _Counts(p["errors"])
        self.window = None if p["window"] is None else p["window"] * 1000
        self.calls = p["calls"]
        self.open_ms = p["open"] * 1000
        self.max_open = math.inf if p["max_open"] is None else p["max_open"] * 1000
        # key → [deque of (time, failed), failures in it, open until, current open, trial]
        self.state: dict[Any, list] = {}

    def decide(self, ev: Event) -> bool | None:
        p = self.p
        k = self.key(ev)
        s = self.state.get(k)
        if s is None:
            s = self.state[k] = [deque(), 0, None, self.open_ms, False]
        trial = False
        if s[2] is not None:
            if ev.t < s[2]:
                return True
            s[2], trial = None, True
        f = self.counts(ev)
        if f is None:
            f = False
        if trial:
            if f:
                s[3] = min(s[3] * p["backoff"], self.max_open)
                s[2] = ev.t + s[3]
            else:
                s[3] = self.open_ms
            return False
        calls = s[0]
        calls.append((ev.t, f))
        s[1] += f
        if self.window is not None:
            since = ev.t - self.window
            while calls and calls[0][0] <= since:
                s[1] -= calls.popleft()[1]
        else:
            while len(calls) > self.calls:
                s[1] -= calls.popleft()[1]
        n, errs = len(calls), s[1]
        if n >= p["min_calls"] and errs and (
                (p["max_errors"] is not None and errs >= p["max_errors"]) or
                (p["max_ratio"] is not None and errs / n >= p["max_ratio"])):
            s[2] = ev.t + s[3]
            calls.clear()
            s[1] = 0
        return False

    def until(self, ev: Event) -> float | None:
        return self.state[self.key(ev)][2]


class Budget(Machine):
    reads_all = True

    def __init__(self, guard: Guard):
        super().__init__(guard)
        self.limit = self.p["limit"]
        self.tokens = self.p["unit"] == "tokens"
        self.window = None if self.p["window"] is None else self.p["window"] * 1000
        self.gates = frozenset(guard.kinds)
        self.spent: dict[Any, list] = {}  # key → [deque of (time, amount), total]

    def decide(self, ev: Event) -> bool | None:
        k = self.key(ev)
        s = self.spent.get(k)
        if s is None:
            s = self.spent[k] = [deque(), 0.0]
        if self.window is not None:
            since = ev.t - self.window
            while s[0] and s[0][0][0] <= since:
                s[1] -= s[0].popleft()[1]
        gated = ev.kind in self.gates
        if gated and s[1] >= self.limit - 1e-12:
            return True
        amount = ev.tokens if self.tokens else ev.cost_usd
        if amount:
            s[0].append((ev.t, amount))
            s[1] += amount
        return False if gated else None


class Depth(Machine):
    keyed = False  # carried depth follows causes, whatever their key

    def __init__(self, guard: Guard):
        super().__init__(guard)
        self.max_depth = self.p["max_depth"]
        self.carry = self.p["carry"]
        self.hops: dict[int, int] = {}  # position → hop depth of the events that happened

    def decide(self, ev: Event) -> bool | None:
        d = ev.depth
        if self.carry and ev.role != "user":
            for p in ev.parents:
                h = self.hops.get(p)
                if h is not None and (d is None or h + 1 > d):
                    d = h + 1
        if d is None:
            return None
        if d > self.max_depth:
            return True
        self.hops[ev.pos] = d
        return False


class Isolation(Machine):
    def __init__(self, guard: Guard):
        super().__init__(guard)
        self.agents = frozenset(self.p["agents"])
        self.self = self.p["self"]

    def decide(self, ev: Event) -> bool | None:
        a, b = ev.actor, ev.target
        if a is None or b is None:
            return None
        if a == b:
            return self.self
        return a in self.agents and b in self.agents


class Turns(Machine):
    def __init__(self, guard: Guard):
        super().__init__(guard)
        self.max = self.cap()
        self.count: dict[Any, int] = {}

    def cap(self) -> int:
        return self.p["max"]

    def decide(self, ev: Event) -> bool | None:
        k = self.key(ev)
        n = self.count.get(k, 0)
        if n >= self.max:
            return True
        self.count[k] = n + 1
        return False

    def until(self, ev: Event) -> float | None:
        return math.inf


class Repairs(Turns):
    """A step's attempts counted as turns: 1 + `max_repairs` of them."""

    def cap(self) -> int:
        return 1 + self.p["max_repairs"]


class Stuck(Machine):
    def __init__(self, guard: Guard):
        super().__init__(guard)
        self.repeats = self.p["repeats"]
        self.error_repeats = self.p["error_repeats"]
        self.state: dict[Any, list] = {}  # key → [last call, last result, run length, stopped]

    def decide(self, ev: Event) -> bool | None:
        k = self.key(ev)
        s = self.state.get(k)
        if s is None:
            s = self.state[k] = [None, None, 0, False]
        if s[3]:
            return True
        err = failed(ev)
        # what came back; unknown (no masked result, no error) never matches
        result = ("error", ev.error) if err else None if ev.res is None else ("result", ev.res)
        if ev.act is not None and result is not None and ev.act == s[0] and result == s[1]:
            s[2] += 1
        else:
            s[0], s[1], s[2] = ev.act, result, 1
        if result is not None and s[2] >= (self.error_repeats if err else self.repeats):
            s[3] = True  # the agent is stopped: every later call of the key is refused
        return False

    def until(self, ev: Event) -> float | None:
        return math.inf


MACHINES: dict[str, type[Machine]] = {
    "breaker": Breaker, "cycle": Cycle, "rate": Rate, "error_rate": ErrorRate,
    "budget": Budget, "depth": Depth, "isolation": Isolation, "turns": Turns,
    "repairs": Repairs, "stuck": Stuck,
}


def machine(guard: Guard) -> Machine:
    return MACHINES[guard.type](guard)


@dataclass
class Outcome:
    """What one guard did over one replay."""

    blocked: list[int]  # positions of the events it refused, in time order
    gone: set[int]  # those and every event they would have caused
    trips: int  # times it started refusing a key (a run of refusals of one key counts once)


def replay(events: Iterable[Event], guard: Guard,
           children: Callable[[int], Iterable[int]] = lambda _pos: (),
           walk: Callable[[int], bool] | None = None) -> Outcome:
    """Run `guard` over `events` (in time order); see the module's docstring. `walk(pos)`
    may say that a refused event causes nothing the guard judges, so its descendants need
    not be followed now (`Outcome.gone` then holds only those followed)."""
    m = machine(guard)
    kinds = None if m.reads_all else frozenset(guard.kinds)
    where = predicate(guard.where)
    decide, key = m.decide, m.key
    gone: set[int] = set()
    blocked: list[int] = []
    refusing: dict[Any, bool] = {}
    trips = 0
    for ev in events:
        if ev.t is None or (kinds is not None and ev.kind not in kinds) or ev.pos in gone:
            continue
        if where is not None and not where(ev):
            continue
        verdict = decide(ev)
        if verdict is None:
            continue
        k = key(ev)
        if verdict:
            blocked.append(ev.pos)
            if not refusing.get(k):
                trips += 1
                refusing[k] = True
            gone.add(ev.pos)
            if walk is not None and not walk(ev.pos):
                continue
            stack = [ev.pos]
            while stack:
                for c in children(stack.pop()):
                    if c not in gone:
                        gone.add(c)
                        stack.append(c)
        elif refusing.get(k):
            refusing[k] = False
    return Outcome(blocked, gone, trips)


def replay_group(m: Machine, positions: Sequence[int], times: Sequence[int],
                 event: Callable[[int], Event], blocked: list) -> int:
    """One key's events (`positions`, in time order, with their `times`: lists, or numpy
    arrays) through `m`, for a machine whose keys are independent (`keyed`) when no refusal
    causes an event it judges: what `replay` decides, but a stretch the key is refused
    (`until`) is skipped at once, and only the events decided are made (`event(pos)`).
    Appends the refused positions to `blocked`, a stretch at a time (slices of `positions`);
    returns the trips."""
    decide, until = m.decide, m.until
    def search(value: float, lo: int) -> int:
        """The first index from `lo` whose time is at or after `value`."""
        if value == math.inf:
            return n
        if hasattr(times, "searchsorted"):  # numpy: search for an integer, not a float
            return lo + int(times[lo:].searchsorted(math.ceil(value)))
        return bisect_left(times, value, lo)

    i, n, trips, refusing = 0, len(positions), 0, False
    while i < n:
        ev = event(int(positions[i]))
        verdict = decide(ev)
        if verdict is None:
            i += 1
            continue
        if not verdict:
            refusing = False
            i += 1
            continue
        if not refusing:
            trips += 1
            refusing = True
        j = i + 1
        end = until(ev)
        if end is not None and end > ev.t:
            j = search(end, i + 1)
        blocked.append(positions[i:j])
        i = j
    return trips


def replay_keyed(events: Iterable[Event], guard: Guard) -> Outcome:
    """`replay` key by key (see `replay_group`): the same outcome for a `keyed` machine when
    no refused event causes another the guard judges."""
    m = machine(guard)
    if not m.keyed:
        raise ValueError(f"a {guard.type} guard's keys are not independent")
    kinds = None if m.reads_all else frozenset(guard.kinds)
    where = predicate(guard.where)
    groups: dict[Any, list[Event]] = {}
    for ev in events:
        if ev.t is None or (kinds is not None and ev.kind not in kinds):
            continue
        if where is None or where(ev):
            groups.setdefault(m.key(ev), []).append(ev)
    stretches: list[list[int]] = []
    trips = 0
    for evs in groups.values():
        by_pos = {e.pos: e for e in evs}
        trips += replay_group(m, [e.pos for e in evs], [e.t for e in evs], by_pos.__getitem__,
                              stretches)
    blocked = sorted(p for stretch in stretches for p in stretch)
    return Outcome(blocked, set(blocked), trips)

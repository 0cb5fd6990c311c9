"""One actor's actions in one session, in order: what the detectors of stuck agents read
(repeated_action, alternating_action), and the pure kernels that cut loops out of them.

An action is an event of kind tool_call, request or step that has an `action_key` (the
action and its arguments with ids, times, hashes and numbers masked: normalise.py). Two
actions are *the same call* when action_key, result_key, ok and error are all equal: the same
call that got the same answer where the log states the answer (a tool's result), the same
outcome where it does not (bproxy logs no response body, LabTrust no result).

What happens between two calls may change what the next one returns, and then a repeat is
no loop. So a run of calls is interrupted:
- by a message, request or trigger *to* the actor from someone else (a new prompt, a user's
  answer, a subagent's report): the actor was told something;
- where the log does not say what a call returned, also by any action or message of another
  party in the same session: it may have changed what the call looks at. Where the log says,
  a result that stayed the same proves nothing in between changed it.
The actor's own messages and model calls between its actions (thinking, "let me look again")
interrupt nothing: they are the loop's turns, and the loop's cost.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass

import duckdb
import numpy as np

from .. import db
from ..normalise import mask_sql
from ..store import _once
from ..vocabulary import Severity
from .base import param

ACTION_KINDS = ("tool_call", "request", "step")
# the longest cycle of calls alternating_action looks for (its `max_cycle`), and the longest
# a retry run of repeated_error leaves to it (a cycle of calls is described whole there)
MAX_CYCLE = 4
# what another party says to the actor: a new instruction ends a run
TOLD_KINDS = ("message", "room_post", "request", "trigger")
# the actor's own lines between its actions: the turns a loop pays for
TURN_KINDS = ("llm_call", "message", "record")
EPOCH = dt.datetime(1970, 1, 1)

# (actor, session) pairs with at least `min_count` calls of one kind: nothing shorter can loop
CANDIDATES = """
SELECT actor, session, row_number() OVER (ORDER BY actor, session NULLS FIRST) AS g
FROM (SELECT DISTINCT actor, session FROM (
  SELECT actor, session FROM events
  WHERE list_contains($kinds, kind) AND ts IS NOT NULL AND actor IS NOT NULL
    AND action_key IS NOT NULL AND ($errors OR (error IS NULL AND ok IS DISTINCT FROM false))
  GROUP BY actor, session, action_key, result_key, ok, error
  HAVING count(*) >= $min_count))
"""

# The candidates' actions, and what others did in their sessions. `loose` is the arguments
# with ids masked but numbers kept: calls that differ only in a number walk through items.
SEQUENCE = f"""
SELECT c.g, epoch_ms(e.ts) AS t, e.event_id, true AS own,
  hash(e.action_key) AS akey, hash(e.action_key, e.result_key, e.ok, e.error) AS fkey,
  e.result_key IS NOT NULL AS known, e.error IS NOT NULL OR e.ok IS NOT DISTINCT FROM false AS erred,
  hash(CASE WHEN e.args IS NOT NULL THEN {mask_sql('e.args', numbers=False)} END) AS loose,
  false AS told
FROM events e JOIN _stuck_cand c ON e.actor = c.actor
WHERE e.session IS NOT DISTINCT FROM c.session AND list_contains($kinds, e.kind)
  AND e.ts IS NOT NULL AND e.action_key IS NOT NULL
UNION ALL
SELECT c.g, epoch_ms(e.ts), e.event_id, false, NULL, NULL, NULL, NULL, NULL,
  e.target IS NOT DISTINCT FROM c.actor AND list_contains($told, e.kind)
FROM events e JOIN _stuck_cand c ON e.session = c.session
WHERE e.actor IS DISTINCT FROM c.actor AND e.ts IS NOT NULL
  AND (list_contains($kinds, e.kind) OR list_contains($told, e.kind))
"""

# What a stretch of the actor's turns cost: its own lines from just after what came before
# the loop (its previous action answered, or what it was told) to the loop's last answer
TURNS = """
SELECT r.i, count(*) FILTER (WHERE e.tokens_in IS NOT NULL OR e.tokens_out IS NOT NULL),
       coalesce(sum(coalesce(e.tokens_in, 0) + coalesce(e.tokens_out, 0)), 0), sum(e.cost_usd)
FROM _stuck_runs r JOIN events e ON e.actor = r.actor
WHERE e.session IS NOT DISTINCT FROM r.session AND e.ts > r.lo AND e.ts <= r.until
GROUP BY r.i
"""

FIRST = """SELECT event_id, file, line, action, action_key, args, result, error
           FROM events WHERE list_contains($ids, event_id)"""

# when these calls were answered (the response a format joined to each)
ANSWERED = """SELECT answers, max(epoch_ms(ts)) FROM events
              WHERE kind = 'response' AND list_contains($ids, answers) GROUP BY answers"""


def claim_sql(kinds: tuple[str, ...]) -> str:
    """Claim SQL: the loop's calls (of `kinds`, whose action_key is in $keys, from $start to
    $stop; attribution adds their answers) and the actor's turns from just after $lo to
    $until (the last call's answer), in its session."""
    return f"""SELECT e.event_id FROM events e
WHERE e.actor = $actor AND e.session IS NOT DISTINCT FROM $session AND e.ts > $lo AND (
    (list_contains({list(kinds)}, e.kind) AND list_contains($keys, e.action_key)
     AND e.ts BETWEEN $start AND $stop)
    OR (list_contains({list(TURN_KINDS)}, e.kind) AND e.ts <= $until))"""


# ---------------------------------------------------------------------------------------------
# kernels (plain arrays, no store)


def interruptions(group: np.ndarray, own: np.ndarray, told: np.ndarray, known: np.ndarray
                  ) -> np.ndarray:
    """For the own actions of a merged sequence (sorted by group, then time; `own`, `told`:
    which entries are the actor's actions, which something said to it; `known`: per own
    action, whether the log states its result), whether something between each and the
    previous own action interrupts a run: a change of group, something said to the actor,
    or, unless both results are known, anything another party did."""
    idx = np.flatnonzero(own)
    if not len(idx):
        return np.zeros(0, dtype=bool)
    told_before = np.cumsum(told)[idx]
    others_before = np.cumsum(~own)[idx]
    g = group[idx]
    out = np.ones(len(idx), dtype=bool)
    both_known = known[1:] & known[:-1]
    out[1:] = ((g[1:] != g[:-1]) | (told_before[1:] != told_before[:-1])
               | ((others_before[1:] != others_before[:-1]) & ~both_known))
    return out


def anchors(group: np.ndarray, own: np.ndarray, told: np.ndarray) -> np.ndarray:
    """For each own action of a merged sequence, the index of the latest own action or thing
    said to the actor before it in the same group (-1: neither): after that, the actor's turn
    that led to this action began."""
    n = len(own)
    marks = np.where(own | told, np.arange(n), -1)
    last = np.maximum.accumulate(np.concatenate(([-1], marks[:-1]))) if n else marks
    idx = np.flatnonzero(own)
    prev = last[idx]
    same = (prev >= 0) & (group[np.maximum(prev, 0)] == group[idx])
    return np.where(same, prev, -1)


def equal_runs(key: np.ndarray, t: np.ndarray, cut: np.ndarray, min_count: int,
               max_gap_ms: float) -> list[tuple[int, int]]:
    """[lo, hi) ranges of at least `min_count` consecutive equal keys, not cut (`cut[i]`:
    something between i-1 and i interrupts, or i starts a group) and with no gap longer than
    `max_gap_ms`."""
    if not len(key):
        return []
    brk = cut.copy()
    brk[0] = True
    brk[1:] |= (key[1:] != key[:-1]) | (np.diff(t) > max_gap_ms)
    starts = np.flatnonzero(brk)
    ends = np.append(starts[1:], len(key))
    keep = ends - starts >= min_count
    return [(int(a), int(b)) for a, b in zip(starts[keep], ends[keep], strict=True)]


def merge_stretches(runs: list[tuple[int, int]], key: np.ndarray, known: np.ndarray,
                    cut: np.ndarray, t: np.ndarray, max_between: int, max_gap_ms: float
                    ) -> list[list[tuple[int, int]]]:
    """Runs of the same call (from `equal_runs`, in order) joined into one where only a few
    other calls came between them (at most `max_between`), nothing interrupted, no pause was
    longer than `max_gap_ms`, and the log states the call's result: then the same result
    after them proves they changed nothing (read, test, read again with the same answer)."""
    out: list[list[tuple[int, int]]] = []
    for lo, hi in runs:
        joins = None
        for group in reversed(out):  # the stretches that ended at most max_between calls ago
            plo, phi = group[-1]
            if lo - phi > max_between:
                break
            if (key[lo] == key[plo] and known[lo] and not cut[phi:lo + 1].any()
                    and t[lo] - t[phi - 1] <= max_gap_ms):
                joins = group
                break
        if joins is None:
            out.append([(lo, hi)])
        else:
            joins.append((lo, hi))
    return out


def minimal_period(pattern: np.ndarray) -> int:
    """The shortest d such that `pattern` is a repetition of its first d elements (its
    length when there is none): A B A B has period 2, A B C 3, A A 1."""
    n = len(pattern)
    for d in range(1, n):
        if n % d == 0 and np.array_equal(pattern, np.tile(pattern[:d], n // d)):
            return d
    return n


def cycles(key: np.ndarray, t: np.ndarray, cut: np.ndarray, max_k: int, min_cycles: float,
           max_gap_ms: float) -> list[tuple[int, int, int]]:
    """(lo, hi, k): [lo, hi) stretches where the keys repeat a cycle of k ≥ 2 different steps
    (A B A B …, A B C A B C …) at least `min_cycles` times, not cut and with no gap longer
    than `max_gap_ms`. Shorter cycles are found first; a longer one over the same stretch
    (A B A B is also A B A B repeated) is not reported again."""
    n = len(key)
    if n < 4:
        return []
    brk = cut.copy()
    brk[0] = True
    brk[1:] |= np.diff(t) > max_gap_ms
    segment = np.cumsum(brk)
    covered = np.zeros(n, dtype=bool)
    found: list[tuple[int, int, int]] = []
    for k in range(2, max_k + 1):
        if n <= k:
            break
        match = np.zeros(n, dtype=bool)
        match[k:] = (key[k:] == key[:-k]) & (segment[k:] == segment[:-k])
        edges = np.diff(np.concatenate(([False], match, [False])).astype(np.int8))
        for a, b in zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1), strict=True):
            lo, hi = int(a) - k, int(b)
            if hi - lo < k * min_cycles or minimal_period(key[lo:lo + k]) != k:
                continue
            if covered[lo:hi].mean() >= 0.5:
                continue
            covered[lo:hi] = True
            found.append((lo, hi, k))
    return sorted(found)


@dataclass(frozen=True)
class Pace:
    """The gaps between consecutive calls."""

    median_ms: float | None
    cv: float | None  # coefficient of variation: near 0 is a machine's steady cadence
    duration_s: float

    @classmethod
    def of(cls, times_ms: np.ndarray) -> Pace:
        gaps = np.diff(times_ms).astype(float)
        if not len(gaps):
            return cls(None, None, 0.0)
        mean = float(gaps.mean())
        return cls(float(np.median(gaps)), float(gaps.std() / mean) if mean > 0 else 0.0,
                   float(times_ms[-1] - times_ms[0]) / 1000)

    def text(self) -> str:
        if not self.median_ms:
            return "in a burst"
        return f"every {self.median_ms / 1000:.3g} s (median)"


def distinct_share(values: np.ndarray) -> float:
    """Distinct values over values: 1/n for one value repeated, 1 when all differ."""
    return len(np.unique(values)) / len(values) if len(values) else 0.0


# ---------------------------------------------------------------------------------------------
# measuring


@dataclass
class Sequences:
    """The candidates' actions in (group, time) order, with what interrupts them."""

    groups: dict[int, tuple[str, str | None]]  # g → (actor, session)
    g: np.ndarray
    t: np.ndarray
    event_id: np.ndarray
    akey: np.ndarray  # the call: action and arguments
    fkey: np.ndarray  # the call and what it got
    known: np.ndarray  # the log states its result
    erred: np.ndarray
    loose: np.ndarray  # arguments with ids masked, numbers kept
    cut: np.ndarray  # something between this and the previous action interrupts a run
    # what came just before: when (NaN: nothing in the group), and the event id of the
    # actor's previous action when that is what it was (-1: it was told something)
    before_ms: np.ndarray
    before_call: np.ndarray

    def __len__(self) -> int:
        return len(self.t)

    def turn_spans(self, con: duckdb.DuckDBPyConnection, loops: list[tuple[int, int]],
                   max_gap_s: float) -> list[tuple[dt.datetime, dt.datetime]]:
        """For loops (index of the first call, of the last), where the actor's turns over
        each begin (exclusive: after the previous action was answered, or the actor was last
        told something) and end (the last call's answer): what the loop cost."""
        calls = [int(self.before_call[a]) for a, _ in loops if self.before_call[a] >= 0]
        answered = dict(con.execute(ANSWERED, {"ids": calls + [int(self.event_id[b])
                                                                for _, b in loops]}).fetchall())
        out = []
        for a, b in loops:
            before = float(self.before_ms[a])
            if self.before_call[a] >= 0:
                before = max(before, answered.get(int(self.before_call[a]), before))
            lo = turn_start(before, float(self.t[a]), max_gap_s)
            until = max(float(self.t[b]), answered.get(int(self.event_id[b]), float(self.t[b])))
            out.append((ts(lo), ts(until)))
        return out


def sequences(con: duckdb.DuckDBPyConnection) -> Sequences | None:
    """The actions of every (actor, session) that made one call at least twice, or None when
    there is none. Read once per connection (repeated_action and alternating_action read the
    same ones in a scan); redefining its `events` forgets them."""
    return _once(con, "stuck_sequences", lambda: _read(con, 2, True))


def _read(con: duckdb.DuckDBPyConnection, min_count: int, errors: bool) -> Sequences | None:
    kinds = list(ACTION_KINDS)
    found = con.sql(CANDIDATES, params={"kinds": kinds, "min_count": min_count,
                                        "errors": errors}).to_arrow_table()
    if found.num_rows == 0:
        return None
    groups = {r["g"]: (r["actor"], r["session"]) for r in found.to_pylist()}
    con.register("_stuck_cand", found)
    try:
        table = con.sql(SEQUENCE, params={"kinds": kinds, "told": list(TOLD_KINDS)}).to_arrow_table()
    finally:
        con.unregister("_stuck_cand")
    g, t, eid = (db.arrow_numpy(table[c]) for c in ("g", "t", "event_id"))
    order = np.lexsort((eid, t, g))
    g, t, eid = g[order], t[order], eid[order]
    own = db.arrow_numpy(table["own"])[order].astype(bool)
    told = db.arrow_numpy(table["told"])[order].astype(bool)
    idx = np.flatnonzero(own)

    def col(name: str) -> np.ndarray:
        # the actor's own rows (idx) have every column; Arrow's take would import pandas
        return db.arrow_numpy(table[name], unused_nulls=True)[order[idx]]

    known = col("known").astype(bool)
    prev = anchors(g, own, told)
    has = prev >= 0
    at = np.maximum(prev, 0)
    return Sequences(
        groups=groups, g=g[idx], t=t[idx], event_id=eid[idx], akey=col("akey"),
        fkey=col("fkey"), known=known, erred=col("erred").astype(bool), loose=col("loose"),
        cut=interruptions(g, own, told, known),
        before_ms=np.where(has, t[at].astype(float), np.nan),
        before_call=np.where(has & own[at], eid[at], -1))


def resolved(seq: Sequences, hi: int, akeys: set, fkeys: set) -> bool | None:
    """Whether the loop ending before `hi` ended because the call got another answer: the
    actor's next action in the group is one of the loop's calls with a result or outcome the
    loop never saw (a poll that ends). None: nothing follows, or something else does."""
    if hi >= len(seq) or seq.g[hi] != seq.g[hi - 1] or seq.akey[hi] not in akeys:
        return None
    return seq.fkey[hi] not in fkeys


@dataclass(frozen=True)
class Turns:
    """What the actor's turns over a loop cost: model calls with tokens, tokens, stated cost."""

    llm_calls: int = 0
    tokens: int = 0
    stated_cost_usd: float | None = None


def turns(con: duckdb.DuckDBPyConnection, spans: list[tuple[str, str | None, dt.datetime,
                                                                dt.datetime]]) -> list[Turns]:
    """For each (actor, session, lo, until): its turns' tokens and stated cost in (lo, until]."""
    if not spans:
        return []
    db.temp_table(con, "_stuck_runs", {  # not pyarrow's table: that imports pandas
        "i": ("BIGINT", list(range(len(spans)))), "actor": ("VARCHAR", [s[0] for s in spans]),
        "session": ("VARCHAR", [s[1] for s in spans]), "lo": ("TIMESTAMP", [s[2] for s in spans]),
        "until": ("TIMESTAMP", [s[3] for s in spans])})
    try:
        rows = con.execute(TURNS).fetchall()
    finally:
        con.execute("DROP TABLE _stuck_runs")
    out = [Turns() for _ in spans]
    for i, calls, tokens, cost in rows:
        out[i] = Turns(int(calls), int(tokens), None if cost is None else float(cost))
    return out


def loop_turns(con: duckdb.DuckDBPyConnection, seq: Sequences, loops: list[tuple[int, int]],
               max_gap_s: float) -> list[tuple[str, str | None, dt.datetime, dt.datetime, Turns]]:
    """For loops (index of the first call, of the last): actor, session, where the turns over
    it begin and end (`Sequences.turn_spans`), and what they cost."""
    spans = [(*seq.groups[int(seq.g[a])], lo, until) for (a, _), (lo, until) in
             zip(loops, seq.turn_spans(con, loops, max_gap_s), strict=True)]
    return [(*span, cost) for span, cost in zip(spans, turns(con, spans), strict=True)]


def first_calls(con: duckdb.DuckDBPyConnection, ids: list[int]) -> dict[int, dict]:
    """event_id → the call's file, line, action, action_key, args, result and error."""
    if not ids:
        return {}
    cur = con.execute(FIRST, {"ids": ids})
    cols = [d[0] for d in cur.description]
    return {row[0]: dict(zip(cols, row, strict=True)) for row in cur.fetchall()}


def turn_start(anchor_ms: float, start_ms: float, max_gap_s: float) -> float:
    """Where the turns of a loop that starts at `start_ms` begin (exclusive): after the actor's
    previous action or what it was last told (`anchor_ms`, NaN: nothing), at most `max_gap_s`
    before, and always before the loop's first call."""
    if math.isnan(anchor_ms):
        return start_ms - 1
    return min(max(anchor_ms, start_ms - max_gap_s * 1000), start_ms - 1)


def ts(ms: float) -> dt.datetime:
    return EPOCH + dt.timedelta(milliseconds=int(ms))


def clip(text: str | None, n: int = 160) -> str | None:
    """`text` on one line, at most `n` characters."""
    if text is None:
        return None
    one = " ".join(text.split())
    return one if len(one) <= n else one[: n - 1] + "…"


# ---------------------------------------------------------------------------------------------
# judging a loop of calls (repeated_action: its size is calls; alternating_action: rounds)


@dataclass
class LoopParams:
    """The settings both detectors of looping calls judge by (each adds its thresholds)."""

    max_gap_s: float = param(1800.0, "a longer pause between two calls ends the loop")
    background_gap_s: float = param(30.0, "a loop this slow (median gap between calls) that costs "
                                          "no model tokens is background (a health check, a cron "
                                          "poll), not a loop")
    batch_share: float = param(0.5, "a call whose arguments take this share of distinct values "
                                    "with only ids masked (numbers kept) walks through items: a "
                                    "batch, not a loop")
    machine_cv: float = param(0.25, "without logged arguments and results, a loop needs gaps this "
                                    "regular (coefficient of variation) to count")
    blind_gap_s: float = param(5.0, "without logged arguments and results, a loop needs its calls "
                                    "this close (median gap) to count: a machine's loop, not a "
                                    "schedule (a status poll every 10 s)")


@dataclass(frozen=True)
class Shape:
    """What decides whether a loop of calls is one, and how bad."""

    size: float  # calls, or times round a cycle
    pace: Pace
    ended_by_change: bool | None
    batch_share: float
    tokens: int
    described: bool  # the log states the calls' arguments or results

    @property
    def slow(self) -> float:
        return self.pace.median_ms or 0.0


def quiet_reason(s: Shape, high: float, critical: float, p: LoopParams) -> str | None:
    """Why a loop of calls is healthy repetition (None: it is not): a batch walking through
    items, a poll that ended with another answer (before `critical`), the background (slow and
    no model tokens), or nothing but an action's name repeating short of `high`, or not at a
    machine's fast, steady cadence."""
    if s.batch_share >= p.batch_share:
        return "batch"
    if s.ended_by_change and s.size < critical:
        return "ended with another answer"
    if s.slow >= p.background_gap_s * 1000 and s.tokens == 0:
        return "background"
    if not s.described and (s.size < high or s.pace.cv is None or s.pace.cv > p.machine_cv
                            or s.slow > p.blind_gap_s * 1000):
        return "undescribed"
    return None


def loop_severity(s: Shape, low: float, high: float, critical: float, p: LoopParams
                  ) -> Severity | None:
    """Medium from `low`, high from `high`, critical from `critical`; a loop that ended with
    another answer only after `critical` is low; a slow one that costs model tokens is at most
    medium below `critical`."""
    if s.size < low or quiet_reason(s, high, critical, p) is not None:
        return None
    if s.ended_by_change:
        return Severity.LOW
    if s.size >= critical:
        return Severity.CRITICAL
    if s.slow >= p.background_gap_s * 1000:
        return Severity.MEDIUM
    return Severity.HIGH if s.size >= high else Severity.MEDIUM


GUARDS = (
    "OpenHands' StuckDetector (on by default) stops an agent after 4 identical action–"
    "observation pairs, 3 identical errors, 3 identical messages in a row or an A-B-A-B "
    "pattern 6 actions long; LangGraph's `recursion_limit` and the OpenAI Agents SDK's "
    "`max_turns` cap a run's steps.")

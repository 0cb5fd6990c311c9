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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

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
# every (actor, session) with a repeated call is read (CANDIDATES' condition for all groups)
ANY_GROUP = "true"


@dataclass(frozen=True)
class Search:
    """A detector's search of the sequences. `find(piece, params)`: what it found in a piece;
    `could(params)`: a condition (SQL over one group's distinct calls, each made `k` times,
    `erred` or not) that holds for every group `find` could find something in. Only such
    groups are read (CANDIDATES), so it must never be false where `find` would find."""

    find: Callable[[Sequences, Any], list]
    could: Callable[[Any], str]


# (actor, session) pairs with at least two calls of one kind (nothing shorter can loop) whose
# calls could hold a loop of a detector that asked (`{could}`: its condition over the pair's
# distinct calls, each made `k` times, `erred` or not), and how many actions each made (`n`:
# the pair's own rows of SEQUENCE). A storm of 600,000 failing calls is repeated_error's: no
# loop of successful calls and no cycle of two calls is in it, and it is not read here.
CANDIDATES = """
SELECT actor, session, n, row_number() OVER (ORDER BY actor, session NULLS FIRST) AS g
FROM (SELECT actor, session, CAST(sum(k) AS BIGINT) AS n FROM (
    SELECT actor, session, count(*) AS k,
           error IS NOT NULL OR ok IS NOT DISTINCT FROM false AS erred FROM events
    WHERE list_contains($kinds, kind) AND ts IS NOT NULL AND actor IS NOT NULL
      AND action_key IS NOT NULL
    GROUP BY actor, session, action_key, result_key, ok, error)
  GROUP BY actor, session HAVING max(k) >= 2 AND ({could}))
"""

# The candidates' actions, and what others did in their sessions. `loose` is the arguments
# with ids masked but numbers kept: calls that differ only in a number walk through items.
# It is looked up by the hash of the arguments (`args_hash`) in MASKED_ARGS, where each
# distinct argument of the piece is masked once: masking every call cost half the query (a
# storm repeats one argument 600,000 times).
OWN_ACTIONS = """
FROM events e JOIN (FROM _stuck_cand WHERE g BETWEEN $lo AND $hi) c ON e.actor = c.actor
WHERE e.session IS NOT DISTINCT FROM c.session AND list_contains($kinds, e.kind)
  AND e.ts IS NOT NULL AND e.action_key IS NOT NULL"""
SEQUENCE = f"""
SELECT CAST(c.g AS INTEGER) AS g, epoch_ms(e.ts) AS t, e.event_id, true AS own,
  hash(e.action_key) AS akey, hash(e.action_key, e.result_key, e.ok, e.error) AS fkey,
  e.result_key IS NOT NULL AS known, e.error IS NOT NULL OR e.ok IS NOT DISTINCT FROM false AS erred,
  hash(e.args) AS args_hash, false AS told
{OWN_ACTIONS}
UNION ALL
SELECT CAST(c.g AS INTEGER), epoch_ms(e.ts), e.event_id, false, NULL, NULL, NULL, NULL, NULL,
  e.target IS NOT DISTINCT FROM c.actor AND list_contains($told, e.kind)
FROM events e JOIN (FROM _stuck_cand WHERE g BETWEEN $lo AND $hi) c ON e.session = c.session
WHERE e.actor IS DISTINCT FROM c.actor AND e.ts IS NOT NULL
  AND (list_contains($kinds, e.kind) OR list_contains($told, e.kind))
"""
# Two arguments of one hash (64 bits) would share the smaller masked hash.
MASKED_ARGS = f"""
SELECT hash(a) AS args_hash, min(hash(CASE WHEN a IS NOT NULL THEN {mask_sql('a', numbers=False)} END))
FROM (SELECT DISTINCT e.args AS a {OWN_ACTIONS}) GROUP BY ALL ORDER BY 1
"""
# the candidates' actions are read for this many at a time (about 100 MB of columns, and as
# much again to sort them), or for one (actor, session) that made more
CHUNK_ROWS = 1 << 21

# What a stretch of the actor's turns cost: its own lines from just after what came before
# the loop (its previous action answered, or what it was told) to the loop's last answer
TURNS = """
SELECT r.i, count(*) FILTER (WHERE e.tokens_in IS NOT NULL OR e.tokens_out IS NOT NULL),
       coalesce(sum(coalesce(e.tokens_in, 0) + coalesce(e.tokens_out, 0)), 0), sum(e.cost_usd)
FROM _stuck_runs r JOIN events e ON e.actor = r.actor
WHERE e.session IS NOT DISTINCT FROM r.session AND e.ts > r.lo AND e.ts <= r.until
GROUP BY r.i
"""

FIRST = f"""SELECT event_id, file, line, action, action_key, args, result, error
            FROM events WHERE {db.one_of("event_id")}"""

# when these calls were answered (the response a format joined to each)
ANSWERED = f"""SELECT answers, max(epoch_ms(ts)) FROM events
               WHERE kind = 'response' AND {db.one_of("answers")} GROUP BY answers"""


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
    out = np.ones(len(idx), dtype=bool)
    if len(idx) == len(own) and not told.any():  # the actor's actions alone (a session of one)
        out[1:] = group[1:] != group[:-1]
        return out
    told_before = np.cumsum(told)[idx]
    others_before = np.cumsum(~own)[idx]
    g = group[idx]
    both_known = known[1:] & known[:-1]
    out[1:] = ((g[1:] != g[:-1]) | (told_before[1:] != told_before[:-1])
               | ((others_before[1:] != others_before[:-1]) & ~both_known))
    return out


def anchors(group: np.ndarray, own: np.ndarray, told: np.ndarray, at: np.ndarray | None = None,
            marks: np.ndarray | None = None) -> np.ndarray:
    """For each own action of a merged sequence (or those at the positions `at`), the index
    of the latest own action or thing said to the actor before it in the same group (-1:
    neither): after that, the actor's turn that led to this action began. `marks`: the
    positions of both (`np.flatnonzero(own | told)`), when the caller has them."""
    at = np.flatnonzero(own) if at is None else np.asarray(at, dtype=np.int64)
    if marks is None:
        marks = np.flatnonzero(own | told)
    if not len(marks):
        return np.full(len(at), -1, dtype=np.int64)
    k = np.searchsorted(marks, at) - 1  # the last mark before each
    prev = np.where(k >= 0, marks[np.maximum(k, 0)], -1)
    same = (prev >= 0) & (group[np.maximum(prev, 0)] == group[at])
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


@dataclass(frozen=True)
class Bounds:
    """Where a loop lies in its group: all that finding what the actor's turns over it cost
    (`loop_turns`) needs of the sequences, once they are gone."""

    actor: str
    session: str | None
    before_ms: float  # what came just before its first call (NaN: nothing in the group)
    before_call: int  # the event id of the actor's previous action when that was it, else -1
    first_ms: float  # its first call
    last_ms: float  # its last call
    last_call: int  # the event id of its last call


@dataclass
class Sequences:
    """The actions of some candidates (whole groups), in (group, time) order, with what
    interrupts them, and the merged rows they were read from (what came before a loop)."""

    groups: dict[int, tuple[str, str | None]]  # g → (actor, session), of every candidate
    g: np.ndarray
    t: np.ndarray
    event_id: np.ndarray
    akey: np.ndarray  # the call: action and arguments
    fkey: np.ndarray  # the call and what it got
    known: np.ndarray  # the log states its result
    erred: np.ndarray
    loose: np.ndarray  # arguments with ids masked, numbers kept
    cut: np.ndarray  # something between this and the previous action interrupts a run
    rows: dict[str, np.ndarray]  # the merged rows: g, t, event_id, own, told
    pos: np.ndarray | None  # where each action is among them (None: every row is one)
    _marks: np.ndarray | None = None  # where the own actions and what was told are there

    def __len__(self) -> int:
        return len(self.t)

    def bounds(self, a: int, b: int) -> Bounds:
        """The loop from its call `a` to its call `b` (indices): what came just before it,
        found only for the loops (it would take as much memory as the actions)."""
        r = self.rows
        if self._marks is None:
            self._marks = np.flatnonzero(r["own"] | r["told"])
        at = a if self.pos is None else int(self.pos[a])
        prev = int(anchors(r["g"], r["own"], r["told"], np.array([at]), self._marks)[0])
        return Bounds(*self.groups[int(self.g[a])],
                      float(r["t"][prev]) if prev >= 0 else math.nan,
                      int(r["event_id"][prev]) if prev >= 0 and r["own"][prev] else -1,
                      float(self.t[a]), float(self.t[b]), int(self.event_id[b]))


def merged(groups: dict[int, tuple[str, str | None]], c: dict[str, np.ndarray]) -> Sequences:
    """The Sequences of whole groups' merged rows (`c`: SEQUENCE's columns, in its order):
    the actor's own actions, and what the others' rows mean for them."""
    own, told = c["own"].astype(bool, copy=False), c["told"].astype(bool, copy=False)
    # every row the actor's own (sessions of one actor): views, no copies
    idx = slice(None) if own.all() else np.flatnonzero(own)
    known = c["known"][idx].astype(bool, copy=False)
    rows = {"g": c["g"], "t": c["t"], "event_id": c["event_id"], "own": own, "told": told}
    return Sequences(
        groups=groups, g=c["g"][idx], t=c["t"][idx], event_id=c["event_id"][idx],
        akey=c["akey"][idx], fkey=c["fkey"][idx], known=known,
        erred=c["erred"][idx].astype(bool, copy=False), loose=c["loose"][idx],
        cut=interruptions(c["g"], own, told, known), rows=rows,
        pos=None if isinstance(idx, slice) else idx)


def chunks(sizes: list[int], most: int) -> list[tuple[int, int]]:
    """[lo, hi] ranges of consecutive groups (1, 2, …; `sizes[i]`: group i + 1's rows) of at
    most `most` rows together, or of one group that has more."""
    out: list[tuple[int, int]] = []
    lo, rows = 1, 0
    for g, n in enumerate(sizes, start=1):
        if rows and rows + n > most:
            out.append((lo, g - 1))
            lo, rows = g, 0
        rows += n
    if sizes:
        out.append((lo, len(sizes)))
    return out


def pieces(con: duckdb.DuckDBPyConnection, chunk_rows: int | None = None,
           could: str = ANY_GROUP) -> Iterator[Sequences]:
    """The actions of every (actor, session) that made one call at least twice and whose
    calls `could` hold a loop (CANDIDATES), a piece of whole groups at a time: the groups of
    about `chunk_rows` actions (default CHUNK_ROWS) are read together, each batch copied out
    of Arrow as it comes, and sorted in numpy, so what Python holds is a chunk or the largest
    group, and DuckDB nothing (a sort in DuckDB holds the whole result until the last row is
    read, beside Python's copy). Nothing may use `con` while this runs."""
    kinds = list(ACTION_KINDS)
    found = con.sql(CANDIDATES.format(could=could), params={"kinds": kinds}).to_arrow_table()
    if found.num_rows == 0:
        return
    rows = sorted(found.to_pylist(), key=lambda r: r["g"])  # g: 1, 2, …
    groups = {r["g"]: (r["actor"], r["session"]) for r in rows}
    con.register("_stuck_cand", found)
    try:
        for lo, hi in chunks([r["n"] for r in rows], chunk_rows or CHUNK_ROWS):
            reader = con.sql(SEQUENCE, params={"kinds": kinds, "told": list(TOLD_KINDS),
                                               "lo": lo, "hi": hi}).to_arrow_reader(1 << 18)
            cols = sorted_rows(reader)
            if len(cols["t"]):
                cols["loose"] = _loose(con, cols.pop("args_hash"), {"kinds": kinds, "lo": lo,
                                                                      "hi": hi})
                yield merged(groups, cols)
    finally:
        con.unregister("_stuck_cand")


def _loose(con: duckdb.DuckDBPyConnection, args_hash: np.ndarray, params: dict) -> np.ndarray:
    """Per row of a piece (`args_hash`: the hash of its arguments), the hash of its arguments
    masked (`loose`), looked up in MASKED_ARGS (sorted by hash); what the rows of others'
    actions get is never read."""
    table = con.sql(MASKED_ARGS, params=params).to_arrow_table()
    if not table.num_rows:
        return np.zeros(len(args_hash), dtype=np.uint64)
    hashes, masked = db.arrow_numpy(table.column(0)), db.arrow_numpy(table.column(1))
    return masked[np.minimum(np.searchsorted(hashes, args_hash), len(hashes) - 1)]


def sorted_rows(reader) -> dict[str, np.ndarray]:
    """A query's rows (columns `g`, `t`, `event_id` among them: SEQUENCE's, repeated_error's
    attempts) as numpy columns in (group, time, event id) order: each batch copied out of
    Arrow (a column read without a copy keeps its batch alive), the batches joined and the
    columns put in order one at a time, each freed as it goes. What is held is the arrays
    (a sort in DuckDB holds the whole result until the last row is read, beside them)."""
    parts: list[dict[str, np.ndarray]] = []
    names: list[str] = []
    for batch in reader:
        names = batch.schema.names
        # the actor's own rows have every column; the others' NULLs are never read
        parts.append({name: db.arrow_numpy(batch.column(i), unused_nulls=True).copy()
                      for i, name in enumerate(names)})
    if not parts:
        return {"t": np.zeros(0, dtype=np.int64)}
    cols = {name: np.concatenate([p.pop(name) for p in parts]) for name in names}
    del parts
    order = np.lexsort((cols["event_id"], cols["t"], cols["g"]))
    for name in names:
        cols[name] = cols[name][order]
    return cols


def want(con: duckdb.DuckDBPyConnection, name: str, params, search: Search) -> None:
    """Have the next pass over the sequences (`loops`) run `search` too: a detector's
    `prepare`, so that the detectors of one scan share one pass."""
    _pass(con)["wanted"][(name, repr(params))] = (search, params)


def loops(con: duckdb.DuckDBPyConnection, name: str, params, search: Search,
          chunk_rows: int | None = None) -> list:
    """What `search` finds in every piece of the sequences (`pieces`) of the groups it could
    find something in, one list in (group, time) order. One pass serves the detector asking
    and every one that asked before (`want`): the actions of the groups any of them could
    find something in are sorted and read once a scan; redefining `con`'s `events` forgets
    what was found."""
    state = _pass(con)
    key = (name, repr(params))
    if key not in state["found"]:
        searches = state["wanted"] | {key: (search, params)}
        state["wanted"] = {}
        out: dict[tuple, list] = {k: [] for k in searches}
        could = " OR ".join(f"({s.could(p)})" for s, p in searches.values())
        for piece in pieces(con, chunk_rows, could):
            for k, (s, p) in searches.items():
                out[k].extend(s.find(piece, p))
        state["found"].update(out)
    return state["found"][key]


def _pass(con: duckdb.DuckDBPyConnection) -> dict:
    return _once(con, "stuck_loops", lambda: {"wanted": {}, "found": {}})


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


def turn_spans(con: duckdb.DuckDBPyConnection, loops: list[Bounds], max_gap_s: float
               ) -> list[tuple[dt.datetime, dt.datetime]]:
    """For each loop, where the actor's turns over it begin (exclusive: after the previous
    action was answered, or the actor was last told something) and end (the last call's
    answer): what the loop cost."""
    calls = [b.before_call for b in loops if b.before_call >= 0]
    answered = dict(con.execute(ANSWERED, {"ids": calls + [b.last_call for b in loops]}
                                ).fetchall())
    out = []
    for b in loops:
        before = b.before_ms
        if b.before_call >= 0:
            before = max(before, answered.get(b.before_call, before))
        lo = turn_start(before, b.first_ms, max_gap_s)
        until = max(b.last_ms, answered.get(b.last_call, b.last_ms))
        out.append((ts(lo), ts(until)))
    return out


def loop_turns(con: duckdb.DuckDBPyConnection, loops: list[Bounds], max_gap_s: float
               ) -> list[tuple[str, str | None, dt.datetime, dt.datetime, Turns]]:
    """For each loop: actor, session, where the turns over it begin and end (`turn_spans`),
    and what they cost."""
    spans = [(b.actor, b.session, lo, until) for b, (lo, until) in
             zip(loops, turn_spans(con, loops, max_gap_s), strict=True)]
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
    blind_rate_per_s: float = param(0.5, "without logged results (\"the same answer\" unseen), "
                                         "a loop above medium needs this many calls a second "
                                         "kept up for blind_sustained_s, or blind_long_s, or "
                                         "blind_tokens, or its critical count")
    blind_sustained_s: float = param(60.0, "without logged results: how long blind_rate_per_s "
                                           "must be kept up (a person scrolls 10 pages in 11 s)")
    blind_long_s: float = param(600.0, "without logged results: a loop this long is a runaway "
                                       "at any pace")
    blind_tokens: int = param(50_000, "without logged results: model tokens over the loop that "
                                      "make it a runaway")


@dataclass(frozen=True)
class Shape:
    """What decides whether a loop of calls is one, and how bad."""

    size: float  # calls, or times round a cycle
    pace: Pace
    ended_by_change: bool | None
    batch_share: float
    tokens: int
    described: bool  # the log states the calls' arguments or results
    calls: int = 0  # the calls in the loop (size counts rounds for a cycle)
    results_logged: bool = True  # the log states what the calls returned

    @property
    def slow(self) -> float:
        return self.pace.median_ms or 0.0


def runaway_unseen(s: Shape, critical: float, p: LoopParams) -> bool:
    """Whether a loop whose results the log does not hold is a runaway all the same: by its
    size (`critical`), its cost (tokens), its length, or a machine's rate kept up for a
    while. Without results "the same answer" was never seen: identical calls may each have
    got something new (a page scrolled, a status that changed)."""
    d = s.pace.duration_s
    return (s.size >= critical or s.tokens >= p.blind_tokens or d >= p.blind_long_s
            or (d >= p.blind_sustained_s and s.calls / d >= p.blind_rate_per_s))


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
    medium below `critical`; one whose results the log does not hold is at most medium unless
    `runaway_unseen`."""
    if s.size < low or quiet_reason(s, high, critical, p) is not None:
        return None
    if s.ended_by_change:
        return Severity.LOW
    if not s.results_logged and not runaway_unseen(s, critical, p):
        return Severity.MEDIUM
    if s.size >= critical:
        return Severity.CRITICAL
    if s.slow >= p.background_gap_s * 1000:
        return Severity.MEDIUM
    return Severity.HIGH if s.size >= high else Severity.MEDIUM


UNSEEN_NOTE = ("at most medium: the log holds no result for these calls, so \"the same "
               "answer\" was never seen, and neither rate, length nor cost makes it a runaway")


def capped_unseen(s: Shape, critical: float, p: LoopParams) -> str | None:
    """The note a finding carries when `loop_severity` held it at medium for want of
    results (None when it did not)."""
    return None if s.results_logged or runaway_unseen(s, critical, p) else UNSEEN_NOTE


GUARDS = (
    "OpenHands' StuckDetector (on by default) stops an agent after 4 identical action–"
    "observation pairs, 3 identical errors, 3 identical messages in a row or an A-B-A-B "
    "pattern 6 actions long; LangGraph's `recursion_limit` and the OpenAI Agents SDK's "
    "`max_turns` cap a run's steps.")

"""repeated_error: the same error returned again and again to the same caller.

A run is a maximal sequence of one (actor, session, action)'s attempts that all failed with the
same error, with no success and no gap longer than `max_gap_s` between them. Retrying is not
a loop by itself: a caller that backs off (gaps that keep growing) or stops after a few tries
is healthy; one that keeps firing at a steady pace after the service said "never retry" is
the seed-001 incident. Severity says which, and the finding shows the gaps that decided it.
Errors are the same when their texts are equal after masking ids, times, hashes and numbers
(normalise.py): `lock held by pid 4182` and `lock held by pid 977` are one error. An agent's
tool call (kind `tool_call`) is the same attempt only with the same arguments and result too
(`action_key`, `result_key`): ten greps for ten names that each match nothing (`Exit code 1`)
are ten calls, not one call failing ten times.

- measure: the runs (`failure_runs` cuts them, `gap_figures` sums up their gaps), with what
  should have stopped the caller (a close of the session before the run) and whether the
  service's format marks the error as never to retry;
- judge (`pace` reads the gaps against the thresholds): a caller backing off (late gaps
  `backoff_ratio` × the early ones) is medium, high from `critical_count` attempts; otherwise
  critical from `critical_count` attempts, or from 10 × `min_count` at a tight pace (median gap
  ≤ `tight_gap_s`); high below that;
- describe: what happened, the pace, and a circuit breaker to add.

An agent retries differently. Between two attempts at a `git commit` that the pre-commit hook
rejects it runs `git add`, which succeeds, and sometimes edits a file: every attempt is a turn
in which it read the error and chose to send the same call again. Runs cut at the caller's
next success never see that loop (the `git add` ends them), and seven attempts in six minutes
is far below a machine storm's `min_count`. So an agent's tool calls (kind `tool_call`: the
vocabulary's "an agent's tool or function call, its result on the same event", which every
agent format writes and a mapping can too) are also read call by call: a *retry run* is one
(actor, session, action_key)'s attempts that all failed the same way (the same `result_key`
and error after masking: the hook's whole message, not only `Exit code 1`), whatever other
calls came between, with no pause over `retry_gap_s`. It ends where that call got another
outcome: a success, or another failure (the test now fails elsewhere: progress). From
`retry_min_count` attempts it is a finding. Peers do less: OpenHands' StuckDetector stops an
agent after 3 identical errors, but only when nothing came between; agenttrace counts a tool
name in a row. What stays quiet, and why:
- a TDD loop: `pytest` fails again and again while the agent edits code, each time with
  another failure (the outcome changes: no retry run is longer than one);
- a call that fails a few times (below `retry_min_count`) and then works;
- many different failing commands (a grep with no match, a missing file): each is its own
  call, however alike their errors;
- one failure in each of many sessions: a run is within one session.
- a cycle of the same calls with the same results (restore the file, apply the same patch,
  run the same failing test): alternating_action describes it whole, every step and its cost.
A retry run that ended with the call getting another outcome is quiet when nothing came
between its attempts (a poll that ended, as for repeated_action) and low when the agent worked
between them (it got there, late); one that never got another outcome is high, critical from
ten times `retry_min_count`. A retry run that shares a failure with a consecutive run is that
loop seen another way, and is not reported again. A retry run is within one log file (two
trajectories of one task name one session: two runs of an agent). Its evidence is the lines
where the agent read each failure (the tool result).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from dataclasses import dataclass

import duckdb
import numpy as np

from ..db import arrow_numpy, temp_table
from ..normalise import mask, mask_sql
from ..vocabulary import Severity
from .actions import MAX_CYCLE, clip, sorted_rows
from .base import Detector, EvidenceLine, Finding, claim_units, human_duration, param, staged
from .profiles import input_formats, profile

ATTEMPT_KINDS = ("request", "step", "message", "room_post", "llm_call", "record", "trigger",
                 "tool_call")
METRONOME_CV = 0.1  # gaps whose coefficient of variation is under this are a machine's cadence
PACE_MIN_COUNT = 4  # attempts a run needs before its gaps say anything about its pace


@dataclass
class Params:
    min_count: int = param(10, "identical consecutive errors before a run is a finding")
    max_gap_s: float = param(3600.0, "a longer pause between two attempts ends the run")
    tight_gap_s: float = param(2.0, "median gap at or under this is a tight (machine) loop")
    critical_count: int = param(1000, "runs this long are critical whatever their pace")
    backoff_ratio: float = param(3.0, "late gaps this many times the early ones mean back-off")
    retry_min_count: int = param(5, "an agent's tool call (same masked arguments) failing the same "
                                    "way this many times in one session, other calls between, is "
                                    "a finding (OpenHands: 3 identical errors in a row)")
    retry_gap_s: float = param(1800.0, "a longer pause between two failures of one agent's tool "
                                       "call ends its retry run")


# Every (actor, session, action) that failed at least `min_count` times, numbered, with its
# error texts and their hashes (the texts of its attempts' errors: a second join of the
# attempts cost a fifth of the detector); then their attempts. Runs are cut in numpy: one
# scan in SQL (joined on a hash of the triple, then checked), one sort and vectorised
# comparisons, because a 600,000-attempt storm is one window partition that SQL would walk
# on one core, three times.
GROUPS = """
SELECT actor, session, action, hash(actor, session, action) AS h,
       row_number() OVER (ORDER BY actor, session, action) AS g,
       bool_or(kind = 'tool_call') AS calls,
       list(DISTINCT {'hash': hash(error), 'text': error}) AS errors
FROM events
WHERE list_contains($kinds, kind) AND ts IS NOT NULL AND error IS NOT NULL
GROUP BY actor, session, action HAVING count(*) >= $min_count
"""
NONE = np.zeros(0, dtype=np.int64)  # no event ids
ATTEMPT_BATCH = 1 << 18  # attempts read at a time
ATTEMPTS_FROM = """
FROM events e
JOIN _re_groups g ON hash(e.actor, e.session, e.action) = g.h AND e.actor IS NOT DISTINCT FROM g.actor
             AND e.session IS NOT DISTINCT FROM g.session AND e.action IS NOT DISTINCT FROM g.action
WHERE list_contains($kinds, e.kind) AND e.ts IS NOT NULL AND (e.error IS NOT NULL OR e.ok IS NOT NULL)
"""
ATTEMPTS = """
SELECT g.g, epoch_ms(e.ts) AS t, coalesce(e.ok, false) AS ok, e.event_id,
       e.error IS NOT NULL AS erred, hash(e.error) AS error_hash{call}
""" + ATTEMPTS_FROM
# an agent's tool call is also the same attempt only with the same arguments and result: ten
# different greps that match nothing are ten calls, not one failing ten times (read only when
# a group holds tool calls: a storm of requests does not pay for it)
CALL_HASH = (",\n       CASE WHEN e.kind = 'tool_call' THEN hash(e.action_key, e.result_key) "
             "ELSE 0 END AS call_hash")

CLAIM = claim_units(
    "list_contains($errors, e.error) AND e.actor IS NOT DISTINCT FROM $actor "
    "AND e.session IS NOT DISTINCT FROM $session AND e.action IS NOT DISTINCT FROM $action "
    "AND list_contains($kinds, e.kind)")


# ---------------------------------------------------------------------------------------------
# measure


@dataclass(frozen=True)
class Gaps:
    """The gaps between a run's consecutive attempts, in ms."""

    median_ms: float | None
    mean_ms: float | None
    sd_ms: float | None
    early_ms: float | None  # median of the first quarter
    late_ms: float | None  # median of the last quarter
    first: list[int]  # the first five
    last: list[int]  # the last five


@dataclass(frozen=True)
class Terminal:
    """What should have stopped the caller: the line that closed the session before the run."""

    file: str
    line: int
    at: dt.datetime
    note: str


@dataclass
class ErrorRun:
    """One run of identical consecutive failures of one (actor, session, action)."""

    actor: str | None
    session: str | None
    action: str | None
    error: str
    count: int
    start: dt.datetime
    stop: dt.datetime
    gaps: Gaps
    input: int  # the input its first attempt was read from
    retry_never: bool  # the service's format marks the error as never to retry
    terminal: Terminal | None = None
    # the error's texts in the run, when they differ only in ids, times or numbers
    variants: list[str] = dataclasses.field(default_factory=list)

    @property
    def errors(self) -> list[str]:
        """The error texts the run claims: every variant, or the one error."""
        return self.variants or [self.error]


def failure_runs(group: np.ndarray, t: np.ndarray, error: np.ndarray, failed: np.ndarray,
                 min_count: int, max_gap_ms: float) -> list[tuple[int, int]]:
    """[lo, hi) index ranges of the runs of at least `min_count` identical consecutive
    failures, over attempts sorted by group, then time: a run ends at a change of group or of
    error, after an attempt that did not fail, and at a gap longer than `max_gap_ms`; its range
    covers its failures (an attempt that ended it with the same error but no failure is not)."""
    if not len(t):
        return []
    gap = np.diff(t, prepend=t[0])
    brk = np.ones(len(t), dtype=bool)
    brk[1:] = ((group[1:] != group[:-1]) | (error[1:] != error[:-1]) | ~failed[:-1]
               | (gap[1:] > max_gap_ms))
    run_id = np.cumsum(brk)
    counts = np.bincount(run_id, weights=failed)
    out = []
    for rid in np.flatnonzero(counts >= min_count):
        if counts[rid] < len(t):
            idx = np.flatnonzero((run_id == rid) & failed)
            out.append((int(idx[0]), int(idx[-1]) + 1))
        else:  # one run of nothing but failures: no need to look for them
            out.append((0, len(t)))
    return out


def masked_errors(raw: np.ndarray, errors, order: np.ndarray) -> tuple[np.ndarray, dict]:
    """Per attempt (`raw`: the hash of its error text, in `order` of the `errors` column), a
    number that is the same for errors whose texts are equal after masking ids, times and
    numbers; and each raw hash's text. Each distinct text is masked once."""
    hashes, first = np.unique(raw, return_index=True)
    texts = {h: errors[int(order[i])].as_py() for h, i in zip(hashes, first, strict=True)}
    return masked_numbers(raw, texts), texts


def masked_numbers(raw: np.ndarray, texts: dict) -> np.ndarray:
    """`masked_errors` given each hash's text (`texts`: hash → error text; a hash it does not
    hold is an error with no text). Each attempt's hash is looked up among the few known
    ones (a binary search): numbering the distinct hashes of the attempts themselves sorted
    all of them, 0.1 s of CPU for a storm's 612,000."""
    known = np.array(sorted(texts), dtype=raw.dtype)
    ids: dict[str | None, int] = {}
    number = np.array([ids.setdefault(mask(texts[h]), len(ids)) for h in known.tolist()]
                      + [ids.setdefault(mask(None), len(ids))], dtype=np.int64)
    if not len(known):
        return np.full(len(raw), number[-1], dtype=np.int64)
    at = np.minimum(np.searchsorted(known, raw), len(known) - 1)
    return np.where(known[at] == raw, number[at], number[-1])


def gap_figures(times_ms: np.ndarray) -> Gaps:
    """Median, mean, spread, early and late medians, first and last of the gaps between
    consecutive times."""
    gaps = np.diff(times_ms).astype(float)
    if not len(gaps):
        return Gaps(None, None, None, None, None, [], [])
    q = max(len(gaps) // 4, 1)
    return Gaps(float(np.median(gaps)), float(gaps.mean()), float(gaps.std()),
                float(np.median(gaps[:q])), float(np.median(gaps[-q:])),
                [int(x) for x in gaps[:5]], [int(x) for x in gaps[-5:]])


def measure(con: duckdb.DuckDBPyConnection, p: Params) -> list[ErrorRun | Retry]:
    """Every run of at least `min_count` identical consecutive errors, with its gap figures
    and what should have stopped it; then every retry run of an agent's tool call that those
    runs do not already hold."""
    runs, covered = consecutive_runs(con, p)
    return [*runs, *retry_runs(con, p, covered)]


def consecutive_runs(con: duckdb.DuckDBPyConnection, p: Params
                     ) -> tuple[list[ErrorRun], np.ndarray]:
    """The runs of at least `min_count` identical consecutive errors, and the event ids of
    their failures, sorted (an array: a storm's 6 M ids as a Python set took 0.3 GB)."""
    kinds = list(ATTEMPT_KINDS)
    found = con.sql(GROUPS, params={"kinds": kinds, "min_count": p.min_count}).to_arrow_table()
    if found.num_rows == 0:
        return [], NONE
    rows = found.to_pylist()
    groups = {r["g"]: (r["actor"], r["session"], r["action"]) for r in rows}
    texts = {e["hash"]: e["text"] for r in rows for e in r["errors"]}
    format_of = input_formats(con)
    con.register("_re_groups", found)
    try:
        # in time order within each group, equal times in log order (input, then line),
        # without the text of each attempt's error (its hash; the texts once each): the 6 M
        # attempts of a storm ten times seed 001's are 200 MB, not a gigabyte. Read as they
        # come and sorted in numpy: sorted by DuckDB and fetched, they were held three times
        # over (its sort, its result, the arrays), 0.69 GB at the peak instead of 0.2-0.3 GB
        calls = any(found["calls"].to_pylist())
        cols = sorted_rows(con.sql(ATTEMPTS.format(call=CALL_HASH if calls else ""),
                                   params={"kinds": kinds}).to_arrow_reader(ATTEMPT_BATCH))
    finally:
        con.unregister("_re_groups")
    if not len(cols["t"]):
        return [], NONE
    g, t, event_id, raw = cols["g"], cols["t"], cols["event_id"], cols["error_hash"]
    # the same error text after masking ids and numbers (normalise.py), the same number
    err = masked_numbers(raw, texts)
    if calls:  # agents' calls: the same error of the same call, with the same result
        pairs = np.column_stack([err, cols["call_hash"].astype(np.int64, copy=False)])
        err = np.unique(pairs, axis=0, return_inverse=True)[1].reshape(-1)
    failed = cols["erred"] & ~cols["ok"]
    del cols
    out, covered = [], []
    for lo, hi in failure_runs(g, t, err, failed, p.min_count, p.max_gap_s * 1000):
        covered.append(event_id[lo:hi])
        actor, session, action = groups[int(g[lo])]
        first_input = int(event_id[lo]) >> 32
        error = texts[raw[lo]]
        variants = sorted(texts[h] for h in np.unique(raw[lo:hi][failed[lo:hi]]))
        out.append(ErrorRun(
            actor=actor, session=session, action=action, error=error, count=hi - lo,
            start=_ts(t[lo]), stop=_ts(t[hi - 1]), gaps=gap_figures(t[lo:hi]), input=first_input,
            retry_never=error in profile(format_of.get(first_input)).terminal_errors,
            variants=variants if len(variants) > 1 else []))
    out.sort(key=lambda r: (r.start, str(r.actor), str(r.session), str(r.action)))
    _terminal_signals(con, out)
    return out, np.sort(np.concatenate(covered)) if covered else NONE


def _ts(ms) -> dt.datetime:
    return dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=int(ms))


# The closes of the runs' sessions, and for each run the last one at or before its start in its
# own file (another daemon's session of the same name is another session): one ASOF join over
# one scan of the requests, not a query per run (5,557 runs of a shattered storm took minutes).
TERMINALS = """
WITH closes AS (
  SELECT e.file, e.line, e.ts, e.action, e.session, e.event_id >> 32 AS input,
         CAST(epoch_ms(e.ts) AS HUGEINT) * 4294967296 + e.line AS pos
  FROM events e SEMI JOIN _re_runs r ON e.session = r.session
  WHERE e.kind = 'request' AND e.ts IS NOT NULL
    AND (e.action IN ('session.close', 'session.end', 'close') OR e.action LIKE '%.close'))
SELECT r.i, c.file, c.line, c.ts, c.action
FROM (SELECT *, CAST(epoch_ms(start) AS HUGEINT) * 4294967296 + 4294967295 AS pos
      FROM _re_runs) r
ASOF JOIN closes c ON r.session = c.session AND r.input = c.input AND r.pos >= c.pos
"""


def _terminal_signals(con: duckdb.DuckDBPyConnection, runs: list[ErrorRun]) -> None:
    """What should have stopped each caller: a close of the session, logged in the same file
    before the run began (the latest such, the last line of equal times)."""
    rows = [(i, r.session, r.start, r.input) for i, r in enumerate(runs) if r.session]
    if not rows:
        return
    con.execute("CREATE OR REPLACE TEMP TABLE _re_runs "
                "(i INTEGER, session VARCHAR, start TIMESTAMP, input BIGINT)")
    i, session, start, input_ = (list(col) for col in zip(*rows, strict=True))
    con.execute("INSERT INTO _re_runs SELECT unnest($i), unnest($s), unnest($t), unnest($n)",
                {"i": i, "s": session, "t": start, "n": input_})
    try:
        for k, file, line, at, action in con.execute(TERMINALS).fetchall():
            r = runs[k]
            r.terminal = Terminal(file, line, at, f"`{action}` closed session {r.session} before "
                                                  "the first failure, and the caller kept going")
    finally:
        con.execute("DROP TABLE IF EXISTS _re_runs")


# ---------------------------------------------------------------------------------------------
# measure: an agent retrying one call, other calls between


RETRY_KIND = "tool_call"
RETRY_EVIDENCE = 10  # result lines a retry finding shows: the first nine failures and the last

# The attempts (calls with an outcome) of every call of an agent, in one file, session and
# by one actor, that failed at least `retry_min_count` times; in one scan, since a store of
# thousands of transcripts pays for every scan of its events. `failure`: the same number for
# the same error and result after masking (result_key is masked already), 0 for a success.
RETRY_ATTEMPTS = f"""
WITH calls AS MATERIALIZED (
  SELECT event_id >> 32 AS input, actor, session, action_key, ts, event_id, error, result_key,
         error IS NOT NULL AND ok IS DISTINCT FROM true AS failed
  FROM events
  WHERE kind = $kind AND ts IS NOT NULL AND action_key IS NOT NULL
    AND (error IS NOT NULL OR ok IS NOT NULL)),
retried AS (
  SELECT input, actor, session, action_key FROM calls WHERE failed
  GROUP BY ALL HAVING count(*) >= $min_count)
SELECT c.input, c.actor, c.session, c.action_key, epoch_ms(c.ts) AS t, c.event_id, c.failed,
       CASE WHEN c.failed THEN hash({mask_sql('c.error')}, c.result_key) ELSE 0 END AS failure
FROM calls c SEMI JOIN retried r ON c.input = r.input AND c.action_key = r.action_key
  AND c.actor IS NOT DISTINCT FROM r.actor AND c.session IS NOT DISTINCT FROM r.session
ORDER BY c.input, c.actor, c.session, c.action_key, t, c.event_id
"""
# For each run, in one scan: the actor's calls from its first failure to its last, in order
# (what it did between), and the lines that gave it each failure's result (a result line that
# answers the call where the format writes one; the call's own line where it does not)
RETRY_DETAILS = """
SELECT r.i, e.event_id, e.kind, e.file, e.line, coalesce(e.action, '?') AS action,
       e.action_key, e.args, e.result, e.error, e.answers,
       e.action_key IS NOT DISTINCT FROM r.action_key AS own,
       hash(e.action_key, e.result_key, e.ok, e.error) AS fkey,
       e.error IS NOT NULL OR e.ok IS NOT DISTINCT FROM false AS failed
FROM _rt_runs r JOIN events e ON e.event_id >> 32 = r.input
WHERE e.kind IN ($kind, 'response')
  AND ((e.kind = $kind AND e.actor IS NOT DISTINCT FROM r.actor
        AND e.session IS NOT DISTINCT FROM r.session AND e.ts BETWEEN r.start AND r.stop)
       OR (e.kind = 'response' AND list_contains(r.failures, e.answers)))
ORDER BY r.i, e.ts, e.event_id
"""
CLAIM_RETRY = claim_units("list_contains($ids, e.event_id)")


@dataclass
class Retry:
    """One agent's tool call sent again and again, failing the same way every time, whatever
    other calls came between."""

    actor: str | None
    session: str | None
    action: str | None
    action_key: str
    args: str | None
    error: str  # the first failure's error value (its first line, in agent formats)
    result: str | None  # the first failure's result, as the log gives it
    count: int
    start: dt.datetime
    stop: dt.datetime
    gaps: Gaps
    ended_by_change: bool  # the same call's next attempt got another outcome
    failures: list[int]  # the failures' event ids
    result_lines: list[tuple[str, int]]  # where the agent read each failure, in order
    between: dict[str, int] = dataclasses.field(default_factory=dict)  # other calls by action
    between_failed: int = 0  # of those, how many failed
    input: int = 0  # the input (log file) it was read from


def retry_ranges(group: np.ndarray, t: np.ndarray, failure: np.ndarray, failed: np.ndarray,
                 min_count: int, max_gap_ms: float) -> list[tuple[int, int, bool]]:
    """(lo, hi, ended_by_change) of the retry runs over one call's attempts (sorted by group,
    then time; `failure`: a number per distinct failure): `failure_runs` over the call's own
    attempts, so that other calls between do not cut a run and another outcome of the call
    does; ended_by_change when the call's next attempt, in time, got another outcome."""
    out = []
    for lo, hi in failure_runs(group, t, failure, failed, min_count, max_gap_ms):
        ended = hi < len(t) and group[hi] == group[lo] and t[hi] - t[hi - 1] <= max_gap_ms
        out.append((lo, hi, bool(ended)))
    return out


def any_in(values: np.ndarray, ordered: np.ndarray) -> bool:
    """Whether any of `values` is in the sorted array `ordered`."""
    if not len(ordered) or not len(values):
        return False
    at = np.minimum(np.searchsorted(ordered, values), len(ordered) - 1)
    return bool((ordered[at] == values).any())


def retry_runs(con: duckdb.DuckDBPyConnection, p: Params, covered: np.ndarray) -> list[Retry]:
    """Every retry run of at least `retry_min_count` attempts that shares no failure with
    `covered` (the sorted event ids of a consecutive run's: the same loop, reported once),
    with the lines where each failure was read and what the agent did between; none that
    comes round a cycle (`_details`)."""
    found = con.sql(RETRY_ATTEMPTS, params={"kind": RETRY_KIND, "min_count": p.retry_min_count}
                    ).to_arrow_table()
    if found.num_rows == 0:
        return []
    # a call: one action_key of one actor in one session of one file (two trajectories of one
    # task name one session, and are two agents' runs)
    keys = found.select(["input", "actor", "session", "action_key"]).to_pylist()
    g = np.zeros(len(keys), dtype=np.int64)
    g[1:] = np.cumsum([keys[i] != keys[i - 1] for i in range(1, len(keys))])
    t, event_id, failed, failure = (arrow_numpy(found[c])
                                    for c in ("t", "event_id", "failed", "failure"))
    kept = [(lo, hi, ended) for lo, hi, ended in
            retry_ranges(g, t, failure, failed, p.retry_min_count, p.retry_gap_s * 1000)
            if not any_in(event_id[lo:hi], covered)]
    runs = [Retry(actor=keys[lo]["actor"], session=keys[lo]["session"], action=None,
                  action_key=keys[lo]["action_key"], args=None, error="", result=None,
                  count=hi - lo, start=_ts(t[lo]), stop=_ts(t[hi - 1]), gaps=gap_figures(t[lo:hi]),
                  ended_by_change=ended, failures=[int(i) for i in event_id[lo:hi]],
                  result_lines=[], input=int(keys[lo]["input"]))
            for lo, hi, ended in kept]
    cycles = _details(con, runs)
    out = [r for r, cycle in zip(runs, cycles, strict=True) if not cycle]
    out.sort(key=lambda r: (r.start, str(r.actor), str(r.session), r.action_key))
    return out


def _details(con: duckdb.DuckDBPyConnection, runs: list[Retry]) -> list[bool]:
    """Fill in each run's call (action, arguments, error and result of its first failure),
    the lines where the agent read each failure, and what it did between its first failure
    and its last (its other calls, by action, and how many failed); and say which runs come
    round a cycle: the same k ≤ MAX_CYCLE calls with the same results between every two
    attempts (restore the file, apply the same patch, run the same failing test).
    alternating_action describes such a loop whole, all its steps and what each cost, so it
    is left to it."""
    if not runs:
        return []
    temp_table(con, "_rt_runs", {
        "i": ("INTEGER", list(range(len(runs)))),
        "input": ("BIGINT", [r.input for r in runs]),
        "actor": ("VARCHAR", [r.actor for r in runs]),
        "session": ("VARCHAR", [r.session for r in runs]),
        "action_key": ("VARCHAR", [r.action_key for r in runs]),
        "start": ("TIMESTAMP", [r.start for r in runs]),
        # the runs' times are whole milliseconds, a log's may be finer
        "stop": ("TIMESTAMP", [r.stop + dt.timedelta(milliseconds=1) for r in runs]),
        "failures": ("BIGINT[]", [r.failures for r in runs])})
    try:
        rows = con.execute(RETRY_DETAILS, {"kind": RETRY_KIND}).fetchall()
    finally:
        con.execute("DROP TABLE IF EXISTS _rt_runs")
    own: dict[int, list[bool]] = {}
    fkeys: dict[int, list[int]] = {}
    result_line: dict[int, tuple[str, int]] = {}  # a failure's event id → its result's line
    call_line: dict[int, tuple[str, int]] = {}  # → its own line
    for i, eid, kind, file, line, action, _, args, result, error, answers, mine, fkey, failed in rows:
        r = runs[i]
        if kind == "response":
            result_line.setdefault(answers, (file, line))
            continue
        own.setdefault(i, []).append(mine)
        fkeys.setdefault(i, []).append(fkey)
        if mine:
            call_line[eid] = (file, line)
            if eid == r.failures[0]:
                r.action, r.args, r.result, r.error = action, args, result, error
        else:
            r.between[action] = r.between.get(action, 0) + 1
            r.between_failed += int(bool(failed))
    for r in runs:
        r.between = dict(sorted(r.between.items(), key=lambda kv: (-kv[1], kv[0])))
        r.result_lines = [result_line.get(f) or call_line[f] for f in r.failures]
    return [is_cycle(own.get(i, []), fkeys.get(i, []), MAX_CYCLE) for i in range(len(runs))]


def is_cycle(own: list[bool], keys: list, max_k: int) -> bool:
    """Whether a sequence of calls (`own`: which are the retried call's; `keys`: each call
    with its result) comes round one cycle of 2 … `max_k` calls from the first retried call to
    the last: the retried call every k-th call, and each call the same as the one k before."""
    at = [i for i, o in enumerate(own) if o]
    if len(at) < 2:
        return False
    k = at[1] - at[0]
    if not 2 <= k <= max_k or any(b - a != k for a, b in zip(at, at[1:], strict=False)):
        return False
    return all(keys[i] == keys[i + k] for i in range(at[0], at[-1] - k + 1))


# ---------------------------------------------------------------------------------------------
# judge


@dataclass(frozen=True)
class Pace:
    backing_off: bool  # the gaps grew: late gaps at least `backoff_ratio` × the early ones
    metronome: bool  # near-constant gaps (coefficient of variation under METRONOME_CV)
    tight: bool  # median gap at or under `tight_gap_s`
    cv: float | None  # the gaps' coefficient of variation


def pace(count: int, gaps: Gaps, p: Params) -> Pace:
    """How the caller kept trying, read from its gaps against the thresholds."""
    early, late = gaps.early_ms or 0.0, gaps.late_ms or 0.0
    cv = (gaps.sd_ms / gaps.mean_ms) if gaps.mean_ms else None
    return Pace(backing_off=early > 0 and late >= p.backoff_ratio * early and count >= PACE_MIN_COUNT,
                metronome=cv is not None and cv < METRONOME_CV and count >= PACE_MIN_COUNT,
                tight=(gaps.median_ms or 0.0) <= p.tight_gap_s * 1000, cv=cv)


def judge(r: ErrorRun | Retry, p: Params) -> Severity | None:
    if isinstance(r, Retry):
        return judge_retry(r, p)
    pc = pace(r.count, r.gaps, p)
    if pc.backing_off:
        return Severity.MEDIUM if r.count < p.critical_count else Severity.HIGH
    if r.count >= p.critical_count or (pc.tight and r.count >= 10 * p.min_count):
        return Severity.CRITICAL
    return Severity.HIGH


# ---------------------------------------------------------------------------------------------
# describe


def judge_retry(r: Retry, p: Params) -> Severity | None:
    """Critical from ten times `retry_min_count` (each attempt was a paid model turn). Below
    that, a run that ended with the call getting another outcome is a poll that ended when
    nothing came between its attempts (the agent waited for the world: quiet, as
    repeated_action's), and low when the agent worked between them (it got there, late); a run
    that never got another outcome is high: the agent read the same failure again and again and
    sent the same call each time."""
    if r.count >= 10 * p.retry_min_count:
        return Severity.CRITICAL
    if r.ended_by_change:
        return Severity.LOW if r.between else None
    return Severity.HIGH


def describe(r: ErrorRun | Retry, severity: Severity, p: Params) -> Finding:
    if isinstance(r, Retry):
        return describe_retry(r, severity, p)
    n, median_ms = r.count, r.gaps.median_ms or 0.0
    pc = pace(n, r.gaps, p)
    duration_s = (r.stop - r.start).total_seconds()
    rate = n / duration_s if duration_s > 0 else float(n)
    terminal = r.terminal
    who = r.actor or (f"session {r.session}" if r.session else "a caller")
    what = f"`{r.action}`" if r.action else "its call"
    where = f" on session {r.session}" if r.session else ""
    pace_text = (f"every {median_ms / 1000:.3g} s (median)" if median_ms else "in a burst")
    title = f"{what} failed {n:,} times in a row with {r.error}{where}"
    summary = (
        f"{who} sent {what}{where} {n:,} times over {human_duration(duration_s)}, {pace_text}, "
        f"{rate:.3g}/s, and got {r.error} every time"
        + ("; the gaps grew, so the caller was backing off" if pc.backing_off else
           "; it never backed off")
        + (f" ({len(r.variants):,} texts that differ only in ids, times or numbers, e.g. "
           f"{r.variants[-1]})" if r.variants else "")
        + (f"; {terminal.note}" if terminal else "")
        + (" Near-constant gaps: a machine loop (metronome cadence)." if pc.metronome else "")
    )
    return Finding(
        detector="repeated_error",
        key=f"{r.actor}|{r.session}|{r.action}|{r.error}|{r.start:%Y-%m-%dT%H:%M:%S}",
        severity=severity, title=title, summary=summary,
        signal=f"{n:,} {r.error} errors in a row" + (f" on {what}" if r.action else ""),
        recommendation=_recommendation(r.error, r.retry_never, terminal is not None),
        start=r.start, end=r.stop,
        actors=[r.actor] if r.actor else [],
        targets=[],
        sessions=[r.session] if r.session else [],
        claim_sql=CLAIM,
        claim_params={"start": r.start, "stop": r.stop, "errors": r.errors,
                      "actor": r.actor, "session": r.session, "action": r.action,
                      "kinds": list(ATTEMPT_KINDS)},
        unit_kinds=ATTEMPT_KINDS,
        details={
            "error": r.error, "action": r.action, "count": n,
            "duration_s": duration_s, "rate_per_s": rate,
            "median_gap_ms": median_ms, "gap_cv": pc.cv, "first_gaps_ms": r.gaps.first,
            "last_gaps_ms": r.gaps.last, "backing_off": pc.backing_off, "metronome": pc.metronome,
            "tight_loop": pc.tight, "retry_hint_never": r.retry_never,
            "terminal_signal": dataclasses.asdict(terminal) if terminal else None,
        } | ({"error_variants": len(r.variants), "error_examples": r.variants[:5]}
             if r.variants else {}),
        evidence=[EvidenceLine(terminal.file, terminal.line, terminal.note)] if terminal else [],
    )


def _recommendation(error: str | None, never: bool, terminal: bool) -> str:
    if never or terminal:
        return (f"Treat {error} as terminal: a circuit breaker in the caller that aborts after 3 "
                "identical errors on one session; have the service answer `retry: never` for "
                "closed sessions, and throttle repeated errors per session (1 s doubling to "
                "30 s) so a stuck caller cannot run at full speed.")
    return ("Add a circuit breaker: after 3–5 identical errors for the same caller, session and "
            "action, stop and escalate instead of retrying; retry only with exponential back-off "
            "and a cap on attempts.")


def describe_retry(r: Retry, severity: Severity, p: Params) -> Finding:
    n, median_ms = r.count, r.gaps.median_ms or 0.0
    duration_s = (r.stop - r.start).total_seconds()
    rate = n / duration_s if duration_s > 0 else float(n)
    who = r.actor or (f"session {r.session}" if r.session else "an agent")
    what = f"`{r.action}`" if r.action else "the same call"
    where = f" in session {r.session}" if r.session else ""
    args, result = clip(r.args, 120), clip(r.result, 160)
    others = sum(r.between.values())
    pace_text = f"every {median_ms / 1000:.3g} s (median)" if median_ms else "in a burst"
    command = _command(r.args)
    title = (f"{what}" + (f" `{command}`" if command else "") + f" failed the same way {n:,} times "
             f"in {human_duration(duration_s)}, {'other calls between' if others else 'in a row'} "
             f"({clip(r.error, 80)}){where}")
    summary = (
        f"{who} sent the same call {n:,} times{where}, {what}" + (f" with {args}" if args else "")
        + f", over {human_duration(duration_s)}, {pace_text}, and read the same failure every "
          f"time: {result or r.error}"
        + (f". Between the attempts it made {others:,} other call{'s' if others > 1 else ''} ("
           + ", ".join(f"{c:,} `{a}`" for a, c in r.between.items())
           + f"; {others - r.between_failed:,} succeeded), and none of them changed the outcome"
           if others else "")
        + (". The run ended when the call got another outcome" if r.ended_by_change
           else ". The call never got another outcome")
        + ".")
    picks = _retry_picks(r)
    return Finding(
        detector="repeated_error",
        key=f"retry|{r.actor}|{r.session}|{r.action_key}|{r.start:%Y-%m-%dT%H:%M:%S.%f}",
        severity=severity, title=title, summary=summary,
        signal=f"the same {what} failing the same way {n:,} times",
        recommendation=RETRY_RECOMMENDATION,
        start=r.start, end=r.stop,
        actors=[r.actor] if r.actor else [], targets=[],
        sessions=[r.session] if r.session else [],
        claim_sql=CLAIM_RETRY,
        # the stop one millisecond on: the runs' times are whole milliseconds, a log's finer
        claim_params={"start": r.start, "stop": r.stop + dt.timedelta(milliseconds=1),
                      "ids": r.failures},
        unit_kinds=(RETRY_KIND,),
        details={
            "error": r.error, "action": r.action, "args": clip(r.args, 400),
            "result": clip(r.result, 400), "count": n, "duration_s": duration_s,
            "rate_per_s": rate, "median_gap_ms": median_ms, "retried_with_calls_between": True,
            "calls_between": others, "calls_between_by_action": dict(r.between),
            "calls_between_failed": r.between_failed,
            "ended_by_another_outcome": r.ended_by_change,
        },
        evidence=picks,
        evidence_limit=len(picks) + 2,
    )


def _command(args: str | None) -> str | None:
    """What a title names the call by: the `command` of its arguments (a shell tool's), else
    nothing (the summary quotes the arguments)."""
    try:
        value = json.loads(args) if args else None
    except ValueError:
        return None
    command = value.get("command") if isinstance(value, dict) else None
    if isinstance(command, list):  # Codex's older `shell`: ["bash", "-lc", "git commit"]
        command = " ".join(str(c) for c in command)
    return clip(command, 70) if isinstance(command, str) and command.strip() else None


def _retry_picks(r: Retry) -> list[EvidenceLine]:
    """The lines where the agent read the failure: the first RETRY_EVIDENCE - 1 and the last."""
    n = len(r.result_lines)
    shown = list(range(min(n, RETRY_EVIDENCE - 1))) + ([n - 1] if n >= RETRY_EVIDENCE else [])
    return [EvidenceLine(*r.result_lines[i], f"attempt {i + 1} of {n:,}: {clip(r.error, 100)}")
            for i in shown]


RETRY_RECOMMENDATION = (
    "Stop an agent that resends a call which keeps failing the same way: count (tool input, "
    "error) per session in the agent's harness and after 3 identical failures refuse the "
    "identical call and make the agent re-plan or ask (a Claude Code `PreToolUse` hook that "
    "blocks with exit code 2; OpenHands' StuckDetector stops after 3 identical errors, but only "
    "in a row, and the calls between hid this one). When a check rejects the call (a pre-commit "
    "hook, a linter, a test), fix what it reports before sending the call again, or hand over.")


DETECTOR = Detector(
    name="repeated_error",
    description="the same error returned again and again to the same caller or session, or to "
                "an agent resending the same tool call between other calls",
    params=Params,
    run=staged(measure, judge, describe),
    rank=10,
    reads=ATTEMPT_KINDS,
    needs=(("ts",), ("error",), ("actor", "session")),
    # runs are one (actor, session, action)'s, retry runs one (actor, session, call)'s; what
    # stopped them, a close of the session
    partition_by=("session",),
    grows_with_log=True,
)

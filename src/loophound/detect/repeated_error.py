"""repeated_error: the same error returned again and again to the same caller.

A run is a maximal sequence of one (actor, session, action)'s attempts that all failed with the
same error, with no success and no gap longer than `max_gap_s` between them. Retrying is not
a loop by itself: a caller that backs off (gaps that keep growing) or stops after a few tries
is healthy; one that keeps firing at a steady pace after the service said "never retry" is
the seed-001 incident. Severity says which, and the finding shows the gaps that decided it.
Errors are the same when their texts are equal after masking ids, times, hashes and numbers
(normalise.py): `lock held by pid 4182` and `lock held by pid 977` are one error.

- measure: the runs (`failure_runs` cuts them, `gap_figures` sums up their gaps), with what
  should have stopped the caller (a close of the session before the run) and whether the
  service's format marks the error as never to retry;
- judge (`pace` reads the gaps against the thresholds): a caller backing off (late gaps
  `backoff_ratio` × the early ones) is medium, high from `critical_count` attempts; otherwise
  critical from `critical_count` attempts, or from 10 × `min_count` at a tight pace (median gap
  ≤ `tight_gap_s`); high below that;
- describe: what happened, the pace, and a circuit breaker to add.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass

import duckdb
import numpy as np

from ..normalise import mask
from ..vocabulary import Severity
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


# Every (actor, session, action) that failed at least `min_count` times, numbered; then their
# attempts. Runs are cut in numpy: one scan in SQL (joined on a hash of the triple, then
# checked), one sort and vectorised comparisons, because a 600,000-attempt storm is one window
# partition that SQL would walk on one core, three times.
GROUPS = """
SELECT actor, session, action, hash(actor, session, action) AS h,
       row_number() OVER (ORDER BY actor, session, action) AS g
FROM events
WHERE list_contains($kinds, kind) AND ts IS NOT NULL AND error IS NOT NULL
GROUP BY actor, session, action HAVING count(*) >= $min_count
"""
ATTEMPTS_FROM = """
FROM events e
JOIN _re_groups g ON hash(e.actor, e.session, e.action) = g.h AND e.actor IS NOT DISTINCT FROM g.actor
             AND e.session IS NOT DISTINCT FROM g.session AND e.action IS NOT DISTINCT FROM g.action
WHERE list_contains($kinds, e.kind) AND e.ts IS NOT NULL AND (e.error IS NOT NULL OR e.ok IS NOT NULL)
"""
ATTEMPTS = """
SELECT g.g, epoch_ms(e.ts) AS t, coalesce(e.ok, false) AS ok, e.event_id,
       e.error IS NOT NULL AS erred, hash(e.error) AS error_hash
""" + ATTEMPTS_FROM
ERROR_TEXTS = "SELECT hash(e.error), any_value(e.error)" + ATTEMPTS_FROM + " GROUP BY 1"

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
    """`masked_errors` given each hash's text (`texts`: hash → error text)."""
    hashes, inverse = np.unique(raw, return_inverse=True)
    ids: dict[str | None, int] = {}
    number = np.array([ids.setdefault(mask(texts.get(h)), len(ids)) for h in hashes],
                      dtype=np.int64)
    return number[inverse]


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


def measure(con: duckdb.DuckDBPyConnection, p: Params) -> list[ErrorRun]:
    """Every run of at least `min_count` identical consecutive errors, with its gap figures
    and what should have stopped it."""
    kinds = list(ATTEMPT_KINDS)
    found = con.sql(GROUPS, params={"kinds": kinds, "min_count": p.min_count}).to_arrow_table()
    if found.num_rows == 0:
        return []
    groups = {r["g"]: (r["actor"], r["session"], r["action"]) for r in found.to_pylist()}
    format_of = input_formats(con)
    con.register("_re_groups", found)
    try:
        # in time order within each group, equal times in log order (input, then line):
        # sorted by DuckDB, which spills what does not fit, and fetched as numpy columns
        # without the text of each attempt's error (its hash; the texts once each): the
        # 6 M attempts of a storm ten times seed 001's are 200 MB, not a gigabyte
        cols = con.execute(ATTEMPTS + " ORDER BY g.g, t, e.event_id",
                           {"kinds": kinds}).fetchnumpy()
        texts = dict(con.execute(ERROR_TEXTS, {"kinds": kinds}).fetchall())
    finally:
        con.unregister("_re_groups")
    if not len(cols["t"]):
        return []
    g, t, event_id, raw = cols["g"], cols["t"], cols["event_id"], cols["error_hash"]
    # the same error text after masking ids and numbers (normalise.py), the same number
    err = masked_numbers(raw, texts)
    failed = cols["erred"] & ~cols["ok"]
    del cols
    out = []
    for lo, hi in failure_runs(g, t, err, failed, p.min_count, p.max_gap_s * 1000):
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
    return out


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


def judge(r: ErrorRun, p: Params) -> Severity:
    pc = pace(r.count, r.gaps, p)
    if pc.backing_off:
        return Severity.MEDIUM if r.count < p.critical_count else Severity.HIGH
    if r.count >= p.critical_count or (pc.tight and r.count >= 10 * p.min_count):
        return Severity.CRITICAL
    return Severity.HIGH


# ---------------------------------------------------------------------------------------------
# describe


def describe(r: ErrorRun, severity: Severity, p: Params) -> Finding:
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


DETECTOR = Detector(
    name="repeated_error",
    description="the same error returned again and again to the same caller or session",
    params=Params,
    run=staged(measure, judge, describe),
    rank=10,
    reads=ATTEMPT_KINDS,
    needs=(("ts",), ("error",), ("actor", "session")),
    # runs are one (actor, session, action)'s; what stopped them, a close of the session
    partition_by=("session",),
)

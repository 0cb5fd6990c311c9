"""rate_spike: a session's, an actor's or the whole log's event rate far above its own baseline.

Method (peers §8): unit events (requests, messages, room posts, steps, LLM calls, triggers,
session starts; never responses or lifecycle lines) are counted in buckets whose width is
chosen from the data: the smallest of 1 s … 1 day that splits the busy span of the format's
events (1st to 99th percentile of their times) into at most `target_buckets`. Each series
(per session, per actor, and the whole log of one format) is walked in time order:

- baseline: max(median, mean) of the trailing `baseline_buckets` normal buckets (never below
  `floor_per_min`), scale max(1.4826·MAD, √baseline) — the Poisson floor;
- a bucket opens a spike when it has at least `min_bucket_count` events, a robust z-score of at
  least `z` and a one-sided Poisson tail p = P(X ≥ count | baseline) of at most `alpha`;
- the baseline is then frozen (a level shift, not a new normal) and the spike runs while
  buckets stay `continue_z` scales above it, bridging `merge_gap` quiet buckets;
- start and end are refined on the events themselves: the bucket before and after are added,
  and leading/trailing events more than `trim_gap_factor` typical gaps apart are dropped.

A spike that another series explains better is dropped: sessions are tried first, then actors,
then the whole log, and a later spike is kept only when the kept ones overlapping it in time
cover less than 80% of its events; a broader spike kept that way absorbs the narrower
spikes inside it (one incident, one finding; their names are in `details.includes`). A message
stored by both parties (sven keeps a copy per node) counts once.

Near-constant gaps between consecutive events (bproxy's metronome guard: |Δi − Δi−1| / Δi−1
< 0.10 three or more times in a row, after subtracting the service's own waits that its format
profile names, bproxy's `pacing_wait` and `error_delay`) are reported as evidence of a machine
loop, and so are the errors of the service's own rate guard (the profile's `rate_guard_errors`).

Severity: high only for a large (≥ `high_ratio` × baseline, ≥ `high_excess` excess events),
significant and sustained (≥ `high_duration_s`) spike whose busiest single actor runs at machine
speed (faster than `human_rate_per_s`, bproxy's own cap); otherwise medium (enough excess, or a
metronome cadence, or machine speed), or low when it is small. A busy but human-paced session,
polling that backs off, or even steady polling every few seconds therefore never reaches high:
a metronome cadence is evidence of a machine, not of a runaway one. Rate spikes
are often the visible side of a loop another detector names (repeated_error, ping_pong):
attribution gives those events to the better explanation, and this finding keeps its totals.

measure() finds the candidates (`scan_series` walks one series, `keep_spikes` drops the ones
another series explains better), refines each on its events (`trim`) and measures it (a
Spike: counts, rates, baseline, cadence by `metronome`, who took part, the lines to show);
the kernels are pure. judge() applies the severity rule above; describe() writes.
"""

from __future__ import annotations

import bisect
import datetime as dt
import math
from collections import deque
from dataclasses import dataclass, field

import duckdb
import numpy as np

from .. import db
from ..db import sql_literal
from ..vocabulary import Severity
from .base import Detector, EvidenceLine, Finding, claim_units, human_duration, param, staged
from .profiles import profile
from .rates import EPOCH, UNIT_KINDS, bucket_width_s, format_spans, skip_copies

SCOPES = ("session", "actor", "log")  # the order spikes are kept in: most specific first
COVERED = 0.8  # a spike whose events the kept spikes already hold to this share adds nothing


@dataclass
class Params:
    target_buckets: int = param(600, "bucket width: the smallest of 1 s … 1 day that splits the "
                                     "busy span (1st–99th percentile of event times) into at "
                                     "most this many buckets")
    baseline_buckets: int = param(60, "trailing window of normal (non-spike) buckets the "
                                      "baseline is computed from")
    min_history: int = param(10, "normal buckets a series needs before it can spike: without "
                                 "its own baseline a series is not tested")
    z: float = param(6.0, "robust z-score (count − baseline) / max(1.4826·MAD, √baseline) a "
                          "bucket needs to open a spike")
    alpha: float = param(1e-6, "one-sided Poisson tail p a bucket needs to open a spike (and "
                               "the whole spike needs, against baseline × its length)")
    min_bucket_count: int = param(5, "events a bucket needs to open a spike")
    continue_z: float = param(3.0, "a spike continues through buckets at least this many "
                                   "scales above the frozen baseline")
    merge_gap: int = param(2, "quiet buckets bridged inside one spike")
    floor_per_min: float = param(0.1, "the baseline is never below this many events per "
                                      "minute, so a silent series does not spike on a handful")
    min_count: int = param(30, "events a spike needs")
    min_excess: int = param(20, "events above the baseline a spike needs")
    min_ratio: float = param(4.0, "spike rate / baseline rate a spike needs")
    trim_gap_factor: float = param(5.0, "start/end refinement: leading and trailing events "
                                        "more than this many median gaps apart are dropped")
    human_rate_per_s: float = param(1.0, "sustained rates above this are machine speed "
                                         "(bproxy's own cap is 60 requests a minute)")
    metronome_tolerance: float = param(0.10, "two consecutive gaps are equal when they differ "
                                             "by less than this fraction (bproxy's guard)")
    metronome_run: int = param(3, "equal gaps in a row that make a metronome run")
    metronome_share: float = param(0.5, "share of a spike's gaps inside metronome runs that "
                                        "marks its cadence as a machine's")
    metronome_max_gap_s: float = param(60.0, "gaps longer than this are not cadence")
    cadence_sample: int = param(20000, "cadence is measured on the first this many events of a "
                                       "spike")
    high_ratio: float = param(10.0, "high needs the spike rate this many times the baseline")
    high_excess: int = param(300, "high needs this many events above the baseline")
    high_duration_s: float = param(60.0, "high needs the spike to last this long")
    medium_excess: int = param(60, "below this many excess events (and without machine pace) "
                                   "a spike is low")


@dataclass
class Candidate:
    """A run of buckets of one series far above its baseline, before it is refined."""

    fmt: str
    scope: str
    key: str
    width_ms: int
    origin_ms: int
    first_b: int  # real bucket indices
    last_b: int
    baseline: float  # events per bucket
    scale: float
    open_z: float
    open_log10_p: float
    buckets: dict[int, int] = field(default_factory=dict)
    includes: list[str] = field(default_factory=list)  # narrower spikes this one absorbed
    copies: str = ""  # SQL condition skipping second copies of stored-twice messages

    def count(self) -> int:
        return sum(self.buckets.values())

    def overlap(self, other: Candidate) -> int:
        if other.fmt != self.fmt:
            return 0
        return sum(min(n, other.buckets.get(b, 0)) for b, n in self.buckets.items())


# ---------------------------------------------------------------------------------------------
# measure: statistics


def poisson_log10_sf(x: float, lam: float) -> float:
    """log10 P(X ≥ x) for X ~ Poisson(lam); exact series summed in log space (no scipy)."""
    x = int(math.ceil(x))
    if x <= 0:
        return 0.0
    if lam <= 0:
        return -math.inf
    if x <= lam:
        return 0.0  # not in the upper tail: no evidence of a spike (p is 0.5 or more, roughly)
    log_term = x * math.log(lam) - lam - math.lgamma(x + 1)
    total, term, k = 1.0, 1.0, x
    while True:  # terms shrink at least geometrically because k ≥ x > lam
        k += 1
        term *= lam / k
        total += term
        if term < 1e-16 * total or k > x + 100_000:
            break
    return (log_term + math.log(total)) / math.log(10)


def metronome(times_ms: np.ndarray, delays_ms: np.ndarray | None, tolerance: float,
              run: int, max_gap_ms: float) -> dict:
    """Cadence of consecutive events: gaps (minus the service's own delays), how many of them
    sit in runs of `run`+ near-equal gaps, the longest run and where it starts."""
    out = {"gaps": 0, "median_gap_ms": None, "gap_cv": None, "equal_runs": 0,
           "longest_run": 0, "share_in_runs": 0.0, "longest_run_start": None,
           "longest_run_gap_ms": None}
    if len(times_ms) < 3:
        return out
    gaps = np.diff(times_ms).astype(float)
    if delays_ms is not None:
        gaps = np.maximum(gaps - delays_ms[:-1], 0.0)
    out["gaps"] = int(len(gaps))
    out["median_gap_ms"] = float(np.median(gaps))
    mean = float(gaps.mean())
    out["gap_cv"] = float(gaps.std() / mean) if mean > 0 else None
    prev, cur = gaps[:-1], gaps[1:]
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.abs(cur - prev) / prev
    equal = (prev > 0) & (prev <= max_gap_ms) & (cur <= max_gap_ms) & (rel < tolerance)
    if not equal.any():
        return out
    padded = np.concatenate(([False], equal, [False])).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    starts, ends = edges[0::2], edges[1::2]
    lengths = ends - starts
    good = lengths >= run
    out["equal_runs"] = int(good.sum())
    out["share_in_runs"] = float(lengths[good].sum() / len(equal)) if good.any() else 0.0
    i = int(np.argmax(lengths))
    out["longest_run"] = int(lengths[i])
    if lengths[i] >= run:
        # equal[j] compares gap j and gap j+1, i.e. events j .. j+2
        out["longest_run_start"] = int(starts[i])
        out["longest_run_gap_ms"] = float(np.median(gaps[starts[i]:ends[i] + 1]))
    return out


# ---------------------------------------------------------------------------------------------
# measure: walking the series


def scan_series(idx: np.ndarray, counts: np.ndarray, p: Params, floor: float) -> list[tuple]:
    """Spikes in one series given its non-empty buckets. Long silences are shortened to
    `baseline_buckets` zeros: more zeros would not change the trailing window."""
    gaps = np.diff(idx, prepend=idx[0]) - 1
    gaps[0] = 0
    zeros = np.minimum(gaps, p.baseline_buckets)
    n = int(len(idx) + zeros.sum())
    dense = np.zeros(n, np.int64)
    real = np.empty(n, np.int64)
    pos = np.arange(len(idx)) + np.cumsum(zeros)
    dense[pos] = counts
    real[pos] = idx
    # the zeros kept after each non-empty bucket carry the bucket indices that follow it
    fill = np.ones(n, bool)
    fill[pos] = False
    if fill.any():
        owner = np.maximum.accumulate(np.where(fill, -1, np.arange(n)))
        real[fill] = real[owner[fill]] + (np.arange(n) - owner)[fill]

    hist: deque[int] = deque()
    srt: list[int] = []
    total = 0
    spikes: list[tuple] = []
    cur: list | None = None  # [first, last, lam, scale, z, log10p, cont_threshold]
    quiet: list[int] = []
    W = p.baseline_buckets

    def push(x: int) -> None:
        nonlocal total
        hist.append(x)
        bisect.insort(srt, x)
        total += x
        if len(hist) > W:
            old = hist.popleft()
            del srt[bisect.bisect_left(srt, old)]
            total -= old

    for i in range(n):
        x = int(dense[i])
        if cur is not None:
            if x >= cur[6]:
                cur[1] = i
                quiet.clear()
                continue
            quiet.append(x)
            if len(quiet) <= p.merge_gap:
                continue
            spikes.append(tuple(cur))
            cur = None
            for q in quiet[:-1]:
                push(q)
            quiet.clear()
        if len(hist) >= p.min_history and x >= p.min_bucket_count:
            m = len(srt)
            med = srt[m // 2] if m % 2 else (srt[m // 2 - 1] + srt[m // 2]) / 2
            lam = max(med, total / m, floor)
            if x > lam:
                mad = float(np.median(np.abs(np.asarray(srt, float) - med)))
                scale = max(1.4826 * mad, math.sqrt(lam))
                z = (x - lam) / scale
                lp = poisson_log10_sf(x, lam)
                if z >= p.z and lp <= math.log10(p.alpha):
                    cont = max(lam + p.continue_z * scale, 2.0)
                    cur = [i, i, lam, scale, z, lp, cont]
                    quiet.clear()
                    continue
        push(x)
    if cur is not None:
        spikes.append(tuple(cur))
    out = []
    for first, last, lam, scale, z, lp, _ in spikes:
        seg = {int(real[j]): int(dense[j]) for j in range(first, last + 1) if dense[j]}
        out.append((int(real[first]), int(real[last]), lam, scale, z, lp, seg))
    return out


SERIES_SQL = """
SELECT format, CASE WHEN grouping(session) = 0 THEN 'session'
                    WHEN grouping(actor) = 0 THEN 'actor' ELSE 'log' END AS scope,
       coalesce(session, actor, format) AS key, b, count(*) AS n
FROM (SELECT e.format, e.session, e.actor,
             (epoch_ms(e.ts) - s.origin) // s.width AS b
      FROM events e JOIN _rs_widths s ON s.format = e.format
      WHERE list_contains($kinds, e.kind) AND e.ts IS NOT NULL {copies})
GROUP BY GROUPING SETS ((format, session, b), (format, actor, b), (format, b))
HAVING (grouping(session) = 1 OR session IS NOT NULL) AND (grouping(actor) = 1 OR actor IS NOT NULL)
ORDER BY format, scope, key, b
"""

SCOPE_COND = {"session": "e.session = $key", "actor": "e.actor = $key", "log": "true"}


def _claim_sql(scope: str) -> str:
    return claim_units(
        f"list_contains($kinds, e.kind) AND e.format = $format AND {SCOPE_COND[scope]}")


def _params(scope: str, fmt: str, key: str, **more) -> dict:
    out = {"kinds": list(UNIT_KINDS), "format": fmt} | more
    if scope != "log":
        out["key"] = key
    return out


def _ts(ms: float) -> dt.datetime:
    return EPOCH + dt.timedelta(milliseconds=int(ms))


# ---------------------------------------------------------------------------------------------
# measure: the spikes


@dataclass(frozen=True)
class Mark:
    """A line worth showing: `what` it is (first, peak, cadence, last, guard) and where."""

    what: str
    file: str
    line: int


@dataclass
class Spike:
    """A refined spike of one series, with everything that is counted of it."""

    fmt: str
    scope: str  # session, actor or log
    series: str  # the session or actor, or the format for the whole log
    width_ms: int  # bucket width
    baseline: float  # events per bucket
    scale: float
    open_z: float
    open_log10_p: float
    buckets: int  # non-empty buckets of the spike
    includes: list[str]  # narrower spikes it absorbed
    start: dt.datetime
    stop: dt.datetime
    count: int
    expected: float  # events the baseline accounts for over the spike
    rate: float  # events per second
    log10_p: float  # Poisson tail of `count` against `expected`
    peak_count: int  # events in the busiest bucket
    cadence: dict  # see `metronome`
    actors: list[str]  # the main ones (≥ 10% of the events), busiest first
    sessions: list[str]
    targets: list[str]
    actor_rate: float  # the busiest actor's own rate
    guard_errors: tuple[str, ...]  # the service's rate-guard errors (its format profile)
    guards: int  # events answered by them
    guard_error: str | None  # the first of them
    marks: list[Mark]

    @property
    def duration_s(self) -> float:
        return (self.stop - self.start).total_seconds()

    @property
    def base_per_s(self) -> float:
        return self.baseline / (self.width_ms / 1000.0)

    @property
    def excess(self) -> float:
        return self.count - self.expected

    @property
    def ratio(self) -> float:
        return self.rate / self.base_per_s if self.base_per_s > 0 else math.inf

    @property
    def peak_rate(self) -> float:
        return self.peak_count / (self.width_ms / 1000.0)


def keep_spikes(candidates: list[Candidate]) -> list[Candidate]:
    """The candidates no better one explains: sessions first, then actors, then the whole log;
    a candidate whose events the kept ones already hold to COVERED is dropped, and a broader
    one kept that way absorbs the narrower ones inside it (their names go to `includes`)."""
    kept: list[Candidate] = []
    for scope in SCOPES:
        for sp in sorted((c for c in candidates if c.scope == scope),
                         key=lambda c: (-c.count(), c.fmt, c.key, c.first_b)):
            covered = sum(k.overlap(sp) for k in kept)
            if covered < COVERED * sp.count():
                # a broader spike that contains narrower ones replaces them: one incident
                inner = [k for k in kept if k.overlap(sp) >= COVERED * k.count()]
                if inner:
                    kept = [k for k in kept if k not in inner]
                    sp.includes = sorted(f"{k.scope} {k.key}" for k in inner)
                kept.append(sp)
    return kept


def measure(con: duckdb.DuckDBPyConnection, p: Params) -> list[Spike]:
    copies = skip_copies(con)
    kinds = list(UNIT_KINDS)
    spans = format_spans(con, copies)
    if not spans:
        return []
    widths = []
    for fmt, _n, lo, q1, q99 in spans:
        w = bucket_width_s(max((q99 - q1) / 1000.0, 1.0), p.target_buckets)
        widths.append((fmt, w * 1000, (lo // (w * 1000)) * (w * 1000)))
    db.temp_table(con, "_rs_widths", {"format": ("VARCHAR", [w[0] for w in widths]),
                                      "width": ("BIGINT", [w[1] for w in widths]),
                                      "origin": ("BIGINT", [w[2] for w in widths])})
    table = con.sql(SERIES_SQL.format(copies=copies), params={"kinds": kinds}).to_arrow_table()
    con.execute("DROP TABLE _rs_widths")
    width_of = {f: (w, o) for f, w, o in widths}

    fmts = table.column("format").to_pylist()
    scopes = table.column("scope").to_pylist()
    keys = table.column("key").to_pylist()
    b = db.arrow_numpy(table.column("b"))
    cnt = db.arrow_numpy(table.column("n"))
    candidates: list[Candidate] = []
    start = 0
    n_rows = len(b)
    while start < n_rows:
        end = start
        ident = (fmts[start], scopes[start], keys[start])
        while end < n_rows and (fmts[end], scopes[end], keys[end]) == ident:
            end += 1
        idx, counts = b[start:end], cnt[start:end]
        start = end
        if counts.sum() < p.min_count or counts.max() < p.min_bucket_count:
            continue
        w_ms, origin = width_of[ident[0]]
        floor = p.floor_per_min * w_ms / 60_000.0
        for first, last, lam, scale, z, lp, seg in scan_series(idx, counts, p, floor):
            sp = Candidate(ident[0], ident[1], ident[2], w_ms, origin, first, last, lam, scale, z, lp,
                        seg, copies=copies)
            nb = last - first + 1
            if (sp.count() >= p.min_count and sp.count() - lam * nb >= p.min_excess
                    and sp.count() / (lam * nb) >= p.min_ratio):
                candidates.append(sp)

    spikes = (_spike(con, sp, p) for sp in keep_spikes(candidates))
    return [sp for sp in spikes if sp is not None]


def _events(con: duckdb.DuckDBPyConnection, sp: Candidate) -> tuple[np.ndarray, np.ndarray]:
    """Times (epoch ms) and event ids of the series from one bucket before to one after."""
    lo = sp.origin_ms + (sp.first_b - 1) * sp.width_ms
    hi = sp.origin_ms + (sp.last_b + 2) * sp.width_ms
    sql = f"""
      SELECT epoch_ms(e.ts) AS t, e.event_id FROM events e
      WHERE list_contains($kinds, e.kind) AND e.format = $format AND e.ts >= $lo AND e.ts < $hi
        AND {SCOPE_COND[sp.scope]} {sp.copies}
      ORDER BY e.ts, e.event_id"""
    t = con.sql(sql, params=_params(sp.scope, sp.fmt, sp.key, lo=_ts(lo), hi=_ts(hi))).to_arrow_table()
    return db.arrow_numpy(t.column("t")).astype(np.int64), db.arrow_numpy(t.column("event_id"))


def _own_delays(con: duckdb.DuckDBPyConnection, sp: Candidate, times: np.ndarray,
                ids: np.ndarray) -> np.ndarray:
    """The service's own delay (ms; its format profile's `delay_events`, bproxy `pacing_wait`
    + `error_delay`) before answering each event: the caller could not send its next request
    before that answer. Zero for a format whose profile states no such waits."""
    prof = profile(sp.fmt)
    delays = np.zeros(len(ids))
    if not prof.delay_events or not prof.delay_key:
        return delays
    sql = f"""
      SELECT e.event_id, d.delay FROM events e
      JOIN (SELECT answers, sum(TRY_CAST(json_extract_string(
                   extra, {sql_literal('$.' + prof.delay_key)}) AS DOUBLE)) AS delay
            FROM events e
            WHERE kind = 'lifecycle' AND list_contains($delay_events, event_type)
              AND format = $format AND ts >= $lo AND ts < $hi + INTERVAL 1 MINUTE
              AND {SCOPE_COND[sp.scope]}
            GROUP BY answers) d ON d.answers = e.event_id
      WHERE e.kind = 'request' AND e.format = $format AND e.ts >= $lo AND e.ts <= $hi
        AND {SCOPE_COND[sp.scope]}"""
    params = _params(sp.scope, sp.fmt, sp.key, lo=_ts(times[0]), hi=_ts(times[-1]),
                     delay_events=list(prof.delay_events))
    del params["kinds"]
    rows = con.execute(sql, params).fetchall()
    if rows:
        order = np.argsort(ids, kind="stable")
        found = np.array([r[0] for r in rows], ids.dtype)
        at = np.searchsorted(ids[order], found)
        ok = (at < len(ids)) & (ids[order][np.minimum(at, len(ids) - 1)] == found)
        delays[order[at[ok]]] = [float(r[1] or 0) for r, good in zip(rows, ok, strict=True) if good]
    return delays


def trim(times: np.ndarray, sp: Candidate, factor: float) -> tuple[int, int]:
    """Index range [i, j] of the spike's own events: the core buckets, extended into the
    neighbour buckets by the dense run that leads in and out, minus leading and trailing
    stragglers more than `factor` typical gaps apart (the level shift's exact edges)."""
    core_lo = sp.origin_ms + sp.first_b * sp.width_ms
    core_hi = sp.origin_ms + (sp.last_b + 1) * sp.width_ms
    ci = np.flatnonzero((times >= core_lo) & (times < core_hi))
    if len(ci) < 3:
        return (int(ci[0]), int(ci[-1])) if len(ci) else (0, len(times) - 1)
    c0, c1 = int(ci[0]), int(ci[-1])
    limit = max(factor * float(np.median(np.diff(times[c0:c1 + 1]))), 1.0)
    sparse = np.diff(times) > limit  # sparse[k]: events k and k+1 are far apart
    cap = max(len(ci) // 10, 1)
    # in: back over the dense run before the core, then forward past sparse stragglers
    before = np.flatnonzero(sparse[:c0])
    i = int(before[-1]) + 1 if len(before) else 0
    ahead = np.flatnonzero(~sparse[i:min(i + cap + (c0 - i), c1 - 1)])
    i = i + int(ahead[0]) if len(ahead) else i
    # out: forward over the dense run after the core, then back past sparse stragglers
    after = np.flatnonzero(sparse[c1:])
    j = c1 + int(after[0]) if len(after) else len(times) - 1
    lo = max(i + 1, j - cap - (j - c1))
    back = np.flatnonzero(~sparse[lo:j])
    j = lo + int(back[-1]) + 1 if len(back) else j
    return i, j


def _spike(con: duckdb.DuckDBPyConnection, sp: Candidate, p: Params) -> Spike | None:
    """The candidate refined on its events and measured; None when the refined spike is no
    longer large or significant enough."""
    times, ids = _events(con, sp)
    if len(times) == 0:
        return None
    i, j = trim(times, sp, p.trim_gap_factor)
    t0, t1 = int(times[i]), int(times[j])
    n = j - i + 1
    base_per_s = sp.baseline / (sp.width_ms / 1000.0)
    rate = n / max((t1 - t0) / 1000.0, sp.width_ms / 1000.0) if n > 1 else 0.0
    expected = base_per_s * max((t1 - t0) / 1000.0, sp.width_ms / 1000.0)
    excess = n - expected
    ratio = rate / base_per_s if base_per_s > 0 else math.inf
    seg_lp = poisson_log10_sf(n, expected)
    if n < p.min_count or excess < p.min_excess or ratio < p.min_ratio \
            or seg_lp > math.log10(p.alpha):
        return None
    peak_b = max(sp.buckets, key=lambda k: (sp.buckets[k], -k))
    k = min(j + 1, i + p.cadence_sample)
    delays = _own_delays(con, sp, times[i:k], ids[i:k])
    cad = metronome(times[i:k], delays, p.metronome_tolerance, p.metronome_run,
                    p.metronome_max_gap_s * 1000)
    start, stop = _ts(t0), _ts(t1)

    cond = SCOPE_COND[sp.scope]
    guard_errors = profile(sp.fmt).rate_guard_errors
    parts = con.execute(
        f"""SELECT actor, session, target, count(*) AS n,
                   count(*) FILTER (WHERE list_contains($guards, error)) AS guards
            FROM events e
            WHERE list_contains($kinds, e.kind) AND e.format = $format
              AND e.ts BETWEEN $start AND $stop AND {cond} {sp.copies}
            GROUP BY ALL ORDER BY n DESC, actor, session, target""",
        _params(sp.scope, sp.fmt, sp.key, start=start, stop=stop, guards=list(guard_errors)),
    ).fetchall()
    actors, sessions, targets = _share(parts, 0, n), _share(parts, 1, n), _share(parts, 2, n)
    guards = sum(r[4] for r in parts)
    per_actor: dict[str, int] = {}
    for r in parts:
        if r[0] is not None:
            per_actor[r[0]] = per_actor.get(r[0], 0) + r[3]
    # one caller's pace: several actors together (or a log written by both ends) are no person
    actor_rate = rate * (max(per_actor.values()) / n if per_actor else 1.0)
    if sp.scope == "session":
        sessions = [sp.key] + [s for s in sessions if s != sp.key]
    elif sp.scope == "actor":
        actors = [sp.key] + [a for a in actors if a != sp.key]
    marks, guard_error = _marks(con, ids, i, j, cad, sp, peak_b, times, guards > 0)
    return Spike(
        fmt=sp.fmt, scope=sp.scope, series=sp.key, width_ms=sp.width_ms, baseline=sp.baseline,
        scale=sp.scale, open_z=sp.open_z, open_log10_p=sp.open_log10_p, buckets=len(sp.buckets),
        includes=sp.includes, start=start, stop=stop, count=n, expected=expected, rate=rate,
        log10_p=seg_lp, peak_count=sp.buckets[peak_b], cadence=cad, actors=actors,
        sessions=sessions, targets=targets, actor_rate=actor_rate, guard_errors=guard_errors,
        guards=guards, guard_error=guard_error, marks=marks)


def _share(rows: list[tuple], col: int, n: int, min_share: float = 0.1, top: int = 5) -> list[str]:
    tally: dict[str, int] = {}
    for r in rows:
        if r[col] is not None:
            tally[r[col]] = tally.get(r[col], 0) + r[3]
    ranked = sorted(tally.items(), key=lambda kv: (-kv[1], kv[0]))
    return [k for k, v in ranked if v >= min_share * n][:top]


def _marks(con: duckdb.DuckDBPyConnection, ids: np.ndarray, i: int, j: int, cad: dict,
           sp: Candidate, peak_b: int, times: np.ndarray,
           guarded: bool) -> tuple[list[Mark], str | None]:
    """The lines to show (first and last event, where the busiest bucket and the longest
    metronome run begin, the first rate-guard error), and that error."""
    picks: list[tuple[int, str]] = [(int(ids[i]), "first")]
    peak_lo = sp.origin_ms + peak_b * sp.width_ms
    k = int(np.searchsorted(times, peak_lo))
    if i < k <= j:
        picks.append((int(ids[k]), "peak"))
    if cad["longest_run_start"] is not None and cad["longest_run"] >= 3:
        picks.append((int(ids[i + cad["longest_run_start"]]), "cadence"))
    picks.append((int(ids[j]), "last"))
    rows = dict((r[0], (r[1], r[2])) for r in con.execute(
        "SELECT event_id, file, line FROM events WHERE " + db.one_of("event_id"),
        {"ids": [e for e, _ in picks]}).fetchall())
    out = [Mark(what, *rows[e]) for e, what in picks if e in rows]
    if guarded:
        cond = SCOPE_COND[sp.scope]
        row = con.execute(
            f"""SELECT file, line, error FROM events e
                WHERE list_contains($guards, e.error) AND e.format = $format
                  AND e.ts BETWEEN $start AND $stop AND list_contains($kinds, e.kind) AND {cond}
                ORDER BY e.ts, e.line LIMIT 1""",
            _params(sp.scope, sp.fmt, sp.key, guards=list(profile(sp.fmt).rate_guard_errors),
                    start=_ts(times[i]), stop=_ts(times[j]))).fetchall()
        if row:
            file, line, error = row[0]
            out.append(Mark("guard", file, line))
            return out, error
    return out, None


# ---------------------------------------------------------------------------------------------
# judge


def machine(s: Spike, p: Params) -> tuple[bool, bool]:
    """(cadence, rate): a `metronome_share` of the gaps in metronome runs is a machine's
    cadence; the busiest actor above `human_rate_per_s` runs at a machine's speed."""
    return s.cadence["share_in_runs"] >= p.metronome_share, s.actor_rate >= p.human_rate_per_s


def judge(s: Spike, p: Params) -> Severity:
    machine_cadence, machine_rate = machine(s, p)
    large = s.ratio >= p.high_ratio and s.excess >= p.high_excess
    sustained = s.duration_s >= p.high_duration_s
    if large and sustained and machine_rate:
        return Severity.HIGH
    if s.excess >= p.medium_excess or machine_cadence or machine_rate:
        return Severity.MEDIUM
    return Severity.LOW


# ---------------------------------------------------------------------------------------------
# describe


def describe(s: Spike, severity: Severity, p: Params) -> Finding:
    machine_cadence, machine_rate = machine(s, p)
    n, rate, ratio, cad = s.count, s.rate, s.ratio, s.cadence
    start, stop, duration_s = s.start, s.stop, s.duration_s
    stop_day = "" if stop.date() == start.date() else f" on {stop:%Y-%m-%d}"
    who = {"session": f"session {s.series}", "actor": f"actor {s.series}",
           "log": f"the whole {s.fmt} log"}[s.scope]
    title = (f"{who}: {n:,} events in {human_duration(duration_s)} at {_rate(rate)}, "
             f"{ratio:,.0f}× its baseline" if math.isfinite(ratio) else
             f"{who}: {n:,} events in {human_duration(duration_s)} at {_rate(rate)}")
    pace = []
    if machine_cadence:
        pace.append(f"near-constant gaps of ~{cad['longest_run_gap_ms']:.0f} ms "
                    f"({cad['share_in_runs']:.0%} of gaps in runs of ≥{p.metronome_run} equal "
                    "gaps): the cadence of a machine loop, not a person")
    elif machine_rate:
        pace.append(f"one caller ran at {_rate(s.actor_rate)}, faster than {p.human_rate_per_s:g}/s, "
                    "which no person sustains")
    if s.guards:
        pace.append(f"the service's rate guard answered {s.guards:,} of them "
                    f"({'/'.join(s.guard_errors)})")
    summary = (
        f"From {start:%Y-%m-%d %H:%M:%S} to {stop:%H:%M:%S}{stop_day} {who} produced {n:,} events "
        f"({_rate(rate)}, peak {_rate(s.peak_rate)} in one {s.width_ms // 1000} s bucket) against a "
        f"baseline of {_rate(s.base_per_s)} measured over the {p.baseline_buckets} buckets before: "
        f"{s.excess:,.0f} events more than expected (Poisson p ≈ 1e{max(s.log10_p, -300):.0f})."
        + (" " + _sentence("; ".join(pace)) if pace else "")
        + (f" Mostly {', '.join(s.actors[:3])}." if s.scope != "actor" and s.actors else "")
    )
    return Finding(
        detector="rate_spike",
        key=f"{s.fmt}|{s.scope}|{s.series}|{start:%Y-%m-%dT%H:%M:%S}",
        severity=severity, title=title, summary=summary,
        signal=(f"a rate spike {ratio:,.0f}× its baseline ({n:,} events at {_rate(rate)})"
                if math.isfinite(ratio) else f"a rate spike of {n:,} events at {_rate(rate)}"),
        recommendation=_recommendation(machine_cadence, machine_rate, s.guards),
        start=start, end=stop,
        actors=s.actors, targets=s.targets, sessions=s.sessions,
        claim_sql=_claim_sql(s.scope),
        claim_params=_params(s.scope, s.fmt, s.series, start=start, stop=stop),
        unit_kinds=UNIT_KINDS,
        details={
            "scope": s.scope, "series": s.series, "format": s.fmt,
            "bucket_s": s.width_ms / 1000, "baseline_window_buckets": p.baseline_buckets,
            "baseline_per_bucket": s.baseline, "baseline_per_s": s.base_per_s,
            "baseline_scale": s.scale, "open_z": s.open_z, "open_log10_p": s.open_log10_p,
            "count": n, "expected": s.expected, "excess": s.excess, "duration_s": duration_s,
            "rate_per_s": rate, "peak_per_s": s.peak_rate, "ratio": ratio,
            "log10_p": max(s.log10_p, -300.0), "buckets": s.buckets,
            "cadence": {k: v for k, v in cad.items() if k != "longest_run_start"},
            "top_actor_rate_per_s": s.actor_rate,
            "machine_cadence": machine_cadence, "machine_rate": machine_rate,
            "guard_responses": s.guards, "includes": s.includes,
        },
        evidence=[EvidenceLine(m.file, m.line, _mark_note(m.what, s)) for m in s.marks],
    )


def _mark_note(what: str, s: Spike) -> str:
    cad = s.cadence
    if what == "peak":
        return f"busiest bucket begins ({s.peak_count:,} events in {s.width_ms // 1000} s)"
    if what == "cadence":
        return (f"{cad['longest_run'] + 2} events in a row at near-equal gaps of "
                f"~{cad['longest_run_gap_ms']:.0f} ms (metronome cadence)")
    if what == "guard":
        return f"first {s.guard_error}: the service's own guard saw the same thing"
    return f"{what} event of the spike"  # first, last


def _recommendation(cadence: bool, machine_rate: bool, guards: int) -> str:
    text = ("Cap the rate per caller and per session at the service (e.g. 60 a minute, with a "
            "minimum interval) and add a circuit breaker that stops a caller whose rate stays far "
            "above its own baseline")
    if cadence:
        text += ("; requests arrived at a metronome cadence, so the caller is a loop: give it an "
                 "attempt budget and make it exit instead of retrying")
    elif machine_rate:
        text += "; the pace is a machine's: bound the loop that sends them (attempt or time budget)"
    if guards:
        text += "; the service's guard already answered with errors, so make those errors terminal"
    return text + "."


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + "."


def _rate(per_s: float) -> str:
    if per_s >= 1:
        return f"{per_s:,.3g}/s"
    if per_s * 60 >= 1:
        return f"{per_s * 60:,.3g}/min"
    return f"{per_s * 3600:,.3g}/h"


DETECTOR = Detector(
    name="rate_spike",
    description="a session's, actor's or the whole log's event rate far above its own baseline",
    params=Params,
    run=staged(measure, judge, describe, order=lambda f: (f.start, f.key)),
    rank=60,
    reads=UNIT_KINDS,
    needs=(("ts",), ("actor", "session", "target")),
    # exact: a format's events alone decide its bucket width (percentiles of its own busy
    # span), its series (session, actor and whole-format, each within `e.format`), their
    # baselines, the service's own waits and guard errors (each read `AND e.format =
    # $format`), and which of its messages are a copy of another (`_copies` is per format)
    partition_by=("format",),
)

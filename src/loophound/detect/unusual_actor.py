"""unusual_actor: an actor whose behaviour in some time window is unlike the rest of the log.

The anomaly-detection half of loophound: no rule names the pattern, the data does. Each actor's
unit events (falling back to the session when a log has no actor, as trimmed bproxy excerpts)
are cut into windows of one width per format: the smallest of 1 s … 1 day that splits the busy
span (1st–99th percentile of event times) into at most `target_windows`. A window with at
least `min_events` events becomes one row of features:

- `rate_per_min`: events per minute;
- `error_share`: share of events that failed; `distinct_errors`: how many different errors;
- `distinct_targets`: different (target, session) pairs addressed;
- `repeat_share`: share of events repeating the actor's previous (action, error) exactly;
- `gap_cv`: coefficient of variation of the gaps between the actor's events (low = regular);
- `tokens_per_event`: LLM tokens per event.

An IsolationForest (fixed `random_state`, so the same store always gives the same findings)
scores every window against all the others: scikit-learn's, ported to numpy and Python in
`isolation` with the very same scores, so that a scan does not import scikit-learn. A window
is unusual when its score is at least `score_threshold`, it is among the top `max_share` of
windows, and at least one feature deviates in a loop-like direction (more events, errors,
repeats or tokens, more regular gaps, an unusual number of targets) by `min_z` robust
z-scores from the median window. Adjacent unusual windows of one actor are merged into one
finding that lists those z-scores. When no window is loop-like nothing can be flagged, so
the forest is not fitted at all.

Scoring needs `min_windows` windows from `min_actors` actors: a small log has no "rest of the
log" to compare with, and gives nothing. An outlier is a lead, not a verdict, so severity is
capped at medium. The choice made here: this detector cannot see other findings, so it checks
three simple rule signals itself and says which fired in `details.corroborated_by`:
`repeated_error` (≥ `corroborate_count` events, nearly all failed and nearly all repeats),
`metronome` (gap CV under 0.1 over ≥ `corroborate_count` events) and `rate_spike` (a window
rate ≥ 10× the actor's own median window and faster than 1/s). Corroborated windows are medium,
the rest low; attribution (rank 90, the weakest) hands shared events to the rule findings.

Every window is scored against all the others, so this detector is two steps
(`Detector.parts`, `gather`): `windows_of` cuts the windows of a group of events and measures
their features, `gather` scores the windows of every group together and returns one Outlier
per group of adjacent unusual windows, which judge() judges and describe() writes. A window's
width and features depend on its format's events only (the busy span is a format's; a
message stored by both parties is counted once within its format), so the groups are formats:
the Spark engine cuts each format's windows on an executor and gathers them on the driver;
the default engine runs both steps in turn. The numpy kernels — group medians and distinct
counts, `feature_matrix`, `robust_z`, `loop_like`, `rule_signals`, `adjacent_groups` — are
pure.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterator
from dataclasses import dataclass

import duckdb
import numpy as np

from .. import db
from ..vocabulary import Severity
from . import isolation
from .base import (
    Detector,
    EvidenceLine,
    Finding,
    claim_units,
    gathered,
    human_duration,
    judged,
    param,
)
from .rates import EPOCH, UNIT_KINDS, bucket_width_s, format_spans, skip_copies

FEATURES = ("rate_per_min", "error_share", "distinct_errors", "distinct_targets",
            "repeat_share", "gap_cv", "tokens_per_event")
# +1: loop-like when high (a storm, a fan-out), -1: when low (metronome-regular gaps)
DIRECTION = {"rate_per_min": 1, "error_share": 1, "distinct_errors": 1, "distinct_targets": 1,
             "repeat_share": 1, "gap_cv": -1, "tokens_per_event": 1}


@dataclass
class Params:
    target_windows: int = param(40, "window width: the smallest of 1 s … 1 day that splits the "
                                    "busy span of a format into at most this many windows")
    min_events: int = param(5, "events an actor needs in a window for the window to be scored")
    min_windows: int = param(20, "windows (all actors) needed before anything is scored")
    min_actors: int = param(2, "actors needed before anything is scored")
    n_estimators: int = param(100, "trees in the IsolationForest")
    random_state: int = param(0, "seed of the IsolationForest: fixed, so results repeat")
    score_threshold: float = param(0.62, "IsolationForest anomaly score (0.5 = ordinary, 1 = "
                                         "isolated at once) a window needs")
    max_share: float = param(0.05, "at most this share of all windows (the highest scores) "
                                   "can be unusual")
    min_z: float = param(3.0, "robust z-score (vs the median window) a loop-like feature needs")
    corroborate_count: int = param(10, "events a window needs for a rule signal to corroborate")


# in (who, time, log order): DuckDB sorts out of core within its memory limit, and the rows are
# then read a batch at a time, so what Python holds does not grow with the log
EVENTS_SQL = """
SELECT hash(e.format, coalesce(e.actor, 'session ' || e.session)) AS who,
       epoch_ms(e.ts) AS t, e.event_id,
       hash(e.action, e.error) AS act, hash(e.error) AS err,
       CAST(e.error IS NOT NULL AS UTINYINT) AS has_error, hash(e.target, e.session) AS tgt,
       CAST(e.ok IS FALSE OR e.error IS NOT NULL AS UTINYINT) AS failed,
       CAST(coalesce(e.tokens_in, 0) + coalesce(e.tokens_out, 0) AS BIGINT) AS tok,
       (epoch_ms(e.ts) - w.origin) // w.width AS win, w.width
FROM events e JOIN _ua_widths w ON w.format = e.format
WHERE list_contains($kinds, e.kind) AND e.ts IS NOT NULL
  AND (e.actor IS NOT NULL OR e.session IS NOT NULL) {copies}
ORDER BY who, t, e.event_id
"""
BATCH_ROWS = 1 << 19  # rows read at a time (about 40 MB of columns)


SCOPE_COND = {"actor": "e.actor = $key", "session": "e.actor IS NULL AND e.session = $key"}


def _claim_sql(scope: str) -> str:
    return claim_units(
        f"list_contains($kinds, e.kind) AND e.format = $format AND {SCOPE_COND[scope]}")


# ---------------------------------------------------------------------------------------------
# measure


def robust_z(X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """z-scores of every cell against its column's median, scaled by 1.4826·MAD (or, when
    most windows share one value, the standard deviation; never below 1e-3 of the range)."""
    med = np.median(X, axis=0)
    mad = 1.4826 * np.median(np.abs(X - med), axis=0)
    std = X.std(axis=0)
    span = X.max(axis=0) - X.min(axis=0)
    scale = np.where(mad > 0, mad, np.where(std > 0, std, 1.0))
    scale = np.maximum(scale, 1e-3 * np.maximum(span, 1e-9))
    return (X - med) / scale, med, scale


def _group_median(values: np.ndarray, gid: np.ndarray, n_groups: int) -> np.ndarray:
    """Median of non-negative integer `values` per group id (NaN for empty groups). One sort
    of (group, value) packed into an int64 when it fits, else a two-key lexsort."""
    out = np.full(n_groups, np.nan)
    if not len(values):
        return out
    values = values.astype(np.int64)
    bits = max(int(values.max()).bit_length(), 1)
    if bits + max(int(gid.max()).bit_length(), 1) <= 62:
        packed = np.sort((gid.astype(np.int64) << bits) | values)
        v, g = packed & ((1 << bits) - 1), packed >> bits
    else:
        order = np.lexsort((values, gid))
        v, g = values[order], gid[order]
    counts = np.bincount(g, minlength=n_groups)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    has = counts > 0
    lo = starts[has] + (counts[has] - 1) // 2
    hi = starts[has] + counts[has] // 2
    out[has] = (v[lo] + v[hi]) / 2
    return out


def _group_distinct(values: np.ndarray, gid: np.ndarray, n_groups: int) -> np.ndarray:
    """How many distinct `values` each group id has."""
    if not len(values):
        return np.zeros(n_groups)
    order = np.lexsort((values, gid))
    v, g = values[order], gid[order]
    new = np.ones(len(v), bool)
    new[1:] = (v[1:] != v[:-1]) | (g[1:] != g[:-1])
    return np.bincount(g[new], minlength=n_groups).astype(float)


def windows(con: duckdb.DuckDBPyConnection, p: Params, copies: str = "") -> list[dict]:
    """Feature rows of every (actor, window) with at least `min_events` unit events, computed
    in numpy (sorting in SQL window functions is the slow part at 1 M events) from the events
    in order, a batch at a time: what is held is one batch and a row per window. In (format,
    who, window) order, which is unique."""
    kinds = list(UNIT_KINDS)
    spans = format_spans(con, copies)
    if not spans:
        return []
    widths = []
    for fid, (fmt, _n, lo, q1, q99) in enumerate(spans):
        w = bucket_width_s(max((q99 - q1) / 1000.0, 1.0), p.target_windows) * 1000
        widths.append((fid, fmt, w, (lo // w) * w))
    db.temp_table(con, "_ua_widths", {"fid": ("INTEGER", [w[0] for w in widths]),
                                      "format": ("VARCHAR", [w[1] for w in widths]),
                                      "width": ("BIGINT", [w[2] for w in widths]),
                                      "origin": ("BIGINT", [w[3] for w in widths])})
    parts, prev = [], None
    reader = con.sql(EVENTS_SQL.format(copies=copies), params={"kinds": kinds}
                     ).to_arrow_reader(BATCH_ROWS)
    for piece in _whole_groups(reader):
        parts.append(_group_features(piece, prev))
        prev = (piece["who"][-1], piece["act"][-1])
    con.execute("DROP TABLE _ua_widths")
    if not parts:
        return []
    g = {k: np.concatenate([part[k] for part in parts]) for k in parts[0]}
    keep = np.flatnonzero(g["n"] >= p.min_events)
    names = {}
    if len(keep):
        ids = [int(x) for x in g["first_event"][keep]]
        names = {r[0]: r[1:] for r in con.execute(
            "SELECT event_id, format, actor, session FROM events WHERE " + db.one_of("event_id"),
            {"ids": ids}).fetchall()}
    rows = []
    for i in keep:
        fmt, actor, session = names[int(g["first_event"][i])]
        row = {"format": fmt, "actor": actor, "session": session if actor is None else None,
               "who": actor if actor is not None else f"session {session}",
               "win": int(g["win"][i]), "n": int(g["n"][i]),
               "start": _ts(int(g["start"][i])), "stop": _ts(int(g["stop"][i])),
               "width_ms": int(g["width"][i]), "first_event": int(g["first_event"][i])}
        for f in FEATURES:
            v = float(g[f][i])
            row[f] = None if math.isnan(v) else v
        rows.append(row)
    rows.sort(key=window_order)
    return rows


def window_order(w: dict) -> tuple:
    """The windows' one order, whichever group and machine measured them."""
    return w["format"], w["who"], w["win"]


def _whole_groups(reader) -> Iterator[dict[str, np.ndarray]]:
    """The ordered events as numpy columns, in pieces that each end where an (actor, window)
    group ends: a group that goes on in the next batch waits for it."""
    carry: dict[str, np.ndarray] | None = None
    for batch in reader:
        cols = {name: db.arrow_numpy(batch.column(i)) for i, name in enumerate(batch.schema.names)}
        if carry is not None:
            cols = {k: np.concatenate((carry[k], v)) for k, v in cols.items()}
        who, win = cols["who"], cols["win"]
        ends = np.flatnonzero((who[1:] != who[:-1]) | (win[1:] != win[:-1]))
        cut = int(ends[-1]) + 1 if len(ends) else 0
        carry = {k: v[cut:] for k, v in cols.items()}
        if cut:
            yield {k: v[:cut] for k, v in cols.items()}
    if carry is not None and len(carry["who"]):
        yield carry


def _group_features(c: dict[str, np.ndarray], prev: tuple | None) -> dict[str, np.ndarray]:
    """Per (actor, window) group of a piece of ordered events (whole groups only): its size,
    first event, first and last time, window, width and FEATURES. `prev`: the (who, act) of
    the event before the piece, which decides whether its first event is a repeat."""
    m = len(c["t"])
    who, t, win = c["who"], c["t"].astype(np.int64), c["win"].astype(np.int64)
    same_who = np.zeros(m, bool)
    same_who[1:] = who[1:] == who[:-1]
    start = ~same_who
    start[1:] |= win[1:] != win[:-1]
    gid = np.cumsum(start) - 1
    n_groups = int(gid[-1]) + 1
    firsts = np.flatnonzero(start)
    n = np.bincount(gid, minlength=n_groups)
    repeat = np.zeros(m, bool)
    repeat[1:] = same_who[1:] & (c["act"][1:] == c["act"][:-1])
    if prev is not None:
        repeat[0] = who[0] == prev[0] and c["act"][0] == prev[1]
    gaps_at = np.flatnonzero(~start)  # a gap to the previous event of the same window
    gaps = t[gaps_at] - t[gaps_at - 1]  # integer ms
    ggid = gid[gaps_at]
    med = _group_median(gaps, ggid, n_groups)
    # |2·gap − 2·median| stays an integer (a median may end in .5)
    mad = _group_median(np.abs(2 * gaps - np.rint(2 * med[ggid]).astype(np.int64)), ggid,
                        n_groups) / 2
    n_gaps = np.bincount(ggid, minlength=n_groups)
    with np.errstate(divide="ignore", invalid="ignore"):
        robust_cv = np.where((n_gaps >= 2) & (med > 0), 1.4826 * mad / med, np.nan)
    has_error = c["has_error"].astype(bool)
    width_ms = c["width"][firsts].astype(float)
    lasts = np.concatenate((firsts[1:], [m])) - 1
    return {
        "n": n, "first_event": c["event_id"][firsts], "start": t[firsts], "stop": t[lasts],
        "win": win[firsts], "width": c["width"][firsts],
        "rate_per_min": n * 60_000.0 / width_ms,
        "error_share": np.bincount(gid, c["failed"].astype(bool), n_groups) / n,
        "distinct_errors": _group_distinct(c["err"][has_error], gid[has_error], n_groups),
        "distinct_targets": _group_distinct(c["tgt"], gid, n_groups),
        "repeat_share": np.bincount(gid, repeat, n_groups) / n,
        "gap_cv": robust_cv,
        "tokens_per_event": np.bincount(gid, c["tok"].astype(float), n_groups) / n,
    }


def _ts(ms: int) -> dt.datetime:
    return EPOCH + dt.timedelta(milliseconds=ms)


def feature_matrix(wins: list[dict]) -> np.ndarray:
    """The windows' FEATURES as a matrix the forest can score: a missing value is the column's
    median (a window without gaps to measure has the median regularity, not an outlier), and
    rates and tokens, which span orders of magnitude, are on a log scale."""
    X = np.array([[w[f] if w[f] is not None else math.nan for f in FEATURES] for w in wins], float)
    for c in range(X.shape[1]):
        col = X[:, c]
        if np.isnan(col).any():
            fill = np.nanmedian(col) if (~np.isnan(col)).any() else 0.0
            col[np.isnan(col)] = fill
    X[:, 0] = np.log10(X[:, 0] + 1e-3)  # rates span orders of magnitude
    X[:, 6] = np.log10(X[:, 6] + 1.0)
    return X


def adjacent_groups(wins: list[dict], flagged: list[int]) -> list[list[int]]:
    """Flagged windows (indices, in window order) merged while they are one actor's
    consecutive windows."""
    groups: list[list[int]] = []
    for i in flagged:
        w = wins[i]
        if groups:
            prev = wins[groups[-1][-1]]
            if (prev["format"], prev["who"]) == (w["format"], w["who"]) and w["win"] - prev["win"] <= 1:
                groups[-1].append(i)
                continue
        groups.append([i])
    return groups


# how far past the median window a feature must also be, in its own units (after the log
# transform for rates and tokens), so that 2 targets against 1 is not "unusual"
MIN_DEVIATION = {"rate_per_min": 0.5, "error_share": 0.3, "distinct_errors": 2.0,
                 "distinct_targets": 3.0, "repeat_share": 0.3, "gap_cv": 0.2,
                 "tokens_per_event": 0.3}


def loop_like(row: np.ndarray, zrow: np.ndarray, med: np.ndarray, min_z: float) -> list[str]:
    """The features on which a window deviates from the median window in a loop-like way."""
    out = []
    for c, f in enumerate(FEATURES):
        d, dev = DIRECTION[f], row[c] - med[c]
        if d >= 0 and zrow[c] >= min_z and dev >= MIN_DEVIATION[f]:
            out.append(f)
        elif d <= 0 and zrow[c] <= -min_z and -dev >= MIN_DEVIATION[f]:
            out.append(f)
    return out


def rule_signals(w: dict, own: float, p: Params) -> list[str]:
    """The simple rules a window also trips (`own`: the actor's median window rate)."""
    out = []
    if w["n"] >= p.corroborate_count and w["error_share"] >= 0.9 and w["repeat_share"] >= 0.9:
        out.append("repeated_error")
    if w["n"] >= p.corroborate_count and w["gap_cv"] is not None and w["gap_cv"] < 0.1:
        out.append("metronome")
    if own > 0 and w["rate_per_min"] >= 10 * own and w["rate_per_min"] >= 60:
        out.append("rate_spike")
    return out


@dataclass
class Outlier:
    """Adjacent unusual windows of one actor (or session, when the log names no actor)."""

    fmt: str
    who: str
    scope: str  # actor or session
    key: str  # the actor, or the session
    actor: str | None
    start: dt.datetime
    stop: dt.datetime
    windows: int
    events: int
    window_s: float
    score: float  # of the most unusual window
    scores: list[float]
    windows_scored: int  # all windows of the log
    top_start: dt.datetime  # the most unusual window's
    top_events: int
    features: dict[str, float | None]  # of the most unusual window
    median_window: dict[str, float]
    z_scores: dict[str, float]
    unusual: list[str]  # its loop-like features, most deviant first (at most 4)
    signals: list[str]  # the simple rules that agree (see rule_signals)
    sessions: list[str]  # at most five
    first_event: tuple[str, int] | None  # the most unusual window's first line


def windows_of(con: duckdb.DuckDBPyConnection, p: Params) -> list[dict]:
    """The first step (`Detector.parts`): the windows of the events in `con`, a format's at
    a time on the Spark engine."""
    return windows(con, p, skip_copies(con))


def gather(con: duckdb.DuckDBPyConnection, parts: list[dict], p: Params) -> list[Finding]:
    """The second step (`Detector.gather`): the windows of every format scored together;
    `con` reads all events (the evidence lines, the sessions of an outlier)."""
    outliers = outliers_among(con, sorted(parts, key=window_order), p)
    return judged(outliers, judge, describe, p, order=lambda f: (f.start, f.key))


def outliers_among(con: duckdb.DuckDBPyConnection, wins: list[dict], p: Params) -> list[Outlier]:
    """The groups of adjacent unusual windows among `wins` (in `window_order`)."""
    if len(wins) < p.min_windows or len({(w["format"], w["who"]) for w in wins}) < p.min_actors:
        return []
    X = feature_matrix(wins)
    z, med, _ = robust_z(X)
    # a window is flagged only if it is also loop-like; when none is, no score can change
    # that, and the forest is not fitted: a log that is one long storm has the storm as its
    # median window
    candidates = [i for i in range(len(wins)) if loop_like(X[i], z[i], med, p.min_z)]
    if not candidates:
        return []

    scores = anomaly_scores(X, p)
    cutoff = np.quantile(scores, 1 - p.max_share)
    flagged = [i for i in candidates if scores[i] >= p.score_threshold and scores[i] >= cutoff]

    # the actor's own median window rate, for the rate_spike signal
    rates: dict[tuple, list[float]] = {}
    for w in wins:
        rates.setdefault((w["format"], w["who"]), []).append(w["rate_per_min"])
    own_rate = {k: float(np.median(v)) for k, v in rates.items()}
    return [_outlier(con, wins, g, scores, X, z, med, own_rate, p)
            for g in adjacent_groups(wins, flagged)]


def anomaly_scores(X: np.ndarray, p: Params) -> np.ndarray:
    """IsolationForest's anomaly score of each row of X (0.5 ordinary, 1 isolated at once):
    scikit-learn's, bit for bit, from the port in `isolation` (importing scikit-learn would
    cost a scan more CPU than the fit)."""
    return isolation.anomaly_scores(X, p.n_estimators, p.random_state)


def _outlier(con: duckdb.DuckDBPyConnection, wins, group, scores, X, z, med, own_rate,
             p: Params) -> Outlier:
    ws = [wins[i] for i in group]
    best = max(group, key=lambda i: (scores[i], -i))
    top = wins[best]
    fmt, who = top["format"], top["who"]
    scope = "actor" if top["actor"] is not None else "session"
    key_value = top["actor"] if scope == "actor" else top["session"]
    start, stop = min(w["start"] for w in ws), max(w["stop"] for w in ws)
    zs = {f: float(z[best, c]) for c, f in enumerate(FEATURES)}
    median = {f: float(10 ** med[c] - 1e-3) if f == "rate_per_min" else
              float(10 ** med[c] - 1.0) if f == "tokens_per_event" else float(med[c])
              for c, f in enumerate(FEATURES)}
    unusual = sorted(loop_like(X[best], z[best], med, p.min_z), key=lambda f: (-abs(zs[f]), f))[:4]
    sessions = [r[0] for r in con.execute(
        f"SELECT DISTINCT e.session FROM events e WHERE list_contains($kinds, e.kind) "
        f"AND e.format = $format AND e.ts BETWEEN $start AND $stop AND {SCOPE_COND[scope]} "
        f"AND e.session IS NOT NULL ORDER BY 1 LIMIT 5", _claim_params(fmt, start, stop, key_value)
    ).fetchall()]
    first = con.execute("SELECT file, line FROM events WHERE event_id = ?",
                        [top["first_event"]]).fetchall()
    return Outlier(
        fmt=fmt, who=who, scope=scope, key=key_value, actor=top["actor"], start=start, stop=stop,
        windows=len(ws), events=sum(w["n"] for w in ws), window_s=top["width_ms"] / 1000,
        score=float(scores[best]), scores=[float(scores[i]) for i in group],
        windows_scored=len(wins), top_start=top["start"], top_events=top["n"],
        features={f: top[f] for f in FEATURES}, median_window=median, z_scores=zs,
        unusual=unusual,
        signals=sorted({s for w in ws for s in rule_signals(w, own_rate[(fmt, who)], p)}),
        sessions=sessions, first_event=(first[0][0], first[0][1]) if first else None)


def _claim_params(fmt: str, start: dt.datetime, stop: dt.datetime, key: str) -> dict:
    return {"kinds": list(UNIT_KINDS), "format": fmt, "start": start, "stop": stop, "key": key}


# ---------------------------------------------------------------------------------------------
# judge


def judge(o: Outlier, p: Params) -> Severity:
    """An outlier is a lead, not a verdict: medium when a simple rule agrees, else low."""
    return Severity.MEDIUM if o.signals else Severity.LOW


# ---------------------------------------------------------------------------------------------
# describe


def describe(o: Outlier, severity: Severity, p: Params) -> Finding:
    unusual, raw, median, zs = o.unusual, o.features, o.median_window, o.z_scores
    explain = ", ".join(f"{f.replace('_', ' ')} {_fmt(raw[f])} (median window {_fmt(median[f])}, "
                        f"z {zs[f]:+.1f})" for f in unusual)
    title = (f"{o.who} behaved unlike the rest of the log for {o.windows} window(s) of "
             f"{human_duration(o.window_s)}: {', '.join(f.replace('_', ' ') for f in unusual[:2])}")
    summary = (
        f"IsolationForest scored {o.who}'s busiest-scoring window ({o.top_start:%Y-%m-%d %H:%M:%S}, "
        f"{o.top_events:,} events) {o.score:.2f} against {o.windows_scored:,} windows of the log "
        f"(threshold {p.score_threshold:g}): {explain}. "
        + (f"Simple rules agree ({', '.join(o.signals)}), so look at it first." if o.signals else
           "No simple rule agrees: an outlier worth a look, not a loop by itself.")
    )
    evidence = [EvidenceLine(*o.first_event,
                             f"first event of the most unusual window (score {o.score:.2f}; "
                             f"{', '.join(f.replace('_', ' ') for f in unusual)})")
                ] if o.first_event else []
    return Finding(
        detector="unusual_actor",
        key=f"{o.fmt}|{o.who}|{o.start:%Y-%m-%dT%H:%M:%S}",
        severity=severity, title=title, summary=summary,
        signal=(f"an actor unlike the rest of the log ({', '.join(f.replace('_', ' ') for f in unusual[:2])}"
                f"; anomaly score {o.score:.2f})"),
        recommendation=(
            "Read the windows' events before acting: if they are a loop, cap the actor's rate "
            "and add a circuit breaker on repeated identical actions or errors; if they are "
            "legitimate (a batch job, a new workload), raise `unusual_actor.score_threshold` "
            "or exclude the actor."),
        start=o.start, end=o.stop,
        actors=[o.actor] if o.actor else [],
        targets=[],
        sessions=o.sessions,
        claim_sql=_claim_sql(o.scope), claim_params=_claim_params(o.fmt, o.start, o.stop, o.key),
        unit_kinds=UNIT_KINDS,
        details={
            "format": o.fmt, "who": o.who, "window_s": o.window_s, "windows": o.windows,
            "events": o.events, "score": o.score, "scores": o.scores,
            "score_threshold": p.score_threshold, "windows_scored": o.windows_scored,
            "features": raw, "median_window": median, "z_scores": zs,
            "unusual_features": unusual, "corroborated_by": o.signals,
        },
        evidence=evidence,
    )


def _fmt(v) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:,.3g}"
    return f"{v:,}"


DETECTOR = Detector(
    name="unusual_actor",
    description="an actor whose behaviour in a time window is unlike the rest of the log "
                "(IsolationForest; at most medium)",
    params=Params,
    run=gathered(windows_of, gather),
    parts=windows_of,
    gather=gather,
    # a window's width and features are its format's events' (see the module's docstring)
    partition_by=("format",),
    rank=90,
    max_severity="medium",
    grows_with_log=True,
    reads=UNIT_KINDS,
    needs=(("ts",), ("actor", "session")),
)

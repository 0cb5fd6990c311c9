"""repeated_error: the same error returned again and again to the same caller.

A run is a maximal sequence of one (actor, session, action)'s attempts that all failed with the
same error, with no success and no gap longer than `max_gap_s` between them. Retrying is not
a loop by itself: a caller that backs off (gaps that keep growing) or stops after a few tries
is healthy; one that keeps firing at a steady pace after the service said "never retry" is
the seed-001 incident. Severity says which, and the finding shows the gaps that decided it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import duckdb
import numpy as np

from .base import Detector, EvidenceLine, Finding, claim_units, human_duration, param
from .profiles import input_formats, profile

ATTEMPT_KINDS = ("request", "step", "message", "room_post", "llm_call", "record", "trigger")


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
ATTEMPTS = """
SELECT g.g, epoch_ms(e.ts) AS t, e.error, coalesce(e.ok, false) AS ok, e.event_id,
       e.error IS NOT NULL AS erred, hash(e.error) AS error_hash
FROM events e
JOIN _re_groups g ON hash(e.actor, e.session, e.action) = g.h AND e.actor IS NOT DISTINCT FROM g.actor
             AND e.session IS NOT DISTINCT FROM g.session AND e.action IS NOT DISTINCT FROM g.action
WHERE list_contains($kinds, e.kind) AND e.ts IS NOT NULL AND (e.error IS NOT NULL OR e.ok IS NOT NULL)
"""

CLAIM = claim_units(
    "e.error = $error AND e.actor IS NOT DISTINCT FROM $actor "
    "AND e.session IS NOT DISTINCT FROM $session AND e.action IS NOT DISTINCT FROM $action "
    "AND list_contains($kinds, e.kind)")


def run(con: duckdb.DuckDBPyConnection, p: Params) -> list[Finding]:
    return [_finding(con, r, p) for r in runs(con, p)]


def runs(con: duckdb.DuckDBPyConnection, p: Params) -> list[dict]:
    """Every run of at least `min_count` identical consecutive errors, with its gap figures."""
    kinds = list(ATTEMPT_KINDS)
    found = con.sql(GROUPS, params={"kinds": kinds, "min_count": p.min_count}).to_arrow_table()
    if found.num_rows == 0:
        return []
    groups = {r["g"]: (r["actor"], r["session"], r["action"]) for r in found.to_pylist()}
    format_of = input_formats(con)
    con.register("_re_groups", found)
    try:
        table = con.sql(ATTEMPTS, params={"kinds": kinds}).to_arrow_table()
    finally:
        con.unregister("_re_groups")
    if table.num_rows == 0:
        return []
    # in time order within each group; equal times in log order (input, then line); numpy
    # only (pyarrow.compute costs a scheduled scan 50 ms to import)
    event_id = table["event_id"].to_numpy()
    t = table["t"].to_numpy()
    g = table["g"].to_numpy()
    order = np.lexsort((event_id, t, g))
    g, t, event_id = g[order], t[order], event_id[order]
    err = table["error_hash"].to_numpy()[order]  # the same error text, the same hash
    failed = table["erred"].to_numpy()[order] & ~table["ok"].to_numpy()[order]
    gap = np.diff(t, prepend=t[0])
    brk = np.ones(len(t), dtype=bool)
    brk[1:] = ((g[1:] != g[:-1]) | (err[1:] != err[:-1]) | ~failed[:-1]
               | (gap[1:] > p.max_gap_s * 1000))
    run_id = np.cumsum(brk)
    counts = np.bincount(run_id, weights=failed)
    out = []
    for rid in np.flatnonzero(counts >= p.min_count):
        idx = np.flatnonzero((run_id == rid) & failed) if counts[rid] < len(t) else None
        lo, hi = (idx[0], idx[-1] + 1) if idx is not None else (0, len(t))
        gaps = gap[lo + 1:hi].astype(float)
        q = max(len(gaps) // 4, 1)
        actor, session, action = groups[int(g[lo])]
        first_input = int(event_id[lo]) >> 32
        out.append({
            "actor": actor, "session": session, "action": action, "input": first_input,
            "format": format_of.get(first_input),
            "error": table["error"][int(order[lo])].as_py(), "n": hi - lo,
            "start": _ts(t[lo]), "stop": _ts(t[hi - 1]),
            "median_gap_ms": float(np.median(gaps)) if len(gaps) else None,
            "mean_gap_ms": float(gaps.mean()) if len(gaps) else None,
            "sd_gap_ms": float(gaps.std()) if len(gaps) else None,
            "first_gaps": [int(x) for x in gaps[:5]], "last_gaps": [int(x) for x in gaps[-5:]],
            "early_gap_ms": float(np.median(gaps[:q])) if len(gaps) else None,
            "late_gap_ms": float(np.median(gaps[-q:])) if len(gaps) else None,
        })
    out.sort(key=lambda r: (r["start"], str(r["actor"]), str(r["session"]), str(r["action"])))
    return out


def _ts(ms) -> dt.datetime:
    return dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=int(ms))


def _finding(con: duckdb.DuckDBPyConnection, r: dict, p: Params) -> Finding:
    n, median_ms = r["n"], r["median_gap_ms"] or 0.0
    duration_s = (r["stop"] - r["start"]).total_seconds()
    rate = n / duration_s if duration_s > 0 else float(n)
    early, late = r["early_gap_ms"] or 0.0, r["late_gap_ms"] or 0.0
    backing_off = early > 0 and late >= p.backoff_ratio * early and n >= 4
    cv = (r["sd_gap_ms"] / r["mean_gap_ms"]) if r["mean_gap_ms"] else None
    metronome = cv is not None and cv < 0.1 and n >= 4
    tight = median_ms <= p.tight_gap_s * 1000
    terminal = _terminal_signal(con, r)
    # the service said never to retry this error (its format profile's `terminal_errors`)
    never = r["error"] in profile(r["format"]).terminal_errors
    if backing_off:
        severity = "medium" if n < p.critical_count else "high"
    elif n >= p.critical_count or (tight and n >= 10 * p.min_count):
        severity = "critical"
    else:
        severity = "high"
    who = r["actor"] or (f"session {r['session']}" if r["session"] else "a caller")
    what = f"`{r['action']}`" if r["action"] else "its call"
    where = f" on session {r['session']}" if r["session"] else ""
    pace = (f"every {median_ms / 1000:.3g} s (median)" if median_ms else "in a burst")
    title = f"{what} failed {n:,} times in a row with {r['error']}{where}"
    summary = (
        f"{who} sent {what}{where} {n:,} times over {human_duration(duration_s)}, {pace}, "
        f"{rate:.3g}/s, and got {r['error']} every time"
        + ("; the gaps grew, so the caller was backing off" if backing_off else
           "; it never backed off")
        + (f"; {terminal['note']}" if terminal else "")
        + (" Near-constant gaps: a machine loop (metronome cadence)." if metronome else "")
    )
    return Finding(
        detector="repeated_error",
        key=f"{r['actor']}|{r['session']}|{r['action']}|{r['error']}|{r['start']:%Y-%m-%dT%H:%M:%S}",
        severity=severity, title=title, summary=summary,
        recommendation=_recommendation(r["error"], never, terminal),
        start=r["start"], end=r["stop"],
        actors=[r["actor"]] if r["actor"] else [],
        targets=[],
        sessions=[r["session"]] if r["session"] else [],
        claim_sql=CLAIM,
        claim_params={"start": r["start"], "stop": r["stop"], "error": r["error"],
                      "actor": r["actor"], "session": r["session"], "action": r["action"],
                      "kinds": list(ATTEMPT_KINDS)},
        unit_kinds=ATTEMPT_KINDS,
        details={
            "error": r["error"], "action": r["action"], "count": n,
            "duration_s": duration_s, "rate_per_s": rate,
            "median_gap_ms": median_ms, "gap_cv": cv, "first_gaps_ms": r["first_gaps"],
            "last_gaps_ms": r["last_gaps"], "backing_off": backing_off, "metronome": metronome,
            "tight_loop": tight, "retry_hint_never": never,
            "terminal_signal": terminal,
        },
        evidence=[EvidenceLine(terminal["file"], terminal["line"], terminal["note"])]
        if terminal else [],
    )


def _terminal_signal(con: duckdb.DuckDBPyConnection, r: dict) -> dict | None:
    """What should have stopped the caller: a close of the session, logged in the same file
    before the run began (another daemon's session of the same name is another session)."""
    if not r["session"]:
        return None
    row = con.execute(
        """SELECT file, line, ts, action FROM events
           WHERE kind = 'request' AND session = ? AND ts <= ? AND event_id >> 32 = ?
             AND (action IN ('session.close', 'session.end', 'close') OR action LIKE '%.close')
           ORDER BY ts DESC, line DESC LIMIT 1""",
        [r["session"], r["start"], r["input"]],
    ).fetchall()
    row = row[0] if row else None
    if row:
        return {"file": row[0], "line": row[1], "at": row[2],
                "note": f"`{row[3]}` closed session {r['session']} before the first failure, "
                        "and the caller kept going"}
    return None


def _recommendation(error: str | None, never: bool, terminal: dict | None) -> str:
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
    run=run,
    rank=10,
    reads=ATTEMPT_KINDS,
)

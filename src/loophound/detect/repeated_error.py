"""repeated_error: the same error returned again and again to the same caller.

A run is a maximal sequence of one (actor, session, action)'s attempts that all failed with the
same error, with no success and no gap longer than `max_gap_s` between them. Retrying is not
a loop by itself: a caller that backs off (gaps that keep growing) or stops after a few tries
is healthy; one that keeps firing at a steady pace after the service said "never retry" is
the seed-001 incident. Severity says which, and the finding shows the gaps that decided it.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from .base import Detector, Finding, param

# bproxy error codes whose retry hint is `never` (log-formats §2.4, after ADR-030)
NEVER_RETRY = (
    "SESSION_NOT_FOUND", "INVALID_SESSION_ID", "SESSION_SCOPE_MISMATCH", "METRONOME_DETECTED",
    "SELECTOR_AMBIGUOUS", "ELEMENT_HANDLE_SCOPE_MISMATCH", "DEBUGGER_DISABLED", "TAB_NOT_FOUND",
)
ATTEMPT_KINDS = ("request", "step", "message", "room_post", "llm_call", "record", "trigger")


@dataclass
class Params:
    min_count: int = param(10, "identical consecutive errors before a run is a finding")
    max_gap_s: float = param(3600.0, "a longer pause between two attempts ends the run")
    tight_gap_s: float = param(2.0, "median gap at or under this is a tight (machine) loop")
    critical_count: int = param(1000, "runs this long are critical whatever their pace")
    backoff_ratio: float = param(3.0, "late gaps this many times the early ones mean back-off")


SQL = """
WITH attempts AS (
  SELECT event_id, ts, file, line, actor, session, action, error, ok
  FROM events
  WHERE list_contains($kinds, kind) AND ts IS NOT NULL AND (error IS NOT NULL OR ok IS NOT NULL)
),
ordered AS (
  SELECT *, lag(error) OVER w AS prev_error, lag(ok) OVER w AS prev_ok,
         epoch_ms(ts) - epoch_ms(lag(ts) OVER w) AS gap_ms
  FROM attempts
  WINDOW w AS (PARTITION BY actor, session, action ORDER BY ts, file, line)
),
runs AS (
  SELECT *, sum(CASE WHEN prev_error IS DISTINCT FROM error OR prev_ok IS TRUE OR gap_ms IS NULL
                       OR gap_ms > $max_gap_ms THEN 1 ELSE 0 END)
              OVER (PARTITION BY actor, session, action ORDER BY ts, file, line
                    ROWS UNBOUNDED PRECEDING) AS run_no
  FROM ordered
),
stats AS (
  SELECT actor, session, action, error, run_no,
         count(*) AS n, min(ts) AS start, max(ts) AS stop,
         arg_min(file, (ts, file, line)) AS first_file, min(line) AS first_line_any,
         median(gap_ms) FILTER (WHERE gap_ms IS NOT NULL AND NOT first_of_run) AS median_gap_ms,
         avg(gap_ms) FILTER (WHERE NOT first_of_run) AS mean_gap_ms,
         stddev_pop(gap_ms) FILTER (WHERE NOT first_of_run) AS sd_gap_ms,
         list(gap_ms ORDER BY ts, line) FILTER (WHERE NOT first_of_run) AS gaps
  FROM (SELECT *, row_number() OVER (PARTITION BY actor, session, action, run_no
                                     ORDER BY ts, file, line) = 1 AS first_of_run FROM runs)
  WHERE error IS NOT NULL AND (ok IS NOT TRUE)
  GROUP BY ALL
  HAVING count(*) >= $min_count
)
SELECT actor, session, action, error, n, start, stop, median_gap_ms, mean_gap_ms, sd_gap_ms,
       gaps[1:5] AS first_gaps, gaps[-5:] AS last_gaps,
       list_median(gaps[1:greatest(len(gaps) // 4, 1)]) AS early_gap_ms,
       list_median(gaps[-greatest(len(gaps) // 4, 1):]) AS late_gap_ms
FROM stats ORDER BY start, actor, session, action
"""

CLAIM = """
SELECT e.event_id FROM events e
WHERE e.ts BETWEEN $start AND $stop AND e.error = $error
  AND e.actor IS NOT DISTINCT FROM $actor AND e.session IS NOT DISTINCT FROM $session
  AND e.action IS NOT DISTINCT FROM $action AND list_contains($kinds, e.kind)
UNION ALL
SELECT o.event_id FROM events o
SEMI JOIN (
    SELECT e.file, e.corr_id FROM events e
    WHERE e.ts BETWEEN $start AND $stop AND e.error = $error AND e.kind = 'request'
      AND e.actor IS NOT DISTINCT FROM $actor AND e.session IS NOT DISTINCT FROM $session
      AND e.action IS NOT DISTINCT FROM $action) r
  ON o.file = r.file AND o.corr_id = r.corr_id
WHERE o.kind IN ('response', 'lifecycle') AND o.ts BETWEEN $start AND $stop + INTERVAL 1 MINUTE
"""


def run(con: duckdb.DuckDBPyConnection, p: Params) -> list[Finding]:
    rows = con.execute(SQL, {"kinds": list(ATTEMPT_KINDS), "max_gap_ms": p.max_gap_s * 1000,
                             "min_count": p.min_count}).fetchall()
    cols = [d[0] for d in con.description]
    return [_finding(con, dict(zip(cols, r, strict=True)), p) for r in rows]


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
        f"{who} sent {what}{where} {n:,} times over {_human(duration_s)}, {pace}, "
        f"{rate:.3g}/s, and got {r['error']} every time"
        + ("; the gaps grew, so the caller was backing off" if backing_off else
           "; it never backed off")
        + (f"; {terminal['note']}" if terminal else "")
        + (" Near-constant gaps: a machine loop (metronome cadence)." if metronome else "")
    )
    evidence = [{"file": terminal["file"], "line": terminal["line"], "note": terminal["note"]}] \
        if terminal else []
    return Finding(
        detector="repeated_error",
        key=f"{r['actor']}|{r['session']}|{r['action']}|{r['error']}|{r['start']:%Y-%m-%dT%H:%M:%S}",
        severity=severity, title=title, summary=summary,
        recommendation=_recommendation(r["error"], terminal),
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
            "tight_loop": tight, "retry_hint_never": r["error"] in NEVER_RETRY,
            "terminal_signal": terminal, "evidence": evidence,
        },
    )


def _terminal_signal(con: duckdb.DuckDBPyConnection, r: dict) -> dict | None:
    """What should have stopped the caller: a close of the session before the run began."""
    if not r["session"]:
        return None
    row = con.execute(
        """SELECT file, line, ts, action FROM events
           WHERE kind = 'request' AND session = ? AND ts <= ?
             AND (action IN ('session.close', 'session.end', 'close') OR action LIKE '%.close')
           ORDER BY ts DESC, line DESC LIMIT 1""",
        [r["session"], r["start"]],
    ).fetchall()
    row = row[0] if row else None
    if row:
        return {"file": row[0], "line": row[1], "at": row[2],
                "note": f"`{row[3]}` closed session {r['session']} before the first failure, "
                        "and the caller kept going"}
    if r["error"] in NEVER_RETRY:
        return None
    return None


def _recommendation(error: str | None, terminal: dict | None) -> str:
    if error in NEVER_RETRY or terminal:
        return (f"Treat {error} as terminal: a circuit breaker in the caller that aborts after 3 "
                "identical errors on one session; have the service answer `retry: never` for "
                "closed sessions, and throttle repeated errors per session (1 s doubling to "
                "30 s) so a stuck caller cannot run at full speed.")
    return ("Add a circuit breaker: after 3–5 identical errors for the same caller, session and "
            "action, stop and escalate instead of retrying; retry only with exponential back-off "
            "and a cap on attempts.")


def _human(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


DETECTOR = Detector(
    name="repeated_error",
    description="the same error returned again and again to the same caller or session",
    params=Params,
    run=run,
    rank=10,
)

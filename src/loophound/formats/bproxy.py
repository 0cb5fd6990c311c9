"""bproxy daemon log: pino NDJSON from dimdasci/bproxy (`~/.bproxy/logs/<date>.log`).

`response`, `error_delay` and `timeout` lines carry neither action nor session: they are joined
to their `received` line by the request id, under whichever key the log has it (`id`, `req_id`,
`reqId`, `request_id`, `requestId`). A log without ids (the trimmed form of seed 001, a
daemon that does not log them) is joined by what its lines do carry: a response at time t
that took `elapsed_ms` e answers the request received at t − e by the same caller (see
`_correlate_idless`); only a line that nothing else places goes with the `received` line before
it. Actors are `pid:ownerHash`, because the owner hash is salted afresh at every daemon restart.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from .base import (
    Format,
    FormatContext,
    FormatProfile,
    epoch_ms_to_ts,
    extra_json,
    json_fields,
    sql_str,
    struct_spec,
)

# The request id, under the names loggers give it (pino-http and Fastify `reqId`, others
# `req_id`, `request_id`): the more specific name wins when a line has several.
ID_KEYS = ("req_id", "reqId", "request_id", "requestId", "id")
FIELDS = {
    "time": "BIGINT", "pid": "BIGINT", "action": "VARCHAR",
    "session": "VARCHAR", "event": "VARCHAR", "ownerHash": "VARCHAR", "ok": "BOOLEAN",
    "elapsed_ms": "DOUBLE", "error_code": "VARCHAR", "ws_client": "VARCHAR",
} | {k: "VARCHAR" for k in ID_KEYS}
KNOWN = {"level", "hostname", "destructive", "delay_ms", "tab", "mode", "reason", "err", "msg"}
EVENTS = {
    "received": "request", "response": "response", "pacing_wait": "lifecycle",
    "forwarded": "lifecycle", "replay": "lifecycle", "timeout": "lifecycle",
    "error_delay": "lifecycle", "ws_connect": "connection", "ws_disconnect": "connection",
    "ws_bad_message": "connection", "pacing_config": "config",
}


def sniff(records: list[dict], path: Path) -> bool:
    hits = sum(1 for r in records if isinstance(r.get("event"), str) and r["event"] in EVENTS
               and "time" in r)
    return hits > 0 and hits >= len(records) // 2


def select_sql(ctx: FormatContext) -> str:
    kind_cases = " ".join(f"WHEN {sql_str(k)} THEN {sql_str(v)}" for k, v in EVENTS.items())
    request_id = "coalesce(" + ", ".join(f'r."{k}"' for k in ID_KEYS) + ")"
    answering = ", ".join(sql_str(k) for k, v in EVENTS.items() if v in ("response", "lifecycle"))
    return f"""
    SELECT line, byte_offset, byte_length, text,
      {epoch_ms_to_ts('r.time')} AS ts,
      CASE r.event {kind_cases} ELSE 'record' END AS kind,
      r.event AS event_type,
      CASE WHEN r.event LIKE 'ws_%' THEN r.ws_client
           WHEN r.ownerHash IS NOT NULL THEN coalesce(CAST(r.pid AS VARCHAR), '?') || ':' || r.ownerHash
      END AS actor,
      'bproxy' AS target,
      r.session, r.action, r.ok, r.error_code AS error, {request_id} AS corr_id,
      r.elapsed_ms AS latency_ms,
      -- a line without a request id keeps its process here until `finish` has placed it
      CASE WHEN {request_id} IS NULL AND r.event IN ({answering}) THEN CAST(r.pid AS VARCHAR)
      END AS parent_id,
      CASE WHEN r.event LIKE 'ws_%' THEN 'ws' ELSE 'http' END AS channel,
      {extra_json(KNOWN)} AS extra
    FROM (SELECT *, from_json(text, {struct_spec(FIELDS | json_fields(KNOWN))}) AS r FROM raw)
    """


def finish(con: duckdb.DuckDBPyConnection, ctx: FormatContext) -> None:
    """Give every line of a request the request's action, session and actor (and `answers`,
    its event id), and the request line its outcome, so `WHERE error = ...` finds requests
    without a join. A batch may hold several files (small ones are read together): a line
    is joined only with lines of its own file (`event_id >> 32`)."""
    _correlate_idless(con, ctx)
    # requests answered in this batch but received before it (an earlier chunk or run): few,
    # so only their ids are looked up in what is stored
    con.execute("""CREATE OR REPLACE TEMP TABLE _orphans AS
        SELECT DISTINCT corr_id FROM (
          SELECT event_id >> 32, corr_id FROM batch
          WHERE kind IN ('response', 'lifecycle') AND corr_id IS NOT NULL
          EXCEPT SELECT event_id >> 32, corr_id FROM batch WHERE kind = 'request')""")
    earlier = ""
    if con.execute("SELECT count(*) FROM _orphans").fetchall()[0][0]:
        _find_requests(con)
        earlier = "UNION ALL SELECT event_id, corr_id, action, session, actor FROM _found"
    con.execute(f"""
      UPDATE batch SET action = q.action, session = q.session, actor = coalesce(batch.actor, q.actor),
                       answers = q.event_id
      FROM (SELECT event_id, corr_id, action, session, actor FROM batch WHERE kind = 'request'
            {earlier}) q
      WHERE batch.corr_id = q.corr_id AND batch.event_id >> 32 = q.event_id >> 32
        AND batch.kind IN ('response', 'lifecycle');
      UPDATE batch SET ok = q.ok, error = q.error, latency_ms = q.latency_ms
      FROM (SELECT event_id, corr_id, ok, error, latency_ms FROM batch WHERE kind = 'response') q
      WHERE batch.corr_id = q.corr_id AND batch.event_id >> 32 = q.event_id >> 32
        AND batch.kind = 'request';
    """)
    if earlier:  # requests already written: their outcome goes beside them (late_outcomes)
        con.execute("""INSERT INTO late_outcomes
            SELECT f.event_id, any_value(r.ok), any_value(r.error), any_value(r.latency_ms)
            FROM _found f JOIN batch r ON r.corr_id = f.corr_id AND r.kind = 'response'
              AND r.event_id >> 32 = f.event_id >> 32
            GROUP BY f.event_id""")


def _find_requests(con: duckdb.DuckDBPyConnection) -> None:
    """`_found`: the stored requests the orphans answer, looked for in the file's newest
    batches first (where they almost always are), in all of them only for those still
    missing: a log scanned every few minutes has hundreds of batches."""
    found = """SELECT s.event_id, s.corr_id, s.action, s.session, s.actor
               FROM {view} s SEMI JOIN _orphans o ON s.corr_id = o.corr_id
               WHERE s.kind = 'request'"""
    con.execute(f"CREATE OR REPLACE TEMP TABLE _found AS {found.format(view='recent_stored_events')}")
    if con.execute("SELECT count(*) FROM (SELECT corr_id FROM _orphans "
                   "EXCEPT SELECT corr_id FROM _found)").fetchall()[0][0]:
        con.execute(f"""INSERT INTO _found {found.format(view='stored_events')}
                        AND s.corr_id NOT IN (SELECT corr_id FROM _found)""")


# A log without request ids: a response (or a `timeout`) at time t with `elapsed_ms` e answers
# the request received at t − e. SLACK_MS absorbs the rounding of e and of the two times to
# whole ms; a request more than TOLERANCE_MS before t − e is not that response's request.
SLACK_MS = 1
TOLERANCE_MS = 1000
LOOKBACK_MS = 600_000  # how far before a batch a stored request is looked for
_ANSWERING = "('response', 'lifecycle')"


def _correlate_idless(con: duckdb.DuckDBPyConnection, ctx: FormatContext) -> None:
    """Join each line without a request id to its request (`corr_id` 'L' + the request's
    line), by what the lines carry, in one ASOF join (sorts: O(n log n)), never a look-up per
    line: the nearest request at or before t − e + SLACK_MS (for a line without `elapsed_ms`,
    at or before its own time), in the same file, of the same caller (actor, or the process
    when the line names no owner) and, when the line names one, session; ties go to the later
    line. Without such a request within TOLERANCE_MS, the nearest request of the file by
    that time; without that, the `received` line before it (the trimmed form's only clue).
    Requests answered in an earlier batch are looked for among the stored ones, within
    LOOKBACK_MS before this batch."""
    if not con.execute("""SELECT count(*) FROM batch WHERE corr_id IS NULL
                           AND kind IN ('request', 'response', 'lifecycle')""").fetchall()[0][0]:
        return
    # each id-less answer: where to look (`pos`: time × 2^32 + line) and by which key
    con.execute(f"""CREATE OR REPLACE TEMP TABLE _probe AS
        SELECT event_id >> 32 AS input, line, CAST(epoch_ms(ts) AS BIGINT) AS t,
          CASE WHEN latency_ms >= 0 AND latency_ms < 1e12
               THEN CAST(floor(epoch_ms(ts) - latency_ms) AS BIGINT) + {SLACK_MS} END AS target,
          CASE WHEN actor IS NOT NULL THEN 'a' WHEN parent_id IS NOT NULL THEN 'p' ELSE '' END
            AS who_kind,
          coalesce('a' || actor, 'p' || parent_id, '') || '|' || coalesce(session, '') AS key,
          session IS NOT NULL AS has_session
        FROM batch WHERE corr_id IS NULL AND kind IN {_ANSWERING}""")
    levels = con.execute("SELECT DISTINCT who_kind, has_session FROM _probe").fetchall()
    who = {"a": "'a' || actor", "p": "'p' || split_part(actor, ':', 1)", "": "''"}
    keys = sorted({f"{who[w]} || '|' || {'session' if s else chr(39) * 2}" for w, s in levels}
                  | {"'|'"})
    requests = """SELECT event_id >> 32 AS input, line, CAST(epoch_ms(ts) AS BIGINT) AS t, actor,
                         session FROM {src}
                  WHERE kind = 'request' AND ts IS NOT NULL
                    AND (corr_id IS NULL OR corr_id = 'L' || line){cond}"""
    sources = [requests.format(src="batch", cond="")]
    lo, first_request, first = con.execute(f"""SELECT min(coalesce(target, t)) - {TOLERANCE_MS},
        (SELECT min(epoch_ms(ts)) FROM batch WHERE kind = 'request'),
        (SELECT min(epoch_ms(ts)) FROM batch) FROM _probe""").fetchall()[0]
    if lo is not None and (first_request is None or lo < first_request):
        # an answer whose request may be in an earlier batch (a 30 s timeout)
        since = max(lo, first - LOOKBACK_MS)
        sources.append(requests.format(
            src="recent_stored_events",
            cond=f" AND ts >= make_timestamp({int(since)} * 1000)"))
    con.execute(f"""CREATE OR REPLACE TEMP TABLE _requests AS
        SELECT input, line, t, CAST(t AS HUGEINT) * 4294967296 + line AS pos, key
        FROM (SELECT *, unnest([{', '.join(keys)}]) AS key FROM ({' UNION ALL '.join(sources)}))
        WHERE key IS NOT NULL""")
    con.execute(f"""CREATE OR REPLACE TEMP TABLE _answer AS
        SELECT p.input, p.line,
          coalesce(CASE WHEN p.target IS NULL OR m.t >= p.target - {TOLERANCE_MS} THEN m.line END,
                   CASE WHEN p.target IS NULL OR f.t >= p.target - {TOLERANCE_MS} THEN f.line END)
            AS request
        FROM (SELECT *, CAST(coalesce(target, t) AS HUGEINT) * 4294967296 + line AS pos,
                     '|' AS anyone FROM _probe) p
        ASOF LEFT JOIN _requests m ON p.input = m.input AND p.key = m.key AND p.pos >= m.pos
        ASOF LEFT JOIN _requests f ON p.input = f.input AND p.anyone = f.key AND p.pos >= f.pos""")
    con.execute(f"""CREATE OR REPLACE TEMP TABLE batch AS
        SELECT b.* REPLACE (CASE
          WHEN b.corr_id IS NOT NULL OR b.kind NOT IN ('request', 'response', 'lifecycle')
          THEN b.corr_id
          WHEN b.kind = 'request' THEN 'L' || b.line
          ELSE 'L' || CAST(coalesce(a.request, max(CASE WHEN b.kind = 'request' THEN b.line END)
                 OVER (PARTITION BY b.event_id >> 32 ORDER BY b.line ROWS UNBOUNDED PRECEDING))
               AS VARCHAR) END AS corr_id,
          CASE WHEN b.corr_id IS NULL AND b.kind IN {_ANSWERING} THEN NULL ELSE b.parent_id END
            AS parent_id)
        FROM batch b LEFT JOIN _answer a ON a.input = b.event_id >> 32 AND a.line = b.line
        ORDER BY b.event_id""")
    # what nothing in this batch places goes with the last request stored before it
    if con.execute(f"SELECT count(*) FROM batch WHERE corr_id IS NULL AND kind IN {_ANSWERING}"
                   ).fetchall()[0][0]:
        before = None  # in the newest batches, unless there is none
        for view in ("recent_stored_events", "stored_events"):
            before = con.execute(f"SELECT max(line) FROM {view} WHERE kind = 'request'"
                                 ).fetchall()[0][0]
            if before is not None:
                break
        if before is not None:
            con.execute(f"UPDATE batch SET corr_id = 'L' || {int(before)} "
                        f"WHERE corr_id IS NULL AND kind IN {_ANSWERING}")


# What detectors may know of bproxy (log-formats §2.4): its own pacing before it answers,
# the error codes whose retry hint is `never` (after ADR-030), and its rate guard's errors.
PROFILE = FormatProfile(
    delay_events=("pacing_wait", "error_delay"), delay_key="delay_ms",
    terminal_errors=(
        "SESSION_NOT_FOUND", "INVALID_SESSION_ID", "SESSION_SCOPE_MISMATCH", "METRONOME_DETECTED",
        "SELECTOR_AMBIGUOUS", "ELEMENT_HANDLE_SCOPE_MISMATCH", "DEBUGGER_DISABLED", "TAB_NOT_FOUND",
    ),
    rate_guard_errors=("METRONOME_DETECTED", "RATE_LIMITED"),
)


FORMAT = Format(
    name="bproxy",
    description="bproxy browser-proxy daemon log (pino NDJSON); responses joined to requests",
    sniff=sniff,
    select_sql=select_sql,
    mapped_keys=frozenset(FIELDS),
    known_keys=frozenset(KNOWN),
    finish=finish,
    priority=10,
    profile=PROFILE,
    groupable=True,
)

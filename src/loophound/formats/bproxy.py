"""bproxy daemon log: pino NDJSON from dimdasci/bproxy (`~/.bproxy/logs/<date>.log`).

`response`, `error_delay` and `timeout` lines carry neither action nor session: they are joined
to their `received` line by request `id`. The trimmed form of seed 001 has no `id`; there a
line belongs to the `received` line just before it. Actors are `pid:ownerHash`, because the
owner hash is salted afresh at every daemon restart.
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

FIELDS = {
    "time": "BIGINT", "pid": "BIGINT", "id": "VARCHAR", "action": "VARCHAR",
    "session": "VARCHAR", "event": "VARCHAR", "ownerHash": "VARCHAR", "ok": "BOOLEAN",
    "elapsed_ms": "DOUBLE", "error_code": "VARCHAR", "ws_client": "VARCHAR",
}
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
    return f"""
    SELECT line, byte_offset, byte_length, text,
      {epoch_ms_to_ts('r.time')} AS ts,
      CASE r.event {kind_cases} ELSE 'record' END AS kind,
      r.event AS event_type,
      CASE WHEN r.event LIKE 'ws_%' THEN r.ws_client
           WHEN r.ownerHash IS NOT NULL THEN coalesce(CAST(r.pid AS VARCHAR), '?') || ':' || r.ownerHash
      END AS actor,
      'bproxy' AS target,
      r.session, r.action, r.ok, r.error_code AS error, r.id AS corr_id,
      r.elapsed_ms AS latency_ms,
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


def _correlate_idless(con: duckdb.DuckDBPyConnection, ctx: FormatContext) -> None:
    """Trimmed logs have no request id: a line belongs to the `received` line before it."""
    idless = con.execute(
        "SELECT count(*) FROM batch WHERE corr_id IS NULL AND kind IN ('request', 'response', "
        "'lifecycle')"
    ).fetchall()[0][0]
    if not idless:
        return
    before = None  # the last request stored: in the newest batches, unless there is none
    for view in ("recent_stored_events", "stored_events"):
        before = con.execute(f"SELECT max(line) FROM {view} WHERE kind = 'request'").fetchall()[0][0]
        if before is not None:
            break
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE batch AS
        SELECT * REPLACE (CASE
          WHEN corr_id IS NOT NULL OR kind NOT IN ('request', 'response', 'lifecycle')
          THEN corr_id
          ELSE 'L' || CAST(coalesce(max(CASE WHEN kind = 'request' THEN line END)
                        OVER (PARTITION BY event_id >> 32 ORDER BY line ROWS UNBOUNDED PRECEDING),
                        ?) AS VARCHAR)
          END AS corr_id)
        FROM batch
        """,
        [before],
    )


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

"""bproxy daemon log: pino NDJSON from dimdasci/bproxy (`~/.bproxy/logs/<date>.log`).

`response`, `error_delay` and `timeout` lines carry neither action nor session: they are joined
to their `received` line by the request id, under whichever key the log has it (`id`, `req_id`,
`reqId`, `request_id`, `requestId`). A log without ids (the trimmed form of seed 001, a
daemon that does not log them) is joined by what its lines do carry: a response at time t
that took `elapsed_ms` e answers the request received at t − e by the same caller (see
`_correlate_idless`); only a line that nothing else places goes with the `received` line before
it. Actors are `pid:ownerHash`, because the owner hash is salted afresh at every daemon restart.
A log that carries a command's `args` and `result` objects has them in those columns (JSON
text, the result's first 4 KiB), not in `extra`.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

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
} | {k: "VARCHAR" for k in ID_KEYS} | {
    # a daemon that logs a command's arguments and result (bproxy itself does not): the
    # canonical `args` and `result`, which say whether a repeated call is the same call
    "args": "JSON", "result": "JSON",
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
      CAST(r.args AS VARCHAR) AS args, left(CAST(r.result AS VARCHAR), 4096) AS result,
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
_NO_TIME = -(1 << 62)


def _correlate_idless(con: duckdb.DuckDBPyConnection, ctx: FormatContext) -> None:
    """Join each line without a request id to its request (`corr_id` 'L' + the request's
    line) by what the lines carry, with sorts and binary searches (O(n log n)), never a
    look-up per line: the nearest request at or before t − e + SLACK_MS (for a line without
    `elapsed_ms`, at or before its own time), in the same file, of the same caller (actor, or
    the process when the line names no owner) and, when the line names one, session; of equal
    times the later line. Without such a request within TOLERANCE_MS, the nearest request of
    the file by that time; without that, the `received` line before it (the trimmed form's
    only clue). Requests answered in an earlier batch are looked for among the stored ones,
    within LOOKBACK_MS before this batch."""
    if not con.execute("""SELECT count(*) FROM batch WHERE corr_id IS NULL
                          AND kind IN ('request', 'response', 'lifecycle')""").fetchall()[0][0]:
        return
    key = "coalesce('a' || actor, 'p' || parent_id, '') || '|' || coalesce(session, '')"
    timed = "latency_ms >= 0 AND latency_ms < 1e12 AND ts IS NOT NULL"
    probe = con.execute(f"""SELECT event_id, line, hash(event_id >> 32, {key}) AS k,
          hash(event_id >> 32, '|') AS anyone, coalesce({timed}, false) AS timed,
          coalesce(CASE WHEN {timed} THEN CAST(floor(epoch_ms(ts) - latency_ms) AS BIGINT)
                   + {SLACK_MS} END, CAST(epoch_ms(ts) AS BIGINT), {_NO_TIME}) AS at
        FROM batch WHERE corr_id IS NULL AND kind IN {_ANSWERING}""").fetchnumpy()
    if not len(probe["line"]):  # only requests: each is its own
        con.execute("UPDATE batch SET corr_id = 'L' || line WHERE corr_id IS NULL "
                    "AND kind = 'request'")
        return
    levels = con.execute(f"""SELECT DISTINCT CASE WHEN actor IS NOT NULL THEN 'a'
          WHEN parent_id IS NOT NULL THEN 'p' ELSE '' END, session IS NOT NULL
        FROM batch WHERE corr_id IS NULL AND kind IN {_ANSWERING}""").fetchall()
    who = {"a": "'a' || actor", "p": "'p' || split_part(actor, ':', 1)", "": "''"}
    keys = sorted({f"{who[w]} || '|' || {'session' if s else chr(39) * 2}" for w, s in levels}
                  | {"'|'"})
    requests = """SELECT event_id >> 32 AS input, line, CAST(epoch_ms(ts) AS BIGINT) AS t,
                         actor, session FROM {src}
                  WHERE kind = 'request' AND (corr_id IS NULL OR corr_id = 'L' || line){cond}"""
    sources = [requests.format(src="batch", cond="")]
    times = probe["at"][probe["at"] != _NO_TIME]
    first_request, first = con.execute("""SELECT min(epoch_ms(ts)) FILTER (kind = 'request'),
                                          min(epoch_ms(ts)) FROM batch""").fetchall()[0]
    if len(times) and (first_request is None or times.min() - TOLERANCE_MS < first_request):
        # an answer whose request may be in an earlier batch (a 30 s timeout)
        since = max(int(times.min()) - TOLERANCE_MS, first - LOOKBACK_MS)
        sources.append(requests.format(src="recent_stored_events",
                                       cond=f" AND ts >= make_timestamp({since} * 1000)"))
    req = con.execute(f"""SELECT line, coalesce(t, {_NO_TIME}) AS t, hash(input, key) AS k
        FROM (SELECT *, unnest([{', '.join(keys)}]) AS key FROM ({' UNION ALL '.join(sources)}))
        WHERE key IS NOT NULL""").fetchnumpy()
    clocked = req["t"] != _NO_TIME
    rk, rt, rl = req["k"][clocked], req["t"][clocked], req["line"][clocked]
    at, line = probe["at"], probe["line"]
    near = np.where(probe["timed"], at - TOLERANCE_MS, _NO_TIME)  # how far back t − e may be
    found = np.full(len(line), -1, dtype=np.int64)
    # the caller's request, then anyone's (none with a time: an answer without an id in a
    # log whose requests all have one)
    for pk in (probe["k"], probe["anyone"]) if len(rt) else ():
        i = _last_at_or_before(rk, rt, rl, pk, at)
        hit = (found < 0) & (i >= 0) & (rt[np.maximum(i, 0)] >= near) & (at != _NO_TIME)
        found[hit] = rl[i[hit]]
    rk, rl = req["k"], req["line"]
    i = _last_at_or_before(rk, rl, rl, probe["anyone"], line)  # the request line before
    hit = (found < 0) & (i >= 0)
    found[hit] = rl[i[hit]]
    con.register("_answer", pa.table({"event_id": probe["event_id"], "request": found}))
    try:
        con.execute(f"""
            UPDATE batch SET corr_id = 'L' || line WHERE corr_id IS NULL AND kind = 'request';
            UPDATE batch SET corr_id = 'L' || a.request FROM _answer a
            WHERE batch.event_id = a.event_id AND a.request >= 0;
            UPDATE batch SET parent_id = NULL
            WHERE parent_id IS NOT NULL AND kind IN {_ANSWERING};""")
    finally:
        con.unregister("_answer")
    # what nothing in this batch places goes with the last request stored before it
    if (found < 0).any():
        before = None  # in the newest batches, unless there is none
        for view in ("recent_stored_events", "stored_events"):
            before = con.execute(f"SELECT max(line) FROM {view} WHERE kind = 'request'"
                                 ).fetchall()[0][0]
            if before is not None:
                break
        if before is not None:
            con.execute(f"UPDATE batch SET corr_id = 'L' || {int(before)} "
                        f"WHERE corr_id IS NULL AND kind IN {_ANSWERING}")


def _last_at_or_before(rk: np.ndarray, rt: np.ndarray, rl: np.ndarray, pk: np.ndarray,
                       pt: np.ndarray) -> np.ndarray:
    """For each probe (key `pk`, position `pt`), the index of the request with the same key
    (`rk`) and the greatest (position `rt`, line `rl`) with `rt` ≤ `pt`; -1 where none. One
    sort of the requests and a binary search per probe."""
    if not len(rk):
        return np.full(len(pk), -1, dtype=np.int64)
    ukeys, rank = np.unique(rk, return_inverse=True)
    base = int(rt.min())
    span = (1 << 40) - 1  # positions relative to the earliest: 35 years of ms, or lines
    combined = (rank.astype(np.int64) << 40) | np.clip(rt - base, 0, span)
    order = np.lexsort((rl, combined))
    combined = combined[order]
    slot = np.minimum(np.searchsorted(ukeys, pk), len(ukeys) - 1)
    same = ukeys[slot] == pk
    wanted = (slot.astype(np.int64) << 40) + np.clip(pt - base, -1, span)
    at = np.searchsorted(combined, wanted, side="right") - 1
    ok = same & (at >= 0)
    ok[ok] = (combined[at[ok]] >> 40) == slot[ok]
    return np.where(ok, order[np.maximum(at, 0)], -1)


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

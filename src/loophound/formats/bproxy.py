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

from contextlib import nullcontext
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..db import arrow_numpy, insert_arrow, numpy_arrow, registered, strings_arrow
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
# what a line is read as: the mapped fields typed, the documented others as raw JSON
STRUCT = struct_spec(FIELDS | json_fields(KNOWN))
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
    FROM (SELECT *, from_json(text, {STRUCT}) AS r FROM raw)
    """


def finish_rows(con: duckdb.DuckDBPyConnection, ctx: FormatContext, rows: pa.Table) -> pa.Table:
    """Give every line of a request the request's action, session and actor (and `answers`,
    its event id), and the request line its outcome, so `WHERE error = ...` finds requests
    without a join. A batch may hold several files (small ones are read together): a line
    is joined only with lines of its own file (`event_id >> 32`). Works on the batch's rows
    in Arrow (`Format.finish_rows`) and returns them finished; `batch` in DuckDB is made of
    them only where an UPDATE picks among several matches."""
    kind, idless = rows["kind"], ~arrow_numpy(rows["corr_id"].is_valid())
    if ((_is(kind, "response") | _is(kind, "lifecycle")) & idless).any():
        return _correlate_idless(con, rows)  # lines without a request id
    unnamed = np.flatnonzero(_is(kind, "request") & idless)
    if len(unnamed):  # a request without an id: named by its line ('L' + line)
        rows = _set(rows, "corr_id", unnamed,
                    _line_names(arrow_numpy(rows["line"])[unnamed]))
    return _join_by_id(con, rows)


def _join_by_id(con: duckdb.DuckDBPyConnection, rows: pa.Table | None = None) -> pa.Table:
    """Join the lines of a request by its id (`corr_id`), in this batch (`rows`, or `batch`
    when None) and, for a request received before it, among the stored ones: what the
    UPDATEs of `_update_by_id` write, computed in Arrow, the ids as numbers (`_ById`), and
    returned (an UPDATE of text columns, joined on 32-character ids, cost most of
    `finish`). Where a line would meet several requests, or a request several responses,
    the join picks one as DuckDB meets them: those UPDATEs run instead, in `batch`."""
    in_batch = rows is None
    if rows is None:
        rows = con.sql("SELECT * FROM batch").to_arrow_table()
    by_id = _ById(rows)
    found = by_id.look_back(con)
    finished = by_id.joined(found)
    if finished is not None:
        if found is not None:
            _late_outcomes(con, rows)  # the responses' outcomes, as they are in `rows`
        return finished
    if not in_batch:
        _load(con, rows)
    _update_by_id(con, found is not None)
    return con.sql("SELECT * FROM batch").to_arrow_table()


def _load(con: duckdb.DuckDBPyConnection, rows: pa.Table) -> None:
    """`batch` made of `rows`, for statements that update it."""
    with registered(con, "_batch_rows", rows):
        con.execute("CREATE OR REPLACE TEMP TABLE batch AS SELECT * FROM _batch_rows")


def _update_by_id(con: duckdb.DuckDBPyConnection, earlier: bool) -> None:
    """The join by id in `batch` itself, with the stored requests `_found` when `earlier`."""
    also = "UNION ALL SELECT event_id, corr_id, action, session, actor FROM _found" if earlier else ""
    con.execute(f"""
      UPDATE batch SET action = q.action, session = q.session, actor = coalesce(batch.actor, q.actor),
                       answers = q.event_id
      FROM (SELECT event_id, corr_id, action, session, actor FROM batch WHERE kind = 'request'
            {also}) q
      WHERE batch.corr_id = q.corr_id AND batch.event_id >> 32 = q.event_id >> 32
        AND batch.kind IN ('response', 'lifecycle');
      UPDATE batch SET ok = q.ok, error = q.error, latency_ms = q.latency_ms
      FROM (SELECT event_id, corr_id, ok, error, latency_ms FROM batch WHERE kind = 'response') q
      WHERE batch.corr_id = q.corr_id AND batch.event_id >> 32 = q.event_id >> 32
        AND batch.kind = 'request';
    """)
    if earlier:
        _late_outcomes(con)


class _ById:
    """The rows of `batch` (`table`) keyed by file and request id (`key`: equal ids of one
    file, equal numbers 0, 1, ... below `keys`; -1 without an id), from a dictionary of the
    ids: no string is hashed twice, no sort, no collision."""

    def __init__(self, table: pa.Table):
        self.table = table
        self.request, self.response, lifecycle = (
            _is(table["kind"], k) for k in ("request", "response", "lifecycle"))
        self.answering = self.response | lifecycle
        self.code, self.ids = _codes(table["corr_id"])
        self.input = arrow_numpy(table["event_id"]) >> 32
        # ascending; a batch of one file (most are) without sorting its rows' ids
        several = len(self.input) and self.input.min() != self.input.max()
        self.files = np.unique(self.input) if several else self.input[:1]
        if len(self.files) < 2:  # one file: the id is the key
            self.key, self.keys = self.code, len(self.ids)
        else:  # several files read together: (file, id) numbered
            self.key, self.keys = self.key_of(self.input, self.code), len(self.files) * len(self.ids)

    def key_of(self, inputs: np.ndarray, code: np.ndarray) -> np.ndarray:
        """The key of each (file `inputs`, id `code`); -1 without an id or of another file."""
        at = np.minimum(np.searchsorted(self.files, inputs), max(len(self.files) - 1, 0))
        ours = (code >= 0) & (self.files[at] == inputs) if len(self.files) else code < -1
        return np.where(ours, at * len(self.ids) + code, -1)

    def look_back(self, con: duckdb.DuckDBPyConnection) -> pa.Table | None:
        """The stored requests (`_found`) of the ids answered here but asked before this
        batch (an earlier chunk or run): few, so only they are looked up. None when there
        are none such. A line joined already (`answers`: held back from the chunk before,
        whose request was written then) is not looked up again: its request's outcome was
        written with it, or recorded late then, and recording it again made every store
        whose chunks cut a request from its response carry late outcomes, which every query
        of `events` then paid a join for."""
        asked = np.zeros(self.keys, dtype=bool)
        asked[self.key[self.request & (self.key >= 0)]] = True
        joined = arrow_numpy(self.table["answers"].is_valid())
        answered = np.flatnonzero(self.answering & (self.key >= 0) & ~joined)
        orphans = answered[~asked[self.key[answered]]]
        if not len(orphans):
            return None
        ids = self.ids.take(numpy_arrow(np.unique(self.code[orphans])))
        with registered(con, "_orphan_ids", pa.table({"corr_id": ids})):
            con.execute("CREATE OR REPLACE TEMP TABLE _orphans AS SELECT corr_id FROM _orphan_ids")
        _find_requests(con)
        return con.sql("SELECT event_id, corr_id, action, session, actor FROM _found"
                       ).to_arrow_table()

    def joined(self, found: pa.Table | None) -> pa.Table | None:
        """The batch with each answering line's request fields (from this batch's requests,
        then the `found` ones) and each request's outcome from its response; None where a
        line meets several requests or a request several responses."""
        table = self.table
        # the requests: rows of the batch, then (the batch's number + i) the found ones
        entries = np.where(self.request, self.key, -1)
        if found is not None:
            code = arrow_numpy(pc.index_in(found["corr_id"], value_set=self.ids), null=-1)
            entries = np.concatenate([entries, self.key_of(
                arrow_numpy(found["event_id"]) >> 32, code)])
        request = _only_match(entries, self.key, self.answering, self.keys)
        outcome = _only_match(np.where(self.response, self.key, -1), self.key, self.request,
                              self.keys)
        if request is None or outcome is None:
            return None
        answered = np.flatnonzero(request >= 0)
        if len(answered):
            def column(c: str) -> pa.ChunkedArray:  # the batch's, then the found ones'
                chunks = table[c].chunks + ([] if found is None else
                                            found[c].cast(table[c].type).chunks)
                return pa.chunked_array(chunks, table[c].type)

            pick = numpy_arrow(request[answered])
            for c, to in (("action", "action"), ("session", "session"), ("event_id", "answers")):
                table = _set(table, to, answered, column(c).take(pick))
            actorless = answered[~arrow_numpy(table["actor"].is_valid())[answered]]
            table = _set(table, "actor", actorless,
                         column("actor").take(numpy_arrow(request[actorless])))
        replied = np.flatnonzero(outcome >= 0)
        if len(replied):
            pick = numpy_arrow(outcome[replied])
            for c in ("ok", "error", "latency_ms"):
                table = _set(table, c, replied, table[c].take(pick))
        return table


def _is(column: pa.ChunkedArray, value: str) -> np.ndarray:
    """Where the strings of `column` are `value` (a scalar made by `pa.scalar` imports pandas)."""
    scalar = strings_arrow([value])[0].cast(column.type)
    return arrow_numpy(pc.equal(column, scalar), null=False)


def _only_match(entries: np.ndarray, key: np.ndarray, which: np.ndarray,
                keys: int) -> np.ndarray | None:
    """For each row that `which` says, the entry with its key (`entries`: each entry's key,
    -1 for none; keys below `keys`), -1 for the other rows and where none has it; None
    where several have it."""
    out = np.full(len(key), -1, dtype=np.int64)
    rows = np.flatnonzero(which & (key >= 0))
    listed = np.flatnonzero(entries >= 0)
    if not len(rows) or not len(listed):
        return out
    if (np.bincount(entries[listed], minlength=keys)[key[rows]] > 1).any():
        return None
    slot = np.full(keys, -1, dtype=np.int64)
    slot[entries[listed]] = listed
    out[rows] = slot[key[rows]]
    return out


def _late_outcomes(con: duckdb.DuckDBPyConnection, rows: pa.Table | None = None) -> None:
    """Requests already written (`_found`) answered in this batch (`batch`, or its rows
    `rows`): their outcome goes beside them (`late_outcomes`)."""
    with registered(con, "_answering", rows) if rows is not None else nullcontext("batch") as r:
        con.execute(f"""INSERT INTO late_outcomes
            SELECT f.event_id, any_value(r.ok), any_value(r.error), any_value(r.latency_ms)
            FROM _found f JOIN {r} r
              ON r.corr_id = f.corr_id AND r.kind = 'response'
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
_NO_TIME = -(1 << 62)


def _correlate_idless(con: duckdb.DuckDBPyConnection, rows: pa.Table) -> pa.Table:
    """Join each line without a request id to its request (`corr_id` 'L' + the request's
    line) by what the lines carry, with sorts and binary searches (O(n log n)), never a
    look-up per line: the nearest request at or before t − e + SLACK_MS (for a line without
    `elapsed_ms`, at or before its own time), in the same file, of the same caller (actor, or
    the process when the line names no owner) and, when the line names one, session; of equal
    times the later line. Without such a request within TOLERANCE_MS, the nearest request of
    the file by that time; without that, the `received` line before it (the trimmed form's
    only clue), and without that the last request stored. Requests answered in an earlier
    batch are looked for among the stored ones, within LOOKBACK_MS before this batch.

    Each answering line's request fields and each request's outcome are set from the match
    (`_Placed`) in the batch's rows (`rows`, Arrow), not by a join on `corr_id` strings,
    and returned. Where that would not give what the join gives (`_join_by_id`, which a
    log with ids on some lines needs, and which picks one of several responses of a request
    as DuckDB meets them), only `corr_id` is written, in `batch` made of the rows, and that
    join follows (what it returns, this returns)."""
    t = _epoch_ms(rows["ts"])
    lines = _Lines(_lines_of(rows, t))
    probe = np.flatnonzero(lines.placing & ~lines.request & lines.unplaced)
    at, timed = lines.at[probe], lines.timed[probe]
    # requests a line without an id may answer: those without an id, or placed ('L' + line)
    placeable = lines.request & (lines.unplaced | (lines.named == lines.line))
    clocked = lines.t[lines.request & (lines.t != _NO_TIME)]
    times = at[at != _NO_TIME]
    stored = None
    if len(times) and (not len(clocked) or times.min() - TOLERANCE_MS < clocked.min()):
        # an answer whose request may be in an earlier batch (a 30 s timeout)
        first = int(t[t != _NO_TIME].min())
        since = max(int(times.min()) - TOLERANCE_MS, first - LOOKBACK_MS)
        stored = con.sql(f"""SELECT event_id, line,
              coalesce(CAST(epoch_ms(ts) AS BIGINT), {_NO_TIME}) AS t, actor, session,
              action, corr_id IS NOT NULL AS named
            FROM recent_stored_events WHERE kind = 'request'
              AND (corr_id IS NULL OR corr_id = 'L' || line)
              AND ts >= make_timestamp({since} * 1000)""").to_arrow_table()
    requests = _Requests(lines, np.flatnonzero(placeable), stored)
    found = requests.place(lines, probe, at, timed)
    placed = _Placed(con, lines, probe, requests, found)
    # an id of the log's
    named_by_id = lines.placing & ~lines.request & ~lines.unplaced & (lines.named < 0)
    if named_by_id.any() or not placeable[lines.request].all() or not placed.exact(con):
        _load(con, rows)
        placed.write_corr_ids(con)
        return _join_by_id(con)
    return placed.finished(con, rows)


def _epoch_ms(ts: pa.ChunkedArray) -> np.ndarray:
    """`epoch_ms(ts)`: whole ms, rounded half away from zero as DuckDB rounds them (a time
    of the log is whole ms already); _NO_TIME where NULL."""
    us = arrow_numpy(ts.cast(pa.timestamp("us")).cast(pa.int64()), null=0)
    return np.where(arrow_numpy(ts.is_valid()), np.sign(us) * ((np.abs(us) + 500) // 1000),
                    _NO_TIME)


def _named(corr_id: pa.ChunkedArray) -> pa.Array:
    """The line a `corr_id` names ('L' + a line, what placing writes), NULL for any other
    id: what DuckDB gives for `CASE WHEN corr_id[1] = 'L' AND 'L' || TRY_CAST(corr_id[2:] AS
    BIGINT) = corr_id THEN TRY_CAST(corr_id[2:] AS BIGINT) END` (the digits after the 'L'
    are a BIGINT written as DuckDB writes it, so as Python does)."""
    line = np.full(len(corr_id), -1, dtype=np.int64)
    named = np.zeros(len(corr_id), dtype=bool)
    maybe = np.flatnonzero(arrow_numpy(pc.starts_with(corr_id, pattern="L"), null=False))
    for i, text in zip(maybe.tolist(), corr_id.take(numpy_arrow(maybe)).to_pylist(), strict=True):
        digits = text[1:]
        try:
            value = int(digits)
        except ValueError:
            continue
        if str(value) == digits and -(1 << 63) <= value < 1 << 63:
            line[i], named[i] = value, True
    return numpy_arrow(line, mask=~named)


_PLACING_FIELDS = ("answers", "latency_ms", "actor", "session", "parent_id", "action", "ok",
                   "error")


def _lines_of(rows: pa.Table, t: np.ndarray) -> pa.Table:
    """The columns placing reads of the batch (`rows`, their times `t` in ms), every row in
    its place, so that a row of these is the row of the batch: `placing` marks the requests
    and the lines that may answer one. (Only those rows were taken once: a filter copied
    every string of the batch's six text columns, a seventh of placing.)"""
    kind = rows["kind"]
    request, response = _is(kind, "request"), _is(kind, "response")
    placing = request | response | _is(kind, "lifecycle")
    return pa.table({
        "event_id": rows["event_id"], "line": rows["line"], "placing": numpy_arrow(placing),
        "request": numpy_arrow(request), "response": numpy_arrow(response),
        "unplaced": rows["corr_id"].is_null(), "named": _named(rows["corr_id"]),
        **{c: rows[c] for c in _PLACING_FIELDS}, "t": numpy_arrow(t)})


class _Lines:
    """The rows placing reads (`_lines_of`), the columns it compares as numpy arrays."""

    def __init__(self, table: pa.Table):
        self.table = table
        self.event_id, self.line, self.t = (arrow_numpy(table[c]) for c in ("event_id", "line", "t"))
        self.input = self.event_id >> 32
        self.placing, self.request, self.response, self.unplaced = (
            arrow_numpy(table[c], null=False)
            for c in ("placing", "request", "response", "unplaced"))
        self.named = arrow_numpy(table["named"], null=-1)
        self.answers = arrow_numpy(table["answers"], null=-1)
        latency = arrow_numpy(table["latency_ms"], null=np.nan)
        with np.errstate(invalid="ignore"):  # NULL latency: NaN, not timed
            self.timed = (latency >= 0) & (latency < 1e12) & (self.t != _NO_TIME)
            # when a line without an id was asked: t − e (+ SLACK_MS), else its own time
            self.at = np.where(self.timed, np.floor(self.t - np.where(self.timed, latency, 0))
                               .astype(np.int64) + SLACK_MS, self.t)


class _Requests:
    """The requests a line without an id may answer, as arrays: the stored ones near this
    batch (`stored`), then this batch's (rows `rows` of `lines`). `actor`, `session`: each
    request's as numbers (`_codes`); `codes`: the same numbers for the rows of `lines`, and
    the strings they stand for."""

    def __init__(self, lines: _Lines, rows: np.ndarray, stored: pa.Table | None):
        self.rows = rows
        self.stored = 0 if stored is None else stored.num_rows
        self.stored_table = stored
        parts = [stored] if stored is not None else []
        self.event_id, self.line, self.t = (np.concatenate(
            [arrow_numpy(p[c]) for p in parts] + [getattr(lines, c)[rows]])
            for c in ("event_id", "line", "t"))
        self.input = self.event_id >> 32
        self.codes: dict[str, tuple[np.ndarray, pa.Array]] = {}
        for c in ("actor", "session"):  # those of `lines` and `stored` numbered together
            codes, values = _codes(pa.chunked_array(
                lines.table[c].chunks + [k for p in parts for k in p[c].chunks], pa.string()))
            self.codes[c] = (codes[:lines.table.num_rows], values)
            setattr(self, c, np.concatenate([codes[lines.table.num_rows:],
                                             codes[:lines.table.num_rows][rows]]))

    def place(self, lines: _Lines, probe: np.ndarray, at: np.ndarray,
              timed: np.ndarray) -> np.ndarray:
        """For each answering line `probe` (rows of `lines`, asked at `at`), the index of
        its request, -1 where none: the caller's request by time, then anyone's by time,
        then the request line before it."""
        found = np.full(len(probe), -1, dtype=np.int64)
        if not len(self.t):
            return found
        keys = _Keys(self, lines, probe)
        ordered = _ascending(self.input, self.line)
        clocked = self.t[keys.entry] != _NO_TIME
        if clocked.any():
            entry = keys.entry[clocked]
            by_time = _Sorted(keys.entry_key[clocked], self.t[entry], self.line[entry], entry,
                              ordered)
            near = np.where(timed, at - TOLERANCE_MS, _NO_TIME)  # how far back t − e may be
            left = np.flatnonzero(at != _NO_TIME)
            for key in (keys.probe, keys.anyone):  # the caller's request, then anyone's
                i = by_time.last_at_or_before(key[left], at[left])
                hit = (i >= 0) & (_at(self.t, i) >= near[left])
                found[left[hit]] = i[hit]
                left = left[~hit]
        left = np.flatnonzero(found < 0)
        if len(left):  # the request line before
            by_line = _Sorted(keys.anyone_of_requests, self.line, self.line,
                              np.arange(len(self.line)), ordered)
            found[left] = by_line.last_at_or_before(keys.anyone[left], lines.line[probe][left])
        return found


def _ascending(inputs: np.ndarray, line: np.ndarray) -> bool:
    """Whether rows are in the order of (input, line)."""
    if len(line) < 2:
        return True
    step = np.diff(inputs)
    return bool(((step > 0) | ((step == 0) & (np.diff(line) > 0))).all())


class _Keys:
    """Who asked, as integers a sort can compare: for each answering line its file, caller
    (actor, or process when it names no owner, or nobody) and session; and each request
    under the same, for every kind of caller (with a session or not) some answering line
    names (`entry_key`, `entry`: the request's index). Equal strings, equal numbers (no
    hashing, so no collisions); a NULL or empty session is no session."""

    LIMIT = 1 << 23  # keys beside a 40-bit position in an int64 (`_Sorted`)

    def __init__(self, requests: _Requests, lines: _Lines, probe: np.ndarray):
        n = len(requests.input)
        p_input = lines.input[probe]
        if requests.input.min() == requests.input.max() and (
                not len(p_input) or (p_input == requests.input[0]).all()):
            r_input, p_input = np.zeros(n, dtype=np.int64), np.zeros(len(p_input), np.int64)
        else:  # several files read together: numbered 0, 1, ...
            inputs = np.unique(np.concatenate([requests.input, p_input]),
                               return_inverse=True)[1].astype(np.int64)
            r_input, p_input = inputs[:n], inputs[n:]
        line_actor, actors = requests.codes["actor"]
        line_session, sessions = requests.codes["session"]
        empties = np.flatnonzero(arrow_numpy(pc.binary_length(sessions), null=-1) == 0)
        empty = int(empties[0]) if len(empties) else -1  # an empty session is no session

        def session(c: np.ndarray) -> np.ndarray:  # NULL -1, empty 0, others 1, 2, ...
            out = np.where(c < 0, -1, c + 1)
            if empty >= 0:
                out[c == empty] = 0
            return out

        r_session, p_session = session(requests.session), session(line_session[probe])
        r_actor, p_actor = requests.actor, line_actor[probe]
        process = arrow_numpy(lines.table["parent_id"].is_valid())[probe]
        p_tag = np.where(p_actor >= 0, 1, process.astype(np.int64) * 2)
        p_who = np.maximum(p_actor, 0)
        r_who = {0: np.zeros(n, dtype=np.int64), 1: r_actor}
        who_size = len(actors) + 1
        if (p_tag == 2).any():  # lines naming only their process: each request's process
            parents = lines.table["parent_id"].take(numpy_arrow(probe[p_tag == 2]))
            pids = pc.replace_substring_regex(actors, "(?s):.*", "")  # before the first ':'
            codes, values = _codes(pa.chunked_array(parents.chunks + [pids], pa.string()))
            p_who[p_tag == 2] = codes[:len(parents)]
            r_who[2] = _at(codes[len(parents):], r_actor)
            who_size = max(who_size, len(values) + 1)
        sizes = (who_size, len(sessions) + 2)
        kinds = np.bincount(p_tag * 2 + (p_session >= 0), minlength=6).reshape(3, 2)
        levels = {(0, False)} | {(int(k), bool(s))
                                 for k, s in zip(*np.nonzero(kinds), strict=True)}
        keys, index = [], []
        for tag, with_session in sorted(levels):
            who = r_who[tag]
            ok = who >= 0
            if with_session:
                # an empty session is no session: such a request is already under that key
                ok &= (r_session > 0) if (tag, False) in levels else (r_session >= 0)
            i = np.flatnonzero(ok) if not ok.all() else np.arange(n)
            keys.append(_key(sizes, r_input[i], tag, who[i], r_session[i] if with_session else 0))
            index.append(i)
        parts = [*keys, _key(sizes, p_input, p_tag, p_who, np.maximum(p_session, 0)),
                 _key(sizes, p_input, 0, 0, 0), _key(sizes, r_input, 0, 0, 0)]
        if (int(r_input.max(initial=0)) + int(p_input.max(initial=0)) + 1) * 3 * sizes[0] \
                * sizes[1] >= self.LIMIT:  # too many to pack beside a position: ranks
            ranks = np.unique(np.concatenate(parts), return_inverse=True)[1].astype(np.int64)
            parts = np.split(ranks, np.cumsum([len(x) for x in parts])[:-1])
        self.entry_key = np.concatenate(parts[:len(keys)])
        self.entry = np.concatenate(index)
        self.probe, self.anyone, self.anyone_of_requests = parts[len(keys):]


def _at(values: np.ndarray, index: np.ndarray) -> np.ndarray:
    """`values[index]`, -1 where `index` is -1."""
    out = np.full(len(index), -1, dtype=np.int64)
    out[index >= 0] = values[index[index >= 0]]
    return out


def _key(sizes: tuple[int, int], inputs: np.ndarray, tag, who, session) -> np.ndarray:
    return ((inputs * 3 + tag) * sizes[0] + who) * sizes[1] + session


def _codes(column: pa.ChunkedArray) -> tuple[np.ndarray, pa.Array]:
    """The strings of `column` as numbers: equal strings the same number (0, 1, ...), NULL
    -1; and the distinct strings, the n-th with number n."""
    encoded = pc.dictionary_encode(column)  # its chunks share one dictionary
    if not encoded.num_chunks:
        return np.empty(0, dtype=np.int64), pa.nulls(0, pa.string())  # no strings
    codes = np.concatenate([arrow_numpy(c.indices, null=-1) for c in encoded.chunks])
    return codes.astype(np.int64), encoded.chunk(encoded.num_chunks - 1).dictionary


class _Sorted:
    """Entries (`key`, position `pos`, then `line`) sorted once, for binary searches: O(n log
    n) in all, never a look-up per line. `ordered`: the entries of each key are in the order
    of their lines already, so two stable sorts do (the second of nearly sorted times)."""

    SPAN = (1 << 40) - 1  # positions relative to the earliest: 35 years of ms, or lines

    def __init__(self, key: np.ndarray, pos: np.ndarray, line: np.ndarray, item: np.ndarray,
                 ordered: bool):
        self.base = int(pos.min())
        combined = (key << 40) | np.clip(pos - self.base, 0, self.SPAN)
        if not ordered:
            order = np.lexsort((line, combined))
        elif (np.diff(combined) >= 0).all():
            order = None
        else:
            by_key = np.argsort(key.astype(np.uint16) if key.max() < 1 << 16 else key,
                                kind="stable")
            order = by_key[np.argsort(combined[by_key], kind="stable")]
        self.combined = combined if order is None else combined[order]
        self.item = item if order is None else item[order]

    def last_at_or_before(self, key: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """For each (key, pos), the item of the greatest entry with that key at or before
        pos; -1 where none."""
        wanted = (key << 40) + np.clip(pos - self.base, -1, self.SPAN)
        at = np.searchsorted(self.combined, wanted, side="right") - 1
        ok = at >= 0
        ok[ok] = (self.combined[at[ok]] >> 40) == key[ok]
        return np.where(ok, self.item[np.maximum(at, 0)], -1)


class _Placed:
    """Every answering line of the batch with the request it answers: the lines placed now
    (`probe`, `found` in `requests`) and those placed by an earlier `finish` (the lines held
    back from the chunk before: `corr_id` 'L' + a line). `row`: the request's row in `fields`
    (this batch's requests are rows of `lines`, stored ones follow), -1 where none."""

    def __init__(self, con: duckdb.DuckDBPyConnection, lines: _Lines, probe: np.ndarray,
                 requests: _Requests, found: np.ndarray):
        self.lines = lines
        corr_line = _at(requests.line, found)
        if (found < 0).any():  # what nothing places goes with the last request stored
            for view in ("recent_stored_events", "stored_events"):
                before = con.execute(f"SELECT max(line) FROM {view} WHERE kind = 'request'"
                                     ).fetchall()[0][0]
                if before is not None:
                    corr_line[found < 0] = before
                    break
        earlier = np.flatnonzero(lines.placing & ~lines.request & ~lines.unplaced
                                 & (lines.named >= 0))
        self.answering = np.concatenate([probe, earlier])
        self.corr_line = np.concatenate([corr_line, lines.named[earlier]])
        self.probes = len(probe)
        self.requests, self.found = requests, found
        # the request of each: a row of `lines` where it is in this batch
        in_batch = found >= requests.stored
        self.row = np.full(len(self.answering), -1, dtype=np.int64)
        self.row[:len(probe)][in_batch] = requests.rows[found[in_batch] - requests.stored]
        if len(earlier):
            self.row[len(probe):] = _request_rows(lines, lines.input[earlier],
                                                  lines.named[earlier])
        self.fields = lines.table.select(["event_id", "action", "session", "actor"])
        self.found_stored = False  # stored requests looked up (`_found`)
        self.late: pa.Table | None = None  # or their outcomes, known from the match
        self.written = np.ones(len(self.answering), dtype=bool)  # the lines to write

    def exact(self, con: duckdb.DuckDBPyConnection) -> bool:
        """Whether writing the match gives what the join by `corr_id` gives: each request
        of the batch answered by one response at most, each stored one found once. Looks
        the stored ones up (`_found`, as `_join_by_id` does) and points `row` at them."""
        response = self.lines.response[self.answering]
        answered = self.row[response & (self.row >= 0)]
        if len(answered) and np.bincount(answered).max() > 1:
            return False
        # a line held back from the chunk before whose request was written then has what
        # the join gives it, and its request's outcome was written with it or recorded late
        # then (as in `_join_by_id`): neither is looked up nor written again
        held = np.arange(len(self.answering)) >= self.probes
        self.written &= ~(held & (self.row < 0))
        orphans = (self.row < 0) & (self.corr_line >= 0) & ~held
        if not orphans.any() or self._stored_known(orphans):
            return True
        asked = pa.table({"line": numpy_arrow(np.unique(self.corr_line[orphans]))})
        with registered(con, "_asked", asked):
            con.execute("CREATE OR REPLACE TEMP TABLE _orphans AS SELECT 'L' || line AS corr_id "
                        "FROM _asked")
        _find_requests(con)
        self.found_stored = True
        stored = con.sql("SELECT event_id, CAST(corr_id[2:] AS BIGINT) AS line, action, "
                         "session, actor FROM _found").to_arrow_table()
        where: dict[tuple[int, int], int] = {}
        for i, key in enumerate(zip((arrow_numpy(stored["event_id"]) >> 32).tolist(),
                                    arrow_numpy(stored["line"]).tolist(), strict=True)):
            if where.setdefault(key, self.fields.num_rows + i) != self.fields.num_rows + i:
                return False  # a stored request found twice: the join picks one
        rows = np.flatnonzero(orphans)
        inputs = self.lines.input[self.answering[rows]]
        self.row[rows] = [where.get(key, -1) for key in zip(
            inputs.tolist(), self.corr_line[rows].tolist(), strict=True)]
        self.fields = pa.concat_tables([self.fields, stored.select(self.fields.column_names)])
        return True

    def _stored_known(self, orphans: np.ndarray) -> bool:
        """Whether the stored requests the lines `orphans` (placed now) answer are known
        without the look-up by `corr_id`: they were read with the stored requests; and each
        answered by one response at most. Then `row` points at them and `late` has their
        outcomes, as `_late_outcomes` would find them."""
        n, requests = self.probes, self.requests
        matched = self.found[orphans[:n]]
        if (matched < 0).any():  # placed with the last request stored: looked up
            return False
        stored = requests.stored_table
        if len(matched) and not pc.all(stored["named"].take(numpy_arrow(matched))).as_py():
            return False  # a stored request without a corr_id: the look-up misses it
        target = np.full(len(self.answering), -1, dtype=np.int64)
        target[:n][orphans[:n]] = requests.event_id[matched]
        response = np.flatnonzero(self.lines.response[self.answering] & (target >= 0))
        if len(np.unique(target[response])) < len(response):
            return False  # a stored request answered twice: `any_value` picks
        if len(matched):
            self.row[np.flatnonzero(orphans[:n])] = self.fields.num_rows + matched
            self.fields = pa.concat_tables([self.fields,
                                            stored.select(self.fields.column_names)])
        self.late = self.lines.table.select(["ok", "error", "latency_ms"]).take(
            numpy_arrow(self.answering[response])).add_column(
                0, "event_id", numpy_arrow(target[response]))
        return True

    def write_corr_ids(self, con: duckdb.DuckDBPyConnection) -> None:
        """Only `corr_id`: each request's own ('L' + line), and each line placed now its
        request's (with no process left in `parent_id`), for `_join_by_id` to join."""
        con.execute("UPDATE batch SET corr_id = 'L' || line WHERE corr_id IS NULL "
                    "AND kind = 'request'")
        with registered(con, "_answer", self._answers()):
            con.execute("UPDATE batch SET corr_id = 'L' || a.corr_line, parent_id = NULL "
                        "FROM _answer a WHERE batch.event_id = a.event_id")

    def finished(self, con: duckdb.DuckDBPyConnection, table: pa.Table) -> pa.Table:
        """The batch (`table`, every column of `batch`) with each answering line's `corr_id`
        and its request's fields, and each request's own `corr_id` and its response's
        outcome, as the UPDATEs of `batch` by event id wrote them (UPDATEs of text columns
        cost most of placing); the outcomes of stored requests answered here go to
        `late_outcomes`."""
        if table.num_rows != self.lines.table.num_rows:
            raise RuntimeError("placing finished other rows than it read")
        written = np.flatnonzero(self.written)
        lines, row = self.lines, self.row[written]
        answering = self.answering[written]
        joined = row >= 0
        # the requests: without a corr_id yet, or answered here (by one response)
        response = lines.response[answering] & joined & (row < lines.table.num_rows)
        answered_by = np.full(lines.table.num_rows, -1, dtype=np.int64)
        answered_by[row[response]] = answering[response]
        rows = np.flatnonzero((lines.request & lines.unplaced) | (answered_by >= 0))
        by = answered_by[rows]
        asked, at = rows, answering  # a row of `lines` is the row of `table` (`_lines_of`)
        table = _set(table, "corr_id", np.concatenate([at, asked]), _line_names(
            np.concatenate([self.corr_line[written], lines.line[rows]])))
        table = _set(table, "parent_id", at, pa.nulls(len(at)))
        # a response's request fields: `fields` is the batch's rows (these columns are not
        # set yet), then the stored requests', so one take of each column picks them
        to, source = at[joined], row[joined]
        actorless = ~arrow_numpy(table["actor"].is_valid())[to]
        table = _set(table, "answers", to,
                     numpy_arrow(arrow_numpy(self.fields["event_id"])[source]))
        table = _picked(table, "action", self.fields["action"], to, source)
        table = _picked(table, "session", self.fields["session"], to, source)
        table = _picked(table, "actor", self.fields["actor"], to[actorless], source[actorless])
        for c in ("ok", "error", "latency_ms"):  # a request's outcome: its response's
            table = _picked(table, c, table[c], asked[by >= 0], by[by >= 0])
        if self.found_stored:
            _late_outcomes(con, table)
        elif self.late is not None and self.late.num_rows:
            insert_arrow(con, "late_outcomes", self.late)
        return table

    def _answers(self) -> pa.Table:
        """Each line placed now (the probes): its event id and its request's line."""
        corr_line = self.corr_line[:self.probes]
        return pa.table({"event_id": numpy_arrow(self.lines.event_id[self.answering[:self.probes]]),
                         "corr_line": numpy_arrow(corr_line, mask=corr_line < 0)})


def _set(table: pa.Table, name: str, at: np.ndarray, values: pa.Array | pa.ChunkedArray
         ) -> pa.Table:
    """`table` with its column `name` at rows `at` set to `values` (one take, not a
    comparison per row)."""
    column = table[name]
    new = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
    merged = pa.chunked_array(column.chunks + [v.cast(column.type) for v in new], column.type)
    return _picked(table, name, merged, at, table.num_rows + np.arange(len(at)))


def _picked(table: pa.Table, name: str, column: pa.ChunkedArray, at: np.ndarray,
            rows: np.ndarray) -> pa.Table:
    """`table` with its column `name` made of `column` (the column itself, or with rows
    after it): its own rows, but `rows` at `at`, in one take (taking the values out first
    and then putting them in, as `_set` must, is two)."""
    if not len(at):
        return table
    pick = np.arange(table.num_rows)
    pick[at] = rows
    i = table.schema.get_field_index(name)
    return table.set_column(i, table.schema.field(i), column.take(numpy_arrow(pick)))


def _line_names(line: np.ndarray) -> pa.Array:
    """'L' + each line (the `corr_id` placing gives), NULL where it is negative."""
    digits = numpy_arrow(line, mask=line < 0).cast(pa.string())
    prefix, none = (strings_arrow([v])[0].cast(pa.string()) for v in ("L", ""))
    return pc.binary_join_element_wise(prefix, digits, none)


def _request_rows(lines: _Lines, inputs: np.ndarray, line: np.ndarray) -> np.ndarray:
    """The rows of `lines` of the requests at (`inputs`, `line`), -1 where there is none."""
    rows = np.flatnonzero(lines.request)
    if not len(rows):
        return np.full(len(line), -1, dtype=np.int64)
    key = (lines.input[rows] << 32) | lines.line[rows]
    if not (np.diff(key) > 0).all():
        order = np.argsort(key, kind="stable")
        key, rows = key[order], rows[order]
    wanted = (inputs << 32) | line
    at = np.minimum(np.searchsorted(key, wanted), len(key) - 1)
    return np.where(key[at] == wanted, rows[at], -1)


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
    finish_rows=finish_rows,
    finish_columns=frozenset({
        "event_id", "line", "ts", "kind", "corr_id", "parent_id", "actor", "session",
        "action", "answers", "ok", "error", "latency_ms"}),
    priority=10,
    profile=PROFILE,
    groupable=True,
)

"""What the formats of coding-agent transcripts (`claude-code`, `codex`) share.

An agent's tool call and its result are two lines of the transcript (the result usually the
next line, sometimes after hundreds of a subagent's lines, sometimes in a later ingest run).
Each call is one `tool_call` event that carries its outcome, so `finish` joins every result
line (kind `response`, `corr_id` = the call's id) to its call: a call in the same batch gets
the result's text, key, outcome and the time it took; a call written in an earlier batch or
run gets its outcome in `late_outcomes` (written events are never rewritten), and its result
text stays on the result's line. The result line names its call (`answers`) and its action.

A run that continues a file (new lines appended since the last ingest) sometimes needs to know
what the lines just before it said, and the narrow index of stored events does not hold it
(the message id of a tool call's response, the model a Codex turn ran on): `records_before`
reads the last lines before the run's first byte, once per run.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

from ..lines import compression_of
from ..normalise import key_sql

RESULT_BYTES = 4096  # the `result` column holds the first 4 KiB of a tool's result
ERROR_CHARS = 300  # an error value is one line, at most this long
PRIOR_BYTES = 1024 * 1024  # how far back `records_before` looks


def first_line_sql(expr: str) -> str:
    """SQL: the first non-blank line of `expr`, trimmed, at most ERROR_CHARS characters."""
    return (f"left(trim(regexp_extract(ltrim(replace({expr}, chr(13), ''), chr(10) || ' '), "
            f"'^[^\\n]*')), {ERROR_CHARS})")


def clip_sql(expr: str) -> str:
    """SQL: the first RESULT_BYTES characters of `expr`."""
    return f"left({expr}, {RESULT_BYTES})"


def run_started(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    """True the first time a format asks during this read of a file (its chunks share one
    connection): what is worked out once per run is kept in the table `name`."""
    exists = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ? "
                         "AND temporary", [name]).fetchall()[0][0]
    return not exists


def first_offset(con: duckdb.DuckDBPyConnection) -> int:
    """The byte offset of the first line of the batch (at a run's first finish: where the
    run started reading)."""
    value = con.execute("SELECT min(byte_offset) FROM batch").fetchall()[0][0]
    return int(value or 0)


def records_before(path: Path, offset: int, window: int = PRIOR_BYTES) -> list[dict]:
    """The JSON objects on the complete lines within `window` bytes before `offset`: what a
    run that starts at `offset` continues. Empty at the start of a file and for compressed
    files (whose offsets count in the decompressed stream: a file appended to is not one)."""
    if offset <= 0 or compression_of(path) is not None:
        return []
    start = max(0, offset - window)
    try:
        with open(path, "rb") as fh:
            fh.seek(start)
            data = fh.read(offset - start)
    except OSError:
        return []
    lines = data.split(b"\n")
    if start > 0:
        lines = lines[1:]  # the window began inside a line
    out = []
    for raw in lines:
        try:
            value = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError):
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


def pair_tool_results(con: duckdb.DuckDBPyConnection) -> None:
    """Join result lines (kind `response`, `corr_id` = the call id) to their tool calls.

    Runs on every chunk, held-back lines included, so it is idempotent: a result already
    joined (`answers` set) is not looked for again."""
    con.execute(f"""
      UPDATE batch SET result = r.result, result_key = {key_sql('r.result')}, ok = r.ok,
             error = r.error,
             latency_ms = CAST(epoch_ms(r.ts) - epoch_ms(batch.ts) AS DOUBLE)
      FROM (SELECT corr_id, arg_min(result, line) AS result, arg_min(ok, line) AS ok,
                   arg_min(error, line) AS error, min(ts) AS ts
            FROM batch WHERE kind = 'response' AND corr_id IS NOT NULL GROUP BY corr_id) r
      WHERE batch.kind = 'tool_call' AND batch.corr_id = r.corr_id;
      UPDATE batch SET answers = c.event_id, action = coalesce(batch.action, c.action)
      FROM (SELECT corr_id, min(event_id) AS event_id, arg_min(action, event_id) AS action
            FROM batch WHERE kind = 'tool_call' AND corr_id IS NOT NULL GROUP BY corr_id) c
      WHERE batch.kind = 'response' AND batch.answers IS NULL AND batch.corr_id = c.corr_id;
      CREATE OR REPLACE TEMP TABLE _orphans AS
        SELECT DISTINCT corr_id FROM batch
        WHERE kind = 'response' AND answers IS NULL AND corr_id IS NOT NULL;
    """)
    if not con.execute("SELECT count(*) FROM _orphans").fetchall()[0][0]:
        return
    # calls written before this batch: looked for in the file's newest batches first (where
    # they almost always are), in all of them only for those still missing
    found = """SELECT s.event_id, s.corr_id, s.action, s.ts
               FROM {view} s SEMI JOIN _orphans o ON s.corr_id = o.corr_id
               WHERE s.kind = 'tool_call'"""
    con.execute(f"CREATE OR REPLACE TEMP TABLE _found AS {found.format(view='recent_stored_events')}")
    if con.execute("SELECT count(*) FROM (SELECT corr_id FROM _orphans "
                   "EXCEPT SELECT corr_id FROM _found)").fetchall()[0][0]:
        con.execute(f"""INSERT INTO _found {found.format(view='stored_events')}
                        AND s.corr_id NOT IN (SELECT corr_id FROM _found)""")
    con.execute("""
      CREATE OR REPLACE TEMP TABLE _found AS
        SELECT corr_id, min(event_id) AS event_id, arg_min(action, event_id) AS action,
               arg_min(ts, event_id) AS ts
        FROM _found GROUP BY corr_id;
      INSERT INTO late_outcomes
        SELECT f.event_id, arg_min(r.ok, r.line), arg_min(r.error, r.line),
               CAST(epoch_ms(min(r.ts)) - epoch_ms(any_value(f.ts)) AS DOUBLE)
        FROM _found f JOIN batch r ON r.corr_id = f.corr_id AND r.kind = 'response'
             AND r.answers IS NULL
        GROUP BY f.event_id;
      UPDATE batch SET answers = f.event_id, action = coalesce(batch.action, f.action)
      FROM _found f
      WHERE batch.kind = 'response' AND batch.answers IS NULL AND batch.corr_id = f.corr_id;
    """)

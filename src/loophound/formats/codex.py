"""Codex CLI rollout files: `~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl`, one
JSON object per line, written by Codex's rollout recorder as the session goes.

Sources for the shape: openai/codex (`codex-rs/protocol/src/models.rs`: `ResponseItem`,
`FunctionCallOutputPayload`; `codex-rs/core/src/tools/mod.rs`: how a command's output and exit
code are written back, `format_exec_output_for_model_structured` / `_freeform`), real rollout
heads in public fixtures (simonw/claude-code-transcripts `tests/sample_codex_session.jsonl`,
Apache-2.0, copied into tests/data/codex/ with its notice; jnarowski/agentcmd's format notes),
and, for `token_count` lines re-emitted with unchanged totals, ccusage #1288 and tokscale #300.

A line is `{"timestamp", "type", "payload"}`; `type` is `session_meta` (the first line: session
id, cwd, cli_version, originator, source), `turn_context` (per turn: cwd, approval and sandbox
policy, model), `response_item` (what the model saw and said: `message`, `reasoning`,
`function_call` {name, arguments, call_id}, `function_call_output` {call_id, output},
`custom_tool_call` / `_output` (apply_patch), `local_shell_call`, `web_search_call`),
`event_msg` (what the UI showed: `user_message`, `agent_message`, `token_count`, ...) or
`compacted`. Older rollouts have no wrapper: the first line is the session meta itself
(`{"id", "timestamp", "instructions"}`), then bare response items, then `{"record_type":
"state"}` lines; their items have no time.

Columns:
- the session meta applies to every line of the file: session = its `id`, `cwd` in every
  line's `extra`, actor = `codex` (`codex-<kind>` when its `source` names a subagent: a
  review, a thread spawned by another agent). The first line is kind `session_start`.
- `function_call`, `custom_tool_call`, `local_shell_call`, `web_search_call` ⇒ kind
  `tool_call`: action = the function's `name` (`shell`, `shell_command`, `exec_command`,
  `apply_patch`, an MCP tool; `local_shell`, `web_search`), args = its `arguments` (JSON
  text; a custom tool's free-form input as a JSON string), corr_id = `call_id`; `finish` joins
  the output (result, ok, error, latency_ms).
- `function_call_output`, `custom_tool_call_output` ⇒ kind `response`, corr_id = `call_id`.
  Its exit code is read from the three shapes Codex writes (`{"output", "metadata":
  {"exit_code"}}`, `Exit code: N` … `Output:`, and `Process exited with code N` … `Output:`):
  zero is ok, non-zero is error `Exit code N`; an output object with `success: false` is an
  error too (its first line). result = the command's output without Codex's header, first
  4 KiB. A tool whose output states no outcome (an MCP tool, a command still running) has ok
  NULL.
- `message` with role `user` or `assistant` ⇒ kind `message` between `user` and the agent
  (`extra.text`: its first text); developer and system messages, `reasoning`, the
  `event_msg` copies of messages and every other line ⇒ `record`; `turn_context` ⇒ `config`
  with its `model`; `event_msg` `error` ⇒ `record` with error = its message's first line; a
  `task_complete` whose turn ended in error (`error.message`) ⇒ `record` with that error.
- `event_msg` `token_count` with usage ⇒ kind `llm_call`: tokens_in = `input_tokens` −
  `cached_input_tokens` of `last_token_usage`, tokens_cache_read = `cached_input_tokens`,
  tokens_out = `output_tokens` (reasoning included); corr_id = `total:<total_tokens>` of the
  running total. Codex re-emits the same count (a UI refresh, not a model call): a line
  whose running total was already seen (in this run or the file's newest stored batches) is a
  `record` without tokens. model = that of the turn (the last `turn_context` before the line;
  before any, the first one of the file), also on tool calls and the agent's messages.
- extra: `cwd`, then the payload without its large fields (content, output, arguments,
  input, instructions, encrypted_content).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb

from ._agents import (
    clip_sql,
    first_line_sql,
    first_offset,
    pair_tool_results,
    records_before,
    run_started,
)
from .base import Format, FormatContext, FormatProfile, iso_to_ts, sql_str, struct_spec
from .generic import head_records

AGENT = "codex"
OUTER = frozenset({"session_meta", "turn_context", "response_item", "event_msg", "compacted"})
ITEMS = frozenset({"message", "reasoning", "function_call", "function_call_output",
                   "custom_tool_call", "custom_tool_call_output", "local_shell_call",
                   "web_search_call", "ghost_snapshot", "compaction"})
CALLS = ("function_call", "custom_tool_call", "local_shell_call", "web_search_call")
OUTPUTS = ("function_call_output", "custom_tool_call_output")
FIELDS = {"timestamp": "VARCHAR", "type": "VARCHAR", "payload": "JSON", "id": "JSON",
          "record_type": "JSON"}
# The top-level keys of the older, unwrapped rollouts: all read through the payload (`p`).
LEGACY = frozenset({"id", "instructions", "git", "record_type", "role", "content", "name",
                    "arguments", "call_id", "output", "summary", "encrypted_content", "status",
                    "action", "input"})
# Payload fields too large for `extra` (their text is in args, result or extra.text).
HEAVY = ("content", "output", "arguments", "input", "instructions", "base_instructions",
         "user_instructions", "developer_instructions", "encrypted_content")


def is_rollout_line(record: dict) -> bool:
    """A line of a wrapped rollout, of a known type or of one a newer Codex added: the
    `{"timestamp", "type", "payload"}` wrapper."""
    return (isinstance(record.get("type"), str) and isinstance(record.get("payload"), dict)
            and (record["type"] in OUTER or isinstance(record.get("timestamp"), str)))


def sniff(records: list[dict], path: Path) -> bool:
    wrapped = sum(1 for r in records if is_rollout_line(r))
    known = any(r.get("type") in OUTER and isinstance(r.get("payload"), dict) for r in records)
    if known and wrapped * 2 > len(records):
        return True
    # an older rollout: the session meta (no type), then bare response items
    first = records[0] if records else {}
    return (path.name.startswith("rollout-") and "id" in first and "type" not in first
            and any(r.get("type") in ITEMS for r in records[1:]))


def session_meta(records: list[dict]) -> dict[str, Any]:
    """The session meta of a rollout (its payload), from its first records."""
    for r in records:
        if r.get("type") == "session_meta" and isinstance(r.get("payload"), dict):
            return r["payload"]
        if "type" not in r and "id" in r and "payload" not in r:  # an older rollout
            return r
    return {}


def agent_name(meta: dict[str, Any]) -> str:
    """`codex`, or `codex-<kind>` for a subagent's rollout (`source: {"subagent": ...}`)."""
    source = meta.get("source")
    if isinstance(source, dict) and "subagent" in source:
        kind = source["subagent"]
        if isinstance(kind, dict) and kind:
            kind = next(iter(kind))
        return f"{AGENT}-{kind}" if isinstance(kind, str) and kind else f"{AGENT}-subagent"
    return AGENT


def first_model(records: list[dict]) -> str | None:
    """The model of the first turn of a rollout (or its session meta's, when it states one)."""
    for r in records:
        p = r.get("payload")
        if r.get("type") == "turn_context" and isinstance(p, dict) and isinstance(p.get("model"), str):
            return p["model"]
    model = session_meta(records).get("model")
    return model if isinstance(model, str) else None


def _text_items(expr: str) -> str:
    """SQL: the texts of a list of content items, joined by newlines."""
    return (f"array_to_string(list_transform(json_extract({expr}, '$[*]'), "
            f"lambda c: c->>'$.text'), chr(10))")


# a turn that ended in error: `task_complete` with `error` {message, codex_error_info} (or text)
_TASK_ERROR = ("CASE json_type(p, '$.error') WHEN 'OBJECT' THEN p->>'$.error.message' "
               "ELSE p->>'$.error' END")


def select_sql(ctx: FormatContext) -> str:
    head = head_records(ctx.path)
    meta = session_meta(head)
    session = meta.get("id") if isinstance(meta.get("id"), str) else None
    cwd = meta.get("cwd") if isinstance(meta.get("cwd"), str) else None
    agent = sql_str(agent_name(meta))
    session_sql = sql_str(session) if session else "CAST(NULL AS VARCHAR)"
    heavy = sql_str(json.dumps({k: None for k in HEAVY + ("type",)}))
    start = sql_str(json.dumps({"cwd": cwd}) if cwd else "{}")
    last = "p->'$.info.last_token_usage'"
    exit_json = ("CASE WHEN ot = 'VARCHAR' AND json_valid(s) "
                 "THEN json_extract_string(s, '$.metadata.exit_code') END")
    header_code = "'^(?:[^\\n]*\\n){0,4}?Process exited with code (-?[0-9]+)'"
    out_at = "position(chr(10) || 'Output:' || chr(10) IN s)"
    return f"""
    WITH parsed AS (
      SELECT line, byte_offset, byte_length, text,
             from_json(text, {struct_spec(FIELDS)}) AS r
      FROM raw
    ), shaped AS (
      SELECT *, coalesce(r.payload, CAST(text AS JSON)) AS p,
        CASE WHEN r.payload IS NOT NULL THEN r.type
             WHEN r.record_type IS NOT NULL THEN 'state'
             WHEN r.type IS NULL AND r.id IS NOT NULL THEN 'session_meta'
             ELSE 'response_item' END AS outer_type
      FROM parsed
    ), typed AS (
      SELECT *, p->>'$.type' AS pt, p->>'$.role' AS prole, p->'$.output' AS o,
        json_type(p, '$.output') AS ot
      FROM shaped
    ), kinded AS (
      SELECT *,
        CASE outer_type
          WHEN 'session_meta' THEN 'session_start'
          WHEN 'turn_context' THEN 'config'
          WHEN 'response_item' THEN CASE
            WHEN pt = 'message' AND prole IN ('user', 'assistant') THEN 'message'
            WHEN pt IN {CALLS} THEN 'tool_call'
            WHEN pt IN {OUTPUTS} THEN 'response'
            ELSE 'record' END
          WHEN 'event_msg' THEN CASE
            WHEN pt = 'token_count' AND json_type(p, '$.info') = 'OBJECT' THEN 'llm_call'
            ELSE 'record' END
          ELSE 'record' END AS k,
        CASE ot WHEN 'VARCHAR' THEN o->>'$' WHEN 'OBJECT' THEN o->>'$.content'
                WHEN 'ARRAY' THEN {_text_items('o')} END AS s,
        CASE WHEN ot = 'OBJECT' THEN TRY_CAST(o->>'$.success' AS BOOLEAN) END AS success
      FROM typed
    ), coded AS (
      SELECT *, coalesce(
          TRY_CAST({exit_json} AS INTEGER),
          TRY_CAST(nullif(regexp_extract(s, '^Exit code: (-?[0-9]+)', 1), '') AS INTEGER),
          TRY_CAST(nullif(regexp_extract(s, {header_code}, 1), '') AS INTEGER)) AS code
      FROM kinded
    ), bodied AS (
      SELECT *, coalesce(
          CASE WHEN ot = 'VARCHAR' AND json_valid(s) THEN json_extract_string(s, '$.output') END,
          CASE WHEN code IS NOT NULL AND {out_at} > 0 THEN substr(s, {out_at} + 9) END,
          s) AS body
      FROM coded
    )
    SELECT line, byte_offset, byte_length, text,
      {iso_to_ts('r.timestamp')} AS ts,
      k AS kind, coalesce(pt, outer_type) AS event_type,
      CASE WHEN k = 'message' AND prole = 'user' THEN 'user' ELSE {agent} END AS actor,
      CASE WHEN k = 'message' THEN CASE WHEN prole = 'user' THEN {agent} ELSE 'user' END
           END AS target,
      {session_sql} AS session,
      CASE WHEN k = 'tool_call' THEN CASE pt WHEN 'local_shell_call' THEN 'local_shell'
           WHEN 'web_search_call' THEN 'web_search' ELSE p->>'$.name' END END AS action,
      CASE WHEN k = 'tool_call' THEN CASE
           WHEN pt = 'function_call' AND json_type(p, '$.arguments') = 'VARCHAR' THEN p->>'$.arguments'
           WHEN pt = 'function_call' THEN CAST(p->'$.arguments' AS VARCHAR)
           WHEN pt = 'custom_tool_call' THEN CAST(p->'$.input' AS VARCHAR)
           ELSE CAST(p->'$.action' AS VARCHAR) END END AS args,
      CASE WHEN k = 'response' THEN {clip_sql('body')} END AS result,
      CASE WHEN k = 'response' THEN CASE WHEN code IS NOT NULL THEN code = 0 ELSE success END
           END AS ok,
      CASE WHEN k = 'response' AND code <> 0 THEN 'Exit code ' || code
           WHEN k = 'response' AND success = false
             THEN coalesce(nullif({first_line_sql('body')}, ''), 'error')
           WHEN outer_type = 'event_msg' AND pt IN ('error', 'stream_error')
             THEN coalesce(nullif({first_line_sql("p->>'$.message'")}, ''), pt)
           WHEN outer_type = 'event_msg' AND pt = 'task_complete'
                AND json_type(p, '$.error') IN ('OBJECT', 'VARCHAR')
             THEN coalesce(nullif({first_line_sql(_TASK_ERROR)}, ''), 'error') END AS error,
      CASE WHEN k = 'message' THEN prole END AS role,
      CASE WHEN k IN ('tool_call', 'response') THEN p->>'$.call_id'
           WHEN k = 'llm_call' THEN 'total:' || (p->>'$.info.total_token_usage.total_tokens')
           END AS corr_id,
      CASE WHEN outer_type IN ('turn_context', 'session_meta') THEN p->>'$.model' END AS model,
      CASE WHEN k = 'llm_call' THEN TRY_CAST({last}->>'$.input_tokens' AS BIGINT)
           - coalesce(TRY_CAST({last}->>'$.cached_input_tokens' AS BIGINT), 0) END AS tokens_in,
      CASE WHEN k = 'llm_call' THEN TRY_CAST({last}->>'$.output_tokens' AS BIGINT) END AS tokens_out,
      CASE WHEN k = 'llm_call' THEN TRY_CAST({last}->>'$.cached_input_tokens' AS BIGINT)
           END AS tokens_cache_read,
      nullif(CAST(json_merge_patch({start},
        CASE WHEN json_type(p) = 'OBJECT' THEN json_merge_patch(p, {heavy}) ELSE '{{}}' END,
        CASE WHEN k = 'message' THEN json_object('text',
          {clip_sql(_text_items("p->'$.content'"))}) ELSE '{{}}' END) AS VARCHAR), '{{}}') AS extra
    FROM bodied
    """


def finish(con: duckdb.DuckDBPyConnection, ctx: FormatContext) -> None:
    _count_usage_once(con)
    _turn_models(con, ctx)
    pair_tool_results(con)


def _turn_models(con: duckdb.DuckDBPyConnection, ctx: FormatContext) -> None:
    """The model of each line's turn: the last `turn_context` before it, in this batch, else
    before the batch (`_cx_model`, carried from chunk to chunk; at the start of a run, from
    the lines just before it, else the file's first turn)."""
    if run_started(con, "_cx_model"):
        before = [r.get("payload") for r in records_before(ctx.path, first_offset(con))
                  if r.get("type") == "turn_context"]
        models = [p["model"] for p in before if isinstance(p, dict) and isinstance(p.get("model"), str)]
        model = models[-1] if models else first_model(head_records(ctx.path))
        con.execute("CREATE TEMP TABLE _cx_model (model VARCHAR)")
        con.execute("INSERT INTO _cx_model VALUES (?)", [model])
    con.execute("""
      UPDATE batch SET model = coalesce(m.model, (SELECT model FROM _cx_model))
      FROM (SELECT line, last_value(CASE WHEN event_type = 'turn_context' THEN model END
                                    IGNORE NULLS) OVER (ORDER BY line) AS model
            FROM batch) m
      WHERE batch.line = m.line AND batch.model IS NULL
        AND (batch.kind IN ('llm_call', 'tool_call')
             OR (batch.kind = 'message' AND batch.role = 'assistant'));
      UPDATE _cx_model SET model = coalesce(
        (SELECT arg_max(model, line) FROM batch WHERE event_type = 'turn_context'
           AND model IS NOT NULL), model);
    """)


def _count_usage_once(con: duckdb.DuckDBPyConnection) -> None:
    """A `token_count` whose running total was seen before is a re-emit: a `record` without
    tokens. The first line of each total stays a `llm_call`."""
    con.execute("""
      CREATE OR REPLACE TEMP TABLE _cx_again AS
        SELECT line FROM (
          SELECT line, corr_id, row_number() OVER (PARTITION BY corr_id ORDER BY line) AS n
          FROM batch WHERE kind = 'llm_call' AND corr_id IS NOT NULL) b
        WHERE n > 1 OR corr_id IN (SELECT corr_id FROM recent_stored_events
                                   WHERE kind = 'llm_call' AND corr_id IS NOT NULL);
      UPDATE batch SET kind = 'record', tokens_in = NULL, tokens_out = NULL,
                       tokens_cache_read = NULL, tokens_cache_write = NULL
      WHERE line IN (SELECT line FROM _cx_again);
    """)


# What detectors may know: a message's text is `extra.text` (repeated_message compares it).
PROFILE = FormatProfile(text_key="text")


# A line's record type, for ingest's count of the types this module does not know: the
# response item's type in a wrapped `response_item` (`response_item/function_call`), the
# wrapper's type otherwise (every `event_msg` is read, as a record when not listed above); an
# older rollout's bare item type, or '' for its meta and state lines.
LINE_TYPE = ("CASE WHEN json_type(text, '$.payload') = 'OBJECT' THEN CASE json_extract_string("
             "text, '$.type') WHEN 'response_item' THEN 'response_item/' || coalesce("
             "json_extract_string(text, '$.payload.type'), '') ELSE json_extract_string(text, "
             "'$.type') END ELSE coalesce(json_extract_string(text, '$.type'), '') END")
KNOWN_TYPES = OUTER | ITEMS | {f"response_item/{i}" for i in ITEMS} | {""}


FORMAT = Format(
    name="codex",
    description="Codex CLI rollout files: function calls joined to their outputs (exit code), "
                "the session meta applied to every line",
    sniff=sniff,
    select_sql=select_sql,
    mapped_keys=frozenset({"timestamp", "type", "payload"}),
    known_keys=LEGACY,
    line_type=LINE_TYPE,
    known_types=KNOWN_TYPES,
    finish=finish,
    priority=30,
    profile=PROFILE,
)

"""Claude Code session transcripts: `~/.claude/projects/<project>/<session>.jsonl`, one JSON
object per line, written by Claude Code as the session goes; subagents' transcripts beside
them (`<session>/subagents/agent-<agentId>.jsonl` since 2.1, `agent-<agentId>.jsonl` in
2.0.24+, inline with `"isSidechain": true` before).

Sources for the shape (there is no official schema): transcripts quoted in public tooling and
its fixtures — daaain/claude-code-log (MIT; `test/test_data/sidechain_integrated.jsonl`, copied
into tests/data/claude-code/ with its notice), simonw/claude-code-transcripts, the format notes
of DRMacIver/claude-reliability (`notes/transcript-format.md`) and Huntehhh/claude-code-chat
(`docs/claude-cli-jsonl-format.md`) — and, for the usage repeated on every content line of a
response, the deduplication fixes of ccusage (#938, #985), tokscale (#358, #563) and
juliantanx/aiusage (#32).

A line is `{"parentUuid", "isSidechain", "userType", "cwd", "sessionId", "version",
"gitBranch", ["agentId",] "type", "message", "uuid", "timestamp", ...}`; `type` is `user`,
`assistant`, `summary`, `system`, `file-history-snapshot` or `queue-operation`. An assistant
response is written one line per content block (thinking, text, tool_use), each line with the
response's `message.id`, model and `usage` (the same input and cache counts; `output_tokens`
grows over the lines as the response streams). A tool's result is a `user` line whose
`message.content` holds a `tool_result` block (`tool_use_id`, `content`, `is_error`).

Columns:
- `assistant` line with a `tool_use` block ⇒ kind `tool_call`: action = the tool name, args =
  its `input` (JSON text; `action_key` leaves out the input's `description`, the model's
  comment on a Bash command, which changes when the command does not), corr_id = the
  tool_use `id`, parent_id = the response's `message.id`; `finish` joins the result
  (result = its text, first 4 KiB; ok = not `is_error`; error = the first line of the text,
  `<tool_use_error>` tags removed; latency_ms = result time − call time).
- `assistant` line with `isApiErrorMessage` (Claude Code's own line for a model call that
  failed: "API Error: Request rejected (429)", model `<synthetic>`) ⇒ kind `llm_call`, ok false,
  error = its `error` and `apiErrorStatus` (`rate_limit 429`): a storm of them is a run of
  one error, as a rate-limited agent retrying is; model NULL (nothing was priced).
- `assistant` line with a `text` block ⇒ kind `message` from the agent to `user` (to `claude`
  in a subagent's transcript: its answer goes to the agent that started it); any other
  assistant line (thinking) ⇒ kind `llm_call`. Both have corr_id = `message.id`.
- `user` line with a `tool_result` block ⇒ kind `response`: corr_id = `tool_use_id`, result,
  ok and error as above, `answers` = the call's event id, action = the call's tool. (A line
  with several tool_result blocks, as some early versions wrote, is read by its first; `extra`
  says how many it held.)
- other `user` lines (a prompt) ⇒ kind `message` from `user` to the agent (in a subagent's
  transcript: from `claude`, the agent whose Task started it); `isMeta` lines ⇒ `record`.
- `summary`, `system`, `file-history-snapshot`, `queue-operation` ⇒ kind `record`.
- actor = the agent: `claude` in the main session, `agent-<agentId>` on sidechain lines
  (`sidechain` on the inline sidechain lines of versions before 2.0.24 that name no agent:
  there only some lines, results mostly, carry an agentId). session = `sessionId` (a
  subagent's lines carry its parent session's id). role = `message.role`. model =
  `message.model`. parent_id (other than tool calls) = `parentUuid`.
- tokens: a response's `usage` is counted once, on the first line of its `message.id`:
  tokens_in = `input_tokens`, tokens_out = the largest `output_tokens` of its lines (later
  lines carry the final count), tokens_cache_read = `cache_read_input_tokens`,
  tokens_cache_write = `cache_creation_input_tokens`. Lines of a response already counted in
  an earlier run of the same file are found by reading the lines just before the run.
- extra: the documented top-level keys (cwd, gitBranch, version, agentId, parentUuid, ...),
  plus `message_id` on assistant lines and `text` (first 4 KiB) on message lines.

Not read: a transcript copied into a new session file on resume holds the old responses again
(counted again, in that file); `toolUseResult` (the structured twin of the tool_result text).
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from ..normalise import key_sql
from ._agents import (
    clip_sql,
    first_line_sql,
    first_offset,
    pair_tool_results,
    records_before,
    run_started,
)
from .base import (
    Format,
    FormatContext,
    FormatProfile,
    iso_to_ts,
    json_fields,
    sql_str,
    struct_spec,
)

MAIN_AGENT = "claude"  # the actor of a main session's lines
TYPES = frozenset({"user", "assistant", "summary", "system", "file-history-snapshot",
                   "queue-operation"})
FIELDS = {"type": "VARCHAR", "timestamp": "VARCHAR", "sessionId": "VARCHAR", "uuid": "VARCHAR",
          "message": "JSON"}
MAPPED = frozenset(FIELDS) | {"toolUseResult"}
# Read for columns and kept in `extra` as well (agentId and parentUuid), or kept in `extra` only.
KNOWN = frozenset({
    "parentUuid", "isSidechain", "agentId", "isMeta", "userType", "cwd", "version", "gitBranch",
    "slug", "requestId", "summary", "leafUuid", "subtype", "content", "level", "operation",
    "messageId", "snapshot", "isSnapshotUpdate", "thinkingMetadata", "todos",
    "isApiErrorMessage", "error", "promptId", "entrypoint", "permissionMode",
    "isCompactSummary", "compactMetadata", "logicalParentUuid", "toolUseID",
    "sourceToolAssistantUUID", "sourceToolUseID", "isVisibleInTranscriptOnly", "imagePasteIds",
    "durationMs", "hookInfos", "hookErrors", "preventedContinuation", "stopReason", "hasOutput",
    "mcpMeta", "planContent", "retryInMs", "retryAttempt", "maxRetries", "cause",
    "apiErrorStatus", "attributionAgent", "attachment",
})


def sniff(records: list[dict], path: Path) -> bool:
    typed = [r for r in records if r.get("type") in TYPES]
    session = any(isinstance(r.get("sessionId"), str) and r.get("type") in ("user", "assistant")
                  and isinstance(r.get("message"), dict) for r in records)
    return session and len(typed) * 2 > len(records)


def _extra(extras: dict[str, str]) -> str:
    """SQL: a JSON object of the KNOWN keys present (as the log gives them) and of `extras`
    (name → SQL expression, included when not NULL)."""
    parts = [f"""CASE WHEN r."{k}" IS NOT NULL THEN '"{k}":' || CAST(r."{k}" AS VARCHAR) END"""
             for k in sorted(KNOWN)]
    parts += [f"""CASE WHEN {expr} IS NOT NULL THEN '"{name}":' || CAST(to_json({expr}) AS VARCHAR) END"""
              for name, expr in extras.items()]
    return f"nullif('{{' || concat_ws(',', {', '.join(parts)}) || '}}', '{{}}')"


def _text_of(block: str) -> str:
    """SQL: the text of a tool_result block (a string, or text blocks joined by newlines)."""
    return f"""CASE json_type({block}, '$.content')
      WHEN 'VARCHAR' THEN {block}->>'$.content'
      WHEN 'ARRAY' THEN array_to_string(list_transform(list_filter(
        json_extract({block}, '$.content[*]'), lambda c: c->>'$.type' = 'text'),
        lambda c: c->>'$.text'), chr(10))
      END"""


# What a call does, for telling one call from another (`action_key`): its input without the
# `description` the model writes beside a Bash command ("Commit the fix", "Retry the commit"),
# commentary that changes between two runs of the same command.
_CALL = ("CASE WHEN json_type(tu->'$.input') = 'OBJECT' THEN CAST(json_merge_patch("
         "tu->'$.input', '{\"description\": null}') AS VARCHAR) "
         "ELSE CAST(tu->'$.input' AS VARCHAR) END")


def select_sql(ctx: FormatContext) -> str:
    usage = "r.message->'$.usage'"
    side_reply = f"CASE WHEN side THEN {sql_str(MAIN_AGENT)} ELSE 'user' END"
    error_text = "regexp_replace(rtext, '</?tool_use_error>', '', 'g')"
    return f"""
    WITH parsed AS (
      SELECT line, byte_offset, byte_length, text,
             from_json(text, {struct_spec(FIELDS | json_fields(KNOWN))}) AS r
      FROM raw
    ), shaped AS (
      SELECT *, r.type AS typ, r.message->>'$.id' AS mid,
        json_extract(r.message, '$.content[*]') AS blocks,
        coalesce(r.isSidechain->>'$' = 'true', false) AS side,
        coalesce(r.isApiErrorMessage->>'$' = 'true', false) AS api_error
      FROM parsed
    ), blocked AS (
      SELECT *,
        CASE WHEN side THEN coalesce('agent-' || (r.agentId->>'$'), 'sidechain')
             ELSE {sql_str(MAIN_AGENT)} END AS agent,
        list_filter(blocks, lambda b: b->>'$.type' IN ('tool_use', 'server_tool_use'))[1] AS tu,
        list_filter(blocks, lambda b: b->>'$.type' = 'tool_result') AS trs,
        CASE json_type(r.message, '$.content') WHEN 'VARCHAR' THEN r.message->>'$.content'
             ELSE list_filter(blocks, lambda b: b->>'$.type' = 'text')[1]->>'$.text' END AS txt
      FROM shaped
    ), kinded AS (
      SELECT *, trs[1] AS tr,
        CASE WHEN typ = 'assistant' THEN
               CASE WHEN api_error THEN 'llm_call'
                    WHEN tu IS NOT NULL THEN 'tool_call' WHEN txt IS NOT NULL THEN 'message'
                    ELSE 'llm_call' END
             WHEN typ = 'user' THEN
               CASE WHEN len(trs) > 0 THEN 'response' WHEN r.isMeta->>'$' = 'true' THEN 'record'
                    WHEN txt IS NOT NULL THEN 'message' ELSE 'record' END
             ELSE 'record' END AS k
      FROM blocked
    ), resulted AS (
      SELECT *, {_text_of('tr')} AS rtext, coalesce(tr->>'$.is_error' = 'true', false) AS failed
      FROM kinded
    )
    SELECT line, byte_offset, byte_length, text,
      {iso_to_ts('r.timestamp')} AS ts,
      k AS kind, typ AS event_type,
      CASE WHEN k = 'message' AND typ = 'user' THEN {side_reply} ELSE agent END AS actor,
      CASE WHEN k = 'message' AND typ = 'user' THEN agent
           WHEN k = 'message' THEN {side_reply} END AS target,
      r.sessionId AS session,
      CASE WHEN k = 'tool_call' THEN tu->>'$.name' END AS action,
      CASE WHEN k = 'tool_call' THEN CAST(tu->'$.input' AS VARCHAR) END AS args,
      CASE WHEN k = 'tool_call' THEN {key_sql("tu->>'$.name'", _CALL)} END AS action_key,
      CASE WHEN k = 'response' THEN {clip_sql('rtext')} END AS result,
      CASE WHEN k = 'response' THEN NOT failed WHEN api_error THEN false END AS ok,
      CASE WHEN k = 'response' AND failed
           THEN coalesce(nullif({first_line_sql(error_text)}, ''), 'error')
           WHEN api_error THEN concat_ws(' ', coalesce(r.error->>'$', 'api_error'),
                                         r.apiErrorStatus->>'$') END AS error,
      r.message->>'$.role' AS role,
      CASE k WHEN 'tool_call' THEN tu->>'$.id' WHEN 'response' THEN tr->>'$.tool_use_id'
             WHEN 'llm_call' THEN mid
             WHEN 'message' THEN CASE WHEN typ = 'assistant' THEN mid ELSE r.uuid END
             ELSE r.uuid END AS corr_id,
      CASE WHEN k = 'tool_call' THEN mid ELSE r.parentUuid->>'$' END AS parent_id,
      CASE WHEN typ = 'assistant' THEN nullif(r.message->>'$.model', '<synthetic>') END AS model,
      CASE WHEN typ = 'assistant' THEN TRY_CAST({usage}->>'$.input_tokens' AS BIGINT) END AS tokens_in,
      CASE WHEN typ = 'assistant' THEN TRY_CAST({usage}->>'$.output_tokens' AS BIGINT) END AS tokens_out,
      CASE WHEN typ = 'assistant' THEN TRY_CAST({usage}->>'$.cache_read_input_tokens' AS BIGINT)
           END AS tokens_cache_read,
      CASE WHEN typ = 'assistant' THEN TRY_CAST({usage}->>'$.cache_creation_input_tokens' AS BIGINT)
           END AS tokens_cache_write,
      {_extra({
          "message_id": "CASE WHEN typ = 'assistant' THEN mid END",
          "text": f"CASE WHEN k = 'message' THEN {clip_sql('txt')} END",
          "tool_results": "CASE WHEN len(trs) > 1 THEN len(trs) END",
      })} AS extra
    FROM resulted
    """


# the message id of an assistant line: a tool call's is its parent, the others' their corr_id
_MESSAGE_ID = "CASE WHEN kind = 'tool_call' THEN parent_id ELSE corr_id END"
_TOKENS = ("tokens_in", "tokens_out", "tokens_cache_read", "tokens_cache_write")


def finish(con: duckdb.DuckDBPyConnection, ctx: FormatContext) -> None:
    _count_usage_once(con, ctx)
    pair_tool_results(con)


def _count_usage_once(con: duckdb.DuckDBPyConnection, ctx: FormatContext) -> None:
    """Keep a response's usage on the first of its lines that still has one, with the largest
    output count of those lines; clear it from the others. A line cleared once stays cleared,
    so running again over held-back lines changes nothing. Responses begun before this run
    (the file grew between two ingests) were counted then: their lines are cleared."""
    if run_started(con, "_cc_counted"):
        before = records_before(ctx.path, first_offset(con))
        ids = sorted({r["message"]["id"] for r in before if r.get("type") == "assistant"
                      and isinstance(r.get("message"), dict)
                      and isinstance(r["message"].get("id"), str)})
        con.execute("CREATE TEMP TABLE _cc_counted (mid VARCHAR)")
        if ids:
            con.execute("INSERT INTO _cc_counted SELECT unnest($ids)", {"ids": ids})
    has_usage = " OR ".join(f"{c} IS NOT NULL" for c in _TOKENS)
    nulls = ", ".join(f"{c} = NULL" for c in _TOKENS)
    con.execute(f"""
      CREATE OR REPLACE TEMP TABLE _cc_usage AS
        SELECT line, {_MESSAGE_ID} AS mid FROM batch
        WHERE event_type = 'assistant' AND ({has_usage}) AND {_MESSAGE_ID} IS NOT NULL;
      UPDATE batch SET {nulls}
      WHERE line IN (SELECT line FROM _cc_usage WHERE mid IN (SELECT mid FROM _cc_counted));
      DELETE FROM _cc_usage WHERE mid IN (SELECT mid FROM _cc_counted);
      CREATE OR REPLACE TEMP TABLE _cc_first AS
        SELECT u.mid, min(u.line) AS line, max(b.tokens_out) AS tokens_out
        FROM _cc_usage u JOIN batch b USING (line) GROUP BY u.mid;
      UPDATE batch SET tokens_out = f.tokens_out FROM _cc_first f WHERE batch.line = f.line;
      UPDATE batch SET {nulls}
      WHERE line IN (SELECT line FROM _cc_usage) AND line NOT IN (SELECT line FROM _cc_first);
    """)


# What detectors may know: a message's text is `extra.text` (repeated_message compares it).
PROFILE = FormatProfile(text_key="text")


FORMAT = Format(
    name="claude-code",
    description="Claude Code session transcripts (subagents included): tool calls joined to "
                "their results, usage once per response",
    sniff=sniff,
    select_sql=select_sql,
    mapped_keys=MAPPED,
    known_keys=KNOWN,
    finish=finish,
    priority=30,
    profile=PROFILE,
)

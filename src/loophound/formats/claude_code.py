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
`assistant`, `summary`, `system`, `file-history-snapshot`, `queue-operation` or (2.1+)
`progress`: what a hook (`hook_progress`), a running command (`bash_progress`), a background
task (`waiting_for_task`) or a subagent (`agent_progress`) did while a tool ran, about 70 % of
a 2.1 main session's lines (real sessions of marot/spotter, tests/data/real-agents). An assistant
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
  transcript: from `claude`, the agent whose Task started it); `isMeta` lines, and the summary
  Claude Code writes as the user's line when it compacts the conversation
  (`isCompactSummary`), ⇒ `record`.
- `summary`, `system`, `file-history-snapshot`, `queue-operation` ⇒ kind `record`; a
  `system` line whose `hookErrors` is not empty (a stop hook that failed) has ok false and
  error = the first hook error's first line.
- `progress` ⇒ kind `record` of the main agent, no action, `extra.progress` = `data.type`
  (`extra.hook` = the hook's name), except `agent_progress`: it relays one line of the
  subagent's transcript (`data.message`, with `data.agentId`), read as that line, by
  `agent-<agentId>`, as a sidechain line is (its tool calls, results and usage included);
  `extra.spawned_by` = the `Task` call that started the subagent (`parentToolUseID`).
- a line of a type not listed here (Claude Code adds some in minor releases) is still a line
  of the transcript when it carries a session id and a uuid: kind `record`, its type named,
  with its count, in ingest's warnings (`line_type` / `known_types`).
- the result of a `Task` (`Agent`) call names the subagent it ran: `extra.spawned` =
  `toolUseResult.agentId`.
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
(counted again, in that file); `toolUseResult` (the structured twin of the tool_result text)
but for a subagent's id. A subagent's responses relayed in `agent_progress` lines are counted
in the main session's file; read together with the subagent's own transcript
(`<session>/subagents/agent-<id>.jsonl`) they are counted in both. Cache writes are priced at
one rate: a session that writes its cache with the 1-hour TTL
(`usage.cache_creation.ephemeral_1h_input_tokens`), priced higher, is under-priced.
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
                   "queue-operation", "progress"})
FIELDS = {"type": "VARCHAR", "timestamp": "VARCHAR", "sessionId": "VARCHAR", "uuid": "VARCHAR",
          "message": "JSON", "data": "JSON", "toolUseResult": "JSON"}
MAPPED = frozenset(FIELDS)
# The keys every line of a transcript carries, whatever its type: a line of a type this
# module does not know yet (Claude Code adds some in most minor releases) is still one of its
# lines when it has them, read as a `record` and named in ingest's warnings.
LINE_KEYS = ("sessionId", "uuid", "parentUuid", "timestamp")
# `progress` lines (2.1+: 70 % of a main session) by their `data.type`: what a hook, a
# running command or a subagent did while a tool ran; `agent_progress` relays a subagent's
# own transcript line (`data.message`), read as that subagent's line.
RELAYED = "agent_progress"
SPAWN_TOOLS = ("Task", "Agent")  # the tool calls that start a subagent (renamed in 2.1.x)
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
    "apiErrorStatus", "attributionAgent", "attachment", "parentToolUseID", "hookCount",
})


def is_transcript_line(record: dict) -> bool:
    """A line of a transcript: one of the known types, or a line of any type that carries the
    keys every transcript line has (a session id and a uuid or parent uuid)."""
    kind = record.get("type")
    if kind in TYPES:
        return True
    return (isinstance(kind, str) and isinstance(record.get("sessionId"), str)
            and ("uuid" in record or "parentUuid" in record))


def sniff(records: list[dict], path: Path) -> bool:
    typed = [r for r in records if is_transcript_line(r)]
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


# `extra` beyond the KNOWN keys: name → SQL over the mapper's columns
_EXTRAS = {
    "message_id": "CASE WHEN typ = 'assistant' THEN mid END",
    "text": f"CASE WHEN k = 'message' THEN {clip_sql('txt')} END",
    "tool_results": "CASE WHEN len(trs) > 1 THEN len(trs) END",
    # what a progress line reports (hook_progress, bash_progress, agent_progress, ...)
    "progress": "CASE WHEN r.type = 'progress' THEN r.data->>'$.type' END",
    "hook": "CASE WHEN r.type = 'progress' THEN r.data->>'$.hookName' END",
    # a relayed subagent line: the Task call that started the subagent, and its id
    "spawned_by": "CASE WHEN relay THEN r.parentToolUseID->>'$' END",
    "agentId": "CASE WHEN relay AND r.agentId IS NULL THEN agent_id END",
    # a Task call's result names the subagent it ran (whose actor is agent-<agentId>)
    "spawned": "CASE WHEN k = 'response' THEN r.toolUseResult->>'$.agentId' END",
}


def select_sql(ctx: FormatContext) -> str:
    usage = "msg->'$.usage'"
    side_reply = f"CASE WHEN side THEN {sql_str(MAIN_AGENT)} ELSE 'user' END"
    error_text = "regexp_replace(rtext, '</?tool_use_error>', '', 'g')"
    hook_error = ("CASE json_type(r.hookErrors, '$[0]') WHEN 'VARCHAR' THEN r.hookErrors->>'$[0]' "
                  "ELSE CAST(r.hookErrors->'$[0]' AS VARCHAR) END")
    return f"""
    WITH parsed AS (
      SELECT line, byte_offset, byte_length, text,
             from_json(text, {struct_spec(FIELDS | json_fields(KNOWN))}) AS r
      FROM raw
    ), relayed AS (  -- a subagent's line relayed in a progress line is read as that line
      SELECT *, r.type = 'progress' AND r.data->>'$.type' = {sql_str(RELAYED)}
                AND json_type(r.data, '$.message.message') = 'OBJECT' AS relay
      FROM parsed
    ), shaped AS (
      SELECT *,
        CASE WHEN relay THEN r.data->>'$.message.type' ELSE r.type END AS typ,
        CASE WHEN relay THEN r.data->'$.message.message' ELSE r.message END AS msg,
        CASE WHEN relay THEN r.data->>'$.agentId' ELSE r.agentId->>'$' END AS agent_id,
        CASE WHEN relay THEN coalesce(r.data->>'$.message.uuid', r.uuid) ELSE r.uuid END AS uid,
        CASE WHEN relay THEN coalesce(r.data->>'$.message.timestamp', r.timestamp)
             ELSE r.timestamp END AS stamp,
        relay OR coalesce(r.isSidechain->>'$' = 'true', false) AS side,
        coalesce(r.isApiErrorMessage->>'$' = 'true', false) AS api_error
      FROM relayed
    ), blocked AS (
      SELECT *, msg->>'$.id' AS mid, json_extract(msg, '$.content[*]') AS blocks,
        CASE WHEN side THEN coalesce('agent-' || agent_id, 'sidechain')
             ELSE {sql_str(MAIN_AGENT)} END AS agent
      FROM shaped
    ), contents AS (
      SELECT *,
        list_filter(blocks, lambda b: b->>'$.type' IN ('tool_use', 'server_tool_use'))[1] AS tu,
        list_filter(blocks, lambda b: b->>'$.type' = 'tool_result') AS trs,
        CASE json_type(msg, '$.content') WHEN 'VARCHAR' THEN msg->>'$.content'
             ELSE list_filter(blocks, lambda b: b->>'$.type' = 'text')[1]->>'$.text' END AS txt
      FROM blocked
    ), kinded AS (
      SELECT *, trs[1] AS tr,
        CASE WHEN typ = 'assistant' THEN
               CASE WHEN api_error THEN 'llm_call'
                    WHEN tu IS NOT NULL THEN 'tool_call' WHEN txt IS NOT NULL THEN 'message'
                    ELSE 'llm_call' END
             WHEN typ = 'user' THEN
               CASE WHEN len(trs) > 0 THEN 'response'
                    WHEN r.isMeta->>'$' = 'true' OR r.isCompactSummary->>'$' = 'true' THEN 'record'
                    WHEN txt IS NOT NULL THEN 'message' ELSE 'record' END
             ELSE 'record' END AS k
      FROM contents
    ), resulted AS (
      SELECT *, {_text_of('tr')} AS rtext, coalesce(tr->>'$.is_error' = 'true', false) AS failed,
        nullif({hook_error}, '') AS hook_failed
      FROM kinded
    )
    SELECT line, byte_offset, byte_length, text,
      {iso_to_ts('stamp')} AS ts,
      k AS kind, typ AS event_type,
      CASE WHEN k = 'message' AND typ = 'user' THEN {side_reply} ELSE agent END AS actor,
      CASE WHEN k = 'message' AND typ = 'user' THEN agent
           WHEN k = 'message' THEN {side_reply} END AS target,
      r.sessionId AS session,
      CASE WHEN k = 'tool_call' THEN tu->>'$.name' END AS action,
      CASE WHEN k = 'tool_call' THEN CAST(tu->'$.input' AS VARCHAR) END AS args,
      CASE WHEN k = 'tool_call' THEN {key_sql("tu->>'$.name'", _CALL)} END AS action_key,
      CASE WHEN k = 'response' THEN {clip_sql('rtext')} END AS result,
      CASE WHEN k = 'response' THEN NOT failed WHEN api_error OR hook_failed IS NOT NULL
           THEN false END AS ok,
      CASE WHEN k = 'response' AND failed
           THEN coalesce(nullif({first_line_sql(error_text)}, ''), 'error')
           WHEN api_error THEN concat_ws(' ', coalesce(r.error->>'$', 'api_error'),
                                         r.apiErrorStatus->>'$')
           WHEN hook_failed IS NOT NULL THEN {first_line_sql('hook_failed')} END AS error,
      msg->>'$.role' AS role,
      CASE k WHEN 'tool_call' THEN tu->>'$.id' WHEN 'response' THEN tr->>'$.tool_use_id'
             WHEN 'llm_call' THEN mid
             WHEN 'message' THEN CASE WHEN typ = 'assistant' THEN mid ELSE uid END
             ELSE uid END AS corr_id,
      CASE WHEN k = 'tool_call' THEN mid
           WHEN relay THEN r.data->>'$.message.parentUuid' ELSE r.parentUuid->>'$' END AS parent_id,
      CASE WHEN typ = 'assistant' THEN nullif(msg->>'$.model', '<synthetic>') END AS model,
      CASE WHEN typ = 'assistant' THEN TRY_CAST({usage}->>'$.input_tokens' AS BIGINT) END AS tokens_in,
      CASE WHEN typ = 'assistant' THEN TRY_CAST({usage}->>'$.output_tokens' AS BIGINT) END AS tokens_out,
      CASE WHEN typ = 'assistant' THEN TRY_CAST({usage}->>'$.cache_read_input_tokens' AS BIGINT)
           END AS tokens_cache_read,
      CASE WHEN typ = 'assistant' THEN TRY_CAST({usage}->>'$.cache_creation_input_tokens' AS BIGINT)
           END AS tokens_cache_write,
      {_extra(_EXTRAS)} AS extra
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
    line_type="json_extract_string(text, '$.type')",
    known_types=TYPES,
    finish=finish,
    priority=30,
    profile=PROFILE,
)

"""OpenTelemetry traces as JSON lines (OTLP/JSON), as the Collector's `file` exporter writes
them: one `ExportTraceServiceRequest` per line (`resourceSpans` → `scopeSpans` → `spans`), many
spans of many traces on a line, lines in no particular time order (agent-formats.md §1).

One event per span. A line holds many spans, so the mapper numbers them within their line
(`sub`: 0, 1, ...) and ingest makes the event id from line and number (`sub_bits`); every event
of a line keeps that line's number, and its bytes are a share of the line's (the shares of a
line add up to the line, so sizes and costs per byte stay exact).

What a span is, from its attributes (GenAI semantic conventions in their current and older
names, and those of OpenInference, OpenLLMetry/Traceloop, OpenLIT, Logfire/Pydantic AI, AG2):

- `invoke_agent` (or an AGENT / agent span): kind `request`; target = the invoked agent,
  actor = its caller (`gen_ai.caller.name`, else the nearest ancestor span's agent, else the
  service), action `invoke_agent <agent>`, depth = the agent spans above it;
- `execute_tool` (or a TOOL / tool span, Pydantic AI's `running tool`): kind `tool_call`;
  action and target = the tool, args = its arguments, result = its result (first 4 KiB);
- a handoff (`gen_ai.operation.name` = handoff or the contrib OpenAI Agents
  instrumentation's `agent_handoff`, `gen_ai.transfer.target.name`, `gen_ai.handoff.from_agent`
  / `to_agent`, OpenAI Agents' `from_agent` / `to_agent`, a span named `handoff [from A] to B`
  or OpenLLMetry's `A → B.handoff`): kind `message`, actor = the agent handing off, target =
  the agent it hands to, `extra.handoff` = `span`, `extra.text` = `handoff to B`: an explicit
  agent → agent edge;
- hand-offs no span states (`finish`, `_inferred_handoffs`): a `transfer_to_<agent>` tool call
  followed by that agent's `invoke_agent` span (the OpenAI Agents SDK's handoff tool) is a
  message to it (`extra.handoff` = `transfer_tool`); an agent span with no agent above it
  whose conversation's previous one was another agent's (same trace, or a trace of its own) is
  a message from that agent (`conversation`). A hand-off's channel is its conversation;
- an inference call (`chat`, `text_completion`, `generate_content`, `embeddings`, an LLM
  span, or a span naming a model): kind `llm_call`, target = the provider, model, tokens
  (`tokens_in` without the cached input the conventions count in it: cache reads and writes
  are `tokens_cache_read` / `tokens_cache_write`), and the cost an instrumentation states
  (OpenLIT `gen_ai.usage.cost`, Logfire `operation.cost`, OpenInference `llm.cost.total`).
  Tokens and cost are read on these spans only: agent spans may carry their children's sums;
- anything else: kind `record`, action = the span name.

actor of a span that is not an agent invocation: the agent it names (`gen_ai.agent.name`,
`agent.name`, `agent_name`), else the nearest ancestor agent span's agent, else the service
(`service.name`); `extra.actor_source` says which (`span`, `ancestor`, `service`): an actor
taken from the tree is inferred. session = the conversation (`gen_ai.conversation.id`,
`session.id`, Traceloop's `session_id` association property), else the nearest ancestor's,
else one stated elsewhere in the trace, else the trace id. error = `error.type`, else the
type of the span's `exception` event, else `STATUS_CODE_ERROR` for status code 2; ok = no
error. corr_id = span id, parent_id = parent span id (hex; base64 ids are turned into hex).
ts = start time (nanoseconds, as a string or a number), latency_ms = end − start.

The span tree is resolved over what one read holds in memory (a 32 MiB chunk of lines and the
lines held back with it): a span whose ancestors were exported much later keeps only what it
states itself. The same span delivered twice (trace id + span id; against what is already
stored, span id + start time) becomes one event, in `finish`; a line whose every span was
delivered before (a retried export) so has no event of its own. A line that holds no span (an
export of logs or metrics, an empty export) is quarantined as `unmappable`.

A file that is one pretty-printed JSON document (`{` on its own line) is not read: the line
pipeline maps lines, and each line of such a file is only a piece of the document.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from .base import Format, FormatContext, FormatProfile, epoch_to_ts, sql_str

SUB_BITS = 13  # up to 8,192 spans a line (the Collector's default batch) and 524,287 lines a file
MAX_SPANS = 1 << SUB_BITS
MAX_LINE = (1 << (32 - SUB_BITS)) - 1

_KV = '[{"key": "VARCHAR", "value": "JSON"}]'
STRUCTURE = (
    '{"resourceSpans": [{"resource": {"attributes": ' + _KV + '}, '
    '"scopeSpans": [{"scope": {"name": "VARCHAR", "version": "VARCHAR"}, '
    '"spans": [{"traceId": "VARCHAR", "spanId": "VARCHAR", "parentSpanId": "VARCHAR", '
    '"name": "VARCHAR", "kind": "JSON", "startTimeUnixNano": "JSON", "endTimeUnixNano": "JSON", '
    '"attributes": ' + _KV + ', '
    '"events": [{"name": "VARCHAR", "attributes": ' + _KV + '}], '
    '"links": [{"traceId": "VARCHAR", "spanId": "VARCHAR"}], '
    '"status": {"code": "JSON", "message": "VARCHAR"}}]}]}]}'
)

# gen_ai.operation.name and its peers, lower-cased, by what the span is
TOOL_OPS = ("execute_tool", "tool")
AGENT_OPS = ("invoke_agent", "agent")
LLM_OPS = ("chat", "text_completion", "generate_content", "embeddings", "completion", "llm",
           "embedding", "generation")
ERROR_CODES = ("2", "STATUS_CODE_ERROR", "ERROR")
# a handoff span: GenAI `handoff`, the contrib OpenAI Agents instrumentation's
# `agent_handoff`, OpenLLMetry's `handoff` span kind named `A → B.handoff`
HANDOFF_OPS = ("handoff", "agent_handoff")
HANDOFF_ARROW = "^(.+?) → (.+)\\.handoff$"
SPAN_KINDS = {"1": "internal", "2": "server", "3": "client", "4": "producer", "5": "consumer"}


SIGNALS = ("resourceSpans", "resourceLogs", "resourceMetrics")  # what an OTLP export line holds


def sniff(records: list[dict], path: Path) -> bool:
    """Lines of spans, among lines of any OTLP export: a Collector writing several signals to
    one file still writes a trace file (the lines without spans are quarantined, counted)."""
    spans = sum(1 for r in records if isinstance(r.get("resourceSpans"), list))
    exports = sum(1 for r in records if any(isinstance(r.get(k), list) for k in SIGNALS))
    return spans > 0 and exports * 2 > len(records)


def sniff_head(head: bytes, path: Path) -> bool:
    """An export line can be longer than the head formats are recognised by: the compact
    object the exporter writes is recognised by how it starts."""
    return head.startswith(b'{"resourceSpans":[')


def _text(v: str) -> str:
    """SQL: an OTLP AnyValue (JSON) as text: strings, numbers and booleans as written, arrays
    and key-value lists as their JSON."""
    return (f"coalesce({v}->>'stringValue', {v}->>'intValue', {v}->>'doubleValue', "
            f"{v}->>'boolValue', CAST({v}->'arrayValue' AS VARCHAR), "
            f"CAST({v}->'kvlistValue' AS VARCHAR), {v}->>'bytesValue')")


def _attrs(kvs: str) -> str:
    """SQL: an attribute list as a MAP(VARCHAR, VARCHAR); a key given twice keeps its first
    value (a map's keys are unique)."""
    entries = (f"list_transform(list_filter(coalesce({kvs}, []), lambda kv_: kv_.key IS NOT NULL), "
               f"lambda kv_: {{'k': kv_.key, 'v': {_text('kv_.value')}}})")
    return (f"map_from_entries(list_filter({entries}, lambda e_, i_: "
            f"list_position(list_transform({entries}, lambda k_: k_.k), e_.k) = i_))")


def _hex_id(v: str) -> str:
    """SQL: a trace or span id as lower-case hex; base64 (which some exporters send) decoded;
    an empty or all-zero id is no id."""
    return (f"CASE WHEN nullif({v}, '') IS NULL OR regexp_full_match({v}, '0+') THEN NULL "
            f"WHEN length({v}) IN (16, 32) AND regexp_full_match({v}, '[0-9a-fA-F]+') "
            f"THEN lower({v}) ELSE coalesce(lower(hex(try(from_base64({v})))), {v}) END")


def _first(*keys: str, a: str = "a") -> str:
    """SQL: the first of these attributes that is present and not empty."""
    return "coalesce(" + ", ".join(f"nullif({a}[{sql_str(k)}], '')" for k in keys) + ")"


def _in(values: tuple[str, ...]) -> str:
    return "(" + ", ".join(sql_str(v) for v in values) + ")"


TOKENS = {
    "tokens_in": ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens",
                  "llm.token_count.prompt", "llm.usage.prompt_tokens"),
    "tokens_out": ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens",
                   "llm.token_count.completion", "llm.usage.completion_tokens"),
    "tokens_cache_read": ("gen_ai.usage.cache_read.input_tokens",
                          "gen_ai.usage.cache_read_input_tokens",
                          "llm.token_count.prompt_details.cache_read"),
    "tokens_cache_write": ("gen_ai.usage.cache_creation.input_tokens",
                           "gen_ai.usage.cache_write.input_tokens",
                           "gen_ai.usage.cache_creation_input_tokens",
                           "llm.token_count.prompt_details.cache_write"),
}
COST = ("gen_ai.usage.cost", "operation.cost", "llm.cost.total")  # OpenLIT, Logfire, OpenInference
ARGS = ("gen_ai.tool.call.arguments", "tool_arguments", "input.value", "traceloop.entity.input")
RESULT = ("gen_ai.tool.call.result", "tool_response", "output.value", "traceloop.entity.output")
EXCEPTION_ATTRS = ("list_filter(coalesce(x.span.events, []), lambda ev_: ev_.name = 'exception')"
                   "[1].attributes")
OPERATION = ("gen_ai.operation.name", "openinference.span.kind", "traceloop.span.kind",
             "ag2.span.type", "langfuse.observation.type")


def select_sql(ctx: FormatContext) -> str:
    kinds = " ".join(f"WHEN {sql_str(k)} THEN {sql_str(v)}" for k, v in SPAN_KINDS.items())
    tokens = ",\n        ".join(
        f"CASE WHEN what = 'llm' THEN TRY_CAST(TRY_CAST({_first(*keys)} AS DOUBLE) AS BIGINT) "
        f"END AS {col}" for col, keys in TOKENS.items())
    guard = (f"CASE WHEN n = 0 THEN error('no span in this line (an export of logs or metrics, "
             f"or an empty export?)') "
             f"WHEN n > {MAX_SPANS} THEN error('more than {MAX_SPANS:,} spans in one line: "
             f"loophound numbers at most that many events a line') "
             f"WHEN line > {MAX_LINE} THEN error('line number over {MAX_LINE:,}: loophound "
             f"numbers the spans of at most that many lines of one file; split the file') END")
    traceloop_kind = "lower(a['traceloop.span.kind'])"
    return f"""
    WITH parsed AS (
      SELECT line, byte_offset, byte_length, text, from_json(text, {sql_str(STRUCTURE)}) AS d
      FROM raw
    ),
    listed AS (  -- every span of the line, with its service and scope
      SELECT line, byte_offset, byte_length, text, flatten(flatten(list_transform(
          coalesce(d.resourceSpans, []), lambda r_: list_transform(
            coalesce(r_.scopeSpans, []), lambda ss_: list_transform(
              coalesce(ss_.spans, []), lambda sp_: {{
                'service': {_attrs('r_.resource.attributes')}['service.name'],
                'scope': ss_.scope.name, 'span': sp_}}))))) AS spans
      FROM parsed
    ),
    numbered AS (  -- one row a span, numbered from 0 in its line; one row for a line without
      SELECT line, byte_offset, byte_length, text, len(spans) AS n,
        unnest(CASE WHEN len(spans) = 0 THEN [NULL] ELSE list_transform(
          spans, lambda sp_, i_: struct_insert(sp_, sub := i_ - 1)) END) AS x
      FROM listed
    ),
    spans AS (
      SELECT line, byte_offset, byte_length, text, {guard} AS guard, x.sub, x.service,
        x.scope, x.span.name AS name, x.span.kind AS span_kind, x.span.status AS status,
        x.span.links AS links,
        {_hex_id('x.span.traceId')} AS trace_id, {_hex_id('x.span.spanId')} AS span_id,
        {_hex_id('x.span.parentSpanId')} AS parent_span_id,
        TRY_CAST(x.span.startTimeUnixNano->>'$' AS DOUBLE) AS start_ns,
        TRY_CAST(x.span.endTimeUnixNano->>'$' AS DOUBLE) AS end_ns,
        {_attrs('x.span.attributes')} AS a,
        {_attrs(EXCEPTION_ATTRS)} AS exc
      FROM numbered
    ),
    named AS (  -- what the attributes name, whatever the instrumentation
      SELECT *,
        lower({_first(*OPERATION)}) AS op,
        coalesce({_first('gen_ai.agent.name', 'agent.name', 'agent_name')},
                 CASE WHEN {traceloop_kind} = 'agent' THEN nullif(a['traceloop.entity.name'], '') END)
          AS agent,
        {_first('gen_ai.response.model', 'gen_ai.request.model', 'llm.model_name',
                'llm.response.model', 'llm.request.model')} AS model,
        coalesce({_first('gen_ai.transfer.target.name', 'gen_ai.handoff.to_agent', 'to_agent')},
                 nullif(regexp_extract(name, '^handoff (?:from .+? )?to (.+)$', 1), ''),
                 nullif(regexp_extract(name, {sql_str(HANDOFF_ARROW)}, 2), ''))
          AS handoff_to,
        coalesce({_first('gen_ai.tool.name', 'tool.name', 'tool_name')},
                 CASE WHEN {traceloop_kind} = 'tool' THEN nullif(a['traceloop.entity.name'], '') END,
                 nullif(regexp_extract(name, '^execute_tool (.+)$', 1), ''), name) AS tool,
        coalesce({_first('error.type')}, nullif(exc['exception.type'], ''),
                 CASE WHEN upper(status.code->>'$') IN {_in(ERROR_CODES)}
                      THEN 'STATUS_CODE_ERROR' END) AS err,
        {_first('gen_ai.conversation.id', 'session.id',
                'traceloop.association.properties.session_id', 'langfuse.session.id')}
          AS conversation
      FROM spans
    ),
    classified AS (
      SELECT *,
        CASE WHEN op IN {_in(HANDOFF_OPS)} OR handoff_to IS NOT NULL THEN 'handoff'
             WHEN op IN {_in(TOOL_OPS)} OR name = 'running tool' OR starts_with(name, 'execute_tool')
               OR (op IS NULL AND a['gen_ai.tool.name'] IS NOT NULL AND model IS NULL) THEN 'tool'
             WHEN op IN {_in(AGENT_OPS)} OR starts_with(name, 'invoke_agent')
               OR (name = 'agent run' AND agent IS NOT NULL) THEN 'agent'
             WHEN op IN {_in(LLM_OPS)}
               OR (op IS NULL AND (model IS NOT NULL OR a['llm.request.type'] IS NOT NULL)) THEN 'llm'
        END AS what,
        coalesce(agent, nullif(regexp_extract(name, '^invoke_agent (.+)$', 1), ''),
                 nullif(a['gen_ai.agent.id'], ''), name) AS invoked,
        coalesce({_first('gen_ai.handoff.from_agent', 'from_agent')},
                 nullif(regexp_extract(name, '^handoff from (.+?) to .+$', 1), ''),
                 nullif(regexp_extract(name, {sql_str(HANDOFF_ARROW)}, 1), ''), agent)
          AS handoff_from
      FROM named
    ),
    mapped AS (
      SELECT *,
        CASE what WHEN 'tool' THEN 'tool_call' WHEN 'agent' THEN 'request'
                  WHEN 'llm' THEN 'llm_call' WHEN 'handoff' THEN 'message' ELSE 'record' END
          AS kind,
        CASE what WHEN 'handoff' THEN handoff_from WHEN 'agent' THEN {_first('gen_ai.caller.name')}
                  ELSE agent END AS stated_actor,
        {tokens}
      FROM classified
    )
    SELECT line, byte_offset, byte_length, text, sub,
      coalesce(guard, {epoch_to_ts('start_ns')}) AS ts,
      kind,
      CASE WHEN what = 'handoff' THEN 'handoff' ELSE coalesce({_first(*OPERATION)}, 'span') END
        AS event_type,
      stated_actor AS actor,
      CASE what WHEN 'handoff' THEN handoff_to WHEN 'agent' THEN invoked WHEN 'tool' THEN tool
                WHEN 'llm' THEN {_first('gen_ai.provider.name', 'gen_ai.system', 'llm.provider',
                                        'llm.system')} END AS target,
      conversation AS session,
      CASE what WHEN 'handoff' THEN 'handoff' WHEN 'agent' THEN 'invoke_agent ' || invoked
                WHEN 'tool' THEN tool
                WHEN 'llm' THEN coalesce({_first('gen_ai.operation.name', 'llm.request.type')}, op)
                ELSE name END AS action,
      err IS NULL AS ok,
      err AS error,
      span_id AS corr_id,
      parent_span_id AS parent_id,
      (end_ns - start_ns) / 1e6 AS latency_ms,
      CASE WHEN kind = 'llm_call' THEN model END AS model,
      -- the conventions count cached input in the input tokens; kept apart here, as the
      -- other formats do
      CASE WHEN tokens_in IS NOT NULL THEN greatest(
        tokens_in - coalesce(tokens_cache_read, 0) - coalesce(tokens_cache_write, 0), 0) END
        AS tokens_in,
      tokens_out, tokens_cache_read, tokens_cache_write,
      CASE WHEN kind = 'llm_call' THEN TRY_CAST({_first(*COST)} AS DOUBLE) END AS cost_usd,
      CASE WHEN kind = 'tool_call' THEN {_first(*ARGS)} END AS args,
      CASE WHEN kind = 'tool_call' THEN left({_first(*RESULT)}, 4096) END AS result,
      CAST(json_merge_patch('{{}}', to_json({{
        'trace_id': trace_id,
        'span': name,
        'span_kind': CASE span_kind->>'$' {kinds}
                     ELSE nullif(lower(replace(span_kind->>'$', 'SPAN_KIND_', '')), '') END,
        'service': service,
        'scope': scope,
        'status': nullif(status.message, ''),
        'exception': nullif(exc['exception.message'], ''),
        'actor_stated': stated_actor,
        'what': what,
        'handoff': CASE WHEN what = 'handoff' THEN 'span' END,
        'text': CASE WHEN what = 'handoff' THEN 'handoff to ' || handoff_to END,
        'conversation': conversation,
        'links': nullif(list_transform(coalesce(links, []), lambda l_: {_hex_id('l_.spanId')}), []),
        'attributes': CASE WHEN cardinality(a) > 0 THEN a END
      }})) AS VARCHAR) AS extra
    FROM mapped
    """


def finish(con: duckdb.DuckDBPyConnection, ctx: FormatContext) -> None:
    """The span tree and the second deliveries, over what this read holds (`batch`).

    Run again over the lines held back for the next chunk, so it recomputes everything from
    what the mapper stated (kept in `extra`): the same rows give the same result."""
    con.execute("""
    CREATE OR REPLACE TEMP TABLE _otlp AS
    WITH b AS (SELECT *, extra->>'trace_id' AS _trace FROM batch),
    extent AS (  -- each line's bytes, before any of its spans is dropped
      SELECT line, min(byte_offset) AS lo, max(byte_offset + byte_length) - min(byte_offset) AS len
      FROM b GROUP BY line
    ),
    kept AS (  -- a span delivered twice is one event: the first, unless it is stored already
      SELECT * FROM b
      ANTI JOIN (SELECT corr_id, ts FROM stored_events WHERE corr_id IS NOT NULL) s
        ON s.corr_id = b.corr_id AND s.ts = b.ts
      QUALIFY row_number() OVER (PARTITION BY _trace, coalesce(corr_id, '#' || event_id)
                                 ORDER BY event_id) = 1
    )
    SELECT kept.*, extent.lo, extent.len,
      row_number() OVER (PARTITION BY kept.line ORDER BY event_id) - 1 AS k,
      count(*) OVER (PARTITION BY kept.line) AS n
    FROM kept JOIN extent USING (line)
    """)
    con.execute("""
    CREATE OR REPLACE TEMP TABLE batch AS
    WITH RECURSIVE node AS (
      SELECT event_id, _trace AS trace, corr_id AS span, parent_id AS parent, extra->>'what' AS what,
        CASE WHEN extra->>'what' = 'agent' THEN target ELSE extra->>'actor_stated' END AS agent,
        extra->>'conversation' AS conversation
      FROM _otlp
    ),
    up(event_id, trace, anc, hops) AS (  -- every ancestor of every span (64 levels at most)
      SELECT event_id, trace, parent, 1 FROM node WHERE parent IS NOT NULL AND trace IS NOT NULL
      UNION ALL
      SELECT up.event_id, up.trace, p.parent, up.hops + 1
      FROM up JOIN node p ON p.trace = up.trace AND p.span = up.anc
      WHERE p.parent IS NOT NULL AND up.hops < 64
    ),
    ancestry AS (
      SELECT up.event_id,
        arg_min(p.agent, up.hops) FILTER (WHERE p.agent IS NOT NULL) AS agent,
        arg_min(p.conversation, up.hops) FILTER (WHERE p.conversation IS NOT NULL) AS conversation,
        count(*) FILTER (WHERE p.what = 'agent') AS agents_above
      FROM up JOIN node p ON p.trace = up.trace AND p.span = up.anc
      GROUP BY up.event_id
    ),
    traced AS (  -- a conversation stated somewhere in the trace: the earliest span's
      SELECT _trace AS trace, arg_min(extra->>'conversation', ts) AS conversation
      FROM _otlp WHERE extra->>'conversation' IS NOT NULL AND _trace IS NOT NULL GROUP BY _trace
    ),
    resolved AS (
      SELECT o.*, extra->>'actor_stated' AS stated, x.agent AS anc_agent,
        extra->>'service' AS service, x.conversation AS anc_conversation,
        t.conversation AS trace_conversation, coalesce(x.agents_above, 0) AS agents_above
      FROM _otlp o LEFT JOIN ancestry x USING (event_id) LEFT JOIN traced t ON t.trace = o._trace
    )
    SELECT * EXCLUDE (_trace, lo, len, k, n, stated, anc_agent, service, anc_conversation,
                      trace_conversation, agents_above)
      REPLACE (
        lo + (k * len) // n AS byte_offset,
        CAST(((k + 1) * len) // n - (k * len) // n AS INTEGER) AS byte_length,
        coalesce(stated, anc_agent, service) AS actor,
        coalesce(extra->>'conversation', anc_conversation, trace_conversation, _trace) AS session,
        CASE WHEN extra->>'what' = 'agent' THEN CAST(agents_above AS INTEGER) ELSE depth END AS depth,
        CAST(json_merge_patch(extra, json_object('actor_source',
          CASE WHEN stated IS NOT NULL THEN 'span' WHEN anc_agent IS NOT NULL THEN 'ancestor'
               WHEN service IS NOT NULL THEN 'service' END)) AS VARCHAR) AS extra)
    FROM resolved
    """)
    _inferred_handoffs(con)


# A hand-off the trace shows without a handoff span: how it is told (extra.handoff)
TRANSFER, SUCCESSION = "transfer_tool", "conversation"
TRANSFER_PREFIX = "transfer_to_"  # OpenAI Agents SDK: a handoff is the tool transfer_to_<agent>


def _tool_name_of(agent: str) -> str:
    """SQL: the name the OpenAI Agents SDK gives the tool that hands off to `agent`
    (`transform_string_function_style`: every character but letters, digits and `_` made
    `_`, lower-cased)."""
    return f"lower(regexp_replace({agent}, '[^A-Za-z0-9_]', '_', 'g'))"


def _inferred_handoffs(con: duckdb.DuckDBPyConnection) -> None:
    """Hand-offs between agents that no handoff span states, as messages from the agent
    handing off to the agent taking over (`extra.handoff` says how each was told):

    - `transfer_tool`: a tool call `transfer_to_<agent>` (the OpenAI Agents SDK's handoff tool)
      whose trace's next agent span invokes that agent: the call is the message, to it;
    - `conversation`: an agent span at the top of its trace's agents (no agent above it) whose
      conversation's previous such span was another agent's, in the same trace or as a trace
      of its own (a new trace under a user's request is the user's turn, not a hand-off),
      and no hand-off between them says so: the span is the message, from that agent.

    A hand-off a handoff span states stays the span's alone. Every hand-off's channel is its
    conversation: two agents passing one conversation back and forth are a ping-pong there,
    and the same two handing on many conversations once each are not. Both are inferred, as the GenAI
    conventions say an instrumentation must not (agent-formats.md §2): the finding says so.
    Idempotent: what an earlier run of `finish` over held-back rows inferred is undone first
    (the actor of every span is recomputed by `finish` before)."""
    con.execute(f"""
    UPDATE batch SET kind = CASE extra->>'what' WHEN 'tool' THEN 'tool_call' ELSE 'request' END,
      target = CASE extra->>'what' WHEN 'tool' THEN action ELSE target END,
      extra = CAST(json_merge_patch(extra, '{{"handoff": null, "text": null}}') AS VARCHAR)
    WHERE extra->>'handoff' IN ({sql_str(TRANSFER)}, {sql_str(SUCCESSION)});
    CREATE OR REPLACE TEMP TABLE _agents AS
      SELECT event_id, ts, target AS agent, session, extra->>'trace_id' AS trace,
             parent_id IS NULL AS own_trace, coalesce(depth, 0) = 0 AS top
      FROM batch WHERE kind = 'request' AND ts IS NOT NULL;
    CREATE OR REPLACE TEMP TABLE _stated AS
      SELECT ts, actor, target, session, extra->>'trace_id' AS trace FROM batch
      WHERE kind = 'message' AND extra->>'handoff' = 'span';
    CREATE OR REPLACE TEMP TABLE _transfers AS
      SELECT t.event_id, a.agent
      FROM (SELECT event_id, ts, actor, action, extra->>'trace_id' AS trace FROM batch
            WHERE kind = 'tool_call' AND starts_with(action, {sql_str(TRANSFER_PREFIX)})
              AND ts IS NOT NULL AND actor IS NOT NULL) t
      ASOF JOIN _agents a ON a.trace = t.trace AND a.ts >= t.ts
      WHERE {_tool_name_of('a.agent')} = lower(t.action[{len(TRANSFER_PREFIX) + 1}:])
        AND a.agent <> t.actor
        AND NOT EXISTS (SELECT 1 FROM _stated h WHERE h.trace = t.trace
                        AND h.actor = t.actor AND h.target = a.agent
                        AND h.ts BETWEEN t.ts AND a.ts);
    UPDATE batch SET kind = 'message', target = x.agent,
      extra = CAST(json_merge_patch(extra, json_object('handoff', {sql_str(TRANSFER)},
        'text', batch.action || coalesce(' ' || batch.args, ''))) AS VARCHAR)
    FROM _transfers x WHERE batch.event_id = x.event_id;
    CREATE OR REPLACE TEMP TABLE _successions AS
      SELECT event_id, agent, prev_agent FROM (
        SELECT *, lag(agent) OVER w AS prev_agent, lag(ts) OVER w AS prev_ts,
               lag(trace) OVER w AS prev_trace
        FROM _agents WHERE top AND session IS NOT NULL
        WINDOW w AS (PARTITION BY session ORDER BY ts, event_id)) s
      WHERE prev_agent IS NOT NULL AND prev_agent <> agent
        AND (trace = prev_trace OR own_trace)
        AND NOT EXISTS (SELECT 1 FROM batch h WHERE h.kind = 'message' AND h.session = s.session
                        AND h.actor = s.prev_agent AND h.target = s.agent
                        AND h.ts BETWEEN s.prev_ts AND s.ts);
    UPDATE batch SET kind = 'message', actor = x.prev_agent, depth = NULL,
      extra = CAST(json_merge_patch(extra, json_object('handoff', {sql_str(SUCCESSION)},
        'text', 'invoke_agent ' || x.agent)) AS VARCHAR)
    FROM _successions x WHERE batch.event_id = x.event_id;
    UPDATE batch SET channel = session WHERE kind = 'message' AND extra->>'handoff' IS NOT NULL;
    """)


FORMAT = Format(
    name="otlp",
    description="OpenTelemetry traces (OTLP/JSON lines, Collector file exporter): one event per span",
    sniff=sniff,
    sniff_head=sniff_head,
    select_sql=select_sql,
    mapped_keys=frozenset({"resourceSpans"}),
    finish=finish,
    whole_chunks=True,
    sub_bits=SUB_BITS,
    priority=30,
    # a hand-off's text (`handoff to <agent>`, the transfer call): repeated_message reads it
    profile=FormatProfile(text_key="text"),
)

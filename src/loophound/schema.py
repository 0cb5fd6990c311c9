"""The canonical event table: the one shape every format is mapped to.

Detectors, queries and the report read only these columns (through the store's views), so
a new log format is useful the moment its module maps onto them. The README documents each
column; ``COLUMNS`` is the single source of that documentation.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    name: str
    sql_type: str
    doc: str


COLUMNS: tuple[Column, ...] = (
    Column("event_id", "BIGINT", "unique id: input number × 2^32 + line number (a line of several "
           "events, an OTLP export's spans: input × 2^32 + line × 2^13 + the event's place in it)"),
    Column("ts", "TIMESTAMP", "event time, UTC, millisecond precision (NULL when the line has none)"),
    Column("file", "VARCHAR", "the input file as it was named on the command line"),
    Column("line", "BIGINT", "1-based line number in the (decompressed) file"),
    Column("byte_offset", "BIGINT", "offset of the line's first byte in the (decompressed) file "
           "(a line of several events: where this event's share of it starts)"),
    Column("byte_length", "INTEGER", "bytes the raw line occupies, newline included (a line of "
           "several events: this event's share; the shares add up to the line)"),
    Column("format", "VARCHAR", "format module that read the line (`loophound formats`)"),
    Column("kind", "VARCHAR", "request, response, lifecycle, connection, config, message, "
           "room_post, trigger, session_start, session_end, step, llm_call, repair_attempt, "
           "audit, episode_metrics, record, tool_call (an agent's tool call, its result on the same "
           "event)"),
    Column("event_type", "VARCHAR", "the format's own name for the line (`received`, "
           "`hook_fired`, `LLM_COORD_PROPOSAL`, ...)"),
    Column("actor", "VARCHAR", "who acted: sender, caller, agent (bproxy: `pid:ownerHash`)"),
    Column("target", "VARCHAR", "who or what was acted on: receiver, triggered agent, peer"),
    Column("session", "VARCHAR", "session or conversation the event belongs to"),
    Column("channel", "VARCHAR", "transport or room: `peer`, `room:<name>`, `hook`, `episode`"),
    Column("action", "VARCHAR", "what was asked for (`scroll`, `MOVE`, `post_completion`)"),
    Column("ok", "BOOLEAN", "outcome when the line states one (NULL when unknown)"),
    Column("error", "VARCHAR", "error or blocked-reason code (`SESSION_NOT_FOUND`, ...)"),
    Column("depth", "INTEGER", "hop, delegation or hook depth carried by the message"),
    Column("role", "VARCHAR", "message role (`user`, `assistant`) or agent role"),
    Column("corr_id", "VARCHAR", "correlation id tying lines of one exchange together "
           "(bproxy request id; `L<line>` for id-less trimmed logs)"),
    Column("parent_id", "VARCHAR", "causal parent (hook parent completion, proposal id)"),
    Column("answers", "BIGINT", "`event_id` of the request this line answers (bproxy "
           "responses and lifecycle lines): set at ingest, so joins need no string key"),
    Column("tokens_in", "BIGINT", "LLM input tokens"),
    Column("tokens_out", "BIGINT", "LLM output tokens"),
    Column("cost_usd", "DOUBLE", "cost stated by the log itself (never estimated at ingest)"),
    Column("latency_ms", "DOUBLE", "elapsed or latency in milliseconds"),
    Column("model", "VARCHAR", "LLM model id that served the call"),
    Column("tokens_cache_read", "BIGINT", "LLM input tokens read from the prompt cache"),
    Column("tokens_cache_write", "BIGINT", "LLM input tokens written to the prompt cache"),
    Column("args", "VARCHAR", "the action's arguments as the log gives them (JSON text: a tool "
           "call's input, a command's arguments)"),
    Column("result", "VARCHAR", "what the action returned, as the log gives it (a tool "
           "result's text; the first 4 KiB)"),
    Column("action_key", "VARCHAR", "the action and its arguments with ids, times, hashes and "
           "numbers masked, hashed: the same call compares equal (set at ingest)"),
    Column("result_key", "VARCHAR", "the result masked the same way, hashed: the same outcome "
           "compares equal (set at ingest)"),
    Column("extra", "VARCHAR", "JSON object of the fields no column above holds"),
)

# Columns large and unique row by row (a request id on every line): ingest stores them
# zstd-compressed, without a dictionary, and a pass that needs them only for some kinds reads
# them over those kinds alone (coverage.py); a scan reads every other column many times.
COSTLY_TO_READ: tuple[str, ...] = ("corr_id",)

QUARANTINE_COLUMNS: tuple[Column, ...] = (
    Column("file", "VARCHAR", "input file"),
    Column("line", "BIGINT", "1-based line number"),
    Column("byte_offset", "BIGINT", "offset of the line's first byte"),
    Column("byte_length", "BIGINT", "bytes the line occupies, newline included"),
    Column("reason", "VARCHAR", "why it is not an event: invalid_utf8, invalid_json, "
           "not_an_object, blank, line_too_long, truncated_last_line, binary, unmappable"),
    Column("detail", "VARCHAR", "human-readable detail"),
    Column("preview", "VARCHAR", "the first 200 bytes, undecodable bytes escaped"),
)

# Simulated clocks (LabTrust `t_s`) are placed on this epoch so they sort and plot as times.
SIM_EPOCH = "2000-01-01 00:00:00"


def create_table_sql(name: str, columns: tuple[Column, ...] = COLUMNS) -> str:
    body = ",\n  ".join(f"{c.name} {c.sql_type}" for c in columns)
    return f"CREATE TABLE {name} (\n  {body}\n)"

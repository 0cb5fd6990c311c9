"""The `otlp` format: OpenTelemetry traces as the Collector's file exporter writes them (one
ExportTraceServiceRequest a line), one event per span, in the attribute names of the GenAI
conventions (current and older), OpenInference, OpenLLMetry/Traceloop, OpenLIT and Logfire.

Literal lines map to column values (lnav-style); the sample log's counts are exact; its two
planted loops are found by `loophound scan` with the right participants and counts; its clean
twin is silent; the example trace of opentelemetry-proto (not written by this project) reads."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loophound import formats
from loophound.cli import app
from loophound.formats import otlp
from loophound.ingest import ingest
from loophound.store import Store

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_logs" / "otlp"
KEY = json.loads((ROOT / "sample_logs" / "EXPECTED.json").read_text())["sections"]["otlp"]
PROTO_EXAMPLE = ROOT / "tests" / "data" / "otlp" / "opentelemetry-proto-trace.json"
SERIOUS = {"high", "critical"}

# -- literal lines, each a real instrumentation's way of saying it ---------------------------

# GenAI semantic conventions, current names (OpenLIT): an agent invoked under a request span,
# its model call and tool call exported first (children end before their parents), then the
# agent span with its children's token totals, which must not be counted twice.
GENAI_CHILDREN = (
    '{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":'
    '"support-desk"}}]},"scopeSpans":[{"scope":{"name":"openlit.otel.tracing","version":"1.35.0"},'
    '"spans":[{"traceId":"4bf92f3577b34da6a3ce929d0e0e4736","spanId":"00f067aa0ba902b7",'
    '"parentSpanId":"b7ad6b7169203331","name":"chat gpt-4.1-mini","kind":3,'
    '"startTimeUnixNano":"1778580000100000000","endTimeUnixNano":"1778580001900000000",'
    '"attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"chat"}},'
    '{"key":"gen_ai.provider.name","value":{"stringValue":"openai"}},'
    '{"key":"gen_ai.request.model","value":{"stringValue":"gpt-4.1-mini"}},'
    '{"key":"gen_ai.response.model","value":{"stringValue":"gpt-4.1-mini-2025-04-14"}},'
    '{"key":"gen_ai.usage.input_tokens","value":{"intValue":"1843"}},'
    '{"key":"gen_ai.usage.output_tokens","value":{"intValue":"96"}},'
    '{"key":"gen_ai.usage.cache_read.input_tokens","value":{"intValue":"1024"}},'
    '{"key":"gen_ai.usage.cache_creation.input_tokens","value":{"intValue":"0"}},'
    '{"key":"gen_ai.usage.cost","value":{"doubleValue":0.000584}}],"status":{}},'
    '{"traceId":"4bf92f3577b34da6a3ce929d0e0e4736","spanId":"1a2b3c4d5e6f7081",'
    '"parentSpanId":"b7ad6b7169203331","name":"execute_tool lookup_invoice","kind":1,'
    '"startTimeUnixNano":"1778580001910000000","endTimeUnixNano":"1778580002410000000",'
    '"attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"execute_tool"}},'
    '{"key":"gen_ai.tool.name","value":{"stringValue":"lookup_invoice"}},'
    '{"key":"gen_ai.tool.call.arguments","value":{"stringValue":"{\\"invoice_id\\": \\"INV-7\\"}"}},'
    '{"key":"error.type","value":{"stringValue":"TimeoutError"}}],'
    '"status":{"message":"lookup timed out after 0.5 s","code":2}}]}]}]}'
)
GENAI_PARENTS = (
    '{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":'
    '"support-desk"}}]},"scopeSpans":[{"scope":{"name":"openlit.otel.tracing","version":"1.35.0"},'
    '"spans":[{"traceId":"4bf92f3577b34da6a3ce929d0e0e4736","spanId":"b7ad6b7169203331",'
    '"parentSpanId":"0102030405060708","name":"invoke_agent billing","kind":1,'
    '"startTimeUnixNano":"1778580000000000000","endTimeUnixNano":"1778580002500000000",'
    '"attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"invoke_agent"}},'
    '{"key":"gen_ai.agent.name","value":{"stringValue":"billing"}},'
    '{"key":"gen_ai.conversation.id","value":{"stringValue":"conv_42"}},'
    '{"key":"gen_ai.usage.input_tokens","value":{"intValue":"1843"}}],"status":{}},'
    '{"traceId":"4bf92f3577b34da6a3ce929d0e0e4736","spanId":"0102030405060708",'
    '"name":"invoke_agent triage","kind":1,'
    '"startTimeUnixNano":"1778579999000000000","endTimeUnixNano":"1778580003000000000",'
    '"attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"invoke_agent"}},'
    '{"key":"gen_ai.agent.name","value":{"stringValue":"triage"}}],"status":{}},'
    '{"traceId":"4bf92f3577b34da6a3ce929d0e0e4736","spanId":"0a0b0c0d0e0f1011",'
    '"parentSpanId":"0102030405060708","name":"handoff from triage to refunds","kind":1,'
    '"startTimeUnixNano":"1778580002600000000","endTimeUnixNano":"1778580002603000000",'
    '"attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"handoff"}}],'
    '"status":{}}]}]}]}'
)
# Older GenAI names and Traceloop's span kinds (OpenLLMetry 0.x): gen_ai.system,
# gen_ai.usage.prompt_tokens / completion_tokens; an agent named by traceloop.entity.name.
TRACELOOP = (
    '{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":'
    '"ops-monitor"}}]},"scopeSpans":[{"scope":{"name":"opentelemetry.instrumentation.openai.v1",'
    '"version":"0.26.4"},"spans":[{"traceId":"78c9499f852cda2fc790b503491fccf8",'
    '"spanId":"5f1c2d3e4a5b6c7d","parentSpanId":"749d7398a1890511","name":"openai.chat",'
    '"kind":3,"startTimeUnixNano":"1778576415200000000","endTimeUnixNano":"1778576416400000000",'
    '"attributes":[{"key":"llm.request.type","value":{"stringValue":"chat"}},'
    '{"key":"gen_ai.system","value":{"stringValue":"OpenAI"}},'
    '{"key":"gen_ai.request.model","value":{"stringValue":"gpt-4o-mini"}},'
    '{"key":"gen_ai.usage.prompt_tokens","value":{"intValue":"512"}},'
    '{"key":"gen_ai.usage.completion_tokens","value":{"intValue":"64"}}],"status":{}}]},'
    '{"scope":{"name":"traceloop.tracer","version":"0.26.4"},"spans":[{"traceId":'
    '"78c9499f852cda2fc790b503491fccf8","spanId":"749d7398a1890511","name":"monitor.agent",'
    '"kind":1,"startTimeUnixNano":"1778576415000000000","endTimeUnixNano":"1778576416553615000",'
    '"attributes":[{"key":"traceloop.span.kind","value":{"stringValue":"agent"}},'
    '{"key":"traceloop.entity.name","value":{"stringValue":"monitor"}},'
    '{"key":"traceloop.association.properties.session_id","value":{"stringValue":"ops-1"}}],'
    '"status":{}}]}]}]}'
)
# OpenInference (Phoenix): span kinds in capitals, llm.token_count.*, llm.cost.total, a tool
# with input.value / output.value; an exporter that sends the enum names and base64 ids, and
# times as JSON numbers.
OPENINFERENCE = (
    '{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":'
    '"kb-search"}}]},"scopeSpans":[{"scope":{"name":"openinference.instrumentation.llama_index"},'
    '"spans":[{"traceId":"W47/95gDgQPSabYzgT/GDA==","spanId":"7uGbfsPBsXQ=",'
    '"parentSpanId":"7uGbfsPBsXM=","name":"llm","kind":"SPAN_KIND_CLIENT",'
    '"startTimeUnixNano":1778580000000000000,"endTimeUnixNano":1778580001250000000,'
    '"attributes":[{"key":"openinference.span.kind","value":{"stringValue":"LLM"}},'
    '{"key":"session.id","value":{"stringValue":"sess_9"}},'
    '{"key":"llm.provider","value":{"stringValue":"openai"}},'
    '{"key":"llm.model_name","value":{"stringValue":"gpt-4o-mini"}},'
    '{"key":"llm.token_count.prompt","value":{"intValue":1200}},'
    '{"key":"llm.token_count.completion","value":{"intValue":80}},'
    '{"key":"llm.cost.total","value":{"doubleValue":0.000228}}],"status":{"code":"STATUS_CODE_OK"}},'
    '{"traceId":"W47/95gDgQPSabYzgT/GDA==","spanId":"7uGbfsPBsXU=","parentSpanId":"7uGbfsPBsXM=",'
    '"name":"get_export_status","kind":"SPAN_KIND_INTERNAL",'
    '"startTimeUnixNano":1778580002000000000,"endTimeUnixNano":1778580002100000000,'
    '"attributes":[{"key":"openinference.span.kind","value":{"stringValue":"TOOL"}},'
    '{"key":"tool.name","value":{"stringValue":"get_export_status"}},'
    '{"key":"agent.name","value":{"stringValue":"reporter"}},'
    '{"key":"input.value","value":{"stringValue":"{\\"export_id\\": \\"exp_1\\"}"}},'
    '{"key":"output.value","value":{"stringValue":"{\\"state\\": \\"running\\"}"}}],'
    '"status":{"code":"STATUS_CODE_ERROR","message":"export not ready"}}]}]}]}'
)
# Pydantic AI through Logfire: `agent run` with agent_name, `running tool` with
# tool_arguments and an exception event, a model call with operation.cost.
LOGFIRE = (
    '{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":'
    '"research-worker"}}]},"scopeSpans":[{"scope":{"name":"pydantic-ai","version":"1.0.10"},'
    '"spans":[{"traceId":"b285a9720fd124ca4222eaed205146a3","spanId":"21b8a708533e319f",'
    '"parentSpanId":"fc5fc9f995ee8c25","name":"running tool","kind":1,'
    '"startTimeUnixNano":"1778582473896064000","endTimeUnixNano":"1778582474201866000",'
    '"attributes":[{"key":"gen_ai.tool.name","value":{"stringValue":"fetch_url"}},'
    '{"key":"tool_arguments","value":{"stringValue":"{\\"url\\": \\"https://intranet.example.org/q3.pdf\\"}"}},'
    '{"key":"logfire.msg","value":{"stringValue":"running tool: fetch_url"}}],'
    '"events":[{"timeUnixNano":"1778582474201865000","name":"exception","attributes":['
    '{"key":"exception.type","value":{"stringValue":"httpx.HTTPStatusError"}},'
    '{"key":"exception.message","value":{"stringValue":"Client error \'403 Forbidden\'"}}]}],'
    '"status":{"message":"HTTPStatusError: Client error \'403 Forbidden\'","code":2}},'
    '{"traceId":"b285a9720fd124ca4222eaed205146a3","spanId":"aa00bb11cc22dd33",'
    '"parentSpanId":"fc5fc9f995ee8c25","name":"chat gpt-4o","kind":3,'
    '"startTimeUnixNano":"1778582474210000000","endTimeUnixNano":"1778582475900000000",'
    '"attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"chat"}},'
    '{"key":"gen_ai.system","value":{"stringValue":"openai"}},'
    '{"key":"gen_ai.request.model","value":{"stringValue":"gpt-4o"}},'
    '{"key":"gen_ai.usage.input_tokens","value":{"intValue":"2100"}},'
    '{"key":"gen_ai.usage.output_tokens","value":{"intValue":"40"}},'
    '{"key":"operation.cost","value":{"doubleValue":0.00565}}],"status":{}},'
    '{"traceId":"b285a9720fd124ca4222eaed205146a3","spanId":"fc5fc9f995ee8c25",'
    '"name":"agent run","kind":1,'
    '"startTimeUnixNano":"1778582467000000000","endTimeUnixNano":"1778582476000000000",'
    '"attributes":[{"key":"agent_name","value":{"stringValue":"researcher"}},'
    '{"key":"gen_ai.conversation.id","value":{"stringValue":"conv_r"}},'
    '{"key":"gen_ai.usage.input_tokens","value":{"intValue":"2100"}}],"status":{}}]}]}]}'
)
NO_SPANS = '{"resourceMetrics":[]}'

COLUMNS = ("kind, event_type, actor, target, session, action, ok, error, corr_id, parent_id, "
           "model, tokens_in, tokens_out, tokens_cache_read, tokens_cache_write, cost_usd, "
           "args, result, depth, latency_ms")


def write(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def events(tmp_path: Path, lines: list[str], columns: str = COLUMNS) -> list[tuple]:
    store = Store(tmp_path / "st")
    report = ingest([str(write(tmp_path / "traces.json", lines))], store)
    assert report.files[0].format == "otlp"
    return store.connect().execute(
        f"SELECT {columns} FROM events ORDER BY event_id").fetchall()


def by_corr(rows: list[tuple]) -> dict[str, dict]:
    names = [c.strip() for c in COLUMNS.split(",")]
    return {r[names.index("corr_id")]: dict(zip(names, r, strict=True)) for r in rows}


def test_genai_current_names_span_tree_and_agent_totals(tmp_path):
    got = by_corr(events(tmp_path, [GENAI_CHILDREN, GENAI_PARENTS]))
    chat, tool = got["00f067aa0ba902b7"], got["1a2b3c4d5e6f7081"]
    billing, triage, handoff = (got["b7ad6b7169203331"], got["0102030405060708"],
                                got["0a0b0c0d0e0f1011"])
    # the model call: its agent is the nearest ancestor agent span (exported on the next line)
    assert (chat["kind"], chat["actor"], chat["target"], chat["session"], chat["action"]) == \
        ("llm_call", "billing", "openai", "conv_42", "chat")
    assert (chat["model"], chat["tokens_in"], chat["tokens_out"], chat["tokens_cache_read"],
            chat["tokens_cache_write"], chat["cost_usd"]) == \
        ("gpt-4.1-mini-2025-04-14", 1843 - 1024, 96, 1024, 0, 0.000584)  # cached input apart
    assert chat["ok"] is True and chat["latency_ms"] == 1800.0
    assert (tool["kind"], tool["actor"], tool["target"], tool["action"], tool["ok"], tool["error"],
            tool["args"]) == ("tool_call", "billing", "lookup_invoice", "lookup_invoice", False,
                              "TimeoutError", '{"invoice_id": "INV-7"}')
    # invoke_agent: actor = the caller (nearest ancestor agent), target = the invoked agent; the
    # totals it carries are its children's, not counted again
    assert (billing["kind"], billing["actor"], billing["target"], billing["action"],
            billing["depth"], billing["tokens_in"]) == \
        ("request", "triage", "billing", "invoke_agent billing", 1, None)
    assert (triage["actor"], triage["target"], triage["depth"], triage["session"]) == \
        ("support-desk", "triage", 0, "conv_42")  # no caller: the service; the trace's conversation
    # a handoff is an explicit edge: from the agent handing off (its own span's agent: none, so
    # the name says it) to the one it names
    assert (handoff["kind"], handoff["event_type"], handoff["actor"], handoff["target"],
            handoff["action"]) == ("message", "handoff", "triage", "refunds", "handoff")


def test_actor_source_says_which_actors_were_inferred(tmp_path):
    rows = events(tmp_path, [GENAI_CHILDREN, GENAI_PARENTS],
                  "corr_id, extra->>'actor_source', extra->>'service', extra->>'trace_id'")
    assert {r[0]: r[1] for r in rows} == {
        "00f067aa0ba902b7": "ancestor", "1a2b3c4d5e6f7081": "ancestor",
        "b7ad6b7169203331": "ancestor", "0102030405060708": "service",
        "0a0b0c0d0e0f1011": "span"}
    assert {(r[2], r[3]) for r in rows} == {("support-desk", "4bf92f3577b34da6a3ce929d0e0e4736")}


def test_older_names_and_traceloop_kinds(tmp_path):
    got = by_corr(events(tmp_path, [TRACELOOP]))
    chat, agent = got["5f1c2d3e4a5b6c7d"], got["749d7398a1890511"]
    assert (chat["kind"], chat["actor"], chat["target"], chat["action"], chat["model"],
            chat["tokens_in"], chat["tokens_out"], chat["session"]) == \
        ("llm_call", "monitor", "OpenAI", "chat", "gpt-4o-mini", 512, 64, "ops-1")
    assert (agent["kind"], agent["target"], agent["action"]) == \
        ("request", "monitor", "invoke_agent monitor")


def test_openinference_base64_ids_enum_names_and_numeric_times(tmp_path):
    rows = events(tmp_path, [OPENINFERENCE], COLUMNS + ", ts, extra->>'trace_id', "
                  "extra->>'span_kind'")
    llm, tool = rows
    # base64 ids become the hex the rest of the world writes
    assert llm[8:10] == ("eee19b7ec3c1b174", "eee19b7ec3c1b173")
    assert llm[-2:] == ("5b8efff798038103d269b633813fc60c", "client")
    assert str(llm[-3]) == "2026-05-12 10:00:00"
    assert llm[:8] == ("llm_call", "LLM", "kb-search", "openai", "sess_9", "llm", True, None)
    assert llm[10:16] == ("gpt-4o-mini", 1200, 80, None, None, 0.000228)
    assert tool[:8] == ("tool_call", "TOOL", "reporter", "get_export_status", "sess_9",
                        "get_export_status", False, "STATUS_CODE_ERROR")
    assert tool[16:18] == ('{"export_id": "exp_1"}', '{"state": "running"}')


def test_logfire_pydantic_ai_exception_event_and_cost(tmp_path):
    got = by_corr(events(tmp_path, [LOGFIRE]))
    tool, chat, run = got["21b8a708533e319f"], got["aa00bb11cc22dd33"], got["fc5fc9f995ee8c25"]
    assert (tool["kind"], tool["actor"], tool["target"], tool["session"], tool["error"],
            tool["ok"]) == ("tool_call", "researcher", "fetch_url", "conv_r",
                            "httpx.HTTPStatusError", False)
    assert tool["args"] == '{"url": "https://intranet.example.org/q3.pdf"}'
    assert (chat["kind"], chat["actor"], chat["target"], chat["tokens_in"], chat["cost_usd"]) == \
        ("llm_call", "researcher", "openai", 2100, 0.00565)
    assert (run["kind"], run["actor"], run["target"], run["tokens_in"]) == \
        ("request", "research-worker", "researcher", None)


def test_ids_byte_shares_and_a_span_delivered_twice(tmp_path):
    """Event ids are input × 2^32 + line × 2^13 + the span's place in its line; each event has
    a share of its line's bytes, the shares add up to the line; a span delivered again (the
    same line twice, a retried export) is one event; a line of no spans is quarantined."""
    lines = [GENAI_CHILDREN, GENAI_PARENTS, GENAI_CHILDREN, NO_SPANS]
    rows = events(tmp_path, lines, "event_id, line, byte_offset, byte_length")
    assert [(r[0] & (2**32 - 1), r[1]) for r in rows] == \
        [(1 * 8192 + 0, 1), (1 * 8192 + 1, 1), (2 * 8192, 2), (2 * 8192 + 1, 2), (2 * 8192 + 2, 2)]
    sizes = [len(x.encode()) + 1 for x in lines]
    per_line = Counter()
    for _, line, offset, length in rows:
        per_line[line] += length
        assert offset >= sum(sizes[: line - 1]) and offset + length <= sum(sizes[:line])
    assert per_line == {1: sizes[0], 2: sizes[1]}
    q = Store(tmp_path / "st").connect().execute(
        "SELECT line, reason, detail FROM quarantine").fetchall()
    assert [(r[0], r[1]) for r in q] == [(4, "unmappable")] and "no span in this line" in q[0][2]


def test_a_span_delivered_again_in_a_later_run_counts_once(tmp_path):
    path = write(tmp_path / "traces.json", [GENAI_CHILDREN])
    store = Store(tmp_path / "st")
    assert ingest([str(path)], store).events == 2
    with path.open("a") as fh:
        fh.write(GENAI_PARENTS + "\n" + GENAI_CHILDREN + "\n")
    assert ingest([str(path)], store).events == 3
    assert store.connect().execute("SELECT count(*), count(DISTINCT corr_id) FROM events"
                                   ).fetchall() == [(5, 5)]


def test_compressed_and_long_lines_are_recognised(tmp_path):
    # the head formats are recognised by is 64 KiB: a longer first line is recognised by how
    # the exporter starts it
    big = json.loads(LOGFIRE)
    spans = big["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans[0]["attributes"].append({"key": "tool_response", "value": {"stringValue": "x" * 90000}})
    line = json.dumps(big, separators=(",", ":"))
    path = tmp_path / "traces.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write(line + "\n" + TRACELOOP + "\n")
    head = gzip.decompress(path.read_bytes())[:65536]
    assert formats.sniff(head, path).name == "otlp"
    store = Store(tmp_path / "st")
    report = ingest([str(path)], store)
    assert (report.files[0].format, report.events, sum(report.files[0].quarantined.values())) == \
        ("otlp", 5, 0)
    result, = store.connect().execute(
        "SELECT length(result) FROM events WHERE kind = 'tool_call'").fetchall()[0]
    assert result == 4096  # the first 4 KiB of a tool's result


def test_recognised_as_itself_only(tmp_path):
    path = write(tmp_path / "t.json", [GENAI_CHILDREN, TRACELOOP])
    records = formats.sample_records(path.read_bytes())
    assert [f.name for f in formats.FORMATS.values() if f.name != "generic"
            and f.sniff(records, path)] == ["otlp"]
    assert not otlp.sniff([{"event": "received", "time": 1}], path)


@pytest.mark.parametrize("mutation", [
    lambda d: d.update(resourceSpans="not a list"),
    lambda d: d["resourceSpans"][0].update(scopeSpans={"spans": []}),
    lambda d: d["resourceSpans"][0]["scopeSpans"][0]["spans"][0].update(
        startTimeUnixNano="soon", endTimeUnixNano=1e400, traceId=7, spanId="", parentSpanId=None),
    lambda d: d["resourceSpans"][0]["scopeSpans"][0]["spans"][0].update(
        attributes=[{"key": None, "value": None}, {"key": "gen_ai.usage.input_tokens",
                                                    "value": {"intValue": "1e400"}},
                    {"key": "gen_ai.agent.name", "value": {"kvlistValue": {"values": []}}},
                    {"key": "gen_ai.agent.name", "value": {"stringValue": "twice"}}]),
    lambda d: d["resourceSpans"][0]["scopeSpans"][0]["spans"][0].update(
        parentSpanId=d["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["spanId"]),  # a cycle
    lambda d: d["resourceSpans"][0]["scopeSpans"][0]["spans"][0].update(
        events={"name": "exception"}, status="ERROR", kind={"x": 1}, links=[1, 2]),
])
def test_hostile_values_cost_their_line_at_most(tmp_path, mutation):
    bad = json.loads(GENAI_CHILDREN)
    mutation(bad)
    lines = [TRACELOOP, json.dumps(bad), TRACELOOP.replace("5f1c2d3e4a5b6c7d", "5f1c2d3e4a5b6c7e")]
    store = Store(tmp_path / "st")
    report = ingest([str(write(tmp_path / "traces.json", lines))], store)
    con = store.connect()
    have = {r[0] for r in con.execute("SELECT DISTINCT line FROM events").fetchall()}
    quarantined = {r[0] for r in con.execute("SELECT line FROM quarantine").fetchall()}
    assert report.files[0].status == "new" and have | quarantined == {1, 2, 3}
    assert {1, 3} <= have and not have & quarantined


def test_pretty_printed_document_is_not_read_as_lines(tmp_path):
    """One ExportTraceServiceRequest over many lines (as opentelemetry-proto's example) is not
    the line format: it is not recognised, rather than quarantined line by line."""
    report = ingest([str(PROTO_EXAMPLE)], Store(tmp_path / "st"))
    assert report.files[0].status == "skipped" and "not recognised" in report.files[0].skipped_reason


def test_the_opentelemetry_proto_example_trace(tmp_path):
    """opentelemetry-proto's examples/trace.json (Apache-2.0, tests/data/otlp/SOURCE.md), as the
    file exporter would write it: one line. Upper-case hex ids, times as JSON numbers."""
    line = json.dumps(json.loads(PROTO_EXAMPLE.read_text()), separators=(",", ":"))
    rows = events(tmp_path, [line], COLUMNS + ", ts, extra")
    assert len(rows) == 1
    r = rows[0]
    assert r[:10] == ("record", "span", "my.service", None, "5b8efff798038103d269b633813fc60c",
                      "I'm a server span", True, None, "eee19b7ec3c1b174", "eee19b7ec3c1b173")
    assert r[19] == 1000.0 and str(r[20]) == "2018-12-13 14:51:00"
    extra = json.loads(r[21])
    assert (extra["span_kind"], extra["scope"], extra["attributes"]) == \
        ("server", "my.library", {"my.span.attr": "some value"})


# -- the sample log --------------------------------------------------------------------------


def spans_per_line(path: Path) -> list[list[tuple[str, str]]]:
    out = []
    for text in path.read_text(encoding="utf-8").splitlines():
        doc = json.loads(text)
        out.append([(s["traceId"], s["spanId"]) for r in doc["resourceSpans"]
                    for ss in r["scopeSpans"] for s in ss["spans"]])
    return out


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    d = tmp_path_factory.mktemp("otlp")
    out = d / "findings.json"
    res = CliRunner().invoke(app, ["scan", str(SAMPLE), "--store", str(d / "st"),
                                   "--json", str(out)])
    return Store(d / "st"), json.loads(out.read_text()), res


def test_sample_counts_are_exact(sample):
    store, _, _ = sample
    lines = spans_per_line(SAMPLE / KEY["file"])
    assert len(lines) == KEY["lines"][KEY["file"]] == 227
    seen: set[tuple[str, str]] = set()
    expected: dict[int, int] = {}
    for n, spans in enumerate(lines, 1):
        new = [s for s in spans if s not in seen]
        seen.update(spans)
        if new:
            expected[n] = len(new)
    con = store.connect()
    got = dict(con.execute("SELECT line, count(*) FROM events GROUP BY line").fetchall())
    assert got == expected  # every span once, on the line that first delivered it
    assert sum(got.values()) == KEY["distinct_spans"] == len(seen)
    assert sum(map(len, lines)) == KEY["spans"]
    redelivered = [n for n, spans in enumerate(lines, 1) if n not in expected]
    assert len(redelivered) == 2  # two exports written twice: no event, no quarantine
    assert con.execute("SELECT count(*) FROM quarantine").fetchall() == [(0,)]
    # every line's bytes belong to its events, exactly
    assert con.execute("SELECT sum(byte_length) FROM events").fetchall()[0][0] == sum(
        len(t.encode()) + 1 for n, t in enumerate(
            (SAMPLE / KEY["file"]).read_text(encoding="utf-8").splitlines(), 1) if n in expected)


def test_sample_loops_are_found_with_their_participants(sample):
    _, doc, res = sample
    assert res.exit_code == 1
    by = {f["detector"]: f for f in doc["findings"] if f["severity"] in SERIOUS}
    # the hand-offs are messages: the pair trading them, and each side saying the same
    assert set(by) == {"repeated_error", "ping_pong", "repeated_message"}
    tools, = [i for i in KEY["incidents"] if i["kind"] == "tool_error_loop"]
    f = by["repeated_error"]
    assert (f["actors"], f["sessions"], f["events"], f["details"]["action"],
            f["details"]["error"]) == (["researcher"], [tools["session"]], tools["count"],
                                      "fetch_url", "httpx.HTTPStatusError")
    handoffs, = [i for i in KEY["incidents"] if i["kind"] == "handoff_loop"]
    f = by["ping_pong"]
    assert (sorted(f["details"]["pair"]), f["events"], f["details"]["rounds"]) == \
        (["billing", "refunds"], handoffs["count"], handoffs["count"] // 2)
    lines = {e["line"] for e in f["evidence"]}
    assert lines and all(handoffs["first_line"] <= n <= handoffs["last_line"] for n in lines)
    assert all(e["file"].endswith("otlp/traces.json") for e in f["evidence"])
    said = by["repeated_message"]
    assert set(said["actors"]) <= {"billing", "refunds"} and said["sessions"] == [handoffs["session"]]


def test_clean_twin_is_silent(tmp_path):
    """The same services without the two loops: no serious finding, and none about the loops'
    agents (billing still hands some conversations on to refunds, researcher still meets a
    429 once)."""
    from loophound.scan import scan_store
    from loophound.synth import write_otlp_traces

    write_otlp_traces(tmp_path / "clean", 7, incident=False)
    store = Store(tmp_path / "st")
    ingest([str(tmp_path / "clean")], store)
    findings = scan_store(store).document["findings"]
    loud = [f["title"] for f in findings if f["severity"] in SERIOUS
            or {"billing", "refunds", "researcher"} & set(f["actors"] + f["targets"])]
    assert loud == []


def test_sample_is_reproducible(tmp_path):
    from loophound.synth import write_otlp_traces

    assert write_otlp_traces(tmp_path, 7) == {k: v for k, v in KEY.items() if k != "dir"}
    assert (tmp_path / KEY["file"]).read_bytes() == (SAMPLE / KEY["file"]).read_bytes()


@pytest.mark.parametrize("log", ["otlp/traces.json", "bproxy/2026-06-18.log"])
def test_a_large_export_is_read_in_whole_chunks(tmp_path, monkeypatch, log):
    """A read of a large file sizes its chunks for ingest's pipeline (a small first chunk,
    smaller last ones), but not an OTLP export's: its span tree is resolved within a chunk,
    and chunks ending elsewhere would cut spans from their ancestors elsewhere."""
    from loophound import ingest as ingest_module

    source = Path(__file__).resolve().parents[1] / "sample_logs" / log
    monkeypatch.setattr(ingest_module, "GROUP_FILE_BYTES", 0)  # read alone
    monkeypatch.setattr(ingest_module, "CHUNK_BYTES", max(1024, source.stat().st_size // 4))
    asked = []
    read_lines = ingest_module.read_lines
    monkeypatch.setattr(ingest_module, "read_lines",
                        lambda *a, **kw: asked.append(kw.get("pipelined")) or read_lines(*a, **kw))
    report = ingest([str(source)], Store(tmp_path / "st"))
    assert report.files[0].events > 0 and len(asked) == 1
    assert (asked[0] is None) == log.startswith("otlp")

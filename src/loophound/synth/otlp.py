"""Synthetic OpenTelemetry traces as the Collector's `file` exporter writes them
(`traces.json`: one ExportTraceServiceRequest a line, compact JSON, agent-formats.md §1).

Four services report to one Collector, each instrumented by another library, so the file holds
the attribute names of each (agent-formats.md §2):

- `support-desk` (OpenLIT, current GenAI names): customer conversations; `triage` hands off to
  `billing` or `tech` (OpenAI Agents style: each agent turn an `invoke_agent` span under the
  request, a handoff span between them), `billing` sometimes on to `refunds`;
- `research-worker` (Pydantic AI through Logfire): `agent run` spans of agent `researcher`,
  `chat gpt-4o` calls with `operation.cost`, `running tool` spans (`tool_arguments`,
  exceptions as span events);
- `ops-monitor` (OpenLLMetry/Traceloop 0.x, the older names `gen_ai.system`,
  `gen_ai.usage.prompt_tokens`): a health check every three minutes, a summary every half hour;
- `kb-search` (OpenInference): question answering (CHAIN → RETRIEVER → LLM with
  `llm.token_count.*`, `llm.cost.total`), and an export poll that fails until it is done.

Incidents: `billing` and `refunds` handing one conversation back and forth (48 handoffs at
machine pace until the run's turn limit), and `researcher` calling `fetch_url` with the same
URL 49 times, 403 every time, until Pydantic AI's request limit (50) ends the run.

Exports: each service's batch processor exports what ended in the last 5 s; the Collector
writes each request as a line in arrival order (requests arriving within 200 ms share a
line), so children come before their parents and lines are not in time order; two requests
are delivered twice (a retry after a lost acknowledgement). Lines are compact JSON in proto
field order, integers as strings, as pdata writes them.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._common import UTC, hex_id, stream, write_lines

START = dt.datetime(2026, 5, 12, 9, 0, tzinfo=UTC)
HOURS = 3
EXPORT_S = 5.0  # the SDK batch processor's schedule delay
MERGE_MS = 200  # the Collector's batch timeout
FILE = "traces.json"
Record = dict[str, Any]

SERVICES: dict[str, list[tuple[str, Any]]] = {
    "support-desk": [("service.name", "support-desk"), ("service.version", "2.4.1"),
                     ("deployment.environment", "prod"), ("telemetry.sdk.language", "python"),
                     ("telemetry.sdk.name", "opentelemetry"), ("telemetry.sdk.version", "1.36.0")],
    "research-worker": [("service.name", "research-worker"), ("service.version", "0.9.3"),
                        ("telemetry.sdk.language", "python"), ("telemetry.sdk.name", "opentelemetry"),
                        ("telemetry.sdk.version", "1.36.0")],
    "ops-monitor": [("service.name", "ops-monitor"), ("telemetry.sdk.language", "python"),
                    ("telemetry.sdk.name", "opentelemetry"), ("telemetry.sdk.version", "1.27.0")],
    "kb-search": [("service.name", "kb-search"), ("openinference.project.name", "support-kb"),
                  ("telemetry.sdk.language", "python"), ("telemetry.sdk.name", "opentelemetry"),
                  ("telemetry.sdk.version", "1.33.1")],
}
HTTP_SCOPE = ("opentelemetry.instrumentation.fastapi", "0.57b0")
OPENLIT = ("openlit.otel.tracing", "1.35.0")
PYDANTIC_AI = ("pydantic-ai", "1.0.10")
TRACELOOP = ("opentelemetry.instrumentation.openai.v1", "0.26.4")
TRACELOOP_SDK = ("traceloop.tracer", "0.26.4")
OPENINFERENCE = ("openinference.instrumentation.llama_index", "4.3.1")

INTERNAL, SERVER, CLIENT = 1, 2, 3


@dataclass
class Span:
    service: str
    scope: tuple[str, str]
    trace: str
    span_id: str
    parent: str | None
    name: str
    kind: int
    start: int  # ns since the epoch
    end: int
    attrs: list[tuple[str, Any]]
    status: tuple[int, str] | None = None  # (code, message); None: unset
    exception: tuple[str, str] | None = None  # (type, message) of an `exception` event
    tag: str | None = None  # the incident it belongs to, for the answer key

    def record(self) -> Record:
        r: Record = {"traceId": self.trace, "spanId": self.span_id}
        if self.parent:
            r["parentSpanId"] = self.parent
        r |= {"name": self.name, "kind": self.kind, "startTimeUnixNano": str(self.start),
              "endTimeUnixNano": str(self.end), "attributes": [_kv(k, v) for k, v in self.attrs]}
        if self.exception:
            r["events"] = [{"timeUnixNano": str(self.end - 1000), "name": "exception",
                            "attributes": [_kv("exception.type", self.exception[0]),
                                           _kv("exception.message", self.exception[1]),
                                           _kv("exception.escaped", "False")]}]
        status: Record = {}
        if self.status is not None:
            status = ({"message": self.status[1]} if self.status[1] else {}) | {"code": self.status[0]}
        r["status"] = status
        return r


def _kv(key: str, value: Any) -> Record:
    if isinstance(value, bool):
        v: Record = {"boolValue": value}
    elif isinstance(value, int):
        v = {"intValue": str(value)}
    elif isinstance(value, float):
        v = {"doubleValue": value}
    elif isinstance(value, list):
        v = {"arrayValue": {"values": [{"stringValue": x} for x in value]}}
    else:
        v = {"stringValue": value}
    return {"key": key, "value": v}


def ns(t: dt.datetime) -> int:
    return int(t.timestamp()) * 10**9 + t.microsecond * 1000


def _ms(rng: random.Random, lo: float, hi: float) -> dt.timedelta:
    return dt.timedelta(microseconds=rng.randrange(int(lo * 1000), int(hi * 1000)))


class Tracer:
    """Collects the spans every service ends."""

    def __init__(self) -> None:
        self.spans: list[Span] = []

    def add(self, rng: random.Random, service: str, scope: tuple[str, str], trace: str,
            parent: str | None, name: str, kind: int, start: dt.datetime, end: dt.datetime,
            attrs: list[tuple[str, Any]], **more: Any) -> Span:
        span = Span(service, scope, trace, hex_id(rng, 16), parent, name, kind, ns(start),
                    ns(end), attrs, **more)
        self.spans.append(span)
        return span


# -- support-desk: OpenLIT, OpenAI Agents style handoffs ----------------------------------------

TOOLS = {"billing": "lookup_invoice", "tech": "search_kb", "refunds": "check_refund_eligibility"}


def _chat(tr: Tracer, rng: random.Random, trace: str, parent: str, agent: str, conv: str,
          t: dt.datetime, tag: str | None, finish: str = "stop") -> dt.datetime:
    end = t + _ms(rng, 900, 3400)
    tokens_in = rng.randint(900, 2600)
    cached = rng.choice((0, 0, 512, 1024)) if tokens_in > 1100 else 0
    tokens_out = rng.randint(40, 260)
    cost = round((tokens_in - cached) * 0.4e-6 + cached * 0.1e-6 + tokens_out * 1.6e-6, 6)
    tr.add(rng, "support-desk", OPENLIT, trace, parent, "chat gpt-4.1-mini", CLIENT, t, end, [
        ("gen_ai.operation.name", "chat"), ("gen_ai.provider.name", "openai"),
        ("gen_ai.request.model", "gpt-4.1-mini"), ("gen_ai.response.model", "gpt-4.1-mini-2025-04-14"),
        ("gen_ai.response.id", "chatcmpl-" + hex_id(rng, 24)),
        ("gen_ai.response.finish_reasons", [finish]), ("gen_ai.agent.name", agent),
        ("gen_ai.conversation.id", conv), ("gen_ai.usage.input_tokens", tokens_in),
        ("gen_ai.usage.output_tokens", tokens_out),
        ("gen_ai.usage.cache_read.input_tokens", cached), ("gen_ai.usage.cost", cost),
        ("server.address", "api.openai.com")], tag=tag)
    return end


def support_turn(tr: Tracer, rng: random.Random, conv: str, t0: dt.datetime, agents: list[str],
                 tag: str | None = None, max_turns: int | None = None) -> Record:
    """One user message: a request span, then each agent's turn; every agent but the last
    hands off to the next. With `max_turns`, the run is cut there (MaxTurnsExceeded)."""
    trace = hex_id(rng, 32)
    root = hex_id(rng, 16)
    t = t0 + _ms(rng, 2, 9)
    handoffs = 0
    invoice = f"INV-2026-{rng.randint(10000, 99999)}"
    for i, agent in enumerate(agents):
        start = t
        inv = hex_id(rng, 16)
        # in the loop only the first billing and refunds turns look anything up
        tool = TOOLS.get(agent) if tag is None or i < 3 else None
        t = _chat(tr, rng, trace, inv, agent, conv, t + _ms(rng, 3, 12), tag,
                  "tool_calls" if tool else "stop")
        if tool:
            end = t + _ms(rng, 120, 900)
            args = json.dumps({"invoice_id": invoice} if agent != "tech" else
                              {"query": rng.choice(("reset 2fa", "api rate limits", "sso setup"))})
            tr.add(rng, "support-desk", OPENLIT, trace, inv, f"execute_tool {tool}",
                   INTERNAL, t, end, [
                ("gen_ai.operation.name", "execute_tool"), ("gen_ai.tool.name", tool),
                ("gen_ai.tool.type", "function"), ("gen_ai.tool.call.id", "call_" + hex_id(rng, 24)),
                ("gen_ai.tool.call.arguments", args),
                ("gen_ai.tool.call.result", _tool_result(agent, tag))], tag=tag)
            t = _chat(tr, rng, trace, inv, agent, conv, end + _ms(rng, 2, 8), tag)
        if i + 1 < len(agents):
            nxt = agents[i + 1]
            end = t + _ms(rng, 1, 6)
            tr.add(rng, "support-desk", OPENLIT, trace, inv,
                   f"handoff from {agent} to {nxt}", INTERNAL, t, end, [
                ("gen_ai.operation.name", "handoff"), ("gen_ai.agent.name", agent),
                ("gen_ai.transfer.target.name", nxt), ("gen_ai.conversation.id", conv)], tag=tag)
            handoffs += 1
            t = end
        t += _ms(rng, 1, 4)
        cut = max_turns is not None and i + 1 == len(agents)
        tr.add(rng, "support-desk", OPENLIT, trace, root, f"invoke_agent {agent}", INTERNAL, start, t, [
            ("gen_ai.operation.name", "invoke_agent"), ("gen_ai.provider.name", "openai"),
            ("gen_ai.agent.name", agent), ("gen_ai.agent.id", "asst_" + _agent_id(agent)),
            ("gen_ai.conversation.id", conv), ("gen_ai.request.model", "gpt-4.1-mini")],
            tag=tag).span_id = inv
        t += _ms(rng, 5, 30) if not cut else dt.timedelta(0)
    end = t + _ms(rng, 3, 15)
    status = (2, f"Max turns ({max_turns}) exceeded") if max_turns else None
    tr.add(rng, "support-desk", HTTP_SCOPE, trace, None, "POST /v1/chat", SERVER, t0, end, [
        ("http.request.method", "POST"), ("url.path", "/v1/chat"), ("url.scheme", "https"),
        ("http.route", "/v1/chat"), ("http.response.status_code", 500 if max_turns else 200)],
        status=status, exception=("agents.exceptions.MaxTurnsExceeded", status[1]) if status else None,
        tag=tag).span_id = root
    return {"trace_id": trace, "handoffs": handoffs, "end": end}


def _agent_id(agent: str) -> str:
    return {"triage": "Tq8mWbL2", "billing": "Bx4nKe7R", "tech": "Tc9pZa1V",
            "refunds": "Rf3sHd6Q"}[agent]


def _tool_result(agent: str, tag: str | None) -> str:
    if agent == "refunds":
        return json.dumps({"eligible": False, "reason": "invoice under dispute: billing decides"})
    if agent == "billing":
        return json.dumps({"status": "disputed" if tag else "paid", "amount_eur": 249.0})
    return json.dumps({"articles": 3})


# -- research-worker: Pydantic AI through Logfire ----------------------------------------------

URLS = ("https://docs.example.org/pricing", "https://status.example.org/history",
        "https://blog.example.org/2026/05/launch", "https://intranet.example.org/reports/q1")


def research_run(tr: Tracer, rng: random.Random, conv: str, t0: dt.datetime, tool_calls: list[str],
                 failures: int = 0, tag: str | None = None, limit: bool = False,
                 http_error: str = "403 Forbidden") -> Record:
    """An `agent run` of `researcher`: a model call before and after each tool call. The first
    `failures` calls of the first URL fail with `http_error` (the model calls it again);
    `limit`: the run ends at Pydantic AI's request limit instead of answering."""
    trace, run = hex_id(rng, 32), hex_id(rng, 16)
    t, tokens_in, tokens_out, requests = t0 + _ms(rng, 1, 5), 0, 0, 0
    calls = [(tool_calls[0], True)] * failures + ([] if limit else [(u, False) for u in tool_calls])

    def model_call(t: dt.datetime) -> dt.datetime:
        nonlocal tokens_in, tokens_out, requests
        end = t + _ms(rng, 1100, 2600)
        i, o = rng.randint(1400, 3200) + 180 * requests, rng.randint(30, 240)
        tokens_in, tokens_out, requests = tokens_in + i, tokens_out + o, requests + 1
        tr.add(rng, "research-worker", PYDANTIC_AI, trace, run, "chat gpt-4o", CLIENT, t, end, [
            ("gen_ai.operation.name", "chat"), ("gen_ai.system", "openai"),
            ("gen_ai.request.model", "gpt-4o"), ("server.address", "api.openai.com"),
            ("gen_ai.response.model", "gpt-4o-2024-08-06"), ("gen_ai.usage.input_tokens", i),
            ("gen_ai.usage.output_tokens", o),
            ("operation.cost", round(i * 2.5e-6 + o * 10e-6, 6))], tag=tag)
        return end

    for url, fails in calls:
        t = model_call(t)
        start, t = t + _ms(rng, 1, 4), t + _ms(rng, 150, 520)
        attrs: list[tuple[str, Any]] = [
            ("gen_ai.tool.name", "fetch_url"), ("gen_ai.tool.call.id", "call_" + hex_id(rng, 24)),
            ("tool_arguments", json.dumps({"url": url})), ("logfire.msg", "running tool: fetch_url"),
            ("logfire.span_type", "span")]
        if fails:
            msg = f"Client error '{http_error}' for url '{url}'"
            tr.add(rng, "research-worker", PYDANTIC_AI, trace, run, "running tool", INTERNAL,
                   start, t, attrs, status=(2, f"HTTPStatusError: {msg}"),
                   exception=("httpx.HTTPStatusError", msg), tag=tag)
        else:
            tr.add(rng, "research-worker", PYDANTIC_AI, trace, run, "running tool", INTERNAL,
                   start, t, attrs + [("tool_response", f"<{rng.randint(4, 60)} KB of text>")],
                   tag=tag)
    end = model_call(t) if not limit else t + _ms(rng, 1, 3)
    status, exc = None, None
    if limit:
        exc = ("pydantic_ai.exceptions.UsageLimitExceeded",
               "The next request would exceed the request_limit of 50")
        status = (2, f"UsageLimitExceeded: {exc[1]}")
    tr.add(rng, "research-worker", PYDANTIC_AI, trace, None, "agent run", INTERNAL, t0, end, [
        ("model_name", "gpt-4o"), ("agent_name", "researcher"), ("gen_ai.agent.name", "researcher"),
        ("gen_ai.conversation.id", conv), ("logfire.msg", "researcher run"),
        ("logfire.span_type", "span"), ("gen_ai.usage.input_tokens", tokens_in),
        ("gen_ai.usage.output_tokens", tokens_out)], status=status, exception=exc,
        tag=tag).span_id = run
    return {"trace_id": trace, "model_requests": requests, "end": end}


# -- ops-monitor: OpenLLMetry / Traceloop, older names -------------------------------------------


def health_check(tr: Tracer, rng: random.Random, t0: dt.datetime, summarize: bool) -> None:
    trace, wf, agent = hex_id(rng, 32), hex_id(rng, 16), hex_id(rng, 16)
    t = t0 + _ms(rng, 1, 3)
    p, c = rng.randint(300, 700), rng.randint(40, 120)
    tool_end = t + _ms(rng, 40, 300)
    tr.add(rng, "ops-monitor", TRACELOOP_SDK, trace, agent, "ping_dependencies.tool", INTERNAL,
           t, tool_end, [
        ("traceloop.span.kind", "tool"), ("traceloop.entity.name", "ping_dependencies"),
        ("traceloop.workflow.name", "healthcheck"),
        ("traceloop.entity.input", json.dumps({"targets": ["postgres", "redis", "openai"]})),
        ("traceloop.entity.output", json.dumps({"postgres": "ok", "redis": "ok", "openai": "ok"}))])
    t = tool_end
    if summarize:
        end = t + _ms(rng, 700, 1800)
        tr.add(rng, "ops-monitor", TRACELOOP, trace, agent, "openai.chat", CLIENT, t, end, [
            ("llm.request.type", "chat"), ("gen_ai.system", "OpenAI"),
            ("gen_ai.request.model", "gpt-4o-mini"), ("gen_ai.usage.prompt_tokens", p),
            ("gen_ai.usage.completion_tokens", c), ("llm.usage.total_tokens", p + c),
            ("traceloop.workflow.name", "healthcheck")])
        t = end
    t += _ms(rng, 1, 3)
    tr.add(rng, "ops-monitor", TRACELOOP_SDK, trace, wf, "monitor.agent", INTERNAL, t0, t, [
        ("traceloop.span.kind", "agent"), ("traceloop.entity.name", "monitor"),
        ("traceloop.workflow.name", "healthcheck")]).span_id = agent
    t += _ms(rng, 1, 2)
    tr.add(rng, "ops-monitor", TRACELOOP_SDK, trace, None, "healthcheck.workflow", INTERNAL, t0, t, [
        ("traceloop.span.kind", "workflow"), ("traceloop.entity.name", "healthcheck"),
        ("traceloop.workflow.name", "healthcheck")]).span_id = wf


# -- kb-search: OpenInference ------------------------------------------------------------------


def kb_query(tr: Tracer, rng: random.Random, session: str, t0: dt.datetime) -> None:
    trace, chain = hex_id(rng, 32), hex_id(rng, 16)
    question = rng.choice(("How do I rotate an API key?", "Which plans include SSO?",
                           "Why was my card declined?", "How do I export invoices?"))
    t = t0 + _ms(rng, 1, 4)
    ret_end = t + _ms(rng, 60, 400)
    tr.add(rng, "kb-search", OPENINFERENCE, trace, chain, "retrieve", INTERNAL, t, ret_end, [
        ("openinference.span.kind", "RETRIEVER"), ("session.id", session),
        ("input.value", question)])
    end = ret_end + _ms(rng, 600, 2400)
    p, c = rng.randint(800, 2400), rng.randint(60, 300)
    tr.add(rng, "kb-search", OPENINFERENCE, trace, chain, "llm", CLIENT, ret_end, end, [
        ("openinference.span.kind", "LLM"), ("session.id", session), ("llm.provider", "openai"),
        ("llm.system", "openai"), ("llm.model_name", "gpt-4o-mini"),
        ("llm.token_count.prompt", p), ("llm.token_count.completion", c),
        ("llm.token_count.total", p + c), ("llm.cost.total", round(p * 0.15e-6 + c * 0.6e-6, 6))])
    end += _ms(rng, 1, 5)
    tr.add(rng, "kb-search", OPENINFERENCE, trace, None, "query", INTERNAL, t0, end, [
        ("openinference.span.kind", "CHAIN"), ("session.id", session),
        ("input.value", question)]).span_id = chain


def export_poll(tr: Tracer, rng: random.Random, session: str, t0: dt.datetime,
                not_ready: int) -> Record:
    """Agent `reporter` polls an export, backing off (2, 4, 8, ... s), until it is done."""
    trace, agent = hex_id(rng, 32), hex_id(rng, 16)
    export = "exp_" + hex_id(rng, 12)
    t, wait = t0 + _ms(rng, 1, 4), 2.0
    for i in range(not_ready + 1):
        end = t + _ms(rng, 30, 200)
        done = i == not_ready
        tr.add(rng, "kb-search", OPENINFERENCE, trace, agent, "get_export_status", INTERNAL, t, end, [
            ("openinference.span.kind", "TOOL"), ("tool.name", "get_export_status"),
            ("session.id", session), ("input.value", json.dumps({"export_id": export})),
            ("output.value", json.dumps({"state": "done" if done else "running"}))],
            status=(1, "") if done else (2, "ExportNotReady: export still running"))
        t = end + (dt.timedelta(0) if done else dt.timedelta(seconds=wait) + _ms(rng, 0, 300))
        wait *= 2
    tr.add(rng, "kb-search", OPENINFERENCE, trace, None, "reporter", INTERNAL, t0, t + _ms(rng, 1, 3), [
        ("openinference.span.kind", "AGENT"), ("agent.name", "reporter"),
        ("session.id", session)]).span_id = agent
    return {"kind": "poll_until_done", "actor": "reporter", "tool": "get_export_status",
            "not_ready": not_ready, "loop": False}


# -- the Collector ------------------------------------------------------------------------------


def _exports(spans: list[Span], rng: random.Random) -> list[tuple[int, str, list[Span]]]:
    """(arrival ns, service, spans) of every export request: each service exports what ended
    in each 5 s window of its own schedule, arriving 20-300 ms later."""
    phase = {s: rng.randrange(0, int(EXPORT_S * 1000)) * 10**6 for s in SERVICES}
    by_window: dict[tuple[str, int], list[Span]] = {}
    step = int(EXPORT_S * 1e9)
    for sp in sorted(spans, key=lambda s: (s.end, s.span_id)):
        k = (sp.end - phase[sp.service]) // step + 1
        by_window.setdefault((sp.service, k), []).append(sp)
    out = []
    for (service, k), group in sorted(by_window.items()):
        sent = phase[service] + k * step
        out.append((sent + rng.randrange(20, 300) * 10**6, service, group))
    return sorted(out, key=lambda e: (e[0], e[1]))


def resource_spans(service: str, group: list[Span],
                   services: dict[str, list[tuple[str, Any]]] = SERVICES) -> Record:
    """One service's spans as an export's `resourceSpans` entry, grouped by scope."""
    scopes: dict[tuple[str, str], list[Record]] = {}
    for sp in group:
        scopes.setdefault(sp.scope, []).append(sp.record())
    return {"resource": {"attributes": [_kv(k, v) for k, v in services[service]]},
            "scopeSpans": [{"scope": {"name": n, "version": v}, "spans": recs}
                           for (n, v), recs in scopes.items()]}


def collector_lines(spans: list[Span], seed: int) -> tuple[list[str], list[list[Span]]]:
    """The file's lines, and the spans of each; requests arriving within MERGE_MS of a line's
    first share it, and two ops-monitor requests are written again 10 s later."""
    rng = stream(seed, "otlp-collector")
    exports = _exports(spans, rng)
    monitor = [i for i, e in enumerate(exports) if e[1] == "ops-monitor"]
    again = set(rng.sample(monitor, 2))
    arrivals = [(a, i, svc, grp) for i, (a, svc, grp) in enumerate(exports)]
    arrivals += [(exports[i][0] + 10 * 10**9, len(exports) + i, exports[i][1], exports[i][2])
                 for i in sorted(again)]
    lines: list[tuple[int, list[tuple[str, list[Span]]]]] = []
    for arrival, i, svc, grp in sorted(arrivals):
        resent = i >= len(exports)
        if lines and not resent and arrival - lines[-1][0] <= MERGE_MS * 10**6 \
                and not lines[-1][2]:
            lines[-1][1].append((svc, grp))
        else:
            lines.append((arrival, [(svc, grp)], resent))
    text, members = [], []
    for _, parts, _ in lines:
        doc = {"resourceSpans": [resource_spans(svc, grp) for svc, grp in parts]}
        text.append(json.dumps(doc, separators=(",", ":"), ensure_ascii=False))
        members.append([sp for _, grp in parts for sp in grp])
    return text, members


# -- the scenario ----------------------------------------------------------------------------------


@dataclass
class _Day:
    tr: Tracer = field(default_factory=Tracer)
    healthy: list[Record] = field(default_factory=list)
    incidents: list[Record] = field(default_factory=list)


def _conversations(day: _Day, seed: int) -> None:
    routes = [["triage", "billing"], ["triage", "tech"], ["triage", "billing"], ["triage"],
              ["triage", "tech"], ["triage", "billing"]]
    n = 0
    for k in range(24):
        rng = stream(seed, f"otlp-support-{k}")
        conv = "conv_" + hex_id(rng, 24)
        t = START + dt.timedelta(minutes=k * 7.3 + rng.uniform(0, 4))
        # billing sends refunds questions on, only in the first hour (an hour before the loop)
        route = ["triage", "billing", "refunds"] if k in (2, 6) else routes[k % len(routes)]
        for _ in range(rng.choice((1, 1, 2))):
            support_turn(day.tr, rng, conv, t, route)
            n += 1
            t += dt.timedelta(minutes=rng.uniform(2, 6))
    day.healthy.append({"kind": "conversations", "service": "support-desk", "turns": n,
                        "loop": False})


def _research(day: _Day, seed: int) -> None:
    for k in range(10):
        rng = stream(seed, f"otlp-research-{k}")
        conv = "conv_" + hex_id(rng, 24)
        t = START + dt.timedelta(minutes=6 + k * 17 + rng.uniform(0, 5))
        urls = rng.sample(URLS, rng.randint(1, 2))
        # one run is rate-limited once and the same page works the second time: an ordinary
        # failure, not a loop
        research_run(day.tr, rng, conv, t, urls, failures=1 if k == 4 else 0,
                     http_error="429 Too Many Requests")
    day.healthy.append({"kind": "research_runs", "service": "research-worker", "runs": 10,
                        "loop": False})


def _monitor_and_kb(day: _Day, seed: int) -> None:
    rng = stream(seed, "otlp-monitor")
    checks = 0
    t = START + dt.timedelta(seconds=rng.randint(5, 40))
    while t < START + dt.timedelta(hours=HOURS):
        health_check(day.tr, rng, t, summarize=checks % 10 == 0)
        checks += 1
        t += dt.timedelta(minutes=3, milliseconds=rng.randint(-40, 40))
    day.healthy.append({"kind": "health_check", "actor": "monitor", "tool": "ping_dependencies",
                        "every_s": 180, "count": checks, "loop": False})
    rng = stream(seed, "otlp-kb")
    for k in range(20):
        session = "sess_" + hex_id(rng, 16)
        kb_query(day.tr, rng, session, START + dt.timedelta(minutes=4 + k * 8.7 + rng.uniform(0, 3)))
    for k, (minute, not_ready) in enumerate(((52, 4), (133, 5))):
        rng = stream(seed, f"otlp-poll-{k}")
        day.healthy.append(export_poll(day.tr, rng, "sess_" + hex_id(rng, 16),
                                       START + dt.timedelta(minutes=minute), not_ready))


def _incidents(day: _Day, seed: int) -> None:
    rng = stream(seed, "otlp-handoff-loop")
    conv = "conv_" + hex_id(rng, 24)
    agents = ["triage", "billing"] + ["refunds", "billing"] * 24
    t0 = START + dt.timedelta(hours=2, minutes=20, seconds=13)
    turn = support_turn(day.tr, rng, conv, t0, agents, tag="handoff_loop", max_turns=len(agents))
    day.incidents.append({"kind": "handoff_loop", "peers": ["billing", "refunds"],
                          "session": conv, "count": turn["handoffs"] - 1,
                          "trace_id": turn["trace_id"], "start": t0.isoformat(),
                          "end": turn["end"].isoformat(), "loop": True})
    rng = stream(seed, "otlp-tool-loop")
    conv = "conv_" + hex_id(rng, 24)
    t0 = START + dt.timedelta(hours=1, minutes=41, seconds=7)
    run = research_run(day.tr, rng, conv, t0, ["https://intranet.example.org/reports/q3-board.pdf"],
                       failures=50, tag="tool_error_loop", limit=True)
    day.incidents.append({"kind": "tool_error_loop", "actor": "researcher", "session": conv,
                          "action": "fetch_url", "error": "httpx.HTTPStatusError", "count": 50,
                          "model_requests": run["model_requests"], "trace_id": run["trace_id"],
                          "start": t0.isoformat(), "end": run["end"].isoformat(), "loop": True})


def write_otlp_traces(outdir: Path, seed: int = 7, *, incident: bool = True) -> Record:
    """Write three hours of four services' traces as the Collector's file exporter does.
    `incident=False` gives the clean twin: the same services without the two loops. Returns
    the answer key."""
    day = _Day()
    _conversations(day, seed)
    _research(day, seed)
    _monitor_and_kb(day, seed)
    if incident:
        _incidents(day, seed)
    text, members = collector_lines(day.tr.spans, seed)
    n = write_lines(Path(outdir) / FILE, text)
    for entry in day.incidents:
        at = [i for i, spans in enumerate(members, 1) if any(s.tag == entry["kind"] for s in spans)]
        entry["first_line"], entry["last_line"] = at[0], at[-1]
    spans = sum(len(m) for m in members)
    return {"format": "otlp", "file": FILE, "lines": {FILE: n}, "spans": spans,
            "distinct_spans": len(day.tr.spans),
            "incidents": day.incidents, "healthy": day.healthy}

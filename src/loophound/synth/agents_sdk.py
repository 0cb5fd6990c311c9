"""Synthetic OpenTelemetry traces of agents that hand a conversation on without handoff spans
(OTLP/JSON lines, one export a line, agent-formats.md §1-2).

`helpdesk` runs OpenAI Agents SDK agents, traced with the GenAI names (the contrib
`opentelemetry-instrumentation-openai-agents-v2` shape): each user turn is a trace under the
web request (`POST /v1/chat`); each agent's turn an `invoke_agent <Agent>` span with its
`chat` calls and `execute_tool` calls; a hand-off is the SDK's tool `transfer_to_<agent>`
(`transfer_to_billing_agent` for "Billing Agent"), then the next agent's `invoke_agent` span.
No handoff span: what the trace states of the hand-off is the tool call and who runs next.

`studio` runs a two-agent group chat (AG2 style, `gen_ai.conversation.id` on every span): each
agent's reply is a trace of its own, an `invoke_agent` root with its `chat` call; who spoke
before is only the conversation's order.

Incidents: `Billing Agent` and `Refunds Agent` transferring one conversation back and forth
(32 transfers at machine pace, until the SDK's max turns), and `writer` and `critic` trading
36 replies in one conversation. Healthy: triage handing each conversation once to one
specialist (sometimes on to a second), a customer whose four questions go each to another
specialist (the triage agent hands off once to each), and short writer/critic reviews of
three rounds.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from pathlib import Path
from typing import Any

from ._common import UTC, hex_id, stream, write_lines
from .otlp import CLIENT, INTERNAL, SERVER, Span, Tracer, resource_spans

START = dt.datetime(2026, 7, 2, 14, 0, tzinfo=UTC)
FILE = "agents.jsonl"
SCOPE = ("opentelemetry.instrumentation.openai_agents", "0.1b0")
HTTP = ("opentelemetry.instrumentation.fastapi", "0.57b0")
AG2 = ("ag2.opentelemetry", "0.9.9")
RESOURCES = {
    "helpdesk": [("service.name", "helpdesk"), ("service.version", "3.1.0"),
                 ("telemetry.sdk.language", "python"), ("telemetry.sdk.version", "1.37.0")],
    "studio": [("service.name", "studio"), ("telemetry.sdk.language", "python"),
               ("telemetry.sdk.version", "1.37.0")],
}
TRIAGE = "Triage Agent"
SPECIALISTS = {"Billing Agent": "lookup_invoice", "Tech Agent": "search_kb",
               "Orders Agent": "track_order", "Refunds Agent": "check_refund"}
MAX_TURNS = 34  # the run's max_turns in the transfer loop
Record = dict[str, Any]


def tool_name(agent: str) -> str:
    """The SDK's handoff tool for `agent` (`transform_string_function_style`)."""
    return "transfer_to_" + "".join(c if c.isalnum() or c == "_" else "_" for c in agent).lower()


def _ms(rng: random.Random, lo: float, hi: float) -> dt.timedelta:
    return dt.timedelta(milliseconds=rng.uniform(lo, hi))


def _ns(t: dt.datetime) -> int:
    return int(t.timestamp()) * 10**9 + t.microsecond * 1000


class _Trace:
    """The spans of one trace, added as their times are known."""

    def __init__(self, tr: Tracer, rng: random.Random, service: str, conv: str,
                 tag: str | None) -> None:
        self.tr, self.rng, self.service, self.conv, self.tag = tr, rng, service, conv, tag
        self.trace = hex_id(rng, 32)

    def span(self, scope: tuple[str, str], parent: str | None, name: str, kind: int,
             start: dt.datetime, end: dt.datetime, attrs: list[tuple[str, Any]],
             span_id: str | None = None, **more: Any) -> str:
        sid = span_id or hex_id(self.rng, 16)
        self.tr.spans.append(Span(self.service, scope, self.trace, sid, parent, name, kind,
                                  _ns(start), _ns(end), attrs, tag=self.tag, **more))
        return sid

    def chat(self, parent: str, agent: str, t: dt.datetime, scope=SCOPE) -> dt.datetime:
        end = t + _ms(self.rng, 700, 2600)
        self.span(scope, parent, "chat gpt-4.1", CLIENT, t, end, [
            ("gen_ai.operation.name", "chat"), ("gen_ai.provider.name", "openai"),
            ("gen_ai.request.model", "gpt-4.1"), ("gen_ai.response.model", "gpt-4.1-2025-04-14"),
            ("gen_ai.agent.name", agent), ("gen_ai.conversation.id", self.conv),
            ("gen_ai.usage.input_tokens", self.rng.randint(900, 3000)),
            ("gen_ai.usage.output_tokens", self.rng.randint(20, 240))])
        return end

    def tool(self, parent: str, agent: str, name: str, args: dict, result: str,
             t: dt.datetime) -> dt.datetime:
        end = t + _ms(self.rng, 2, 400)
        self.span(SCOPE, parent, f"execute_tool {name}", INTERNAL, t, end, [
            ("gen_ai.operation.name", "execute_tool"), ("gen_ai.tool.name", name),
            ("gen_ai.tool.type", "function"), ("gen_ai.agent.name", agent),
            ("gen_ai.tool.call.id", "call_" + hex_id(self.rng, 24)),
            ("gen_ai.tool.call.arguments", json.dumps(args)), ("gen_ai.tool.call.result", result),
            ("gen_ai.conversation.id", self.conv)])
        return end


def support_run(tr: Tracer, rng: random.Random, conv: str, t0: dt.datetime, agents: list[str],
                tag: str | None = None, max_turns: int | None = None) -> Record:
    """One user turn: the web request, then each agent's turn; each agent but the last ends its
    turn with the transfer tool to the next. With `max_turns` the run ends there in error."""
    x = _Trace(tr, rng, "helpdesk", conv, tag)
    root = hex_id(rng, 16)
    t = t0 + _ms(rng, 3, 12)
    transfers = 0
    for i, agent in enumerate(agents):
        start, inv = t, hex_id(rng, 16)
        t = x.chat(inv, agent, t + _ms(rng, 2, 9))
        work = SPECIALISTS.get(agent)
        if work and (tag is None or i < 3):  # in the loop only the first turns do any work
            t = x.tool(inv, agent, work, {"customer": conv[-6:]}, '{"status": "open"}',
                       t + _ms(rng, 2, 8))
            t = x.chat(inv, agent, t + _ms(rng, 2, 8))
        if i + 1 < len(agents):
            t = x.tool(inv, agent, tool_name(agents[i + 1]), {},
                       json.dumps({"assistant": agents[i + 1]}), t + _ms(rng, 1, 5))
            transfers += 1
        t += _ms(rng, 1, 4)
        x.span(SCOPE, root, f"invoke_agent {agent}", INTERNAL, start, t, [
            ("gen_ai.operation.name", "invoke_agent"), ("gen_ai.provider.name", "openai"),
            ("gen_ai.agent.name", agent), ("gen_ai.conversation.id", conv)], span_id=inv)
        t += _ms(rng, 2, 20)
    end = t + _ms(rng, 3, 15)
    failed = max_turns is not None
    x.span(HTTP, None, "POST /v1/chat", SERVER, t0, end, [
        ("http.request.method", "POST"), ("http.route", "/v1/chat"),
        ("http.response.status_code", 500 if failed else 200)], span_id=root,
        status=(2, f"Max turns ({max_turns}) exceeded") if failed else None)
    return {"trace_id": x.trace, "transfers": transfers, "end": end}


def group_chat(tr: Tracer, rng: random.Random, conv: str, t0: dt.datetime, replies: int,
               tag: str | None = None) -> Record:
    """`writer` and `critic` replying in turn, each reply a trace of its own."""
    t = t0
    for i in range(replies):
        agent = ("writer", "critic")[i % 2]
        x = _Trace(tr, rng, "studio", conv, tag)
        inv = hex_id(rng, 16)
        end = x.chat(inv, agent, t + _ms(rng, 2, 8), scope=AG2) + _ms(rng, 1, 5)
        x.span(AG2, None, f"invoke_agent {agent}", INTERNAL, t, end, [
            ("gen_ai.operation.name", "invoke_agent"), ("gen_ai.agent.name", agent),
            ("gen_ai.conversation.id", conv), ("ag2.span.type", "agent")], span_id=inv)
        t = end + _ms(rng, 5, 40)
    return {"end": t}


def _healthy(tr: Tracer, seed: int) -> list[Record]:
    out: list[Record] = []
    rng = stream(seed, "sdk-triage")
    names = list(SPECIALISTS)
    for k in range(14):
        conv = "conv_" + hex_id(rng, 20)
        t = START + dt.timedelta(minutes=6 * k, seconds=rng.randint(0, 50))
        first = names[k % len(names)]
        chain = [TRIAGE, first] + (["Refunds Agent"] if first == "Billing Agent" and k % 2 else [])
        for turn in range(1 + k % 3):  # a later turn of the customer starts at triage again
            support_run(tr, rng, conv, t, chain if turn == 0 else [TRIAGE, first])
            t += dt.timedelta(minutes=2, seconds=rng.randint(0, 90))
    out.append({"kind": "single_handoffs", "conversations": 14, "loop": False})
    rng = stream(seed, "sdk-four-questions")
    conv = "conv_" + hex_id(rng, 20)
    t = START + dt.timedelta(minutes=40)
    for agent in names:  # four questions, each handed once to another specialist
        support_run(tr, rng, conv, t, [TRIAGE, agent])
        t += dt.timedelta(minutes=3, seconds=rng.randint(0, 60))
    out.append({"kind": "triage_to_each_specialist", "session": conv, "loop": False})
    rng = stream(seed, "studio-reviews")
    for k in range(5):
        conv = "chat_" + hex_id(rng, 16)
        group_chat(tr, rng, conv, START + dt.timedelta(minutes=9 * k + 3), replies=6)
    out.append({"kind": "short_reviews", "conversations": 5, "rounds": 3, "loop": False})
    return out


def _incidents(tr: Tracer, seed: int) -> list[Record]:
    rng = stream(seed, "sdk-transfer-loop")
    conv = "conv_" + hex_id(rng, 20)
    agents = [TRIAGE, "Billing Agent"] + ["Refunds Agent", "Billing Agent"] * 16
    t0 = START + dt.timedelta(minutes=55)
    run = support_run(tr, rng, conv, t0, agents, tag="transfer_loop", max_turns=MAX_TURNS)
    out = [{"kind": "transfer_loop", "peers": ["Billing Agent", "Refunds Agent"],
            "session": conv, "count": run["transfers"] - 1, "trace_id": run["trace_id"],
            "start": t0.isoformat(), "end": run["end"].isoformat(), "loop": True}]
    rng = stream(seed, "studio-loop")
    conv = "chat_" + hex_id(rng, 16)
    t0 = START + dt.timedelta(minutes=70)
    chat = group_chat(tr, rng, conv, t0, replies=36, tag="succession_loop")
    out.append({"kind": "succession_loop", "peers": ["critic", "writer"], "session": conv,
                "count": 35, "start": t0.isoformat(), "end": chat["end"].isoformat(),
                "loop": True})
    return out


def write_agents_sdk_traces(outdir: Path, seed: int = 11, *, incident: bool = True) -> Record:
    """Write the two services' traces, one export (a trace) a line in the order they ended;
    `incident=False` gives the clean twin. Returns the answer key (`first_line`/`last_line` of
    each incident)."""
    tr = Tracer()
    healthy = _healthy(tr, seed)
    incidents = _incidents(tr, seed) if incident else []
    traces: dict[str, list[Span]] = {}
    for sp in tr.spans:
        traces.setdefault(sp.trace, []).append(sp)
    ordered = sorted(traces.values(), key=lambda spans: max(s.end for s in spans))
    lines = [json.dumps({"resourceSpans": [resource_spans(spans[0].service, spans, RESOURCES)]},
                        separators=(",", ":"))
             for spans in ordered]
    n = write_lines(Path(outdir) / FILE, lines)
    for entry in incidents:
        at = [i for i, spans in enumerate(ordered, 1) if spans[0].tag == entry["kind"]]
        entry["first_line"], entry["last_line"] = at[0], at[-1]
    return {"format": "otlp", "file": FILE, "lines": {FILE: n}, "spans": len(tr.spans),
            "incidents": incidents, "healthy": healthy}


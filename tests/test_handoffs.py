"""Hand-offs between agents, from whatever shape the trace gives them, become messages from
the agent handing off to the agent taking over, so that ping_pong and repeated_message see a
conversation passed back and forth: handoff spans (the GenAI `handoff`, the contrib OpenAI
Agents instrumentation's `agent_handoff`, OpenLLMetry's `A → B.handoff`), the OpenAI Agents
SDK's `transfer_to_<agent>` tool followed by that agent's `invoke_agent` span, and successive
agents of one conversation. The scenario (synth/agents_sdk.py) plants a transfer loop and a
group-chat loop; its clean twin holds single hand-offs, a triage agent handing on once to each
specialist, and short reviews, and must stay quiet."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agent_transcripts import SERIOUS

from loophound import ingest as ingest_module
from loophound.ingest import ingest
from loophound.scan import scan_store
from loophound.store import Store
from loophound.synth.agents_sdk import tool_name, write_agents_sdk_traces

T0 = 1_783_000_000 * 10**9  # ns


def span(trace: str, sid: str, parent: str | None, name: str, at_s: float,
         attrs: dict[str, str]) -> dict:
    out = {"traceId": trace, "spanId": sid, "name": name, "kind": 1,
           "startTimeUnixNano": str(T0 + int(at_s * 1e9)),
           "endTimeUnixNano": str(T0 + int((at_s + 0.5) * 1e9)),
           "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()],
           "status": {}}
    return out | ({"parentSpanId": parent} if parent else {})


def export(path: Path, spans: list[dict]) -> Path:
    doc = {"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "desk"}}]},
        "scopeSpans": [{"scope": {"name": "t"}, "spans": spans}]}]}
    path.write_text(json.dumps(doc) + "\n")
    return path


def agent(trace: str, sid: str, name: str, at: float, conv: str = "c1",
          parent: str | None = "00000000000000aa") -> dict:
    return span(trace, sid, parent, f"invoke_agent {name}", at,
                {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name,
                 "gen_ai.conversation.id": conv})


def tool(trace: str, sid: str, parent: str, name: str, at: float, by: str) -> dict:
    return span(trace, sid, parent, f"execute_tool {name}", at,
                {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                 "gen_ai.agent.name": by, "gen_ai.tool.call.arguments": "{}"})


def events(tmp_path: Path, spans: list[dict]) -> list[tuple]:
    store = Store(tmp_path / "st")
    ingest([str(export(tmp_path / "t.jsonl", spans))], store)
    return store.connect().execute(
        "SELECT corr_id, kind, actor, target, action, extra->>'handoff', channel, session "
        "FROM events ORDER BY ts, corr_id").fetchall()


TR = "0af7651916cd43dd8448eb211c80319c"


def test_the_sdk_names_its_handoff_tool_after_the_agent():
    assert tool_name("Billing Agent") == "transfer_to_billing_agent"
    assert tool_name("refunds-v2") == "transfer_to_refunds_v2"


def test_a_transfer_tool_followed_by_its_agent_is_a_message_to_it(tmp_path):
    got = events(tmp_path, [
        agent(TR, "00000000000000a1", "Billing Agent", 0),
        tool(TR, "00000000000000b1", "00000000000000a1", "transfer_to_refunds_agent", 1, "Billing Agent"),
        agent(TR, "00000000000000a2", "Refunds Agent", 2),
        # a transfer no agent span follows (the run failed): a tool call, no hand-off
        tool(TR, "00000000000000b2", "00000000000000a2", "transfer_to_billing_agent", 3, "Refunds Agent"),
    ])
    by = {g[0]: g[1:] for g in got}
    assert by["00000000000000b1"][:6] == ("message", "Billing Agent", "Refunds Agent",
                                          "transfer_to_refunds_agent", "transfer_tool", "c1")
    assert by["00000000000000b2"][:4] == ("tool_call", "Refunds Agent", "transfer_to_billing_agent",
                                          "transfer_to_billing_agent")
    # both agent spans sit under the request: the second took over by the transfer, not by
    # succession (the transfer says it already)
    assert by["00000000000000a2"][:2] == ("request", "desk")


def test_a_handoff_span_states_the_edge_once(tmp_path):
    """The SDK's own tracing writes a handoff span for the transfer: the span is the message,
    the tool call stays a tool call; the contrib instrumentation's names and OpenLLMetry's."""
    got = events(tmp_path, [
        agent(TR, "00000000000000a1", "Billing Agent", 0),
        tool(TR, "00000000000000b1", "00000000000000a1", "transfer_to_refunds_agent", 1, "Billing Agent"),
        span(TR, "00000000000000c1", "00000000000000a1", "agent_handoff", 1.2, {
            "gen_ai.operation.name": "agent_handoff", "gen_ai.handoff.from_agent": "Billing Agent",
            "gen_ai.handoff.to_agent": "Refunds Agent"}),
        agent(TR, "00000000000000a2", "Refunds Agent", 2),
        span(TR, "00000000000000c2", "00000000000000a2", "Refunds Agent → Billing Agent.handoff", 3,
             {"traceloop.span.kind": "handoff"}),
        agent(TR, "00000000000000a3", "Billing Agent", 4),
    ])
    by = {g[0]: g[1:] for g in got}
    assert by["00000000000000b1"][0] == "tool_call"
    assert by["00000000000000c1"][:5] == ("message", "Billing Agent", "Refunds Agent", "handoff", "span")
    assert by["00000000000000c2"][:5] == ("message", "Refunds Agent", "Billing Agent", "handoff", "span")
    assert [g for g in got if g[5] in ("transfer_tool", "conversation")] == []


def test_successive_agents_of_a_conversation_hand_it_on(tmp_path):
    """Each reply a trace of its own (a group chat): who spoke before is the conversation's
    order. A new user turn (a trace under the web request) that starts at triage again is the
    user's, not a hand-off."""
    t1, t2, t3 = "1" * 32, "2" * 32, "3" * 32
    got = events(tmp_path, [
        agent(t1, "00000000000000a1", "writer", 0, conv="g", parent=None),
        agent(t2, "00000000000000a2", "critic", 5, conv="g", parent=None),
        agent(t3, "00000000000000a3", "writer", 9, conv="g", parent=None),
        # another conversation's turns: a user's requests, each starting at triage
        span("4" * 32, "00000000000000f4", None, "POST /v1/chat", 20, {}),
        agent("4" * 32, "00000000000000a4", "triage", 20, conv="u", parent="00000000000000f4"),
        span("5" * 32, "00000000000000f5", None, "POST /v1/chat", 200, {}),
        agent("5" * 32, "00000000000000a5", "billing", 201, conv="u", parent="00000000000000f5"),
    ])
    by = {g[0]: g[1:] for g in got}
    assert by["00000000000000a1"][:2] == ("request", "desk")
    assert by["00000000000000a2"][:6] == ("message", "writer", "critic", "invoke_agent critic",
                                          "conversation", "g")
    assert by["00000000000000a3"][:3] == ("message", "critic", "writer")
    assert by["00000000000000a5"][0] == "request"


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> tuple[dict, dict, Store]:
    out = tmp_path_factory.mktemp("sdk")
    key = write_agents_sdk_traces(out / "logs")
    store = Store(out / "st")
    ingest([str(out / "logs")], store)
    return key, scan_store(store).document, store


def test_every_transfer_is_a_message_between_the_agents(planted):
    key, _, store = planted
    loop = next(i for i in key["incidents"] if i["kind"] == "transfer_loop")
    got = dict(((a, t), n) for a, t, n in store.connect().execute(
        "SELECT actor, target, count(*) FROM events WHERE extra->>'handoff' = 'transfer_tool' "
        "AND session = ? GROUP BY ALL", [loop["session"]]).fetchall())
    assert got == {("Triage Agent", "Billing Agent"): 1,
                   ("Billing Agent", "Refunds Agent"): loop["count"] // 2,
                   ("Refunds Agent", "Billing Agent"): loop["count"] // 2}
    # the spans are all still there: one event each
    assert store.connect().execute("SELECT count(*) FROM events").fetchall() == [(key["spans"],)]


@pytest.mark.parametrize("kind", ["transfer_loop", "succession_loop"])
def test_the_planted_back_and_forth_is_found(planted, kind):
    key, doc, _ = planted
    loop = next(i for i in key["incidents"] if i["kind"] == kind)
    found = [f for f in doc["findings"] if set(f["actors"]) == set(loop["peers"])]
    assert {f["detector"] for f in found} >= {"ping_pong", "repeated_message"}
    said = next(f for f in found if f["detector"] == "repeated_message")
    assert said["severity"] in SERIOUS and said["sessions"] == [loop["session"]]
    assert said["events"] >= loop["count"] - 1
    pong = next(f for f in found if f["detector"] == "ping_pong")
    assert loop["session"] in pong["sessions"]  # the conversation passed back and forth
    assert pong["details"]["rounds"] >= loop["count"] // 2 - 1
    assert all(loop["first_line"] <= e["line"] <= loop["last_line"] for e in pong["evidence"])


def test_the_clean_twin_is_quiet(tmp_path):
    key = write_agents_sdk_traces(tmp_path / "logs", incident=False)
    assert {h["kind"] for h in key["healthy"]} == {
        "single_handoffs", "triage_to_each_specialist", "short_reviews"}
    store = Store(tmp_path / "st")
    ingest([str(tmp_path / "logs")], store)
    # the decoys do hand conversations on: 30+ hand-offs, and a triage agent to four agents
    said = dict(store.connect().execute(
        "SELECT extra->>'handoff', count(*) FROM events WHERE kind = 'message' GROUP BY ALL"
    ).fetchall())
    assert said["transfer_tool"] > 30 and said["conversation"] == 5 * 5
    doc = scan_store(store).document
    assert doc["coverage"]["verdict"] == "clean", [f["title"] for f in doc["findings"]]


def test_a_chunked_read_infers_the_same_hand_offs(tmp_path, monkeypatch):
    """`finish` runs again over the lines held back between chunks: what it inferred before
    is undone and inferred again, never twice (a transfer is not read as a message twice, an
    actor not replaced by another). A succession that crosses a chunk's end is not seen."""
    write_agents_sdk_traces(tmp_path / "logs")
    whole, parts = Store(tmp_path / "a"), Store(tmp_path / "b")
    ingest([str(tmp_path / "logs")], whole)
    size = (tmp_path / "logs" / "agents.jsonl").stat().st_size
    monkeypatch.setattr(ingest_module, "GROUP_FILE_BYTES", 0)
    monkeypatch.setattr(ingest_module, "CHUNK_BYTES", size // 5)
    ingest([str(tmp_path / "logs")], parts)
    sql = ("SELECT corr_id, kind, actor, target, extra->>'handoff' FROM events "
           "WHERE extra->>'handoff' IS NOT NULL ORDER BY corr_id")
    a, b = (set(s.connect().execute(sql).fetchall()) for s in (whole, parts))
    assert {r for r in a if r[4] != "conversation"} == {r for r in b if r[4] != "conversation"}
    assert b <= a and len(a - b) <= 5  # a chunk's end cuts at most one succession

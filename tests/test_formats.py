"""The format modules sven, labtrust, hooks and generic: small files written like the real
systems write them (log-formats.md), ingested into a store, and read back column by column."""

from __future__ import annotations

import datetime as dt
import json
import tomllib
from pathlib import Path

import pytest

from loophound import formats
from loophound.errors import MappingError
from loophound.formats import generic, labtrust, sven
from loophound.formats.base import FormatContext
from loophound.ingest import IngestOptions, ingest
from loophound.store import Store

PEER_A = "12D3KooWAbcGatewayA1111111111111111111111111111"
PEER_B = "12D3KooWBcdGatewayB2222222222222222222222222222"
BOT = "12D3KooWXyzBuildAgent33333333333333333333333333"


def T(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


def write(path: Path, records: list[dict | str], **dumps) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [r if isinstance(r, str) else json.dumps(r, **dumps) for r in records]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def load(tmp_path: Path, paths: list[Path], columns: str, options: IngestOptions | None = None,
         where: str = "true") -> list[tuple]:
    store = Store(tmp_path / "st")
    report = ingest([str(p) for p in paths], store, options)
    assert all(f.status == "new" for f in report.files), [(f.path, f.status) for f in report.files]
    con = store.connect()
    return con.execute(f"SELECT {columns} FROM events WHERE {where} ORDER BY file, line").fetchall()


def extra(value: str | None) -> dict:
    return json.loads(value) if value else {}


# -- sven ----------------------------------------------------------------------------------


def sven_compact(record: dict) -> str:
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False)


SVEN_PEER = [
    {"message_id": "3f6a1b20-9c1e-4b7a-8f0e-2d9c7a1e5b44", "seq": 0,
     "timestamp": "2025-03-02T14:23:01.123Z", "direction": "outbound", "peer_id": PEER_B,
     "role": "user", "content": [{"type": "text", "text": "check the build"}], "depth": 1},
    {"message_id": "5b1e2c30-0d2f-4c8b-9a1f-3e0d8b2f6c55", "seq": 1,
     "timestamp": "2025-03-02T14:23:05.987654321Z", "direction": "inbound", "peer_id": PEER_B,
     "role": "assistant", "content": [{"type": "text", "text": "build passed"}], "depth": 2},
    # written before `depth` existed: no key at all
    {"message_id": "6c2f3d40-1e30-4d9c-8b20-4f1e9c307d66", "seq": 2,
     "timestamp": "2025-03-02T14:30:00Z", "direction": "inbound", "peer_id": PEER_B,
     "role": "user", "content": [{"type": "image", "data": [137, 80, 78, 71, 13, 10, 26, 10],
                                  "mime_type": "image/png"}, {"type": "text", "text": "this"}]},
    {"message_id": "7d3a4e50-2f41-4e0a-9c31-5a2f0d418e77", "seq": 3,
     "timestamp": "2025-03-02T14:30:09+01:00", "direction": "outbound", "peer_id": PEER_B,
     "role": "assistant", "content": [{"type": "json", "value": {"ok": True}}], "depth": 4,
     "relay_hint": "unknown-to-loophound"},
]
SVEN_ROOM = [
    {"message_id": "a1b2c3d4-0000-4000-8000-000000000001", "room": "firmware-team",
     "sender_peer_id": BOT, "sender_name": "build-agent", "timestamp": "2025-03-02T14:25:00Z",
     "content": [{"type": "text", "text": "build passed — 147 tests"}], "depth": 0},
    # the documentation's example: no depth
    {"message_id": "a1b2c3d4-0000-4000-8000-000000000002", "room": "firmware-team",
     "sender_peer_id": PEER_A, "sender_name": "", "timestamp": "2025-03-02T14:26:00Z",
     "content": [{"type": "text", "text": "thanks"}]},
]


def test_sven_peer_and_room_files(tmp_path):
    peer = write(tmp_path / "logs/node-a/peers" / f"{PEER_B}.jsonl",
                 [sven_compact(r) for r in SVEN_PEER])
    room = write(tmp_path / "logs/node-a/rooms/firmware-team.jsonl",
                 [sven_compact(r) for r in SVEN_ROOM])
    rows = load(tmp_path, [peer, room], "format, kind, event_type, ts, actor, target, session, "
                "channel, action, role, depth, corr_id, extra")
    pair = f"{PEER_B}↔node-a"  # the two parties, sorted
    assert [r[:12] for r in rows] == [
        ("sven", "message", "ConversationRecord", T("2025-03-02 14:23:01.123"), "node-a", PEER_B,
         pair, "peer", "text", "user", 1, SVEN_PEER[0]["message_id"]),
        ("sven", "message", "ConversationRecord", T("2025-03-02 14:23:05.988"), PEER_B, "node-a",
         pair, "peer", "text", "assistant", 2, SVEN_PEER[1]["message_id"]),
        ("sven", "message", "ConversationRecord", T("2025-03-02 14:30:00"), PEER_B, "node-a",
         pair, "peer", "image", "user", 0, SVEN_PEER[2]["message_id"]),
        ("sven", "message", "ConversationRecord", T("2025-03-02 13:30:09"), "node-a", PEER_B,
         pair, "peer", "json", "assistant", 4, SVEN_PEER[3]["message_id"]),
        ("sven", "room_post", "RoomRecord", T("2025-03-02 14:25:00"), "build-agent",
         "room:firmware-team", "room:firmware-team", "room:firmware-team", "text", None, 0,
         SVEN_ROOM[0]["message_id"]),
        ("sven", "room_post", "RoomRecord", T("2025-03-02 14:26:00"), PEER_A,
         "room:firmware-team", "room:firmware-team", "room:firmware-team", "text", None, 0,
         SVEN_ROOM[1]["message_id"]),
    ]
    # content, seq and direction stay in extra; image bytes are not copied to any column
    assert extra(rows[0][12]) == {"seq": 0, "direction": "outbound",
                                  "content": SVEN_PEER[0]["content"]}
    assert extra(rows[2][12])["content"][0]["data"] == [137, 80, 78, 71, 13, 10, 26, 10]
    assert extra(rows[3][12])["relay_hint"] == "unknown-to-loophound"
    assert extra(rows[4][12])["sender_peer_id"] == BOT
    assert "sender_name" not in extra(rows[4][12])


def test_sven_local_node_names(tmp_path):
    assert sven.local_node(tmp_path / "node-b/conversations/peers/x.jsonl") == "node-b"
    assert sven.local_node(tmp_path / "gw'1/rooms/general.jsonl") == "gw'1"
    assert sven.local_node(tmp_path / "ana/.config/sven/conversations/rooms/r.jsonl") == "ana"
    assert sven.local_node(tmp_path / "ev/sven/conversations/peers/x.jsonl") == "sven"
    assert sven.local_node(tmp_path / "loose/x.jsonl") is None
    # a quote in the directory name is escaped, not pasted into SQL
    peer = write(tmp_path / "gw'1/peers" / f"{PEER_A}.jsonl", [sven_compact(SVEN_PEER[0])])
    assert load(tmp_path, [peer], "actor, target") == [("gw'1", PEER_B)]


# -- LabTrust ------------------------------------------------------------------------------


STEP_INSIDER = (
    '{"action_type": "MOVE", "agent_id": "A_INSIDER_0", "args": {"entity_id": "A_INSIDER_0", '
    '"entity_type": "Agent", "from_zone": "Z_SORTING_LANES", "to_zone": "Z_ACCESSIONING"}, '
    '"blocked_reason_code": "SIG_INVALID", "emits": [], "hashchain": {"head_hash": "9ec2da50", '
    '"last_event_hash": "1f596cbc", "length": 28}, "hashchain_head": "9ec2da50", '
    '"rbac_decision": {"allowed": true, "reason_code": null, "role_id": "ROLE_RUNNER"}, '
    '"rbac_policy_fingerprint": "1f293d34", "signature_verification": {"key_id": '
    '"ed25519:key_reception", "passed": false, "reason_code": "SIG_INVALID"}, "status": "BLOCKED", '
    '"t_s": 20, "token_consumed": [], "tool_registry_fingerprint": "03242dac", "violations": []}'
)


def step(agent: str, action: str, t_s: int, status: str = "ACCEPTED", reason=None) -> dict:
    return {"action_type": action, "agent_id": agent, "args": {}, "blocked_reason_code": reason,
            "emits": [], "hashchain_head": "9ec2", "status": status, "t_s": t_s,
            "token_consumed": [], "violations": []}


def attempt(step_id: int, index: int, failed: bool, proposal_hash: str) -> dict:
    rec = {"attempt_index": index, "log_type": "LLM_COORD_PROPOSAL_ATTEMPT",
           "proposal_hash": proposal_hash, "proposal_id": f"p-{step_id}",
           "repair_request_hash": "" if index == 1 else "cd34",
           "shield_outcome_hash": "" if failed else "ef56", "step_id": step_id,
           "validation_failed": failed}
    rec |= {"failed_validation_fields": ["per_agent[3].action_type"]} if failed \
        else {"blocked_count": 0}
    return rec


def proposal(step_id: int, meta: dict) -> dict:
    return {"canonical_proposal_hash": "ab12", "log_type": "LLM_COORD_PROPOSAL", "meta": meta,
            "proposal_id": f"p-{step_id}", "shield_outcome_hash": "ef56", "step_id": step_id}


ANTHROPIC = {"backend_id": "anthropic_live_coord", "estimated_cost_usd": 0.004812,
             "latency_ms": 1834.2, "model_id": "claude-x", "tokens_in": 5120, "tokens_out": 410}
OLLAMA = {"backend_id": "ollama_live_gossip", "estimated_cost_usd": None, "latency_ms": 950.5,
          "model_id": "llama3", "tokens_in": 3000, "tokens_out": 200,
          "error_code": "LLM_PROVIDER_ERROR"}
DETERMINISTIC = {"backend_id": "deterministic_repair", "latency_ms": 0.1, "model_id": "none",
                 "tokens_in": 0, "tokens_out": 0}


def labtrust_file(path: Path) -> Path:
    """Two episodes, in the order runner.py writes them: per step the repair attempts, the
    engine's step lines, then the proposal; an audit digest ends the first episode."""
    records: list[dict | str] = [
        attempt(0, 1, True, "aa01"), attempt(0, 2, False, "aa02"),
        step("A_RUNNER_0", "MOVE", 10), step("A_RECEPTION_0", "TICK", 10),
        proposal(0, ANTHROPIC),
        attempt(1, 1, False, "bb01"),
        STEP_INSIDER, step("A_RECEPTION_0", "NOOP", 20),
        proposal(1, OLLAMA),
        {"audit_digest_version": "0.1", "episode_id": 0, "log_type": "LLM_COORD_AUDIT_DIGEST",
         "steps": [{"proposal_hash": "ab12", "shield_outcome_hash": "ef56", "step_id": 0}]},
        attempt(0, 1, False, "cc01"),
        step("A_RUNNER_0", "START_RUN", 10, "BLOCKED", "RC_REAGENT_STOCKOUT"),
        proposal(0, DETERMINISTIC),
        step("A_RUNNER_0", "TICK", 20),
        # no digest this time: the clock going back starts episode 3
        step("A_RUNNER_0", "MOVE", 10),
    ]
    return write(path, [r if isinstance(r, str) else json.dumps(r, sort_keys=True)
                        for r in records])


def test_labtrust_steps_llm_lines_and_episodes(tmp_path):
    log = labtrust_file(tmp_path / "run/episodes.jsonl")
    rows = load(tmp_path, [log], "line, kind, event_type, ts, session, actor, action, ok, error, "
                "depth, role, corr_id, parent_id, tokens_in, tokens_out, cost_usd, latency_ms, "
                "model, channel")
    s10, s20 = T("2000-01-01 00:00:10"), T("2000-01-01 00:00:20")
    att, prop = "LLM_COORD_PROPOSAL_ATTEMPT", "LLM_COORD_PROPOSAL"
    assert [r[:-1] for r in rows] == [
        (1, "repair_attempt", att, s10, "episode-1", "anthropic_live_coord", "propose", False,
         "VALIDATION_FAILED", 1, None, "p-0", None, None, None, None, None, None),
        (2, "repair_attempt", att, s10, "episode-1", "anthropic_live_coord", "repair", True,
         None, 2, None, "p-0", "cd34", None, None, None, None, None),
        (3, "step", "step", s10, "episode-1", "A_RUNNER_0", "MOVE", True, None, None, None,
         None, None, None, None, None, None, None),
        (4, "step", "step", s10, "episode-1", "A_RECEPTION_0", "TICK", True, None, None, None,
         None, None, None, None, None, None, None),
        (5, "llm_call", prop, s10, "episode-1", "anthropic_live_coord", "propose", True, None,
         None, None, "p-0", None, 5120, 410, 0.004812, 1834.2, "claude-x"),
        (6, "repair_attempt", att, s20, "episode-1", "ollama_live_gossip", "propose", True,
         None, 1, None, "p-1", None, None, None, None, None, None),
        (7, "step", "step", s20, "episode-1", "A_INSIDER_0", "MOVE", False, "SIG_INVALID", None,
         "ROLE_RUNNER", None, None, None, None, None, None, None),
        (8, "step", "step", s20, "episode-1", "A_RECEPTION_0", "NOOP", True, None, None, None,
         None, None, None, None, None, None, None),
        # unpriced (estimated_cost_usd null) stays NULL, never 0
        (9, "llm_call", prop, s20, "episode-1", "ollama_live_gossip", "propose", False,
         "LLM_PROVIDER_ERROR", None, None, "p-1", None, 3000, 200, None, 950.5, "llama3"),
        (10, "audit", "LLM_COORD_AUDIT_DIGEST", s20, "episode-1", None, "audit_digest", None,
         None, None, None, None, None, None, None, None, None, None),
        (11, "repair_attempt", att, s10, "episode-2", "deterministic_repair", "propose", True,
         None, 1, None, "p-0", None, None, None, None, None, None),
        (12, "step", "step", s10, "episode-2", "A_RUNNER_0", "START_RUN", False,
         "RC_REAGENT_STOCKOUT", None, None, None, None, None, None, None, None, None),
        (13, "llm_call", prop, s10, "episode-2", "deterministic_repair", "propose", True, None,
         None, None, "p-0", None, 0, 0, None, 0.1, "none"),
        (14, "step", "step", s20, "episode-2", "A_RUNNER_0", "TICK", True, None, None, None,
         None, None, None, None, None, None, None),
        (15, "step", "step", s10, "episode-3", "A_RUNNER_0", "MOVE", True, None, None, None,
         None, None, None, None, None, None, None),
    ]
    assert {r[-1] for r in rows} == {"episode"}
    con = Store(tmp_path / "st").connect()
    extras = [extra(e) for (e,) in con.execute("SELECT extra FROM events ORDER BY line").fetchall()]
    assert extras[0]["proposal_hash"] == "aa01"
    assert extras[0]["failed_validation_fields"] == ["per_agent[3].action_type"]
    assert extras[4]["meta"]["backend_id"] == "anthropic_live_coord"
    assert extras[6]["signature_verification"]["passed"] is False
    assert extras[9]["episode_id"] == 0
    assert con.execute("SELECT sum(cost_usd), count(cost_usd) FROM llm_calls").fetchone() == \
        (0.004812, 1)


def test_labtrust_episodes_continue_across_appends(tmp_path):
    log = labtrust_file(tmp_path / "run/episodes.jsonl")
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(lines[:7]))  # stops inside step 1 of episode 1
    store = Store(tmp_path / "st")
    ingest([str(log)], store)
    log.write_text("".join(lines))
    report = ingest([str(log)], store)
    assert report.files[0].status == "appended"
    rows = store.connect().execute(
        "SELECT line, session, ts, actor FROM events ORDER BY line").fetchall()
    assert [r[1] for r in rows] == ["episode-1"] * 10 + ["episode-2"] * 4 + ["episode-3"]
    assert rows[8] == (9, "episode-1", T("2000-01-01 00:00:20"), "ollama_live_gossip")


def test_labtrust_results_companion(tmp_path):
    log = labtrust_file(tmp_path / "run/episodes.jsonl")
    assert labtrust.FORMAT.companions(log) == []
    comm = {"msg_count": 120, "drop_rate": 0.0, "invalid_sig_count": 3, "replay_drop_count": 2,
            "invalid_msg_rate": 0.025, "spoof_attempt_count": 1, "dropped_count": 0,
            "p95_latency_ms": 12.5}
    results = {"schema_version": "0.2", "task": "TaskH", "config": {"coord_method": "x"},
               "coordination": {"scale_id": "small", "method_id": "llm_local_decider_signed_bus"},
               "metadata": {"llm_backend_id": "anthropic_live_coord", "llm_model_id": "claude-x"},
               "episodes": [{"seed": 100, "metrics": {"coordination": {"comm": comm}}},
                            {"seed": 101, "metrics": {"throughput": 4}}]}
    (log.parent / "results.json").write_text(json.dumps(results))
    assert labtrust.FORMAT.companions(log) == [log.parent / "results.json"]
    ctx = FormatContext(path=log, display_path=str(log), input_id=1)
    rows = labtrust.FORMAT.read_companion(log.parent / "results.json", ctx)
    assert [(r["line"], r["kind"], r["session"], r["actor"], r["model"]) for r in rows] == [
        (1, "episode_metrics", "episode-1", "llm_local_decider_signed_bus", "claude-x"),
        (2, "episode_metrics", "episode-2", "llm_local_decider_signed_bus", "claude-x")]
    assert json.loads(rows[0]["extra"]) == {"seed": 100, "coordination": {"comm": comm}}
    assert all(r.get("cost_usd") is None for r in rows)
    (log.parent / "results.json").write_text("[1, 2]")
    assert labtrust.FORMAT.read_companion(log.parent / "results.json", ctx) == []


# -- hook dispatcher -----------------------------------------------------------------------


HOOKS = [
    # session events in the first documented shape: source = what started it, target = runner
    {"ts": "2026-04-22T19:30:00.000000+00:00", "event": "session_started", "source_agent": "cron",
     "target_agent": "annegreet", "completion_id": None, "session_id": "ses_1",
     "parent_completion_id": None, "hook_origin_depth": 0},
    {"ts": "2026-04-22T19:39:50.720568+00:00", "event": "session_completed",
     "source_agent": "cron", "target_agent": "annegreet", "completion_id": "cmpl_c1",
     "session_id": "ses_1", "parent_completion_id": None, "hook_origin_depth": 0,
     "cost_usd": 2.5},
    {"ts": "2026-04-22T19:39:50.720568+00:00", "event": "hook_fired", "source_agent": "annegreet",
     "target_agent": "eltjo", "completion_id": "cmpl_c1", "session_id": "ses_1",
     "parent_completion_id": None, "hook_origin_depth": 0, "hook": "post_completion"},
    # the second documented shape: source_agent = the agent running the session, no target
    {"ts": "2026-04-22T21:39:51.100+02:00", "event": "session_started", "source_agent": "eltjo",
     "session_id": "ses_2", "parent_completion_id": "cmpl_c1", "hook_origin_depth": 0},
    {"ts": "2026-04-22T19:49:02Z", "event": "session_completed", "source_agent": "eltjo",
     "completion_id": "cmpl_c2", "session_id": "ses_2", "parent_completion_id": "cmpl_c1",
     "hook_origin_depth": 0, "cost_usd": 2.47, "worker": "w-3"},
    {"ts": "2026-04-22T19:49:02.5Z", "event": "hook_fired", "source_agent": "eltjo",
     "target_agent": "annegreet", "completion_id": "cmpl_c2", "session_id": "ses_2",
     "parent_completion_id": "cmpl_c1", "hook_origin_depth": 0},
]


def test_hooks(tmp_path):
    log = write(tmp_path / "dispatch.jsonl", HOOKS)
    rows = load(tmp_path, [log], "format, kind, event_type, ts, actor, target, session, channel, "
                "action, depth, corr_id, parent_id, cost_usd, extra")
    assert [r[:13] for r in rows] == [
        ("hooks", "session_start", "session_started", T("2026-04-22 19:30:00"), "annegreet",
         None, "ses_1", "hook", "session", 0, None, None, None),
        ("hooks", "session_end", "session_completed", T("2026-04-22 19:39:50.721"), "annegreet",
         None, "ses_1", "hook", "session", 0, "cmpl_c1", None, 2.5),
        ("hooks", "trigger", "hook_fired", T("2026-04-22 19:39:50.721"), "annegreet", "eltjo",
         "ses_1", "hook", "post_completion", 0, "cmpl_c1", None, None),
        ("hooks", "session_start", "session_started", T("2026-04-22 19:39:51.100"), "eltjo",
         None, "ses_2", "hook", "session", 0, None, "cmpl_c1", None),
        ("hooks", "session_end", "session_completed", T("2026-04-22 19:49:02"), "eltjo", None,
         "ses_2", "hook", "session", 0, "cmpl_c2", "cmpl_c1", 2.47),
        ("hooks", "trigger", "hook_fired", T("2026-04-22 19:49:02.500"), "eltjo", "annegreet",
         "ses_2", "hook", "hook", 0, "cmpl_c2", "cmpl_c1", None),
    ]
    # who started a session is kept; unknown fields too
    assert extra(rows[0][13]) == {"source_agent": "cron", "target_agent": "annegreet"}
    assert extra(rows[4][13]) == {"source_agent": "eltjo", "worker": "w-3"}


# -- generic -------------------------------------------------------------------------------


MAPPING_TOML = """
[fields]
time = "timestamp"
actor = "from"
target = "to"
session = "conversation"
action = "type"
error = "error.code"
tokens_in = "usage.in"
cost_usd = "billing.usd"

[constants]
kind = "message"
channel = "chat"
"""


def test_generic_with_mapping_file(tmp_path):
    log = write(tmp_path / "chat.jsonl", [
        {"timestamp": "2026-01-05T10:00:00+02:00", "from": "alice", "to": "bob",
         "conversation": "c-1", "type": "ask", "usage": {"in": 120}, "billing": {"usd": 0.5},
         "mood": "curious"},
        {"timestamp": "2026-01-05T08:00:01.250Z", "from": "bob", "to": "alice",
         "conversation": "c-1", "type": "answer", "error": {"code": "E_TIMEOUT", "retry": True},
         "usage": {"in": "not a number"}, "billing": {"usd": None}},
        {"timestamp": 1767600002, "from": 7, "to": None, "conversation": "c-1", "type": ["odd"],
         "error": "E_FLAT", "usage": 3},
    ])
    mapping = tomllib.loads(MAPPING_TOML)
    rows = load(tmp_path, [log], "format, kind, ts, actor, target, session, channel, action, "
                "error, tokens_in, cost_usd, extra", IngestOptions(mapping=mapping))
    assert [r[:11] for r in rows] == [
        ("generic", "message", T("2026-01-05 08:00:00"), "alice", "bob", "c-1", "chat", "ask",
         None, 120, 0.5),
        ("generic", "message", T("2026-01-05 08:00:01.250"), "bob", "alice", "c-1", "chat",
         "answer", "E_TIMEOUT", None, None),
        ("generic", "message", T("2026-01-05 08:00:02"), "7", None, "c-1", "chat", '["odd"]',
         None, None, None),
    ]
    assert extra(rows[0][11])["mood"] == "curious"  # an unmapped field ends up in extra
    assert extra(rows[1][11])["error"] == {"code": "E_TIMEOUT", "retry": True}


def test_generic_mapping_is_validated():
    with pytest.raises(MappingError, match=r"unknown canonical column 'sender' \(did you mean "
                                           r"actor = \"from\"\?\); valid names: .*actor"):
        generic.validate_mapping({"fields": {"sender": "from"}})
    with pytest.raises(MappingError, match=r"unknown canonical column 'actr' \(did you mean actor"):
        generic.validate_mapping({"fields": {"actr": "from"}})
    with pytest.raises(MappingError, match=r"'from' \(the key is the column .*actor = \"from\""):
        generic.validate_mapping({"fields": {"from": "actor"}})
    with pytest.raises(MappingError, match=r"unknown canonical column 'colour'; valid names"):
        generic.validate_mapping({"constants": {"colour": "red"}})
    with pytest.raises(MappingError, match=r"^mapping file m.toml: unknown section or key 'field' "
                                           r"\(did you mean \[fields\]\?\)"):
        generic.validate_mapping({"field": {"actor": "from"}}, "m.toml")
    with pytest.raises(MappingError, match=r"tokens_in must be an integer"):
        generic.validate_mapping({"constants": {"tokens_in": "many"}})
    with pytest.raises(MappingError, match=r"dotted path"):
        generic.validate_mapping({"fields": {"error": "error..code"}})
    with pytest.raises(MappingError, match=r"\[fields\] must be a table"):
        generic.validate_mapping({"fields": "actor"})
    assert generic.validate_mapping({"fields": {"time": "t"}})["fields"] == {"ts": "t"}


def test_generic_bad_mapping_fails_ingest_clearly(tmp_path):
    log = write(tmp_path / "x.jsonl", [{"a": 1}])
    with pytest.raises(MappingError, match="unknown canonical column 'who'"):
        ingest([str(log)], Store(tmp_path / "st"), IngestOptions(mapping={"fields": {"who": "a"}}))
    assert not (tmp_path / "st").exists()  # said before any ingest work


def test_generic_automatic_mapping_and_epochs(tmp_path):
    log = write(tmp_path / "agent.jsonl", [
        {"ts": 1767600000, "sender": "planner", "receiver": "coder", "thread_id": "t1",
         "tool": "search", "status": "ok", "model": "gpt-x",
         "usage": {"prompt_tokens": 900, "completion_tokens": 80}, "cost": 0.012,
         "duration_ms": 812.5, "note": "kept"},
        {"ts": 1767600001500, "sender": "coder", "receiver": "planner", "thread_id": "t1",
         "tool": "search", "status": "RATE_LIMITED", "cost": "0.5"},
        {"ts": 1767600002250000, "sender": "planner", "receiver": "coder", "status": 503},
        {"ts": 1767600003000000123, "sender": "coder", "receiver": "planner", "status": 200},
        {"ts": "2026-01-05T09:00:04.5+01:00", "sender": "planner", "receiver": "coder"},
        {"ts": "1767600005", "sender": "coder", "receiver": "planner"},
        {"ts": "not a time", "sender": "planner", "receiver": "coder", "status": {"x": 1}},
    ])
    rows = load(tmp_path, [log], "kind, ts, actor, target, session, action, error, model, "
                "tokens_in, tokens_out, cost_usd, latency_ms, extra")
    base = T("2026-01-05 08:00:00")
    assert [r[:12] for r in rows] == [
        ("message", base, "planner", "coder", "t1", "search", None, "gpt-x", 900, 80, 0.012,
         812.5),
        ("message", base + dt.timedelta(seconds=1.5), "coder", "planner", "t1", "search",
         "RATE_LIMITED", None, None, None, 0.5, None),
        ("message", base + dt.timedelta(seconds=2.25), "planner", "coder", None, None, "503",
         None, None, None, None, None),
        ("message", base + dt.timedelta(seconds=3), "coder", "planner", None, None, None, None,
         None, None, None, None),
        ("message", base + dt.timedelta(seconds=4.5), "planner", "coder", None, None, None,
         None, None, None, None, None),
        ("message", base + dt.timedelta(seconds=5), "coder", "planner", None, None, None, None,
         None, None, None, None),
        ("message", None, "planner", "coder", None, None, None, None, None, None, None, None),
    ]
    assert extra(rows[0][12])["note"] == "kept"


def test_generic_record_kind_and_plan(tmp_path):
    log = write(tmp_path / "events.ndjson", [
        {"@timestamp": "2026-01-05T08:00:00Z", "event": "retry", "error.code": "E1", "id": 5},
    ])
    ctx = FormatContext(path=log, display_path=str(log), input_id=1)
    plan = generic.plan(ctx)
    assert {f.column: f.path for f in plan.fields} == {
        "ts": ("@timestamp",), "event_type": ("event",), "action": ("event",),
        "error": ("error.code",), "corr_id": ("id",)}
    assert generic.file_keys(ctx) == (frozenset({"@timestamp", "event", "error.code", "id"}),
                                      frozenset())
    rows = load(tmp_path, [log], "kind, ts, event_type, action, error, corr_id")
    assert rows == [("record", T("2026-01-05 08:00:00"), "retry", "retry", "E1", "5")]


# -- sniffing ------------------------------------------------------------------------------


def samples(tmp_path: Path) -> dict[str, Path]:
    return {
        "sven": write(tmp_path / "node-a/peers" / f"{PEER_B}.jsonl",
                      [sven_compact(r) for r in SVEN_PEER]),
        "sven-room": write(tmp_path / "node-a/rooms/general.jsonl",
                           [sven_compact(r) for r in SVEN_ROOM]),
        "labtrust": labtrust_file(tmp_path / "lt/episodes.jsonl"),
        "hooks": write(tmp_path / "hooks.jsonl", HOOKS),
        "bproxy": write(tmp_path / "2026-06-20.log", [
            {"level": 30, "time": 1781826140544, "pid": 1234, "hostname": "h", "id": "u1",
             "action": "session.close", "session": "6afr3v", "destructive": False,
             "event": "received", "ownerHash": "a3f7c012"}]),
        "generic": write(tmp_path / "other.jsonl", [{"type": "message", "data": {"role": "user"}}]),
    }


def test_each_sample_is_recognised_as_itself_only(tmp_path):
    files = samples(tmp_path)
    for name, path in files.items():
        head = path.read_bytes()
        assert formats.sniff(head, path).name == name.split("-")[0], name
        records = formats.sample_records(head)
        claimed = [f.name for f in formats.FORMATS.values()
                   if f.name != "generic" and f.sniff(records, path)]
        assert claimed == ([] if name == "generic" else [name.split("-")[0]]), name


def test_sven_records_outside_a_store_folder_still_sniff(tmp_path):
    path = write(tmp_path / "export.jsonl", [sven_compact(r) for r in SVEN_PEER])
    assert formats.sniff(path.read_bytes(), path).name == "sven"
    assert load(tmp_path, [path], "actor, target, session")[0] == (None, PEER_B, PEER_B)

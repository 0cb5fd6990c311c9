"""The `claude-code` format: Claude Code transcripts (a project folder of sessions, subagents
included) read into tool calls that carry their results, usage counted once per response, and
the planted loops of the sample found by `loophound scan`."""

from __future__ import annotations

import json
import shutil

import pytest
from agent_transcripts import ROOT, SERIOUS, ingested, rows, scan, section, write

from loophound import formats
from loophound.ingest import ingest
from loophound.store import Store
from loophound.synth import write_claude_code_project

SECTION, SAMPLES = section("claude-code")
REAL = ROOT / "tests" / "data" / "claude-code" / "sidechain_integrated.jsonl"
COMMIT, SUBAGENT, REREAD = (next(i for i in SECTION["incidents"] if i["kind"] == k) for k in (
    "commit_rejected_by_hook", "subagent_reruns_failing_test", "same_file_reread"))


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Store:
    return ingested([SAMPLES], tmp_path_factory.mktemp("cc"))


# -- every line, exactly once ---------------------------------------------------------------


def test_every_line_is_an_event_or_quarantined(sample):
    got = dict(rows(sample, "SELECT file, count(*) FROM events GROUP BY file"))
    quarantined = rows(sample, "SELECT count(*) FROM quarantine")[0][0]
    assert quarantined == 0
    for rel, n in SECTION["lines"].items():
        assert got[str(SAMPLES / rel)] == n, rel
    assert sum(got.values()) == sum(SECTION["lines"].values())
    assert rows(sample, "SELECT DISTINCT format FROM events") == [("claude-code",)]


def test_usage_is_counted_once_per_response(sample):
    for rel, want in SECTION["usage"].items():
        got = rows(sample, """SELECT sum(tokens_in), sum(tokens_out), sum(tokens_cache_read),
                                     sum(tokens_cache_write), count(tokens_in)
                              FROM events WHERE file = ?""", [str(SAMPLES / rel)])[0]
        assert got == (want["input"], want["output"], want["cache_read"], want["cache_write"],
                       want["responses"]), rel
    # what summing every line would say: each response's usage once per content line
    naive = sum(json.loads(line)["message"]["usage"]["output_tokens"]
                for rel in SECTION["lines"] for line in (SAMPLES / rel).read_text().splitlines()
                if json.loads(line).get("type") == "assistant")
    assert naive > sum(u["output"] for u in SECTION["usage"].values())


def test_every_tool_call_carries_its_result(sample):
    calls = rows(sample, """SELECT count(*), count(ok), count(result), count(result_key),
                                   count(latency_ms), count(action_key)
                            FROM events WHERE kind = 'tool_call'""")[0]
    assert calls[0] > 50 and set(calls) == {calls[0]}
    answered = rows(sample, """SELECT count(*) FROM events r JOIN events c ON r.answers = c.event_id
                               WHERE r.kind = 'response' AND c.kind = 'tool_call'
                                 AND r.corr_id = c.corr_id AND r.action = c.action""")[0][0]
    assert answered == calls[0] == rows(sample, "SELECT count(*) FROM events "
                                                "WHERE kind = 'response'")[0][0]


def test_the_subagent_is_its_own_actor_in_the_parent_session(sample):
    sub = str(SAMPLES / SUBAGENT["file"])
    assert rows(sample, "SELECT DISTINCT actor, session FROM events WHERE file = ? "
                        "AND kind = 'tool_call'", [sub]) == [(SUBAGENT["actor"], COMMIT["session"])]
    # its prompt comes from the agent that started it; what it says goes back to that agent
    said = rows(sample, "SELECT actor, target FROM events WHERE file = ? AND kind = 'message' "
                        "ORDER BY line", [sub])
    assert said[0] == ("claude", SUBAGENT["actor"])
    assert set(said[1:]) == {(SUBAGENT["actor"], "claude")}


# -- lines as Claude Code writes them ---------------------------------------------------------

S = "2f0c5e1a-8d3b-4c7e-9f12-6a4b8c0d2e31"
ENV = {"isSidechain": False, "userType": "external", "cwd": "/home/dev/shop", "sessionId": S,
       "version": "2.1.29", "gitBranch": "main", "slug": "quiet-rounding-otter"}
USAGE = {"input_tokens": 4, "cache_creation_input_tokens": 512, "cache_read_input_tokens": 20480,
         "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 512}}
LINES = [
    {"type": "summary", "summary": "Commit the rounding fix", "leafUuid": "u-9"},
    {"parentUuid": None} | ENV | {"type": "user", "message": {"role": "user", "content":
                                  "commit it"}, "uuid": "u-1", "timestamp": "2026-06-22T11:02:00.000Z"},
    {"parentUuid": "u-1"} | ENV | {"message": {
        "model": "claude-opus-4-5-20251101", "id": "msg_01A", "type": "message", "role": "assistant",
        "content": [{"type": "thinking", "thinking": "The hook runs ruff.", "signature": "c2ln"}],
        "stop_reason": None, "stop_sequence": None, "usage": USAGE | {"output_tokens": 3}},
        "requestId": "req_011A", "type": "assistant", "uuid": "a-1",
        "timestamp": "2026-06-22T11:02:04.120Z"},
    {"parentUuid": "a-1"} | ENV | {"message": {
        "model": "claude-opus-4-5-20251101", "id": "msg_01A", "type": "message", "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_01X", "name": "Bash", "input": {
            "command": "git commit -m fix", "description": "Commit"}}],
        "stop_reason": "tool_use", "stop_sequence": None, "usage": USAGE | {"output_tokens": 88}},
        "requestId": "req_011A", "type": "assistant", "uuid": "a-2",
        "timestamp": "2026-06-22T11:02:05.000Z"},
    {"parentUuid": "a-2"} | ENV | {"type": "user", "message": {"role": "user", "content": [{
        "type": "tool_result", "content": "Exit code 1\nruff....Failed\n- hook id: ruff",
        "is_error": True, "tool_use_id": "toolu_01X"}]}, "uuid": "u-2",
        "timestamp": "2026-06-22T11:02:08.250Z", "toolUseResult": "Error: Exit code 1",
        "sourceToolAssistantUUID": "a-2"},
    {"parentUuid": "u-2"} | ENV | {"message": {
        "model": "claude-opus-4-5-20251101", "id": "msg_01B", "type": "message", "role": "assistant",
        "content": [{"type": "text", "text": "The hook failed."}], "stop_reason": "end_turn",
        "stop_sequence": None, "usage": USAGE | {"output_tokens": 9}},
        "requestId": "req_011B", "type": "assistant", "uuid": "a-3",
        "timestamp": "2026-06-22T11:02:10.000Z"},
    {"parentUuid": "a-3"} | ENV | {"type": "user", "message": {"role": "user", "content": [{
        "tool_use_id": "toolu_01Y", "type": "tool_result", "content": [
            {"type": "text", "text": "<tool_use_error>File has not been read yet.</tool_use_error>"}],
        "is_error": True}]}, "uuid": "u-3", "timestamp": "2026-06-22T11:02:11.000Z"},
]
COLUMNS = ("kind, event_type, actor, target, session, action, args, result, ok, error, role, "
           "corr_id, parent_id, tokens_in, tokens_out, tokens_cache_read, tokens_cache_write, "
           "model, latency_ms, CAST(ts AS VARCHAR)")


def test_lines_map_to_columns(tmp_path):
    store = Store(tmp_path / "st")
    ingest([str(write(tmp_path / f"{S}.jsonl", LINES))], store)
    got = rows(store, f"SELECT {COLUMNS} FROM events ORDER BY line")
    model, call = "claude-opus-4-5-20251101", '{"command":"git commit -m fix","description":"Commit"}'
    hook = "Exit code 1\nruff....Failed\n- hook id: ruff"
    assert got == [
        ("record", "summary", "claude", None, None, None, None, None, None, None, None, None,
         None, None, None, None, None, None, None, None),
        ("message", "user", "user", "claude", S, None, None, None, None, None, "user", "u-1",
         None, None, None, None, None, None, None, "2026-06-22 11:02:00"),
        # the response's usage, once, with the output count of its last line
        ("llm_call", "assistant", "claude", None, S, None, None, None, None, None, "assistant",
         "msg_01A", "u-1", 4, 88, 20480, 512, model, None, "2026-06-22 11:02:04.12"),
        ("tool_call", "assistant", "claude", None, S, "Bash", call, hook, False, "Exit code 1",
         "assistant", "toolu_01X", "msg_01A", None, None, None, None, model, 3250.0,
         "2026-06-22 11:02:05"),
        ("response", "user", "claude", None, S, "Bash", None, hook, False, "Exit code 1", "user",
         "toolu_01X", "a-2", None, None, None, None, None, None, "2026-06-22 11:02:08.25"),
        ("message", "assistant", "claude", "user", S, None, None, None, None, None, "assistant",
         "msg_01B", "u-2", 4, 9, 20480, 512, model, None, "2026-06-22 11:02:10"),
        # a result whose call is not in the file: kept, answering nothing; tags removed
        ("response", "user", "claude", None, S, None, None,
         "<tool_use_error>File has not been read yet.</tool_use_error>", False,
         "File has not been read yet.", "user", "toolu_01Y", "a-3", None, None, None, None, None,
         None, "2026-06-22 11:02:11"),
    ]
    extra = [json.loads(e) for (e,) in rows(store, "SELECT extra FROM events ORDER BY line")]
    assert extra[1]["text"] == "commit it" and extra[1]["cwd"] == "/home/dev/shop"
    assert extra[3]["message_id"] == "msg_01A" and extra[3]["parentUuid"] == "a-1"
    assert rows(store, "SELECT answers FROM events WHERE line = 5") == rows(
        store, "SELECT event_id FROM events WHERE line = 4")


def test_a_result_read_in_a_later_run_reaches_its_call(tmp_path):
    """The call is written by one ingest, its result appended and read by the next: the call
    gets its outcome beside it (late outcome), the result names the call; the response whose
    lines straddle the two runs is counted once."""
    log = write(tmp_path / f"{S}.jsonl", LINES[:3])  # the response's first line only
    store = Store(tmp_path / "st")
    ingest([str(log)], store)
    write(log, LINES[3:4], "a")
    ingest([str(log)], store)  # the tool_use line: the same response, a run later
    write(log, LINES[4:], "a")
    assert ingest([str(log)], store).files[0].status == "appended"
    assert rows(store, "SELECT line, ok, error, latency_ms FROM events WHERE kind = 'tool_call'") \
        == [(4, False, "Exit code 1", 3250.0)]
    assert rows(store, "SELECT r.line, c.line, r.action FROM events r JOIN events c "
                       "ON r.answers = c.event_id") == [(5, 4, "Bash")]
    assert rows(store, "SELECT count(tokens_in), sum(tokens_in) FROM events") == [(2, 8)]
    assert rows(store, "SELECT count(*) FROM events")[0][0] == len(LINES)


def test_odd_values_cost_nothing(tmp_path):
    """Values of shapes Claude Code does not write still map: no crash, no line lost."""
    odd = [
        {"type": "assistant", "sessionId": S, "timestamp": 1750000000, "message": {
            "id": 7, "content": "not a list", "usage": {"output_tokens": "many"}}},
        {"type": "user", "sessionId": S, "message": {"content": [{"type": "tool_result"}]}},
        {"type": "assistant", "sessionId": S, "isSidechain": "yes", "message": {"content": [
            {"type": "tool_use", "name": {"x": 1}, "input": "raw"}]}},
        {"type": "user", "sessionId": S, "message": None, "timestamp": "not a time"},
    ]
    store = Store(tmp_path / "st")
    report = ingest([str(write(tmp_path / "odd.jsonl", LINES[1:2] + odd))], store, )
    assert report.files[0].format == "claude-code"
    assert report.events + sum(report.files[0].quarantined.values()) == 5


# -- real transcripts -------------------------------------------------------------------------


def test_a_real_excerpt_with_an_inline_sidechain(tmp_path):
    """claude-code-log's fixture (Claude Code 2.0.46, tests/data/claude-code/SOURCE.md): a Task
    call answered after its subagent's inline sidechain lines; one response over two lines."""
    path = tmp_path / "88a8d761-7b9a-4bf1-a8ca-c1febe6bf358.jsonl"
    shutil.copy(REAL, path)
    assert formats.sniff(path.read_bytes(), path).name == "claude-code"
    store = Store(tmp_path / "st")
    ingest([str(path)], store)
    assert rows(store, "SELECT line, kind, actor, action, ok, answers IS NOT NULL FROM events "
                       "ORDER BY line") == [
        (1, "tool_call", "claude", "Task", True, False),
        (2, "response", "claude", "Task", True, True),
        (3, "message", "sidechain", None, None, False),
        (4, "tool_call", "sidechain", "Grep", None, False),  # its result is not in the excerpt
        # before 2.0.24 only some inline sidechain lines name their agent
        (5, "response", "agent-e1c84ba5", None, True, False),
        (6, "message", "claude", None, None, False)]
    assert rows(store, "SELECT sum(tokens_in), sum(tokens_out), sum(tokens_cache_write), "
                       "count(tokens_in) FROM events") == [(9, 365 + 183 + 190, 141272 + 19830 + 2952, 3)]
    assert json.loads(rows(store, "SELECT extra FROM events WHERE line = 2")[0][0])["agentId"] \
        == "e1c84ba5"


def test_recognised_as_claude_code_only(tmp_path):
    for rel in SECTION["lines"]:
        path = SAMPLES / rel
        head = path.read_bytes()[:65536]
        records = formats.sample_records(head)
        assert [f.name for f in formats.FORMATS.values() if f.name != "generic"
                and f.sniff(records, path)] == ["claude-code"], rel
    # a summary line first, as resumed sessions start
    summary = write(tmp_path / "a.jsonl", [LINES[0], LINES[0]] + LINES[1:3])
    assert formats.sniff(summary.read_bytes(), summary).name == "claude-code"
    # `type: user` without a session is not a transcript
    other = write(tmp_path / "b.jsonl", [{"type": "user", "message": {"content": "x"}}])
    assert formats.sniff(other.read_bytes(), other).name == "generic"


# -- the planted loops ------------------------------------------------------------------------


def test_scan_finds_the_planted_error_loops(tmp_path):
    doc, code = scan(SAMPLES, tmp_path)
    assert code == 1
    for incident in (COMMIT, SUBAGENT):
        hits = [f for f in doc["findings"] if f["detector"] == "repeated_error"
                and f["actors"] == [incident["actor"]] and f["sessions"] == [incident["session"]]
                and f["events"] == incident["count"]]
        assert len(hits) == 1, incident["kind"]
        f = hits[0]
        assert f["severity"] in SERIOUS
        assert f["start"].startswith(incident["start"][:19]) and f["end"].startswith(incident["end"][:19])
        assert {e["file"] for e in f["evidence"]} == {str(SAMPLES / incident["file"])}
    # the re-read loop has no error to repeat: it is a stuck agent's, the same call 15 times
    reread = [f for f in doc["findings"] if f["severity"] in SERIOUS
              and f["sessions"] == [REREAD["session"]]]
    assert [(f["detector"], f["events"]) for f in reread] == [("repeated_action", REREAD["repeats"])]


def test_the_clean_twin_is_silent(tmp_path):
    key = write_claude_code_project(tmp_path / "clean", incident=False)
    assert key["incidents"] == []
    doc, code = scan(tmp_path / "clean", tmp_path)
    assert [f["title"] for f in doc["findings"] if f["severity"] in SERIOUS] == []
    assert code == 0


# -- the model call that failed: Claude Code's own API error line -----------------------------


def _api_error(i: int, second: float) -> dict:
    """The line Claude Code writes when the API refused a call (as in a real subagent
    transcript: `isApiErrorMessage`, `error`, `apiErrorStatus`, a `<synthetic>` model)."""
    return {"parentUuid": f"p-{i}"} | ENV | {
        "type": "assistant", "uuid": f"e-{i}", "timestamp": f"2026-06-22T11:{int(second) // 60:02d}:"
        f"{second % 60:06.3f}Z", "error": "rate_limit", "isApiErrorMessage": True,
        "apiErrorStatus": 429, "message": {
            "id": f"m-{i}", "model": "<synthetic>", "role": "assistant", "type": "message",
            "stop_reason": "stop_sequence", "content": [
                {"type": "text", "text": "API Error: Request rejected (429) · rate limited"}],
            "usage": {"input_tokens": 0, "output_tokens": 0}}}


def test_an_api_error_is_a_failed_model_call(tmp_path):
    store = Store(tmp_path / "st")
    ingest([str(write(tmp_path / f"{S}.jsonl", [LINES[1], _api_error(1, 3.5)]))], store)
    assert rows(store, "SELECT kind, actor, ok, error, model, tokens_in FROM events "
                       "ORDER BY line") == [
        ("message", "user", None, None, None, None),
        ("llm_call", "claude", False, "rate_limit 429", None, 0)]


def test_a_storm_of_api_errors_is_a_loop_and_two_are_not(tmp_path):
    storm = [LINES[1]] + [_api_error(i, 5.0 + 6 * i) for i in range(12)]
    found, code = scan(write(tmp_path / "storm" / f"{S}.jsonl", storm), tmp_path / "a")
    errors = [f for f in found["findings"] if f["detector"] == "repeated_error"]
    assert len(errors) == 1 and errors[0]["events"] == 12 and code == 1
    assert [e["line"] for e in errors[0]["evidence"]][:1] == [2]
    calm = [LINES[1], _api_error(1, 5.0), _api_error(2, 600.0)]
    found, code = scan(write(tmp_path / "calm" / f"{S}.jsonl", calm), tmp_path / "b")
    assert not [f for f in found["findings"] if f["severity"] in SERIOUS] and code == 0

"""The `codex` format: Codex CLI rollouts read into tool calls that carry their outputs (the exit
code decides), the session meta applied to every line, usage counted once, and the planted loop
of the sample found by `loophound scan`."""

from __future__ import annotations

import json
import shutil

import pytest
from agent_transcripts import ROOT, SERIOUS, ingested, rows, scan, section, write

from loophound import formats
from loophound.ingest import ingest
from loophound.store import Store
from loophound.synth import write_codex_sessions

SECTION, SAMPLES = section("codex")
REAL = ROOT / "tests" / "data" / "codex" / "sample_codex_session.jsonl"
COMMIT, REREAD = (next(i for i in SECTION["incidents"] if i["kind"] == k)
                  for k in ("commit_rejected_by_hook", "same_file_reread"))


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Store:
    return ingested([SAMPLES], tmp_path_factory.mktemp("codex"))


# -- every line, exactly once ---------------------------------------------------------------


def test_every_line_is_an_event_or_quarantined(sample):
    got = dict(rows(sample, "SELECT file, count(*) FROM events GROUP BY file"))
    assert rows(sample, "SELECT count(*) FROM quarantine") == [(0,)]
    for rel, n in SECTION["lines"].items():
        assert got[str(SAMPLES / rel)] == n, rel
    assert sum(got.values()) == sum(SECTION["lines"].values())


def test_the_session_meta_applies_to_every_line(sample):
    for rel in SECTION["lines"]:
        meta = json.loads((SAMPLES / rel).read_text().splitlines()[0])["payload"]
        got = rows(sample, "SELECT DISTINCT session, extra->>'$.cwd' FROM events WHERE file = ?",
                   [str(SAMPLES / rel)])
        assert got == [(meta["id"], meta["cwd"])], rel
    assert rows(sample, "SELECT DISTINCT model FROM events WHERE kind IN ('llm_call', "
                        "'tool_call')") == [("gpt-5.2-codex",)]


def test_usage_is_counted_once_per_model_call(sample):
    for rel, want in SECTION["usage"].items():
        got = rows(sample, """SELECT sum(tokens_in), sum(tokens_cache_read), sum(tokens_out),
                                     count(*) FROM events WHERE file = ? AND kind = 'llm_call'""",
                   [str(SAMPLES / rel)])[0]
        assert got == (want["input"], want["cached"], want["output"], want["calls"]), rel
    # the re-emitted counts are kept as records without tokens
    again = rows(sample, "SELECT count(*), count(tokens_out) FROM events "
                         "WHERE event_type = 'token_count' AND kind = 'record'")[0]
    assert again[0] >= 5 and again[1] == 0


def test_every_call_carries_its_output(sample):
    calls = rows(sample, """SELECT count(*), count(ok), count(result), count(result_key),
                                   count(latency_ms), count(args)
                            FROM events WHERE kind = 'tool_call'""")[0]
    assert calls[0] > 50 and set(calls) == {calls[0]}
    assert rows(sample, "SELECT count(*) FROM events r JOIN events c ON r.answers = c.event_id "
                        "WHERE r.kind = 'response' AND r.corr_id = c.corr_id")[0][0] == calls[0]
    # the same command with the same output compares equal, whatever its wall time was
    assert rows(sample, """SELECT count(DISTINCT action_key), count(DISTINCT result_key), count(*)
                           FROM events WHERE kind = 'tool_call' AND file = ?
                             AND args LIKE '%sed -n%pricing.py%'""",
                [str(SAMPLES / REREAD["file"])]) == [(1, 1, REREAD["repeats"])]


# -- lines as Codex writes them ---------------------------------------------------------------

SID = "019b7a2c-5d1e-7f30-8a4b-2c6d8e0f1a23"


def wrap(ts: str, kind: str, payload: dict) -> dict:
    return {"timestamp": ts, "type": kind, "payload": payload}


def tokens(ts: str) -> dict:
    """A `token_count` event of one model call (9,800 in, 9,000 of them cached, 60 out)."""
    usage = {"input_tokens": 9800, "cached_input_tokens": 9000, "output_tokens": 60,
             "reasoning_output_tokens": 20, "total_tokens": 9860}
    return wrap(ts, "event_msg", {"type": "token_count", "info": {
        "total_token_usage": usage, "last_token_usage": usage, "model_context_window": 272000}})


LINES = [
    wrap("2026-06-23T11:30:00.010Z", "session_meta", {
        "id": SID, "timestamp": "2026-06-23T11:30:00.000Z", "cwd": "/home/dev/shop",
        "originator": "codex_cli_rs", "cli_version": "0.77.0", "instructions": None,
        "source": "cli", "model_provider": "openai"}),
    wrap("2026-06-23T11:30:05.000Z", "response_item", {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": "commit it"}]}),
    wrap("2026-06-23T11:30:05.001Z", "turn_context", {
        "cwd": "/home/dev/shop", "approval_policy": "on-request", "model": "gpt-5.2-codex",
        "summary": "auto"}),
    wrap("2026-06-23T11:30:09.000Z", "response_item", {
        "type": "function_call", "name": "shell_command",
        "arguments": "{\"command\":\"git commit -m fix\",\"workdir\":\"/home/dev/shop\"}",
        "call_id": "call_A"}),
    tokens("2026-06-23T11:30:09.100Z"),
    wrap("2026-06-23T11:30:12.400Z", "response_item", {
        "type": "function_call_output", "call_id": "call_A",
        "output": "Exit code: 1\nWall time: 3.3 seconds\nOutput:\nruff....Failed\n"}),
    wrap("2026-06-23T11:30:13.000Z", "response_item", {
        "type": "function_call", "name": "shell", "arguments":
        "{\"command\":[\"bash\",\"-lc\",\"ls\"]}", "call_id": "call_B"}),
    wrap("2026-06-23T11:30:13.250Z", "response_item", {
        "type": "function_call_output", "call_id": "call_B",
        "output": json.dumps({"output": "shop\ntests\n",
                              "metadata": {"exit_code": 0, "duration_seconds": 0.1}},
                             separators=(",", ":"))}),
    wrap("2026-06-23T11:30:14.000Z", "response_item", {
        "type": "custom_tool_call", "status": "completed", "call_id": "call_C",
        "name": "apply_patch", "input": "*** Begin Patch\n*** End Patch\n"}),
    wrap("2026-06-23T11:30:14.500Z", "response_item", {
        "type": "custom_tool_call_output", "call_id": "call_C",
        "output": "Chunk ID: 4c5113\nWall time: 0.0781 seconds\nProcess exited with code 2\n"
                  "Original token count: 9\nOutput:\npatch rejected\n"}),
    tokens("2026-06-23T11:30:15.000Z"),  # the same count again
    wrap("2026-06-23T11:30:16.000Z", "response_item", {
        "type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]}),
    wrap("2026-06-23T11:30:16.000Z", "event_msg", {"type": "error", "message": "stream "
                                                   "disconnected before completion\nretrying"}),
]
COLUMNS = ("kind, event_type, actor, target, session, action, args, result, ok, error, role, "
           "corr_id, tokens_in, tokens_out, tokens_cache_read, model, latency_ms")


def test_lines_map_to_columns(tmp_path):
    store = Store(tmp_path / "st")
    ingest([str(write(tmp_path / f"rollout-2026-06-23T11-30-00-{SID}.jsonl", LINES))], store)
    m, git = "gpt-5.2-codex", '{"command":"git commit -m fix","workdir":"/home/dev/shop"}'
    assert rows(store, f"SELECT {COLUMNS} FROM events ORDER BY line") == [
        ("session_start", "session_meta", "codex", None, SID, None, None, None, None, None, None,
         None, None, None, None, None, None),
        ("message", "message", "user", "codex", SID, None, None, None, None, None, "user", None,
         None, None, None, None, None),
        ("config", "turn_context", "codex", None, SID, None, None, None, None, None, None, None,
         None, None, None, m, None),
        ("tool_call", "function_call", "codex", None, SID, "shell_command", git,
         "ruff....Failed\n", False, "Exit code 1", None, "call_A", None, None, None, m, 3400.0),
        ("llm_call", "token_count", "codex", None, SID, None, None, None, None, None, None,
         "total:9860", 800, 60, 9000, m, None),
        ("response", "function_call_output", "codex", None, SID, "shell_command", None,
         "ruff....Failed\n", False, "Exit code 1", None, "call_A", None, None, None, None, None),
        ("tool_call", "function_call", "codex", None, SID, "shell", '{"command":["bash","-lc","ls"]}',
         "shop\ntests\n", True, None, None, "call_B", None, None, None, m, 250.0),
        ("response", "function_call_output", "codex", None, SID, "shell", None, "shop\ntests\n",
         True, None, None, "call_B", None, None, None, None, None),
        ("tool_call", "custom_tool_call", "codex", None, SID, "apply_patch",
         '"*** Begin Patch\\n*** End Patch\\n"', "patch rejected\n", False, "Exit code 2", None,
         "call_C", None, None, None, m, 500.0),
        ("response", "custom_tool_call_output", "codex", None, SID, "apply_patch", None,
         "patch rejected\n", False, "Exit code 2", None, "call_C", None, None, None, None, None),
        # the same running total again: a re-emit, not a model call
        ("record", "token_count", "codex", None, SID, None, None, None, None, None, None,
         "total:9860", None, None, None, None, None),
        ("message", "message", "codex", "user", SID, None, None, None, None, None, "assistant",
         None, None, None, None, m, None),
        ("record", "error", "codex", None, SID, None, None, None, None,
         "stream disconnected before completion", None, None, None, None, None, None, None),
    ]
    extra = json.loads(rows(store, "SELECT extra FROM events WHERE line = 2")[0][0])
    assert extra == {"cwd": "/home/dev/shop", "role": "user", "text": "commit it"}


def test_an_older_rollout_without_the_wrapper(tmp_path):
    old = [{"id": "5973b6c0-94b8-487b-a530-2aeb6098ae0e", "timestamp": "2025-04-18T17:03:11.520Z",
            "instructions": None},
           {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "ls"}]},
           {"record_type": "state"},
           {"type": "function_call", "name": "shell", "arguments": "{\"command\":[\"ls\"]}",
            "call_id": "call_1"},
           {"type": "function_call_output", "call_id": "call_1",
            "output": {"content": "sandbox denied", "success": False}}]
    path = write(tmp_path / "rollout-2025-04-18-5973b6c0-94b8-487b-a530-2aeb6098ae0e.jsonl", old)
    assert formats.sniff(path.read_bytes(), path).name == "codex"
    store = Store(tmp_path / "st")
    ingest([str(path)], store)
    assert rows(store, "SELECT kind, session, action, ok, error FROM events ORDER BY line") == [
        ("session_start", old[0]["id"], None, None, None),
        ("message", old[0]["id"], None, None, None),
        ("record", old[0]["id"], None, None, None),
        ("tool_call", old[0]["id"], "shell", False, "sandbox denied"),
        ("response", old[0]["id"], "shell", False, "sandbox denied")]


def test_an_output_read_in_a_later_run_reaches_its_call(tmp_path):
    log = write(tmp_path / f"rollout-2026-06-23T11-30-00-{SID}.jsonl", LINES[:5])
    store = Store(tmp_path / "st")
    ingest([str(log)], store)
    write(log, LINES[5:], "a")
    assert ingest([str(log)], store).files[0].status == "appended"
    assert rows(store, "SELECT line, ok, error, latency_ms, model FROM events "
                       "WHERE kind = 'tool_call' ORDER BY line") == [
        (4, False, "Exit code 1", 3400.0, "gpt-5.2-codex"), (7, True, None, 250.0, "gpt-5.2-codex"),
        (9, False, "Exit code 2", 500.0, "gpt-5.2-codex")]
    assert rows(store, "SELECT r.line, c.line FROM events r JOIN events c ON r.answers = c.event_id "
                       "ORDER BY 1") == [(6, 4), (8, 7), (10, 9)]
    # the re-emit in the second run is still seen as one
    assert rows(store, "SELECT count(*), sum(tokens_out) FROM events WHERE kind = 'llm_call'") \
        == [(1, 60)]


def test_a_real_rollout_head(tmp_path):
    """simonw/claude-code-transcripts' fixture (Codex 0.77.0, tests/data/codex/SOURCE.md)."""
    path = tmp_path / "rollout-2025-12-28T12-18-30-019b64e5-57fa-7463-b644-fba7e456f905.jsonl"
    shutil.copy(REAL, path)
    assert formats.sniff(path.read_bytes(), path).name == "codex"
    store = Store(tmp_path / "st")
    report = ingest([str(path)], store)
    assert report.events == 11 and not report.files[0].quarantined
    assert not [w for w in report.files[0].warnings if "does not know" in w]
    assert rows(store, "SELECT kind, count(*) FROM events GROUP BY 1 ORDER BY 1") == [
        ("config", 6), ("message", 3), ("record", 1), ("session_start", 1)]
    assert rows(store, "SELECT DISTINCT session, extra->>'$.cwd' FROM events") == [
        ("019b64e5-57fa-7463-b644-fba7e456f905", "/Users/macmini/Code/homelab-migration")]
    assert rows(store, "SELECT DISTINCT model FROM events WHERE kind = 'config'") == [
        ("gpt-5.2-codex",)]


def test_recognised_as_codex_only(tmp_path):
    for rel in SECTION["lines"]:
        path = SAMPLES / rel
        records = formats.sample_records(path.read_bytes()[:65536])
        assert [f.name for f in formats.FORMATS.values() if f.name != "generic"
                and f.sniff(records, path)] == ["codex"], rel
    # bare items are a rollout only under a rollout's name
    bare = [{"id": "x", "timestamp": "2025-04-18T17:03:11.520Z"},
            {"type": "message", "role": "user", "content": []}]
    other = write(tmp_path / "items.jsonl", bare)
    assert formats.sniff(other.read_bytes(), other).name == "generic"


# -- the planted loop -------------------------------------------------------------------------


def test_scan_finds_the_planted_error_loop(tmp_path):
    doc, code = scan(SAMPLES, tmp_path)
    assert code == 1
    hits = [f for f in doc["findings"] if f["detector"] == "repeated_error"
            and f["actors"] == [COMMIT["actor"]] and f["sessions"] == [COMMIT["session"]]]
    assert len(hits) == 1
    f = hits[0]
    assert f["events"] == COMMIT["count"] and f["severity"] in SERIOUS
    assert f["start"].startswith(COMMIT["start"][:19]) and f["end"].startswith(COMMIT["end"][:19])
    assert "shell_command" in f["title"] and "Exit code 1" in f["title"]
    # the re-read loop has no error to repeat: it is a stuck agent's, the same call 15 times
    reread = [f for f in doc["findings"] if f["severity"] in SERIOUS
              and f["sessions"] == [REREAD["session"]]]
    assert [(f["detector"], f["events"]) for f in reread] == [("repeated_action", REREAD["repeats"])]


def test_the_clean_twin_is_silent(tmp_path):
    key = write_codex_sessions(tmp_path / "clean", incident=False)
    assert key["incidents"] == []
    doc, code = scan(tmp_path / "clean", tmp_path)
    assert [f["title"] for f in doc["findings"] if f["severity"] in SERIOUS] == []
    assert code == 0


def test_a_turn_that_ended_in_error_carries_it(tmp_path):
    """`task_complete` of a turn the stream broke off (as a real rollout writes it)."""
    end = wrap("2026-06-23T11:30:20.000Z", "event_msg", {
        "type": "task_complete", "turn_id": "t-1", "last_agent_message": None,
        "error": {"message": "stream disconnected before completion: stream closed before "
                             "response.completed", "codex_error_info": "other"},
        "duration_ms": 3856})
    fine = wrap("2026-06-23T11:30:30.000Z", "event_msg", {
        "type": "task_complete", "turn_id": "t-2", "last_agent_message": "Done."})
    store = Store(tmp_path / "st")
    ingest([str(write(tmp_path / f"rollout-2026-06-23T11-30-00-{SID}.jsonl",
                      LINES[:2] + [end, fine]))], store)
    assert rows(store, "SELECT kind, event_type, error FROM events WHERE line > 2 "
                       "ORDER BY line") == [
        ("record", "task_complete", "stream disconnected before completion: stream closed "
                                    "before response.completed"),
        ("record", "task_complete", None)]

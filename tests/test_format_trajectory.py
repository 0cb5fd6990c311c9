"""The `trajectory` format: whole-file JSON trajectories (SWE-agent, mini-swe-agent, OpenHands,
AutoGen) read one event per step, at the step's own bytes; a rewritten document replaces its
events; the planted loops of the sample found by `loophound scan`; a real mini-swe-agent
trajectory read exactly."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from agent_transcripts import ROOT, SERIOUS, ingested, rows, scan, section
from typer.testing import CliRunner

from loophound import formats
from loophound.cli import app
from loophound.formats import trajectory
from loophound.ingest import ingest
from loophound.store import Store
from loophound.synth import write_trajectories

SECTION, SAMPLES = section("trajectory")
REAL = ROOT / "tests" / "data" / "trajectory" / "github_issue.traj.json"
INCIDENT = {i["kind"]: i for i in SECTION["incidents"]}
SWE, OPENHANDS, RESTORE = (INCIDENT[k] for k in ("same_edit_not_verbatim", "same_failing_test",
                                                   "restore_and_retry"))


def steps_of(path: Path) -> list:
    doc = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(doc, list):
        return doc
    return doc.get("trajectory") or doc.get("messages")


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Store:
    return ingested([SAMPLES], tmp_path_factory.mktemp("trajectory"))


# -- every step, exactly once, at its own bytes -----------------------------------------------


def test_every_step_is_one_event(sample):
    got = dict(rows(sample, "SELECT file, count(*) FROM events GROUP BY file"))
    assert rows(sample, "SELECT count(*) FROM quarantine") == [(0,)]
    for rel, n in SECTION["records"].items():
        assert got[str(SAMPLES / rel)] == n == len(steps_of(SAMPLES / rel)), rel
    assert sum(got.values()) == sum(SECTION["records"].values())
    assert rows(sample, "SELECT DISTINCT format FROM events") == [("trajectory",)]


def test_evidence_offsets_quote_the_step(sample):
    for rel in SECTION["records"]:
        path = SAMPLES / rel
        data, steps = path.read_bytes(), steps_of(path)
        got = rows(sample, "SELECT line, byte_offset, byte_length FROM events WHERE file = ? "
                           "ORDER BY line", [str(path)])
        assert [g[0] for g in got] == list(range(1, len(steps) + 1))
        for line, offset, length in got:
            assert json.loads(data[offset:offset + length]) == steps[line - 1], (rel, line)
            assert data[offset:offset + 1] == b"{" and data[offset + length - 1:][:1] == b"}"


def test_the_report_quotes_the_step(tmp_path):
    path = SAMPLES / SWE["file"]
    out = tmp_path / "report.html"
    res = CliRunner().invoke(app, ["investigate", str(path), "--out", str(out),
                                   "--generated-at", "2026-01-01T00:00:00Z"])
    assert res.exit_code == 0, res.output
    html = out.read_text(encoding="utf-8")
    assert "line not quoted" not in html
    assert "&quot;execution_time&quot;" in html  # a key only the quoted step's JSON holds


def test_the_simulated_clock_is_the_step_index(sample):
    swe = str(SAMPLES / SWE["file"])
    got = rows(sample, "SELECT min(ts), max(ts), count(DISTINCT ts), count(*), "
                       "count(*) FILTER (WHERE extra->>'$.clock' = 'step-index') "
                       "FROM events WHERE file = ?", [swe])[0]
    assert str(got[0]) == "2000-01-01 00:00:00" and got[2] == got[3] == got[4]
    assert (got[1] - got[0]).total_seconds() == got[3] - 1
    # the others state their own times: nothing of theirs on the simulated clock
    assert rows(sample, "SELECT count(*) FROM events WHERE file <> ? AND (ts < TIMESTAMP "
                        "'2026-01-01' OR extra LIKE '%step-index%')", [swe]) == [(0,)]
    assert trajectory.FORMAT.profile.simulated_clock.startswith("step-index")


def test_usage_is_counted_once_per_model_call(sample):
    for rel, want in SECTION["usage"].items():
        got = rows(sample, """SELECT sum(tokens_in), sum(tokens_cache_read), sum(tokens_out),
                                     count(tokens_out) FROM events WHERE file = ?""",
                   [str(SAMPLES / rel)])[0]
        assert got == (want["input"], want["cached"], want["output"], want["calls"]), rel


def test_every_call_carries_its_observation(sample):
    calls = rows(sample, """SELECT count(*), count(ok), count(result), count(args)
                            FROM events WHERE kind = 'tool_call'""")[0]
    assert calls[0] > 40 and set(calls) == {calls[0]}
    answered = rows(sample, "SELECT count(*) FROM events r JOIN events c ON r.answers = c.event_id "
                            "WHERE r.kind = 'response' AND r.corr_id = c.corr_id")[0][0]
    responses = rows(sample, "SELECT count(*) FROM events WHERE kind = 'response'")[0][0]
    assert answered == responses > 20


# -- the planted loops --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scanned(tmp_path_factory) -> tuple[dict, int]:
    return scan(SAMPLES, tmp_path_factory.mktemp("trajectory-scan"))


@pytest.mark.parametrize("incident", [SWE, OPENHANDS], ids=lambda i: i["kind"])
def test_the_planted_error_loop_is_found(scanned, incident):
    doc, status = scanned
    hits = [f for f in doc["findings"] if f["detector"] == "repeated_error"
            and incident["session"] in f["sessions"]]
    assert len(hits) == 1, [f["title"] for f in doc["findings"]]
    f = hits[0]
    assert f["actors"] == [incident["actor"]] and f["events"] == incident["count"]
    assert f["severity"] in SERIOUS and status == 1
    assert f["start"].startswith(incident["start"][:19]) and f["end"].startswith(incident["end"][:19])
    assert incident["error"][:60] in f["title"]
    lines = {e["line"] for e in f["evidence"]}
    assert lines <= set(range(incident["first_line"], incident["last_line"] + 1))


def test_the_restore_and_retry_loop_is_found_as_a_stuck_agent(scanned):
    # a loop of successes: no error to repeat, so repeated_error must not claim it, and the
    # same call with the same result is repeated_action's (9, a test run, then 6 more)
    doc, _ = scanned
    assert RESTORE["detector"] == "repeated_action" and RESTORE["repeats"] == 15
    assert not [f for f in doc["findings"] if f["detector"] == "repeated_error"
                and RESTORE["session"] in f["sessions"]]
    found = [f for f in doc["findings"] if f["detector"] == "repeated_action"
             and RESTORE["session"] in f["sessions"] and RESTORE["actor"] in f["actors"]]
    assert len(found) == 1 and found[0]["events"] == RESTORE["repeats"]


def test_the_clean_twin_has_nothing_serious(tmp_path):
    twin = write_trajectories(tmp_path / "clean", seed=7, incident=False)
    assert twin["incidents"] == []
    doc, status = scan(tmp_path / "clean", tmp_path)
    assert [f["title"] for f in doc["findings"] if f["severity"] in SERIOUS] == []
    assert status == 0 and doc["coverage"]["verdict"] == "clean"


# -- a document is rewritten, not appended to ---------------------------------------------------


def _statuses(report) -> list[str]:
    return [f.status for f in report.files]


def test_a_rewritten_document_replaces_its_events(tmp_path):
    src = SAMPLES / SWE["file"]
    doc = json.loads(src.read_text())
    path = tmp_path / "run" / "acme__billing-412.traj"
    path.parent.mkdir()
    first = dict(doc, trajectory=doc["trajectory"][:8])
    path.write_text(json.dumps(first, indent=2))
    store = Store(tmp_path / "st")
    assert _statuses(ingest([str(path)], store)) == ["new"]
    assert rows(store, "SELECT count(*) FROM events") == [(8,)]
    assert _statuses(ingest([str(path)], store)) == ["unchanged"]
    # the agent goes on: the whole file is written again, with more steps
    path.write_text(json.dumps(doc, indent=2))
    assert _statuses(ingest([str(path)], store)) == ["replaced"]
    n = len(doc["trajectory"])
    assert rows(store, "SELECT count(*), count(DISTINCT line), count(DISTINCT event_id), max(line) "
                       "FROM events") == [(n, n, n, n)]
    # a copy of it elsewhere holds nothing new
    copy = tmp_path / "copy.traj"
    shutil.copy(path, copy)
    report = ingest([str(copy)], store)
    assert _statuses(report) == ["unchanged"] and "already read" in report.files[0].warnings[0]
    assert rows(store, "SELECT count(*) FROM events") == [(n,)]
    # and the replaced events are the ones quoted: offsets into the new bytes
    data = path.read_bytes()
    for line, offset, length in rows(store, "SELECT line, byte_offset, byte_length FROM events"):
        assert json.loads(data[offset:offset + length]) == doc["trajectory"][line - 1]


def test_a_document_cut_off_while_written_keeps_its_complete_steps(tmp_path):
    text = (SAMPLES / OPENHANDS["file"]).read_text()
    events = json.loads(text)
    cut = text[: text.index('"id": 9,')]  # inside the tenth event
    path = tmp_path / "trajectories" / "cut.json"
    path.parent.mkdir()
    path.write_text(cut)
    store = ingested([path], tmp_path)
    assert rows(store, "SELECT count(*) FROM events") == [(9,)]
    assert rows(store, "SELECT line, reason FROM quarantine") == [(10, "invalid_json")]
    # complete again: read whole, the cut step no longer quarantined
    path.write_text(text)
    assert _statuses(ingest([str(path)], store)) == ["replaced"]
    assert rows(store, "SELECT count(*) FROM events") == [(len(events),)]
    assert rows(store, "SELECT count(*) FROM quarantine") == [(0,)]


def test_steps_that_are_not_objects_are_quarantined_and_counted(tmp_path):
    doc = {"trajectory": [{"action": "ls\n", "observation": "a.py\n"}, "not a step", 7,
                          {"action": "cat a.py\n", "observation": "x = 1\n"}],
           "history": [], "info": {}}
    path = tmp_path / "odd.traj"
    path.write_text(json.dumps(doc, indent=2))
    store = ingested([path], tmp_path)
    assert rows(store, "SELECT line FROM events ORDER BY line") == [(1,), (4,)]
    assert rows(store, "SELECT line, reason FROM quarantine ORDER BY line") == [
        (2, "not_an_object"), (3, "not_an_object")]
    assert rows(store, "SELECT lines FROM inputs") == [(4,)]


# -- recognised by structure --------------------------------------------------------------------


def test_each_flavour_is_recognised_and_json_lines_are_not(tmp_path):
    for rel in SECTION["records"]:
        path = SAMPLES / rel
        assert formats.sniff(path.read_bytes()[:65536], path).name == "trajectory", rel
    assert formats.sniff(REAL.read_bytes(), REAL).name == "trajectory"
    lines = tmp_path / "chats.jsonl"  # a fine-tuning set: one {"messages": [...]} a line
    lines.write_text("".join(json.dumps({"messages": [{"role": "user", "content": str(i)}],
                                         "info": {}}) + "\n" for i in range(3)))
    assert formats.sniff(lines.read_bytes(), lines).name != "trajectory"
    other = tmp_path / "package.json"
    other.write_text(json.dumps({"name": "shop", "version": "1.0.0", "scripts": {}}, indent=2))
    assert formats.sniff(other.read_bytes(), other) is None


def test_a_traj_file_in_a_folder_is_read(tmp_path):
    src = SAMPLES / SWE["file"]
    shutil.copy(src, tmp_path / "run.traj")
    report = ingest([str(tmp_path)], Store(tmp_path / "st"))
    assert [(Path(f.path).name, f.format, f.status) for f in report.files] == [
        ("run.traj", "trajectory", "new")]


# -- records as the agents write them ---------------------------------------------------------

COLS = "kind, actor, target, session, action, args, ok, error, corr_id, tokens_in, tokens_out"


def load(tmp_path: Path, name: str, doc, columns: str = COLS) -> list[tuple]:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2))
    store = ingested([path], tmp_path / ("store-" + name.replace("/", "_")))
    return rows(store, f"SELECT {columns} FROM events ORDER BY line")


def test_swe_agent_0x_steps(tmp_path):
    # SWE-agent 0.7: `state` as a JSON string, no execution_time, observation with a CRLF
    doc = {"environment": "swe_main", "trajectory": [
        {"action": "open tests/missing_colon.py\n",
         "observation": "[File: /repo/tests/missing_colon.py (10 lines total)]\r\n1:#!/usr/bin/env",
         "response": "Let's open it.\n\n```\nopen tests/missing_colon.py\n```",
         "state": "{\"open_file\": \"n/a\", \"working_dir\": \"/repo\"}\n",
         "thought": "Let's open it.\n\n"},
        {"action": "edit 4:4\ndef division(a: float, b: float) -> float\nend_of_edit\n",
         "observation": "Your proposed edit has introduced new syntax error(s). Please read this "
                        "error message carefully and then retry editing the file.\n\nERRORS:\n"
                        "- E999 SyntaxError: invalid syntax\n",
         "response": "", "state": "{}", "thought": ""},
        {"action": "cd /repo && PYTHONPATH=src python tests/missing_colon.py\n",
         "observation": "bash: python: command not found\n", "response": "", "state": "{}",
         "thought": ""}],
        "history": [], "info": {"exit_status": "submitted"}}
    got = load(tmp_path, "repo-i1.traj", doc, COLS + ", extra->>'$.state.working_dir'")
    assert got == [
        ("tool_call", "swe-agent", None, "repo-i1", "open",
         '{"command":"open tests/missing_colon.py"}', True, None, None, None, None, "/repo"),
        ("tool_call", "swe-agent", None, "repo-i1", "edit",
         '{"command":"edit 4:4\\ndef division(a: float, b: float) -> float\\nend_of_edit"}',
         False, "Your proposed edit has introduced new syntax error(s). Please read this error "
                "message carefully and then retry editing the file.", None, None, None, None),
        ("tool_call", "swe-agent", None, "repo-i1", "python",
         '{"command":"cd /repo && PYTHONPATH=src python tests/missing_colon.py"}', False,
         "bash: python: command not found", None, None, None, None)]


def test_mini_swe_agent_v2_tool_calls(tmp_path):
    usage = {"completion_tokens": 54, "prompt_tokens": 1798, "total_tokens": 1852,
             "prompt_tokens_details": {"cached_tokens": 1792}}
    doc = {"info": {"model_stats": {"instance_cost": 0.0001, "api_calls": 1},
                    "config": {"model": {"model_name": "deepseek/deepseek-chat"}},
                    "mini_version": "2.3.0", "exit_status": "Submitted"},
           "messages": [
               {"role": "system", "content": "You are a helpful assistant."},
               {"role": "user", "content": "<pr_description>fix it</pr_description>"},
               {"content": "", "role": "assistant", "tool_calls": [{
                   "index": 0, "function": {"arguments": "{\"command\": \"cd /testbed && cat "
                                            "astropy/modeling/separable.py\"}", "name": "bash"},
                   "id": "call_00_dLk7", "type": "function"}], "function_call": None,
                "provider_specific_fields": None, "extra": {
                    "actions": [{"command": "cd /testbed && cat astropy/modeling/separable.py",
                                 "tool_call_id": "call_00_dLk7"}],
                    "response": {"id": "952c66eb", "created": 1780680348,
                                 "model": "deepseek-v4-flash", "usage": usage},
                    "cost": 7.4536e-05, "timestamp": 1780680350.4922552}},
               {"content": "<returncode>1</returncode>\n<output>\ncat: astropy/modeling/sep.py: "
                           "No such file or directory\n</output>",
                "extra": {"raw_output": "cat: astropy/modeling/sep.py: No such file or directory\n",
                          "returncode": 1, "timestamp": 1780680351.1, "exception_info": ""},
                "tool_call_id": "call_00_dLk7", "role": "tool"}],
           "trajectory_format": "mini-swe-agent-1.1", "instance_id": "astropy__astropy-12907"}
    got = load(tmp_path, "astropy__astropy-12907.traj.json", doc,
               COLS + ", tokens_cache_read, cost_usd, model, ts")
    session, err = "astropy__astropy-12907", "cat: astropy/modeling/sep.py: No such file or directory"
    assert [g[:9] for g in got] == [
        ("message", "system", "mini-swe-agent", session, None, None, None, None, None),
        ("message", "user", "mini-swe-agent", session, None, None, None, None, None),
        ("tool_call", "mini-swe-agent", None, session, "cat",
         '{"command":"cd /testbed && cat astropy/modeling/separable.py"}', False, err,
         "call_00_dLk7"),
        ("response", "mini-swe-agent", None, session, "cat", None, False, err, "call_00_dLk7")]
    call = got[2]
    assert call[9:14] == (6, 54, 1792, 7.4536e-05, "deepseek-v4-flash")
    # the call's own time (extra.timestamp); the system prompt and task, which have none,
    # take the first time after them
    assert call[14].isoformat(timespec="milliseconds") == "2026-06-05T17:25:50.492"
    assert got[0][14] == got[1][14] == call[14]


def test_openhands_events(tmp_path):
    meta = {"function_name": "execute_bash", "tool_call_id": "toolu_01", "model_response": {
        "id": "chatcmpl-1", "created": 1738046713, "model": "claude-3-5-sonnet-20241022",
        "usage": {"completion_tokens": 120, "prompt_tokens": 3486, "total_tokens": 3606,
                  "cache_creation_input_tokens": 3482, "cache_read_input_tokens": 0}},
        "total_calls_in_response": 2}
    events = [
        {"id": 0, "timestamp": "2025-01-27T22:44:56.900854", "source": "user",
         "message": "Please create a 2048 game.", "action": "message",
         "args": {"content": "Please create a 2048 game.", "image_urls": None}},
        {"id": 3, "timestamp": "2025-01-27T22:45:13.764487", "source": "agent", "message": "",
         "action": "run", "tool_call_metadata": meta,
         "args": {"command": "python3 game.py", "thought": "Try it."}, "timeout": 120},
        {"id": 4, "timestamp": "2025-01-27T22:45:13.801384", "source": "agent",
         "message": "", "action": "edit",
         "tool_call_metadata": dict(meta, function_name="str_replace_editor", tool_call_id="toolu_02"),
         "args": {"path": "/workspace/game.py", "command": "str_replace", "thought": "Fix."}},
        {"id": 5, "timestamp": "2025-01-27T22:45:14.2", "source": "agent", "cause": 3,
         "message": "Command `python3 game.py` executed with exit code 1.",
         "observation": "run", "content": "ModuleNotFoundError: No module named 'keyboard'",
         "extras": {"command": "python3 game.py", "metadata": {"exit_code": 1}}, "success": False},
        {"id": 6, "timestamp": "2025-01-27T22:45:14.5", "source": "agent", "cause": 4,
         "message": "", "observation": "edit", "content": "ERROR:\nNo replacement was performed, "
         "old_str `x` did not appear verbatim in /workspace/game.py.", "extras": {}},
        {"id": 7, "timestamp": "2025-01-27T22:45:15.0", "source": "environment", "message": "",
         "observation": "agent_state_changed", "content": "", "extras": {"agent_state": "error"}}]
    got = load(tmp_path, "trajectories/3f2a.json", events, COLS + ", answers IS NOT NULL")
    no_module = "ModuleNotFoundError: No module named 'keyboard'"
    verbatim = "No replacement was performed, old_str `x` did not appear verbatim in /workspace/game.py."
    assert got == [
        ("message", "user", "openhands", "3f2a", None, None, None, None, None, None, None, False),
        ("tool_call", "openhands", None, "3f2a", "python3", '{"command":"python3 game.py"}', False,
         no_module, "3", 4, 120, False),  # prompt less the cache write
        ("tool_call", "openhands", None, "3f2a", "str_replace_editor",
         '{"path":"/workspace/game.py","command":"str_replace"}', False, verbatim, "4", None, None,
         False),  # the same model response: its usage is counted on the first call only
        ("response", "openhands", None, "3f2a", "python3", None, False, no_module, "3", None,
         None, True),
        ("response", "openhands", None, "3f2a", "str_replace_editor", None, False, verbatim, "4",
         None, None, True),
        ("record", "environment", None, "3f2a", None, None, None, None, None, None, None, False)]


def test_autogen_messages(tmp_path):
    doc = {"messages": [
        {"source": "user", "models_usage": None, "metadata": {}, "content": "What is 2+2?",
         "type": "TextMessage"},
        {"source": "assistant", "models_usage": {"prompt_tokens": 61, "completion_tokens": 15},
         "metadata": {}, "content": [{"id": "call_1", "arguments": "{\"a\": 2, \"b\": 2}",
                                      "name": "add"}], "type": "ToolCallRequestEvent"},
        {"source": "assistant", "models_usage": None, "metadata": {}, "content": [
            {"content": "Traceback (most recent call last):\nValueError: b must be odd",
             "name": "add", "call_id": "call_1", "is_error": True}],
         "type": "ToolCallExecutionEvent"},
        {"source": "assistant", "models_usage": {"prompt_tokens": 90, "completion_tokens": 8},
         "metadata": {}, "content": "4", "type": "TextMessage"},
        {"source": "assistant", "models_usage": None, "metadata": {}, "content": "planner",
         "target": "planner", "context": [], "type": "HandoffMessage"}],
        "stop_reason": "Handoff to planner from assistant detected."}
    got = load(tmp_path, "team.json", doc)
    err = "ValueError: b must be odd"
    assert got == [
        ("message", "user", "assistant", "team", None, None, None, None, None, None, None),
        ("tool_call", "assistant", None, "team", "add", '{"a": 2, "b": 2}', False, err, "call_1",
         61, 15),
        ("response", "assistant", None, "team", "add", None, False, err, "call_1", None, None),
        ("message", "assistant", "user", "team", None, None, None, None, None, 90, 8),
        ("message", "assistant", "planner", "team", None, None, None, None, None, None, None)]


# -- a real trajectory ------------------------------------------------------------------------


def test_a_real_mini_swe_agent_trajectory(tmp_path):
    store = ingested([REAL], tmp_path)
    assert rows(store, "SELECT count(*), count(DISTINCT line) FROM events") == [(22, 22)]
    assert rows(store, "SELECT count(*) FROM quarantine") == [(0,)]
    assert rows(store, "SELECT kind, count(*) FROM events GROUP BY kind ORDER BY kind") == [
        ("message", 2), ("response", 10), ("tool_call", 10)]
    assert rows(store, """SELECT line, action, error FROM events WHERE kind = 'tool_call'
                          AND NOT ok ORDER BY line""") == [
        (3, "cat", "cat: /Users/fuchur/Documents/24/git_sync/swe-agent-test-repo/tests/./"
                   "missing_colon.py: No such file or directory"),
        (17, "python3", "ZeroDivisionError: division by zero")]
    assert rows(store, "SELECT DISTINCT session, actor FROM events WHERE kind = 'tool_call'") == [
        ("github_issue", "mini-swe-agent")]
    # no clock in it: step n at n s on the simulated clock, and no latency made up from that
    assert rows(store, "SELECT min(ts), max(ts), count(latency_ms) FROM events")[0][2] == 0
    assert [str(t) for t in rows(store, "SELECT min(ts), max(ts) FROM events")[0]] == [
        "2000-01-01 00:00:00", "2000-01-01 00:00:21"]
    doc, status = scan(REAL, tmp_path)
    assert doc["findings"] == [] and status == 0 and doc["coverage"]["verdict"] == "clean"

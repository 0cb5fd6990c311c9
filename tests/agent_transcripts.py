"""What the tests of the agent-transcript formats (claude-code, codex) share: the sample
section and its answer key, a store to read, a scan's findings, a file written line by line."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path

from typer.testing import CliRunner

from loophound.cli import app
from loophound.ingest import ingest
from loophound.store import Store

ROOT = Path(__file__).resolve().parents[1]
SERIOUS = {"high", "critical"}


def section(name: str) -> tuple[dict, Path]:
    """The answer key of a sample section and the folder it describes."""
    key = json.loads((ROOT / "sample_logs" / "EXPECTED.json").read_text())["sections"][name]
    return key, ROOT / "sample_logs" / key["dir"]


def ingested(paths: list[Path], root: Path) -> Store:
    store = Store(root / "st")
    report = ingest([str(p) for p in paths], store)
    assert {f.status for f in report.files} == {"new"}
    return store


def rows(store: Store, sql: str, params=None) -> list[tuple]:
    return store.connect().execute(sql, params or []).fetchall()


def scan(path: Path, tmp: Path) -> tuple[dict, int]:
    """`loophound scan PATH --json`: the findings document and the exit status."""
    out = tmp / "findings.json"
    res = CliRunner().invoke(app, ["scan", str(path), "--store", str(tmp / "scan"), "--json",
                                   str(out)])
    return json.loads(out.read_text()), res.exit_code


def write(path: Path, records: list[dict], mode: str = "w") -> Path:
    """Records as compact JSON lines (written anew, or appended with mode `a`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open(mode) as fh:
        fh.write("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records))
    return path


# -- sessions built call by call ----------------------------------------------------------------
# An agent's tool calls and what each got back, written as Claude Code or Codex writes them, to
# test what detectors make of a shape (a commit the hook rejects 7 times with `git add` between)
# without a sample file per shape. Each builder says on which line each call's result lands.

T0 = dt.datetime(2026, 6, 22, 11, 0, 0)


@dataclass(frozen=True)
class Call:
    """One tool call, `at` seconds into the session, and the text it got back."""

    tool: str
    input: dict
    output: str
    failed: bool
    at: float


def _iso(seconds: float) -> str:
    return (T0 + dt.timedelta(seconds=seconds)).isoformat(timespec="milliseconds") + "Z"


def claude_code_lines(session: str, calls: list[Call], prompt: str = "Commit it.") -> list[dict]:
    """A Claude Code transcript: the user's prompt (line 1), then per call its `tool_use`
    (line 2 + 2i) and its `tool_result` (line 3 + 2i, 2 s later)."""
    env = {"isSidechain": False, "userType": "external", "cwd": "/home/dev/shop",
           "sessionId": session, "version": "2.1.29", "gitBranch": "main"}
    usage = {"input_tokens": 4, "cache_creation_input_tokens": 200, "cache_read_input_tokens": 9000,
             "output_tokens": 60}
    out = [env | {"parentUuid": None, "type": "user", "uuid": f"{session}-u0",
                  "message": {"role": "user", "content": prompt}, "timestamp": _iso(0)}]
    for i, c in enumerate(calls):
        use_id = f"toolu_{session[:8]}_{i:03d}"
        out.append(env | {"parentUuid": out[-1]["uuid"], "type": "assistant",
                          "uuid": f"{session}-a{i}", "requestId": f"req_{session[:8]}_{i}",
                          "timestamp": _iso(c.at), "message": {
                              "model": "claude-opus-4-5-20251101", "id": f"msg_{session[:8]}_{i}",
                              "type": "message", "role": "assistant", "stop_reason": "tool_use",
                              "usage": usage, "content": [{"type": "tool_use", "id": use_id,
                                                           "name": c.tool, "input": c.input}]}})
        out.append(env | {"parentUuid": out[-1]["uuid"], "type": "user", "uuid": f"{session}-r{i}",
                          "timestamp": _iso(c.at + 2), "message": {"role": "user", "content": [{
                              "type": "tool_result", "tool_use_id": use_id, "content": c.output,
                              "is_error": c.failed}]}})
    return out


def claude_code_result_line(i: int) -> int:
    """The line of the `i`th call's result in `claude_code_lines`."""
    return 3 + 2 * i


def codex_lines(session: str, calls: list[Call], prompt: str = "Commit it.") -> list[dict]:
    """A Codex rollout: session meta, the prompt and the turn context (lines 1-3), then per call
    its `function_call` (line 4 + 2i) and its output (line 5 + 2i, 2 s later). A call's input
    is its arguments; a failed call exits with code 1."""
    def item(seconds: float, kind: str, payload: dict) -> dict:
        return {"timestamp": _iso(seconds), "type": kind, "payload": payload}

    out = [item(0, "session_meta", {"id": session, "timestamp": _iso(0), "cwd": "/home/dev/shop",
                                    "originator": "codex_cli_rs", "cli_version": "0.77.0",
                                    "source": "cli", "model_provider": "openai"}),
           item(0.1, "response_item", {"type": "message", "role": "user",
                                       "content": [{"type": "input_text", "text": prompt}]}),
           item(0.2, "turn_context", {"cwd": "/home/dev/shop", "model": "gpt-5.2-codex"})]
    for i, c in enumerate(calls):
        call_id = f"call_{i:03d}"
        out.append(item(c.at, "response_item", {
            "type": "function_call", "name": c.tool, "call_id": call_id,
            "arguments": json.dumps(c.input, separators=(",", ":"))}))
        out.append(item(c.at + 2, "response_item", {
            "type": "function_call_output", "call_id": call_id,
            "output": f"Exit code: {1 if c.failed else 0}\nWall time: 0.{i % 9 + 1} seconds\n"
                      f"Output:\n{c.output}"}))
    return out


def codex_result_line(i: int) -> int:
    """The line of the `i`th call's output in `codex_lines`."""
    return 5 + 2 * i


def mini_swe_agent_document(instance: str, calls: list[Call]) -> dict:
    """A mini-swe-agent trajectory (`.traj.json`, tool calls): the system prompt and the task
    (records 1-2), then per call the assistant's `bash` tool call (record 3 + 2i) and its
    observation (record 4 + 2i, 2 s later). A call's input is `{"command": ...}`; a failed
    call returns code 1."""
    epoch = (T0 - dt.datetime(1970, 1, 1)).total_seconds()
    messages: list[dict] = [{"role": "system", "content": "You are a helpful assistant."},
                            {"role": "user", "content": f"<pr_description>{instance}</pr_description>"}]
    for i, c in enumerate(calls):
        call_id = f"call_{i:02d}"
        messages.append({"role": "assistant", "content": "", "tool_calls": [{
            "index": 0, "id": call_id, "type": "function", "function": {
                "name": "bash", "arguments": json.dumps(c.input)}}],
            "extra": {"actions": [{"command": c.input["command"], "tool_call_id": call_id}],
                      "timestamp": epoch + c.at}})
        code = 1 if c.failed else 0
        messages.append({"role": "tool", "tool_call_id": call_id,
                         "content": f"<returncode>{code}</returncode>\n<output>\n{c.output}\n</output>",
                         "extra": {"raw_output": c.output, "returncode": code,
                                   "timestamp": epoch + c.at + 2, "exception_info": ""}})
    return {"info": {"mini_version": "2.3.0", "exit_status": "Submitted",
                     "config": {"model": {"model_name": "deepseek/deepseek-chat"}}},
            "messages": messages, "trajectory_format": "mini-swe-agent-1.1",
            "instance_id": instance}


def mini_swe_agent_result_record(i: int) -> int:
    """The record (step) of the `i`th call's observation in `mini_swe_agent_document`."""
    return 4 + 2 * i

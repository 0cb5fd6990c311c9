"""Synthetic sessions whose sub-agents run away, and their healthy look-alikes.

`claude-code/`: Claude Code 2.1 main sessions (the shape of the real 2.1.39 sessions in
tests/data/real-agents): a `Task` call starts a subagent; its transcript is relayed into the
main session in `agent_progress` lines (`data.message`, `data.agentId`, `parentToolUseID` =
the Task call); the Task's result names the subagent (`toolUseResult.agentId`).
- incident `respawn` (session `runaway`): the agent starts a subagent with the same prompt
  ("make tests/test_api.py pass") 40 times, each subagent reading, running the test, failing
  and giving up, the agent re-running the test between spawns; the clean twin gives up on the
  subagent after its second try and fixes the test itself.
- healthy in both: a session that starts 3 subagents for 3 distinct tasks (explore, plan,
  review), and one that fans out 12 subagents over 12 distinct modules.

`otlp/`: OpenTelemetry traces (GenAI names, one trace a line).
- incident `nested` (conversation `deep`): `planner` invoking `planner` 40 levels deep, each
  level a nested `invoke_agent` span with its model call;
- healthy in both: an orchestrator invoking `researcher`, `writer` and `reviewer` once each,
  and a chain two deep (`orchestrator` → `coder` → `tester`).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from ._common import hex_id, stream, uuid4, write_lines
from .agents_sdk import SCOPE, _Trace
from .claude_code import SUB_MODEL, _b62, _Transcript
from .otlp import INTERNAL, Tracer, resource_spans

Record = dict[str, Any]
RESPAWNS = 40
FAILING = ("Exit code 1\nF                                                    [100%]\n"
           "FAILED tests/test_api.py::test_rate_limit - assert 429 == 200\n1 failed in 0.41s")
GAVE_UP = "I could not make tests/test_api.py pass: the rate limiter still answers 429."
PROMPT = ("Make tests/test_api.py pass. Run it with `pytest tests/test_api.py`, read the "
          "failure, fix the code under src/api/, and report what you changed.")


def _subagent_run(main: _Transcript, rng, prompt: str, kind: str, work: list[tuple[str, Record, str, bool]],
                  answer: str, description: str) -> int:
    """A Task call, its subagent's lines relayed in progress lines, then its result; returns
    the Task call's line number."""
    tool_id = "toolu_01" + _b62(rng, 22)
    uids = main.respond(rng, [{"type": "tool_use", "id": tool_id, "name": "Task", "input": {
        "description": description, "prompt": prompt, "subagent_type": kind}}])
    line = len(main.lines)
    aid = hex_id(rng, 7)
    sub = _Transcript(main.session, main.slug, main.branch, agent_id=aid, model=SUB_MODEL)
    sub.at(main.t)
    sub.prompt(rng, prompt, wait=(0.2, 0.8))
    tools = 0
    for name, tool_input, output, failed in work:
        sub.call(rng, name, tool_input, output, failed)
        tools += 1
    sub.say(rng, answer)
    for rec in sub.lines:
        main.lines.append({
            "parentUuid": main.parent, "isSidechain": False, "userType": "external",
            "cwd": rec["cwd"], "sessionId": main.session, "version": rec["version"],
            "gitBranch": main.branch, "slug": main.slug, "type": "progress",
            "data": {"message": {"type": rec["type"], "message": rec["message"],
                                 "uuid": rec["uuid"], "timestamp": rec["timestamp"]},
                     "normalizedMessages": [], "type": "agent_progress", "prompt": prompt,
                     "agentId": aid},
            "toolUseID": "agent_msg_01" + _b62(rng, 22), "parentToolUseID": tool_id,
            "uuid": uuid4(rng), "timestamp": rec["timestamp"]})
    main.at(sub.t)
    spent = sub.usage
    main.result(rng, tool_id, uids[-1], [{"type": "text", "text": answer}], False, {
        "status": "completed", "prompt": prompt, "agentId": aid,
        "content": [{"type": "text", "text": answer}],
        "totalDurationMs": int((sub.t - main.t).total_seconds() * 1000) + 1000,
        "totalTokens": spent["input"] + spent["output"] + spent["cache_read"] + spent["cache_write"],
        "totalToolUseCount": tools,
        "usage": {"input_tokens": spent["input"], "output_tokens": spent["output"]}},
        took=(0.2, 1.0))
    return line


def _runaway(seed: int, incident: bool, out: Path) -> Record:
    rng = stream(seed, "subagents-runaway")
    main = _Transcript(uuid4(rng), "steady-fixing-otter", "fix/rate-limit")
    main.at(dt.datetime(2026, 7, 3, 9, 0, tzinfo=dt.UTC))
    main.prompt(rng, "The API tests fail since the rate limiter change. Get them green.")
    spawns = RESPAWNS if incident else 2
    lines = []
    work = [("Read", {"file_path": "/home/dev/shop/src/api/limits.py"}, "1\tLIMIT = 10", False),
            ("Bash", {"command": "pytest tests/test_api.py", "description": "Run the API tests"},
             FAILING, True)]
    for k in range(spawns):
        lines.append(_subagent_run(main, rng, PROMPT, "general-purpose", work, GAVE_UP,
                                   "Fix failing API test" if k % 3 else "Make API tests pass"))
        main.bash(rng, "pytest tests/test_api.py", "Check the API tests", FAILING, True)
    if not incident:
        main.edit(rng, "/home/dev/shop/src/api/limits.py", "LIMIT = 10", "LIMIT = 100")
        main.bash(rng, "pytest tests/test_api.py", "Check the API tests", "1 passed in 0.38s")
    name = f"{main.session}.jsonl"
    write_lines(out / name, [json.dumps(r, separators=(",", ":"), ensure_ascii=False)
                             for r in main.lines])
    entry = {"file": name, "session": main.session, "spawns": spawns, "loop": incident,
             "first_line": lines[0], "last_line": len(main.lines)}
    return entry


def _healthy_sessions(seed: int, out: Path) -> list[Record]:
    found = []
    rng = stream(seed, "subagents-three")
    main = _Transcript(uuid4(rng), "calm-planning-heron", "feat/export")
    main.at(dt.datetime(2026, 7, 3, 11, 0, tzinfo=dt.UTC))
    main.prompt(rng, "Add CSV export to the reports page.")
    for kind, desc, prompt in (
            ("Explore", "Find the report code", "Find where reports are rendered and list the files."),
            ("Plan", "Plan the CSV export", "Plan a CSV export for reports: endpoints, tests."),
            ("general-purpose", "Review the diff", "Review the export diff for bugs.")):
        _subagent_run(main, rng, prompt, kind, [
            ("Grep", {"pattern": "render_report", "output_mode": "files_with_matches"},
             "Found 2 files\nsrc/reports/view.py\nsrc/reports/csv.py", False)],
            "Done: see the files above.", desc)
    found.append(_write(main, out, "three_distinct_tasks", 3))
    rng = stream(seed, "subagents-fanout")
    main = _Transcript(uuid4(rng), "wide-reading-lynx", "docs/modules")
    main.at(dt.datetime(2026, 7, 3, 13, 0, tzinfo=dt.UTC))
    main.prompt(rng, "Write a one-paragraph summary of every module under src/.")
    modules = ["api", "auth", "billing", "cart", "catalog", "checkout", "emails", "export",
               "inventory", "reports", "search", "users"]
    for m in modules:
        _subagent_run(main, rng, f"Summarise the module src/{m}/ in one paragraph.", "Explore", [
            ("Read", {"file_path": f"/home/dev/shop/src/{m}/__init__.py"}, f"1\t\"\"\"{m}\"\"\"",
             False)], f"src/{m}/ handles {m}.", f"Summarise src/{m}")
    found.append(_write(main, out, "fan_out_over_distinct_modules", len(modules)))
    return found


def _write(main: _Transcript, out: Path, kind: str, spawns: int) -> Record:
    name = f"{main.session}.jsonl"
    write_lines(out / name, [json.dumps(r, separators=(",", ":"), ensure_ascii=False)
                             for r in main.lines])
    return {"kind": kind, "file": name, "session": main.session, "spawns": spawns, "loop": False}


# -- OpenTelemetry: sub-agents invoked by agents ------------------------------------------------

OTLP_FILE = "traces.jsonl"
RESOURCES = {"crew": [("service.name", "crew"), ("telemetry.sdk.language", "python")]}
START = dt.datetime(2026, 7, 3, 15, 0, tzinfo=dt.UTC)


def _invoke(x: _Trace, parent: str | None, agent: str, t: dt.datetime, inside) -> dt.datetime:
    """An `invoke_agent` span of `agent` under `parent`: its model call, then what `inside`
    does (given the span's id and the time), then its end."""
    sid = hex_id(x.rng, 16)
    start = t
    t = x.chat(sid, agent, t + dt.timedelta(milliseconds=x.rng.randint(5, 30)))
    t = inside(sid, t)
    end = t + dt.timedelta(milliseconds=x.rng.randint(2, 20))
    x.span(SCOPE, parent, f"invoke_agent {agent}", INTERNAL, start, end, [
        ("gen_ai.operation.name", "invoke_agent"), ("gen_ai.agent.name", agent),
        ("gen_ai.conversation.id", x.conv)], span_id=sid)
    return end


def _chain(x: _Trace, parent: str | None, agents: list[str], t: dt.datetime) -> dt.datetime:
    """`agents[0]` invoking `agents[1]` invoking ... (each nested in the one before)."""
    if not agents:
        return t
    return _invoke(x, parent, agents[0], t, lambda sid, t: _chain(x, sid, agents[1:], t))


def _fan(x: _Trace, parent: str | None, lead: str, team: list[str], t: dt.datetime) -> dt.datetime:
    def inside(sid: str, t: dt.datetime) -> dt.datetime:
        for member in team:
            t = _invoke(x, sid, member, t + dt.timedelta(milliseconds=40), lambda _s, t: t)
        return t
    return _invoke(x, parent, lead, t, inside)


def write_otlp_subagents(out: Path, seed: int, incident: bool) -> Record:
    tr = Tracer()
    rng = stream(seed, "subagents-otlp")
    healthy = []
    x = _Trace(tr, rng, "crew", "team-1", None)
    _fan(x, None, "orchestrator", ["researcher", "writer", "reviewer"], START)
    healthy.append({"kind": "team_of_three", "session": "team-1", "loop": False})
    x = _Trace(tr, rng, "crew", "chain-1", None)
    _chain(x, None, ["orchestrator", "coder", "tester"], START + dt.timedelta(minutes=5))
    healthy.append({"kind": "chain_two_deep", "session": "chain-1", "loop": False})
    incidents = []
    if incident:
        x = _Trace(tr, rng, "crew", "deep", "nested")
        _chain(x, None, ["orchestrator"] + ["planner"] * RESPAWNS, START + dt.timedelta(minutes=9))
        incidents.append({"kind": "nested", "session": "deep", "depth": RESPAWNS,
                          "actor": "planner", "loop": True})
    traces: dict[str, list] = {}
    for sp in tr.spans:
        traces.setdefault(sp.trace, []).append(sp)
    lines = [json.dumps({"resourceSpans": [resource_spans("crew", spans, RESOURCES)]},
                        separators=(",", ":")) for spans in traces.values()]
    write_lines(out / OTLP_FILE, lines)
    return {"file": OTLP_FILE, "incidents": incidents, "healthy": healthy}


def write_subagent_sessions(outdir: Path, seed: int = 7, *, incident: bool = True) -> Record:
    """Write the Claude Code sessions (`claude-code/`) and the traces (`otlp/`); return the
    answer key. `incident=False`: the clean twin (the same healthy sessions and traces)."""
    outdir = Path(outdir)
    cc = outdir / "claude-code"
    runaway = _runaway(seed, incident, cc)
    healthy = _healthy_sessions(seed, cc)
    otlp = write_otlp_subagents(outdir / "otlp", seed, incident)
    incidents = ([{"kind": "respawn", "dir": "claude-code", **runaway}] if incident else []) + \
        [{"dir": "otlp", **i} for i in otlp["incidents"]]
    return {"incidents": incidents,
            "healthy": [{"dir": "claude-code", **h} for h in healthy]
            + ([] if incident else [{"dir": "claude-code", "kind": "respawn_twice", **runaway}])
            + [{"dir": "otlp", **h} for h in otlp["healthy"]]}

"""repeated_error's retry runs: an agent sending the same tool call again and again, failing
the same way each time, with other calls between (issue 13's real Claude Code transcript: a
`git commit` the pre-commit hook rejected 7 times in 6 minutes, `git add` and edits between).

Each shape is written as Claude Code, Codex and mini-swe-agent write it (agent_transcripts.py
builds the lines) and scanned; the decoys are healthy look-alikes that must stay quiet."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from agent_transcripts import (
    SERIOUS,
    Call,
    claude_code_lines,
    claude_code_result_line,
    codex_lines,
    codex_result_line,
    mini_swe_agent_document,
    mini_swe_agent_result_record,
    scan,
    write,
)

from loophound.detect.repeated_error import (
    Gaps,
    Params,
    Retry,
    is_cycle,
    judge_retry,
    retry_ranges,
)
from loophound.vocabulary import Severity

HOOK = ("ruff.....................................................................Failed\n"
        "- hook id: ruff\n- exit code: 1\n\nshop/checkout.py:41:5: F841 Local variable `rounded` "
        "is assigned to but never used\nFound 1 error.")
COMMIT = 'git commit -m "Round cart totals once, at the end"'


# -- one agent's calls, as each format writes them ----------------------------------------------


@dataclass(frozen=True)
class Agent:
    """How one format's agent runs a shell command and edits a file, and where a session goes."""

    name: str
    shell: Callable[[str], tuple[str, dict]]
    edit: Callable[[int], tuple[str, dict]]
    write: Callable[[Path, str, list[Call]], Path]
    result_line: Callable[[int], int]
    sessions: list[str]


def _claude_code(root: Path, session: str, calls: list[Call]) -> Path:
    return write(root / "-home-dev-shop" / f"{session}.jsonl", claude_code_lines(session, calls))


def _codex(root: Path, session: str, calls: list[Call]) -> Path:
    return write(root / "2026" / "06" / "22" / f"rollout-2026-06-22T11-00-00-{session}.jsonl",
                 codex_lines(session, calls))


def _mini_swe_agent(root: Path, session: str, calls: list[Call]) -> Path:
    path = root / session / f"{session}.traj.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(mini_swe_agent_document(session, calls), indent=1))
    return path


UUIDS = [f"5d0c2e1a-8d3b-4c7e-9f12-6a4b8c0d2e{n:02d}" for n in range(12)]
AGENTS = [
    Agent("claude-code",
          lambda cmd: ("Bash", {"command": cmd, "description": "Run it"}),
          lambda n: ("Edit", {"file_path": "/home/dev/shop/shop/checkout.py",
                              "old_string": f"total_{n} = 0", "new_string": f"total_{n} = None"}),
          _claude_code, claude_code_result_line, UUIDS),
    Agent("codex",
          lambda cmd: ("shell_command", {"command": cmd, "workdir": "/home/dev/shop"}),
          lambda n: ("apply_patch", {"input": f"*** Begin Patch\n*** Update File: shop/checkout.py"
                                              f"\n-total_{n} = 0\n+total_{n} = None\n*** End Patch"}),
          _codex, codex_result_line,
          [f"019b7a2c-5d1e-7f30-8a4b-2c6d8e0f1a{n:02d}" for n in range(12)]),
    Agent("mini-swe-agent",
          lambda cmd: ("bash", {"command": f"cd /testbed && {cmd}"}),
          lambda n: ("bash", {"command": f"cd /testbed && sed -i 's/total_{n} = 0/total_{n} = None/'"
                                         " shop/checkout.py"}),
          _mini_swe_agent, mini_swe_agent_result_record,
          [f"acme__shop-{n}" for n in range(12)]),
]
EDITED = "The file /home/dev/shop/shop/checkout.py has been updated."


def shell(agent: Agent, cmd: str, output: str, failed: bool, at: float) -> Call:
    tool, args = agent.shell(cmd)
    return Call(tool, args, (f"Exit code 1\n{output}" if failed and agent.name == "claude-code"
                             else output), failed, at)


def edit(agent: Agent, n: int, at: float) -> Call:
    tool, args = agent.edit(n)
    return Call(tool, args, EDITED if agent.name == "claude-code" else "", False, at)


def session_of(agent: Agent, plan: str, step_s: float = 22.0) -> list[Call]:
    """Calls from a plan of letters, one every `step_s` seconds: `c` the commit the hook
    rejects, `a` a `git add -A` that works, `e` an edit (a new one each time)."""
    calls, edits = [], 0
    for i, step in enumerate(plan.split()):
        at = 10 + i * step_s
        if step == "c":
            calls.append(shell(agent, COMMIT, HOOK, True, at))
        elif step == "a":
            calls.append(shell(agent, "git add -A", "", False, at))
        else:
            edits += 1
            calls.append(edit(agent, edits, at))
    return calls


def scanned(agent: Agent, tmp: Path, sessions: dict[str, list[Call]]) -> tuple[dict, int, list[Path]]:
    root = tmp / agent.name
    paths = [agent.write(root, s, calls) for s, calls in sessions.items()]
    doc, code = scan(root, tmp)
    return doc, code, paths


BY_FORMAT = [pytest.param(a, id=a.name) for a in AGENTS]


# -- the issue's shape: found, once, pointing at the failures -----------------------------------

# 7 rejections in 6 minutes (a commit every 44 s or so), `git add -A` between, an edit now and
# then: no two rejections in a row, no cycle of the same calls (the edits differ)
ISSUE_PLAN = "c a c e a c a c e a c a c e a c"


@pytest.mark.parametrize("agent", BY_FORMAT)
def test_a_commit_rejected_7_times_with_git_add_and_edits_between_is_one_finding(agent, tmp_path):
    calls = session_of(agent, ISSUE_PLAN)
    session = agent.sessions[0]
    doc, code, (path,) = scanned(agent, tmp_path, {session: calls})
    assert code == 1, "a serious finding"
    assert len(doc["findings"]) == 1 and len(doc["incidents"]) == 1, \
        [(f["detector"], f["title"]) for f in doc["findings"]]
    f = doc["findings"][0]
    assert f["detector"] == "repeated_error" and f["severity"] == "high"
    assert f["events"] == 7 and f["sessions"] == [session]
    assert COMMIT in f["title"] and "7 times in 6 min" in f["title"]
    rejected = [i for i, step in enumerate(ISSUE_PLAN.split()) if step == "c"]
    first, last = calls[rejected[0]], calls[rejected[-1]]
    assert f["start"].startswith((dt.datetime(2026, 6, 22, 11) + dt.timedelta(seconds=first.at))
                                 .isoformat(timespec="seconds"))
    assert f["end"].startswith((dt.datetime(2026, 6, 22, 11) + dt.timedelta(seconds=last.at))
                               .isoformat(timespec="seconds"))
    # the evidence: first the lines where the agent read each rejection, in order
    results = [agent.result_line(i) for i in rejected]
    assert [(e["file"], e["line"]) for e in f["evidence"][:7]] == [(str(path), n) for n in results]
    assert all(e["note"].startswith(f"attempt {k} of 7") for k, e in enumerate(f["evidence"][:7], 1))
    # what came between is named, and none of it is claimed
    assert "9 other calls" in f["summary"] and "9 succeeded" in f["summary"]


def test_claude_codes_description_of_a_command_does_not_make_it_another_call(tmp_path):
    """Claude Code's Bash input carries the model's `description` of the command, written
    afresh each time ("Commit the fix", "Retry the commit after the hook"): the commit
    rejected 7 times is one call retried whatever the descriptions say."""
    agent = AGENTS[0]
    calls = session_of(agent, ISSUE_PLAN)
    words = iter(["Commit the fix", "Retry the commit", "Commit again after the hook",
                  "Try the commit once more", "Commit with the formatted files", "Commit",
                  "Commit the staged changes"])
    calls = [dataclasses.replace(c, input=c.input | {"description": next(words)})
             if c.input.get("command") == COMMIT else c for c in calls]
    doc, code, _ = scanned(agent, tmp_path, {agent.sessions[0]: calls})
    assert code == 1 and [(f["detector"], f["events"]) for f in doc["findings"]] == [
        ("repeated_error", 7)]


@pytest.mark.parametrize("agent", BY_FORMAT)
def test_the_same_failure_six_times_in_a_row_is_found_below_the_storm_threshold(agent, tmp_path):
    """Nothing between the attempts, 6 of them: too few for a storm (`min_count` 10), one
    retry run (OpenHands stops an agent after 3)."""
    doc, code, _ = scanned(agent, tmp_path, {agent.sessions[1]: session_of(agent, "c c c c c c")})
    assert [(f["detector"], f["severity"], f["events"]) for f in doc["findings"]] == [
        ("repeated_error", "high", 6)]
    assert "in a row" in doc["findings"][0]["title"]


def restore_and_retry(agent: Agent, rounds: int = 9) -> list[Call]:
    """Issue 13's other loop: restore the file from its backup, make the same edit, run the
    same failing test, `rounds` times, every 10 s."""
    failure = "FAILED tests/test_discounts.py::test_stacked - AssertionError: rounding applied twice"
    calls = []
    for i in range(rounds):
        at = 10 + 30 * i
        calls.append(shell(agent, "cp shop/pricing.py.bak shop/pricing.py", "", False, at))
        calls.append(edit(agent, 0, at + 10))
        calls.append(shell(agent, PYTEST, f"{failure}\n1 failed in 0.12s", True, at + 20))
    return calls


@pytest.mark.parametrize("agent", BY_FORMAT)
def test_restoring_a_file_from_backup_and_retrying_9_times_is_one_cycle(agent, tmp_path):
    """The same failing test 9 times, between the same restore and the same edit: a cycle,
    which alternating_action describes whole (27 calls); no retry finding repeats it."""
    doc, code, _ = scanned(agent, tmp_path, {agent.sessions[1]: restore_and_retry(agent)})
    assert code == 1 and len(doc["incidents"]) == 1
    assert [(f["detector"], f["severity"], f["events"]) for f in doc["findings"]] == [
        ("alternating_action", "high", 27)]


# -- decoys: healthy look-alikes stay quiet -----------------------------------------------------

PYTEST = "python -m pytest tests/test_discounts.py -q"
TDD_FAILURES = [
    "E   ModuleNotFoundError: No module named 'shop.discounts'",
    "E   ImportError: cannot import name 'stack' from 'shop.discounts'",
    "FAILED tests/test_discounts.py::test_single - AttributeError: 'Cart' object has no "
    "attribute 'codes'",
    "FAILED tests/test_discounts.py::test_single - AssertionError: totals differ",
    "FAILED tests/test_discounts.py::test_stacked - TypeError: unsupported operand type(s) for *: "
    "'Decimal' and 'float'",
    "FAILED tests/test_discounts.py::test_stacked - AssertionError: rounding applied twice",
    "FAILED tests/test_discounts.py::test_rounding - ZeroDivisionError: division by zero",
]


def tdd(agent: Agent) -> list[Call]:
    """Test, edit, test …: `pytest` fails 7 times, each time differently, then passes."""
    calls = []
    for i, failure in enumerate(TDD_FAILURES):
        calls.append(shell(agent, PYTEST, f"{failure}\n1 failed in 0.{i + 1}2s", True, 10 + 60 * i))
        calls.append(edit(agent, i, 40 + 60 * i))
    calls.append(shell(agent, PYTEST, "7 passed in 0.31s", False, 10 + 60 * len(TDD_FAILURES)))
    return calls


def fails_three_times_then_works(agent: Agent) -> list[Call]:
    """The same build fails 3 times the same way, edits between, then builds."""
    error = "src/cart.ts(12,7): error TS2322: Type 'string' is not assignable to type 'number'."
    calls = []
    for i in range(3):
        calls.append(shell(agent, "npm run build --prefix web", error, True, 10 + 50 * i))
        calls.append(edit(agent, i, 35 + 50 * i))
    calls.append(shell(agent, "npm run build --prefix web", "built in 1.2s", False, 170))
    return calls


def long_healthy_session(agent: Agent) -> list[Call]:
    """Forty minutes of work: greps that match nothing (the same `Exit code 1`, each with
    other arguments), files that are not there, tests failing one way and another, a push
    rejected twice, and the reads, edits and runs that work between them."""
    failing = [f"grep -rn 'def {name}' shop/" for name in (
        "apply_coupon", "stack_discounts", "round_total", "price_of", "tax_for", "ship_cost",
        "loyalty_points", "gift_wrap", "currency_of", "refund_line")]
    failing += [f"cat shop/{name}.py" for name in ("coupons", "stacking", "refunds", "gifts")]
    failing += [f"python -m pytest tests/test_{name}.py -q" for name in (
        "cart", "checkout", "coupons", "refunds", "tax", "shipping")]
    failing += ["git push origin fix/rounding", "git push origin fix/rounding"]
    calls, t = [], 10.0
    for i, cmd in enumerate(failing):
        output = ("" if cmd.startswith("grep") else
                  f"cat: shop/{cmd.split('/')[-1]}: No such file or directory" if cmd.startswith("cat")
                  else f"FAILED {cmd.split()[3]}::test_{i} - AssertionError: case {chr(97 + i)}"
                  if "pytest" in cmd else "! [rejected] fix/rounding -> fix/rounding (fetch first)")
        calls.append(shell(agent, cmd, output, True, t))
        calls.append(shell(agent, f"ls shop/ tests/ | head -{i + 5}", "cart.py\ncheckout.py", False,
                           t + 30))
        calls.append(edit(agent, i, t + 60))
        t += 110
    return calls


def one_rejection(agent: Agent) -> list[Call]:
    """One session's single rejected commit, fixed and committed."""
    return [shell(agent, COMMIT, HOOK, True, 10), edit(agent, 0, 40),
            shell(agent, COMMIT, "[fix/rounding 3f2a1c9] Round cart totals once", False, 70)]


DECOYS = {
    "tdd_loop_with_different_failures": lambda a: {a.sessions[2]: tdd(a)},
    "fails_three_times_then_works": lambda a: {a.sessions[3]: fails_three_times_then_works(a)},
    "long_session_of_different_failing_commands": lambda a: {a.sessions[4]: long_healthy_session(a)},
    "the_same_failure_once_in_each_of_7_sessions": lambda a: {s: one_rejection(a)
                                                              for s in a.sessions[5:12]},
}


@pytest.mark.parametrize("agent", BY_FORMAT)
@pytest.mark.parametrize("decoy", list(DECOYS))
def test_healthy_look_alikes_stay_quiet(agent, decoy, tmp_path):
    doc, code, _ = scanned(agent, tmp_path, DECOYS[decoy](agent))
    assert [f["title"] for f in doc["findings"] if f["detector"] == "repeated_error"] == []
    assert [f["title"] for f in doc["findings"] if f["severity"] in SERIOUS] == []
    assert code == 0


def test_the_decoys_do_hold_failures_the_detector_reads(tmp_path):
    """The decoys are quiet for the right reason: their failures are read as failures of the
    same calls (a detector that read nothing would be quiet too)."""
    from loophound.ingest import ingest
    from loophound.store import Store

    agent = AGENTS[0]
    root = tmp_path / "logs"
    for decoy in DECOYS.values():
        for s, calls in decoy(agent).items():
            agent.write(root, s, calls)
    store = Store(tmp_path / "st")
    ingest([str(root)], store)
    failed = store.connect().execute("""
        SELECT count(*), count(DISTINCT action_key), max(n) FROM (
          SELECT action_key, count(*) OVER (PARTITION BY session, action_key) AS n
          FROM events WHERE kind = 'tool_call' AND error IS NOT NULL)""").fetchall()[0]
    # 7 TDD runs of one command, 3 builds, 22 failing commands, 7 sessions' commits
    assert failed[0] == 7 + 3 + 22 + 7
    assert failed[2] == 7  # the TDD loop: one call failing 7 times, each time another way


# -- the kernels --------------------------------------------------------------------------------


def _ranges(groups, failures, failed, t=None, min_count=3, gap_ms=1000.0):
    n = len(groups)
    t = np.arange(n, dtype=np.int64) * 100 if t is None else np.array(t, dtype=np.int64)
    return retry_ranges(np.array(groups), t, np.array(failures), np.array(failed, dtype=bool),
                        min_count, gap_ms)


def test_a_retry_run_is_cut_by_another_outcome_of_the_call_or_a_long_pause():
    # one call (group 1): 3 failures the same way, then another failure: a run that changed
    assert _ranges([1, 1, 1, 1], [5, 5, 5, 6], [1, 1, 1, 1]) == [(0, 3, True)]
    # ... then a success: the same; a run still failing when the log ends: not changed
    assert _ranges([1, 1, 1, 1], [5, 5, 5, 0], [1, 1, 1, 0]) == [(0, 3, True)]
    assert _ranges([1, 1, 1, 2], [5, 5, 5, 5], [1, 1, 1, 1]) == [(0, 3, False)]
    # a success between makes two short runs; a pause longer than the gap does too
    assert _ranges([1] * 5, [5, 5, 0, 5, 5], [1, 1, 0, 1, 1]) == []
    assert _ranges([1] * 4, [5] * 4, [1] * 4, t=[0, 100, 5000, 5100]) == []
    # two calls, each its own group: their attempts do not mix
    assert _ranges([1, 1, 1, 2, 2, 2], [5] * 6, [1] * 6) == [(0, 3, False), (3, 6, False)]


def test_a_cycle_is_the_retried_call_every_k_calls_with_the_same_calls_between():
    restore, patch, test = "cp", "patch", "pytest"
    keys = [restore, patch, test] * 4
    own = [k == test for k in keys]
    assert is_cycle(own, keys, 4)
    # the same, but one edit differs: not a cycle (the agent tried something else)
    changed = keys[:4] + ["patch-2"] + keys[5:]
    assert not is_cycle(own, changed, 4)
    # a cycle longer than alternating_action looks for, or attempts at uneven distances
    assert not is_cycle(own, keys, 2)
    uneven = [True, False, True, False, False, True]
    assert not is_cycle(uneven, ["t", "a", "t", "a", "b", "t"], 4)
    assert not is_cycle([True, True, True], ["t", "t", "t"], 4)  # in a row: k = 1


def _retry(count=7, ended=False, between=None):
    start = dt.datetime(2026, 6, 22, 11)
    return Retry(actor="claude", session="s", action="Bash", action_key="k", args=None,
                 error="Exit code 1", result=HOOK, count=count, start=start,
                 stop=start + dt.timedelta(minutes=6), gaps=Gaps(55e3, 55e3, 5e3, 50e3, 60e3, [], []),
                 ended_by_change=ended, failures=list(range(count)),
                 result_lines=[("f", i) for i in range(count)],
                 between={"Bash": 6, "Edit": 3} if between is None else between)


def test_retry_severity():
    p = Params()
    assert judge_retry(_retry(), p) == Severity.HIGH
    # it got there late, after working between the attempts: low; a poll that ended: quiet
    assert judge_retry(_retry(ended=True), p) == Severity.LOW
    assert judge_retry(_retry(ended=True, between={}), p) is None
    # ten times the threshold is critical however it ended
    assert judge_retry(_retry(count=10 * p.retry_min_count, ended=True), p) == Severity.CRITICAL


def test_one_task_run_twice_is_two_runs_of_the_agent(tmp_path):
    """Two mini-swe-agent trajectories of one task name one session, on the same simulated
    clock: 3 identical failures in each are two runs of 3, not one of 6."""
    agent = AGENTS[2]
    for run, step_s in (("model-a", 20.0), ("model-b", 25.0)):
        _mini_swe_agent(tmp_path / "logs" / run, "acme__shop-7", session_of(agent, "c a c a c",
                                                                             step_s))
    doc, code = scan(tmp_path / "logs", tmp_path)
    assert len(doc["inputs"]) == 2
    assert [f["title"] for f in doc["findings"] if f["detector"] == "repeated_error"] == []
    assert code == 0

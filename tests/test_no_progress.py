"""no_progress: loops of no progress in real agents' runs, and the healthy look-alikes.

The pure kernel (`stretches`) is tested on calls written here, each scenario with its clean
twin; the detector end to end on real public logs (tests/data/real, labelled by reading them:
README there), where each loop must be found over its own lines and each healthy run stay
quiet.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from loophound.cli import app
from loophound.detect.no_progress import (
    Call,
    Params,
    call_family,
    outcome_family,
    outcome_text,
    outcome_text_sql,
    restored_file,
    retry_family,
    rough_outcome,
    shell_family,
    stated_runs,
    stretches,
)

REAL = Path(__file__).parent / "data" / "real"
P = Params()


def call(family: str, out: str = "ok", failed: bool = False, restores: str | None = None,
         known: bool = True, told: bool = False) -> Call:
    return Call(family, ("F" if failed else "S") + out, failed, restores, known=known,
                rough=("F" if failed else "S") + re.sub(r"\d+", "N", out), told=told)


# ---------------------------------------------------------------------------------------------
# families


def test_a_commit_message_is_free_text_but_a_flag_is_not():
    a = shell_family('cd /repo && git add -A && git commit -m "fix: round once"')
    b = shell_family("git add -A && git commit -m 'another message, longer'")
    c = shell_family('git add -A && git commit --no-verify -m "fix: round once"')
    assert a == b == "git add -A && git commit -m <TEXT>"
    assert c != a


def test_ids_are_masked_numbers_and_paths_are_kept():
    assert call_family("Bash", '{"command": "cat /tmp/tmpab12cd/out.txt", "description": "x"}') == \
        call_family("Bash", '{"command": "cat /tmp/zz99yy/out.txt", "description": "y"}')
    assert call_family("Bash", '{"command": "sed -n \'10,20p\' a.py"}') != \
        call_family("Bash", '{"command": "sed -n \'30,40p\' a.py"}')
    assert call_family("Read", '{"file_path": "a.py"}') != call_family("Read", '{"file_path": "b.py"}')
    # a tool's description is free text; its other arguments are the call
    assert call_family("Edit", '{"file_path": "a.py", "old_string": "x", "description": "one"}') == \
        call_family("Edit", '{"file_path": "a.py", "old_string": "x", "description": "two"}')


def test_outcomes_ignore_durations_and_addresses_but_not_counts():
    assert outcome_family(True, "E", "done in 0m12.09s at 0x7f3a2b") == \
        outcome_family(True, "E", "done in 0m11.50s at 0x7f9999")
    assert outcome_family(False, None, "3 failed") != outcome_family(False, None, "2 failed")
    assert rough_outcome(False, None, "positioned 20% down") == \
        rough_outcome(False, None, "positioned 40% down")


def bash(cmd: str) -> str:
    return retry_family("Bash", json.dumps({"command": cmd}))


def test_a_retry_is_the_same_programs_on_the_same_paths():
    assert bash("cd /testbed && python repro.py 2>&1 | head -20") == bash("python repro.py")
    assert bash('git add -A && git commit -m "one"') == bash("git add -A && git commit --no-verify -m 'two'")
    assert bash("mix test test/a_test.exs:42") != bash("mix test test/b_test.exs:42")
    # a search's pattern is what it looks for, after a pipe too
    assert bash('git log -p -- a.py | grep -A3 "one"') != bash('git log -p -- a.py | grep -A3 "two"')
    assert retry_family("Edit", '{"file_path": "a.py", "old_string": "x"}') == \
        retry_family("Edit", '{"file_path": "a.py", "old_string": "y"}')


@pytest.mark.parametrize("cmd, restored", [
    ("cd /testbed && git checkout src/marshmallow/schema.py", "src/marshmallow/schema.py"),
    ("git checkout -- a.py b.py", "a.py b.py"),
    ("git restore --staged lib/x.ex", "lib/x.ex"),
    ("cp pyvista/core/grid.py.backup pyvista/core/grid.py", "pyvista/core/grid.py"),
    ("cp /testbed/src/L003.py.backup /testbed/src/L003.py", "/testbed/src/L003.py"),
    ("mv a.py.orig a.py", "a.py"),
    ("cp backup/schema.py schema.py", "schema.py"),
    ("git checkout -b feature", None),
    ("git checkout main", None),
    ("cp a.py a.py.bak", None),  # a backup made, not a restore
    ("cp template.py new.py", None),
])
def test_restores_are_recognised(cmd, restored):
    assert restored_file(cmd) == restored


# ---------------------------------------------------------------------------------------------
# the kernel: each loop shape and its healthy twin


def test_revert_cycle_with_different_edits_between():
    calls = []
    for k in range(4):
        calls += [call("restore F", restores="F"), call(f"edit F #{k}"), call("view F lines 1-20", f"v{k}")]
    [s] = stretches(calls, P)
    assert s.rule == "revert" and len(s.key) == 4 and s.key == [0, 3, 6, 9]


def test_two_restores_then_the_fix_works_is_quiet():
    calls = [call("restore F", restores="F"), call("edit F #1"), call("test", "boom", failed=True),
             call("restore F", restores="F"), call("edit F #2"), call("test", "passed")]
    assert stretches(calls, P) == []


def test_restores_far_apart_are_separate_attempts():
    filler = [call(f"new work {k}") for k in range(40)]
    calls = [call("restore F", restores="F"), *filler, call("restore F", restores="F"), *filler,
             call("restore F", restores="F")]
    assert stretches(calls, P) == []


def test_a_retry_whose_error_alternates_between_two_walls():
    walls = ["[DIALYZER] 57:13", "[CREDO]", "[DIALYZER] 58:13", "[DIALYZER] 57:13", "[CREDO]",
             "[DIALYZER] 60:13"]
    calls = []
    for k, wall in enumerate(walls):
        calls += [call("git commit -m <TEXT>", wall, failed=True), call(f"edit lib/x.ex #{k}")]
    [s] = stretches(calls, P)
    assert s.rule == "retry" and len(s.key) == 6


def test_tdd_whose_failures_change_is_quiet():
    calls = []
    for k, failure in enumerate(["undefined function foo/1", "no match of right hand side",
                                 "assertion failed: expected 3", "KeyError :name"]):
        calls += [call("mix test t.exs", failure, failed=True), call(f"edit lib/x.ex #{k}")]
    calls.append(call("mix test t.exs", "4 tests, 0 failures"))
    assert stretches(calls, P) == []


def test_the_same_failure_three_times_in_a_row_is_a_retry():
    calls = [call("run", "There is no code to execute", failed=True)] * 3
    [s] = stretches(calls, P)
    assert s.rule == "retry" and s.outcomes == 1


def test_a_poll_or_back_off_that_gets_its_answer_is_quiet():
    polls = [call("status exp_1", "running")] * 5 + [call("status exp_1", "done")]
    failing = [call("status exp_1", "running", failed=True)] * 4 + [call("status exp_1", "done")]
    assert stretches(polls, P) == [] and stretches(failing, P) == []


def test_the_same_click_landing_on_the_same_page_whatever_the_agent_is_told():
    calls = [call("click 'Email the Department'", "Treasury Division, viewport 38%", told=True)] * 6
    [s] = stretches(calls, P)
    assert s.rule == "repeat" and len(s.key) == 6


def test_a_plain_run_or_cycle_nobody_interrupts_is_left_to_the_one_shape_detectors():
    """repeated_action and alternating_action find these and say them best: one finding, not
    two, for one loop."""
    same = [call("cat a.py", "same text")] * 6
    cycle = [call("cp a.py.bak a.py", restores="a.py"), call("apply patch"),
             call("pytest", "1 failed", failed=True)] * 5
    retried = [call("git commit -m <TEXT>", "hook: ruff failed", failed=True), call("git add -A")] * 6
    assert stretches(same, P) == [] and stretches(cycle, P) == [] and stretches(retried, P) == []


def test_a_verification_rerun_after_new_work_is_quiet():
    calls = []
    for k in range(5):
        calls += [call("python reproduce.py", "value = 'B'")] + [call(f"new step {k}.{j}") for j in range(6)]
    assert stretches(calls, P) == []


def test_re_reading_between_the_same_edits_is_no_progress():
    calls = []
    for _ in range(4):
        calls += [call("python repro.py", "wrong"), call("sed -n 1,40p a.py", "same text"),
                  call("grep foo a.py", "12: foo"), call("cat notes.txt", "n"), call("ls", "a b")]
    [s] = stretches(calls, P)
    assert s.rule == "repeat"


def test_scrolling_a_page_a_few_times_is_quiet_and_on_and_on_is_not():
    def scrolls(n: int) -> list[Call]:
        return [call("scrolled down one page", f"viewport positioned {20 * k}% down") for k in range(n)]
    assert stretches(scrolls(4), P) == []
    [s] = stretches(scrolls(7), P)
    assert s.rule == "repeat" and s.outcomes == 7


def test_a_batch_over_distinct_items_is_quiet():
    calls = [call(f"process item {k}", "ok") for k in range(30)]
    assert stretches(calls, P) == []


def test_calls_whose_result_the_log_does_not_hold_are_not_the_same_outcome():
    calls = [call("NOOP", "", known=False)] * 20
    assert stretches(calls, P) == []


def test_a_runtime_saying_three_times_in_a_row_that_it_is_stuck():
    said = [False, True, True, False, True, True, True, True, False, True]
    assert stated_runs(said, 3) == [[4, 5, 6, 7]]
    assert stated_runs([True, True, False, True, True], 3) == []


# ---------------------------------------------------------------------------------------------
# end to end, on real public logs


def scan(tmp_path: Path, log: Path) -> dict:
    out = tmp_path / "findings.json"
    result = CliRunner().invoke(app, ["scan", str(log), "--store", str(tmp_path / "s"),
                                      "--json", str(out)])
    assert result.exit_code in (0, 1, 4), result.output
    return json.loads(out.read_text())


def no_progress(doc: dict) -> list[dict]:
    return [f for f in doc["findings"] if f["detector"] == "no_progress"]


@pytest.mark.parametrize("log, lines, count, rule", [
    ("msa/deepseek_chat_dev_rerun__pyvista__pyvista-4315.traj.json", (77, 98), 4, "revert"),
    ("ww/hand-crafted-30.json", (96, 120), 6, "repeat"),
    ("ww/algorithm-generated-19.json", (2, 10), 3, "retry"),
])
def test_real_loops_are_found_over_their_own_lines(tmp_path, log, lines, count, rule):
    doc = scan(tmp_path, REAL / log)
    [f] = [f for f in no_progress(doc) if f["details"]["rule"] != "stated"]
    assert f["severity"] == "medium" and f["details"]["rule"] == rule
    assert f["details"]["count"] == count
    evidence = [e["line"] for e in f["evidence"]]
    assert lines[0] <= min(evidence) and max(evidence) <= lines[1]
    assert "no progress" in f["summary"] or "none of it" in f["summary"] or "landing" in f["summary"]
    assert doc["coverage"]["verdict"] == "findings"


@pytest.mark.parametrize("log", [
    "msa/deepseek_chat_test_1-100__django__django-12908.traj.json",  # two restores, then it works
    "msa/deepseek_chat_dev__pylint-dev__astroid-1196.traj.json",  # verification re-runs
    "ww/hand-crafted-55.json",  # four scrolls, then the answer
])
def test_real_healthy_runs_stay_quiet(tmp_path, log):
    doc = scan(tmp_path, REAL / log)
    assert no_progress(doc) == []
    assert not [f for f in doc["findings"] if f["severity"] in ("high", "critical")]
    assert doc["coverage"]["verdict"] == "clean"


def test_a_who_and_when_history_is_read_turn_by_turn(tmp_path):
    doc = scan(tmp_path, REAL / "ww/hand-crafted-30.json")
    [inp] = doc["inputs"]
    assert inp["format"] == "chat_history" and inp["lines"] == 121


def test_the_orchestrators_own_ledger_is_read(tmp_path):
    """hand-crafted-30's Orchestrator says is_in_loop in the ledgers of lines 111, 115 and 119,
    over the clicks of its loop (and in four earlier runs of three or four)."""
    doc = scan(tmp_path, REAL / "ww/hand-crafted-30.json")
    stated = [f for f in no_progress(doc) if f["details"]["rule"] == "stated"]
    assert [[e["line"] for e in f["evidence"]] for f in stated] == [
        [18, 22, 26, 30], [41, 45, 49, 53], [80, 84, 87], [111, 115, 119]]
    assert all(f["severity"] == "medium" and f["actors"] == ["Orchestrator"] for f in stated)


# ---------------------------------------------------------------------------------------------
# the outcome's masking, in DuckDB and in Python alike

OUTCOME_SAMPLES = [
    "done in 0m12.09s at 0x7f3a2b, pid 4182",
    "Traceback (most recent call last):\n  File \"/tmp/tmpab12cd/x.py\", line 3\nKeyError: 'a1b2c3d'",
    "2026-02-12T14:28:06.123Z 10.0.0.12:8080 took 35 ms; 3 failed, 12 passed in 0.31s",
    "commit 8cc42b0bd39d04e71e509d7d58e6782ab435329f\tuuid 6adcf0da-e8ac-4760-8026-66fb75b5ee45",
    "  leading and   trailing\twhite\r\nspace  ",
]


@given(st.one_of(st.sampled_from(OUTCOME_SAMPLES),
                 st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)),
                         max_size=80)),
       st.one_of(st.none(), st.sampled_from(OUTCOME_SAMPLES), st.text(max_size=40)))
@settings(max_examples=150, deadline=None)
def test_duckdb_masks_an_outcome_as_python_does(result, error):
    sql = f"SELECT {outcome_text_sql('$e', '$r')}"
    [(masked,)] = duckdb.execute(sql, {"e": error, "r": result}).fetchall()
    assert masked == outcome_text(error, result)

"""Synthetic agent trajectories: whole-file JSON documents, one per run, written the way the
agents write them (see formats/trajectory.py for the sources of each shape): a SWE-agent
`.traj`, a mini-swe-agent `.traj.json` (v2, tool calls), an OpenHands event list and an AutoGen
AgentChat message history, each `json.dumps(..., indent=2)` with no newline at the end.

Incidents: SWE-agent repeats the same `str_replace` edit twelve times, the editor answering
each time that `old_str` does not appear verbatim (no clock: its steps are on the simulated
step-index clock); OpenHands re-runs the same failing Django test eleven times with the same
`OperationalError`, editing unrelated files between tries; mini-swe-agent restores a file
from its backup and applies the same edit again, successfully, nine times, runs the tests,
then six more times (the shape of a real run quoted in the issue: a loop of successes, no
error to repeat, found only by detectors of stuck agents). Healthy: files viewed and found,
a reproduction script that fails until the fix, tests that pass, a submission; an AutoGen
team (planner, coder, reviewer) that runs two tools and approves. The clean twin has the
same healthy work; there the edit is fixed after two tries, the test passes after two runs,
and the file is restored once.

Shortened from the real thing to keep each file small: SWE-agent's per-step `query` (the
whole conversation sent to the model) holds only the step's last message, its `history`
only the task and the actions; model responses keep their usage, not their `choices`.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import string
from pathlib import Path
from typing import Any

from ..schema import SIM_EPOCH
from ._common import UTC, hex_id, iso_ms, stream, uuid4

Record = dict[str, Any]
B62 = string.ascii_letters + string.digits
SIM = dt.datetime.fromisoformat(SIM_EPOCH).replace(tzinfo=UTC)
DAY = dt.datetime(2026, 6, 24, tzinfo=UTC)


def _dump(doc: Any) -> str:
    return json.dumps(doc, indent=2)


def _write(path: Path, doc: Any) -> int:
    """Write the document as the agents do (indent 2, no newline at the end); return its
    number of text lines."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = _dump(doc)
    path.write_text(text, encoding="utf-8", newline="\n")
    return len(text.splitlines())


def _ms(t: dt.datetime) -> str:
    return iso_ms(int(t.timestamp() * 1000))


# -- SWE-agent ------------------------------------------------------------------------------

SWE_INSTANCE = "acme__billing-412"
SWE_MODEL = "claude-3-7-sonnet-20250219"
INVOICE = "/testbed/src/billing/invoice.py"
INVOICE_VIEW = ("Here's the result of running `cat -n` on /testbed/src/billing/invoice.py:\n"
                "     1\tfrom decimal import Decimal\n     2\t\n     3\t\n"
                "     4\tdef invoice_total(lines, rate):\n"
                "     5\t    subtotal = sum(Decimal(l.price) * l.qty for l in lines)\n"
                "     6\t    total = round(float(subtotal) * (1 - rate), 2)\n"
                "     7\t    return Decimal(str(total))\n")
WRONG_OLD = "    total = round(subtotal * (1 - rate), 2)"
RIGHT_OLD = "    total = round(float(subtotal) * (1 - rate), 2)"
NEW = '    total = (subtotal * (1 - Decimal(str(rate)))).quantize(Decimal("0.01"))'
NOT_VERBATIM = (f"No replacement was performed, old_str `{WRONG_OLD}` did not appear verbatim "
                f"in {INVOICE}.")


class _Swe:
    """A SWE-agent run being written: its steps and its shortened history."""

    def __init__(self, rng: random.Random, task: str) -> None:
        self.rng = rng
        self.steps: list[Record] = []
        self.history: list[Record] = [
            {"role": "system", "content": "You are a helpful assistant that can interact with a "
             "computer to solve tasks.", "agent": "main", "message_type": "system_prompt"},
            {"role": "user", "content": f"<uploaded_files>\n/testbed\n</uploaded_files>\n{task}",
             "agent": "main", "message_type": "observation"}]

    def step(self, thought: str, action: str, observation: str,
             open_file: str = "n/a") -> int:
        call = f"toolu_{''.join(self.rng.choice(B62) for _ in range(24))}"
        self.steps.append({
            "action": action, "observation": observation,
            "response": f"{thought}\n\n```\n{action}\n```", "thought": thought,
            "execution_time": round(self.rng.uniform(0.05, 2.5), 6),
            "state": {"open_file": open_file, "working_dir": "/testbed"},
            "query": [{"role": "user", "content": observation[:200], "agent": "main",
                       "message_type": "observation"}],
            "extra_info": {}})
        self.history.append({"role": "assistant", "content": thought, "thought": thought,
                             "action": action, "agent": "main", "tool_calls": [{
                                 "id": call, "type": "function", "function": {
                                     "name": action.split()[0], "arguments": "{}"}}],
                             "message_type": "action", "thinking_blocks": []})
        return len(self.steps)


def _swe_agent(seed: int, incident: bool) -> tuple[str, Record, Record]:
    rng = stream(seed, "traj-swe")
    run = _Swe(rng, "Invoice totals are a cent off when a discount rate applies: "
                    "invoice_total([Line('19.99', 1)], 0.0) returns 19.98.")
    key: Record = {"incidents": [], "healthy": []}
    first = run.step("Let me look at the repository layout first.", "str_replace_editor view "
                     "/testbed", "Here's the files and directories up to 2 levels deep in "
                     "/testbed, excluding hidden items:\n/testbed\n/testbed/src\n"
                     "/testbed/src/billing\n/testbed/tests\n/testbed/setup.py\n")
    run.step("The totals live in the billing package.", 'find /testbed/src -name "*.py" | grep '
             "-i invoice", "/testbed/src/billing/invoice.py\n")
    run.step("Let me read the function.", f"str_replace_editor view {INVOICE}", INVOICE_VIEW,
             INVOICE)
    run.step("I'll write a script that reproduces the issue.", "str_replace_editor create "
             "/testbed/reproduce.py --file_text 'from billing.invoice import invoice_total\n"
             "from billing.models import Line\nprint(invoice_total([Line(\"19.99\", 1)], 0.0))\n'",
             "File created successfully at: /testbed/reproduce.py", "/testbed/reproduce.py")
    run.step("Now run it.", "python /testbed/reproduce.py",
             "Traceback (most recent call last):\n  File \"/testbed/reproduce.py\", line 3, in "
             "<module>\n    assert invoice_total([Line(\"19.99\", 1)], 0.0) == Decimal(\"19.99\")"
             "\nAssertionError: expected 19.99, got 19.98\n", "/testbed/reproduce.py")
    key["healthy"].append({"kind": "reproduce_then_fix", "actor": "swe-agent",
                           "session": SWE_INSTANCE, "first_line": first,
                           "last_line": len(run.steps), "loop": False})
    # the incident: the same edit, old_str copied from memory, not from the file
    tries = 12 if incident else 2
    edit = (f"str_replace_editor str_replace {INVOICE} --old_str '{WRONG_OLD}' "
            f"--new_str '{NEW}'")
    lines = [run.step("The float round-trip loses the cent; compute in Decimal instead."
                      if i == 0 else "Let me apply the edit again.", edit, NOT_VERBATIM, INVOICE)
             for i in range(tries)]
    if incident:
        key["incidents"].append({
            "kind": "same_edit_not_verbatim", "actor": "swe-agent", "session": SWE_INSTANCE,
            "action": "str_replace_editor",
            "error": NOT_VERBATIM, "count": tries,
            "start": _ms(SIM + dt.timedelta(seconds=lines[0] - 1)),
            "end": _ms(SIM + dt.timedelta(seconds=lines[-1] - 1)),
            "first_line": lines[0], "last_line": lines[-1], "detector": "repeated_error",
            "loop": True})
    run.rng = stream(seed, "traj-swe-after")  # the work after it draws from its own stream
    run.step("The line must be copied from the file as it is.", f"str_replace_editor view "
             f"{INVOICE} --view_range 5 7", INVOICE_VIEW.split("\n", 1)[0] + "\n" + "\n".join(
                 INVOICE_VIEW.splitlines()[5:8]) + "\n", INVOICE)
    run.step("Now with the exact text.", f"str_replace_editor str_replace {INVOICE} --old_str "
             f"'{RIGHT_OLD}' --new_str '{NEW}'", f"The file {INVOICE} has been edited. Here's the "
             f"result of running `cat -n` on a snippet of {INVOICE}:\n     6\t{NEW}\n"
             "Review the changes and make sure they are as expected.", INVOICE)
    first = run.step("Check the fix.", "python /testbed/reproduce.py", "19.99\n",
                     "/testbed/reproduce.py")
    run.step("And the tests.", "cd /testbed && python -m pytest tests/test_invoice.py -q",
             "....                                                                     [100%]\n"
             "4 passed in 0.21s\n")
    if not incident:
        key["healthy"].append({"kind": "edit_fixed_after_view", "actor": "swe-agent",
                               "session": SWE_INSTANCE, "action": "str_replace_editor",
                               "failed": tries, "loop": False})
    diff = (f"diff --git a/src/billing/invoice.py b/src/billing/invoice.py\n--- "
            f"a/src/billing/invoice.py\n+++ b/src/billing/invoice.py\n@@ -3,5 +3,5 @@\n-{RIGHT_OLD}"
            f"\n+{NEW}\n")
    run.step("The fix works; submitting.", "submit", diff)
    key["healthy"].append({"kind": "tests_pass_and_submit", "actor": "swe-agent",
                           "session": SWE_INSTANCE, "first_line": first,
                           "last_line": len(run.steps), "loop": False})
    calls = len(run.steps) + 1
    doc = {
        "trajectory": run.steps, "history": run.history,
        "info": {"swe_agent_hash": hex_id(rng, 40), "swe_agent_version": "1.1.0",
                 "swe_rex_version": "1.2.1", "swe_rex_hash": "unavailable", "submission": diff,
                 "exit_status": "submitted", "edited_files30": "", "edited_files50": "",
                 "edited_files70": "", "model_stats": {
                     "instance_cost": round(calls * rng.uniform(0.015, 0.03), 4),
                     "tokens_sent": calls * rng.randint(6000, 9000),
                     "tokens_received": calls * rng.randint(120, 260), "api_calls": calls}},
        "replay_config": json.dumps({"env": {"deployment": {"image": "python:3.11"},
                                             "repo": {"path": "/testbed"}},
                                     "agent": {"model": {"name": SWE_MODEL, "temperature": 0.0,
                                                         "per_instance_cost_limit": 3.0}},
                                     "problem_statement": {"id": SWE_INSTANCE}}),
        "environment": "main"}
    return f"swe-agent/{SWE_INSTANCE}/{SWE_INSTANCE}.traj", doc, key


# -- mini-swe-agent (v2, tool calls) --------------------------------------------------------

MINI_INSTANCE = "acme__ledger-88"
MINI_MODEL = "anthropic/claude-sonnet-4-5-20250929"
RATES = "src/ledger/rates.py"
RESTORE = (f"cd /testbed && cp {RATES}.bak {RATES} && sed -i 's/ROUND_HALF_UP/ROUND_HALF_EVEN/' "
           f"{RATES} && grep -n ROUND_ {RATES}")
RESTORED = "14:    return amount.quantize(CENT, rounding=ROUND_HALF_EVEN)\n"


class _Mini:
    """A mini-swe-agent run being written: its messages, clock and usage."""

    def __init__(self, rng: random.Random, start: dt.datetime, task: str) -> None:
        self.rng, self.t = rng, start
        self.messages: list[Record] = [
            {"role": "system", "content": "You are a helpful assistant that can interact with "
             "a computer shell to solve programming tasks."},
            {"role": "user", "content": f"<pr_description>\n{task}\n</pr_description>"}]
        self.cost, self.calls, self.context = 0.0, 0, 2600
        self.usage = {"input": 0, "cached": 0, "output": 0, "calls": 0}

    def call(self, thought: str, command: str, code: int, output: str) -> int:
        """An assistant message with one bash tool call, then its observation; returns the
        call's place (1-based) in the messages."""
        rng = self.rng
        self.t += dt.timedelta(seconds=rng.uniform(2.0, 9.0))
        call_id = f"toolu_{''.join(rng.choice(B62) for _ in range(24))}"
        fresh, out = rng.randint(60, 900), rng.randint(40, 260)
        usage = {"completion_tokens": out, "prompt_tokens": self.context + fresh,
                 "total_tokens": self.context + fresh + out,
                 "prompt_tokens_details": {"cached_tokens": self.context},
                 "cache_read_input_tokens": self.context, "cache_creation_input_tokens": 0}
        cost = round((fresh * 3 + self.context * 0.3 + out * 15) / 1e6, 8)
        self.usage["input"] += fresh
        self.usage["cached"] += self.context
        self.usage["output"] += out
        self.usage["calls"] += 1
        self.context += fresh + out
        self.cost += cost
        args = json.dumps({"command": command})
        self.messages.append({
            "content": thought, "role": "assistant",
            "tool_calls": [{"index": 0, "function": {"arguments": args, "name": "bash"},
                            "id": call_id, "type": "function"}],
            "function_call": None, "provider_specific_fields": None,
            "extra": {"actions": [{"command": command, "tool_call_id": call_id}],
                      "response": {"id": f"msg_{''.join(rng.choice(B62) for _ in range(24))}",
                                   "created": int(self.t.timestamp()),
                                   "model": MINI_MODEL.split("/", 1)[1],
                                   "object": "chat.completion", "usage": usage},
                      "cost": cost, "timestamp": round(self.t.timestamp(), 6)}})
        line = len(self.messages)
        self.t += dt.timedelta(seconds=rng.uniform(0.1, 1.5))
        self.messages.append({
            "content": f"<returncode>{code}</returncode>\n<output>\n{output}</output>",
            "extra": {"raw_output": output, "returncode": code,
                      "timestamp": round(self.t.timestamp(), 6), "exception_info": ""},
            "tool_call_id": call_id, "role": "tool"})
        return line


def _mini_swe_agent(seed: int, incident: bool) -> tuple[str, Record, Record]:
    rng = stream(seed, "traj-mini")
    run = _Mini(rng, DAY + dt.timedelta(hours=10, minutes=2, seconds=17),
                "Ledger rounds half-cent amounts up; accounting expects banker's rounding "
                "(ROUND_HALF_EVEN) in rates.py.")
    key: Record = {"incidents": [], "healthy": []}
    first = run.call("Let me find the rounding.", "cd /testbed && grep -rn ROUND_ src/ledger", 0,
                     "src/ledger/rates.py:14:    return amount.quantize(CENT, "
                     "rounding=ROUND_HALF_UP)\n")
    run.call("Keep a backup before editing.", f"cd /testbed && cp {RATES} {RATES}.bak", 0, "")
    run.call("Run the rate tests first.", "cd /testbed && python -m pytest tests/test_rates.py -q",
             1, "F...                                                                     "
             "[100%]\nFAILED tests/test_rates.py::test_half_cent - assert Decimal('0.13') == "
             "Decimal('0.12')\n1 failed, 3 passed in 0.31s\n")
    key["healthy"].append({"kind": "read_and_test", "actor": "mini-swe-agent",
                           "session": MINI_INSTANCE, "first_line": first,
                           "last_line": len(run.messages), "loop": False})
    # the incident: restore from the backup and apply the same edit, again and again
    first_run = 9 if incident else 1
    lines = [run.call("Restore the original and apply the rounding change."
                      if i == 0 else "Let me restore and apply it again to be sure.",
                      RESTORE, 0, RESTORED) for i in range(first_run)]
    run.rng = stream(seed, "traj-mini-after")
    run.call("Does it pass now?", "cd /testbed && python -m pytest tests/test_rates.py -q", 0,
             "....                                                                     [100%]"
             "\n4 passed in 0.29s\n")
    if incident:
        lines += [run.call("Restore and re-apply once more before submitting.", RESTORE, 0,
                           RESTORED) for _ in range(6)]
        key["incidents"].append({
            "kind": "restore_and_retry", "actor": "mini-swe-agent", "session": MINI_INSTANCE,
            "action": "cp", "repeats": len(lines), "runs": [first_run, 6],
            "first_line": lines[0], "last_line": lines[-1], "loop": True,
            "detector": "repeated_action"})
    else:
        key["healthy"].append({"kind": "edit_once", "actor": "mini-swe-agent",
                               "session": MINI_INSTANCE, "action": "cp", "loop": False})
    diff = (f"diff --git a/{RATES} b/{RATES}\n--- a/{RATES}\n+++ b/{RATES}\n@@ -11,4 +11,4 @@\n"
            "-    return amount.quantize(CENT, rounding=ROUND_HALF_UP)\n"
            "+    return amount.quantize(CENT, rounding=ROUND_HALF_EVEN)\n")
    first = run.call("Submit the change.", f"cd /testbed && git diff -- {RATES} > patch.txt && "
                     "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat patch.txt", 0,
                     "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n" + diff)
    key["healthy"].append({"kind": "submit", "actor": "mini-swe-agent", "session": MINI_INSTANCE,
                           "first_line": first, "last_line": len(run.messages), "loop": False})
    doc = {
        "info": {"model_stats": {"instance_cost": round(run.cost, 8), "api_calls":
                                 run.usage["calls"]},
                 "config": {"agent": {"step_limit": 250, "cost_limit": 3.0},
                            "agent_type": "minisweagent.run.benchmarks.utils.common."
                                          "ProgressTrackingAgent",
                            "model": {"model_name": MINI_MODEL, "model_kwargs": {
                                "temperature": 0.0}},
                            "model_type": "minisweagent.models.litellm_model.LitellmModel",
                            "environment": {"image": f"docker.io/swebench/{MINI_INSTANCE}:latest",
                                            "cwd": "/testbed", "timeout": 60},
                            "environment_type": "minisweagent.environments.docker."
                                                "DockerEnvironment"},
                 "mini_version": "2.1.0", "exit_status": "Submitted", "submission": diff},
        "messages": run.messages,
        "trajectory_format": "mini-swe-agent-1.1",
        "instance_id": MINI_INSTANCE}
    key["usage"] = run.usage
    return f"mini-swe-agent/{MINI_INSTANCE}/{MINI_INSTANCE}.traj.json", doc, key


# -- OpenHands ------------------------------------------------------------------------------

OH_MODEL = "claude-sonnet-4-20250514"
MIGRATION_ERROR = ("Traceback (most recent call last):\n  File \"/workspace/shop/manage.py\", "
                   "line 22, in <module>\n    main()\n  ...\n  File \"/usr/local/lib/python3.12"
                   "/site-packages/django/db/backends/sqlite3/base.py\", line 329, in execute\n"
                   "    return super().execute(query, params)\n"
                   "django.db.utils.OperationalError: no such table: orders_order\n")
OH_TEST = "cd /workspace/shop && python manage.py test orders"


class _OpenHands:
    """An OpenHands event stream being written: ids, clock, usage."""

    def __init__(self, rng: random.Random, start: dt.datetime, task: str) -> None:
        self.rng, self.t, self.next_id = rng, start, 0
        self.events: list[Record] = []
        self.usage = {"input": 0, "cached": 0, "output": 0, "calls": 0}
        self.context = 5200
        self.add({"source": "user", "message": task, "action": "message",
                  "args": {"content": task, "image_urls": None, "wait_for_response": False}})
        self.add({"source": "environment", "message": "", "observation": "agent_state_changed",
                  "content": "", "extras": {"agent_state": "running", "reason": ""}})

    def stamp(self) -> str:
        return self.t.replace(tzinfo=None).isoformat()

    def add(self, event: Record) -> int:
        self.events.append({"id": self.next_id, "timestamp": self.stamp(), **event})
        self.next_id += 1
        return len(self.events)

    def _metadata(self, function: str, call_id: str) -> Record:
        rng = self.rng
        fresh, out = rng.randint(80, 1200), rng.randint(50, 400)
        self.usage["input"] += fresh
        self.usage["cached"] += self.context
        self.usage["output"] += out
        self.usage["calls"] += 1
        usage = {"completion_tokens": out, "prompt_tokens": self.context + fresh,
                 "total_tokens": self.context + fresh + out,
                 "prompt_tokens_details": {"audio_tokens": None, "cached_tokens": self.context},
                 "cache_creation_input_tokens": 0, "cache_read_input_tokens": self.context}
        self.context += fresh + out
        return {"function_name": function, "tool_call_id": call_id, "model_response": {
            "id": f"chatcmpl-{uuid4(rng)}", "created": int(self.t.timestamp()), "model": OH_MODEL,
            "object": "chat.completion", "usage": usage}, "total_calls_in_response": 1}

    def run(self, thought: str, command: str, code: int, output: str) -> int:
        rng = self.rng
        self.t += dt.timedelta(seconds=rng.uniform(3.0, 12.0))
        call_id = f"toolu_{''.join(rng.choice(B62) for _ in range(24))}"
        meta = self._metadata("execute_bash", call_id)
        line = self.add({"source": "agent", "message": f"Running command: {command}",
                         "action": "run", "tool_call_metadata": meta, "args": {
                             "command": command, "is_input": False, "thought": thought,
                             "blocking": False, "is_static": False, "cwd": None, "hidden": False,
                             "confirmation_state": "confirmed"}, "timeout": 120})
        cause = self.events[-1]["id"]
        self.t += dt.timedelta(seconds=rng.uniform(0.5, 4.0))
        self.add({"source": "agent", "message": f"Command `{command}` executed with exit code "
                  f"{code}.", "cause": cause, "observation": "run", "tool_call_metadata": meta,
                  "content": output, "extras": {"command": command, "metadata": {
                      "exit_code": code, "pid": -1, "username": "openhands",
                      "hostname": "runtime-7f3c", "working_dir": "/workspace/shop",
                      "py_interpreter_path": "/usr/local/bin/python",
                      "prefix": "", "suffix": f"\n[The command completed with exit code {code}.]"},
                      "hidden": False}, "success": code == 0})
        return line

    def edit(self, thought: str, path: str, old: str, new: str) -> int:
        rng = self.rng
        self.t += dt.timedelta(seconds=rng.uniform(3.0, 12.0))
        call_id = f"toolu_{''.join(rng.choice(B62) for _ in range(24))}"
        meta = self._metadata("str_replace_editor", call_id)
        line = self.add({"source": "agent", "message": "", "action": "edit",
                         "tool_call_metadata": meta, "args": {
                             "path": path, "command": "str_replace", "file_text": None,
                             "old_str": old, "new_str": new, "insert_line": None,
                             "content": "", "start": 1, "end": -1, "thought": thought,
                             "impl_source": "oh_aci"}})
        cause = self.events[-1]["id"]
        self.t += dt.timedelta(seconds=rng.uniform(0.05, 0.4))
        self.add({"source": "agent", "message": f"I edited the file {path}.", "cause": cause,
                  "observation": "edit", "tool_call_metadata": meta,
                  "content": f"The file {path} has been edited. Here's the result of running "
                             f"`cat -n` on a snippet of {path}:\n    12\t{new}\nReview the "
                             "changes and make sure they are as expected.",
                  "extras": {"path": path, "prev_exist": True, "old_content": old,
                             "new_content": new, "impl_source": "oh_aci", "diff": ""}})
        return line


def _openhands(seed: int, incident: bool) -> tuple[str, Record, Record]:
    rng = stream(seed, "traj-oh")
    session = hex_id(stream(seed, "traj-oh-ids"), 32)
    run = _OpenHands(rng, DAY + dt.timedelta(hours=14, minutes=40, seconds=3),
                     "Order totals ignore the shipping fee; fix Order.total and make the orders "
                     "tests pass.")
    key: Record = {"incidents": [], "healthy": []}
    first = run.run("Let me look at the model.", "cd /workspace/shop && grep -n 'def total' -A6 "
                    "orders/models.py", 0, "31:    def total(self):\n32:        return "
                    "sum(i.amount for i in self.items.all())\n")
    run.edit("Add the shipping fee.", "/workspace/shop/orders/models.py",
             "        return sum(i.amount for i in self.items.all())",
             "        return sum(i.amount for i in self.items.all()) + self.shipping_fee")
    key["healthy"].append({"kind": "read_and_edit", "actor": "openhands", "session": session,
                           "first_line": first, "last_line": len(run.events), "loop": False})
    tries = 11 if incident else 2
    lines = []
    for i in range(tries):
        lines.append(run.run("Run the orders tests." if i == 0 else "Run the tests again.",
                             OH_TEST, 1, "Creating test database for alias 'default'...\n"
                             + MIGRATION_ERROR))
        if incident or i < tries - 1:  # edits that do not touch the missing migration
            n = i % 3
            run.edit("Maybe the test settings are wrong.", "/workspace/shop/shop/settings_test.py",
                     f"DEBUG = {n % 2 == 0}", f"DEBUG = {n % 2 == 1}")
    if incident:
        key["incidents"].append({
            "kind": "same_failing_test", "actor": "openhands", "session": session,
            "action": "python", "error": "django.db.utils.OperationalError: no such table: "
                                         "orders_order",
            "count": tries, "start": _ms(dt.datetime.fromisoformat(
                run.events[lines[0] - 1]["timestamp"]).replace(tzinfo=UTC)),
            "end": _ms(dt.datetime.fromisoformat(
                run.events[lines[-1] - 1]["timestamp"]).replace(tzinfo=UTC)),
            "first_line": lines[0], "last_line": lines[-1], "detector": "repeated_error",
            "loop": True})
    run.rng = stream(seed, "traj-oh-after")
    first = run.run("The table is missing: create the migration.", "cd /workspace/shop && python "
                    "manage.py makemigrations orders", 0, "Migrations for 'orders':\n  "
                    "orders/migrations/0004_order_shipping_fee.py\n    - Add field shipping_fee "
                    "to order\n")
    run.run("Now the tests.", OH_TEST, 0, "Creating test database for alias 'default'...\n"
            "......\n------------------------------------------------------------------"
            "----\nRan 6 tests in 0.412s\n\nOK\nDestroying test database for alias 'default'...\n")
    run.t += dt.timedelta(seconds=4)
    run.add({"source": "agent", "message": "Order.total now includes the shipping fee; the "
             "orders tests pass.", "action": "finish", "tool_call_metadata": None, "args": {
                 "final_thought": "Order.total now includes the shipping fee.",
                 "task_completed": "true", "outputs": {}, "thought": ""}})
    run.add({"source": "environment", "message": "", "observation": "agent_state_changed",
             "content": "", "extras": {"agent_state": "finished", "reason": ""}})
    key["healthy"].append({"kind": "migration_then_tests_pass", "actor": "openhands",
                           "session": session, "first_line": first,
                           "last_line": len(run.events), "loop": False})
    key["usage"] = run.usage
    return f"openhands/trajectories/{session}.json", run.events, key


# -- AutoGen --------------------------------------------------------------------------------

def _autogen(seed: int) -> tuple[str, Record, Record]:
    """A healthy AgentChat team run (a SelectorGroupChat's TaskResult messages)."""
    rng = stream(seed, "traj-ag")
    t = DAY + dt.timedelta(hours=16, minutes=5, seconds=41)
    messages: list[Record] = []

    def add(source: str, kind: str, content: Any, usage: bool, **more: Any) -> None:
        nonlocal t
        t += dt.timedelta(seconds=rng.uniform(1.0, 6.0))
        messages.append({"id": uuid4(rng), "source": source, "models_usage": {
            "prompt_tokens": rng.randint(300, 2400), "completion_tokens": rng.randint(20, 300)}
            if usage else None, "metadata": {}, "created_at": t.isoformat(), **more,
            "content": content, "type": kind})

    add("user", "TextMessage", "Find the three slowest endpoints in yesterday's access log and "
        "propose a fix for the slowest.", False)
    add("planner", "TextMessage", "Plan: coder parses the log and ranks endpoints by p95 "
        "latency; reviewer checks the numbers.", True)
    calls = [("parse_access_log", {"path": "/var/log/shop/access.log.1"},
              "parsed 48,211 requests over 24h"),
             ("rank_endpoints", {"metric": "p95_ms", "top": 3},
              "GET /orders/export 2,950 ms; GET /reports/daily 1,210 ms; POST /cart 640 ms")]
    for name, args, result in calls:
        call_id = f"call_{''.join(rng.choice(B62) for _ in range(24))}"
        add("coder", "ToolCallRequestEvent", [{"id": call_id, "arguments": json.dumps(args),
                                               "name": name}], True)
        add("coder", "ToolCallExecutionEvent", [{"content": result, "name": name,
                                                 "call_id": call_id, "is_error": False}], False)
    add("coder", "ToolCallSummaryMessage", calls[-1][2], False)
    add("coder", "TextMessage", "The export endpoint loads every order row; paginate it and "
        "stream the CSV.", True)
    add("reviewer", "TextMessage", "Numbers check out against the raw log. The pagination fix "
        "is right. APPROVE", True)
    session = "team-run-" + hex_id(stream(seed, "traj-ag-ids"), 8)
    key = {"incidents": [], "healthy": [{"kind": "team_run_approved", "actor": "coder",
                                         "session": session, "first_line": 1,
                                         "last_line": len(messages), "loop": False}]}
    doc = {"messages": messages, "stop_reason": "Text 'APPROVE' mentioned"}
    return f"autogen/{session}.json", doc, key


def write_trajectories(outdir: Path, seed: int = 7, *, incident: bool = True) -> Record:
    """Write one trajectory of each flavour and return the answer key: per file its text
    lines (`lines`) and its steps (`records`: each is an event or quarantined), the usage of
    the ones that state it, the incidents and the healthy work."""
    out = Path(outdir)
    key: Record = {"format": "trajectory", "lines": {}, "records": {}, "usage": {},
                   "incidents": [], "healthy": []}
    for name, doc, part in (_swe_agent(seed, incident), _mini_swe_agent(seed, incident),
                            _openhands(seed, incident), _autogen(seed)):
        key["lines"][name] = _write(out / name, doc)
        steps = doc if isinstance(doc, list) else doc.get("trajectory") or doc.get("messages")
        key["records"][name] = len(steps)
        if "usage" in part:
            key["usage"][name] = part["usage"]
        for entry in part["incidents"] + part["healthy"]:
            entry["file"] = name
        key["incidents"] += part["incidents"]
        key["healthy"] += part["healthy"]
    return key

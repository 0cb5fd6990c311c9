"""Synthetic Claude Code transcripts: a project folder of two sessions and a subagent's
transcript, written the way Claude Code 2.1 writes them (see formats/claude_code.py for the
sources of the shape).

Incidents: in session 1, a `git commit` rejected by the pre-commit hook (ruff) twelve times
in a row with the same error, the agent editing between tries without fixing what the hook
names; in the same session, a subagent (Task) re-running the same failing test eleven times;
in session 2, the agent re-reading the same file fifteen times with the same result (a loop
of successes: no error to repeat, found by repeated_action); in session 3, a Stop hook that
insists the tests be run and the agent answering it with the same message twelve times
instead of running them (the same two messages back and forth: repeated_message). Healthy:
edits that succeed, a CI poll that ends, a build run three times until it passes, a test run
that passes. The clean twin has the same healthy work; there the hook failure is fixed at the
second try, the subagent's test passes at its second run, the file is read once and the agent
runs the tests the Stop hook asks for.

Lines are `JSON.stringify` output (compact, non-ASCII as is), keys in Claude Code's order; an
assistant response is one line per content block, every line with the response's usage
(output tokens growing to the final count on its last line).
"""

from __future__ import annotations

import datetime as dt
import json
import random
import string
from pathlib import Path
from typing import Any

from ._common import UTC, hex_id, iso_ms, stream, uuid4, write_lines

Record = dict[str, Any]
CWD = "/home/dev/shop"
PROJECT = "-home-dev-shop"  # the project folder: the cwd with / replaced by -
VERSION = "2.1.29"
MODEL = "claude-opus-4-5-20251101"
SUB_MODEL = "claude-sonnet-4-5-20250929"
DAY = dt.datetime(2026, 6, 22, tzinfo=UTC)
B62 = string.ascii_letters + string.digits

HOOK_FAILURE = ("Exit code 1\n"
                "ruff.....................................................................Failed\n"
                "- hook id: ruff\n- exit code: 1\n\n"
                "shop/checkout.py:41:5: F841 Local variable `rounded` is assigned to but never used\n"
                "Found 1 error.\n"
                "No fixes available (1 hidden fix can be enabled with the `--unsafe-fixes` option).")
HOOK_PASSED = ("ruff.....................................................................Passed\n"
               "[fix/checkout-rounding 4f1c2d9] Round cart totals once, at the end\n"
               " 2 files changed, 14 insertions(+), 6 deletions(-)")
TEST_FAILURE = ("Exit code 1\n"
                "F.                                                                       [100%]\n"
                "=================================== FAILURES ===================================\n"
                "____________________________ test_stacked_discounts ____________________________\n"
                "\n    def test_stacked_discounts():\n        cart = Cart([Item('mug', '12.00', 1), "
                "Item('tea', '8.00', 1)])\n>       assert cart.total(codes=['TEN', 'FIVE']) == "
                "Decimal('17.10')\nE       AssertionError: assert Decimal('17.11') == "
                "Decimal('17.10')\n\ntests/test_discounts.py:18: AssertionError\n"
                "=========================== short test summary info ============================\n"
                "FAILED tests/test_discounts.py::test_stacked_discounts - AssertionError: assert "
                "Decimal('17.11') == Decimal('17.10')\n1 failed, 1 passed in 0.14s")
TEST_PASSED = (".."
               "                                                                       [100%]\n"
               "2 passed in 0.11s")
PRICING = ("from decimal import Decimal, ROUND_HALF_EVEN\n\nCENT = Decimal('0.01')\n\n\n"
           "def price(amount: str) -> Decimal:\n    return Decimal(amount).quantize(CENT)\n\n\n"
           "def apply_discounts(total: Decimal, percents: list[int]) -> Decimal:\n"
           "    for p in percents:\n        total -= total * Decimal(p) / 100\n"
           "    return total.quantize(CENT, rounding=ROUND_HALF_EVEN)\n")


def _numbered(text: str, start: int = 1) -> str:
    """A file's text the way the Read tool returns it (`cat -n`, an arrow after the number)."""
    return "\n".join(f"{n:>6}→{line}" for n, line in enumerate(text.split("\n"), start))


def _b62(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(B62) for _ in range(n))


class _Transcript:
    """One transcript file being written: its lines, the last line's uuid (the next line's
    parent) and the clock."""

    def __init__(self, session: str, slug: str, branch: str, *, agent_id: str | None = None,
                 model: str = MODEL) -> None:
        self.session, self.slug, self.branch, self.agent_id, self.model = (
            session, slug, branch, agent_id, model)
        self.lines: list[Record] = []
        self.parent: str | None = None
        self.t = DAY
        self.cache = 14_000  # prompt tokens already cached
        self.usage: dict[str, int] = {"input": 0, "output": 0, "cache_read": 0, "cache_write": 0,
                                      "responses": 0}

    def at(self, when: dt.datetime) -> None:
        self.t = max(self.t, when)

    def tick(self, rng: random.Random, lo: float, hi: float) -> str:
        self.t += dt.timedelta(milliseconds=rng.randint(int(lo * 1000), int(hi * 1000)))
        return iso_ms(int(self.t.timestamp() * 1000))

    def _envelope(self) -> Record:
        rec: Record = {"parentUuid": self.parent, "isSidechain": self.agent_id is not None,
                       "userType": "external", "cwd": CWD, "sessionId": self.session,
                       "version": VERSION, "gitBranch": self.branch}
        if self.agent_id is not None:
            rec["agentId"] = self.agent_id
        rec["slug"] = self.slug
        return rec

    def prompt(self, rng: random.Random, text: str, wait: tuple[float, float] = (20, 90)) -> None:
        """A prompt (the user's; in a subagent's transcript, the Task prompt)."""
        uid, ts = uuid4(rng), self.tick(rng, *wait)
        if self.agent_id is None:
            self.lines.append({"type": "file-history-snapshot", "messageId": uid,
                               "snapshot": {"messageId": uid, "trackedFileBackups": {},
                                            "timestamp": ts}, "isSnapshotUpdate": False})
        rec = self._envelope() | {"type": "user", "message": {"role": "user", "content": text},
                                  "uuid": uid, "timestamp": ts}
        if self.agent_id is None:
            rec["thinkingMetadata"] = {"level": "high", "disabled": False, "triggers": []}
        self.lines.append(rec)
        self.parent = uid

    def respond(self, rng: random.Random, blocks: list[Record]) -> list[str]:
        """A model response, one line per content block; returns the lines' uuids."""
        mid, req = "msg_01" + _b62(rng, 22), "req_011C" + _b62(rng, 20)
        fresh = rng.randint(150, 2400)
        final = rng.randint(30, 420) + 60 * sum(b["type"] == "tool_use" for b in blocks)
        base = {"input_tokens": rng.randint(1, 8), "cache_creation_input_tokens": fresh,
                "cache_read_input_tokens": self.cache}
        self.cache += fresh
        self.usage["input"] += base["input_tokens"]
        self.usage["cache_read"] += base["cache_read_input_tokens"]
        self.usage["cache_write"] += fresh
        self.usage["output"] += final
        self.usage["responses"] += 1
        uids = []
        for i, block in enumerate(blocks):
            out = final if i == len(blocks) - 1 else rng.randint(1, 12)
            usage = base | {"cache_creation": {"ephemeral_5m_input_tokens": 0,
                                               "ephemeral_1h_input_tokens": fresh},
                            "output_tokens": out, "service_tier": "standard"}
            message = {"model": self.model, "id": mid, "type": "message", "role": "assistant",
                       "content": [block], "stop_reason": None, "stop_sequence": None,
                       "usage": usage}
            uid = uuid4(rng)
            self.lines.append(self._envelope() | {
                "message": message, "requestId": req, "type": "assistant", "uuid": uid,
                "timestamp": self.tick(rng, 3.0, 14.0) if i == 0 else self.tick(rng, 0.5, 4.0)})
            self.parent = uid
            uids.append(uid)
        return uids

    def result(self, rng: random.Random, tool_id: str, source: str, content: Any,
               is_error: bool, tool_use_result: Any, took: tuple[float, float]) -> None:
        block = ({"type": "tool_result", "content": content, "is_error": True,
                  "tool_use_id": tool_id} if is_error else
                 {"tool_use_id": tool_id, "type": "tool_result", "content": content,
                  "is_error": False})
        uid = uuid4(rng)
        self.lines.append(self._envelope() | {
            "type": "user", "message": {"role": "user", "content": [block]}, "uuid": uid,
            "timestamp": self.tick(rng, *took), "toolUseResult": tool_use_result,
            "sourceToolAssistantUUID": source})
        self.parent = uid

    def call(self, rng: random.Random, name: str, tool_input: Record, content: Any,
             is_error: bool = False, tool_use_result: Any = None, *, say: str | None = None,
             think: str | None = None, took: tuple[float, float] = (0.05, 0.6)) -> int:
        """A response ending in one tool call, then its result; returns the call's line
        number (1-based)."""
        blocks: list[Record] = []
        if think:
            blocks.append({"type": "thinking", "thinking": think, "signature": _b62(rng, 88)})
        if say:
            blocks.append({"type": "text", "text": say})
        tool_id = "toolu_01" + _b62(rng, 22)
        blocks.append({"type": "tool_use", "id": tool_id, "name": name, "input": tool_input})
        uids = self.respond(rng, blocks)
        line = len(self.lines)
        if tool_use_result is None:
            tool_use_result = ("Error: " + content) if is_error else content
        self.result(rng, tool_id, uids[-1], content, is_error, tool_use_result, took)
        return line

    def say(self, rng: random.Random, text: str) -> None:
        self.respond(rng, [{"type": "text", "text": text}])

    def bash(self, rng: random.Random, command: str, description: str, output: str,
             failed: bool = False, **kw) -> int:
        tur = ("Error: " + output) if failed else {"stdout": output, "stderr": "",
                                                   "interrupted": False, "isImage": False}
        return self.call(rng, "Bash", {"command": command, "description": description}, output,
                         failed, tur, **kw)

    def read(self, rng: random.Random, path: str, text: str, **kw) -> int:
        n = text.count("\n") + 1
        tur = {"type": "text", "file": {"filePath": path, "content": text, "numLines": n,
                                        "startLine": 1, "totalLines": n}}
        return self.call(rng, "Read", {"file_path": path}, _numbered(text), False, tur, **kw)

    def edit(self, rng: random.Random, path: str, old: str, new: str, **kw) -> int:
        out = (f"The file {path} has been updated. Here's the result of running `cat -n` on a "
               f"snippet of the edited file:\n{_numbered(new, 40)}")
        tur = {"filePath": path, "oldString": old, "newString": new, "replaceAll": False,
               "userModified": False}
        return self.call(rng, "Edit", {"file_path": path, "old_string": old, "new_string": new},
                         out, False, tur, **kw)

    def grep(self, rng: random.Random, pattern: str, files: list[str], **kw) -> int:
        out = f"Found {len(files)} files\n" + "\n".join(files)
        tur = {"mode": "files_with_matches", "filenames": files, "numFiles": len(files)}
        return self.call(rng, "Grep", {"pattern": pattern, "output_mode": "files_with_matches"},
                         out, False, tur, **kw)


# -- session 1: the checkout fix, a subagent, a build, the commit ------------------------------


def _session_one(seed: int, incident: bool, out: Path) -> Record:
    ids = stream(seed, "cc-ids")
    session, agent_id = uuid4(ids), hex_id(ids, 7)
    s = _Transcript(session, "quiet-rounding-otter", "fix/checkout-rounding")
    key: Record = {"session": session, "incidents": [], "healthy": []}
    checkout = f"{CWD}/shop/checkout.py"

    rng = stream(seed, "cc-s1-fix")  # healthy: find and fix the rounding, tests pass
    s.at(DAY + dt.timedelta(hours=9, minutes=12))
    s.prompt(rng, "Some carts come out one cent off at checkout (e.g. 3 × 3.35 with the TEN code). "
                  "Find out why and fix it.")
    first = len(s.lines)
    s.grep(rng, "def total", [checkout, f"{CWD}/shop/cart.py"],
           think="Rounding per line item versus once at the end is the usual culprit.")
    s.read(rng, checkout, "def total(self, codes=()):\n    subtotal = sum(price(i.amount) * i.qty "
                          "for i in self.items)\n    rounded = subtotal.quantize(CENT)\n"
                          "    return apply_discounts(rounded, self.percents(codes))")
    s.read(rng, f"{CWD}/shop/pricing.py", PRICING)
    edits = 0
    for old, new in (("    rounded = subtotal.quantize(CENT)\n    return apply_discounts(rounded, "
                      "self.percents(codes))", "    rounded = subtotal.quantize(CENT)\n"
                      "    return apply_discounts(subtotal, self.percents(codes))"),
                     ("def price(amount: str) -> Decimal:\n    return Decimal(amount).quantize(CENT)",
                      "def price(amount: str) -> Decimal:\n    return Decimal(amount)")):
        s.edit(rng, checkout if edits == 0 else f"{CWD}/shop/pricing.py", old, new,
               say="Rounding happens twice; I'll round once, at the end." if edits == 0 else None)
        edits += 1
    s.bash(rng, "python -m pytest tests/test_checkout.py -q", "Run checkout tests",
           "....                                                                     [100%]\n"
           "4 passed in 0.09s", took=(1.5, 3.0))
    s.say(rng, "Fixed: prices were rounded per item and again after discounts. They are now "
               "rounded once, after discounts; the checkout tests pass.")
    key["healthy"].append({"kind": "edits_that_succeed", "actor": "claude", "session": session,
                           "edits": edits, "first_line": first + 1, "last_line": len(s.lines),
                           "loop": False})

    rng = stream(seed, "cc-s1-task")  # a subagent makes the discount tests pass
    s.at(DAY + dt.timedelta(hours=9, minutes=31))
    s.prompt(rng, "Have a subagent make tests/test_discounts.py pass as well.")
    task_prompt = ("Make tests/test_discounts.py pass. The failing test is test_stacked_discounts; "
                   "shop/pricing.py applies percent discounts. Run the tests to confirm and "
                   "report what you changed.")
    tool_id = "toolu_01" + _b62(rng, 22)
    uids = s.respond(rng, [{"type": "text", "text": "I'll hand the discount tests to a subagent."},
                           {"type": "tool_use", "id": tool_id, "name": "Task", "input": {
                               "description": "Fix discount tests", "prompt": task_prompt,
                               "subagent_type": "general-purpose"}}])
    sub = _Transcript(session, s.slug, s.branch, agent_id=agent_id, model=SUB_MODEL)
    sub.at(s.t)
    sub_start = sub.t
    sub_key = _subagent(sub, stream(seed, "cc-sub"), task_prompt, incident)
    s.at(sub.t)
    report = sub_key.pop("report")
    s.result(rng, tool_id, uids[-1], [{"type": "text", "text": report}], False, {
        "status": "completed", "prompt": task_prompt, "agentId": agent_id,
        "content": [{"type": "text", "text": report}],
        "totalDurationMs": int((sub.t - sub_start).total_seconds() * 1000),
        "totalToolUseCount": sub_key["tool_calls"]}, (0.1, 0.4))
    s.say(rng, "The subagent is done: " + report.split(".")[0] + ".")
    sub_file = f"{session}/subagents/agent-{agent_id}.jsonl"
    sub_key |= {"file": sub_file, "actor": f"agent-{agent_id}", "session": session}

    rng = stream(seed, "cc-s1-build")  # healthy: a build run until it passes
    s.at(DAY + dt.timedelta(hours=10, minutes=20))
    s.prompt(rng, "Rebuild the storefront bundle, the cart widget shows the old totals.")
    first = len(s.lines)
    build = "npm run build --prefix web"
    errors = ["Exit code 1\n\n> web@1.8.0 build\n> tsc && vite build\n\n"
              "src/cart.ts(12,7): error TS2322: Type 'string' is not assignable to type 'number'.",
              "Exit code 1\n\n> web@1.8.0 build\n> tsc && vite build\n\n"
              "src/cart.ts(31,18): error TS2345: Argument of type 'number' is not assignable to "
              "parameter of type 'Money'."]
    for i, err in enumerate(errors):
        s.bash(rng, build, "Build the web bundle", err, failed=True, took=(4.0, 9.0))
        s.edit(rng, f"{CWD}/web/src/cart.ts", ["const total: number = row.total",
                                               "render(total)"][i],
               ["const total: number = Number(row.total)", "render(money(total))"][i])
    s.bash(rng, build, "Build the web bundle", "\n> web@1.8.0 build\n> tsc && vite build\n\n"
           "vite v5.4.2 building for production...\n✓ 212 modules transformed.\n"
           "dist/assets/index-3f9a1c.js  148.21 kB │ gzip: 47.90 kB\n✓ built in 3.12s",
           took=(6.0, 11.0))
    s.say(rng, "The bundle builds again (two type errors in src/cart.ts fixed).")
    key["healthy"].append({"kind": "build_until_it_passes", "actor": "claude",
                           "session": session, "action": "Bash", "runs": 3, "failed": 2,
                           "first_line": first + 1, "last_line": len(s.lines), "loop": False})

    rng = stream(seed, "cc-s1-commit")  # the incident: the hook rejects the commit again and again
    s.at(DAY + dt.timedelta(hours=11, minutes=2))
    s.prompt(rng, "Commit all of this on the branch and push it.")
    commit = 'git add -A && git commit -m "Round cart totals once, at the end"'
    tries = 12 if incident else 2
    attempts: list[int] = []
    starts: list[str] = []
    for i in range(tries):
        last = i == tries - 1 and not incident
        attempts.append(s.bash(rng, commit, "Commit the rounding fix",
                               HOOK_PASSED if last else HOOK_FAILURE, failed=not last,
                               say=None if i == 0 else "Committing again.", took=(2.5, 6.0)))
        starts.append(s.lines[attempts[-1] - 1]["timestamp"])
        if last:
            break
        if incident:  # edits that do not touch what the hook names
            s.edit(rng, checkout, f"    # rounding: see pricing.apply_discounts ({i})",
                   f"    # rounding happens once, in pricing.apply_discounts ({i})",
                   say="The ruff hook failed; let me tidy checkout.py and retry.",
                   think="ruff complains about checkout.py." if i % 3 == 0 else None)
        else:
            s.edit(rng, checkout, "    rounded = subtotal.quantize(CENT)\n", "",
                   say="The hook flags an unused variable; removing it.")
    if incident:
        s.say(rng, "The pre-commit hook keeps rejecting the commit. You may want to look at it.")
        key["incidents"].append({
            "kind": "commit_rejected_by_hook", "actor": "claude", "session": session,
            "action": "Bash", "error": "Exit code 1", "count": tries,
            "start": starts[0], "end": starts[-1], "first_line": attempts[0],
            "last_line": attempts[-1], "detector": "repeated_error", "loop": True})
    else:
        s.bash(rng, "git push -u origin fix/checkout-rounding", "Push the branch",
               "branch 'fix/checkout-rounding' set up to track 'origin/fix/checkout-rounding'.\n"
               "To github.com:acme/shop.git\n * [new branch]      fix/checkout-rounding -> "
               "fix/checkout-rounding", took=(1.0, 2.5))
        s.say(rng, "Committed and pushed fix/checkout-rounding.")
        key["healthy"].append({"kind": "commit_fixed_after_hook", "actor": "claude",
                               "session": session, "action": "Bash", "failed": 1,
                               "loop": False})
    if sub_key.pop("loop"):
        key["incidents"].append(sub_key)
    else:
        key["healthy"].append(sub_key)
    write_lines(out / f"{session}.jsonl", map(_dump, s.lines))
    write_lines(out / sub_file, map(_dump, sub.lines))
    key["usage"] = {f"{session}.jsonl": s.usage, sub_file: sub.usage}
    key["lines"] = {f"{session}.jsonl": len(s.lines), sub_file: len(sub.lines)}
    return key


def _subagent(sub: _Transcript, rng: random.Random, task: str, incident: bool) -> Record:
    """The subagent: reads the test, runs it, edits pricing.py, runs it again; in the incident
    its edits never fix the rounding, and it runs the same failing test eleven times."""
    sub.prompt(rng, task, wait=(0.2, 0.6))
    test_path, pricing = f"{CWD}/tests/test_discounts.py", f"{CWD}/shop/pricing.py"
    sub.read(rng, test_path, "from decimal import Decimal\n\nfrom shop.cart import Cart, Item\n\n\n"
                             "def test_stacked_discounts():\n    cart = Cart([Item('mug', '12.00', 1),"
                             " Item('tea', '8.00', 1)])\n    assert cart.total(codes=['TEN', 'FIVE'])"
                             " == Decimal('17.10')",
             say="Let me look at the failing test first.")
    sub.read(rng, pricing, PRICING)
    runs = 11 if incident else 2
    cmd = "python -m pytest tests/test_discounts.py -q"
    first: int | None = None
    times: list[str] = []
    calls = 2
    for i in range(runs):
        passed = not incident and i == runs - 1
        line = sub.bash(rng, cmd, "Run the discount tests", TEST_PASSED if passed else TEST_FAILURE,
                        failed=not passed, took=(1.2, 2.8),
                        say=None if i == 0 else "Running the tests again.")
        calls += 1
        first = first or line
        last_line = line
        times.append(sub.lines[line - 1]["timestamp"])
        if passed:
            break
        new = ("    return total.quantize(CENT, rounding=ROUND_HALF_UP)" if not incident else
               f"    return total.quantize(CENT, rounding={['ROUND_HALF_EVEN', 'ROUND_HALF_UP'][i % 2]})")
        if not incident:
            sub.edit(rng, pricing, "        total -= total * Decimal(p) / 100\n"
                                   "    return total.quantize(CENT, rounding=ROUND_HALF_EVEN)",
                     "        total -= (total * Decimal(p) / 100).quantize(CENT)\n" + new,
                     say="Each discount has to be rounded to the cent as it is applied.")
        else:
            sub.edit(rng, pricing, "    return total.quantize(CENT, rounding=ROUND_HALF_EVEN)",
                     new, say="Trying the other rounding mode.")
        calls += 1
    if incident:
        report = ("I could not make test_stacked_discounts pass. I tried ROUND_HALF_EVEN and "
                  "ROUND_HALF_UP in apply_discounts; the total stays 17.11.")
        sub.say(rng, report)
        return {"kind": "subagent_reruns_failing_test", "action": "Bash", "error": "Exit code 1",
                "count": runs, "start": times[0], "end": times[-1], "first_line": first,
                "last_line": last_line, "detector": "repeated_error", "loop": True,
                "tool_calls": calls, "report": report}
    report = ("Fixed. Each percent discount is now rounded to the cent as it is applied; "
              "tests/test_discounts.py passes (2 passed).")
    sub.say(rng, report)
    return {"kind": "subagent_fixes_test", "action": "Bash", "runs": runs, "failed": runs - 1,
            "loop": False, "tool_calls": calls, "report": report}


# -- session 2: pricing questions, a CI poll --------------------------------------------------


def _session_two(seed: int, incident: bool, out: Path) -> Record:
    ids = stream(seed, "cc-ids-2")
    session = uuid4(ids)
    s = _Transcript(session, "brisk-ledger-heron", "main")
    key: Record = {"session": session, "incidents": [], "healthy": []}
    pricing = f"{CWD}/shop/pricing.py"

    rng = stream(seed, "cc-s2-ci")  # healthy: poll CI until the run ends
    s.at(DAY + dt.timedelta(hours=14, minutes=3))
    s.prompt(rng, "Wait for the CI run on main to finish and tell me how it went.")
    first = len(s.lines)
    polls = 5
    for i in range(polls):
        done = i == polls - 1
        status = ('{"conclusion":"success","status":"completed"}' if done
                  else '{"conclusion":"","status":"in_progress"}')
        s.bash(rng, "sleep 30 && gh run view 9921 --json status,conclusion",
               "Check the CI run", status, took=(30.5, 33.0),
               say="Still running; checking again in 30 s." if 0 < i else None)
    s.say(rng, "CI run 9921 on main finished: success.")
    key["healthy"].append({"kind": "poll_that_ends", "actor": "claude", "session": session,
                           "action": "Bash", "polls": polls, "first_line": first + 1,
                           "last_line": len(s.lines), "loop": False})

    rng = stream(seed, "cc-s2-read")  # the incident: the same file read again and again
    s.at(DAY + dt.timedelta(hours=14, minutes=40))
    s.prompt(rng, "Which rounding mode does pricing use for discounts, and is it the right one "
                  "for invoices?")
    reads = 15 if incident else 1
    lines: list[int] = []
    before = _tokens(s)
    for i in range(reads):
        lines.append(s.read(rng, pricing, PRICING,
                            think="I should re-check how apply_discounts rounds." if i else None,
                            say="Let me look at pricing.py again." if i else None))
    spent = _tokens(s) - before
    s.say(rng, "Discounts are rounded with ROUND_HALF_EVEN (banker's rounding). Invoices in "
               "most EU countries expect ROUND_HALF_UP.")
    add_reread(key, {"actor": "claude", "session": session, "action": "Read", "tokens": spent},
               lines)
    name = f"{session}.jsonl"
    write_lines(out / name, map(_dump, s.lines))
    key["usage"] = {name: s.usage}
    key["lines"] = {name: len(s.lines)}
    return key


def add_reread(key: Record, entry: Record, lines: list[int]) -> None:
    """Add the re-read loop (`lines`: the line of each read; `entry["tokens"]`: what the
    agent's turns over it counted) to the answer key: an incident when there were several
    reads, healthy work when there was one."""
    if len(lines) > 1:
        key["incidents"].append(entry | {
            "kind": "same_file_reread", "repeats": len(lines), "first_line": lines[0],
            "last_line": lines[-1], "loop": True, "detector": "repeated_action"})
    else:
        key["healthy"].append({k: v for k, v in entry.items() if k != "tokens"}
                              | {"kind": "file_read_once", "reads": 1, "loop": False})


def _tokens(s: _Transcript) -> int:
    """Input plus output tokens counted so far (as loophound counts them: cache apart)."""
    return s.usage["input"] + s.usage["output"]


# -- session 3: a Stop hook the agent answers with the same words -----------------------------

STOP_HOOK = ("Stop hook feedback:\n- [~/.claude/hooks/require-tests.sh]: No test run in this "
             "session. Run `make test` and report the result before you finish.")
STOP_REPLY = ("The change only touches CHANGELOG.md, so there is nothing to test. The CHANGELOG "
              "entry for the rounding fix is added and the task is complete.")


def _session_three(seed: int, incident: bool, out: Path) -> Record:
    ids = stream(seed, "cc-ids-3")
    session = uuid4(ids)
    s = _Transcript(session, "tidy-changelog-wren", "fix/checkout-rounding")
    key: Record = {"session": session, "incidents": [], "healthy": []}
    rng = stream(seed, "cc-s3-stop")
    s.at(DAY + dt.timedelta(hours=16, minutes=12))
    s.prompt(rng, "Add a CHANGELOG entry for the rounding fix.")
    s.edit(rng, f"{CWD}/CHANGELOG.md", "## Unreleased\n",
           "## Unreleased\n\n- Cart totals are rounded once, after discounts (#412).\n",
           say="I'll add the entry under Unreleased.")
    s.say(rng, "Added the entry for the rounding fix to CHANGELOG.md.")
    blocks = 12 if incident else 1
    first = len(s.lines) + 1
    before = _tokens(s)
    for _ in range(blocks):
        uid, ts = uuid4(rng), s.tick(rng, 0.4, 1.5)  # the hook's reason, given to the agent
        s.lines.append(s._envelope() | {"type": "user", "message": {
            "role": "user", "content": STOP_HOOK}, "uuid": uid, "timestamp": ts})
        s.parent = uid
        if incident:
            s.say(rng, STOP_REPLY)
    if incident:
        key["incidents"].append({
            "kind": "stop_hook_loop", "actor": "claude", "session": session,
            "messages": 2 * blocks, "tokens": _tokens(s) - before,
            "first_line": first, "last_line": len(s.lines), "detector": "repeated_message",
            "loop": True})
    else:
        s.bash(rng, "make test", "Run the test suite", "python -m pytest -q\n"
               "..........                                                               [100%]\n"
               "10 passed in 0.31s", took=(2.0, 4.0))
        s.say(rng, "make test passes (10 tests). The CHANGELOG entry is added.")
        key["healthy"].append({"kind": "stop_hook_satisfied", "actor": "claude",
                               "session": session, "loop": False})
    name = f"{session}.jsonl"
    write_lines(out / name, map(_dump, s.lines))
    key["usage"] = {name: s.usage}
    key["lines"] = {name: len(s.lines)}
    return key


def _dump(rec: Record) -> str:
    return json.dumps(rec, separators=(",", ":"), ensure_ascii=False)


def write_claude_code_project(outdir: Path, seed: int = 7, *, incident: bool = True) -> Record:
    """Write a Claude Code project folder (`<project>/<session>.jsonl`, the subagent's
    `<session>/subagents/agent-<id>.jsonl`) and return its answer key: per file its lines and
    its usage counted once per response; the incidents (`count` attempts of the same failing
    call, or `repeats` of the same successful one) and the healthy work."""
    out = Path(outdir) / PROJECT
    parts = [_session_one(seed, incident, out), _session_two(seed, incident, out),
             _session_three(seed, incident, out)]
    lines = {f"{PROJECT}/{k}": v for part in parts for k, v in part["lines"].items()}
    usage = {f"{PROJECT}/{k}": v for part in parts for k, v in part["usage"].items()}
    for entry in (e for part in parts for e in part["incidents"] + part["healthy"]):
        entry["file"] = f"{PROJECT}/" + entry.get("file", f"{entry['session']}.jsonl")
    return {"format": "claude-code", "lines": lines, "usage": usage,
            "incidents": [e for part in parts for e in part["incidents"]],
            "healthy": [e for part in parts for e in part["healthy"]]}

"""Synthetic Codex CLI rollouts (`sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl`), written
the way Codex 0.77 writes them (see formats/codex.py for the sources of the shape).

Incidents: in the first rollout, `git commit` rejected by the pre-commit hook twelve times in a
row with the same exit code, the agent patching files between tries without fixing what the
hook names; in the second, the agent printing the same file fifteen times with the same output
(a loop of successes: no error to repeat, found by repeated_action); in the third, the loop of
mini-swe-agent's trajectory: restore the file from its backup, apply the same patch, run the
same failing test, nine times round (alternating_action). Healthy: patches that apply, tests
that pass, a build run three times until it passes, a CI poll that ends, and a batch checking
twelve sample carts one by one (calls alike but for the cart's number). The clean twin has the
same healthy work; there the hook failure is fixed at the second try, the file is printed once
and the second patch makes the test pass.

Lines are `serde_json::to_string` output (compact, non-ASCII as is), keys in struct order. Each
model response is followed by a `token_count` event; Codex re-emits some of them unchanged
(a UI refresh), as it does.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import string
from pathlib import Path
from typing import Any

from ._common import UTC, iso_ms, stream, uuid4, write_lines
from .claude_code import add_reread

Record = dict[str, Any]
CWD = "/home/dev/shop"
MODEL = "gpt-5.2-codex"
CLI = "0.77.0"
DAY = dt.datetime(2026, 6, 23, tzinfo=UTC)
B62 = string.ascii_letters + string.digits
INSTRUCTIONS = ("# AGENTS.md instructions for /home/dev/shop\n\n<INSTRUCTIONS>\nRun `make test` "
                "before committing. Never commit with --no-verify.\n</INSTRUCTIONS>")
HOOK_FAILURE = ("ruff.....................................................................Failed\n"
                "- hook id: ruff\n- exit code: 1\n\n"
                "shop/checkout.py:41:5: F841 Local variable `rounded` is assigned to but never "
                "used\nFound 1 error.\n")
PRICING = ("from decimal import Decimal, ROUND_HALF_EVEN\n\nCENT = Decimal('0.01')\n\n\n"
           "def apply_discounts(total: Decimal, percents: list[int]) -> Decimal:\n"
           "    for p in percents:\n        total -= total * Decimal(p) / 100\n"
           "    return total.quantize(CENT, rounding=ROUND_HALF_EVEN)\n")


def _dump(rec: Record) -> str:
    return json.dumps(rec, separators=(",", ":"), ensure_ascii=False)


class _Rollout:
    """One rollout file being written, with its clock and the usage it has counted."""

    def __init__(self, rng: random.Random, start: dt.datetime, session: str) -> None:
        self.lines: list[Record] = []
        self.t = start
        self.session = session
        self.total = {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0,
                      "reasoning_output_tokens": 0, "total_tokens": 0}
        self.context = 9_000
        self.usage = {"input": 0, "cached": 0, "output": 0, "calls": 0}
        self.last: Record = {}
        self.emit("session_meta", {
            "id": session, "timestamp": self.stamp(), "cwd": CWD, "originator": "codex_cli_rs",
            "cli_version": CLI, "instructions": None, "source": "cli", "model_provider": "openai",
            "git": {"commit_hash": f"{rng.getrandbits(160):040x}", "branch": "main",
                    "repository_url": "git@github.com:acme/shop.git"}})
        self.item({"type": "message", "role": "user",
                   "content": [{"type": "input_text", "text": INSTRUCTIONS}]})
        self.item({"type": "message", "role": "user", "content": [{"type": "input_text", "text": (
            f"<environment_context>\n  <cwd>{CWD}</cwd>\n  <approval_policy>on-request"
            "</approval_policy>\n  <sandbox_mode>workspace-write</sandbox_mode>\n  "
            "<network_access>restricted</network_access>\n  <shell>bash</shell>\n"
            "</environment_context>")}]})

    def stamp(self) -> str:
        return iso_ms(int(self.t.timestamp() * 1000))

    def tick(self, rng: random.Random, lo: float, hi: float) -> None:
        self.t += dt.timedelta(milliseconds=rng.randint(int(lo * 1000), int(hi * 1000)))

    def emit(self, kind: str, payload: Record) -> int:
        self.lines.append({"timestamp": self.stamp(), "type": kind, "payload": payload})
        return len(self.lines)

    def item(self, payload: Record) -> int:
        return self.emit("response_item", payload)

    def at(self, when: dt.datetime) -> None:
        self.t = max(self.t, when)

    def prompt(self, rng: random.Random, text: str) -> None:
        self.tick(rng, 20, 90)
        self.item({"type": "message", "role": "user", "content": [{"type": "input_text",
                                                                    "text": text}]})
        self.emit("event_msg", {"type": "user_message", "message": text, "images": []})
        self.emit("turn_context", {"cwd": CWD, "approval_policy": "on-request", "sandbox_policy": {
            "type": "workspace-write", "network_access": False, "exclude_tmpdir_env_var": False,
            "exclude_slash_tmp": False}, "model": MODEL, "effort": "medium", "summary": "auto"})

    def think(self, rng: random.Random, summary: str | None) -> None:
        """The model's reasoning item (and its UI copy) at the start of a response."""
        self.tick(rng, 2.5, 12.0)
        if summary:
            self.item({"type": "reasoning", "summary": [{"type": "summary_text", "text": summary}],
                       "content": None, "encrypted_content": "gAAAAA" + "".join(
                           rng.choice(B62) for _ in range(120))})
            self.emit("event_msg", {"type": "agent_reasoning", "text": summary})

    def tokens(self, rng: random.Random, again: bool = False) -> None:
        """The usage of the response just written; `again` re-emits it unchanged."""
        if not again:
            fresh = rng.randint(200, 2600)
            out = rng.randint(40, 600)
            reasoning = rng.randint(0, out // 2)
            last = {"input_tokens": self.context + fresh, "cached_input_tokens": self.context,
                    "output_tokens": out, "reasoning_output_tokens": reasoning,
                    "total_tokens": self.context + fresh + out}
            self.context += fresh + out
            for k in self.total:
                self.total[k] += last[k]
            self.last = last
            self.usage["input"] += last["input_tokens"] - last["cached_input_tokens"]
            self.usage["cached"] += last["cached_input_tokens"]
            self.usage["output"] += out
            self.usage["calls"] += 1
        self.tick(rng, 0.05, 0.3)
        self.emit("event_msg", {"type": "token_count", "info": {
            "total_token_usage": dict(self.total), "last_token_usage": dict(self.last),
            "model_context_window": 272000}, "rate_limits": {
                "primary": {"used_percent": 12.0, "window_minutes": 300, "resets_at": 1782180000},
                "secondary": {"used_percent": 31.0, "window_minutes": 10080,
                              "resets_at": 1782600000}}})

    def shell(self, rng: random.Random, command: str, code: int, output: str,
              think: str | None = None, took: tuple[float, float] = (0.2, 3.0)) -> int:
        """A `shell_command` call and its output (`Exit code: N` … `Output:`); returns the
        call's line number."""
        self.think(rng, think)
        call_id = "call_" + "".join(rng.choice(B62) for _ in range(24))
        line = self.item({"type": "function_call", "name": "shell_command", "arguments": json.dumps(
            {"command": command, "workdir": CWD}, separators=(",", ":")), "call_id": call_id})
        self.tokens(rng)
        self.tick(rng, *took)
        wall = round(rng.uniform(*took), 1)
        self.item({"type": "function_call_output", "call_id": call_id,
                   "output": f"Exit code: {code}\nWall time: {wall} seconds\nOutput:\n{output}"})
        return line

    def patch(self, rng: random.Random, path: str, old: str, new: str,
              think: str | None = None) -> int:
        """An apply_patch call (a custom tool: free-form input) and its output."""
        self.think(rng, think)
        call_id = "call_" + "".join(rng.choice(B62) for _ in range(24))
        body = (f"*** Begin Patch\n*** Update File: {path}\n@@\n-{old}\n+{new}\n*** End Patch\n")
        line = self.item({"type": "custom_tool_call", "status": "completed", "call_id": call_id,
                          "name": "apply_patch", "input": body})
        self.tokens(rng)
        self.tick(rng, 0.05, 0.4)
        self.item({"type": "custom_tool_call_output", "call_id": call_id, "output": json.dumps({
            "output": f"Success. Updated the following files:\nM {path}\n",
            "metadata": {"exit_code": 0, "duration_seconds": 0.0}}, separators=(",", ":"))})
        return line

    def answer(self, rng: random.Random, text: str) -> None:
        self.think(rng, None)
        self.item({"type": "message", "role": "assistant",
                   "content": [{"type": "output_text", "text": text}]})
        self.emit("event_msg", {"type": "agent_message", "message": text})
        self.tokens(rng)
        self.tokens(rng, again=True)  # Codex shows the turn's count again when the turn ends


def _name(session: str, start: dt.datetime) -> str:
    return f"{start:%Y/%m/%d}/rollout-{start:%Y-%m-%dT%H-%M-%S}-{session}.jsonl"


def _open(seed: int, name: str, start: dt.datetime) -> tuple[str, _Rollout, Record]:
    """A new rollout (its session id drawn from its own stream) and its empty answer key."""
    ids = stream(seed, name)
    session = uuid4(ids)
    return session, _Rollout(ids, start, session), {"incidents": [], "healthy": []}


def _first_rollout(seed: int, incident: bool) -> tuple[str, _Rollout, Record]:
    start = DAY + dt.timedelta(hours=9, minutes=4, seconds=11)
    session, r, key = _open(seed, "cx-ids", start)

    rng = stream(seed, "cx-1-fix")  # healthy: patches that apply, tests that pass
    r.prompt(rng, "Carts are a cent off at checkout with stacked discount codes. Fix it.")
    first = len(r.lines)
    r.shell(rng, "rg -n \"def total\" shop", 0, "shop/checkout.py:12:def total(self, codes=()):\n",
            think="**Locating the total computation**")
    r.shell(rng, "sed -n '1,40p' shop/checkout.py", 0, "def total(self, codes=()):\n    subtotal = "
            "sum(price(i.amount) * i.qty for i in self.items)\n    rounded = subtotal.quantize(CENT)\n"
            "    return apply_discounts(rounded, self.percents(codes))\n")
    r.patch(rng, "shop/checkout.py", "    return apply_discounts(rounded, self.percents(codes))",
            "    return apply_discounts(subtotal, self.percents(codes))",
            think="**Rounding once, after discounts**")
    r.patch(rng, "shop/pricing.py", "        total -= total * Decimal(p) / 100",
            "        total -= (total * Decimal(p) / 100).quantize(CENT)")
    r.shell(rng, "python -m pytest -q tests/test_checkout.py tests/test_discounts.py", 0,
            "......                                                                   [100%]\n"
            "6 passed in 0.12s\n", took=(1.0, 3.0))
    r.answer(rng, "Fixed: totals are rounded once, after each discount is applied to the cent. "
                  "Checkout and discount tests pass.")
    key["healthy"].append({"kind": "patches_that_apply", "actor": "codex", "session": session,
                           "patches": 2, "first_line": first + 1, "last_line": len(r.lines),
                           "loop": False})

    rng = stream(seed, "cx-1-build")  # healthy: a build run until it passes
    r.at(DAY + dt.timedelta(hours=9, minutes=40))
    r.prompt(rng, "The storefront bundle no longer builds; please fix it.")
    first = len(r.lines)
    build = "npm run build --prefix web"
    errs = ["src/cart.ts(12,7): error TS2322: Type 'string' is not assignable to type 'number'.\n",
            "src/cart.ts(31,18): error TS2345: Argument of type 'number' is not assignable to "
            "parameter of type 'Money'.\n"]
    for i, err in enumerate(errs):
        r.shell(rng, build, 1, "\n> web@1.8.0 build\n> tsc && vite build\n\n" + err,
                think="**Building the web bundle**" if i == 0 else None, took=(4.0, 9.0))
        r.patch(rng, "web/src/cart.ts", ["const total: number = row.total", "render(total)"][i],
                ["const total: number = Number(row.total)", "render(money(total))"][i])
    r.shell(rng, build, 0, "\n> web@1.8.0 build\n> tsc && vite build\n\nvite v5.4.2 building for "
            "production...\n✓ 212 modules transformed.\n✓ built in 3.02s\n", took=(6.0, 11.0))
    r.answer(rng, "The bundle builds again: two type errors in web/src/cart.ts are fixed.")
    key["healthy"].append({"kind": "build_until_it_passes", "actor": "codex", "session": session,
                           "action": "shell_command", "runs": 3, "failed": 2,
                           "first_line": first + 1, "last_line": len(r.lines), "loop": False})

    rng = stream(seed, "cx-1-ci")  # healthy: poll CI until the run ends
    r.at(DAY + dt.timedelta(hours=10, minutes=15))
    r.prompt(rng, "Wait for CI on main and tell me the result.")
    first = len(r.lines)
    polls = 4
    for i in range(polls):
        done = i == polls - 1
        r.shell(rng, "sleep 30 && gh run view 9931 --json status,conclusion", 0,
                '{"conclusion":"success","status":"completed"}\n' if done else
                '{"conclusion":"","status":"in_progress"}\n', took=(30.2, 32.5))
    r.answer(rng, "CI run 9931 on main: success.")
    key["healthy"].append({"kind": "poll_that_ends", "actor": "codex", "session": session,
                           "action": "shell_command", "polls": polls, "first_line": first + 1,
                           "last_line": len(r.lines), "loop": False})

    rng = stream(seed, "cx-1-commit")  # the incident: the hook rejects the commit again and again
    r.at(DAY + dt.timedelta(hours=11, minutes=30))
    r.prompt(rng, "Commit the fix and push the branch.")
    commit = 'git add -A && git commit -m "Round cart totals once, after discounts"'
    tries = 12 if incident else 2
    lines, times = [], []
    for i in range(tries):
        passed = not incident and i == tries - 1
        lines.append(r.shell(rng, commit, 0 if passed else 1, (
            "ruff.....................................................................Passed\n"
            "[main 7a3e91c] Round cart totals once, after discounts\n 2 files changed, "
            "9 insertions(+), 4 deletions(-)\n") if passed else HOOK_FAILURE,
            think="**Committing the change**" if i == 0 else None, took=(2.5, 6.0)))
        times.append(r.lines[lines[-1] - 1]["timestamp"])
        if passed:
            break
        if incident:  # patches that do not touch what the hook names
            r.patch(rng, "shop/checkout.py", f"    # rounding: see pricing ({i})",
                    f"    # rounding happens once, in pricing ({i})",
                    think="**Fixing the lint failure**" if i % 4 == 0 else None)
        else:
            r.patch(rng, "shop/checkout.py", "    rounded = subtotal.quantize(CENT)", "",
                    think="**Removing the unused variable**")
    if incident:
        r.answer(rng, "The pre-commit hook keeps rejecting the commit; please take a look.")
        key["incidents"].append({
            "kind": "commit_rejected_by_hook", "actor": "codex", "session": session,
            "action": "shell_command", "error": "Exit code 1", "count": tries,
            "start": times[0], "end": times[-1], "first_line": lines[0], "last_line": lines[-1],
            "detector": "repeated_error", "loop": True})
    else:
        r.shell(rng, "git push origin main", 0, "To github.com:acme/shop.git\n   3c1d2e0..7a3e91c  "
                "main -> main\n", took=(1.0, 2.5))
        r.answer(rng, "Committed and pushed.")
        key["healthy"].append({"kind": "commit_fixed_after_hook", "actor": "codex",
                               "session": session, "action": "shell_command", "failed": 1,
                               "loop": False})
    return _name(session, start), r, key


def _second_rollout(seed: int, incident: bool) -> tuple[str, _Rollout, Record]:
    start = DAY + dt.timedelta(hours=14, minutes=22, seconds=40)
    session, r, key = _open(seed, "cx-ids-2", start)
    rng = stream(seed, "cx-2-read")
    r.prompt(rng, "Which rounding mode does pricing use for discounts? Is it right for invoices?")
    reads = 15 if incident else 1
    before = _tokens(r)
    lines = [r.shell(rng, "sed -n '1,40p' shop/pricing.py", 0, PRICING, took=(0.1, 0.4),
                     think="**Re-reading pricing.py**" if i else "**Reading pricing.py**")
             for i in range(reads)]
    spent = _tokens(r) - before
    r.answer(rng, "Discounts use ROUND_HALF_EVEN (banker's rounding); invoices usually expect "
                  "ROUND_HALF_UP.")
    add_reread(key, {"actor": "codex", "session": session, "action": "shell_command",
                     "tokens": spent}, lines)
    return _name(session, start), r, key


def _tokens(r: _Rollout) -> int:
    """Input (without its cached part) plus output tokens counted so far."""
    return r.usage["input"] + r.usage["output"]


TEST_FAILURE = ("F.                                                                       [100%]\n"
                "FAILED tests/test_discounts.py::test_stacked_discounts - AssertionError: assert "
                "Decimal('17.11') == Decimal('17.10')\n1 failed, 1 passed in 0.14s\n")


def _third_rollout(seed: int, incident: bool) -> tuple[str, _Rollout, Record]:
    start = DAY + dt.timedelta(hours=16, minutes=5, seconds=2)
    session, r, key = _open(seed, "cx-ids-3", start)

    rng = stream(seed, "cx-3-batch")  # healthy: twelve carts checked one by one
    r.prompt(rng, "Check the twelve sample carts in fixtures/ against the new rounding.")
    first = len(r.lines) + 1
    carts = list(range(1001, 1013))
    for i, cart in enumerate(carts):
        total = f"{rng.randint(8, 90)}.{rng.randint(0, 99):02d}"
        r.shell(rng, f"python scripts/check_cart.py --cart {cart}", 0,
                f"cart {cart}: total {total} EUR, expected {total} EUR: OK\n", took=(0.3, 0.9),
                think="**Checking the sample carts**" if i == 0 else None)
    r.answer(rng, "All twelve sample carts match their expected totals.")
    key["healthy"].append({"kind": "batch_of_similar_calls", "actor": "codex", "session": session,
                           "action": "shell_command", "calls": len(carts), "first_line": first,
                           "last_line": len(r.lines), "loop": False})

    rng = stream(seed, "cx-3-cycle")  # the incident: restore, same patch, same failing test
    r.at(DAY + dt.timedelta(hours=16, minutes=40))
    r.prompt(rng, "test_stacked_discounts fails again on main. Fix it without touching the test.")
    r.shell(rng, "cp shop/pricing.py shop/pricing.py.orig", 0, "",
            think="**Backing up pricing.py before editing**")
    rounds = 9 if incident else 1
    patch_old = "    return total.quantize(CENT, rounding=ROUND_HALF_EVEN)"
    before, first = _tokens(r), None
    for i in range(rounds):
        line = r.shell(rng, "cp shop/pricing.py.orig shop/pricing.py", 0, "",
                       think="**Restoring pricing.py from the backup**" if i == 0 else None)
        first = first or line
        r.patch(rng, "shop/pricing.py", patch_old,
                "    return total.quantize(CENT, rounding=ROUND_HALF_UP)")
        last = r.shell(rng, "python -m pytest -q tests/test_discounts.py", 1, TEST_FAILURE,
                       took=(0.8, 2.0))
    spent = _tokens(r) - before
    if incident:
        r.answer(rng, "The test still fails after restoring pricing.py and switching to "
                      "ROUND_HALF_UP; I could not make it pass.")
        key["incidents"].append({
            "kind": "restore_and_reedit", "actor": "codex", "session": session,
            "cycle": ["shell_command", "apply_patch", "shell_command"], "count": 3 * rounds,
            "rounds": rounds, "tokens": spent, "first_line": first, "last_line": last,
            "detector": "alternating_action", "loop": True})
    else:
        r.patch(rng, "shop/pricing.py", "        total -= total * Decimal(p) / 100",
                "        total -= (total * Decimal(p) / 100).quantize(CENT)",
                think="**Rounding each discount as it is applied**")
        r.shell(rng, "python -m pytest -q tests/test_discounts.py", 0,
                "..                                                                       [100%]\n"
                "2 passed in 0.11s\n", took=(0.8, 2.0))
        r.answer(rng, "Fixed: each discount is rounded to the cent as it is applied.")
        key["healthy"].append({"kind": "fixed_at_second_try", "actor": "codex",
                               "session": session, "loop": False})
    return _name(session, start), r, key


def write_codex_sessions(outdir: Path, seed: int = 7, *, incident: bool = True) -> Record:
    """Write a Codex sessions folder (three rollouts) and return its answer key: per file its
    lines and its usage counted once per model response; the incidents (`count` attempts of
    the same failing call, or `repeats` of the same successful one) and the healthy work."""
    out = Path(outdir)
    key: Record = {"format": "codex", "lines": {}, "usage": {}, "incidents": [], "healthy": []}
    for name, rollout, part in (_first_rollout(seed, incident), _second_rollout(seed, incident),
                                _third_rollout(seed, incident)):
        write_lines(out / name, map(_dump, rollout.lines))
        key["lines"][name] = len(rollout.lines)
        key["usage"][name] = rollout.usage
        for entry in part["incidents"] + part["healthy"]:
            entry["file"] = name
        key["incidents"] += part["incidents"]
        key["healthy"] += part["healthy"]
    return key

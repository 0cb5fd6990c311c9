"""Synthetic LabTrust-Gym runs: `episodes.jsonl` with `results.json` beside it (seed 003).

The incident is a frozen planner: step after step the LLM coordinator re-emits the same invalid
proposal, every one of the `1 + max_repairs` attempts fails validation with the same
`proposal_hash`, `tokens_in` keeps growing, and a runner repeats the same BLOCKED `START_RUN`
(`RC_REAGENT_STOCKOUT`). Some steps fall back to a local Ollama model whose cost is unknown
(`estimated_cost_usd: null`). The clean twin is the same episode where repairs succeed by
attempt 2 and the stock-out clears.

Lines are `json.dumps(entry, sort_keys=True)`, as `EpisodeLogger.write_log_line` writes them.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from ._common import sha256_hex, stream, write_lines

AGENTS = ("A_RECEPTION_0", "A_OPS_0", "A_RUNNER_0", "A_RUNNER_1", "A_QC_0")
ROLES = {"A_RECEPTION_0": "ROLE_RECEPTION", "A_OPS_0": "ROLE_OPS", "A_RUNNER_0": "ROLE_RUNNER",
         "A_RUNNER_1": "ROLE_RUNNER", "A_QC_0": "ROLE_QC"}
ACTIONS = {"A_RECEPTION_0": ("CREATE_ACCESSION", "NOOP", "TICK"),
           "A_OPS_0": ("QUEUE_RUN", "OPEN_DOOR", "NOOP"),
           "A_RUNNER_0": ("MOVE", "START_RUN", "NOOP"), "A_RUNNER_1": ("MOVE", "START_RUN", "NOOP"),
           "A_QC_0": ("RELEASE_RESULT", "NOOP", "TICK")}
EMITS = {"CREATE_ACCESSION": ["ACCESSION_CREATED"], "QUEUE_RUN": ["RUN_QUEUED"],
         "START_RUN": ["RUN_STARTED"], "RELEASE_RESULT": ["RESULT_RELEASED"],
         "OPEN_DOOR": ["DOOR_OPENED"], "MOVE": ["AGENT_MOVED"]}
ZONES = ("Z_SORTING_LANES", "Z_ACCESSIONING", "Z_ANALYZER_HALL_A", "Z_QC_BENCH")
STEPS, DT_S, MAX_REPAIRS = 80, 10, 2
LOOP_STEPS = range(18, 50)  # the frozen planner
STOCKOUT_STEPS = range(20, 34)  # A_RUNNER_0 START_RUN blocked 14 times in a row
STRAY_BLOCK_STEPS = (9, 44, 66)  # isolated blocks of A_RUNNER_1: ordinary, not a loop
OLLAMA_STEPS = (5, 11, 57, 63, 71)  # Anthropic errored; a local model answered, cost unknown
HAIKU = ("anthropic_live_coord", "claude-3-5-haiku-20241022", 0.80e-6, 4.00e-6)
OLLAMA = ("ollama_live_gossip", "llama3.1:8b", None, None)
FP = {k: sha256_hex("labtrust-policy", k) for k in ("rbac", "tools", "policy")}
Record = dict[str, Any]


def _dumps(obj: Record) -> str:
    return json.dumps(obj, sort_keys=True)


def _args(rng: random.Random | None, agent: str, action: str, step: int) -> Record | None:
    if action == "MOVE" and rng is not None:
        a, b = rng.sample(ZONES, 2)
        return {"entity_id": agent, "entity_type": "Agent", "from_zone": a, "to_zone": b}
    if action in ("START_RUN", "QUEUE_RUN"):
        return {"device_id": "DEV_CHEM_01", "priority_class": "ROUTINE", "work_id": f"w_{step}"}
    if action == "CREATE_ACCESSION":
        return {"specimen_id": f"S{1000 + step}"}
    return None


class _Chain:
    """The engine's hash chain: one event per step line, `length` counts them globally."""

    def __init__(self, seed: int) -> None:
        self.head, self.length, self.seed = sha256_hex("genesis", seed), 0, seed

    def extend(self, *event: object) -> Record:
        last = sha256_hex(self.seed, *event)
        self.head, self.length = sha256_hex(self.head, last), self.length + 1
        return {"head_hash": self.head, "last_event_hash": last, "length": self.length}


def _step_line(chain: _Chain, agent: str, step: int, action: str, blocked: str | None,
               args: Record | None) -> Record:
    hashchain = chain.extend(agent, step, action, blocked)
    line: Record = {
        "action_type": action, "agent_id": agent, "blocked_reason_code": blocked,
        "emits": [] if blocked else EMITS.get(action, []), "hashchain": hashchain,
        "hashchain_head": hashchain["head_hash"], "rbac_decision": {
            "allowed": True, "reason_code": None, "role_id": ROLES[agent]},
        "rbac_policy_fingerprint": FP["rbac"], "status": "BLOCKED" if blocked else "ACCEPTED",
        "t_s": (step + 1) * DT_S, "token_consumed": [],
        "tool_registry_fingerprint": FP["tools"], "violations": []}
    if args is not None:
        line["args"] = args
    return line


def _attempt(step: int, index: int, phash: str, failed: list[str] | None,
             blocked_count: int | None) -> Record:
    line: Record = {"attempt_index": index, "log_type": "LLM_COORD_PROPOSAL_ATTEMPT",
                    "proposal_hash": phash, "proposal_id": f"p-{step}",
                    "repair_request_hash": "" if index == 1 else sha256_hex("repair", step, index),
                    "shield_outcome_hash": "" if failed else sha256_hex("shield", step, index),
                    "step_id": step, "validation_failed": bool(failed)}
    if failed:
        line["failed_validation_fields"] = failed
    else:
        line["blocked_count"] = blocked_count
    return line


def _meta(backend: tuple, latency: float, tokens_in: int, tokens_out: int, step: int) -> Record:
    backend_id, model, p_in, p_out = backend
    cost = None if p_in is None else round(tokens_in * p_in + tokens_out * p_out, 6)
    return {"backend_id": backend_id, "estimated_cost_usd": cost, "latency_ms": latency,
            "model_id": model, "prompt_fingerprint": sha256_hex("prompt", step),
            "tokens_in": tokens_in, "tokens_out": tokens_out}


def write_labtrust_run(outdir: Path, seed: int = 7, *, incident: bool = True) -> Record:
    """Write `episodes.jsonl` and `results.json` for one 80-step `qc_cascade` episode run by
    `llm_repair_over_kernel_whca` with max_repairs=2. Returns the answer key."""
    plan, chain = stream(seed, "labtrust-plan"), _Chain(seed)
    lines: list[Record] = []
    digest: list[Record] = []
    calls: list[Record] = []
    frozen = sha256_hex("frozen-proposal", seed)
    blocked_total, repairs = 0, 0
    for step in range(STEPS):
        # every draw happens whatever the scenario, so the twin shares the background
        actions = {a: plan.choice(ACTIONS[a]) for a in AGENTS}
        args = {a: _args(plan, a, actions[a], step) for a in AGENTS}
        latency = [round(plan.uniform(700, 2600), 1) for _ in range(1 + MAX_REPAIRS)]
        tok_in, tok_out = 4200 + 35 * step + plan.randint(0, 400), plan.randint(280, 520)
        routine_repair = plan.random() < 0.12
        phash = sha256_hex("proposal", seed, step, 1)

        if incident and step in LOOP_STEPS:
            attempts = [_attempt(step, i, frozen, ["per_agent[2].action_type"], None)
                        for i in range(1, 2 + MAX_REPAIRS)]
            tok_in += 900 * (step - LOOP_STEPS.start + 1)  # the repair transcript piles up
            phash = frozen
        elif routine_repair:
            phash2 = sha256_hex("proposal", seed, step, 2)
            attempts = [_attempt(step, 1, phash, None, 1), _attempt(step, 2, phash2, None, 0)]
            phash = phash2
        else:
            attempts = [_attempt(step, 1, phash, None, 0)]
        repairs += len(attempts) - 1
        n_calls = len(attempts)
        backend = OLLAMA if step in OLLAMA_STEPS else HAIKU
        meta = _meta(backend, round(sum(latency[:n_calls]), 1), tok_in * n_calls,
                     tok_out * n_calls, step)
        shield = sha256_hex("shield", step, n_calls)
        lines.extend(attempts)
        lines.append({"canonical_proposal_hash": phash, "log_type": "LLM_COORD_PROPOSAL",
                      "meta": meta, "proposal_id": f"p-{step}", "shield_outcome_hash": shield,
                      "step_id": step})
        calls.append(meta | {"step_id": step, "attempts": n_calls})
        digest.append({"proposal_hash": phash, "shield_outcome_hash": shield, "step_id": step})

        for agent in AGENTS:
            action, blocked = actions[agent], None
            if agent == "A_RUNNER_0" and incident and step in STOCKOUT_STEPS:
                action, blocked = "START_RUN", "RC_REAGENT_STOCKOUT"
                args[agent] = _args(None, agent, action, step)
            elif agent == "A_RUNNER_1" and step in STRAY_BLOCK_STEPS:
                action, blocked = "START_RUN", "RC_DEVICE_NOT_COLOCATED"
                args[agent] = _args(None, agent, action, step)
            blocked_total += blocked is not None
            lines.append(_step_line(chain, agent, step, action, blocked, args[agent]))
    lines.append({"audit_digest_version": "0.1", "episode_id": 0,
                  "log_type": "LLM_COORD_AUDIT_DIGEST", "steps": digest})

    n = write_lines(outdir / "episodes.jsonl", map(_dumps, lines))
    results = _results(seed, calls, blocked_total, repairs)
    (outdir / "results.json").write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    return _truth(lines, calls, n, incident, frozen)


def _results(seed: int, calls: list[Record], blocked: int, repairs: int) -> Record:
    """results.json as LabTrust writes it: config, per-episode metrics, LLM metadata."""
    lat = sorted(c["latency_ms"] for c in calls)
    priced = [c["estimated_cost_usd"] for c in calls if c["estimated_cost_usd"] is not None]
    comm = {"drop_rate": 0.0, "dropped_count": 0, "invalid_msg_rate": 0.0,
            "invalid_sig_count": 0, "msg_count": STEPS * len(AGENTS), "p95_latency_ms": 41.0,
            "replay_drop_count": 0, "spoof_attempt_count": 0}
    metrics = {"coordination": {
        "alloc": {"conflict_rate": 0.0, "overridden_count": 0, "total_proposals": len(calls)},
        "comm": comm,
        "timing": {"mean_view_age_ms": 0.0, "p95_view_age_ms": 0.0, "stale_action_rate": 0.0}},
        "safety": {"blocks_total": blocked, "violations_total": 0},
        "sec": {"attack_success_rate": 0.0, "attack_success_observed": False,
                "blast_radius_proxy": 0.0, "containment_time_steps": None,
                "detection_latency_steps": None, "injection_id": "none",
                "stealth_success_rate": 0.0, "time_to_attribution_steps": None},
        "steps": STEPS, "repair_attempts": repairs}
    return {
        "agent_baseline_id": "scripted_ops_v1", "config": {
            "blocked_threshold": 0, "coord_method": "llm_repair_over_kernel_whca",
            "injection_id": "none", "max_repairs": MAX_REPAIRS, "max_steps": STEPS},
        "coordination": {"method_id": "llm_repair_over_kernel_whca", "scale_id": "small_smoke"},
        "episodes": [{"metrics": metrics, "seed": seed}],
        "git_sha": sha256_hex("git", seed)[:40], "metadata": {
            "estimated_cost_usd": round(sum(priced), 6), "llm_backend_id": HAIKU[0],
            "llm_error_rate": round(len(OLLAMA_STEPS) / STEPS, 4), "llm_model_id": HAIKU[1],
            "mean_llm_latency_ms": round(sum(lat) / len(lat), 1),
            "p50_llm_latency_ms": lat[len(lat) // 2],
            "p95_llm_latency_ms": lat[int(len(lat) * 0.95)],
            "tokens_per_step": round(sum(c["tokens_in"] + c["tokens_out"] for c in calls) / STEPS,
                                     1)},
        "pipeline_mode": "llm_live", "policy_fingerprint": FP["policy"], "schema_version": "0.2",
        "security": {"injection_id": "none"}, "task": "qc_cascade"}


def _truth(lines: list[Record], calls: list[Record], n: int, incident: bool,
           frozen: str) -> Record:
    priced = [c for c in calls if c["estimated_cost_usd"] is not None]
    cost = {"estimated_cost_usd": round(sum(c["estimated_cost_usd"] for c in priced), 6),
            "priced_calls": sum(c["attempts"] for c in priced),
            "unpriced_calls": sum(c["attempts"] for c in calls
                                  if c["estimated_cost_usd"] is None),
            "unpriced_models": [OLLAMA[1]], "models": [HAIKU[1], OLLAMA[1]],
            "tokens_in": sum(c["tokens_in"] for c in calls),
            "tokens_out": sum(c["tokens_out"] for c in calls)}
    truth: Record = {"format": "labtrust", "file": "episodes.jsonl", "companion": "results.json",
                     "files": ["episodes.jsonl", "results.json"], "lines": {"episodes.jsonl": n},
                     "max_repairs": MAX_REPAIRS, "steps": STEPS, "cost": cost, "incidents": [],
                     "healthy": [{"kind": "repairs_succeed", "max_attempts": 2, "loop": False},
                                 {"kind": "isolated_blocks", "agent_id": "A_RUNNER_1",
                                  "blocked_reason_code": "RC_DEVICE_NOT_COLOCATED",
                                  "count": len(STRAY_BLOCK_STEPS), "loop": False}]}
    if not incident:
        return truth
    loop_calls = [c for c in calls if c["step_id"] in LOOP_STEPS]
    loop_priced = [c["estimated_cost_usd"] for c in loop_calls
                   if c["estimated_cost_usd"] is not None]
    attempts = [i for i, r in enumerate(lines, 1) if r.get("proposal_hash") == frozen]
    blocked = [r for r in lines if r.get("blocked_reason_code") == "RC_REAGENT_STOCKOUT"]
    truth["incidents"] = [
        {"kind": "repair_loop", "first_step": LOOP_STEPS.start, "last_step": LOOP_STEPS[-1],
         "steps": len(LOOP_STEPS), "attempts_per_step": 1 + MAX_REPAIRS,
         "attempt_lines": len(attempts), "first_line": attempts[0], "last_line": attempts[-1],
         "proposal_hash": frozen, "validation_failed": True, "model": HAIKU[1],
         "cost_usd": round(sum(loop_priced), 6),
         "tokens_in": sum(c["tokens_in"] for c in loop_calls), "loop": True},
        {"kind": "blocked_repeat", "agent_id": "A_RUNNER_0", "action_type": "START_RUN",
         "blocked_reason_code": "RC_REAGENT_STOCKOUT", "count": len(blocked),
         "first_t_s": blocked[0]["t_s"], "last_t_s": blocked[-1]["t_s"], "loop": True}]
    return truth

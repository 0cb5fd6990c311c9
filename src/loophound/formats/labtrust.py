"""LabTrust-Gym `episodes.jsonl`: per-step, per-agent engine lines (no `log_type`) and the LLM
coordination lines `runner.py` writes into the same file; plus the `results.json` beside it.

Line kinds:
- step line ⇒ kind `step`: ts = SIM_EPOCH + `t_s` s, actor = `agent_id`, action =
  `action_type`, ok = `status == 'ACCEPTED'`, error = `blocked_reason_code`, role =
  `rbac_decision.role_id`.
- `LLM_COORD_PROPOSAL` ⇒ `llm_call`: actor = `meta.backend_id`, model = `meta.model_id`, tokens,
  `latency_ms`, cost_usd = `meta.estimated_cost_usd` (null stays NULL: unpriced, never 0),
  error = `meta.error_code` (ok = no error code), corr_id = `proposal_id`, action `propose`.
- `LLM_COORD_PROPOSAL_ATTEMPT` ⇒ `repair_attempt`: depth = `attempt_index`, ok = NOT
  `validation_failed` (error `VALIDATION_FAILED` when it failed), corr_id = `proposal_id`,
  parent_id = `repair_request_hash` (NULL on attempt 1, where it is ""), action `propose` for
  attempt 1 and `repair` after; actor = the backend of the proposal with the same id in the same
  episode. `proposal_hash` stays in `extra` (`json_extract(extra, '$.proposal_hash')`).
- args: a step's `args` (JSON text; none when null); a proposal's `canonical_proposal_hash`
  and an attempt's `proposal_hash` as `{"proposal_hash": ...}`, the proposal being what the
  coordinator asks for (its `action_key` masks the hash like any hex id: compare `args`
  itself to tell two proposals apart).
- `LLM_COORD_AUDIT_DIGEST` ⇒ `audit`, action `audit_digest`.

Episodes (session `episode-<n>`, channel `episode`), computed over the whole file in `finish`
because a file may arrive in several batches: a new episode starts at a step line whose `t_s`
is lower than the previous step line's, or at the first step line after an audit digest.

LLM lines have no `t_s`. runner.py writes, per step k: the repair attempts (before the engine
steps), the step lines, then the proposal. So an attempt takes the time and episode of the next
step line, a proposal or digest those of the previous step line (the other direction when there
is none): each gets the time of its own step, `SIM_EPOCH + t_s` of step `step_id`.

`results.json` (companion): one `episode_metrics` row per `episodes[i]`, session
`episode-<i+1>`, extra = the episode's metrics object (plus its `seed`). Run-level costs in
there are not copied to `cost_usd`: the `llm_call` rows already carry them.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

from ..schema import SIM_EPOCH
from .base import Format, FormatContext, FormatProfile, extra_json, json_fields, sql_str, struct_spec

FIELDS = {
    "t_s": "DOUBLE", "agent_id": "VARCHAR", "action_type": "VARCHAR", "status": "VARCHAR",
    "blocked_reason_code": "VARCHAR", "log_type": "VARCHAR", "proposal_id": "VARCHAR",
    "attempt_index": "BIGINT", "validation_failed": "BOOLEAN", "repair_request_hash": "VARCHAR",
}
KNOWN = {
    # step lines
    "emits", "violations", "token_consumed", "hashchain_head", "args", "hashchain",
    "enforcements", "partner_id", "policy_fingerprint", "tool_registry_fingerprint",
    "rbac_policy_fingerprint", "signature_verification", "rbac_decision", "control_decision",
    "consignment_id", "prompt_hash", "policy_summary_hash", "allowed_actions_hash",
    "decoder_version", "llm_decision", "security_event", "capability_decision", "event_id",
    # LLM lines (meta is read for columns and also kept whole: prompt_fingerprint, ...)
    "step_id", "canonical_proposal_hash", "meta", "shield_outcomes", "shield_outcome_hash",
    "assurance_evidence", "proposal_hash", "failed_validation_fields", "blocked_count",
    "audit_digest_version", "episode_id", "steps",
}
LOG_TYPES = {
    "LLM_COORD_PROPOSAL": "llm_call",
    "LLM_COORD_PROPOSAL_ATTEMPT": "repair_attempt",
    "LLM_COORD_AUDIT_DIGEST": "audit",
}
STEP_KEYS = {"t_s", "agent_id", "action_type", "status"}


def _is_record(r: dict) -> bool:
    log_type = r.get("log_type")
    if isinstance(log_type, str):
        return log_type.startswith("LLM_COORD_")
    return STEP_KEYS <= r.keys()


def sniff(records: list[dict], path: Path) -> bool:
    hits = sum(1 for r in records if _is_record(r))
    return hits > 0 and hits * 2 > len(records)


def sim_ts(seconds_expr: str) -> str:
    """SQL: simulated seconds → TIMESTAMP on SIM_EPOCH."""
    # a step count beyond ~3,000 years of simulated seconds is not a time: no time, not an error
    return (f"CASE WHEN abs({seconds_expr}) < 1e11 THEN CAST(TIMESTAMP {sql_str(SIM_EPOCH)} + "
            f"to_microseconds(CAST(round({seconds_expr} * 1000000) AS BIGINT)) AS TIMESTAMP_MS) END")


def select_sql(ctx: FormatContext) -> str:
    kinds = " ".join(f"WHEN {sql_str(k)} THEN {sql_str(v)}" for k, v in LOG_TYPES.items())
    meta = "r.meta->>'$.{}'".format
    is_prop = "r.log_type = 'LLM_COORD_PROPOSAL'"
    is_att = "r.log_type = 'LLM_COORD_PROPOSAL_ATTEMPT'"
    return f"""
    SELECT line, byte_offset, byte_length, text,
      CASE WHEN r.log_type IS NULL THEN {sim_ts("r.t_s")} END AS ts,
      CASE WHEN r.log_type IS NULL THEN 'step' ELSE CASE r.log_type {kinds} ELSE 'record' END
           END AS kind,
      coalesce(r.log_type, 'step') AS event_type,
      CASE WHEN r.log_type IS NULL THEN r.agent_id WHEN {is_prop} THEN {meta("backend_id")}
           END AS actor,
      'episode' AS channel,
      CASE WHEN r.log_type IS NULL THEN r.action_type
           WHEN {is_prop} THEN 'propose'
           WHEN {is_att} THEN CASE WHEN r.attempt_index > 1 THEN 'repair' ELSE 'propose' END
           WHEN r.log_type = 'LLM_COORD_AUDIT_DIGEST' THEN 'audit_digest' END AS action,
      CASE WHEN r.log_type IS NULL THEN r.status = 'ACCEPTED'
           WHEN {is_prop} THEN {meta("error_code")} IS NULL
           WHEN {is_att} THEN NOT r.validation_failed END AS ok,
      CASE WHEN r.log_type IS NULL THEN r.blocked_reason_code
           WHEN {is_prop} THEN {meta("error_code")}
           WHEN {is_att} AND r.validation_failed THEN 'VALIDATION_FAILED' END AS error,
      CASE WHEN {is_att} THEN TRY_CAST(r.attempt_index AS INTEGER) END AS depth,
      CASE WHEN r.log_type IS NULL THEN r.rbac_decision->>'$.role_id' END AS role,
      r.proposal_id AS corr_id,
      CASE WHEN {is_att} THEN nullif(r.repair_request_hash, '') END AS parent_id,
      CASE WHEN r.log_type IS NULL AND json_type(r.args) NOT IN ('NULL')
             THEN CAST(r.args AS VARCHAR)
           WHEN {is_prop} AND r.canonical_proposal_hash IS NOT NULL
             THEN json_object('proposal_hash', r.canonical_proposal_hash->>'$')
           WHEN {is_att} AND r.proposal_hash IS NOT NULL
             THEN json_object('proposal_hash', r.proposal_hash->>'$') END AS args,
      TRY_CAST(TRY_CAST({meta("tokens_in")} AS DOUBLE) AS BIGINT) AS tokens_in,
      TRY_CAST(TRY_CAST({meta("tokens_out")} AS DOUBLE) AS BIGINT) AS tokens_out,
      TRY_CAST({meta("estimated_cost_usd")} AS DOUBLE) AS cost_usd,
      TRY_CAST({meta("latency_ms")} AS DOUBLE) AS latency_ms,
      {meta("model_id")} AS model,
      {extra_json(KNOWN)} AS extra
    FROM (SELECT *, from_json(text, {struct_spec(FIELDS | json_fields(KNOWN))}) AS r FROM raw)
    """


def finish(con: duckdb.DuckDBPyConnection, ctx: FormatContext) -> None:
    """Number the episodes over the whole file (earlier batches included) and give LLM lines
    the time and episode of their step, and attempts the backend of their proposal. A batch
    may hold several files (small ones are read together): each is numbered on its own
    (`input`, the event id's high half)."""
    if not con.execute("SELECT count(*) FROM batch").fetchall()[0][0]:
        return
    earlier = """UNION ALL
        SELECT event_id >> 32, line, kind, ts, corr_id, actor, false AS fresh FROM stored_events
        WHERE line < (SELECT min(line) FROM batch)"""
    if not con.execute("SELECT count(*) FROM stored_events").fetchall()[0][0]:
        earlier = ""
    con.execute(f"""
      CREATE OR REPLACE TEMP TABLE _lt AS
        SELECT event_id >> 32 AS input, line, kind, ts, corr_id, actor, true AS fresh FROM batch
        {earlier};
      CREATE OR REPLACE TEMP TABLE _ep AS
        WITH s AS (
          SELECT *, coalesce(sum(CASE WHEN kind = 'audit' THEN 1 ELSE 0 END) OVER (
                   PARTITION BY input ORDER BY line
                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS digests_before,
                 max(CASE WHEN kind = 'step' THEN line END) OVER (
                   PARTITION BY input ORDER BY line ROWS UNBOUNDED PRECEDING) AS prev_step,
                 min(CASE WHEN kind = 'step' THEN line END) OVER (
                   PARTITION BY input ORDER BY line
                   ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS next_step
          FROM _lt),
        steps AS (
          SELECT input, line, ts, digests_before,
                 lag(ts) OVER (PARTITION BY input ORDER BY line) AS prev_ts,
                 lag(digests_before) OVER (PARTITION BY input ORDER BY line) AS prev_digests
          FROM s WHERE kind = 'step'),
        numbered AS (
          SELECT input, line, ts, 1 + sum(CASE WHEN prev_ts IS NOT NULL
                                               AND (ts < prev_ts OR digests_before > prev_digests)
                                              THEN 1 ELSE 0 END)
                                 OVER (PARTITION BY input ORDER BY line ROWS UNBOUNDED PRECEDING)
                                 AS ep
          FROM steps)
        SELECT s.input, s.line, s.fresh, s.kind, s.corr_id, s.actor,
               coalesce(n.ep, 1 + s.digests_before) AS ep, n.ts AS anchor_ts
        FROM s LEFT JOIN numbered n ON n.input = s.input AND n.line = CASE
          WHEN s.kind = 'repair_attempt' THEN coalesce(s.next_step, s.prev_step)
          ELSE coalesce(s.prev_step, s.next_step) END;
      CREATE OR REPLACE TEMP TABLE _backend AS
        SELECT input, ep, corr_id, min(actor) AS actor FROM _ep
        WHERE kind = 'llm_call' AND corr_id IS NOT NULL AND actor IS NOT NULL
        GROUP BY input, ep, corr_id;
      UPDATE batch SET session = 'episode-' || CAST(e.ep AS VARCHAR),
                       ts = coalesce(batch.ts, e.anchor_ts)
      FROM _ep e WHERE e.fresh AND e.input = batch.event_id >> 32 AND e.line = batch.line;
      UPDATE batch SET actor = k.actor
      FROM _ep e, _backend k
      WHERE batch.kind = 'repair_attempt' AND batch.actor IS NULL AND e.fresh
        AND e.input = batch.event_id >> 32 AND e.line = batch.line
        AND k.input = e.input AND k.ep = e.ep AND k.corr_id = batch.corr_id;
      DROP TABLE _lt; DROP TABLE _ep; DROP TABLE _backend;
    """)


def companions(path: Path) -> list[Path]:
    """The run's `results.json` beside the episode log."""
    results = path.parent / "results.json"
    return [results] if results.is_file() else []


def read_companion(path: Path, ctx: FormatContext) -> list[dict]:
    """One `episode_metrics` row per episode of a LabTrust `results.json`.

    `line` is the 1-based episode index (it orders the rows; `file` and `event_id` are for the
    caller to set from the companion's own input). Anything that is not a LabTrust results
    file gives no rows.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return []
    if not isinstance(data, dict) or not isinstance(data.get("episodes"), list):
        return []
    config = data.get("config") if isinstance(data.get("config"), dict) else {}
    coordination = data.get("coordination") if isinstance(data.get("coordination"), dict) else {}
    metadata = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    method = coordination.get("method_id") or config.get("coord_method")
    rows = []
    for i, episode in enumerate(data["episodes"], 1):
        if not isinstance(episode, dict):
            continue
        metrics = episode.get("metrics")
        extra = dict(metrics) if isinstance(metrics, dict) else {}
        if "seed" in episode and "seed" not in extra:
            extra = {"seed": episode["seed"], **extra}
        rows.append({
            "ts": None, "line": i, "byte_offset": None, "byte_length": None,
            "kind": "episode_metrics", "event_type": "results.json",
            "actor": str(method) if method is not None else None,
            "session": f"episode-{i}", "channel": "episode",
            "model": metadata.get("llm_model_id"),
            "extra": json.dumps(extra, separators=(",", ":"), ensure_ascii=False) if extra else None,
        })
    return rows


# What detectors may know of LabTrust-Gym: every repair attempt names its proposal by hash.
PROFILE = FormatProfile(proposal_hash_key="proposal_hash")


FORMAT = Format(
    name="labtrust",
    description="LabTrust-Gym episodes.jsonl: engine steps and LLM coordination lines, episodes",
    sniff=sniff,
    select_sql=select_sql,
    mapped_keys=frozenset(FIELDS),
    known_keys=frozenset(KNOWN),
    finish=finish,
    companions=companions,
    read_companion=read_companion,
    priority=30,
    profile=PROFILE,
    groupable=True,
)

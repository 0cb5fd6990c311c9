"""repair_loop: an LLM coordinator's repair loop exhausted step after step (LabTrust-Gym).

LabTrust's runner asks the coordinator for a proposal, validates and shields it, and on failure
sends a repair request, up to `1 + max_repairs` attempts per step (`LLM_COORD_PROPOSAL_ATTEMPT`
lines, kind `repair_attempt`, depth = `attempt_index`). One exhausted step is bad luck; the
seed-003 failure is a *frozen planner*: on consecutive steps every attempt fails, the model
re-sends the very same proposal (same `proposal_hash` on every attempt, often on every step;
the key is the one LabTrust's format profile names),
and the prompt grows with each repair transcript (`tokens_in` of the step's `LLM_COORD_PROPOSAL`
line keeps rising), so each wasted step costs more than the last.

A step is *exhausted* when its attempts reach the cap and its last attempt still failed
(`validation_failed`, or a positive `blocked_count`). The cap is `1 + max_repairs`; the log does
not state `max_repairs` (results.json does, as `config.max_repairs`, and is used when the companion row
carries it), so it is inferred per episode as the highest `attempt_index` seen there
(`max_repairs` = that − 1), or `default_max_repairs` when no step was ever repaired. A finding is
a run of at least `min_steps` consecutive exhausted steps (step ids at most `max_step_gap`
apart) in one episode. Steps whose repairs succeed (the healthy case: attempt 2 passes) break a
run and are never findings. The repeated BLOCKED step lines of an agent are repeated_error's.

An episode is one log file's: LabTrust numbers its episodes from 1 in every run's
`episodes.jsonl` (the format's session `episode-<n>`), so two runs' `episode-1` are different
episodes, and the run's `results.json` is the one in the same folder. Merging them mixed two
runs' attempts into one step and made the step's proposal hash depend on the order of rows.

Severity: medium for an exhausted run; high when the model re-sent an identical proposal on
the attempts of most steps, or validation failed on every attempt; critical when that also
lasted `critical_steps` steps or the prompt kept growing (tokens_in up by `growth_ratio`).

measure() reads the steps and cuts them into runs (`attempt_cap` and `exhausted_runs` are pure
over the step rows) and sums each run up as a RepairRun; judge() applies the rules above;
describe() writes.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

import duckdb

from ..vocabulary import Severity
from .base import Detector, EvidenceLine, Finding, param, staged
from .profiles import extra_key_sql


@dataclass
class Params:
    min_steps: int = param(3, "consecutive exhausted steps that make a loop")
    max_step_gap: int = param(1, "step ids at most this far apart are consecutive")
    default_max_repairs: int = param(2, "max_repairs when the log never shows a repair "
                                        "(the cap is then 1 + this)")
    max_repairs: int = param(-1, "the runner's max_repairs when known (results.json "
                                 "`config.max_repairs`); -1 infers it from the log")
    identical_share: float = param(0.8, "share of the run's steps that re-sent one identical "
                                        "proposal on all their attempts for high")
    critical_steps: int = param(20, "an identical, failing loop this many steps long is critical")
    growth_ratio: float = param(1.5, "tokens_in of the last steps over the first steps that "
                                     "counts as a growing prompt")


STEPS_SQL = """
WITH att AS (
  SELECT event_id, ts, file, regexp_replace(file, '[^/]*$', '') AS dir, line, session, corr_id,
         actor, depth AS attempt, ok,
         """ + extra_key_sql("proposal_hash_key") + """ AS phash,
         TRY_CAST(json_extract_string(extra, '$.step_id') AS BIGINT) AS step_id,
         TRY_CAST(json_extract_string(extra, '$.blocked_count') AS BIGINT) AS blocked,
         json_extract(extra, '$.failed_validation_fields') AS fields
  FROM events WHERE kind = 'repair_attempt'
),
cap AS (
  SELECT a.file, a.session, max(a.attempt) AS max_attempt,
         max(m.max_repairs) AS stated_max_repairs
  FROM att a LEFT JOIN (
    -- results.json beside the log, when its reader keeps the run's config
    SELECT regexp_replace(file, '[^/]*$', '') AS dir, session,
           max(TRY_CAST(coalesce(json_extract_string(extra, '$.config.max_repairs'),
                                 json_extract_string(extra, '$.max_repairs')) AS INTEGER))
             AS max_repairs
    FROM events WHERE kind = 'episode_metrics' GROUP BY ALL) m
    ON m.dir = a.dir AND m.session IS NOT DISTINCT FROM a.session
  GROUP BY a.file, a.session
),
steps AS (
  SELECT file, session, corr_id, min(step_id) AS step_id, count(*) AS attempts,
         max(attempt) AS last_attempt,
         arg_max(coalesce(ok, false) AND coalesce(blocked, 0) = 0, attempt) AS last_ok,
         bool_and(ok IS FALSE) AS all_failed_validation,
         count(DISTINCT phash) AS hashes, arg_min(phash, line) AS phash,
         min(ts) AS start, max(ts) AS stop,
         file AS first_file, min(line) AS first_line, max(line) AS last_line,
         list(DISTINCT actor) FILTER (WHERE actor IS NOT NULL) AS actors,
         arg_min(CAST(fields AS VARCHAR), line) AS fields
  FROM att GROUP BY file, session, corr_id
)
SELECT s.*, c.max_attempt, c.stated_max_repairs,
       l.tokens_in, l.tokens_out, l.cost_usd, l.model, l.actor AS llm_actor
FROM steps s JOIN cap c ON c.file = s.file AND c.session IS NOT DISTINCT FROM s.session
LEFT JOIN (SELECT file, session, corr_id, sum(tokens_in) AS tokens_in,
                  sum(tokens_out) AS tokens_out, sum(cost_usd) AS cost_usd,
                  count(*) FILTER (WHERE cost_usd IS NULL) AS unpriced,
                  arg_min(model, line) AS model, arg_min(actor, line) AS actor
           FROM events WHERE kind = 'llm_call' GROUP BY file, session, corr_id) l
  ON l.file = s.file AND l.session IS NOT DISTINCT FROM s.session AND l.corr_id = s.corr_id
ORDER BY s.session, s.file, s.step_id NULLS LAST, s.corr_id
"""

CLAIM = """
SELECT event_id FROM events
WHERE kind IN ('repair_attempt', 'llm_call') AND session IS NOT DISTINCT FROM $session
  AND file = $file AND list_contains($proposals, corr_id)
"""


# ---------------------------------------------------------------------------------------------
# measure


def attempt_cap(step: dict[str, Any], p: Params) -> tuple[int, str]:
    """How many attempts the runner allowed the step (1 + max_repairs), and where that is
    known from: the setting, results.json, the episode's highest attempt_index, the default."""
    if p.max_repairs >= 0:
        return 1 + p.max_repairs, "setting"
    if step["stated_max_repairs"] is not None:
        return 1 + step["stated_max_repairs"], "results.json"
    if step["max_attempt"] and step["max_attempt"] > 1:
        return step["max_attempt"], "highest attempt_index in the episode"
    return 1 + p.default_max_repairs, "default_max_repairs"


def exhausted_runs(steps: list[dict[str, Any]], p: Params) -> list[list[dict[str, Any]]]:
    """Runs of at least `min_steps` consecutive exhausted steps of one episode (step ids at
    most `max_step_gap` apart), over steps in episode and step order. A step is exhausted when
    its attempts reach the cap and the last still failed; each step is given its `cap` and
    `cap_from`."""
    runs: list[list[dict[str, Any]]] = []
    run_: list[dict[str, Any]] = []

    def flush() -> None:
        if len(run_) >= p.min_steps:
            runs.append(list(run_))
        run_.clear()

    for s in steps:
        s["cap"], s["cap_from"] = attempt_cap(s, p)
        exhausted = s["last_attempt"] >= s["cap"] and not s["last_ok"] and s["step_id"] is not None
        if run_ and (not exhausted or s["session"] != run_[-1]["session"]
                     or s["file"] != run_[-1]["file"]
                     or s["step_id"] - run_[-1]["step_id"] > p.max_step_gap):
            flush()
        if exhausted:
            run_.append(s)
    flush()
    return runs


@dataclass
class RepairRun:
    """Consecutive steps on which the repair loop used every attempt and still failed."""

    session: str | None
    first_step: int
    last_step: int
    start: dt.datetime
    stop: dt.datetime
    attempts: int
    identical_steps: int  # steps that re-sent one identical proposal on all their attempts
    hashes: list[str]  # the proposal hashes of the run
    all_failed: bool  # validation failed on every attempt of every step
    tokens_in: list[int]  # per step that states them
    tokens_out: int
    cost_usd: float | None
    unpriced_steps: int
    models: list[str]
    actors: list[str]
    caps: list[int]
    cap_from: list[str]
    failed_fields: str | None
    proposal_ids: list[str]
    first_at: tuple[str, int]  # the first step's first attempt
    last_at: tuple[str, int]  # the last step's last attempt
    last_attempt: int
    last_cap: int
    steps: int

    @property
    def one_hash_throughout(self) -> bool:
        return len(self.hashes) == 1 and self.identical_steps == self.steps

    @property
    def tokens_early_late(self) -> tuple[float, float]:
        """Mean tokens_in of the first and of the last quarter of the steps."""
        tokens = self.tokens_in
        k = max(1, len(tokens) // 4)
        return (sum(tokens[:k]) / k if tokens else 0, sum(tokens[-k:]) / k if tokens else 0)


def measure(con: duckdb.DuckDBPyConnection, p: Params) -> list[RepairRun]:
    rows = con.execute(STEPS_SQL).fetchall()
    cols = [d[0] for d in con.description]
    steps = [dict(zip(cols, r, strict=True)) for r in rows]
    return [_run(run_) for run_ in exhausted_runs(steps, p)]


def _run(steps: list[dict[str, Any]]) -> RepairRun:
    first, last = steps[0], steps[-1]
    priced = [s["cost_usd"] for s in steps if s["cost_usd"] is not None]
    return RepairRun(
        session=first["session"], first_step=first["step_id"], last_step=last["step_id"],
        start=first["start"], stop=last["stop"], steps=len(steps),
        attempts=sum(s["attempts"] for s in steps),
        identical_steps=sum(1 for s in steps if s["hashes"] == 1 and s["attempts"] > 1),
        hashes=sorted({s["phash"] for s in steps if s["phash"]}),
        all_failed=all(s["all_failed_validation"] for s in steps),
        tokens_in=[s["tokens_in"] for s in steps if s["tokens_in"] is not None],
        tokens_out=sum(s["tokens_out"] or 0 for s in steps),
        cost_usd=sum(priced) if priced else None,
        unpriced_steps=sum(1 for s in steps if s["cost_usd"] is None),
        models=sorted({s["model"] for s in steps if s["model"]}),
        actors=sorted({a for s in steps for a in (s["actors"] or [])}
                      | {s["llm_actor"] for s in steps if s["llm_actor"]}),
        caps=sorted({s["cap"] for s in steps}), cap_from=sorted({s["cap_from"] for s in steps}),
        failed_fields=_fields(first["fields"]), proposal_ids=[s["corr_id"] for s in steps],
        first_at=(first["first_file"], first["first_line"]),
        last_at=(last["first_file"], last["last_line"]),
        last_attempt=last["last_attempt"], last_cap=last["cap"],
    )


def _fields(raw: str | None) -> str | None:
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    if isinstance(value, list):
        return ", ".join(map(str, value[:3])) or None
    return str(value)


# ---------------------------------------------------------------------------------------------
# judge


def identical(r: RepairRun, p: Params) -> bool:
    """Most steps (`identical_share`) re-sent one identical proposal on all their attempts."""
    return r.identical_steps >= p.identical_share * r.steps


def prompt_growing(r: RepairRun, p: Params) -> bool:
    """The last steps' prompts are `growth_ratio` times the first steps'."""
    early, late = r.tokens_early_late
    return len(r.tokens_in) >= 3 and early > 0 and late >= p.growth_ratio * early


def judge(r: RepairRun, p: Params) -> Severity:
    same = identical(r, p)
    if same or r.all_failed:
        if (r.steps >= p.critical_steps and same) or prompt_growing(r, p):
            return Severity.CRITICAL
        return Severity.HIGH
    return Severity.MEDIUM


# ---------------------------------------------------------------------------------------------
# describe


def describe(r: RepairRun, severity: Severity, p: Params) -> Finding:
    n, attempts, identical_steps, hashes = r.steps, r.attempts, r.identical_steps, r.hashes
    early, late = r.tokens_early_late
    growing = prompt_growing(r, p)
    tokens_in = sum(r.tokens_in)
    cost = r.cost_usd
    step_span = f"steps {r.first_step}–{r.last_step}"
    title = (f"Repair loop exhausted on {n} consecutive steps ({step_span}), "
             + ("the same proposal re-sent every time" if r.one_hash_throughout else
                f"{identical_steps} of them re-sending one identical proposal" if identical_steps
                else f"{attempts} attempts failed"))
    fields = r.failed_fields
    summary = (
        f"In {r.session}, the coordinator ({', '.join(r.actors) or 'unknown backend'}"
        f"{'; ' + ', '.join(r.models) if r.models else ''}) used all {'/'.join(map(str, r.caps))} "
        f"attempts on each of {n} consecutive steps ({step_span}, {attempts} attempts) and the "
        f"last attempt still failed"
        + (" validation every time" if r.all_failed else "")
        + (f" (failed field {fields})" if fields else "") + ". "
        + (f"Every attempt carried the same proposal_hash {hashes[0][:12]}…, so the repairs "
           "changed nothing." if r.one_hash_throughout else
           f"On {identical_steps} steps all attempts carried one identical proposal_hash."
           if identical_steps else "")
        + (f" tokens_in per step grew from ~{early:,.0f} to ~{late:,.0f} as repair transcripts "
           f"piled up; {tokens_in:,} input tokens" if growing else f" {tokens_in:,} input tokens")
        + (f" and ${cost:,.4f} stated by the log" if cost is not None else "")
        + (f" ({r.unpriced_steps} step(s) unpriced)" if r.unpriced_steps and cost is not None else "")
        + " went to these steps."
    )
    evidence = [EvidenceLine(*r.first_at, f"step {r.first_step}: first exhausted repair loop")]
    if n > 1:
        evidence.append(EvidenceLine(*r.last_at, f"step {r.last_step}: attempt {r.last_attempt} of "
                                                 f"{r.last_cap} still failing"))
    return Finding(
        detector="repair_loop",
        key=f"{r.first_at[0]}|{r.session}|{'+'.join(r.actors)}|step {r.first_step}",
        severity=severity, title=title, summary=summary,
        signal=f"a repair loop exhausted on {n} consecutive steps",
        recommendation=(
            "Cap repair attempts and stop re-sending an identical proposal: when a repair returns "
            "the same proposal_hash as the attempt it repairs, abort the step (fall back to the "
            "kernel / NOOP) instead of paying for another call; after 2–3 consecutive exhausted "
            "steps trip a circuit breaker for the LLM coordinator, and trim the repair transcript "
            "so tokens_in cannot grow step after step."),
        start=r.start, end=r.stop,
        actors=r.actors, targets=[], sessions=[r.session] if r.session else [],
        claim_sql=CLAIM,
        claim_params={"session": r.session, "file": r.first_at[0],
                      "proposals": list(r.proposal_ids)},
        unit_kinds=("repair_attempt",),
        details={
            "first_step": r.first_step, "last_step": r.last_step, "steps": n,
            "attempts": attempts, "max_attempts": r.caps[-1],
            "max_attempts_from": r.cap_from,
            "identical_hash_steps": identical_steps,
            "proposal_hashes": hashes[:5], "distinct_proposal_hashes": len(hashes),
            "validation_failed_throughout": r.all_failed, "failed_fields": fields,
            "tokens_in": tokens_in, "tokens_out": r.tokens_out,
            "tokens_in_first_steps": early, "tokens_in_last_steps": late,
            "tokens_growing": growing,
            "tokens_rising_steps": sum(1 for a, b in zip(r.tokens_in, r.tokens_in[1:], strict=False)
                                       if b > a),
            "cost_usd_stated": cost, "unpriced_steps": r.unpriced_steps, "models": r.models,
            "proposal_ids": r.proposal_ids[:10],
        },
        evidence=evidence,
    )


DETECTOR = Detector(
    name="repair_loop",
    description="an LLM coordinator's repair loop exhausted on consecutive steps (LabTrust)",
    params=Params,
    run=staged(measure, judge, describe),
    rank=25,
    reads=("repair_attempt",),
    needs=(("session",), ("corr_id",)),
    # a session's repair attempts and the model calls of its steps
    partition_by=("session",),
)

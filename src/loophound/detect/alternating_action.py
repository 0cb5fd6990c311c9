"""alternating_action: one actor cycling through two (or a few) calls whose results never change.

The single-agent counterpart of ping_pong: restore a file from its backup, apply the same
edit, run the same failing test, restore again (a cycle of three); navigate to a page and
snapshot it, again and again (two). Each step looks like progress, and no one call repeats
back to back, so repeated_action does not see it. A stretch is a run of one (actor,
session)'s consecutive calls (actions.py) that repeats a cycle of k = 2 … `max_cycle`
different calls, each the same call every time it comes round (same action and arguments
after masking, same result or outcome), at least `min_cycles` times, uninterrupted (what
interrupts a run: see actions.py) and without a pause longer than `max_gap_s`. A step that
fails is part of the cycle (the failing test of the restore-edit-test loop).

Healthy cycles stay quiet as they do for repeated_action: a cycle that ends because one of its
calls got another answer (edit, test, edit, test … until the test passes changes the edit),
one at a steady low rate that costs no model tokens (`background_gap_s`), a batch whose
arguments walk through items (`batch_share`), and, where the log states neither arguments nor
results, one below `high_cycles` or at no machine cadence (`machine_cv`).

- measure: the stretches (`cycles`, shortest cycle first), with pace, what ended them, how
  varied each step's arguments were and what the actor's turns over them cost;
- judge: medium from `min_cycles` (OpenHands: A-B-A-B-A-B, 6 actions), high from
  `high_cycles`, critical from `critical_cycles`; a slow cycle that costs model tokens is at
  most medium below `critical_cycles`;
- describe: the cycle's calls, how often and how fast, and the guard that would have stopped it.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass

import duckdb
import numpy as np

from ..vocabulary import Severity
from .actions import (
    ACTION_KINDS,
    GUARDS,
    MAX_CYCLE,
    Bounds,
    LoopParams,
    Pace,
    Search,
    Sequences,
    Shape,
    Turns,
    capped_unseen,
    claim_sql,
    clip,
    cycles,
    distinct_share,
    first_calls,
    loop_severity,
    loop_turns,
    loops,
    resolved,
    ts,
    want,
)
from .base import ONE_PASS_OVER_ACTIONS, Detector, EvidenceLine, Finding, human_duration, param, staged


@dataclass
class Params(LoopParams):
    min_cycles: float = param(3.0, "times a cycle goes round before it is a finding (OpenHands: "
                                   "A-B-A-B-A-B)")
    high_cycles: float = param(5.0, "times round that make a cycle high")
    critical_cycles: float = param(50.0, "times round that make a cycle critical")
    max_cycle: int = param(MAX_CYCLE, "longest cycle searched, in calls")


CLAIM = claim_sql(ACTION_KINDS)


# ---------------------------------------------------------------------------------------------
# measure


@dataclass(frozen=True)
class Step:
    """One call of the cycle, as it was first made."""

    action: str | None
    action_key: str
    args: str | None
    result: str | None
    error: str | None
    file: str
    line: int


@dataclass
class Cycle:
    """One stretch of an actor going round the same k calls."""

    actor: str
    session: str | None
    steps: list[Step]
    result_known: bool  # every step's result is logged
    count: int  # calls in the stretch
    start: dt.datetime
    stop: dt.datetime
    lo: dt.datetime
    until: dt.datetime  # the last call's answer
    pace: Pace
    ended_by_change: bool | None
    batch_share: float  # the most varied step's distinct arguments (ids masked) over its calls
    turns: Turns

    @property
    def k(self) -> int:
        return len(self.steps)

    @property
    def rounds(self) -> float:
        return self.count / self.k

    @property
    def shape(self) -> Shape:
        return Shape(self.rounds, self.pace, self.ended_by_change, self.batch_share,
                     self.turns.tokens, described=self.result_known
                     or any(s.args is not None for s in self.steps),
                     calls=self.count, results_logged=self.result_known)


@dataclass(frozen=True)
class Found:
    """A stretch as found in its piece of the sequences: what measure needs once they are
    gone."""

    steps: tuple[int, ...]  # the event ids of the cycle's calls, first time round
    times: np.ndarray  # of its calls
    known: bool  # every step's result is logged
    ended_by_change: bool | None
    batch_share: float
    bounds: Bounds


def stretches_in(seq: Sequences, p: Params) -> list[Found]:
    """The cycling stretches of one piece of the sequences (whole groups)."""
    return [Found(
        steps=tuple(int(e) for e in seq.event_id[lo:lo + k]), times=seq.t[lo:hi].copy(),
        known=bool(seq.known[lo:lo + k].all()),
        ended_by_change=resolved(seq, hi, set(seq.akey[lo:lo + k]), set(seq.fkey[lo:lo + k])),
        batch_share=max(distinct_share(seq.loose[lo + j:hi:k]) for j in range(k)),
        bounds=seq.bounds(lo, hi - 1))
        for lo, hi, k in cycles(seq.fkey, seq.t, seq.cut, p.max_cycle, p.min_cycles,
                                p.max_gap_s * 1000)]


def could_cycle(p: Params) -> str:
    """Where `stretches_in` could find a stretch: two different calls at least, each made
    `min_cycles` times (rounded down) and once at least. A stretch [lo, hi) of a k-call cycle
    has two different calls among its first k (its least period is k), each made once in
    every k calls of it and hi - lo >= k * min_cycles, and one call again at least (a match)."""
    least = max(1, math.floor(p.min_cycles)) if math.isfinite(p.min_cycles) else 1
    return f"count(*) FILTER (WHERE k >= {least}) >= 2"


SEARCH = Search(stretches_in, could_cycle)


def prepare(con: duckdb.DuckDBPyConnection, p: Params) -> None:
    want(con, "alternating_action", p, SEARCH)  # one pass with repeated_action


def measure(con: duckdb.DuckDBPyConnection, p: Params) -> list[Cycle]:
    found = loops(con, "alternating_action", p, SEARCH)
    if not found:
        return []
    calls = first_calls(con, [i for f in found for i in f.steps])
    spans = loop_turns(con, [f.bounds for f in found], p.max_gap_s)
    out = []
    for f, (actor, session, lo_t, until, cost) in zip(found, spans, strict=True):
        steps = [Step(c["action"], c["action_key"], c["args"], c["result"], c["error"], c["file"],
                      c["line"]) for c in (calls[i] for i in f.steps)]
        out.append(Cycle(
            actor=actor, session=session, steps=steps, result_known=f.known,
            count=len(f.times), start=ts(f.times[0]), stop=ts(f.times[-1]), lo=lo_t, until=until,
            pace=Pace.of(f.times), ended_by_change=f.ended_by_change,
            batch_share=f.batch_share, turns=cost))
    out.sort(key=lambda c: (c.start, c.actor, str(c.session)))
    return out


# ---------------------------------------------------------------------------------------------
# judge


def judge(c: Cycle, p: Params) -> Severity | None:
    return loop_severity(c.shape, p.min_cycles, p.high_cycles, p.critical_cycles, p)


# ---------------------------------------------------------------------------------------------
# describe


def _name(s: Step) -> str:
    args = clip(s.args, 60)
    return f"`{s.action}`" + (f" {args}" if args else "")


def describe(c: Cycle, severity: Severity, p: Params) -> Finding:
    names = [f"`{s.action}`" for s in c.steps]
    where = f" in session {c.session}" if c.session else ""
    pattern = " → ".join(names)
    rate = c.count / c.pace.duration_s if c.pace.duration_s > 0 else float(c.count)
    failing = [s for s in c.steps if s.error]
    same = "the same results" if c.result_known else "the same calls (results not logged)"
    title = f"{c.actor} went round {pattern} {c.rounds:.3g} times ({c.count:,} calls) with {same}{where}"
    summary = (
        f"{c.actor} cycled through {c.k} calls{where}, " + "; ".join(_name(s) for s in c.steps)
        + f", {c.rounds:.3g} times ({c.count:,} calls) over {human_duration(c.pace.duration_s)}, "
        f"{c.pace.text()}, {rate:.3g}/s. "
        + ("Each call got the same result every time it came round"
           if c.result_known else "Each call had the same outcome every time it came round "
                                  "(the log does not say what it returned)")
        + (f"; {', '.join(f'`{s.action}`' for s in failing)} failed every time with "
           f"{failing[0].error}" if failing else "")
        + (f". Its turns over the loop made {c.turns.llm_calls:,} model calls "
           f"({c.turns.tokens:,} tokens)" if c.turns.tokens else "")
        + ".")
    evidence = [EvidenceLine(s.file, s.line, f"step {i + 1} of the cycle, first time round")
                for i, s in enumerate(c.steps)]
    return Finding(
        detector="alternating_action",
        key=f"{c.actor}|{c.session}|{'|'.join(s.action_key for s in c.steps)}|"
            f"{c.start:%Y-%m-%dT%H:%M:%S.%f}",
        severity=severity, title=title, summary=summary,
        signal=f"{pattern} round and round, {c.rounds:.3g} times",
        recommendation=_recommendation(c, p),
        start=c.start, end=c.stop,
        actors=[c.actor], targets=[], sessions=[c.session] if c.session else [],
        claim_sql=CLAIM,
        claim_params={"actor": c.actor, "session": c.session,
                      "keys": sorted({s.action_key for s in c.steps}),
                      "start": c.start, "stop": c.stop, "lo": c.lo, "until": c.until},
        unit_kinds=ACTION_KINDS,
        details={
            "cycle": [{"action": s.action, "args": clip(s.args, 200), "result": clip(s.result, 200),
                       "error": s.error} for s in c.steps],
            "k": c.k, "rounds": c.rounds, "count": c.count, "result_logged": c.result_known,
            "severity_note": capped_unseen(c.shape, p.critical_cycles, p),
            "duration_s": c.pace.duration_s, "rate_per_s": rate,
            "median_gap_ms": c.pace.median_ms, "gap_cv": c.pace.cv,
            "ended_by_another_answer": c.ended_by_change,
            "distinct_argument_share": c.batch_share,
            "model_calls": c.turns.llm_calls, "tokens": c.turns.tokens,
        },
        evidence=evidence,
        evidence_limit=max(5, c.k + 2),
    )


def _recommendation(c: Cycle, p: Params) -> str:
    rounds = max(int(p.min_cycles) - 1, 2)
    return (f"Stop a cycle of unchanged results: when the last {rounds * c.k} calls of a session "
            f"repeat {c.k} calls whose results did not change, refuse the next one and make the "
            f"agent re-plan or hand over (OpenHands' A-B-A-B check does this after 6 actions). "
            f"{GUARDS} A restore-and-retry loop needs a different fix, not the same edit again: "
            f"keep a per-session count of identical edits and stop at {rounds}.")


DETECTOR = Detector(
    name="alternating_action",
    description="one actor cycling through two or a few calls (A-B-A-B) whose results never change",
    params=Params,
    run=staged(measure, judge, describe),
    rank=14,
    reads=ACTION_KINDS,
    needs=(("ts",), ("action",), ("actor",)),
    # an (actor, session)'s calls, and what others did in the session (actions.py)
    partition_by=("session",),
    prepare=prepare,
    lane=ONE_PASS_OVER_ACTIONS,
    grows_with_log=True,
)

"""repeated_action: one actor makes the same call again and again, and it succeeds every time.

Agents loop while every call works: re-reading a file that did not change, re-running a grep
with the same output, polling "is it done?" thousands of times. No error repeats, so
repeated_error sees nothing. A run is a stretch of one (actor, session)'s consecutive calls
(actions.py: tool calls, requests, steps) that are the same call: the same action and
arguments after masking (`action_key`), and the same result (`result_key`) where the log
states one, else the same outcome. Nothing interrupted it (a new prompt to the actor; where
results are not logged, anything another party did in the session), no pause was longer than
`max_gap_s`, and no call failed (a run of failures is repeated_error's). A few other calls
(`max_between`) may come between two stretches of it when the log states its result: the same
result after them shows they changed nothing (restore and edit 9 times, run the tests, restore
and edit 6 more times: one run of 15).

Repetition is not always a loop, and these stay quiet:
- a poll that ends: the run stops because the same call got another answer (the build
  finished), so the result did change;
- the background: calls at a steady low rate (median gap of `background_gap_s` or more) that
  cost no model tokens, such as a health check every minute;
- a batch: calls that differ only in numbers (`item 17`, `item 18`: masked alike, but the
  arguments with only ids masked take `batch_share` or more distinct values);
- where the log states neither arguments nor results, repeating an action name says little
  (a person scrolls a feed ten times): such a run needs `high_count` calls at a machine's
  steady cadence (gaps' coefficient of variation at most `machine_cv`).

- measure: the runs (actions.sequences, `equal_runs` cuts them), with their pace, what
  ended them, how varied their arguments were and what the actor's turns over them cost;
- judge: medium from `min_count` calls (OpenHands' stuck check: 4 identical action–
  observation pairs), high from `high_count`, critical from `critical_count`; a slow loop
  that costs model tokens is at most medium below `critical_count`;
- describe: the call, how often and how fast, its result, and the guard that would have
  stopped it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import duckdb
import numpy as np

from ..vocabulary import Severity
from .actions import (
    ACTION_KINDS,
    GUARDS,
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
    distinct_share,
    equal_runs,
    first_calls,
    loop_severity,
    loop_turns,
    loops,
    merge_stretches,
    resolved,
    ts,
    want,
)
from .base import ONE_PASS_OVER_ACTIONS, Detector, EvidenceLine, Finding, human_duration, param, staged


@dataclass
class Params(LoopParams):
    min_count: int = param(4, "same calls in a row before a run is a finding (OpenHands: 4 identical "
                              "action-observation pairs)")
    high_count: int = param(10, "same calls in a row that make a run high")
    critical_count: int = param(100, "same calls in a row that make a run critical")
    max_between: int = param(2, "other calls allowed between two stretches of the same call whose "
                                "logged result stayed the same (they changed nothing)")


CLAIM = claim_sql(ACTION_KINDS)


# ---------------------------------------------------------------------------------------------
# measure


@dataclass
class Run:
    """One stretch of the same call, made again and again by one actor in one session."""

    actor: str
    session: str | None
    action: str | None
    action_key: str
    args: str | None
    result: str | None  # the first call's result, as the log gives it (None: not logged)
    result_known: bool
    count: int
    start: dt.datetime
    stop: dt.datetime
    lo: dt.datetime  # the actor's turn that led to the first call began after this
    until: dt.datetime  # the last call's answer
    pace: Pace
    between: int  # other calls made between the repeats (that left the result unchanged)
    ended_by_change: bool | None  # the next call was the same one with another answer
    batch_share: float  # distinct arguments (ids masked, numbers kept) over calls
    turns: Turns
    first: tuple[str, int]  # file, line of the first call
    second: tuple[str, int] | None  # of the first repeat

    @property
    def shape(self) -> Shape:
        return Shape(self.count, self.pace, self.ended_by_change, self.batch_share,
                     self.turns.tokens, described=self.result_known or self.args is not None,
                     calls=self.count, results_logged=self.result_known)


@dataclass(frozen=True)
class Found:
    """A run as found in its piece of the sequences: what measure needs once they are gone."""

    calls: tuple[int, ...]  # the event ids of its first call and first repeat
    times: np.ndarray  # of its calls
    known: bool
    between: int
    ended_by_change: bool | None
    batch_share: float
    bounds: Bounds


def runs_in(seq: Sequences, p: Params) -> list[Found]:
    """The runs of one piece of the sequences (whole groups)."""
    pieces = [(lo, hi) for lo, hi in equal_runs(seq.fkey, seq.t, seq.cut, 2, p.max_gap_s * 1000)
              if not seq.erred[lo]]
    out = []
    for group in merge_stretches(pieces, seq.fkey, seq.known, seq.cut, seq.t, p.max_between,
                                 p.max_gap_s * 1000):
        idx = np.concatenate([np.arange(lo, hi) for lo, hi in group])
        if len(idx) < p.min_count:
            continue
        lo, last = int(idx[0]), int(idx[-1])
        out.append(Found(
            calls=tuple(int(seq.event_id[i]) for i in idx[:2]), times=seq.t[idx],
            known=bool(seq.known[lo]), between=int(last + 1 - lo - len(idx)),
            ended_by_change=resolved(seq, last + 1, {seq.akey[lo]}, {seq.fkey[lo]}),
            batch_share=distinct_share(seq.loose[idx]), bounds=seq.bounds(lo, last)))
    return out


def could_repeat(p: Params) -> str:
    """Where `runs_in` could find a run: the same successful call made twice at least (a
    run's pieces are two or more equal calls, none failed)."""
    return "max(k) FILTER (WHERE NOT erred) >= 2"


SEARCH = Search(runs_in, could_repeat)


def prepare(con: duckdb.DuckDBPyConnection, p: Params) -> None:
    want(con, "repeated_action", p, SEARCH)  # one pass over the actions with alternating_action


def measure(con: duckdb.DuckDBPyConnection, p: Params) -> list[Run]:
    found = loops(con, "repeated_action", p, SEARCH)
    if not found:
        return []
    calls = first_calls(con, [i for f in found for i in f.calls])
    spans = loop_turns(con, [f.bounds for f in found], p.max_gap_s)
    out = []
    for f, (actor, session, lo_t, until, cost) in zip(found, spans, strict=True):
        first, second = calls[f.calls[0]], calls.get(f.calls[1]) if len(f.calls) > 1 else None
        out.append(Run(
            actor=actor, session=session, action=first["action"], action_key=first["action_key"],
            args=first["args"], result=first["result"], result_known=f.known,
            count=len(f.times), start=ts(f.times[0]), stop=ts(f.times[-1]), lo=lo_t, until=until,
            pace=Pace.of(f.times), between=f.between, ended_by_change=f.ended_by_change,
            batch_share=f.batch_share, turns=cost, first=(first["file"], first["line"]),
            second=(second["file"], second["line"]) if second else None))
    out.sort(key=lambda r: (r.start, r.actor, str(r.session), str(r.action)))
    return out


# ---------------------------------------------------------------------------------------------
# judge


def judge(r: Run, p: Params) -> Severity | None:
    return loop_severity(r.shape, p.min_count, p.high_count, p.critical_count, p)


# ---------------------------------------------------------------------------------------------
# describe


def describe(r: Run, severity: Severity, p: Params) -> Finding:
    what = f"`{r.action}`" if r.action else "the same call"
    where = f" in session {r.session}" if r.session else ""
    args = clip(r.args, 120)
    rate = r.count / r.pace.duration_s if r.pace.duration_s > 0 else float(r.count)
    result = (f"the same result every time ({clip(r.result, 80)!r})" if r.result_known and r.result
              else "the same result every time" if r.result_known
              else "the same outcome every time (the log does not say what it returned)")
    same = " with the same arguments" if r.args is not None else ""
    row = " in a row" if not r.between else f" of {r.count + r.between:,} calls"
    title = f"{what} called {r.count:,} times{row}{same}{where}"
    summary = (
        f"{r.actor} called {what}" + (f" with {args}" if args else "") + f"{where} {r.count:,} "
        f"times over {human_duration(r.pace.duration_s)}, {r.pace.text()}, {rate:.3g}/s, and got "
        f"{result}; nothing it was told in between and nothing it did changed the outcome"
        + (f". Its turns over the loop made {r.turns.llm_calls:,} model calls "
           f"({r.turns.tokens:,} tokens)" if r.turns.tokens else "")
        + (f". {r.between:,} other call{'s' if r.between > 1 else ''} in between changed nothing"
           if r.between else "")
        + (". The run ended when the call got another answer" if r.ended_by_change else "")
        + ".")
    evidence = [EvidenceLine(*r.first, f"first of {r.count:,} identical calls")]
    if r.second:
        evidence.append(EvidenceLine(*r.second, "the same call again, the same answer"
                                     if r.result_known else "the same call again"))
    return Finding(
        detector="repeated_action",
        key=f"{r.actor}|{r.session}|{r.action_key}|{r.start:%Y-%m-%dT%H:%M:%S.%f}",
        severity=severity, title=title, summary=summary,
        signal=f"the same {what} {r.count:,} times in a row",
        recommendation=_recommendation(r, p),
        start=r.start, end=r.stop,
        actors=[r.actor], targets=[], sessions=[r.session] if r.session else [],
        claim_sql=CLAIM,
        claim_params={"actor": r.actor, "session": r.session, "keys": [r.action_key],
                      "start": r.start, "stop": r.stop, "lo": r.lo, "until": r.until},
        unit_kinds=ACTION_KINDS,
        details={
            "action": r.action, "args": clip(r.args, 400), "result": clip(r.result, 400),
            "result_logged": r.result_known, "count": r.count,
            "severity_note": capped_unseen(r.shape, p.critical_count, p),
            "duration_s": r.pace.duration_s, "rate_per_s": rate,
            "median_gap_ms": r.pace.median_ms, "gap_cv": r.pace.cv,
            "ended_by_another_answer": r.ended_by_change,
            "distinct_argument_share": r.batch_share, "calls_between": r.between,
            "model_calls": r.turns.llm_calls, "tokens": r.turns.tokens,
        },
        evidence=evidence,
    )


def _recommendation(r: Run, p: Params) -> str:
    cap = max(p.min_count - 1, 2)
    return (f"Cap identical calls: refuse the {cap + 1}th call of one session with the same "
            f"arguments that got the same answer {cap} times (a PreToolUse hook in Claude Code that "
            f"counts identical tool inputs per session and blocks with exit code 2; a wrapper "
            f"around the tool elsewhere), and have the agent say what it expects to change before "
            f"it repeats a call. {GUARDS} For a poll, back off (1 s doubling to a minute) and give "
            f"up after a deadline.")


DETECTOR = Detector(
    name="repeated_action",
    description="one actor repeating the same call with the same arguments and the same result, "
                "no error (a stuck agent re-reading, re-running, polling)",
    params=Params,
    run=staged(measure, judge, describe),
    rank=12,
    reads=ACTION_KINDS,
    needs=(("ts",), ("action",), ("actor",)),
    # an (actor, session)'s calls, and what others did in the session (actions.py)
    partition_by=("session",),
    prepare=prepare,
    lane=ONE_PASS_OVER_ACTIONS,
    grows_with_log=True,
)

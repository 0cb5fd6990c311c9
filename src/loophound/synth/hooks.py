"""Synthetic post-completion hook dispatcher logs (`hooks.jsonl`), modelled on seed 002.

Incidents: monitoring agents re-triggering each other through post-completion hooks, A→B→A
(annegreet ↔ eltjo) and a 3-agent ring (victoria → nessa → mira → victoria). Every hop is a
new session with a new completion id and `hook_origin_depth` 0, so only the lineage through
`parent_completion_id` shows the cycle. Healthy: cron- and user-started chains that end,
including a review round trip R → S → R and a hand-off through two monitoring agents
(urszula → annegreet → koen → eltjo).

The healthy traffic is traffic the write-up's adopted guards allow, so that a replay of those
guards (`loophound guards`) can show zero false blocks on the clean twin: a review takes its
reviewer over half an hour, so the round trip's return hop comes more than 30 minutes after the
first (the 30-minute cycle check refuses any B→A within 30 minutes of A→B), and monitoring
agents hand work to and take it from other agents but never hook each other (isolation). Both
stay decoys for trigger_cycle: the round trip is one lap along its lineage, the hand-off puts
the cycle's own agents in a chain that ends.

Lines are `json.dumps` with default separators, keys in the documented order, sorted by `ts`.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from itertools import cycle, islice
from pathlib import Path
from typing import Any

from ._common import UTC, hex_id, stream, write_lines

DAY = dt.datetime(2026, 4, 22, tzinfo=UTC)
MONITORING = {"annegreet", "eltjo", "victoria", "nessa", "mira"}
# a review keeps its reviewer over half an hour: the return hop R ← S comes after the 30-minute
# cycle-check window of the first hop R → S has passed
REVIEW_MINUTES = (31.0, 40.0)
Record = dict[str, Any]


class _Dispatcher:
    """Collects dispatcher events; each session is started, completed, and may fire a hook."""

    def __init__(self) -> None:
        self.events: list[tuple[dt.datetime, int, Record]] = []

    def emit(self, ts: dt.datetime, event: str, source: str, target: str, completion: str | None,
             session: str, parent: str | None, cost: float | None = None) -> None:
        rec: Record = {"ts": ts.isoformat(), "event": event, "source_agent": source,
                       "target_agent": target, "completion_id": completion, "session_id": session,
                       "parent_completion_id": parent, "hook_origin_depth": 0}
        if cost is not None:
            rec["cost_usd"] = cost
        self.events.append((ts, len(self.events), rec))

    def chain(self, rng: random.Random, started_by: str, agents: list[str],
              start: dt.datetime, minutes: dict[str, tuple[float, float]] | None = None) -> Record:
        """Run `agents` one after another, each started by the previous one's hook; a session
        of an agent in `minutes` lasts that many minutes (low, high), others their usual."""
        minutes = minutes or {}
        start += dt.timedelta(microseconds=rng.randrange(1, 1_000_000))  # never a whole second
        source, parent, t, cost, root = started_by, None, start, 0.0, None
        for i, agent in enumerate(agents):
            session, completion = f"ses_{hex_id(rng, 16)}", f"cmpl_{hex_id(rng, 20)}"
            root = root or session
            self.emit(t, "session_started", source, agent, None, session, parent)
            low, high = minutes.get(agent, (6, 13) if agent in MONITORING else (3, 40))
            t += dt.timedelta(minutes=rng.uniform(low, high), microseconds=rng.randrange(1_000_000))
            price = round(rng.uniform(2.3, 2.7) if agent in MONITORING else
                          rng.uniform(0.4, 4.0), 2)
            cost += price
            self.emit(t, "session_completed", source, agent, completion, session, parent, price)
            if i + 1 < len(agents):
                t += dt.timedelta(milliseconds=rng.randint(20, 400))
                self.emit(t, "hook_fired", agent, agents[i + 1], completion, session, parent)
                t += dt.timedelta(milliseconds=rng.randint(500, 4000))
            source, parent = agent, completion
        return {"agents": agents, "started_by": started_by, "root_session": root,
                "sessions": len(agents), "hooks_fired": len(agents) - 1,
                "cost_usd": round(cost, 2), "start": start.isoformat(), "end": t.isoformat()}

    def records(self) -> list[Record]:
        return [rec for _, _, rec in sorted(self.events, key=lambda e: (e[0], e[1]))]


def write_hooks_log(outdir: Path, seed: int = 7, *, incident: bool = True,
                    rounds_ab: int = 28, rounds_ring: int = 10) -> Record:
    """Write one day of dispatcher history. `incident=False` gives the clean twin: the same
    healthy chains without the two cycles. Returns the answer key."""
    d = _Dispatcher()
    healthy = []
    for k, hour in enumerate((6, 10, 14, 18)):
        rng = stream(seed, f"hooks-cron-{k}")
        start = DAY + dt.timedelta(hours=hour, seconds=rng.randint(0, 59))
        healthy.append({"kind": "chain"} | d.chain(rng, "cron", ["urszula", "koen", "marije"],
                                                   start))
    for k, hour in enumerate((9.2, 15.7)):
        rng = stream(seed, f"hooks-review-{k}")
        start = DAY + dt.timedelta(hours=hour)
        healthy.append({"kind": "review_round_trip"} | d.chain(
            rng, "user:sanne", ["rutger", "saskia", "rutger"], start,
            minutes={"saskia": REVIEW_MINUTES}))
    rng = stream(seed, "hooks-handoff")
    healthy.append({"kind": "chain"} | d.chain(rng, "cron", ["urszula", "annegreet", "koen", "eltjo"],
                                               DAY + dt.timedelta(hours=7, minutes=30)))
    incidents = []
    if incident:
        rng = stream(seed, "hooks-loop-ab")
        pair = list(islice(cycle(["annegreet", "eltjo"]), 2 * rounds_ab))
        incidents.append({"kind": "hook_cycle", "cycle": ["annegreet", "eltjo"]} | d.chain(
            rng, "cron", pair, DAY + dt.timedelta(hours=19, minutes=31)))
        rng = stream(seed, "hooks-loop-ring")
        ring = list(islice(cycle(["victoria", "nessa", "mira"]), 3 * rounds_ring))
        incidents.append({"kind": "hook_cycle", "cycle": ["victoria", "nessa", "mira"]} | d.chain(
            rng, "user:jelle", ring, DAY + dt.timedelta(hours=21, minutes=14)))
    records = d.records()
    n = write_lines(outdir / "hooks.jsonl", map(json.dumps, records))
    for entry in healthy + incidents:
        _locate(records, entry)
    return {"format": "hooks", "file": "hooks.jsonl", "lines": {"hooks.jsonl": n},
            "incidents": incidents, "healthy": healthy}


def _locate(records: list[Record], entry: Record) -> None:
    """Add the lines of a chain (1-based) by following its lineage from the root session."""
    sessions, completions, first, last = {entry["root_session"]}, set(), None, None
    for i, rec in enumerate(records, 1):
        if rec["session_id"] in sessions or rec["parent_completion_id"] in completions:
            sessions.add(rec["session_id"])
            if rec["event"] == "session_completed":
                completions.add(rec["completion_id"])
            first, last = first or i, i
    entry |= {"first_line": first, "last_line": last, "lines": 3 * entry["sessions"] - 1,
              "loop": entry["kind"] == "hook_cycle"}
    if entry["kind"] == "hook_cycle":
        del entry["agents"]  # the cycle, repeated `sessions` times

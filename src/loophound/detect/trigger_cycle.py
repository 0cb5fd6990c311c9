"""trigger_cycle: agents that re-trigger each other in a cycle (A→B→A, A→B→C→A, ...).

The who-triggered-whom graph is read from `trigger` events (actor = the agent whose work fired
the trigger, target = the agent it starts; the hook dispatcher's `hook_fired`, or any format
that maps a hand-off to kind `trigger`). Hops are chained into lineages:
- by lineage when the log has it: a hop fired by completion `c` (corr_id) starts a session whose
  `parent_id` is `c`; the next hop from that session carries `parent_id = c`. This works when
  every hop has a new completion id and `hook_origin_depth` resets to 0 (seed 002), which is
  exactly when per-completion dedup, depth caps and per-completion breakers see nothing;
- by time when it does not (no corr_id/parent_id): a hop from B follows the most recent hop
  into B within `window_s` (30 min, the seed-002 cycle-check window).

Along each lineage the sequence of agents is searched for a repeat at most `max_cycle_len`
agents back (BFS depth ≤ 5 in seed 002): from there the chain is periodic with that cycle as
long as each next agent equals the one a cycle earlier. A *lap* (round) is one run of every
agent of the cycle. A chain that ends (A→B→C) has no repeat; a review round trip R→S→R is one
lap; neither is a finding. `min_laps` (3) laps make a finding:
- high: the laps close within `window_s` (median), i.e. the 30-minute cycle check would have
  caught it;
- medium: slower laps (each lap longer than the window);
- critical: `critical_laps` laps or `critical_cost_usd` of stated session cost.
The finding claims the hooks and the session start/end events of the cycle's sessions and
counts sessions started; cost per round (the sessions' stated `cost_usd`) is in the details.
"""

from __future__ import annotations

import datetime as dt
import statistics
from dataclasses import dataclass
from typing import Any

import duckdb

from .base import Detector, EvidenceLine, Finding, human_duration, param
from .lineage import CLAIM, Lineage, load_lineage


@dataclass
class Params:
    window_s: float = param(1800.0, "cycle-check window: laps closing within it are fast (seed 002: 30 min); "
                            "also links hops that carry no lineage ids")
    max_cycle_len: int = param(5, "longest cycle searched, in agents (seed 002: BFS depth ≤ 5)")
    min_laps: int = param(3, "laps (every agent of the cycle ran once) before a cycle is a finding")
    critical_laps: int = param(20, "laps that make a cycle critical")
    critical_cost_usd: float = param(100.0, "stated session cost of the cycle that makes it critical")
    max_paths: int = param(5000, "root-to-leaf paths followed per lineage tree (fan-out guard)")


def periodic_segments(agents: list[str], max_len: int) -> list[tuple[int, int, int]]:
    """(start, stop, period): `agents[start:stop]` repeats a cycle of `period` distinct agents,
    found where an agent recurs at most `max_len` steps after its previous run."""
    out = []
    i0, n = 0, len(agents)
    while i0 < n:
        last: dict[str, int] = {}
        found = None
        for j in range(i0, n):
            a = agents[j]
            if a in last and j - last[a] <= max_len:
                found = (last[a], j)
                break
            last[a] = j
        if found is None:
            break
        i, j = found
        period = j - i
        k = j + 1
        while k < n and agents[k] == agents[k - period]:
            k += 1
        out.append((i, k, period))
        i0 = k - 1
    return out


def run(con: duckdb.DuckDBPyConnection, p: Params) -> list[Finding]:
    lin = load_lineage(con, p.window_s)
    if not lin.hops:
        return []
    children = lin.children()
    cycles: dict[tuple, dict[str, Any]] = {}
    for root in lin.roots():
        paths, truncated = lin.paths(root, children, p.max_paths)
        for path in paths:
            agents, sess = lin.agents_and_sessions(path)
            for start, stop, period in periodic_segments(agents, max(1, p.max_cycle_len)):
                laps = (stop - start) // period
                if laps < p.min_laps:
                    continue
                first_hop = path[start] if start < len(path) else path[-1]
                key = (root, tuple(agents[start:start + period]), sess[start] or first_hop)
                c = cycles.setdefault(key, {
                    "root": root, "cycle": list(agents[start:start + period]), "laps": 0,
                    "sessions": [], "hops": [], "entry": agents[start - 1] if start else None,
                    "lap_sessions": [], "lap_hops": [], "truncated": truncated, "path": path,
                    "start_index": start, "exit": agents[stop] if stop < len(agents) else None,
                })
                if laps > c["laps"]:
                    c["laps"] = laps
                    c["lap_sessions"] = [sess[start + k * period:start + (k + 1) * period]
                                         for k in range(laps)]
                    c["lap_hops"] = [path[start + k * period] for k in range(laps)
                                     if start + k * period < len(path)]
                c["sessions"] = sorted(set(c["sessions"]) | {s for s in sess[start:stop] if s})
                c["hops"] = sorted(set(c["hops"]) | set(path[start:stop - 1]))
    return [_finding(lin, c, p) for c in sorted(cycles.values(), key=lambda c: _start(lin, c))]


def _start(lin: Lineage, c: dict) -> dt.datetime:
    starts = [lin.sessions[s]["started"] for s in c["sessions"]
              if s in lin.sessions and lin.sessions[s]["started"] is not None]
    hop_ts = [lin.hops[i]["ts"] for i in c["hops"]]
    return min(starts + hop_ts) if starts or hop_ts else dt.datetime.min


def _finding(lin: Lineage, c: dict, p: Params) -> Finding:
    hops, sessions = lin.hops, lin.sessions
    cyc, laps, period = c["cycle"], c["laps"], len(c["cycle"])
    sess = [sessions[s] for s in c["sessions"] if s in sessions]
    hop_rows = [hops[i] for i in c["hops"]]
    start = _start(lin, c)
    ends = [s["last_ts"] for s in sess if s["last_ts"] is not None] + [h["ts"] for h in hop_rows]
    end = max(ends) if ends else start
    costs = [s["cost_usd"] for s in sess if s["cost_usd"] is not None]
    cost_total = sum(costs) if costs else None
    lap_costs = []
    for lap in c["lap_sessions"]:
        vals = [sessions[s]["cost_usd"] for s in lap if s in sessions and sessions[s]["cost_usd"] is not None]
        lap_costs.append(round(sum(vals), 6) if vals else None)
    priced_laps = [x for x in lap_costs if x is not None]
    # lap duration: from one lap's first hop to the next lap's first hop
    lap_ts = [hops[i]["ts"] for i in c["lap_hops"]]
    lap_s = [(b - a).total_seconds() for a, b in zip(lap_ts, lap_ts[1:], strict=False)]
    median_lap_s = statistics.median(lap_s) if lap_s else None
    fast = median_lap_s is None or median_lap_s <= p.window_s
    # the hop that first returned to the cycle's first agent: what a cycle check would block
    closing = c["path"][c["start_index"] + period - 1] if c["start_index"] + period - 1 < len(c["path"]) \
        else None
    depths = sorted({h["depth"] for h in hop_rows if h["depth"] is not None}
                    | {s["depth"] for s in sess if s["depth"] is not None})
    duration_h = max((end - start).total_seconds() / 3600, 1e-9)
    per_agent_hour = len(hop_rows) / period / duration_h
    if laps >= p.critical_laps or (cost_total is not None and cost_total >= p.critical_cost_usd):
        severity = "critical"
    elif fast:
        severity = "high"
    else:
        severity = "medium"

    ring = " → ".join(cyc + [cyc[0]])
    root_session = hops[c["root"]]["session"]
    started_by = sessions.get(root_session, {}).get("started_by") if root_session else None
    first_session = _first_session(lin, c)
    first_sess = sessions.get(first_session) if first_session else None
    cost_note = ""
    if cost_total is not None:
        per = statistics.median(priced_laps) if priced_laps else None
        cost_note = (f"; the sessions cost ${cost_total:,.2f} as logged"
                     + (f", ${per:,.2f} per round (median)" if per is not None else ""))
    lap_note = (f"; a lap took {human_duration(median_lap_s)} (median)" if median_lap_s is not None else "")
    depth_note = (f"; hook_origin_depth stayed {depths[0]} on every hop, so depth caps never fired"
                  if len(depths) == 1 else "")
    linked = {lin.linked_by.get(i, "root") for i in c["hops"]}
    how = "the parent_completion_id lineage" if "time" not in linked else \
        f"who-triggered-whom within {human_duration(p.window_s)}"
    title = f"Trigger cycle {ring}: {laps:,} laps, {len(sess) or len(hop_rows):,} sessions"
    summary = (f"{', '.join(cyc)} kept re-triggering each other: {ring} went round {laps:,} times "
               f"from {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} "
               f"({human_duration((end - start).total_seconds())}), "
               f"{len(hop_rows):,} hooks fired and {len(sess):,} sessions started"
               f"{cost_note}{lap_note}{depth_note}. Each hop is a new session with a new completion "
               f"id; the cycle shows only through {how}"
               + (f"; started by {started_by}" if started_by else "")
               + (f", entered from {c['entry']}" if c["entry"] else "") + ".")
    evidence = []
    if first_sess and first_sess.get("start_at"):
        evidence.append({**first_sess["start_at"], "note": f"first session of the cycle ({cyc[0]})"})
    elif hop_rows:
        evidence.append({"file": hop_rows[0]["file"], "line": hop_rows[0]["line"],
                         "note": "first hop of the cycle"})
    if closing is not None:
        h = hops[closing]
        evidence.append({"file": h["file"], "line": h["line"],
                         "note": f"{h['source']} triggers {h['target']} again: the cycle closes "
                                 f"(a {human_duration(p.window_s)} cycle check would block this hook)"})
    if hop_rows:
        h = hop_rows[-1]
        evidence.append({"file": h["file"], "line": h["line"], "note": "last hook of the cycle"})
    return Finding(
        detector="trigger_cycle",
        key=f"{'→'.join(cyc)}|{first_session or _hop_ref(hop_rows[0])}|{start:%Y-%m-%dT%H:%M:%S.%f}",
        severity=severity, title=title, summary=summary,
        recommendation=_recommendation(cyc, median_lap_s, per_agent_hour, p),
        start=start, end=end,
        actors=sorted(set(cyc)), targets=sorted(set(cyc)), sessions=list(c["sessions"]),
        claim_sql=CLAIM,
        claim_params={"sessions": list(c["sessions"]), "hops": [hops[i]["event_id"] for i in c["hops"]]},
        unit_kinds=("session_start",) if sess else ("trigger",),
        details={
            "cycle": cyc, "cycle_text": ring, "cycle_length": period, "laps": laps,
            "sessions_started": len(sess), "hooks_fired": len(hop_rows),
            "cost_usd_stated": cost_total, "cost_per_round_usd": {
                "median": statistics.median(priced_laps) if priced_laps else None,
                "mean": statistics.fmean(priced_laps) if priced_laps else None,
                "first": lap_costs[:5]},
            "lap_duration_s": {"median": median_lap_s, "min": min(lap_s) if lap_s else None,
                               "max": max(lap_s) if lap_s else None},
            "within_window": fast, "window_s": p.window_s, "max_cycle_len": p.max_cycle_len,
            "hooks_per_agent_per_hour": per_agent_hour,
            "hook_origin_depths": depths, "linked_by": sorted(linked),
            "started_by": started_by, "root_session": root_session, "entered_from": c["entry"],
            "continued_to": c["exit"], "paths_truncated": c["truncated"],
        },
        evidence=[EvidenceLine(**e) for e in evidence],
    )


def _first_session(lin: Lineage, c: dict) -> str | None:
    known = [s for s in c["sessions"] if s in lin.sessions and lin.sessions[s]["started"] is not None]
    return min(known, key=lambda s: (lin.sessions[s]["started"], s)) if known else None


def _hop_ref(h: dict) -> str:
    return h["corr_id"] or f"{h['file']}:{h['line']}"


def _recommendation(cyc: list[str], lap_s: float | None, per_hour: float, p: Params) -> str:
    agents = ", ".join(cyc)
    caught = (f" (a lap here took {human_duration(lap_s)}, so that check would have stopped the first return)"
              if lap_s is not None and lap_s <= p.window_s else "")
    rate = (f"Rate-limit monitoring agents to 5 hooks/agent/hour; this cycle fired {per_hour:.1f} "
            "hooks/agent/hour, " + ("so the limit would have slowed it." if per_hour > 5 else
                                    "so a rate limit alone would not have stopped it."))
    return (f"Isolate monitoring agents from triggering each other: add {agents} to "
            "monitoring_agent_isolation so none of them can start another by hook. Before firing "
            f"A→B, check the trigger graph for B→…→A over the last {human_duration(p.window_s)} (BFS depth ≤ "
            f"{p.max_cycle_len}) and refuse{caught}. Carry hook_origin_depth across completions "
            "(child = parent + 1) and cap it, so a new completion id does not reset the chain. " + rate)


DETECTOR = Detector(
    name="trigger_cycle",
    description="agents re-triggering each other in a cycle (A→B→A, A→B→C→A) across new sessions",
    params=Params,
    run=run,
    rank=20,
    reads=("trigger", "session_start", "session_end"),
)

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

measure() follows the lineage (`find_rings` walks a Lineage's paths and `periodic_segments`
finds the repeats: both pure) and returns one Cycle with its laps, sessions, costs and lap
times; judge() applies the thresholds above; describe() writes.
"""

from __future__ import annotations

import datetime as dt
import statistics
from dataclasses import dataclass, field

import duckdb

from ..vocabulary import Severity
from .base import Detector, EvidenceLine, Finding, human_duration, param, staged
from .lineage import CLAIM, LINKS_SQL, Lineage, load_lineage


@dataclass
class Params:
    window_s: float = param(1800.0, "cycle-check window: laps closing within it are fast (seed 002: 30 min); "
                            "also links hops that carry no lineage ids")
    max_cycle_len: int = param(5, "longest cycle searched, in agents (seed 002: BFS depth ≤ 5)")
    min_laps: int = param(3, "laps (every agent of the cycle ran once) before a cycle is a finding")
    critical_laps: int = param(20, "laps that make a cycle critical")
    critical_cost_usd: float = param(100.0, "stated session cost of the cycle that makes it critical")
    max_paths: int = param(5000, "root-to-leaf paths followed per lineage tree (fan-out guard)")


# ---------------------------------------------------------------------------------------------
# measure


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


@dataclass
class Ring:
    """A cycle found along one lineage tree: where it sits in the longest path that shows it."""

    root: int  # the tree's root hop
    cycle: list[str]  # the agents of one lap, in order
    laps: int = 0
    sessions: list[str] = field(default_factory=list)  # of every path that repeats it
    hops: list[int] = field(default_factory=list)  # hop indices, likewise
    entry: str | None = None  # the agent before the cycle
    exit: str | None = None  # the agent after it
    lap_sessions: list[list[str | None]] = field(default_factory=list)
    lap_hops: list[int] = field(default_factory=list)  # the first hop of each lap
    truncated: bool = False  # the tree had more paths than `max_paths`
    path: list[int] = field(default_factory=list)
    start_index: int = 0  # where the cycle starts in `path`


def find_rings(lin: Lineage, max_cycle_len: int, min_laps: int, max_paths: int) -> list[Ring]:
    """Every cycle of at most `max_cycle_len` agents that goes round at least `min_laps` times
    along a root-to-leaf path of the lineage, once per (tree, cycle, first session)."""
    children = lin.children()
    rings: dict[tuple, Ring] = {}
    for root in lin.roots():
        paths, truncated = lin.paths(root, children, max_paths)
        for path in paths:
            agents, sess = lin.agents_and_sessions(path)
            for start, stop, period in periodic_segments(agents, max(1, max_cycle_len)):
                laps = (stop - start) // period
                if laps < min_laps:
                    continue
                first_hop = path[start] if start < len(path) else path[-1]
                key = (root, tuple(agents[start:start + period]), sess[start] or first_hop)
                c = rings.get(key)
                if c is None:
                    c = rings[key] = Ring(
                        root=root, cycle=list(agents[start:start + period]),
                        entry=agents[start - 1] if start else None, truncated=truncated, path=path,
                        start_index=start, exit=agents[stop] if stop < len(agents) else None)
                if laps > c.laps:
                    c.laps = laps
                    c.lap_sessions = [sess[start + k * period:start + (k + 1) * period]
                                      for k in range(laps)]
                    c.lap_hops = [path[start + k * period] for k in range(laps)
                                  if start + k * period < len(path)]
                c.sessions = sorted(set(c.sessions) | {s for s in sess[start:stop] if s})
                c.hops = sorted(set(c.hops) | set(path[start:stop - 1]))
    return list(rings.values())


@dataclass(frozen=True)
class Hop:
    """A hook on its line: who triggered whom."""

    file: str
    line: int
    source: str
    target: str


@dataclass
class Cycle:
    """A trigger cycle with everything that is counted of it."""

    agents: list[str]  # one lap, in order
    laps: int
    start: dt.datetime
    end: dt.datetime
    sessions: list[str]  # the sessions of its laps
    sessions_started: int  # of those, the ones the log shows starting or ending
    hook_ids: list[int]  # event ids of its hooks
    cost_usd: float | None  # the sessions' stated cost
    lap_costs: list[float | None]  # each lap's stated cost
    lap_s: list[float]  # from one lap's first hop to the next lap's
    depths: list[int]  # the hook_origin_depth values its hooks and sessions recorded
    linked_by: list[str]  # 'lineage', 'time', 'root'
    started_by: str | None
    root_session: str | None
    first_session: str | None
    entry: str | None
    exit: str | None
    truncated: bool
    hop_ref: str | None  # the first hook's completion id, or file:line, when no session is known
    first_session_at: tuple[str, int] | None  # (file, line) of the first session's start
    first_hop: Hop | None
    closing: Hop | None  # the hop that first came back to the cycle's first agent
    last_hop: Hop | None

    @property
    def median_lap_s(self) -> float | None:
        return statistics.median(self.lap_s) if self.lap_s else None

    @property
    def priced_laps(self) -> list[float]:
        return [x for x in self.lap_costs if x is not None]

    @property
    def hooks_per_agent_hour(self) -> float:
        duration_h = max((self.end - self.start).total_seconds() / 3600, 1e-9)
        return len(self.hook_ids) / len(self.agents) / duration_h


def measure(con: duckdb.DuckDBPyConnection, p: Params) -> list[Cycle]:
    lin = load_lineage(con, p.window_s)
    if not lin.hops:
        return []
    cycles = [_cycle(lin, c) for c in find_rings(lin, p.max_cycle_len, p.min_laps, p.max_paths)]
    return sorted(cycles, key=lambda c: c.start)


def _hop(h: dict) -> Hop:
    return Hop(h["file"], h["line"], h["source"], h["target"])


def _cycle(lin: Lineage, c: Ring) -> Cycle:
    hops, sessions = lin.hops, lin.sessions
    period = len(c.cycle)
    sess = [sessions[s] for s in c.sessions if s in sessions]
    hop_rows = [hops[i] for i in c.hops]
    starts = [s["started"] for s in sess if s["started"] is not None]
    hop_ts = [h["ts"] for h in hop_rows]
    start = min(starts + hop_ts) if starts or hop_ts else dt.datetime.min
    ends = [s["last_ts"] for s in sess if s["last_ts"] is not None] + hop_ts
    costs = [s["cost_usd"] for s in sess if s["cost_usd"] is not None]
    lap_costs = []
    for lap in c.lap_sessions:
        vals = [sessions[s]["cost_usd"] for s in lap if s in sessions and sessions[s]["cost_usd"] is not None]
        lap_costs.append(round(sum(vals), 6) if vals else None)
    lap_ts = [hops[i]["ts"] for i in c.lap_hops]
    closing = c.start_index + period - 1
    root_session = hops[c.root]["session"]
    known = [s for s in c.sessions if s in sessions and sessions[s]["started"] is not None]
    first_session = min(known, key=lambda s: (sessions[s]["started"], s)) if known else None
    start_at = sessions[first_session].get("start_at") if first_session else None
    return Cycle(
        agents=c.cycle, laps=c.laps, start=start, end=max(ends) if ends else start,
        sessions=list(c.sessions), sessions_started=len(sess),
        hook_ids=[h["event_id"] for h in hop_rows],
        cost_usd=sum(costs) if costs else None, lap_costs=lap_costs,
        lap_s=[(b - a).total_seconds() for a, b in zip(lap_ts, lap_ts[1:], strict=False)],
        depths=sorted({h["depth"] for h in hop_rows if h["depth"] is not None}
                      | {s["depth"] for s in sess if s["depth"] is not None}),
        linked_by=sorted({lin.linked_by.get(i, "root") for i in c.hops}),
        started_by=sessions.get(root_session, {}).get("started_by") if root_session else None,
        root_session=root_session, first_session=first_session, entry=c.entry, exit=c.exit,
        truncated=c.truncated,
        hop_ref=(hop_rows[0]["corr_id"] or f"{hop_rows[0]['file']}:{hop_rows[0]['line']}")
        if hop_rows else None,
        first_session_at=(start_at["file"], start_at["line"]) if start_at else None,
        first_hop=_hop(hop_rows[0]) if hop_rows else None,
        closing=_hop(hops[c.path[closing]]) if closing < len(c.path) else None,
        last_hop=_hop(hop_rows[-1]) if hop_rows else None,
    )


# ---------------------------------------------------------------------------------------------
# judge


def within_window(c: Cycle, p: Params) -> bool:
    """Laps close within the cycle-check window (median), so that check would have caught it."""
    return c.median_lap_s is None or c.median_lap_s <= p.window_s


def judge(c: Cycle, p: Params) -> Severity:
    if c.laps >= p.critical_laps or (c.cost_usd is not None and c.cost_usd >= p.critical_cost_usd):
        return Severity.CRITICAL
    return Severity.HIGH if within_window(c, p) else Severity.MEDIUM


# ---------------------------------------------------------------------------------------------
# describe


def describe(c: Cycle, severity: Severity, p: Params) -> Finding:
    cyc, laps, period = c.agents, c.laps, len(c.agents)
    start, end = c.start, c.end
    median_lap_s, priced_laps = c.median_lap_s, c.priced_laps
    n_hooks = len(c.hook_ids)
    ring = " → ".join(cyc + [cyc[0]])
    cost_note = ""
    if c.cost_usd is not None:
        per = statistics.median(priced_laps) if priced_laps else None
        cost_note = (f"; the sessions cost ${c.cost_usd:,.2f} as logged"
                     + (f", ${per:,.2f} per round (median)" if per is not None else ""))
    lap_note = (f"; a lap took {human_duration(median_lap_s)} (median)" if median_lap_s is not None else "")
    depth_note = (f"; hook_origin_depth stayed {c.depths[0]} on every hop, so depth caps never fired"
                  if len(c.depths) == 1 else "")
    how = "the parent_completion_id lineage" if "time" not in c.linked_by else \
        f"who-triggered-whom within {human_duration(p.window_s)}"
    title = f"Trigger cycle {ring}: {laps:,} laps, {c.sessions_started or n_hooks:,} sessions"
    summary = (f"{', '.join(cyc)} kept re-triggering each other: {ring} went round {laps:,} times "
               f"from {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} "
               f"({human_duration((end - start).total_seconds())}), "
               f"{n_hooks:,} hooks fired and {c.sessions_started:,} sessions started"
               f"{cost_note}{lap_note}{depth_note}. Each hop is a new session with a new completion "
               f"id; the cycle shows only through {how}"
               + (f"; started by {c.started_by}" if c.started_by else "")
               + (f", entered from {c.entry}" if c.entry else "") + ".")
    evidence = []
    if c.first_session_at:
        evidence.append(EvidenceLine(*c.first_session_at, f"first session of the cycle ({cyc[0]})"))
    elif c.first_hop:
        evidence.append(EvidenceLine(c.first_hop.file, c.first_hop.line, "first hop of the cycle"))
    if c.closing is not None:
        h = c.closing
        evidence.append(EvidenceLine(h.file, h.line,
                                     f"{h.source} triggers {h.target} again: the cycle closes "
                                     f"(a {human_duration(p.window_s)} cycle check would block "
                                     "this hook)"))
    if c.last_hop:
        evidence.append(EvidenceLine(c.last_hop.file, c.last_hop.line, "last hook of the cycle"))
    lap_s = c.lap_s
    return Finding(
        detector="trigger_cycle",
        key=f"{'→'.join(cyc)}|{c.first_session or c.hop_ref}|{start:%Y-%m-%dT%H:%M:%S.%f}",
        severity=severity, title=title, summary=summary,
        signal=f"a trigger cycle {ring}, {laps:,} laps",
        recommendation=_recommendation(cyc, median_lap_s, c.hooks_per_agent_hour, p),
        start=start, end=end,
        actors=sorted(set(cyc)), targets=sorted(set(cyc)), sessions=list(c.sessions),
        claim_sql=CLAIM,
        claim_params={"sessions": list(c.sessions), "hops": list(c.hook_ids)},
        unit_kinds=("session_start",) if c.sessions_started else ("trigger",),
        details={
            "cycle": cyc, "cycle_text": ring, "cycle_length": period, "laps": laps,
            "sessions_started": c.sessions_started, "hooks_fired": n_hooks,
            "cost_usd_stated": c.cost_usd, "cost_per_round_usd": {
                "median": statistics.median(priced_laps) if priced_laps else None,
                "mean": statistics.fmean(priced_laps) if priced_laps else None,
                "first": c.lap_costs[:5]},
            "lap_duration_s": {"median": median_lap_s, "min": min(lap_s) if lap_s else None,
                               "max": max(lap_s) if lap_s else None},
            "within_window": within_window(c, p), "window_s": p.window_s,
            "max_cycle_len": p.max_cycle_len,
            "hooks_per_agent_per_hour": c.hooks_per_agent_hour,
            "hook_origin_depths": c.depths, "linked_by": c.linked_by,
            "started_by": c.started_by, "root_session": c.root_session, "entered_from": c.entry,
            "continued_to": c.exit, "paths_truncated": c.truncated,
        },
        evidence=evidence,
    )


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
    run=staged(measure, judge, describe),
    rank=20,
    reads=("trigger", "session_start", "session_end"),
    needs=(("ts",), ("actor",), ("target",)),
    shape="cycle",
    # a lineage chains a trigger to the session its completion id started, or to the latest
    # trigger into its source: a format's events hold it, unless two formats name the same
    # agents, sessions or completions, whose formats are then one group (`links`)
    partition_by=("format",),
    links=LINKS_SQL,
)

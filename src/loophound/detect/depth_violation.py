"""depth_violation: hop-depth counters that reached the guard, or that were never carried.

Only logs that carry a depth take part (sven messages and room posts; the hook dispatcher's
`hook_origin_depth`). Messages are read as ping_pong reads them (one hop per message id, sven
node names resolved to peer ids, episodes split at `break_s`). Three findings:

- `guard`: messages at or past MAX_HOP_DEPTH (4). A session message stored at depth 4 that got
  no machine-paced reply is a loop the guard terminated: low, medium when it happens
  `guard_repeat` times in one episode (the loop keeps restarting). A reply to it, or a message
  past the limit, means the guard did not hold: high. A room post stored at depth ≥ 4 should
  have been dropped before storing: medium.
- `not_carried`: machine-paced replies (within `machine_reply_s`) whose depth is not above the
  message they answer, so the guard can never fire (sven: the echo loop and the room flood,
  both stuck at depth 1). A new `user` turn after an `assistant` answer may restart at 0 and
  is not counted. medium from `stuck_min` such replies, high from `stuck_high`.
- `hook_depth`: a hook lineage (parent_completion_id chain) longer than `hook_depth_cap` hops
  whose recorded depth never grows (seed 002: hook_origin_depth stays 0). low when the lineage
  revisits agents (trigger_cycle reports that loop, at high), medium when it does not. Claims
  the hooks and sessions a depth cap of `hook_depth_cap` would have prevented.

measure() returns one measurement per candidate: a GuardEpisode or a StuckEpisode per message
episode (SQL), a StuckLineage per hook lineage (`stuck_lineages`, pure over a Lineage);
judge() applies the rules above (`guard_outcome` names the guard's case); describe() writes.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import duckdb

from ..vocabulary import Severity
from .base import Detector, EvidenceLine, Finding, param, staged
from .lineage import CLAIM as LINEAGE_CLAIM
from .lineage import LINKS_SQL as LINEAGE_LINKS
from .lineage import Lineage, load_lineage
from .messages import HOPS_CTE, SVEN, UNIT_KINDS, Spot, aliases_of, any_hops, display
from .messages import LINKS_SQL as MESSAGE_LINKS


@dataclass
class Params:
    max_hop_depth: int = param(SVEN.max_hop_depth, "sven MAX_HOP_DEPTH (= MAX_ROOM_POST_DEPTH)")
    guard_repeat: int = param(3, "guard-terminated messages in one episode that make it medium")
    machine_reply_s: float = param(60.0, "a reply within this many seconds is automatic")
    stuck_min: int = param(10, "automatic replies that did not raise the depth before a finding")
    stuck_high: int = param(1000, "such replies that make the finding high")
    break_s: float = param(SVEN.break_threshold_s, "a pause this long starts a new episode "
                                                      "(sven DEFAULT_BREAK_THRESHOLD)")
    hook_depth_cap: int = param(3, "hops a depth-carrying hook dispatcher would allow (3 in the public "
                                "analogue, log-formats §6.13)")
    window_s: float = param(1800.0, "links hooks that carry no lineage ids (as trigger_cycle)")


# ---------------------------------------------------------------------------------------------
# measure

SQL = "WITH " + HOPS_CTE + """,
flagged AS (
  SELECT *,
    kind <> 'room_post' AND depth >= $max_hop_depth AS at_guard,
    depth > $max_hop_depth AS past_guard,
    kind = 'room_post' AND depth >= $max_hop_depth AS room_at_guard,
    sw AND gap_ms <= $machine_ms AND depth <= prev_depth
      AND NOT (role IS NOT DISTINCT FROM 'user' AND prev_role IS NOT DISTINCT FROM 'assistant')
      AS stuck,
    lead(sender) OVER p <> sender AND NOT lead(newep) OVER p
      AND lead(gap_ms) OVER p <= $machine_ms AS answered
  FROM hops WHERE depth IS NOT NULL
  WINDOW p AS (PARTITION BY chan, pa, pb ORDER BY ts, file, line, event_id)
)
SELECT chan, pa, pb, episode, list(DISTINCT kind ORDER BY kind) AS kinds,
  min(ts) AS ep_start, max(ts) AS ep_stop, count(*) AS hops,
  count(*) FILTER (WHERE at_guard) AS n_guard,
  count(*) FILTER (WHERE at_guard AND answered) AS n_answered,
  count(*) FILTER (WHERE past_guard) AS n_past,
  count(*) FILTER (WHERE room_at_guard) AS n_room,
  count(*) FILTER (WHERE stuck) AS n_stuck,
  max(depth) AS max_depth,
  list(DISTINCT depth ORDER BY depth) FILTER (WHERE stuck) AS stuck_depths,
  list(event_id ORDER BY ts, file, line, event_id)
    FILTER (WHERE at_guard OR past_guard OR room_at_guard) AS guard_ids,
  list(event_id ORDER BY ts, file, line, event_id) FILTER (WHERE stuck) AS stuck_ids,
  min(ts) FILTER (WHERE at_guard OR past_guard OR room_at_guard) AS guard_start,
  max(ts) FILTER (WHERE at_guard OR past_guard OR room_at_guard) AS guard_stop,
  min(ts) FILTER (WHERE stuck) AS stuck_start, max(ts) FILTER (WHERE stuck) AS stuck_stop,
  median(gap_ms) FILTER (WHERE stuck) AS stuck_median_gap_ms,
  list(struct_pack(file := file, line := line, depth := depth, answered := answered)
       ORDER BY ts, file, line) FILTER (WHERE at_guard OR past_guard OR room_at_guard) AS guard_at,
  arg_min(struct_pack(file := file, line := line, depth := depth), (ts, file, line))
    FILTER (WHERE stuck) AS first_stuck,
  arg_max(struct_pack(file := file, line := line, depth := depth), (ts, file, line))
    FILTER (WHERE stuck) AS last_stuck
FROM flagged
GROUP BY chan, pa, pb, episode
HAVING count(*) FILTER (WHERE at_guard OR past_guard OR room_at_guard) > 0
    OR count(*) FILTER (WHERE stuck) >= $stuck_min
ORDER BY ep_start, chan, pa, pb
"""

CLAIM = "SELECT CAST(unnest($ids) AS BIGINT) AS event_id"


MAX_PATHS = 5000  # root-to-leaf paths followed per hook lineage tree (fan-out guard)


@dataclass
class PairEpisode:
    """One pair's messages on one channel, between pauses of `break_s`."""

    channel: str
    pair: tuple[str, str]
    names: tuple[str, str]  # as shown: a sven node's local name with its peer id
    is_room: bool
    messages: int  # hops in the episode
    start: dt.datetime
    stop: dt.datetime
    ids: list[int]  # the messages the finding claims


@dataclass
class GuardEpisode(PairEpisode):
    """Messages that reached the hop-depth guard."""

    at_guard: int  # session messages at or past the guard
    answered: int  # of those, answered at machine pace anyway
    past: int  # messages deeper than the guard allows
    room: int  # room posts stored at the guard's depth
    max_depth: int
    hits: list[tuple[Spot, bool]]  # each message at the guard, and whether it was answered

    @property
    def held(self) -> int:
        """Messages the guard stopped: stored at its depth, never answered."""
        return self.at_guard - self.answered


@dataclass
class StuckEpisode(PairEpisode):
    """Automatic replies whose depth was not above the message they answered."""

    depths: list[int]
    median_gap_ms: float | None
    first: Spot | None
    last: Spot | None


@dataclass
class StuckLineage:
    """A hook lineage longer than the cap whose recorded depth never grew."""

    hops: int  # of its longest path
    depth: int | None  # the depth every hop recorded
    cap: int
    hooks_beyond_cap: list[int]  # hop indices a cap would have refused
    sessions_beyond_cap: list[str]
    hook_ids: list[int]  # event ids of those hooks
    agents: list[str]
    revisits_agents: bool
    start: dt.datetime
    end: dt.datetime
    first: dict[str, Any]  # the lineage's first hook
    over: dict[str, Any]  # the first hook past the cap
    last: dict[str, Any]  # the last hook of its longest path
    truncated: bool


def measure(con: duckdb.DuckDBPyConnection,
            p: Params) -> list[GuardEpisode | StuckEpisode | StuckLineage]:
    out: list[GuardEpisode | StuckEpisode | StuckLineage] = []
    rows = con.execute(SQL, {
        "break_ms": p.break_s * 1000,
        "max_hop_depth": p.max_hop_depth, "machine_ms": p.machine_reply_s * 1000,
        "stuck_min": p.stuck_min,
    }).fetchall() if any_hops(con) else []
    if rows:
        cols = [d[0] for d in con.description]
        aliases = aliases_of(con)
        for row in rows:
            r = dict(zip(cols, row, strict=True))
            pair = {"channel": r["chan"], "pair": (r["pa"], r["pb"]),
                    "names": (display(r["pa"], aliases), display(r["pb"], aliases)),
                    "is_room": "room_post" in r["kinds"], "messages": r["hops"]}
            if r["guard_ids"]:
                out.append(GuardEpisode(
                    **pair, start=r["guard_start"], stop=r["guard_stop"], ids=list(r["guard_ids"]),
                    at_guard=r["n_guard"], answered=r["n_answered"], past=r["n_past"],
                    room=r["n_room"], max_depth=r["max_depth"],
                    hits=[(Spot(g["file"], g["line"], g["depth"]), g["answered"])
                          for g in r["guard_at"]]))
            if r["n_stuck"] >= p.stuck_min:
                out.append(StuckEpisode(
                    **pair, start=r["stuck_start"], stop=r["stuck_stop"], ids=list(r["stuck_ids"]),
                    depths=r["stuck_depths"] or [], median_gap_ms=r["stuck_median_gap_ms"],
                    first=Spot.of(r["first_stuck"]), last=Spot.of(r["last_stuck"])))
    lin = load_lineage(con, p.window_s)
    out.extend(stuck_lineages(lin, max(0, p.hook_depth_cap)))
    return out


def stuck_lineages(lin: Lineage, cap: int, max_paths: int = MAX_PATHS) -> list[StuckLineage]:
    """Hook lineages with a path longer than `cap` hops along which no recorded depth grew
    (every such path of the tree), with what a depth cap of `cap` would have refused."""
    if not lin.hops:
        return []
    children = lin.children()
    out = []
    for root in lin.roots():
        paths, truncated = lin.paths(root, children, max_paths)
        longest = max(paths, key=len)
        if len(longest) <= cap:
            continue
        beyond_hops: set[int] = set()
        beyond_sessions: set[str] = set()
        agents_seen: set[str] = set()
        stuck = True
        for path in paths:
            if len(path) <= cap:
                continue
            depths = [lin.hops[i]["depth"] for i in path]
            if any(d is None for d in depths) or any(b > a for a, b in zip(depths, depths[1:], strict=False)):
                stuck = False
                break
            agents, sess = lin.agents_and_sessions(path)
            agents_seen |= set(agents)
            beyond_hops |= set(path[cap:])
            beyond_sessions |= {s for s in sess[cap + 1:] if s}
        if not stuck or not beyond_hops:
            continue
        agents, _ = lin.agents_and_sessions(longest)
        beyond = sorted(beyond_hops)
        start, end = lin.hops[beyond[0]]["ts"], max(lin.hops[i]["ts"] for i in beyond)
        for s in beyond_sessions:
            if s in lin.sessions and lin.sessions[s]["last_ts"] is not None:
                end = max(end, lin.sessions[s]["last_ts"])
        out.append(StuckLineage(
            hops=len(longest), depth=lin.hops[longest[0]]["depth"], cap=cap,
            hooks_beyond_cap=beyond, sessions_beyond_cap=sorted(beyond_sessions),
            hook_ids=[lin.hops[i]["event_id"] for i in beyond], agents=sorted(agents_seen),
            revisits_agents=len(set(agents)) < len(agents), start=start, end=end,
            first=lin.hops[root], over=lin.hops[longest[cap]], last=lin.hops[longest[-1]],
            truncated=truncated))
    return out


# ---------------------------------------------------------------------------------------------
# judge

GUARD_OUTCOMES = {  # what happened at the guard → its severity, and how it is said
    "not_held": (Severity.HIGH, "the hop-depth guard did not hold"),
    "room_stored": (Severity.MEDIUM, "room posts at the limit were stored instead of dropped"),
    "restarting": (Severity.MEDIUM, "a loop kept restarting and the guard stopped it each time"),
    "stopped": (Severity.LOW, "a loop was stopped by the guard"),
}


def guard_outcome(g: GuardEpisode, p: Params) -> str:
    """What happened at the guard: a message past it or answered at it (it did not hold), room
    posts stored at it, a loop it stopped `guard_repeat` times or more, or once or twice."""
    if g.past or g.answered:
        return "not_held"
    if g.room:
        return "room_stored"
    return "restarting" if g.held >= p.guard_repeat else "stopped"


def judge(m: GuardEpisode | StuckEpisode | StuckLineage, p: Params) -> Severity:
    if isinstance(m, GuardEpisode):
        return GUARD_OUTCOMES[guard_outcome(m, p)][0]
    if isinstance(m, StuckEpisode):
        return Severity.HIGH if len(m.ids) >= p.stuck_high else Severity.MEDIUM
    # a lineage that revisits agents is a trigger cycle, which trigger_cycle reports higher
    return Severity.LOW if m.revisits_agents else Severity.MEDIUM


# ---------------------------------------------------------------------------------------------
# describe


def describe(m: GuardEpisode | StuckEpisode | StuckLineage, severity: Severity,
             p: Params) -> Finding:
    if isinstance(m, GuardEpisode):
        return _guard_finding(m, severity, p)
    if isinstance(m, StuckEpisode):
        return _stuck_finding(m, severity, p)
    return _hook_finding(m, severity)


def _pair_finding(e: PairEpisode, kind: str, severity: Severity, details: dict[str, Any],
                  **text: Any) -> Finding:
    """A finding about a pair's episode: who, when, what it claims, and the details every
    such finding starts with (its kind, channel and pair)."""
    (a, b), (da, db) = e.pair, e.names
    return Finding(
        detector="depth_violation",
        key=f"{kind}|{e.channel}|{a}|{b}|{e.start:%Y-%m-%dT%H:%M:%S.%f}",
        severity=severity, start=e.start, end=e.stop,
        actors=[a, b], targets=[e.channel] if e.is_room else [b, a],
        sessions=[e.channel] if e.is_room else [f"{a}↔{b}"],
        claim_sql=CLAIM, claim_params={"ids": e.ids}, unit_kinds=UNIT_KINDS,
        details={"kind": kind, "channel": e.channel, "pair": [a, b], "names": {a: da, b: db},
                 **details},
        **text,
    )


def _guard_finding(g: GuardEpisode, severity: Severity, p: Params) -> Finding:
    da, db = g.names
    held = g.held
    what = GUARD_OUTCOMES[guard_outcome(g, p)][1]
    parts = []
    if held:
        parts.append(f"{held} message(s) stored at depth ≥ {p.max_hop_depth} with no reply (loop "
                     "terminated by the guard)")
    if g.answered:
        parts.append(f"{g.answered} message(s) at the limit were answered anyway")
    if g.past:
        parts.append(f"{g.past} message(s) went past the limit (max depth {g.max_depth})")
    if g.room:
        parts.append(f"{g.room} room post(s) stored at depth ≥ {p.max_hop_depth}, which "
                     "on_gossipsub_message should drop before storing")
    where = g.channel if g.is_room else f"{da} ⇄ {db}"
    evidence = [spot.says(f"depth {spot.depth}: " + (
                    "answered although at the limit" if answered else
                    "stored, not answered: the guard stopped the chain"))
                for spot, answered in g.hits[:4]]
    rec = ("Hop-depth guard: " + (
        "reject at depth ≥ MAX_HOP_DEPTH before the LLM runs (execute_inbound_session_message, "
        "run_session_executor, on_gossipsub_message before store and emit); "
        if severity == "high" or g.room else
        "it worked; find out why the chain restarts on every turn (an agent forwarding requests as "
        "role `user`) and answer locally instead of re-delegating; ")
        + "carry depth forward across hops and protocols so the shared MAX_HOP_DEPTH = "
          f"{p.max_hop_depth} budget ends every chain; rate-cap auto-replies per peer.")
    return _pair_finding(
        g, "guard", severity,
        title=f"{where}: {len(g.ids)} message(s) reached MAX_HOP_DEPTH {p.max_hop_depth} ({what})",
        signal=f"{len(g.ids)} message(s) stopped at the MAX_HOP_DEPTH {p.max_hop_depth} guard",
        summary=f"Between {g.start:%Y-%m-%d %H:%M:%S} and {g.stop:%H:%M:%S} on "
                f"{where}: " + "; ".join(parts) + ".",
        recommendation=rec,
        details={"at_guard": g.at_guard,
                 "terminated_by_guard": held, "answered_at_guard": g.answered,
                 "past_guard": g.past, "room_posts_at_guard": g.room,
                 "max_depth": g.max_depth, "max_hop_depth": p.max_hop_depth,
                 "episode_messages": g.messages},
        evidence=evidence,
    )


def _stuck_finding(s: StuckEpisode, severity: Severity, p: Params) -> Finding:
    da, db = s.names
    n = len(s.ids)
    depths = s.depths
    dtext = str(depths[0]) if len(depths) == 1 else ", ".join(map(str, depths))
    where = f"{s.channel} ({da} ⇄ {db})" if s.is_room else f"{da} ⇄ {db}"
    gap = s.median_gap_ms
    evidence = []
    if s.first:
        evidence.append(s.first.says(f"automatic reply at depth {s.first.depth}, not above the "
                                     "message it answers"))
    if s.last:
        evidence.append(s.last.says(f"last such reply (depth {s.last.depth})"))
    rec = (("The reactive room handler must set room_depth = incoming_post.depth before the agent "
            "runs, so replies go out at depth + 1 and MAX_ROOM_POST_DEPTH can drop the chain.")
           if s.is_room else
           ("Carry depth forward: reply at incoming depth + 1; seed SessionDepthTracker.default_depth "
            "and task_depth from the incoming message (build_session_agent must pass session_depth, "
            "not 0), so MAX_HOP_DEPTH can end the chain."))
    return _pair_finding(
        s, "not_carried", severity,
        title=f"{where}: depth not carried across {n:,} automatic replies (stuck at {dtext})",
        signal=f"depth not carried across {n:,} replies",
        summary=(f"{n:,} replies between {da} and {db} came within {p.machine_reply_s:g} s (median "
                 f"{(gap or 0) / 1000:.3g} s) and carried depth {dtext}, no higher than the message "
                 f"they answered, from {s.start:%Y-%m-%d %H:%M:%S} to "
                 f"{s.stop:%H:%M:%S}. With the depth not growing, the MAX_HOP_DEPTH = "
                 f"{p.max_hop_depth} guard can never stop this exchange."),
        recommendation=rec,
        details={"replies_not_carried": n,
                 "depths": depths, "median_gap_ms": gap, "episode_messages": s.messages,
                 "max_hop_depth": p.max_hop_depth},
        evidence=evidence,
    )


def _hook_finding(h: StuckLineage, severity: Severity) -> Finding:
    first, over, last, cap, names = h.first, h.over, h.last, h.cap, h.agents
    root_ref = first["session"] or first["corr_id"] or f"{first['file']}:{first['line']}"
    return Finding(
        detector="depth_violation",
        key=f"hook_depth|{root_ref}|{first['ts']:%Y-%m-%dT%H:%M:%S.%f}",
        severity=severity,
        signal=f"hook depth stuck at {h.depth} along {h.hops} hops",
        title=(f"hook_origin_depth stuck at {h.depth} along a {h.hops}-hop lineage "
               f"({', '.join(names[:5])}{'…' if len(names) > 5 else ''})"),
        summary=(f"Starting with {first['source']} → {first['target']} at "
                 f"{first['ts']:%Y-%m-%d %H:%M:%S}, {h.hops} hooks each started the next session "
                 f"(parent_completion_id lineage) and every hop recorded depth {h.depth}: "
                 "each new completion reset the counter. A dispatcher that carried the depth and "
                 f"capped it at {cap} would have refused {len(h.hooks_beyond_cap)} hook(s) and "
                 f"{len(h.sessions_beyond_cap)} session(s)"
                 + (" — the lineage revisits agents: see the trigger_cycle finding." if h.revisits_agents
                    else ".")),
        recommendation=("Carry hook_origin_depth across completions: a session started by a hook "
                        "runs at the parent's depth + 1, its completion keeps it, and the dispatcher "
                        f"refuses hooks beyond a cap (e.g. {cap}). Per-completion dedup and circuit "
                        "breakers cannot see a chain that makes a new completion id at every hop."),
        start=h.start, end=h.end, actors=names, targets=names,
        sessions=list(h.sessions_beyond_cap),
        claim_sql=LINEAGE_CLAIM,
        claim_params={"sessions": list(h.sessions_beyond_cap), "hops": list(h.hook_ids)},
        unit_kinds=("session_start",) if h.sessions_beyond_cap else ("trigger",),
        details={"kind": "hook_depth", "lineage_hops": h.hops, "recorded_depth": h.depth,
                 "depth_cap": cap, "hooks_beyond_cap": len(h.hooks_beyond_cap),
                 "sessions_beyond_cap": len(h.sessions_beyond_cap),
                 "revisits_agents": h.revisits_agents,
                 "root_session": first["session"], "paths_truncated": h.truncated},
        evidence=[
            EvidenceLine(first["file"], first["line"],
                         f"first hook of the lineage (depth {first['depth']})"),
            EvidenceLine(over["file"], over["line"],
                         f"hop {cap + 1} still at depth {over['depth']}: a cap of {cap} "
                         "would refuse it"),
            EvidenceLine(last["file"], last["line"], f"hop {h.hops}, depth {last['depth']}")],
    )


DETECTOR = Detector(
    name="depth_violation",
    description="hop-depth counters at the MAX_HOP_DEPTH guard, or never carried across hops",
    params=Params,
    run=staged(measure, judge, describe),
    rank=40,
    reads=("message", "room_post", "record", "trigger", "session_start", "session_end"),
    needs=(("ts",), ("depth",)),
    shape="pair",
    # ping_pong's hops and episodes, and trigger_cycle's lineages (see there)
    partition_by=("format",),
    links=MESSAGE_LINKS + "UNION ALL" + LINEAGE_LINKS,
)

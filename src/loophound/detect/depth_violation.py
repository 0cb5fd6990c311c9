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
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from .base import Detector, EvidenceLine, Finding, param
from .lineage import CLAIM as LINEAGE_CLAIM
from .lineage import load_lineage
from .messages import HOPS_CTE, MESSAGE_KINDS, SVEN, UNIT_KINDS, aliases_of, display


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


def run(con: duckdb.DuckDBPyConnection, p: Params) -> list[Finding]:
    rows = con.execute(SQL, {
        "kinds": list(MESSAGE_KINDS), "break_ms": p.break_s * 1000,
        "max_hop_depth": p.max_hop_depth, "machine_ms": p.machine_reply_s * 1000,
        "stuck_min": p.stuck_min,
    }).fetchall()
    cols = [d[0] for d in con.description]
    out: list[Finding] = []
    if rows:
        aliases = aliases_of(con)
        for row in rows:
            r = dict(zip(cols, row, strict=True))
            if r["guard_ids"]:
                out.append(_guard_finding(r, p, aliases))
            if r["n_stuck"] >= p.stuck_min:
                out.append(_stuck_finding(r, p, aliases))
    out.extend(_hook_findings(con, p))
    return out


def _names(r: dict, aliases: dict[str, list[str]]) -> tuple[str, str, bool]:
    return display(r["pa"], aliases), display(r["pb"], aliases), "room_post" in r["kinds"]


def _guard_finding(r: dict, p: Params, aliases: dict[str, list[str]]) -> Finding:
    da, db, is_room = _names(r, aliases)
    held = r["n_guard"] - r["n_answered"]
    if r["n_past"] or r["n_answered"]:
        severity, what = "high", "the hop-depth guard did not hold"
    elif r["n_room"]:
        severity, what = "medium", "room posts at the limit were stored instead of dropped"
    elif held >= p.guard_repeat:
        severity, what = "medium", "a loop kept restarting and the guard stopped it each time"
    else:
        severity, what = "low", "a loop was stopped by the guard"
    parts = []
    if held:
        parts.append(f"{held} message(s) stored at depth ≥ {p.max_hop_depth} with no reply (loop "
                     "terminated by the guard)")
    if r["n_answered"]:
        parts.append(f"{r['n_answered']} message(s) at the limit were answered anyway")
    if r["n_past"]:
        parts.append(f"{r['n_past']} message(s) went past the limit (max depth {r['max_depth']})")
    if r["n_room"]:
        parts.append(f"{r['n_room']} room post(s) stored at depth ≥ {p.max_hop_depth}, which "
                     "on_gossipsub_message should drop before storing")
    where = r["chan"] if is_room else f"{da} ⇄ {db}"
    evidence = []
    for g in r["guard_at"][:4]:
        note = (f"depth {g['depth']}: " + ("answered although at the limit" if g["answered"] else
                                           "stored, not answered: the guard stopped the chain"))
        evidence.append({"file": g["file"], "line": g["line"], "note": note})
    rec = ("Hop-depth guard: " + (
        "reject at depth ≥ MAX_HOP_DEPTH before the LLM runs (execute_inbound_session_message, "
        "run_session_executor, on_gossipsub_message before store and emit); "
        if severity == "high" or r["n_room"] else
        "it worked; find out why the chain restarts on every turn (an agent forwarding requests as "
        "role `user`) and answer locally instead of re-delegating; ")
        + "carry depth forward across hops and protocols so the shared MAX_HOP_DEPTH = "
          f"{p.max_hop_depth} budget ends every chain; rate-cap auto-replies per peer.")
    return Finding(
        detector="depth_violation",
        key=f"guard|{r['chan']}|{r['pa']}|{r['pb']}|{r['guard_start']:%Y-%m-%dT%H:%M:%S.%f}",
        severity=severity,
        title=f"{where}: {len(r['guard_ids'])} message(s) reached MAX_HOP_DEPTH {p.max_hop_depth} ({what})",
        summary=f"Between {r['guard_start']:%Y-%m-%d %H:%M:%S} and {r['guard_stop']:%H:%M:%S} on "
                f"{where}: " + "; ".join(parts) + ".",
        recommendation=rec,
        start=r["guard_start"], end=r["guard_stop"],
        actors=[r["pa"], r["pb"]], targets=[r["chan"]] if is_room else [r["pb"], r["pa"]],
        sessions=[r["chan"]] if is_room else [f"{r['pa']}↔{r['pb']}"],
        claim_sql=CLAIM, claim_params={"ids": list(r["guard_ids"])}, unit_kinds=UNIT_KINDS,
        details={"kind": "guard", "channel": r["chan"], "pair": [r["pa"], r["pb"]],
                 "names": {r["pa"]: da, r["pb"]: db}, "at_guard": r["n_guard"],
                 "terminated_by_guard": held, "answered_at_guard": r["n_answered"],
                 "past_guard": r["n_past"], "room_posts_at_guard": r["n_room"],
                 "max_depth": r["max_depth"], "max_hop_depth": p.max_hop_depth,
                 "episode_messages": r["hops"]},
        evidence=[EvidenceLine(**e) for e in evidence],
    )


def _stuck_finding(r: dict, p: Params, aliases: dict[str, list[str]]) -> Finding:
    da, db, is_room = _names(r, aliases)
    n = r["n_stuck"]
    severity = "high" if n >= p.stuck_high else "medium"
    depths = r["stuck_depths"] or []
    dtext = str(depths[0]) if len(depths) == 1 else ", ".join(map(str, depths))
    where = f"{r['chan']} ({da} ⇄ {db})" if is_room else f"{da} ⇄ {db}"
    gap = r["stuck_median_gap_ms"]
    evidence = []
    if r["first_stuck"]:
        f = r["first_stuck"]
        evidence.append({"file": f["file"], "line": f["line"],
                         "note": f"automatic reply at depth {f['depth']}, not above the message it answers"})
    if r["last_stuck"]:
        f = r["last_stuck"]
        evidence.append({"file": f["file"], "line": f["line"],
                         "note": f"last such reply (depth {f['depth']})"})
    rec = (("The reactive room handler must set room_depth = incoming_post.depth before the agent "
            "runs, so replies go out at depth + 1 and MAX_ROOM_POST_DEPTH can drop the chain.")
           if is_room else
           ("Carry depth forward: reply at incoming depth + 1; seed SessionDepthTracker.default_depth "
            "and task_depth from the incoming message (build_session_agent must pass session_depth, "
            "not 0), so MAX_HOP_DEPTH can end the chain."))
    return Finding(
        detector="depth_violation",
        key=f"not_carried|{r['chan']}|{r['pa']}|{r['pb']}|{r['stuck_start']:%Y-%m-%dT%H:%M:%S.%f}",
        severity=severity,
        title=f"{where}: depth not carried across {n:,} automatic replies (stuck at {dtext})",
        summary=(f"{n:,} replies between {da} and {db} came within {p.machine_reply_s:g} s (median "
                 f"{(gap or 0) / 1000:.3g} s) and carried depth {dtext}, no higher than the message "
                 f"they answered, from {r['stuck_start']:%Y-%m-%d %H:%M:%S} to "
                 f"{r['stuck_stop']:%H:%M:%S}. With the depth not growing, the MAX_HOP_DEPTH = "
                 f"{p.max_hop_depth} guard can never stop this exchange."),
        recommendation=rec,
        start=r["stuck_start"], end=r["stuck_stop"],
        actors=[r["pa"], r["pb"]], targets=[r["chan"]] if is_room else [r["pb"], r["pa"]],
        sessions=[r["chan"]] if is_room else [f"{r['pa']}↔{r['pb']}"],
        claim_sql=CLAIM, claim_params={"ids": list(r["stuck_ids"])}, unit_kinds=UNIT_KINDS,
        details={"kind": "not_carried", "channel": r["chan"], "pair": [r["pa"], r["pb"]],
                 "names": {r["pa"]: da, r["pb"]: db}, "replies_not_carried": n,
                 "depths": depths, "median_gap_ms": gap, "episode_messages": r["hops"],
                 "max_hop_depth": p.max_hop_depth},
        evidence=[EvidenceLine(**e) for e in evidence],
    )


def _hook_findings(con: duckdb.DuckDBPyConnection, p: Params) -> list[Finding]:
    lin = load_lineage(con, p.window_s)
    if not lin.hops:
        return []
    children = lin.children()
    cap = max(0, p.hook_depth_cap)
    out = []
    for root in lin.roots():
        paths, truncated = lin.paths(root, children, 5000)
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
        agents, sess = lin.agents_and_sessions(longest)
        cyclic = len(set(agents)) < len(agents)
        depth = lin.hops[longest[0]]["depth"]
        first = lin.hops[root]
        over = lin.hops[longest[cap]]
        last = lin.hops[longest[-1]]
        beyond = sorted(beyond_hops)
        start, end = lin.hops[beyond[0]]["ts"], max(lin.hops[i]["ts"] for i in beyond)
        for s in beyond_sessions:
            if s in lin.sessions and lin.sessions[s]["last_ts"] is not None:
                end = max(end, lin.sessions[s]["last_ts"])
        names = sorted(agents_seen)
        root_ref = first["session"] or first["corr_id"] or f"{first['file']}:{first['line']}"
        out.append(Finding(
            detector="depth_violation",
            key=f"hook_depth|{root_ref}|{first['ts']:%Y-%m-%dT%H:%M:%S.%f}",
            severity="low" if cyclic else "medium",
            title=(f"hook_origin_depth stuck at {depth} along a {len(longest)}-hop lineage "
                   f"({', '.join(names[:5])}{'…' if len(names) > 5 else ''})"),
            summary=(f"Starting with {first['source']} → {first['target']} at "
                     f"{first['ts']:%Y-%m-%d %H:%M:%S}, {len(longest)} hooks each started the next session "
                     f"(parent_completion_id lineage) and every hop recorded depth {depth}: "
                     "each new completion reset the counter. A dispatcher that carried the depth and "
                     f"capped it at {cap} would have refused {len(beyond_hops)} hook(s) and "
                     f"{len(beyond_sessions)} session(s)"
                     + (" — the lineage revisits agents: see the trigger_cycle finding." if cyclic
                        else ".")),
            recommendation=("Carry hook_origin_depth across completions: a session started by a hook "
                            "runs at the parent's depth + 1, its completion keeps it, and the dispatcher "
                            f"refuses hooks beyond a cap (e.g. {cap}). Per-completion dedup and circuit "
                            "breakers cannot see a chain that makes a new completion id at every hop."),
            start=start, end=end, actors=names, targets=names,
            sessions=sorted(beyond_sessions),
            claim_sql=LINEAGE_CLAIM,
            claim_params={"sessions": sorted(beyond_sessions),
                          "hops": [lin.hops[i]["event_id"] for i in beyond]},
            unit_kinds=("session_start",) if beyond_sessions else ("trigger",),
            details={"kind": "hook_depth", "lineage_hops": len(longest), "recorded_depth": depth,
                     "depth_cap": cap, "hooks_beyond_cap": len(beyond_hops),
                     "sessions_beyond_cap": len(beyond_sessions), "revisits_agents": cyclic,
                     "root_session": first["session"], "paths_truncated": truncated},
            evidence=[
                EvidenceLine(first["file"], first["line"],
                             f"first hook of the lineage (depth {first['depth']})"),
                EvidenceLine(over["file"], over["line"],
                             f"hop {cap + 1} still at depth {over['depth']}: a cap of {cap} "
                             "would refuse it"),
                EvidenceLine(last["file"], last["line"],
                             f"hop {len(longest)}, depth {last['depth']}")],
        ))
    return out


DETECTOR = Detector(
    name="depth_violation",
    description="hop-depth counters at the MAX_HOP_DEPTH guard, or never carried across hops",
    params=Params,
    run=run,
    rank=40,
    reads=("message", "room_post", "record", "trigger", "session_start", "session_end"),
)

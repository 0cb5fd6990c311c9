"""ping_pong: two parties bouncing messages A→B→A→B at machine pace, across senders.

The unit is a *hop*: one message from a sender to a receiver.
- Messages (`kind` message, and generic records that name both an actor and a target): one hop
  per message. A message recorded by both ends (sven: the sender's store has it outbound, the
  receiver's store inbound, same `message_id` = `corr_id`) is one hop; the sender's copy is
  the one claimed. The local node of a sven store is named after its directory (`node-a`),
  while its peers know it by peer id: the two records of one message id tie the two names
  together (outbound actor = local name ≡ inbound actor = peer id), and the peer id is used.
- Room posts: a post answers the post just before it in the same room; a hop is a post whose
  predecessor was written by someone else (the receiver). The post a run starts from is
  claimed too.

Hops of one unordered pair on one channel form episodes, split at a pause of `break_s` or
more (sven's DEFAULT_BREAK_THRESHOLD, 1 h). An episode is a ping-pong when the turn passes
back and forth at least `min_rounds` times *and both sides answer at machine pace* (the median
reply delay of the slower side is at most `machine_reply_s`). A person talking to an agent
has a slow side (minutes), so it is not a finding unless it runs to `slow_min_rounds` rounds
without a 1-hour break (then low, medium at most).

Severity (machine-paced episodes):
- medium: `min_rounds` ≤ rounds < `high_rounds`; or every chain ended at MAX_HOP_DEPTH (the
  depth guard stopped it each time; high only when it restarted `guarded_high_chains` times).
- high: rounds ≥ `high_rounds`; when the roles are healthy (one side asks as `user`, the other
  answers as `assistant`) high needs `critical_rounds`.
- critical: rounds ≥ `critical_rounds`, not stopped by the guard, and the roles show the loop
  (auto-replies to `assistant`, or `user` forwarded both ways) or no roles are logged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import duckdb

from .base import Detector, EvidenceLine, Finding, human_duration, param
from .messages import HOPS_CTE, MESSAGE_KINDS, SVEN, UNIT_KINDS, aliases_of, display


@dataclass
class Params:
    min_rounds: int = param(6, "round trips (turn passes back and forth) before an episode is a finding")
    high_rounds: int = param(20, "machine-paced round trips that make a finding high")
    critical_rounds: int = param(100, "machine-paced round trips that make a looping pair critical")
    machine_reply_s: float = param(60.0, "both sides' median reply delay at or under this is machine pace")
    slow_min_rounds: int = param(100, "round trips that make even a human-paced pair a (low) finding")
    break_s: float = param(SVEN.break_threshold_s, "a pause this long starts a new episode "
                                                      "(sven DEFAULT_BREAK_THRESHOLD)")
    max_hop_depth: int = param(SVEN.max_hop_depth, "sven MAX_HOP_DEPTH: depth at which the guard drops")
    guarded_high_chains: int = param(20, "guard-stopped chains in one episode that make it high")


SQL = "WITH " + HOPS_CTE + """
SELECT chan, pa, pb, episode,
  count(*) AS hops, sum(copies) AS stored_records, min(from_ts) AS start, max(ts) AS stop,
  count(*) FILTER (WHERE sw) AS switches,
  list(DISTINCT kind ORDER BY kind) AS kinds,
  median(gap_ms) FILTER (WHERE NOT newep) AS median_gap_ms,
  quantile_cont(gap_ms, 0.1) FILTER (WHERE NOT newep) AS p10_gap_ms,
  quantile_cont(gap_ms, 0.9) FILTER (WHERE NOT newep) AS p90_gap_ms,
  median(gap_ms) FILTER (WHERE sw AND sender = pa) AS reply_a_ms,
  median(gap_ms) FILTER (WHERE sw AND sender = pb) AS reply_b_ms,
  count(*) FILTER (WHERE sender = pa) AS from_a,
  count(*) FILTER (WHERE sender = pb) AS from_b,
  count(*) FILTER (WHERE sw AND role = 'assistant' AND prev_role = 'assistant') AS a2a,
  count(*) FILTER (WHERE sw AND role = 'user' AND prev_role = 'user') AS u2u,
  count(*) FILTER (WHERE sw AND role = 'assistant' AND prev_role = 'user') AS u2a,
  list(DISTINCT role ORDER BY role) FILTER (WHERE role IS NOT NULL) AS roles,
  list(DISTINCT depth ORDER BY depth) FILTER (WHERE depth IS NOT NULL) AS depths,
  list(depth ORDER BY ts, file, line, event_id) AS depth_seq,
  list(event_id ORDER BY ts, file, line, event_id) AS ids,
  list(opener ORDER BY ts, file, line, event_id) FILTER (WHERE opener IS NOT NULL) AS openers,
  list(DISTINCT file ORDER BY file) AS files,
  arg_min(struct_pack(file := from_file, line := from_line), (from_ts, from_file, from_line))
    AS first_hop,
  arg_max(struct_pack(file := file, line := line), (ts, file, line)) AS last_hop,
  arg_min(struct_pack(file := file, line := line), (ts, file, line))
    FILTER (WHERE sw AND role = 'assistant' AND prev_role = 'assistant') AS first_a2a,
  arg_min(struct_pack(file := file, line := line), (ts, file, line))
    FILTER (WHERE sw AND role = 'user' AND prev_role = 'user') AS first_u2u,
  arg_min(struct_pack(file := file, line := line, depth := depth), (ts, file, line))
    FILTER (WHERE depth >= $max_hop_depth - CASE WHEN kind = 'room_post' THEN 1 ELSE 0 END)
    AS first_guard
FROM hops
GROUP BY chan, pa, pb, episode
HAVING count(*) FILTER (WHERE sw) >= $min_switches AND count(DISTINCT sender) = 2
ORDER BY start, chan, pa, pb
"""

# the messages of the episode, and the other party's stored copy of each (same message id)
CLAIM = """
WITH ids AS (SELECT CAST(unnest($ids) AS BIGINT) AS event_id)
SELECT event_id FROM ids
UNION
SELECT e2.event_id FROM ids JOIN events e1 USING (event_id)
JOIN events e2 ON e2.corr_id = e1.corr_id AND e2.kind = e1.kind
WHERE e1.kind IN ('message', 'room_post') AND e1.corr_id IS NOT NULL
"""


def chains(depth_seq: list[int | None]) -> list[list[int]]:
    """Split a depth sequence into hop chains: a new chain starts where the depth drops."""
    out: list[list[int]] = []
    for d in depth_seq:
        if d is None:
            continue
        if not out or d < out[-1][-1]:
            out.append([d])
        else:
            out[-1].append(d)
    return out


def run(con: duckdb.DuckDBPyConnection, p: Params) -> list[Finding]:
    min_rounds = max(1, min(p.min_rounds, p.slow_min_rounds))
    rows = con.execute(SQL, {
        "kinds": list(MESSAGE_KINDS), "break_ms": p.break_s * 1000,
        "min_switches": 2 * min_rounds - 1, "max_hop_depth": p.max_hop_depth,
    }).fetchall()
    cols = [d[0] for d in con.description]
    if not rows:
        return []
    aliases = aliases_of(con)
    out = []
    for row in rows:
        f = _finding(dict(zip(cols, row, strict=True)), p, aliases)
        if f is not None:
            out.append(f)
    return out


def _finding(r: dict, p: Params, aliases: dict[str, list[str]]) -> Finding | None:
    rounds = (r["switches"] + 1) // 2
    replies = [x for x in (r["reply_a_ms"], r["reply_b_ms"]) if x is not None]
    pace_ms = max(replies) if replies else math.inf
    machine = pace_ms <= p.machine_reply_s * 1000
    is_room = "room_post" in r["kinds"]
    # sven stores a session message at depth ≥ MAX_HOP_DEPTH but never answers it; a room post
    # at that depth is dropped before it is stored, so a room chain ends one lower.
    guard_at = p.max_hop_depth - 1 if is_room else p.max_hop_depth
    ch = chains(r["depth_seq"])
    guarded_chains = [c for c in ch if c[-1] >= guard_at and len(c) > 1 and c[-1] > c[0]]
    depth_grew = any(c[-1] > c[0] for c in ch)
    terminated_by_guard = bool(ch) and len(guarded_chains) == len(ch)
    past_guard = sum(1 for d in r["depth_seq"] if d is not None and d > p.max_hop_depth)
    has_roles = bool(r["roles"])
    loop_roles = r["a2a"] > 0 or r["u2u"] > 0
    healthy_roles = has_roles and not loop_roles and r["u2a"] > 0

    if not machine:
        if rounds < p.slow_min_rounds:
            return None
        severity = "medium" if loop_roles else "low"
    elif rounds < p.min_rounds:
        return None
    elif terminated_by_guard and not past_guard:
        severity = "high" if len(ch) >= p.guarded_high_chains else "medium"
    elif rounds >= p.critical_rounds and (loop_roles or not has_roles):
        severity = "critical"
    elif healthy_roles:
        severity = "high" if rounds >= p.critical_rounds else "medium"
    elif rounds >= p.high_rounds:
        severity = "high"
    else:
        severity = "medium"

    a, b = r["pa"], r["pb"]
    da, db = display(a, aliases), display(b, aliases)
    where = (f" in {r['chan']}" if is_room else " over the peer session channel" if r["chan"] == "peer"
             else "" if r["chan"] in MESSAGE_KINDS else f" on {r['chan']}")
    duration_s = (r["stop"] - r["start"]).total_seconds()
    pattern = _pattern(r, machine, terminated_by_guard, depth_grew, is_room)
    ids = sorted(set(r["ids"]) | set(r["openers"] or []))
    title = (f"{da} ⇄ {db}: {len(ids):,} messages, {rounds:,} round trips in {human_duration(duration_s)} "
             f"({pattern})")
    pace = (f"median gap {_secs(r['median_gap_ms'])} (p10 {_secs(r['p10_gap_ms'])}, "
            f"p90 {_secs(r['p90_gap_ms'])}); slower side answers in {_secs(pace_ms)} (median)")
    depths = r["depths"] or []
    depth_note = ""
    if depths:
        if terminated_by_guard:
            depth_note = (f"; depth climbed to {max(depths)} in each of {len(ch)} chains and the "
                          f"MAX_HOP_DEPTH={p.max_hop_depth} guard stopped every one")
        elif not depth_grew:
            depth_note = (f"; depth stayed at {depths[0] if len(depths) == 1 else depths} the whole "
                          "time, so the hop-depth guard could never fire")
        else:
            depth_note = f"; depths {min(depths)}–{max(depths)}"
    role_note = ""
    if r["a2a"]:
        role_note = f"; {r['a2a']:,} replies answered an `assistant` message (role check missing)"
    elif r["u2u"]:
        role_note = f"; {r['u2u']:,} replies forwarded a `user` message as `user`"
    summary = (f"{da} and {db} exchanged {len(ids):,} messages{where}, alternating "
               f"{r['switches']:,} times from {r['start']:%Y-%m-%d %H:%M:%S} to "
               f"{r['stop']:%H:%M:%S} without a {human_duration(p.break_s)} break; {pace}"
               f"{role_note}{depth_note}.")
    if not machine:
        summary += (" One side answers at human pace: probably a long conversation, listed for "
                    "review because it ran so long without a break.")

    evidence = []
    if r["first_hop"]:
        evidence.append({**r["first_hop"], "note": "first message of the episode"})
    if r["first_a2a"]:
        evidence.append({**r["first_a2a"], "note": "first auto-reply to an `assistant` message"})
    elif r["first_u2u"]:
        evidence.append({**r["first_u2u"], "note": "first `user` message forwarded back as `user`"})
    if r["first_guard"]:
        g = r["first_guard"]
        evidence.append({"file": g["file"], "line": g["line"],
                         "note": f"first message at depth {g['depth']} (hop-depth guard)"})
    if r["last_hop"]:
        evidence.append({**r["last_hop"], "note": "last message of the episode"})

    return Finding(
        detector="ping_pong",
        key=f"{r['chan']}|{a}|{b}|{r['start']:%Y-%m-%dT%H:%M:%S.%f}",
        severity=severity, title=title, summary=summary,
        recommendation=_recommendation(r, is_room, terminated_by_guard, depth_grew, p),
        start=r["start"], end=r["stop"],
        actors=[a, b], targets=[b, a] if not is_room else [r["chan"]],
        sessions=[r["chan"]] if is_room else [f"{a}↔{b}"],
        claim_sql=CLAIM, claim_params={"ids": ids},
        unit_kinds=UNIT_KINDS,
        details={
            "channel": r["chan"], "pair": [a, b], "names": {a: da, b: db},
            "messages": len(ids), "stored_records": r["stored_records"], "hops": r["hops"],
            "switches": r["switches"], "rounds": rounds,
            "from": {a: r["from_a"], b: r["from_b"]},
            "duration_s": duration_s,
            "gap_ms": {"median": r["median_gap_ms"], "p10": r["p10_gap_ms"], "p90": r["p90_gap_ms"]},
            "reply_median_ms": {a: r["reply_a_ms"], b: r["reply_b_ms"]},
            "machine_paced": machine,
            "roles": r["roles"] or [], "replies_to_assistant": r["a2a"],
            "user_forwarded_as_user": r["u2u"], "user_then_assistant": r["u2a"],
            "depths": depths, "depth_grew": depth_grew, "chains": len(ch),
            "chains_stopped_by_guard": len(guarded_chains),
            "terminated_by_guard": terminated_by_guard, "past_guard": past_guard,
            "max_hop_depth": p.max_hop_depth, "files": r["files"],
        },
        evidence=[EvidenceLine(**e) for e in evidence],
    )


def _pattern(r: dict, machine: bool, guarded: bool, grew: bool, is_room: bool) -> str:
    if not machine:
        return "human-paced, long"
    if guarded:
        return "loop stopped by the depth guard each time"
    if r["a2a"]:
        return "echo loop: auto-replies to assistant messages"
    if is_room:
        return "bots answering each other" + ("" if grew else ", depth not carried")
    if r["u2u"]:
        return "user messages forwarded back and forth"
    return "machine-paced back-and-forth"


def _recommendation(r: dict, is_room: bool, guarded: bool, grew: bool, p: Params) -> str:
    cap = (f"rate-cap auto-replies per pair (e.g. at most {p.min_rounds} round trips per "
           f"{human_duration(p.break_s)}) and alert when the cap trips.")
    if is_room:
        return ("The reactive room handler must set room_depth = incoming_post.depth before the agent "
                "runs, so each reply goes out at depth + 1 and MAX_ROOM_POST_DEPTH = "
                f"{p.max_hop_depth} drops the chain; have bots ignore posts from other bots unless a "
                "person mentions them; " + cap)
    if r["roles"] or r["depths"]:
        parts = []
        if r["a2a"] or not guarded:
            parts.append("Check the role before auto-replying: execute_inbound_session_message and "
                         "run_session_executor must return before the LLM runs unless "
                         "message.role == user (never auto-reply to `assistant`), and replies must "
                         "carry role `assistant`.")
        if r["u2u"]:
            parts.append("Do not forward a received question onward as role `user`; answer it or "
                         "reply as `assistant`.")
        if not grew:
            parts.append("Carry depth forward across hops: reply at incoming depth + 1 and seed "
                         "SessionDepthTracker.default_depth / task_depth from the incoming message, "
                         f"so MAX_HOP_DEPTH = {p.max_hop_depth} can end the chain.")
        else:
            parts.append(f"The MAX_HOP_DEPTH = {p.max_hop_depth} guard ended each chain, but a new "
                         "chain started on every turn: stop the agent from re-sending the dropped "
                         "request.")
        return " ".join(parts) + " Also " + cap
    return ("Give the two agents a termination condition: never auto-reply to an automatic reply, "
            "carry a hop counter with each message and stop at a fixed depth; " + cap)


def _secs(ms: float | None) -> str:
    if ms is None or (isinstance(ms, float) and math.isinf(ms)):
        return "n/a"
    s = ms / 1000
    if s < 120:
        return f"{s:.3g} s"
    return human_duration(s)


DETECTOR = Detector(
    name="ping_pong",
    description="two parties bouncing messages back and forth at machine pace (echo loops, bot floods)",
    params=Params,
    run=run,
    rank=30,
    reads=("message", "room_post", "record"),
)

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

measure() returns one Episode per candidate (SQL over the hops; `chain_figures` reads the
depth sequence, a pure function); judge() applies the thresholds above; describe() writes.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass

import duckdb

from ..vocabulary import Severity
from .base import Detector, Finding, human_duration, param, staged
from .messages import (
    CLAIM_WITH_COPIES,
    HOPS_CTE,
    LINKS_SQL,
    MESSAGE_KINDS,
    SVEN,
    UNIT_KINDS,
    Spot,
    aliases_of,
    any_hops,
    display,
)


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
CLAIM = CLAIM_WITH_COPIES


# ---------------------------------------------------------------------------------------------
# measure


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


@dataclass(frozen=True)
class Chains:
    """The hop chains of an episode against the hop-depth guard."""

    count: int
    stopped_by_guard: int  # chains whose depth climbed to the guard
    depth_grew: bool  # some chain's depth rose at all
    terminated_by_guard: bool  # every chain was stopped by the guard
    past_guard: int  # messages deeper than the guard allows


def chain_figures(depth_seq: list[int | None], max_hop_depth: int, is_room: bool) -> Chains:
    """How the episode's depth sequence meets a guard at `max_hop_depth`."""
    # sven stores a session message at depth ≥ MAX_HOP_DEPTH but never answers it; a room post
    # at that depth is dropped before it is stored, so a room chain ends one lower.
    guard_at = max_hop_depth - 1 if is_room else max_hop_depth
    ch = chains(depth_seq)
    guarded = [c for c in ch if c[-1] >= guard_at and len(c) > 1 and c[-1] > c[0]]
    return Chains(count=len(ch), stopped_by_guard=len(guarded),
                  depth_grew=any(c[-1] > c[0] for c in ch),
                  terminated_by_guard=bool(ch) and len(guarded) == len(ch),
                  past_guard=sum(1 for d in depth_seq if d is not None and d > max_hop_depth))


@dataclass
class Episode:
    """One pair's back-and-forth on one channel, between pauses of `break_s`."""

    channel: str
    pair: tuple[str, str]
    names: tuple[str, str]  # as shown: a sven node's local name with its peer id
    kinds: list[str]
    ids: list[int]  # the messages, and the posts the room replies answered
    hops: int
    stored_records: int
    switches: int  # turn passes from one side to the other
    start: dt.datetime
    stop: dt.datetime
    gap_ms: dict[str, float | None]  # median, p10, p90 between consecutive hops
    reply_ms: tuple[float | None, float | None]  # each side's median reply delay
    sent: tuple[int, int]
    replies_to_assistant: int  # an `assistant` message answered by an `assistant` one
    user_forwarded_as_user: int
    user_then_assistant: int
    roles: list[str]
    depths: list[int]
    chains: Chains
    files: list[str]
    first_hop: Spot | None
    last_hop: Spot | None
    first_a2a: Spot | None
    first_u2u: Spot | None
    first_guard: Spot | None

    @property
    def rounds(self) -> int:
        return (self.switches + 1) // 2

    @property
    def is_room(self) -> bool:
        return "room_post" in self.kinds

    @property
    def pace_ms(self) -> float:
        """The slower side's median reply delay (infinite when neither side replied)."""
        replies = [x for x in self.reply_ms if x is not None]
        return max(replies) if replies else math.inf

    @property
    def loop_roles(self) -> bool:
        return self.replies_to_assistant > 0 or self.user_forwarded_as_user > 0

    @property
    def healthy_roles(self) -> bool:
        """One side asks as `user`, the other answers as `assistant`, and nothing else."""
        return bool(self.roles) and not self.loop_roles and self.user_then_assistant > 0


def measure(con: duckdb.DuckDBPyConnection, p: Params) -> list[Episode]:
    if not any_hops(con):
        return []
    min_rounds = max(1, min(p.min_rounds, p.slow_min_rounds))
    rows = con.execute(SQL, {
        "break_ms": p.break_s * 1000,
        "min_switches": 2 * min_rounds - 1, "max_hop_depth": p.max_hop_depth,
    }).fetchall()
    cols = [d[0] for d in con.description]
    if not rows:
        return []
    aliases = aliases_of(con)
    out = []
    for row in rows:
        r = dict(zip(cols, row, strict=True))
        a, b = r["pa"], r["pb"]
        out.append(Episode(
            channel=r["chan"], pair=(a, b), names=(display(a, aliases), display(b, aliases)),
            kinds=r["kinds"], ids=sorted(set(r["ids"]) | set(r["openers"] or [])),
            hops=r["hops"], stored_records=r["stored_records"], switches=r["switches"],
            start=r["start"], stop=r["stop"],
            gap_ms={"median": r["median_gap_ms"], "p10": r["p10_gap_ms"], "p90": r["p90_gap_ms"]},
            reply_ms=(r["reply_a_ms"], r["reply_b_ms"]), sent=(r["from_a"], r["from_b"]),
            replies_to_assistant=r["a2a"], user_forwarded_as_user=r["u2u"],
            user_then_assistant=r["u2a"], roles=r["roles"] or [], depths=r["depths"] or [],
            chains=chain_figures(r["depth_seq"], p.max_hop_depth, "room_post" in r["kinds"]),
            files=r["files"], first_hop=Spot.of(r["first_hop"]), last_hop=Spot.of(r["last_hop"]),
            first_a2a=Spot.of(r["first_a2a"]), first_u2u=Spot.of(r["first_u2u"]),
            first_guard=Spot.of(r["first_guard"]),
        ))
    return out


# ---------------------------------------------------------------------------------------------
# judge


def machine_paced(e: Episode, p: Params) -> bool:
    """Both sides answer within `machine_reply_s` (median)."""
    return e.pace_ms <= p.machine_reply_s * 1000


def judge(e: Episode, p: Params) -> Severity | None:
    rounds, ch = e.rounds, e.chains
    if not machine_paced(e, p):
        if rounds < p.slow_min_rounds:
            return None
        return Severity.MEDIUM if e.loop_roles else Severity.LOW
    if rounds < p.min_rounds:
        return None
    if ch.terminated_by_guard and not ch.past_guard:
        return Severity.HIGH if ch.count >= p.guarded_high_chains else Severity.MEDIUM
    if rounds >= p.critical_rounds and (e.loop_roles or not e.roles):
        return Severity.CRITICAL
    if e.healthy_roles:
        return Severity.HIGH if rounds >= p.critical_rounds else Severity.MEDIUM
    if rounds >= p.high_rounds:
        return Severity.HIGH
    return Severity.MEDIUM


# ---------------------------------------------------------------------------------------------
# describe


def _conversation(e: Episode) -> list[str]:
    """The conversation the pair passed back and forth, when the messages name one as their
    channel (hand-offs between agents: otlp): a session of the log, beside the pair's."""
    return [] if e.channel in (*MESSAGE_KINDS, "peer") else [e.channel]


def describe(e: Episode, severity: Severity, p: Params) -> Finding:
    machine = machine_paced(e, p)
    rounds, ch, is_room = e.rounds, e.chains, e.is_room
    (a, b), (da, db) = e.pair, e.names
    where = (f" in {e.channel}" if is_room else " over the peer session channel" if e.channel == "peer"
             else "" if e.channel in MESSAGE_KINDS else f" on {e.channel}")
    duration_s = (e.stop - e.start).total_seconds()
    pattern = _pattern(e, machine)
    title = (f"{da} ⇄ {db}: {len(e.ids):,} messages, {rounds:,} round trips in "
             f"{human_duration(duration_s)} ({pattern})")
    pace = (f"median gap {_secs(e.gap_ms['median'])} (p10 {_secs(e.gap_ms['p10'])}, "
            f"p90 {_secs(e.gap_ms['p90'])}); slower side answers in {_secs(e.pace_ms)} (median)")
    depths = e.depths
    depth_note = ""
    if depths:
        if ch.terminated_by_guard:
            depth_note = (f"; depth climbed to {max(depths)} in each of {ch.count} chains and the "
                          f"MAX_HOP_DEPTH={p.max_hop_depth} guard stopped every one")
        elif not ch.depth_grew:
            depth_note = (f"; depth stayed at {depths[0] if len(depths) == 1 else depths} the whole "
                          "time, so the hop-depth guard could never fire")
        else:
            depth_note = f"; depths {min(depths)}–{max(depths)}"
    role_note = ""
    if e.replies_to_assistant:
        role_note = (f"; {e.replies_to_assistant:,} replies answered an `assistant` message "
                     "(role check missing)")
    elif e.user_forwarded_as_user:
        role_note = f"; {e.user_forwarded_as_user:,} replies forwarded a `user` message as `user`"
    summary = (f"{da} and {db} exchanged {len(e.ids):,} messages{where}, alternating "
               f"{e.switches:,} times from {e.start:%Y-%m-%d %H:%M:%S} to "
               f"{e.stop:%H:%M:%S} without a {human_duration(p.break_s)} break; {pace}"
               f"{role_note}{depth_note}.")
    if not machine:
        summary += (" One side answers at human pace: probably a long conversation, listed for "
                    "review because it ran so long without a break.")

    evidence = []
    if e.first_hop:
        evidence.append(e.first_hop.says("first message of the episode"))
    if e.first_a2a:
        evidence.append(e.first_a2a.says("first auto-reply to an `assistant` message"))
    elif e.first_u2u:
        evidence.append(e.first_u2u.says("first `user` message forwarded back as `user`"))
    if e.first_guard:
        evidence.append(e.first_guard.says(f"first message at depth {e.first_guard.depth} "
                                           "(hop-depth guard)"))
    if e.last_hop:
        evidence.append(e.last_hop.says("last message of the episode"))

    return Finding(
        detector="ping_pong",
        key=f"{e.channel}|{a}|{b}|{e.start:%Y-%m-%dT%H:%M:%S.%f}",
        severity=severity, title=title, summary=summary,
        signal=f"a ping-pong of {len(e.ids):,} messages between {da} and {db} ({pattern})",
        recommendation=_recommendation(e, p),
        start=e.start, end=e.stop,
        actors=[a, b], targets=[b, a] if not is_room else [e.channel],
        sessions=[e.channel] if is_room else [f"{a}↔{b}"] + _conversation(e),
        claim_sql=CLAIM, claim_params={"ids": e.ids},
        unit_kinds=UNIT_KINDS,
        details={
            "channel": e.channel, "pair": [a, b], "names": {a: da, b: db},
            "messages": len(e.ids), "stored_records": e.stored_records, "hops": e.hops,
            "switches": e.switches, "rounds": rounds,
            "from": {a: e.sent[0], b: e.sent[1]},
            "duration_s": duration_s,
            "gap_ms": dict(e.gap_ms),
            "reply_median_ms": {a: e.reply_ms[0], b: e.reply_ms[1]},
            "machine_paced": machine,
            "roles": e.roles, "replies_to_assistant": e.replies_to_assistant,
            "user_forwarded_as_user": e.user_forwarded_as_user,
            "user_then_assistant": e.user_then_assistant,
            "depths": depths, "depth_grew": ch.depth_grew, "chains": ch.count,
            "chains_stopped_by_guard": ch.stopped_by_guard,
            "terminated_by_guard": ch.terminated_by_guard, "past_guard": ch.past_guard,
            "max_hop_depth": p.max_hop_depth, "files": e.files,
        },
        evidence=evidence,
    )


def _pattern(e: Episode, machine: bool) -> str:
    if not machine:
        return "human-paced, long"
    if e.chains.terminated_by_guard:
        return "loop stopped by the depth guard each time"
    if e.replies_to_assistant:
        return "echo loop: auto-replies to assistant messages"
    if e.is_room:
        return "bots answering each other" + ("" if e.chains.depth_grew else ", depth not carried")
    if e.user_forwarded_as_user:
        return "user messages forwarded back and forth"
    return "machine-paced back-and-forth"


def _recommendation(e: Episode, p: Params) -> str:
    cap = (f"rate-cap auto-replies per pair (e.g. at most {p.min_rounds} round trips per "
           f"{human_duration(p.break_s)}) and alert when the cap trips.")
    if e.is_room:
        return ("The reactive room handler must set room_depth = incoming_post.depth before the agent "
                "runs, so each reply goes out at depth + 1 and MAX_ROOM_POST_DEPTH = "
                f"{p.max_hop_depth} drops the chain; have bots ignore posts from other bots unless a "
                "person mentions them; " + cap)
    if e.roles or e.depths:
        parts = []
        if e.replies_to_assistant or not e.chains.terminated_by_guard:
            parts.append("Check the role before auto-replying: execute_inbound_session_message and "
                         "run_session_executor must return before the LLM runs unless "
                         "message.role == user (never auto-reply to `assistant`), and replies must "
                         "carry role `assistant`.")
        if e.user_forwarded_as_user:
            parts.append("Do not forward a received question onward as role `user`; answer it or "
                         "reply as `assistant`.")
        if not e.chains.depth_grew:
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
    run=staged(measure, judge, describe),
    rank=30,
    reads=("message", "room_post", "record"),
    needs=(("ts",), ("actor",), ("target",)),
    shape="pair",
    # hops relate through a sven node's two names (the two records of one message id), a
    # room's previous post and an episode's (channel, unordered pair): a format's events
    # hold them, unless two formats name the same ones, whose formats are then one group
    # (`links`); nothing finer is exact (by session, a conversation that goes on in another
    # session would be cut in two)
    partition_by=("format",),
    links=LINKS_SQL,
)

"""repeated_message: an agent, or a pair, saying the same thing again and again.

The monologue (an agent answering "All done." to a Stop hook that keeps saying the tests were
not run), a bot reposting one notice every few seconds, two bots trading the same two
messages. A message's text is read where its format keeps it (`FormatProfile.text_key`: sven
`content`, Claude Code and Codex `extra.text`) and compared after masking ids, times and
numbers (normalise.py), so "build #1043" and "build #1044" are one text.

For each sender in each conversation (its session; a room; for a message both ends stored,
the pair of parties), messages are split into episodes at a pause longer than `max_gap_s` and
wherever the sender did something (a tool call, a request, a step: then it was not talking
to itself). In an episode, a *repeating stretch* is a run of consecutive messages whose texts
the sender says at least twice in the episode; it is a candidate when it holds `min_count`
messages and few distinct texts (at most `max_distinct_share` of its messages). Stretches of
several senders in one conversation that overlap in time are one finding (two bots trading
the same messages).

Quiet: a steady low rate that costs no model tokens (a status post every ten minutes:
median gap of `background_gap_s` or more), and anything shorter than `min_count`.

- measure: the stretches (`repeating_stretches`, a pure function), merged per conversation
  (`overlapping`), with pace and tokens;
- judge: medium from `min_count` messages, high from `high_count`, critical from
  `critical_count`; a slow one that costs tokens is at most medium below `critical_count`;
- describe: who said what how often, and the guard that would have stopped it.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass

import duckdb
import numpy as np

from .. import db
from ..normalise import mask_sql
from ..vocabulary import Severity
from .actions import ACTION_KINDS, GUARDS, Pace, clip, ts
from .base import Detector, EvidenceLine, Finding, human_duration, param, staged
from .messages import CLAIM_WITH_COPIES, HOPS_CTE, aliases_of, display
from .messages import LINKS_SQL as HOP_LINKS
from .profiles import extra_key_sql

UNIT_KINDS = ("message", "room_post")


@dataclass
class Params:
    min_count: int = param(5, "messages of a repeating stretch before it is a finding (OpenHands' "
                              "monologue check: 3 in a row)")
    high_count: int = param(10, "messages that make a repeating stretch high")
    critical_count: int = param(100, "messages that make a repeating stretch critical")
    max_distinct_share: float = param(0.25, "a stretch may use at most this share of distinct texts "
                                            "(0.25: each said four times on average)")
    max_gap_s: float = param(600.0, "a longer pause between two of a sender's messages starts a new "
                                    "episode")
    background_gap_s: float = param(30.0, "a stretch this slow (median gap) that costs no model "
                                          "tokens is background: a periodic status post")


TEXT = extra_key_sql("text_key", "e")

# Every message once (a message both ends stored is one, from its sender's side; a sven node
# is named by its peer id), in its conversation, with its masked text's hash; only senders
# with `min_count` messages in a conversation. HOPS_CTE's `msg1` and `post` do the first part.
SQL = "WITH " + HOPS_CTE + f""",
said AS (
  SELECT m.event_id, m.ts, m.kind, m.sender, m.receiver, e.session,
         CASE WHEN m.direction IS NOT NULL OR e.session IS NULL
              THEN least(m.sender, m.receiver) || '↔' || greatest(m.sender, m.receiver)
              ELSE e.session END AS conv,
         {TEXT} AS body, coalesce(e.tokens_in, 0) + coalesce(e.tokens_out, 0) AS tokens
  FROM msg1 m JOIN events e USING (event_id)
  WHERE m.kind = 'message'
  UNION ALL
  SELECT p.event_id, p.ts, p.kind, p.sender, p.chan, e.session, p.chan, {TEXT},
         coalesce(e.tokens_in, 0) + coalesce(e.tokens_out, 0)
  FROM post p JOIN events e USING (event_id)
), busy AS (
  SELECT * FROM said WHERE body IS NOT NULL AND ts IS NOT NULL
  QUALIFY count(*) OVER (PARTITION BY sender, conv) >= $min_count
)
SELECT event_id, epoch_ms(ts) AS t, kind, sender, receiver, session, conv, tokens,
       hash({mask_sql('body')}) AS text_key
FROM busy ORDER BY sender, conv, ts, event_id
"""

# when each sender acted (a monologue ends where it does something)
ACTED = """
SELECT actor, session, epoch_ms(ts) AS t FROM events
WHERE list_contains($kinds, kind) AND ts IS NOT NULL
  AND list_contains($actors, actor) ORDER BY actor, session, t
"""

# Detector.links: ping_pong's (a message's sender and receiver), a conversation that is a
# session or an unordered pair, and a sender's actions in a session, which end its monologues
LINKS_SQL = HOP_LINKS + """
UNION ALL
SELECT format, 'conversation' || chr(31) || session
FROM events WHERE kind IN ('message', 'room_post') AND session IS NOT NULL
UNION ALL
SELECT format, concat_ws(chr(31), 'talk', least(actor, target), greatest(actor, target))
FROM events WHERE kind = 'message' AND actor IS NOT NULL AND target IS NOT NULL
UNION ALL
SELECT format, concat_ws(chr(31), 'acts', actor, coalesce(session, ''))
FROM events WHERE list_contains(['message', 'room_post', """ + ", ".join(
    f"'{k}'" for k in ACTION_KINDS) + """], kind) AND actor IS NOT NULL
"""

FIRST = ("SELECT event_id, file, line, {text} AS body FROM events e WHERE "
         + db.one_of("event_id"))



# ---------------------------------------------------------------------------------------------
# kernels


def episodes(t: np.ndarray, acted: np.ndarray, max_gap_ms: float) -> np.ndarray:
    """Episode number of each message of one sender (times sorted): a new one after a pause
    longer than `max_gap_ms` or wherever the sender acted (`acted`: sorted times of its
    actions) between two messages."""
    if not len(t):
        return np.zeros(0, dtype=int)
    acts_before = np.searchsorted(acted, t, side="left")
    new = np.ones(len(t), dtype=bool)
    new[1:] = (np.diff(t) > max_gap_ms) | (acts_before[1:] != acts_before[:-1])
    return np.cumsum(new)


def repeating_stretches(texts: np.ndarray, episode: np.ndarray, min_count: int,
                        max_distinct_share: float) -> list[tuple[int, int]]:
    """[lo, hi) runs of consecutive messages of one episode whose texts come up at least twice
    in that episode, with at least `min_count` messages and at most `max_distinct_share` of
    them distinct texts."""
    n = len(texts)
    if not n:
        return []
    repeated = np.zeros(n, dtype=bool)
    for ep in np.unique(episode):
        idx = np.flatnonzero(episode == ep)
        values, inverse, counts = np.unique(texts[idx], return_inverse=True, return_counts=True)
        repeated[idx] = counts[inverse] >= 2
    brk = np.ones(n, dtype=bool)
    brk[1:] = (episode[1:] != episode[:-1]) | ~repeated[:-1] | ~repeated[1:]
    out = []
    starts = np.flatnonzero(brk)
    for lo, hi in zip(starts, np.append(starts[1:], n), strict=True):
        if not repeated[lo] or hi - lo < min_count:
            continue
        if len(np.unique(texts[lo:hi])) > max_distinct_share * (hi - lo):
            continue
        out.append((int(lo), int(hi)))
    return out


def overlapping(spans: list[tuple[float, float]]) -> list[list[int]]:
    """Indexes of spans (start, stop) grouped where they overlap (transitively), each group in
    start order, groups in start order."""
    order = sorted(range(len(spans)), key=lambda i: spans[i])
    groups: list[list[int]] = []
    reach = -np.inf
    for i in order:
        start, stop = spans[i]
        if groups and start <= reach:
            groups[-1].append(i)
            reach = max(reach, stop)
        else:
            groups.append([i])
            reach = stop
    return groups


# ---------------------------------------------------------------------------------------------
# measure


@dataclass(frozen=True)
class Said:
    """What one sender said over and over in a stretch."""

    sender: str
    name: str  # as shown
    count: int
    distinct: int
    top_text: str | None  # the text it said most, as first written
    top_count: int
    first: tuple[str, int]  # file, line


@dataclass
class Repetition:
    """One conversation's stretch of repeated messages: one sender's, or several at once."""

    conversation: str
    sessions: list[str]
    said: list[Said]
    ids: list[int]
    start: dt.datetime
    stop: dt.datetime
    pace: Pace
    tokens: int
    receivers: list[str]

    @property
    def count(self) -> int:
        return len(self.ids)


def measure(con: duckdb.DuckDBPyConnection, p: Params) -> list[Repetition]:
    table = con.sql(SQL, params={"break_ms": 3600_000.0,
                                 "min_count": p.min_count}).to_arrow_table()
    if table.num_rows == 0:
        return []
    rows = {c: db.arrow_numpy(table[c]) for c in ("event_id", "t", "tokens", "text_key")}
    sender = table["sender"].to_pylist()
    conv = table["conv"].to_pylist()
    receiver = table["receiver"].to_pylist()
    session = table["session"].to_pylist()
    acted = _acted(con, sorted(set(sender)))
    stretches: list[tuple[str, list[int]]] = []  # (conversation, row indexes)
    bounds = np.flatnonzero(np.r_[True, [a != b or c != d for a, b, c, d in
                                         zip(sender[1:], sender[:-1], conv[1:], conv[:-1],
                                             strict=True)]])
    for lo, hi in zip(bounds, np.append(bounds[1:], len(sender)), strict=True):
        t = rows["t"][lo:hi]
        own = acted.get((sender[lo], session[lo]), np.zeros(0))
        ep = episodes(t, own, p.max_gap_s * 1000)
        for a, b in repeating_stretches(rows["text_key"][lo:hi], ep, p.min_count,
                                        p.max_distinct_share):
            stretches.append((conv[lo], list(range(lo + a, lo + b))))
    if not stretches:
        return []
    by_conv: dict[str, list[list[int]]] = {}
    for c, idx in stretches:
        by_conv.setdefault(c, []).append(idx)
    firsts = _first_lines(con, [int(rows["event_id"][idx[0]]) for _, idx in stretches]
                          + [int(rows["event_id"][i]) for _, idx in stretches for i in idx])
    aliases = aliases_of(con)
    out = []
    for c, parts in by_conv.items():
        spans = [(float(rows["t"][idx[0]]), float(rows["t"][idx[-1]])) for idx in parts]
        for group in overlapping(spans):
            idx = sorted((i for g in group for i in parts[g]), key=lambda i: (rows["t"][i], i))
            said = [_said(parts[g], sender, rows, firsts, aliases) for g in group]
            out.append(Repetition(
                conversation=c, sessions=sorted({session[i] for i in idx if session[i]}),
                said=said, ids=[int(rows["event_id"][i]) for i in idx],
                start=ts(rows["t"][idx[0]]), stop=ts(rows["t"][idx[-1]]),
                pace=Pace.of(rows["t"][idx]), tokens=int(rows["tokens"][idx].sum()),
                receivers=sorted({receiver[i] for i in idx if receiver[i]}
                                 - {s.sender for s in said})))
    out.sort(key=lambda r: (r.start, r.conversation))
    return out


def _acted(con: duckdb.DuckDBPyConnection, actors: list[str]
           ) -> dict[tuple[str, str | None], np.ndarray]:
    """(sender, session) → the sorted times of its actions there."""
    rows = con.execute(ACTED, {"kinds": list(ACTION_KINDS), "actors": actors}).fetchall()
    out: dict[tuple[str, str | None], list[float]] = {}
    for actor, session, t in rows:
        out.setdefault((actor, session), []).append(t)
    return {a: np.sort(np.array(v, dtype=float)) for a, v in out.items()}


def _first_lines(con: duckdb.DuckDBPyConnection, ids: list[int]) -> dict[int, tuple[str, int, str]]:
    cur = con.execute(FIRST.format(text=TEXT), {"ids": sorted(set(ids))})
    return {eid: (file, line, body) for eid, file, line, body in cur.fetchall()}


def _said(idx: list[int], sender: list[str], rows: dict, firsts: dict,
          aliases: dict[str, list[str]]) -> Said:
    keys = Counter(rows["text_key"][i] for i in idx)
    top, top_count = keys.most_common(1)[0]
    first_top = next(i for i in idx if rows["text_key"][i] == top)
    who = sender[idx[0]]
    file, line, _ = firsts[int(rows["event_id"][idx[0]])]
    return Said(sender=who, name=display(who, aliases), count=len(idx), distinct=len(keys),
                top_text=_text(firsts[int(rows["event_id"][first_top])][2]), top_count=top_count,
                first=(file, line))


def _text(body: str | None) -> str | None:
    """A message's text for a reader: the text of a content block list, else the body."""
    if body is None:
        return None
    import json

    try:
        value = json.loads(body)
    except ValueError:
        return body
    if isinstance(value, list):
        texts = [b.get("text") for b in value if isinstance(b, dict) and isinstance(b.get("text"), str)]
        return " ".join(texts) if texts else body
    return value if isinstance(value, str) else body


# ---------------------------------------------------------------------------------------------
# judge


def judge(r: Repetition, p: Params) -> Severity | None:
    if r.count < p.min_count:
        return None
    slow = (r.pace.median_ms or 0.0) >= p.background_gap_s * 1000
    if slow and r.tokens == 0:
        return None  # a periodic status post
    if r.count >= p.critical_count:
        return Severity.CRITICAL
    if slow:
        return Severity.MEDIUM
    return Severity.HIGH if r.count >= p.high_count else Severity.MEDIUM


# ---------------------------------------------------------------------------------------------
# describe


def describe(r: Repetition, severity: Severity, p: Params) -> Finding:
    names = " and ".join(s.name for s in r.said)
    where = (f" in {r.conversation}" if r.conversation.startswith("room:")
             else "" if "↔" in r.conversation else f" in session {r.conversation}")
    parts = [f"{s.name} sent {s.count:,} messages with {s.distinct} distinct text"
             + ("s" if s.distinct > 1 else "") + f", {s.top_count:,} of them "
             f"{clip(s.top_text, 100)!r}" for s in r.said]
    title = (f"{names} repeated the same message{'s' if len(r.said) > 1 else ''} {r.count:,} times"
             f"{where} in {human_duration(r.pace.duration_s)}")
    summary = ("; ".join(parts) + f"{where}, {r.pace.text()}, over "
               f"{human_duration(r.pace.duration_s)}"
               + (f"; {r.tokens:,} model tokens spent on them" if r.tokens else "")
               + ". Texts compare after masking ids, times and numbers.")
    evidence = [EvidenceLine(*s.first, f"{s.name}: first of {s.count:,} repeated messages")
                for s in r.said]
    return Finding(
        detector="repeated_message",
        key=f"{r.conversation}|{'|'.join(s.sender for s in r.said)}|"
            f"{r.start:%Y-%m-%dT%H:%M:%S.%f}",
        severity=severity, title=title, summary=summary,
        signal=f"{names}: the same message{'s' if len(r.said) > 1 else ''} {r.count:,} times",
        recommendation=_recommendation(r, p),
        start=r.start, end=r.stop,
        actors=[s.sender for s in r.said], targets=r.receivers,
        sessions=r.sessions if r.sessions and "↔" not in r.conversation else [r.conversation],
        claim_sql=CLAIM_WITH_COPIES, claim_params={"ids": r.ids},
        unit_kinds=UNIT_KINDS,
        details={
            "conversation": r.conversation, "messages": r.count,
            "senders": {s.sender: {"name": s.name, "messages": s.count, "distinct_texts": s.distinct,
                                   "top_text": clip(s.top_text, 300), "top_count": s.top_count}
                        for s in r.said},
            "duration_s": r.pace.duration_s, "median_gap_ms": r.pace.median_ms,
            "gap_cv": r.pace.cv, "tokens": r.tokens,
        },
        evidence=evidence,
    )


def _recommendation(r: Repetition, p: Params) -> str:
    return ("Drop a message identical (after masking ids and numbers) to one of the sender's last 3 "
            "in the same conversation, and rate-cap each sender per conversation or room; never "
            "auto-reply to an automatic message. For a Stop hook that keeps blocking, read "
            "`stop_hook_active` and let the agent stop the second time, or make the hook check "
            f"something the agent can change. {GUARDS}")


DETECTOR = Detector(
    name="repeated_message",
    description="an agent or a pair sending messages whose text is the same after masking ids and "
                "numbers (a monologue, a bot reposting, two bots trading the same messages)",
    params=Params,
    run=staged(measure, judge, describe),
    rank=35,
    reads=UNIT_KINDS,
    needs=(("ts",), ("actor",)),
    # a conversation is ping_pong's pair (see there), a session or a room, and a monologue
    # ends where its sender acts: a format's events hold them, unless two formats name the
    # same ones, whose formats are then one group (`links`)
    partition_by=("format",),
    links=LINKS_SQL,
)

"""Messages as hops, shared by the detectors that read them (ping_pong, depth_violation).

A hop is one message from a sender to a receiver, or a room post answering the post before it.
A message both ends stored (sven) is one hop; a node's local name is resolved to the peer id
its peers know it by (see ALIASES_CTE). Which end stored a copy is read from the `extra` key
the format's profile names (`direction_key`); other formats' messages have no direction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import duckdb

from ..formats import FORMATS
from ..store import events_of_kinds, shared_once
from .base import EvidenceLine
from .profiles import extra_key_sql

# sven's runtime limits, the documented defaults of the detectors that read messages
SVEN = FORMATS["sven"].profile
MESSAGE_KINDS = ("message", "record")
UNIT_KINDS = ("message", "room_post", "record")


# A local node name (directory of a sven store) ↔ the peer id its peers store it under, from the
# two records of one message id. `canon` is the peer id; ties go to the most frequent pairing.
ALIASES_CTE = """
dir AS (
  SELECT * FROM (
    SELECT event_id, file, actor, target, corr_id, """ + extra_key_sql("direction_key") + """ AS direction
    FROM events WHERE kind = 'message' AND corr_id IS NOT NULL)
  WHERE direction IS NOT NULL
),
alias_pairs AS (
  SELECT o.actor AS name, i.actor AS canon FROM dir o JOIN dir i
    ON i.corr_id = o.corr_id AND i.file <> o.file
  WHERE o.direction = 'outbound' AND i.direction = 'inbound'
  UNION ALL
  SELECT i.target AS name, o.target AS canon FROM dir o JOIN dir i
    ON i.corr_id = o.corr_id AND i.file <> o.file
  WHERE o.direction = 'outbound' AND i.direction = 'inbound'
),
aliases AS (
  SELECT name, canon FROM (
    SELECT name, canon, count(*) AS n FROM alias_pairs
    WHERE name IS NOT NULL AND canon IS NOT NULL AND name <> canon GROUP BY name, canon)
  QUALIFY row_number() OVER (PARTITION BY name ORDER BY n DESC, canon) = 1
)"""

# Where every hop starts (HOPS_CTE's `msg` and `post`): a message (or record) with a time, a
# sender and a receiver; a room post with a time and a sender
MESSAGE_SOURCE = "e.ts IS NOT NULL AND e.actor IS NOT NULL AND e.target IS NOT NULL"
POST_SOURCE = "kind = 'room_post' AND ts IS NOT NULL AND actor IS NOT NULL"

# Hops, in pair order, with the previous hop of the same pair and the episode number.
# Parameter: $break_ms.
HOPS_CTE = ALIASES_CTE + """,
msg AS (
  SELECT e.event_id, e.ts, e.file, e.line, e.kind, coalesce(e.channel, e.kind) AS chan,
         coalesce(a1.canon, e.actor) AS sender, coalesce(a2.canon, e.target) AS receiver,
         e.role, e.depth, e.corr_id, """ + extra_key_sql("direction_key", "e") + """ AS direction
  FROM (""" + events_of_kinds(MESSAGE_KINDS) + """) e
  LEFT JOIN aliases a1 ON a1.name = e.actor
  LEFT JOIN aliases a2 ON a2.name = e.target
  WHERE """ + MESSAGE_SOURCE + """
),
msg1 AS (  -- one row per message: the sender's own copy first
  SELECT *, count(*) OVER (PARTITION BY kind, sender, receiver, coalesce(corr_id, '#' || event_id))
              AS copies
  FROM msg WHERE sender <> receiver
  QUALIFY row_number() OVER (
    PARTITION BY kind, sender, receiver, coalesce(corr_id, '#' || event_id)
    ORDER BY (direction = 'inbound') NULLS FIRST, event_id) = 1
),
post AS (  -- room posts, one per message id and room
  SELECT event_id, ts, file, line, kind, coalesce(channel, target) AS chan, actor AS sender,
         role, depth, corr_id,
         count(*) OVER (PARTITION BY coalesce(channel, target), coalesce(corr_id, '#' || event_id))
           AS copies
  FROM events WHERE """ + POST_SOURCE + """
  QUALIFY row_number() OVER (PARTITION BY coalesce(channel, target), coalesce(corr_id, '#' || event_id)
                             ORDER BY event_id) = 1
),
room AS (
  SELECT *, lag(sender) OVER w AS answered, lag(event_id) OVER w AS opener,
         lag(ts) OVER w AS opener_ts, lag(file) OVER w AS opener_file, lag(line) OVER w AS opener_line
  FROM post WINDOW w AS (PARTITION BY chan ORDER BY ts, file, line)
),
hop0 AS (
  SELECT event_id, ts, file, line, kind, chan, sender, receiver, role, depth,
         CAST(NULL AS BIGINT) AS opener, ts AS from_ts, file AS from_file, line AS from_line, copies
  FROM msg1
  UNION ALL
  SELECT event_id, ts, file, line, kind, chan, sender, answered AS receiver, role, depth, opener,
         opener_ts, opener_file, opener_line, copies
  FROM room WHERE answered IS NOT NULL AND answered <> sender
),
hop1 AS (
  SELECT *, least(sender, receiver) AS pa, greatest(sender, receiver) AS pb,
         lag(ts) OVER p AS prev_ts, lag(sender) OVER p AS prev_sender,
         lag(role) OVER p AS prev_role, lag(depth) OVER p AS prev_depth
  FROM hop0 WINDOW p AS (PARTITION BY chan, least(sender, receiver), greatest(sender, receiver)
                         ORDER BY ts, file, line, event_id)
),
hop2 AS (
  SELECT *, epoch_ms(ts) - epoch_ms(prev_ts) AS gap_ms,
         prev_ts IS NULL OR epoch_ms(ts) - epoch_ms(prev_ts) >= $break_ms AS newep
  FROM hop1
),
hops AS (
  SELECT *, NOT newep AND sender <> prev_sender AS sw,
         sum(CASE WHEN newep THEN 1 ELSE 0 END) OVER (
           PARTITION BY chan, pa, pb ORDER BY ts, file, line, event_id
           ROWS UNBOUNDED PRECEDING) AS episode
  FROM hop2
)"""

# Whether HOPS_CTE has any row to start from: every hop comes from a message or a room post
# its sources select, so without any the hops are empty.
HOP_SOURCES = f"""
SELECT EXISTS (SELECT 1 FROM ({events_of_kinds(MESSAGE_KINDS)}) e WHERE {MESSAGE_SOURCE})
    OR EXISTS (SELECT 1 FROM events WHERE {POST_SOURCE})"""


def any_hops(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the hops (HOPS_CTE) can hold anything. Planning the detectors' queries over the
    hops costs 20-30 ms each (ping_pong's: 4 ms to bind, 5 ms to optimise), on a log with no
    message as on one with many; a log of requests whose `stats` records name no sender
    (bproxy) paid it for nothing. Asked once for a connection and its siblings."""
    return shared_once(con, "any_hops", lambda: bool(con.execute(HOP_SOURCES).fetchall()[0][0]))

# Claim SQL: the messages `$ids`, and the other party's stored copy of each (same message id)
CLAIM_WITH_COPIES = """
WITH ids AS (SELECT CAST(unnest($ids) AS BIGINT) AS event_id)
SELECT event_id FROM ids
UNION
SELECT e2.event_id FROM ids JOIN events e1 USING (event_id)
JOIN events e2 ON e2.corr_id = e1.corr_id AND e2.kind = e1.kind
WHERE e1.kind IN ('message', 'room_post') AND e1.corr_id IS NOT NULL
"""

# Detector.links of what reads HOPS_CTE: the values by which it relates messages of two
# formats: a sven message id (a node's two names), a name a format with directions may alias,
# a (channel, unordered pair) and a room. Separated by \x1f, which names do not hold.
LINKS_SQL = """
WITH said AS (
  SELECT format, kind, actor, target, channel, corr_id,
         """ + extra_key_sql("direction_key") + """ AS direction
  FROM events WHERE kind IN ('message', 'record', 'room_post')
), names AS (
  SELECT DISTINCT format, name FROM (SELECT format, unnest([actor, target]) AS name FROM said)
  WHERE name IS NOT NULL
), aliased AS (
  SELECT DISTINCT name FROM names
  WHERE format IN (SELECT format FROM said WHERE direction IS NOT NULL)
)
SELECT format, 'id' || chr(31) || corr_id FROM said WHERE kind = 'message' AND corr_id IS NOT NULL
UNION ALL
SELECT format, 'name' || chr(31) || name FROM names WHERE name IN (SELECT name FROM aliased)
UNION ALL
SELECT format, concat_ws(chr(31), 'pair', coalesce(channel, kind), least(actor, target),
                         greatest(actor, target))
FROM said WHERE kind IN ('message', 'record') AND actor IS NOT NULL AND target IS NOT NULL
UNION ALL
SELECT format, 'room' || chr(31) || coalesce(channel, target) FROM said WHERE kind = 'room_post'
"""

ALIAS_NAMES_SQL = "WITH " + ALIASES_CTE + """
SELECT canon, list(DISTINCT name ORDER BY name) FROM aliases GROUP BY canon"""


def aliases_of(con: duckdb.DuckDBPyConnection) -> dict[str, list[str]]:
    """Peer id → the local node names it is stored under (`node-a`)."""
    return {canon: names for canon, names in con.execute(ALIAS_NAMES_SQL).fetchall()}


def display(party: str, aliases: dict[str, list[str]]) -> str:
    """`node-a (12D3KooWCTxQ…)` for a resolved sven node, the party itself otherwise."""
    short = party if len(party) <= 20 else party[:14] + "…"
    names = aliases.get(party)
    return f"{'/'.join(names)} ({short})" if names else short


@dataclass(frozen=True)
class Spot:
    """A message's line in the log (and its depth, when that is what makes it worth showing)."""

    file: str
    line: int
    depth: int | None = None

    @classmethod
    def of(cls, struct: dict[str, Any] | None) -> Spot | None:
        """From a `struct_pack(file, line[, depth])` column, which is NULL when nothing matched."""
        return cls(**struct) if struct else None

    def says(self, note: str) -> EvidenceLine:
        return EvidenceLine(self.file, self.line, note)

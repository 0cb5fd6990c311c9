"""sven P2P conversation store (`sven-p2p/src/store.rs`): `<store>/peers/<peer>.jsonl` holds one
ConversationRecord per line, `<store>/rooms/<room>.jsonl` one RoomRecord per line.

Who sent what to whom:
- A peer file is one node's side of its conversation with one peer; the node itself is never
  named in it. The local node is named after the directory that holds `peers/` and `rooms/`
  (`node-a/peers/X.jsonl` ⇒ `node-a`; sven's default folder names are skipped, so
  `node-a/conversations/peers/X.jsonl` is `node-a` too, and `/home/ana/.config/sven/conversations`
  is `ana`). Outbound: actor = local node, target = peer id; inbound: actor = peer id, target =
  local node. An exchange stored by both nodes has one `message_id` (`corr_id`) in both files:
  that is how a node name is matched with its peer id, and how the two copies are de-duplicated.
- session = the two parties sorted and joined by `↔` (sven has no session id: one implicit
  conversation per peer pair); channel `peer`.
- Rooms: actor = `sender_name` when present (`sender_peer_id` otherwise; the peer id always
  stays in `extra`), target = channel = session = `room:<room>`.

`depth` is absent in records written before sven had it: serde fills in 0, which is what
sven's own guards acted on, so `depth` is 0 there too (the raw line shows the absence); a
`depth` that is present but not a number is NULL.
`corr_id` is `message_id`; `action` the type of the first content block (`text`, `image`,
`json`) or `message`. Content stays in `extra` only (image data can be large number arrays).
"""

from __future__ import annotations

import re
from pathlib import Path

from .base import (
    Format,
    FormatContext,
    FormatProfile,
    extra_json,
    iso_to_ts,
    json_fields,
    sql_str,
    struct_spec,
)

FIELDS = {
    "message_id": "VARCHAR", "timestamp": "VARCHAR", "peer_id": "VARCHAR", "role": "VARCHAR",
    "room": "VARCHAR", "sender_name": "VARCHAR",
}
# `direction` and `sender_peer_id` decide actor/target but are kept in `extra` as well.
KNOWN = {"seq", "direction", "content", "sender_peer_id"}
# read as JSON: absent ⇒ 0 (serde default), present but not a number ⇒ NULL
DEPTH = {"depth": "JSON"}
PEER_KEYS = {"message_id", "timestamp", "direction", "peer_id"}
ROOM_KEYS = {"message_id", "room", "sender_peer_id", "timestamp"}
STORE_DIRS = ("peers", "rooms")
# Folder names that say nothing about which node a store belongs to: sven's default store is
# `~/.config/sven/conversations`, which is named after the home directory instead.
GENERIC_DIRS = {"conversations", ".config", ""}
_NODE_NAME = re.compile(r"[^\x00-\x1f\x7f]{1,200}")


def _is_record(r: dict) -> bool:
    return PEER_KEYS <= r.keys() or ROOM_KEYS <= r.keys()


def sniff(records: list[dict], path: Path) -> bool:
    hits = sum(1 for r in records if _is_record(r))
    if hits == 0:
        return False
    if path.parent.name in STORE_DIRS:
        return hits >= len(records) // 2
    return hits * 2 > len(records)


def local_node(path: Path) -> str | None:
    """The node whose store holds `path`: the directory containing `peers/` or `rooms/`."""
    parent = path.resolve().parent
    if parent.name not in STORE_DIRS:
        return None
    store = parent.parent
    while store.parent != store and (
            store.name in GENERIC_DIRS or (store.name == "sven" and store.parent.name == ".config")):
        store = store.parent
    name = store.name
    return name if _NODE_NAME.fullmatch(name) else None


def select_sql(ctx: FormatContext) -> str:
    node = local_node(ctx.path)
    local = sql_str(node) if node is not None else "CAST(NULL AS VARCHAR)"
    direction = "(r.direction->>'$')"
    return f"""
    SELECT line, byte_offset, byte_length, text,
      {iso_to_ts("r.timestamp")} AS ts,
      CASE WHEN r.room IS NOT NULL THEN 'room_post' ELSE 'message' END AS kind,
      CASE WHEN r.room IS NOT NULL THEN 'RoomRecord' ELSE 'ConversationRecord' END AS event_type,
      CASE WHEN r.room IS NOT NULL THEN coalesce(nullif(r.sender_name, ''), r.sender_peer_id->>'$')
           WHEN {direction} = 'outbound' THEN {local}
           WHEN {direction} = 'inbound' THEN r.peer_id END AS actor,
      CASE WHEN r.room IS NOT NULL THEN 'room:' || r.room
           WHEN {direction} = 'outbound' THEN r.peer_id
           WHEN {direction} = 'inbound' THEN {local} END AS target,
      CASE WHEN r.room IS NOT NULL THEN 'room:' || r.room
           WHEN r.peer_id IS NULL THEN NULL
           WHEN {local} IS NULL THEN r.peer_id
           ELSE least({local}, r.peer_id) || '↔' || greatest({local}, r.peer_id) END AS session,
      CASE WHEN r.room IS NOT NULL THEN 'room:' || r.room ELSE 'peer' END AS channel,
      coalesce(r.content->>'$[0].type', 'message') AS action,
      r.role, r.message_id AS corr_id,
      CASE WHEN r.depth IS NULL THEN 0 ELSE TRY_CAST(r.depth->>'$' AS INTEGER) END AS depth,
      {extra_json(KNOWN)} AS extra
    FROM (SELECT *, from_json(text, {struct_spec(FIELDS | DEPTH | json_fields(KNOWN))}) AS r FROM raw)
    """


# What detectors may know of sven (sven-node/src/tools.rs, sven-p2p): both nodes store a
# message (`direction` tells the copies apart), a message at MAX_HOP_DEPTH is dropped, and an
# hour's pause starts a new conversation; what a message says is its `content`.
PROFILE = FormatProfile(direction_key="direction", max_hop_depth=4, break_threshold_s=3600.0,
                        text_key="content")


FORMAT = Format(
    name="sven",
    description="sven P2P conversation store (peers/<peer>.jsonl, rooms/<room>.jsonl)",
    sniff=sniff,
    select_sql=select_sql,
    mapped_keys=frozenset(FIELDS | DEPTH),
    known_keys=frozenset(KNOWN),
    priority=20,
    profile=PROFILE,
    groupable=True,
)

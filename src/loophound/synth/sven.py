"""Synthetic sven P2P conversation stores (`<node>/peers/<peer>.jsonl`, `<node>/rooms/<room>`).

Modelled on seed 000. Incidents: an echo loop between two gateway nodes (role `assistant` both
ways, depth stuck at 1, so neither the role check nor the depth guard fires); a ping-pong with
role `user` both ways that climbs 1→4 and is stopped by the guard, once per human turn; and a
room flood where two bots answer each other in `firmware-team` at machine pace; and in
`general`, a deploy bot whose notifier re-posts the same approval request every few seconds
(the same message, nothing else). Healthy: people talking to an agent at human pace, including
a long conversation with a lunch break, and a status bot posting the same heartbeat to
`general` every ten minutes all day (the same message at a steady low rate: background).

Records follow `sven-p2p/src/store.rs`: `serde_json::to_string`, fields in struct order,
`seq` = records already in the file, chrono timestamps. Records written before `depth` existed
have no `depth` key; image bytes are a JSON array of numbers.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from pathlib import Path
from typing import Any

from ._common import UTC, own_stream, stream, uuid4, write_lines

BASE58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
DAY = dt.datetime(2026, 3, 24, tzinfo=UTC)
MAX_HOP_DEPTH = 4
S = 1_000_000_000  # nanoseconds per second
Record = dict[str, Any]

ECHO_A = ["Thanks for confirming! Let me know if there's anything else you need from gateway-a.",
          "Great, appreciated. I'll keep an eye on it — ping me if anything changes.",
          "Perfect, thank you. Happy to help with anything else on your side.",
          "Understood, thanks for the update. Anything else I can do for you?"]
ECHO_B = ["You're welcome! Glad I could help. Let me know if you need anything else.",
          "No problem at all — thanks for checking in. Anything else from gateway-b?",
          "Happy to help! I'll stay available if you need more details.",
          "Thanks! Noted on my side as well. Just say if there's more to do."]
FLOOD = {"build-agent": ["@test-agent build #{n} is out, please rerun the HIL suite on it.",
                         "@test-agent rebuilt #{n} with the updated linker script — retest?"],
         "test-agent": ["@build-agent HIL suite flaky on #{n}; please rebuild with -O2 and retry.",
                        "@build-agent 146/147 on #{n}, can you rebuild so I can rerun?"]}
QUESTIONS = ["Can you check why the bootloader on rev C boards hangs after OTA?",
             "What changed in the SPI driver since last week?",
             "Please summarise the open issues tagged `power`.",
             "Is the CAN timing fix merged into the release branch yet?",
             "Could you draft release notes for 2.4.1?",
             "Why does the watchdog reset every 40 minutes on the test rig?",
             "Which boards are still on the old flash layout?",
             "Can you rerun the static analysis on the sensor module?"]
ANSWERS = ["I looked into it: the OTA image is written before the CRC check completes. A fix is "
           "to gate the jump on `crc_ok`.",
           "Two commits touched it: DMA double-buffering and a clock divider change.",
           "There are 5 open `power` issues; 2 are regressions from 2.4.0.",
           "Yes, it landed yesterday in `release/2.4` as a cherry-pick.",
           "Draft is ready: 3 fixes, 1 feature, no breaking changes.",
           "The watchdog is fed from the idle task, which starves under sensor load.",
           "Boards 7, 12 and 19 still use the old layout according to the inventory.",
           "Static analysis found 2 new warnings, both in `sensor_read()`."]
FOLLOW_UPS = ["ok, thanks", "makes sense — go ahead", "can you open a ticket for that?",
              "good, let's do that after lunch", "hm, double-check board 12 please"]


def _peer_id(rng: random.Random) -> str:
    return "12D3KooW" + "".join(rng.choice(BASE58) for _ in range(44))


def _ts(ns: int) -> str:
    """chrono's RFC 3339 for DateTime<Utc>: `Z`, and 0/3/6/9 fraction digits as needed."""
    secs, frac = divmod(ns, S)
    text = dt.datetime.fromtimestamp(secs, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    if frac % 1_000_000 == 0:
        text += f".{frac // 1_000_000:03d}" if frac else ""
    elif frac % 1000 == 0:
        text += f".{frac // 1000:06d}"
    else:
        text += f".{frac:09d}"
    return text + "Z"


def _ns(at: dt.datetime, rng: random.Random) -> int:
    return int(at.timestamp()) * S + rng.randrange(S)


def _text(text: str) -> list[Record]:
    return [{"type": "text", "text": text}]


def _png(rng: random.Random, size: int = 96) -> list[int]:
    header = [137, 80, 78, 71, 13, 10, 26, 10, 0, 0, 0, 13, 73, 72, 68, 82]
    return header + [rng.randrange(256) for _ in range(size - len(header))]


class _Stores:
    """Append-only files of several nodes, as each node's ConversationStore writes them."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.files: dict[str, list[tuple[int, Record]]] = {}

    def message(self, node: str, peer: str, ns: int, direction: str, role: str,
                content: list[Record], depth: int | None, message_id: str) -> int:
        """Append a ConversationRecord; return its 1-based line number."""
        records = self.files.setdefault(f"{node}/peers/{peer}.jsonl", [])
        rec: Record = {"message_id": message_id, "seq": len(records), "timestamp": _ts(ns),
               "direction": direction, "peer_id": peer, "role": role, "content": content}
        if depth is not None:
            rec["depth"] = depth
        records.append((ns, rec))
        return len(records)

    def exchange(self, a: tuple[str, str], b: tuple[str, str], ns: int, sender_is_a: bool,
                 role: str, content: list[Record], depth: int | None) -> None:
        """One session message between (node, peer id) pairs, stored by every listed node.
        A side whose node is None is a peer whose store is not part of the sample."""
        mid = uuid4(self.rng)
        for (node, _), (_, other), outbound in ((a, b, sender_is_a), (b, a, not sender_is_a)):
            if node is not None:
                self.message(node, other, ns, "outbound" if outbound else "inbound", role,
                             content, depth, mid)

    def post(self, node: str, room: str, sender: str, name: str, ns: int,
             content: list[Record], depth: int | None) -> int:
        records = self.files.setdefault(f"{node}/rooms/{room}.jsonl", [])
        rec: Record = {"message_id": uuid4(self.rng), "room": room, "sender_peer_id": sender,
               "sender_name": name, "timestamp": _ts(ns), "content": content}
        if depth is not None:
            rec["depth"] = depth
        records.append((ns, rec))
        return len(records)

    def ordered(self) -> dict[str, list[Record]]:
        """Each file in time order with `seq` renumbered: what the store holds at the end."""
        out = {}
        for rel, pairs in sorted(self.files.items()):
            records = [rec for _, rec in sorted(pairs, key=lambda p: p[0])]
            for i, rec in enumerate(records):
                if "seq" in rec:
                    rec["seq"] = i
            out[rel] = records
        return out


def _human_chat(st: _Stores, rng: random.Random, me: tuple[str, str], human: tuple[str, str],
                start: dt.datetime, turns: int, lunch_after: int | None = None,
                first_depth: int | None = 0) -> dt.datetime:
    """A person asks, the agent answers: minutes between turns, seconds to answer."""
    t = start
    for i in range(turns):
        text = rng.choice(QUESTIONS if i % 3 == 0 else FOLLOW_UPS)
        st.exchange(human, me, _ns(t, rng), True, "user", _text(text), first_depth)
        t += dt.timedelta(seconds=rng.randint(15, 120))
        depth = None if first_depth is None else first_depth + 1
        st.exchange(me, human, _ns(t, rng), True, "assistant", _text(rng.choice(ANSWERS)), depth)
        t += dt.timedelta(seconds=rng.randint(60, 900))
        if lunch_after is not None and i == lunch_after:
            t += dt.timedelta(minutes=rng.randint(65, 80))
    return t


def write_sven_store(outdir: Path, seed: int = 7, *, incident: bool = True,
                     echo_messages: int = 400, flood_posts: int = 300) -> dict[str, Any]:
    """Write the stores of two gateway nodes, `node-a` and `node-b`, for one day.

    `incident=False` gives the clean twin: the same people and conversations, no loops.
    Returns the answer key; file paths are relative to `outdir`, line numbers 1-based.
    """
    ids = stream(seed, "sven-ids")
    a, b, c, u1, u2, u3 = (_peer_id(ids) for _ in range(6))
    bots = {"build-agent": _peer_id(ids), "test-agent": _peer_id(ids)}
    st = _Stores(stream(seed, "sven-ids-msg"))
    A, B, C = ("node-a", a), ("node-b", b), (None, c)
    U1, U2, U3 = (None, u1), (None, u2), (None, u3)
    rng = stream(seed, "sven-healthy")
    healthy: list[dict[str, Any]] = []

    # martin: two records from before `depth` existed, then a morning chat with a screenshot
    _human_chat(st, rng, A, U1, DAY - dt.timedelta(days=41, hours=-3), 1, first_depth=None)
    st.exchange(U1, A, _ns(DAY + dt.timedelta(hours=8, minutes=52), rng), True, "user",
                _text("The rev C board shows this on boot:") + [
                    {"type": "image", "data": _png(rng), "mime_type": "image/png"}], 0)
    _human_chat(st, rng, A, U1, DAY + dt.timedelta(hours=8, minutes=53), 7)
    healthy.append({"kind": "conversation", "file": f"node-a/peers/{u1}.jsonl", "peers": [a, u1],
                    "messages": 0,
                    "records_without_depth": 2, "image_line": 3, "loop": False})
    # ingrid: a long, human-paced working day with a lunch break (a context break, gap > 1 h)
    _human_chat(st, rng, A, U2, DAY + dt.timedelta(hours=9, minutes=30), 60, lunch_after=24)
    healthy.append({"kind": "conversation", "file": f"node-a/peers/{u2}.jsonl", "peers": [a, u2],
                    "messages": 0, "context_breaks": 1, "loop": False})
    # a CI runner reporting to gateway-b, and a short chat on node-b
    for k in range(3):
        t = DAY + dt.timedelta(hours=7 + 4 * k, minutes=rng.randint(0, 59))
        report = {"build": 1040 + k, "status": "passed", "tests": 147}
        st.exchange(U3, B, _ns(t, rng), True, "user", [{"type": "json", "value": report}], 0)
        st.exchange(B, U3, _ns(t + dt.timedelta(seconds=rng.randint(5, 40)), rng), True,
                    "assistant", _text(f"Recorded build {1040 + k}."), 1)
    healthy.append({"kind": "conversation", "file": f"node-b/peers/{u3}.jsonl", "peers": [b, u3],
                    "messages": 0, "loop": False})
    _human_chat(st, rng, B, U1, DAY + dt.timedelta(hours=16), 2)
    healthy.append({"kind": "conversation", "file": f"node-b/peers/{u1}.jsonl", "peers": [b, u1],
                    "messages": 0, "loop": False})
    # rooms: an old post without depth, then an ordinary day in firmware-team and general
    room = "firmware-team"
    st.post("node-a", room, u1, "martin", _ns(DAY - dt.timedelta(days=40), rng),
            _text("Welcome to firmware-team: builds, test results and release chatter."), None)
    for h in (7, 11, 15, 19):
        n = 1040 + (h - 7) // 4
        st.post("node-a", room, bots["build-agent"], "build-agent",
                _ns(DAY + dt.timedelta(hours=h, minutes=5), rng),
                _text(f"build #{n} passed — 147 tests"), 0)
        st.post("node-a", room, u2, "ingrid",
                _ns(DAY + dt.timedelta(hours=h, minutes=rng.randint(9, 50)), rng),
                _text(rng.choice(FOLLOW_UPS)), 0)
    for h in (9, 13, 17):
        st.post("node-b", "general", u1, "martin", _ns(DAY + dt.timedelta(hours=h), rng),
                _text("standup notes are in the wiki"), 0)
    healthy.append({"kind": "room", "file": f"node-a/rooms/{room}.jsonl", "room": room,
                    "records_without_depth": 1, "loop": False})
    healthy.append(_heartbeat(st, seed))

    incidents: list[dict[str, Any]] = []
    if incident:
        incidents.append(_echo_loop(st, stream(seed, "sven-echo"), A, B, echo_messages))
        incidents.append(_guarded_pingpong(st, stream(seed, "sven-guard"), B, C))
        incidents.append(_room_flood(st, stream(seed, "sven-flood"), room, bots, flood_posts))
        incidents.append(_deploy_reposts(st, seed))

    files = st.ordered()
    lines = {rel: write_lines(outdir / rel, (json.dumps(r, separators=(",", ":"),
                                                        ensure_ascii=False) for r in records))
             for rel, records in files.items()}
    _locate(files, incidents)
    for entry in healthy:
        if entry["kind"] == "conversation":
            entry["messages"] = lines[entry["file"]]
    return {"format": "sven", "files": sorted(lines), "lines": lines, "peers": {
        "gateway-a": a, "gateway-b": b, "lab-gateway": c, "martin": u1, "ingrid": u2,
        "ci-runner": u3} | bots, "incidents": incidents, "healthy": healthy}


def _echo_loop(st: _Stores, rng: random.Random, A: tuple[str, str], B: tuple[str, str],
               n: int) -> dict[str, Any]:
    """gateway-a asks gateway-b once; then both auto-reply to `assistant` messages forever,
    depth never carried (stuck at 1), a few seconds apart."""
    t = _ns(DAY + dt.timedelta(hours=14, minutes=2), rng)
    start = t
    st.exchange(A, B, t, True, "user", _text("Hi gateway-b, can you confirm the nightly firmware "
                                             "for rev C boards is published?"), 1)
    for i in range(1, n):
        t += rng.randint(400_000_000, 3_500_000_000)
        from_a = i % 2 == 0
        st.exchange(A, B, t, from_a, "assistant", _text(rng.choice(ECHO_A if from_a else ECHO_B)),
                    1)
    return {"kind": "p2p_echo", "channel": "session",
            "files": [f"node-a/peers/{B[1]}.jsonl", f"node-b/peers/{A[1]}.jsonl"],
            "peers": [A[1], B[1]], "role": "assistant", "depth": 1, "messages": n,
            "start": _ts(start), "end": _ts(t), "loop": True}


def _guarded_pingpong(st: _Stores, rng: random.Random, B: tuple[str, str],
                      C: tuple[str, str]) -> dict[str, Any]:
    """gateway-b and lab-gateway forward a question back and forth as role `user`; the depth
    climbs 1→4 and the guard stores the depth-4 message without replying. Once per turn."""
    episodes, first = 6, None
    for k in range(episodes):
        t = _ns(DAY + dt.timedelta(hours=10, minutes=25 * k + rng.randint(0, 9)), rng)
        first = first or t
        for depth in range(1, MAX_HOP_DEPTH + 1):
            text = "Can you check the calibration table for rig 3?" if depth == 1 else \
                "Forwarding: can you check the calibration table for rig 3? I don't have it."
            st.exchange(B, C, t, depth % 2 == 1, "user", _text(text), depth)
            t += rng.randint(2 * S, 8 * S)
    return {"kind": "echo_guarded", "channel": "session", "file": f"node-b/peers/{C[1]}.jsonl",
            "peers": [B[1], C[1]], "role": "user", "episodes": episodes,
            "messages": episodes * MAX_HOP_DEPTH, "max_depth": MAX_HOP_DEPTH,
            "terminated_by_guard": True, "start": _ts(first), "loop": True}


def _room_flood(st: _Stores, rng: random.Random, room: str, bots: dict[str, str],
                n: int) -> dict[str, Any]:
    """Two reactive bots answering each other; every post goes out at depth 1 because the
    reactive handler never seeds the room depth, so the depth-4 guard is never reached."""
    t = _ns(DAY + dt.timedelta(hours=15, minutes=20), rng)
    start, names = t, list(bots)
    for i in range(n):
        name = names[i % 2]
        text = rng.choice(FLOOD[name]).format(n=1043 + i // 2)
        st.post("node-a", room, bots[name], name, t, _text(text), 1)
        t += rng.randint(800_000_000, 3_000_000_000)
    return {"kind": "room_flood", "channel": f"room:{room}", "file": f"node-a/rooms/{room}.jsonl",
            "room": room, "senders": [bots[k] for k in names], "sender_names": names,
            "posts": n, "depth": 1, "start": _ts(start), "loop": True}


def _heartbeat(st: _Stores, seed: int) -> dict[str, Any]:
    """status-bot posts the same heartbeat to `general` every ten minutes, 07:00–19:00."""
    rng = stream(seed, "sven-heartbeat")
    bot = _peer_id(rng)
    t, posts = DAY + dt.timedelta(hours=7, minutes=2), 0
    with own_stream(st, rng) as own:
        while t < DAY + dt.timedelta(hours=19):
            own.post("node-b", "general", bot, "status-bot", _ns(t, rng),
                     _text(f"heartbeat: gateway-b up, {rng.randint(0, 2)} alerts, queue "
                           f"{rng.randint(0, 9)}"), 0)
            t, posts = t + dt.timedelta(minutes=10, seconds=rng.randint(-5, 5)), posts + 1
    return {"kind": "status_post", "file": "node-b/rooms/general.jsonl", "room": "general",
            "actor": "status-bot", "every_s": 600, "posts": posts, "loop": False}


def _deploy_reposts(st: _Stores, seed: int, n: int = 150) -> dict[str, Any]:
    """deploy-bot's notifier retries its approval request every ~4 s, 150 times: the same
    message, answered by no one."""
    rng = stream(seed, "sven-deploy")
    bot = _peer_id(rng)
    t = _ns(DAY + dt.timedelta(hours=18, minutes=10), rng)
    start = t
    text = ("Deploy of firmware 2.4.1 to the rev C fleet is waiting for approval: @martin please "
            "approve it in #release (request 7f3a9c21).")
    with own_stream(st, rng) as own:
        for _ in range(n):
            own.post("node-b", "general", bot, "deploy-bot", t, _text(text), 0)
            last = t
            t += rng.randint(3_700_000_000, 4_300_000_000)
    return {"kind": "bot_repeats_message", "channel": "room:general",
            "file": "node-b/rooms/general.jsonl", "room": "general", "actor": "deploy-bot",
            "session": "room:general", "posts": n, "assumed_calls": n, "start": _ts(start),
            "end": _ts(last), "detector": "repeated_message", "loop": True}


def _locate(files: dict[str, list[Record]], incidents: list[dict[str, Any]]) -> None:
    """Add first/last line numbers and exact end times to incidents that live in one file."""
    for inc in incidents:
        if inc["kind"] == "room_flood":
            recs = files[inc["file"]]
            hits = [i for i, r in enumerate(recs, 1) if r["sender_name"] in inc["sender_names"]
                    and r.get("depth") == 1]
            inc |= {"first_line": hits[0], "last_line": hits[-1],
                    "end": recs[hits[-1] - 1]["timestamp"]}
        elif inc["kind"] == "bot_repeats_message":
            hits = [i for i, r in enumerate(files[inc["file"]], 1)
                    if r["sender_name"] == inc["actor"]]
            inc |= {"first_line": hits[0], "last_line": hits[-1]}
        elif inc["kind"] == "echo_guarded":
            recs = files[inc["file"]]
            inc["guard_lines"] = [i for i, r in enumerate(recs, 1)
                                  if r.get("depth") == MAX_HOP_DEPTH]

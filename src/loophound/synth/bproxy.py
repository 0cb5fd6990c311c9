"""Synthetic bproxy daemon logs (pino NDJSON), modelled on seed 001.

The incident: session `6afr3v` is closed and a sub-agent keeps sending `scroll` to it every
~100 ms; the daemon answers each `SESSION_NOT_FOUND` in 0 ms, because that early-reject path
skips pacing, dispatch and the error delay. Around it: owners browsing at human pace with
ordinary errors, an extension outage, and an agent that polls through the outage with
exponential backoff and then stops (healthy, though it repeats an action after an error).

With `stuck=True` (the sample logs), after the storm, two agents stuck while every call
succeeds: one polls `tab.status` every ~2.5 s, 120 times, for a page load that never
completes (a stuck poll); one goes round `wait` → `snapshot` 30 times, waiting for an element
that never appears (an A-B-A-B loop). bproxy logs neither a command's arguments nor its
result, so only the outcome (ok) and the fast, steady machine cadence tell them from healthy
repetition, which is there too (in the clean twin as well): a poll of `tab.status` that stops
after 8 tries and moves on, and a monitor listing tabs once a minute.

Key order follows bproxy's `routes/command.ts`, `routes/ws.ts` and `server.ts`: pino's
`level,time,pid,hostname`, then the object as the daemon builds it; undefined keys are omitted.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ._common import (
    epoch_ms,
    hex_id,
    iso_ms,
    own_stream,
    sha256_hex,
    stream,
    uuid4,
    write_lines,
)

CLOSE_MS = 1781826140544  # seed 001: `session.close` of 6afr3v (2026-06-18T23:42:20.544Z)
STORM_START_MS = 1781826141514  # seed 001: the first scroll after the close
STORM_END_MS = 1781887876856  # seed 001: "still going 17 hours later"
FULL_REQUESTS = 608_970  # seed 001: failed scroll commands in 17 h
SESSION = "6afr3v"
VICTIM = "pisub1"  # nick of the looping pi sub-agent
LOG_NAME = "2026-06-18.log"  # the daemon's UTC start date: it was already up at 23:42 UTC
DESTRUCTIVE = {"navigate", "click", "scroll", "type"}
HUMAN_PACE_MS = {"scroll": (4000, 8000), "click": (1500, 4000), "navigate": (1500, 4000)}
TRIMMED_DROP = {"id", "ownerHash", "destructive"}
Record = dict[str, Any]


def _dumps(obj: Record) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _session_id(rng: random.Random) -> str:
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz234567") for _ in range(6))


@dataclass
class _Daemon:
    """One daemon process: pino identity, owner salt, extension outages and its logged lines."""

    rng: random.Random
    pid: int
    hostname: str
    salt: str
    outages: list[tuple[int, int]] = field(default_factory=list)
    events: list[tuple[int, int, str | None, Record]] = field(default_factory=list)

    def owner(self, nick: str) -> str:
        return sha256_hex(self.salt, nick)[:8]

    def actor(self, nick: str) -> str:
        return f"{self.pid}:{self.owner(nick)}"

    def client(self, t: int) -> str:
        return f"client-{1 + sum(1 for _, end in self.outages if end <= t)}"

    def emit(self, t: int, nick: str | None, **fields: Any) -> None:
        clean = {k: v for k, v in fields.items() if v is not None or k == "tab"}
        self.events.append((t, len(self.events), nick, clean))

    def outage(self, start: int, end: int, reason: str) -> None:
        """The extension's WebSocket drops at `start` and a new client connects at `end`."""
        self.emit(start, None, event="ws_disconnect", ws_client=self.client(start), reason=reason)
        self.outages.append((start, end))
        self.emit(end, None, event="ws_connect", ws_client=self.client(end))

    def bind(self, t: int, nick: str, session: str, tab: int, mode: str) -> int:
        self.emit(t + 1, nick, event="pacing_config", session=session, mode=mode,
                  ownerHash=self.owner(nick))
        return self.request(t, nick, "session.bind", session, tab=tab)

    def request(self, t: int, nick: str, action: str, session: str | None,
                error: str | None = None, tab: int | None = None) -> int:
        """Log one CLI invocation received at `t`; return the time of its response."""
        rng, rid, owner = self.rng, uuid4(self.rng), self.owner(nick)
        self.emit(t, nick, id=rid, action=action, session=session,
                  destructive=action in DESTRUCTIVE, event="received", ownerHash=owner)
        now = t
        if error != "SESSION_NOT_FOUND":  # the early reject skips all of this
            if action in HUMAN_PACE_MS and rng.random() < 0.6:
                wait = rng.randint(*HUMAN_PACE_MS[action])
                now += wait
                self.emit(now, nick, id=rid, event="pacing_wait", delay_ms=wait)
            if any(a <= now < b for a, b in self.outages) and action != "session.bind":
                error = "NO_EXTENSION"
            elif action != "session.bind":
                now += rng.randint(1, 3)
                fid = f"{rid}:close:1" if action == "session.close" else rid
                self.emit(now, nick, id=fid, event="forwarded", ws_client=self.client(now),
                          tab=None if action == "tab.open" else tab)
                if error == "TIMEOUT":
                    now = t + 30_000
                    self.emit(now, nick, id=rid, event="timeout", elapsed_ms=now - t)
                else:
                    now += rng.randint(700, 2600) if action == "navigate" else rng.randint(40, 900)
            if error:
                delay = rng.randint(500, 2000)
                now += delay
                self.emit(now, nick, id=rid, event="error_delay", delay_ms=delay)
        else:
            now += rng.choice((0, 0, 1))
        if action == "session.bind":
            now += rng.randint(1, 3)
        self.emit(now, nick, id=rid, event="response", ok=error is None,
                  elapsed_ms=0 if error == "SESSION_NOT_FOUND" else now - t,
                  error_code=error, ownerHash=owner)
        return now

    def records(self, trimmed: bool = False, only: str | None = None) -> list[Record]:
        """Lines in time order; `trimmed` drops what seed 001's excerpt drops."""
        out = []
        for t, _, nick, fields in sorted(self.events, key=lambda e: (e[0], e[1])):
            if only is not None and nick not in (only, None):
                continue
            if trimmed:
                out.append({"time": t} | {k: v for k, v in fields.items() if k not in TRIMMED_DROP})
            else:
                out.append({"level": 30, "time": t, "pid": self.pid,
                            "hostname": self.hostname} | fields)
        return out


def _browse(d: _Daemon, rng: random.Random, nick: str, t: int, end: int) -> int:
    """An owner working at human pace: open, bind, act, close. Returns the requests made."""
    tab = rng.randint(1_843_021_000, 1_843_029_999)
    session = _session_id(rng)
    t = d.request(t, nick, "tab.open", None)
    t = d.bind(t + rng.randint(400, 1500), nick, session, tab, "human")
    count = 2
    while t < end:
        action = rng.choices(("navigate", "click", "scroll", "snapshot"), (3, 6, 7, 4))[0]
        error = None
        if action == "click" and rng.random() < 0.1:
            error = "ELEMENT_NOT_FOUND"
        elif rng.random() < 0.01:
            error = "TIMEOUT"
        t = d.request(t + rng.randint(4_000, 60_000), nick, action, session, error, tab)
        count += 1
    d.request(t + rng.randint(2_000, 9_000), nick, "session.close", session, tab=tab)
    return count + 1


def _poll_with_backoff(d: _Daemon, rng: random.Random, nick: str, start: int,
                       outage: tuple[int, int]) -> Record:
    """An agent retrying `snapshot` through an extension outage, doubling its wait: healthy."""
    session, tab = _session_id(rng), rng.randint(1_843_040_000, 1_843_049_999)
    d.bind(start - 60_000, nick, session, tab, "fast")
    t, gap, received = outage[0] + 4_000, 2_500, []
    while True:
        received.append(t)
        done = d.request(t, nick, "snapshot", session, tab=tab)
        if t >= outage[1]:
            break
        t, gap = max(t + gap + rng.randint(-80, 80), done + 50), gap * 2
    return {"kind": "backoff_retry", "actor": d.actor(nick), "session": session,
            "action": "snapshot", "error": "NO_EXTENSION", "failed_attempts": len(received) - 1,
            "gaps_ms": [b - a for a, b in zip(received, received[1:], strict=False)],
            "start": iso_ms(received[0]), "end": iso_ms(received[-1]), "loop": False}


def _victim_prelude(d: _Daemon, rng: random.Random, t: int) -> int:
    """The agent that later loops: opens 6afr3v, scrolls LinkedIn at human pace, and the
    session is closed at CLOSE_MS. Returns the requests made."""
    tab = rng.randint(1_843_030_000, 1_843_039_999)
    t = d.request(t, VICTIM, "tab.open", None)
    t = d.bind(t + 600, VICTIM, SESSION, tab, "human")
    t = d.request(t + rng.randint(2_000, 6_000), VICTIM, "navigate", SESSION, tab=tab)
    count = 3
    while t < CLOSE_MS - 60_000:
        action = rng.choices(("scroll", "snapshot"), (5, 1))[0]
        t = d.request(t + rng.randint(3_000, 25_000), VICTIM, action, SESSION, tab=tab)
        count += 1
    d.request(CLOSE_MS, VICTIM, "session.close", SESSION, tab=tab)
    return count + 1


def _background(d: _Daemon, seed: int, start: int, end: int) -> list[Record]:
    """Healthy traffic shared by an incident and its clean twin. Returns answer-key entries."""
    d.emit(start - 45_000, None, event="ws_connect", ws_client="client-1")
    outage = (CLOSE_MS - 31 * 60_000, CLOSE_MS - 31 * 60_000 + 150_000)
    d.outage(*outage, reason="extension reloaded")
    victim_requests = _victim_prelude(d, stream(seed, "bproxy-victim"), start + 30_000)
    healthy = [{"kind": "browsing", "actor": d.actor(VICTIM), "session": SESSION,
                "requests": victim_requests, "loop": False}]
    for i, nick in enumerate(("halbot", "rsrch2")):
        n = _browse(d, stream(seed, f"bproxy-{nick}"), nick, start + i * 95_000, end - 40_000)
        healthy.append({"kind": "browsing", "actor": d.actor(nick), "requests": n, "loop": False})
    healthy.append(_poll_with_backoff(d, stream(seed, "bproxy-qa7bot"), "qa7bot",
                                      outage[0] - 30_000, outage))
    return healthy


# After the storm (its last line is at 23:44:23): the stuck agents and the healthy decoys
STUCK_START_MS = CLOSE_MS + 2 * 60_000 + 20_000


def _open_session(d: _Daemon, rng: random.Random, nick: str, t: int) -> tuple[str, int, int]:
    """tab.open and session.bind (fast mode); returns (session, tab, time)."""
    session, tab = _session_id(rng), rng.randint(1_843_050_000, 1_843_059_999)
    t = d.request(t, nick, "tab.open", None)
    return session, tab, d.bind(t + rng.randint(200, 600), nick, session, tab, "fast")


def _loop(d: _Daemon, rng: random.Random, nick: str, session: str, tab: int, t: int,
          actions: tuple[str, ...], rounds: int, sleep_ms: tuple[int, int]) -> tuple[int, int, int]:
    """An agent's loop: each action in turn, `rounds` times, sleeping between a response and
    the next call. Returns (first call, last call, time after the last response)."""
    first = last = t
    for i in range(rounds):
        for j, action in enumerate(actions):
            if i == 0 and j == 0:
                first = t
            last = t
            t = d.request(t, nick, action, session, tab=tab) + rng.randint(*sleep_ms)
    return first, last, t


def _stuck_decoys(d: _Daemon, seed: int) -> list[Record]:
    """Healthy repetition after the storm, in the incident and its twin alike: a poll that
    ends after 8 tries, and a monitor listing tabs once a minute."""
    healthy = []
    with own_stream(d, stream(seed, "bproxy-decoys")) as dd:
        rng = stream(seed, "bproxy-decoy-poll")
        session, tab, t = _open_session(dd, rng, "pisub4", STUCK_START_MS + 45_000)
        first, last, t = _loop(dd, rng, "pisub4", session, tab, t + 800, ("tab.status",), 8,
                               (2_000, 2_200))
        t = dd.request(t, "pisub4", "snapshot", session, tab=tab)
        dd.request(t + rng.randint(1_000, 3_000), "pisub4", "click", session, tab=tab)
        healthy.append({"kind": "poll_that_ends", "actor": dd.actor("pisub4"), "session": session,
                        "action": "tab.status", "polls": 8, "start": iso_ms(first),
                        "end": iso_ms(last), "loop": False})
        rng = stream(seed, "bproxy-decoy-monitor")
        t, checks = STUCK_START_MS + 5_000, 0
        while t < CLOSE_MS + 13 * 60_000:
            dd.request(t, "uptime", "tab.list", None)
            t, checks = t + 60_000 + rng.randint(-400, 400), checks + 1
        healthy.append({"kind": "health_check", "actor": dd.actor("uptime"), "action": "tab.list",
                        "every_s": 60, "count": checks, "loop": False})
    return healthy


def _stuck_agents(d: _Daemon, seed: int) -> list[Record]:
    """Two agents stuck while every call succeeds: a poll that never ends, a wait-snapshot
    cycle. Returns their answer-key entries (lines are added once the log is written)."""
    out = []
    with own_stream(d, stream(seed, "bproxy-stuck")) as dd:
        rng = stream(seed, "bproxy-stuck-poll")
        session, tab, t = _open_session(dd, rng, "pisub2", STUCK_START_MS)
        polls = 120
        first, last, _ = _loop(dd, rng, "pisub2", session, tab, t + 700, ("tab.status",), polls,
                               (2_000, 2_200))
        out.append({"kind": "stuck_poll", "actor": dd.actor("pisub2"), "session": session,
                    "action": "tab.status", "requests": polls, "assumed_calls": polls,
                    "start": iso_ms(first), "end": iso_ms(last), "detector": "repeated_action",
                    "loop": True})
        rng = stream(seed, "bproxy-stuck-cycle")
        session, tab, t = _open_session(dd, rng, "pisub3", STUCK_START_MS + 25_000)
        t = dd.request(t + 900, "pisub3", "navigate", session, tab=tab)
        rounds = 30
        first, last, _ = _loop(dd, rng, "pisub3", session, tab, t + 1_500, ("wait", "snapshot"),
                               rounds, (600, 750))
        out.append({"kind": "wait_snapshot_cycle", "actor": dd.actor("pisub3"), "session": session,
                    "cycle": ["wait", "snapshot"], "requests": 2 * rounds, "rounds": rounds,
                    "assumed_calls": 2 * rounds, "start": iso_ms(first), "end": iso_ms(last),
                    "detector": "alternating_action", "loop": True})
    return out


def _lines_of(records: list[Record], entry: Record) -> None:
    """First and last line of an answer-key entry's requests (by session and time)."""
    lo, hi = epoch_ms(entry["start"]), epoch_ms(entry["end"])
    hits = [i for i, r in enumerate(records, 1) if r.get("session") == entry["session"]
            and r.get("event") == "received" and lo <= r["time"] <= hi]
    entry |= {"first_line": hits[0], "last_line": hits[-1]}


def _storm_truth(actor: str | None, first: int, last: int, n: int) -> Record:
    return {"kind": "dead_session_retry", "actor": actor, "session": SESSION, "action": "scroll",
            "error": "SESSION_NOT_FOUND", "requests": n, "start": iso_ms(first),
            "end": iso_ms(last), "loop": True}


def write_bproxy_log(outdir: Path, seed: int = 7, *, incident: bool = True,
                     trimmed: bool = False, storm_requests: int = 1200,
                     stuck: bool = False) -> Record:
    """Write one daemon log covering about an hour around the 23:42 close of seed 001.

    `incident=False` gives the clean twin: the same background, line for line, minus the
    storm. `trimmed=True` writes only the looping agent's lines in the shape seed 001 quotes
    (no level/pid/hostname/id/ownerHash/destructive): without owner hashes nobody could tell
    other owners' lines apart, and an excerpt is one agent's lines. `stuck=True` adds, after
    the storm, the two agents stuck while every call succeeds and the healthy repetition
    around them (the decoys, in the clean twin too). Returns the answer key;
    line numbers are 1-based; `first_line`/`last_line` bound the storm, received to response.
    """
    rng = stream(seed, "bproxy")
    d = _Daemon(rng, pid=rng.randint(10_000, 99_999), hostname="Dimitris-MacBook-Pro.local",
                salt=hex_id(rng, 32))
    healthy = _background(d, seed, CLOSE_MS - 52 * 60_000, CLOSE_MS + 14 * 60_000)
    if incident:
        srng, t = stream(seed, "bproxy-storm"), STORM_START_MS
        for _ in range(storm_requests):
            d.request(t, VICTIM, "scroll", SESSION, error="SESSION_NOT_FOUND")
            last, t = t, t + srng.randint(96, 107)
    agents: list[Record] = []
    if stuck and not trimmed:  # an excerpt of the storming agent's lines has no one else
        healthy += _stuck_decoys(d, seed)
        agents = _stuck_agents(d, seed) if incident else []
    records = d.records(trimmed=trimmed, only=VICTIM if trimmed else None)
    n_lines = write_lines(outdir / LOG_NAME, map(_dumps, records))
    close_line = 1 + next(i for i, r in enumerate(records) if r.get("action") == "session.close"
                          and r.get("session") == SESSION)
    actor = None if trimmed else d.actor(VICTIM)
    truth: Record = {"format": "bproxy", "file": LOG_NAME, "lines": {LOG_NAME: n_lines},
                     "trimmed": trimmed, "close_line": close_line, "incidents": [],
                     "healthy": healthy[:1] if trimmed else healthy}
    if trimmed:
        truth["healthy"][0]["actor"] = None
    if incident:
        storm = _storm_truth(actor, STORM_START_MS, last, storm_requests)
        first = 1 + next(i for i, r in enumerate(records) if r.get("action") == "scroll"
                         and r.get("session") == SESSION and r["time"] >= STORM_START_MS)
        last_line = max(i for i, r in enumerate(records, 1)
                        if r.get("error_code") == "SESSION_NOT_FOUND")
        storm |= {"close_line": close_line, "first_line": first, "last_line": last_line}
        truth["incidents"].append(storm)
    for entry in agents:
        _lines_of(records, entry)
        truth["incidents"].append(entry)
    return truth


# ---------------------------------------------------------------------------------------------
# Full size: 1.2 M lines. The storm is written as fixed-width byte rows filled in by numpy.

FULL_HOSTNAME = "h"  # as in the reference's example line; keeps lines near the report's size
CHUNK = 1 << 16


def _storm_pair_template(pid: int, owner: str) -> tuple[np.ndarray, int, int, int, int]:
    """One received+response pair as bytes, and where its two times and two ids sit."""
    t1, t2, rid = 1111111111111, 2222222222222, "@" * 36
    base = {"level": 30, "pid": pid, "hostname": FULL_HOSTNAME}
    recv = _dumps({"level": 30, "time": t1} | base | {
        "id": rid, "action": "scroll", "session": SESSION, "destructive": True,
        "event": "received", "ownerHash": owner})
    resp = _dumps({"level": 30, "time": t2} | base | {
        "id": rid, "event": "response", "ok": False, "elapsed_ms": 0,
        "error_code": "SESSION_NOT_FOUND", "ownerHash": owner})
    pair = (recv + "\n" + resp + "\n").encode()
    id1 = pair.find(rid.encode())
    return (np.frombuffer(pair, np.uint8), pair.find(b"1111111111111"),
            pair.find(b"2222222222222"), id1, pair.find(rid.encode(), id1 + 1))


def _digits(values: np.ndarray) -> np.ndarray:
    """13-digit epoch-ms integers as ASCII rows."""
    return (values[:, None] // 10 ** np.arange(12, -1, -1, dtype=np.int64) % 10 + 48).astype(
        np.uint8)


_HEX = np.frombuffer(b"0123456789abcdef", np.uint8)
_UUID_COLS = np.r_[0:8, 9:13, 14:18, 19:23, 24:36]


def _uuids(gen: np.random.Generator, n: int) -> np.ndarray:
    """n random version-4 UUIDs as 36-byte ASCII rows."""
    raw = gen.integers(0, 256, (n, 16), dtype=np.uint8)
    raw[:, 6] = raw[:, 6] & 0x0F | 0x40
    raw[:, 8] = raw[:, 8] & 0x3F | 0x80
    hexed = np.empty((n, 32), np.uint8)
    hexed[:, 0::2], hexed[:, 1::2] = _HEX[raw >> 4], _HEX[raw & 15]
    out = np.full((n, 36), ord("-"), np.uint8)
    out[:, _UUID_COLS] = hexed
    return out


def _storm_times(gen: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Received and response times: ~101 ms apart with a few ms of jitter, pinned to the
    seed's first and last lines."""
    gaps = np.clip(gen.normal(101.4, 2.0, n - 1), 92, 112)
    cum = np.concatenate(([0.0], np.cumsum(gaps)))
    recv = STORM_START_MS + np.rint(cum * ((STORM_END_MS - STORM_START_MS) / cum[-1]))
    recv = recv.astype(np.int64)
    recv[1] = STORM_START_MS + 100
    resp = recv + (gen.random(n) < 0.3)
    resp[0], resp[1], resp[-1] = recv[0] + 1, recv[1], recv[-1]
    return recv, resp


def _write_storm(fh: BinaryIO, gen: np.random.Generator, recv: np.ndarray, resp: np.ndarray,
                 template: tuple[np.ndarray, int, int, int, int],
                 inserts: list[tuple[int, bytes]]) -> None:
    """Write the storm pairs chunk by chunk, splicing each healthy line in before the pair
    whose index it carries."""
    row, o1, o2, i1, i2 = template
    n, width, k = len(recv), len(row), 0
    for c0 in range(0, n, CHUNK):
        c1 = min(n, c0 + CHUNK)
        buf = np.tile(row, (c1 - c0, 1))
        ids = _uuids(gen, c1 - c0)
        buf[:, o1:o1 + 13], buf[:, o2:o2 + 13] = _digits(recv[c0:c1]), _digits(resp[c0:c1])
        buf[:, i1:i1 + 36], buf[:, i2:i2 + 36] = ids, ids
        flat, prev = buf.reshape(-1), c0
        while k < len(inserts) and inserts[k][0] < c1:
            pos, line = inserts[k]
            fh.write(flat[(prev - c0) * width:(pos - c0) * width].tobytes())
            fh.write(line)
            prev, k = pos, k + 1
        fh.write(flat[(prev - c0) * width:].tobytes())
    for _, line in inserts[k:]:
        fh.write(line)


def bproxy_full_incident(path: Path, seed: int = 1) -> Record:
    """Write seed 001 at full size: 608,970 dead-session scrolls over 17 h (~1.2 M lines,
    ~235 MiB) with a little healthy traffic, for benchmarks. Returns the answer key."""
    rng = stream(seed, "bproxy-full")
    d = _Daemon(rng, pid=rng.randint(1000, 9999), hostname=FULL_HOSTNAME, salt=hex_id(rng, 32))
    d.emit(CLOSE_MS - 55 * 60_000, None, event="ws_connect", ws_client="client-1")
    d.outage(CLOSE_MS + 5 * 3_600_000, CLOSE_MS + 5 * 3_600_000 + 95_000, reason="sleep")
    victim_requests = _victim_prelude(d, stream(seed, "bproxy-full-victim"),
                                      CLOSE_MS - 50 * 60_000)
    brng, hours = stream(seed, "bproxy-full-halbot"), (-0.7, 1.5, 4.0, 7.5, 9.0, 12.0, 14.5, 16.6)
    halbot = sum(_browse(d, brng, "halbot", start, start + brng.randint(300_000, 900_000))
                 for start in (CLOSE_MS + int(h * 3_600_000) for h in hours))
    healthy = [{"kind": "browsing", "actor": d.actor(VICTIM), "session": SESSION,
                "requests": victim_requests, "loop": False},
               {"kind": "browsing", "actor": d.actor("halbot"), "sessions": len(hours),
                "requests": halbot, "loop": False}]
    records = d.records()
    times = np.array([r["time"] for r in records], np.int64)
    gen = np.random.default_rng(seed)
    recv, resp = _storm_times(gen, FULL_REQUESTS)
    positions = np.searchsorted(recv, times, side="left")
    inserts = [(int(p), (_dumps(r) + "\n").encode()) for p, r in zip(positions, records,
                                                                          strict=True)]
    template = _storm_pair_template(d.pid, d.owner(VICTIM))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        _write_storm(fh, gen, recv, resp, template, inserts)
    before = int((positions == 0).sum())
    after = int((positions == FULL_REQUESTS).sum())
    lines = len(records) + 2 * FULL_REQUESTS
    close_idx = next(i for i, r in enumerate(records) if r.get("action") == "session.close"
                     and r.get("session") == SESSION)
    storm = _storm_truth(d.actor(VICTIM), int(recv[0]), int(recv[-1]), FULL_REQUESTS)
    storm |= {"close_line": close_idx + 1, "first_line": before + 1,
              "last_line": lines - after, "lines": 2 * FULL_REQUESTS}
    return {"format": "bproxy", "file": path.name, "lines": {path.name: lines},
            "bytes": path.stat().st_size, "trimmed": False, "close_line": close_idx + 1,
            "incidents": [storm], "healthy": healthy}

"""bproxy-shaped logs in many shapes, so that no single file shape is what gets tuned.

The seed-001 storm (a caller scrolling the closed session `6afr3v` every ~100 ms, answered
`SESSION_NOT_FOUND` at once) amid healthy sessions interleaved with it, each of several
callers of one daemon, written in a `Variant`'s shape:

- `id_key`: the request id under `id` (bproxy), `req_id`, `reqId` (pino-http, Fastify),
  `request_id`, or absent (a daemon that logs none: only `time`, `elapsed_ms`, the caller and
  the order of lines tie a response to its request);
- `depth`: how deep the `args`, `result` and `err` objects nest (1 to 3);
- `shuffled`: keys in a fixed random order per kind of line instead of pino's;
- `extra_keys`: top-level keys bproxy does not document (`v`, `svc`, `env`, `trace`);
- `stats`: a `stats` line every ~30 s, with a nested object;
- `second_storm`: a second caller storming another closed session, later.

Whatever the shape, a scan must find the same storm: one `repeated_error` finding of
`storm_requests` failed scrolls (two with `second_storm`). `scale` multiplies the time span,
the storm and the healthy traffic alike (10× the log: 170 h, ten times the lines). Lines are
written from string templates, not `json.dumps`, so the 235 MB log takes seconds.
"""

from __future__ import annotations

import heapq
import itertools
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._common import sha256_hex, stream

CLOSE_MS = 1781826140544  # seed 001: `session.close` of 6afr3v
STORM_START_MS = 1781826141514
STORM_HOURS = 17.15  # seed 001: the storm ran ~17 h
FULL_REQUESTS = 608_970  # seed 001: failed scrolls in those 17 h
SESSION = "6afr3v"
SECOND_SESSION = "q2x7mm"
ID_KEYS = ("id", "req_id", "reqId", "request_id", None)
Record = dict[str, Any]


@dataclass(frozen=True)
class Variant:
    name: str
    id_key: str | None = "id"
    depth: int = 1
    shuffled: bool = False
    extra_keys: bool = False
    stats: bool = True
    second_storm: bool = False


# The variations the benchmark writes at full size (and the tests small).
VARIANTS = (
    Variant("id"),
    Variant("req_id", id_key="req_id", depth=2, extra_keys=True),
    Variant("reqId", id_key="reqId", depth=3, shuffled=True),
    Variant("request_id", id_key="request_id", shuffled=True, extra_keys=True),
    Variant("no_id", id_key=None, depth=2),
    Variant("second_storm", second_storm=True, depth=2, shuffled=True),
)


def variant(name: str) -> Variant:
    """The variant called `name`; a ValueError naming the variants there are if none is."""
    for v in VARIANTS:
        if v.name == name:
            return v
    raise ValueError(f"no variant {name!r}: the variants are "
                     f"{', '.join(v.name for v in VARIANTS)}")


def _nest(depth: int, leaf: Record, *path: str) -> Record:
    """`leaf` under `depth` - 1 of the keys in `path`."""
    out = leaf
    for key in reversed(path[:depth - 1]):
        out = {key: out}
    return out


class _Shape:
    """String templates of each kind of line in a variant's shape: `fill` puts the values of
    one line in (each already JSON text)."""

    def __init__(self, v: Variant, pid: int, rng: random.Random):
        self.v = v
        head = {"level": "30", "time": "{time}", "pid": str(pid), "hostname": '"h"'}
        rid = {v.id_key: '"{rid}"'} if v.id_key else {}
        extra = ({"v": "1", "svc": '"bproxy"', "env": '"prod"', "trace": '"{trace}"'}
                 if v.extra_keys else {})
        self.kinds = {
            "received": head | rid | {"action": '"{action}"', "session": '"{session}"',
                                      "args": "{args}", "destructive": "{destructive}",
                                      "event": '"received"', "ownerHash": '"{owner}"'} | extra,
            "forwarded": head | rid | {"event": '"forwarded"', "ws_client": '"client-1"',
                                       "tab": "{tab}"},
            "ok": head | rid | {"event": '"response"', "ok": "true",
                                "elapsed_ms": "{elapsed}", "result": "{result}",
                                "ownerHash": '"{owner}"'} | extra,
            "error": head | rid | {"event": '"response"', "ok": "false",
                                   "elapsed_ms": "{elapsed}", "error_code": '"{error}"',
                                   "err": "{err}", "ownerHash": '"{owner}"'} | extra,
            "stats": head | {"event": '"stats"', "stats": "{stats}", "msg": '"stats"'},
        }
        self.templates = {}
        for kind, fields in self.kinds.items():
            keys = list(fields)
            if v.shuffled:
                rng.shuffle(keys)
            # the values are placeholders or literals without braces: only the object's own
            # braces need escaping
            self.templates[kind] = "{{" + ",".join(f'"{k}":{fields[k]}' for k in keys) + "}}"

    def line(self, kind: str, **values: Any) -> str:
        return self.templates[kind].format(**values)


def _json(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


@dataclass
class _Writer:
    shape: _Shape
    rng: random.Random
    lines: list[tuple[int, int, int, str]]  # (time, stream, order, text): sorts into the log
    stream: int = 0  # equal times: the lines of a lower stream first, then in their order
    count: itertools.count = field(default_factory=itertools.count)

    def emit(self, t: int, text: str) -> None:
        self.lines.append((t, self.stream, next(self.count), text))

    def rid(self) -> str:
        return f"{self.rng.getrandbits(128):032x}"

    def request(self, t: int, owner: str, action: str, session: str, args: str, *,
                error: str | None = None, elapsed: int, result: str = "{}",
                forwarded: bool = True, err: str = "{}", late: int = 0) -> None:
        """A request at `t` and its response `elapsed` ms later (`late` ms more: the
        response logged after the time it states it took)."""
        s, rid = self.shape, self.rid()
        trace = rid[:8]
        self.emit(t, s.line("received", time=t, rid=rid, action=action, session=session,
                            args=args, destructive="true" if action == "scroll" else "false",
                            owner=owner, trace=trace))
        if forwarded:
            self.emit(t + 1, s.line("forwarded", time=t + 1, rid=rid, tab=1843021000 + len(owner)))
        done = t + elapsed + late
        if error:
            self.emit(done, s.line("error", time=done, rid=rid, elapsed=elapsed, error=error,
                                   err=err, owner=owner, trace=trace))
        else:
            self.emit(done, s.line("ok", time=done, rid=rid, elapsed=elapsed, result=result,
                                   owner=owner, trace=trace))


def _storm(w: _Writer, v: Variant, owner: str, session: str, start: int, n: int,
           span_ms: float, bounds: list[int]) -> Iterator[tuple[int, int, int, str]]:
    """`n` scrolls of a closed session, ~100 ms apart over `span_ms`; each answered
    SESSION_NOT_FOUND at once (elapsed 0, logged in the same or the next ms). Its lines, in
    order, as they are made (the 10× storm is 12 M lines); `bounds` gets its first and last
    request time."""
    rng = w.rng
    args = _json(_nest(v.depth, {"dy": 600, "dx": 0}, "scroll", "by"))
    err = _json(_nest(v.depth, {"type": "SessionError", "retry": "never"}, "cause", "detail"))
    step = span_ms / n
    t = start
    first = start
    for _ in range(n):
        # the response in the same ms, or (30 %) logged a ms later, still elapsed 0
        w.request(t, owner, "scroll", session, args, error="SESSION_NOT_FOUND",
                  elapsed=0, forwarded=False, err=err, late=int(rng.random() < 0.3))
        yield from w.lines
        w.lines.clear()
        last = t
        t += max(1, int(round(step + rng.uniform(-5, 5))))
    bounds[:] = [first, last]


def _healthy(w: _Writer, v: Variant, owner: str, session: str, start: int, end: int) -> int:
    """One caller browsing at machine-assisted pace: a request every 1–8 s, answered after
    30–900 ms (navigate up to 2.6 s), a few ordinary errors, one timeout now and then."""
    rng, n, t = w.rng, 0, start
    w.request(t, owner, "session.bind", session, _json(_nest(v.depth, {"mode": "fast"}, "bind")),
              elapsed=rng.randint(2, 9))
    while t < end:
        t += rng.randint(1_000, 8_000)
        action = rng.choices(("navigate", "click", "scroll", "snapshot", "tab.status"),
                             (2, 5, 6, 4, 2))[0]
        args = _json(_nest(v.depth, {"target": f"e{rng.randint(1, 400)}", "n": n},
                           action.replace(".", "_"), "opts"))
        elapsed = rng.randint(700, 2_600) if action == "navigate" else rng.randint(30, 900)
        error = None
        if action == "click" and rng.random() < 0.06:
            error = "ELEMENT_NOT_FOUND"
        elif rng.random() < 0.003:
            error, elapsed = "TIMEOUT", 30_000
        result = _json(_nest(v.depth, {"ok": True, "bytes": rng.randint(200, 90_000)},
                             "data", "page"))
        err = _json(_nest(v.depth, {"type": "CommandError", "retry": "backoff"}, "cause"))
        w.request(t, owner, action, session, args, error=error, elapsed=elapsed, result=result,
                  err=err)
        n += 1
    w.request(t + rng.randint(1_000, 5_000), owner, "session.close", session, "{}",
              elapsed=rng.randint(2, 9))
    return n + 2


def _session_id(rng: random.Random) -> str:
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz234567") for _ in range(6))


def write_bproxy_variant(path: Path, v: Variant, *, seed: int = 1, scale: float = 1.0,
                         storm_requests: int | None = None, storm_hours: float | None = None,
                         healthy_sessions: int = 20, session_minutes: float = 60.0) -> Record:
    """Write the log of variant `v`; return its answer key (the storms: caller, session,
    requests, first and last request time). Full size (the defaults): 608,970 storm
    requests over 17 h, 20 healthy sessions of an hour each, spread over the storm."""
    rng = stream(seed, f"bproxy-variant-{v.name}")
    pid = 4000 + rng.randint(0, 5999)
    shape = _Shape(v, pid, random.Random(f"{seed}:shape:{v.name}"))
    w = _Writer(shape, rng, [], stream=1)
    salt = f"{rng.getrandbits(128):032x}"

    def owner(nick: str) -> str:
        return sha256_hex(salt, nick)[:8]

    n = storm_requests if storm_requests is not None else round(FULL_REQUESTS * scale)
    span = (storm_hours if storm_hours is not None else STORM_HOURS * scale) * 3_600_000
    victim = owner("pisub1")
    # the victim's session, closed just before its storm
    w.request(CLOSE_MS - 90_000, victim, "session.bind", SESSION,
              _json(_nest(v.depth, {"mode": "human"}, "bind")), elapsed=3)
    w.request(CLOSE_MS - 40_000, victim, "navigate", SESSION,
              _json(_nest(v.depth, {"url": "https://www.linkedin.com/feed/"}, "navigate")),
              elapsed=1_200)
    w.request(CLOSE_MS, victim, "session.close", SESSION, "{}", elapsed=4)
    storms = [(victim, SESSION, n, [])]
    streams = [_storm(_Writer(shape, rng, []), v, victim, SESSION, STORM_START_MS, n, span,
                      storms[0][3])]
    if v.second_storm:  # another caller, another closed session, later and shorter
        second, start = owner("pisub9"), STORM_START_MS + int(span * 0.55)
        w.request(start - 2_000, second, "session.close", SECOND_SESSION, "{}", elapsed=3)
        m = max(20, n // 4)
        storms.append((second, SECOND_SESSION, m, []))
        streams.append(_storm(_Writer(shape, random.Random(f"{seed}:second:{v.name}"), [],
                                      stream=2), v, second, SECOND_SESSION, start, m,
                              span * 0.2, storms[1][3]))
    # healthy sessions spread over the storm, overlapping it and each other
    total = round(healthy_sessions * max(1.0, scale))
    healthy = 0
    for i in range(total):
        hrng = random.Random(f"{seed}:healthy:{v.name}:{i}")
        begin = STORM_START_MS + int(hrng.random() * span) - 10_000
        sub = _Writer(shape, hrng, w.lines, stream=1, count=w.count)
        healthy += _healthy(sub, v, owner(f"agent{i}"), _session_id(hrng), begin,
                            begin + int(session_minutes * 60_000))
    if v.stats:  # the daemon's own stats every ~30 s, the first one at start-up
        t, k = CLOSE_MS - 120_000, 0
        end = STORM_START_MS + int(span) + 60_000
        while t < end:
            st = _json(_nest(v.depth, {"rss_mb": 80 + k % 50, "open_sessions": 1 + k % 7,
                                       "requests": k * 300}, "process", "memory"))
            w.emit(t, shape.line("stats", time=t, stats=st))
            t, k = t + 30_000, k + 1
    w.lines.sort()
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = 0
    with open(path, "w", encoding="utf-8") as fh:
        merged = heapq.merge(w.lines, *streams)
        while chunk := list(itertools.islice(merged, 65_536)):
            fh.write("\n".join(text for _, _, _, text in chunk) + "\n")
            lines += len(chunk)
    return {"format": "bproxy", "variant": v.name, "file": path.name, "lines": lines,
            "bytes": path.stat().st_size, "healthy_requests": healthy,
            "storms": [{"actor": f"{pid}:{o}", "session": s, "requests": k, "start": a,
                        "end": b} for o, s, k, (a, b) in storms]}

"""The guards spec: a TOML file of `[[guard]]` tables, each a runtime guard to replay.

    [[guard]]
    name = "breaker"
    type = "breaker"      # trips after `threshold` consecutive identical errors within one key
    key = ["session"]     # canonical columns that scope the guard's state
    threshold = 3

Every guard has a `name` (letters, digits, `-` and `_`; unique in the spec), a `type` (one of
`TYPES`), and optionally `key` (the canonical columns that scope its state), `kinds` (the event
kinds it judges), `where` (a predicate over canonical columns: only matching events are seen)
and `description` (shown in the report). The rest are the type's own parameters, each
documented in `TYPES`. A spec may `include` presets (shipped TOML files in
`loophound/guards/presets/`) by name. Everything is checked when the spec is read, and a
mistake is one `ConfigError` that names the file, the guard and the key.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..vocabulary import EventKind

REQUIRED = object()  # a parameter without a default

# Columns a guard's state can be scoped by, and a `where` may test.
KEY_COLUMNS = ("actor", "target", "session", "channel", "action", "error", "kind", "role",
               "model", "format", "file", "event_type", "corr_id", "parent_id")
WHERE_COLUMNS = KEY_COLUMNS + ("ok", "depth", "tokens", "cost_usd")
WHERE_OPS = ("eq", "ne", "in", "not_in", "null", "lt", "le", "gt", "ge")
KINDS = tuple(k.value for k in EventKind)
# Events that are work a guard can refuse (not answers, lifecycle or session ends).
ACTIONS = ("request", "message", "room_post", "trigger", "session_start", "tool_call",
           "llm_call", "step", "repair_attempt")
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, None: 1}


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # int, float, duration, bool, names, errors, unit
    default: Any
    doc: str
    minimum: float = 0

    @property
    def numeric(self) -> bool:
        return self.kind in ("int", "float", "duration")


@dataclass(frozen=True)
class GuardType:
    name: str
    summary: str  # what it does, one sentence
    blocks: str  # what a refusal stops
    params: tuple[Param, ...]
    kinds: tuple[str, ...]  # the event kinds it judges by default
    key: tuple[str, ...]  # its default scope
    source: str  # where its semantics come from

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)


_ERRORS_DOC = ("which errors count: a list of codes, \"terminal\" (the codes the log's format "
               "says never to retry, e.g. bproxy's SESSION_NOT_FOUND) or omitted (any failure)")

TYPES: dict[str, GuardType] = {t.name: t for t in (
    GuardType(
        "breaker", "trips after `threshold` consecutive identical errors within one key, then "
        "refuses the key's calls (for `reset`, then one trial call; without `reset`, for good)",
        "the refused call and its answers", (
            Param("threshold", "int", REQUIRED, "consecutive failures that open the breaker", 1),
            Param("identical", "bool", True, "count only identical errors in a row (false: any "
                  "failure, as pybreaker)"),
            Param("errors", "errors", None, _ERRORS_DOC),
            Param("gap", "duration", None, "a longer pause between two failures starts the count "
                  "again (omitted: no limit)"),
            Param("reset", "duration", None, "time open before one trial call; a failed trial opens "
                  "it again (omitted: open for good, the incident write-up's abort)"),
        ), ("request", "tool_call", "llm_call", "step"), ("session",),
        "seed 001 fix 1 (3 consecutive identical errors per session: abort); pybreaker"),
    GuardType(
        "cycle", "refuses a trigger A→B while the last `window` holds a path B→…→A of at most "
        "`max_depth` hops (a self-trigger A→A is a cycle too)",
        "the refused trigger and what it would have started: the child session, its hooks and "
        "their sessions", (
            Param("window", "duration", REQUIRED, "how far back the trigger graph reaches"),
            Param("max_depth", "int", 5, "longest path searched, in hops (BFS depth)", 1),
        ), ("trigger",), (),
        "seed 002 layer 2 (Redis trigger graph, 30 min, BFS depth ≤ 5)"),
    GuardType(
        "rate", "refuses an event when its key already had `limit` events in the last `window` "
        "(a sliding window; `where` selects what is counted)",
        "the refused event and everything it caused", (
            Param("limit", "int", REQUIRED, "events allowed per key per window"),
            Param("window", "duration", REQUIRED, "the sliding window"),
        ), ("request", "message", "room_post", "trigger", "tool_call", "llm_call", "step"),
        ("actor",), "seed 002 layer 3 (5 hooks/agent/hour); seed 001 layer 4; Envoy local rate "
        "limit, LiteLLM rpm_limit"),
    GuardType(
        "error_rate", "trips when a key's calls in the last `window` (or last `calls` calls) hold "
        "`max_errors` failures, or a failure share of `max_ratio` over at least `min_calls`; "
        "then refuses the key's calls for `open` (growing by `backoff` while trial calls fail)",
        "the refused call and its answers", (
            Param("window", "duration", None, "sliding time window (or use `calls`)"),
            Param("calls", "int", None, "count window: the key's last N calls (or use "
                  "`window`)", 1),
            Param("max_errors", "int", None, "failures in the window that trip it (or use "
                  "`max_ratio`)", 1),
            Param("max_ratio", "float", None, "failure share in the window that trips it", 0),
            Param("min_calls", "int", 1, "calls the window needs before it can trip", 1),
            Param("open", "duration", 60.0, "how long it refuses calls once tripped"),
            Param("backoff", "float", 1.0, "each failed trial call multiplies `open` by this", 1),
            Param("max_open", "duration", None, "the longest `open` gets (omitted: no cap)"),
            Param("errors", "errors", None, _ERRORS_DOC),
        ), ("request", "tool_call", "llm_call", "step"), ("session",),
        "seed 001 layer 1 (error-path throttle: 5 in 10 s, 1 s doubling to 30 s); "
        "resilience4j, Polly"),
    GuardType(
        "budget", "refuses an event when its key has spent `limit` (dollars or tokens) in the "
        "last `window`; every event of the key that happened counts toward the spend",
        "the refused event and everything it caused (a refused session: all it would have "
        "spent)", (
            Param("limit", "float", REQUIRED, "spend allowed per key per window"),
            Param("unit", "unit", "usd", "usd (the attribution's dollars) or tokens"),
            Param("window", "duration", None, "the sliding window (omitted: the whole log)"),
        ), ("request", "message", "room_post", "trigger", "session_start", "tool_call",
            "llm_call", "step"), ("actor",), "LiteLLM max_budget + budget_duration; Portkey"),
    GuardType(
        "depth", "refuses an event whose hop depth exceeds `max_depth`; with `carry`, an event "
        "caused by another (a reply, a child session's hook, a child span) is one hop deeper "
        "than its cause whatever it states, unless its role is `user`",
        "the refused event and everything it caused (the rest of the reply chain)", (
            Param("max_depth", "int", REQUIRED, "deepest hop allowed"),
            Param("carry", "bool", False, "carry depth across hops instead of trusting the "
                  "depth each event states"),
        ), ("message", "room_post", "trigger", "request"), (),
        "seed 000 (sven MAX_HOP_DEPTH = 4, carried across protocols); AWS Lambda recursion "
        "detection (≈16)"),
    GuardType(
        "isolation", "refuses an event from one actor of `agents` to another of them (and, with "
        "`self`, from any actor to itself)",
        "the refused event and everything it caused", (
            Param("agents", "names", (), "actors that may not trigger each other"),
            Param("self", "bool", False, "also refuse an actor triggering itself (exclude_self)"),
        ), ("trigger", "message", "request"), (),
        "seed 002 layer 1 (monitoring-agent isolation)"),
    GuardType(
        "turns", "refuses every call of a key after its first `max` (per session or "
        "conversation)", "the refused call and everything it caused", (
            Param("max", "int", REQUIRED, "calls allowed per key"),
        ), ("llm_call",), ("session",),
        "OpenAI Agents SDK max_turns 10; CrewAI max_iter 25; LangGraph recursion_limit; AG2 "
        "max_consecutive_auto_reply 100"),
    GuardType(
        "repairs", "refuses repair attempts of a step beyond 1 + `max_repairs`",
        "the refused attempt and everything it caused", (
            Param("max_repairs", "int", 1, "repairs allowed per step (attempts = 1 + this)"),
        ), ("repair_attempt",), ("session", "corr_id"), "LabTrust max_repairs (default 1)"),
    GuardType(
        "stuck", "stops a key (refuses all its later calls) once its last `repeats` calls were "
        "the same call with the same result, or its last `error_repeats` the same call with the "
        "same error", "every later call of the key and what it caused", (
            Param("repeats", "int", 4, "identical call + identical result in a row", 2),
            Param("error_repeats", "int", 3, "identical call + identical error in a row", 2),
        ), ("tool_call",), ("session", "actor"),
        "OpenHands StuckDetector (same action + observation 4×, same action + error 3×)"),
)}

COMMON = ("name", "type", "key", "kinds", "where", "description")


@dataclass(frozen=True)
class Guard:
    """One guard of a spec, checked and with every default filled in."""

    name: str
    type: str
    params: dict[str, Any]  # the type's parameters; durations in seconds
    key: tuple[str, ...]
    kinds: tuple[str, ...]
    where: tuple[tuple[str, str, Any], ...] = ()  # (column, op, value), all must hold
    description: str = ""
    preset: str | None = None  # the preset it came from

    def replace(self, param: str, value: Any) -> Guard:
        return dataclasses.replace(self, params={**self.params, param: value})

    def describe(self) -> dict:
        """Its parameters as the contract shows them (durations as `30m`, `10s`)."""
        t = TYPES[self.type]
        out: dict[str, Any] = {"key": list(self.key), "kinds": list(self.kinds)}
        for p in t.params:
            out[p.name] = show_value(p, self.params[p.name])
        if self.where:
            out["where"] = {c: ({op: v} if op != "eq" else v) for c, op, v in self.where}
        return out


@dataclass(frozen=True)
class Spec:
    guards: tuple[Guard, ...]
    source: str  # the file or presets it was read from
    reply_within_s: float = 60.0
    descriptions: dict[str, str] = field(default_factory=dict)  # preset → its description


# -- values ------------------------------------------------------------------------------------


def parse_duration(value: Any) -> float:
    """`500ms`, `10s`, `30m`, `1h`, `1d`, `2w` or a number of seconds → seconds."""
    if isinstance(value, bool):
        raise ValueError("a duration, not true/false")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        m = _DURATION.fullmatch(str(value))
        if not m:
            raise ValueError(f"{value!r} is not a duration such as 500ms, 10s, 30m, 1h or 1d")
        seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{value!r} is not a duration of zero or more")
    return seconds


def duration_text(seconds: float) -> str:
    """The shortest exact spelling: 1800 → `30m`, 0.5 → `500ms`."""
    for unit, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    ms = seconds * 1000
    return f"{int(ms)}ms" if ms == int(ms) else f"{seconds:g}s"


def show_value(p: Param, value: Any) -> Any:
    if value is None:
        return None
    if p.kind == "duration":
        return duration_text(value)
    if p.kind in ("names",):
        return list(value)
    if isinstance(value, tuple):
        return list(value)
    return value


def _coerce(p: Param, value: Any) -> Any:
    """`value` as parameter `p` takes it; ValueError says why not."""
    if p.kind == "duration":
        return parse_duration(value)
    if p.kind == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {value!r}")
        return value
    if p.kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected a whole number, got {value!r}")
        if value < p.minimum:
            raise ValueError(f"must be at least {p.minimum:g}, got {value}")
        return value
    if p.kind == "float":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"expected a number, got {value!r}")
        if not math.isfinite(value) or value < p.minimum:
            raise ValueError(f"must be a number of at least {p.minimum:g}, got {value!r}")
        return float(value)
    if p.kind == "names":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"expected a list of names, got {value!r}")
        return tuple(sorted(set(value)))
    if p.kind == "errors":
        if value == "terminal":
            return "terminal"
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value) or not value:
            raise ValueError(f'expected a list of error codes or "terminal", got {value!r}')
        return tuple(sorted(set(value)))
    if p.kind == "unit":
        if value not in ("usd", "tokens"):
            raise ValueError(f'expected "usd" or "tokens", got {value!r}')
        return value
    raise AssertionError(p.kind)


def _did_you_mean(word: str, choices) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


# -- reading a spec ----------------------------------------------------------------------------


def _where(raw: Any, where: str) -> tuple[tuple[str, str, Any], ...]:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: `where` must be a table such as "
                          '{ error = "SESSION_NOT_FOUND" } or { actor = ["a", "b"] }')
    out = []
    for column, cond in sorted(raw.items()):
        if column not in WHERE_COLUMNS:
            raise ConfigError(f"{where}: `where` names {column!r}, which is not a column a guard "
                              f"can test{_did_you_mean(column, WHERE_COLUMNS)}; valid: "
                              f"{', '.join(WHERE_COLUMNS)}")
        if isinstance(cond, dict):
            for op, value in sorted(cond.items()):
                if op not in WHERE_OPS:
                    raise ConfigError(f"{where}: `where.{column}` has the test {op!r}"
                                      f"{_did_you_mean(op, WHERE_OPS)}; valid: "
                                      f"{', '.join(WHERE_OPS)}")
                if op in ("in", "not_in") and not isinstance(value, list):
                    raise ConfigError(f"{where}: `where.{column}.{op}` must be a list")
                if op == "null" and not isinstance(value, bool):
                    raise ConfigError(f"{where}: `where.{column}.null` must be true or false")
                if op in ("lt", "le", "gt", "ge") and (
                        isinstance(value, bool) or not isinstance(value, int | float)):
                    raise ConfigError(f"{where}: `where.{column}.{op}` must be a number")
                out.append((column, op, tuple(value) if isinstance(value, list) else value))
        elif isinstance(cond, list):
            out.append((column, "in", tuple(cond)))
        else:
            out.append((column, "eq", cond))
    return tuple(out)


def _columns(raw: Any, where: str, what: str) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(c, str) for c in raw):
        raise ConfigError(f"{where}: `{what}` must be a list of column names, e.g. "
                          '["session"]')
    for c in raw:
        if c not in KEY_COLUMNS:
            raise ConfigError(f"{where}: `{what}` names {c!r}, which is not a canonical column "
                              f"a guard can be scoped by{_did_you_mean(c, KEY_COLUMNS)}; valid: "
                              f"{', '.join(KEY_COLUMNS)}")
    return tuple(raw)


def guard_from_table(raw: Any, where: str, preset: str | None = None) -> Guard:
    """One `[[guard]]` table, checked; `where` says where it is for the error messages."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: each [[guard]] must be a table")
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(f"{where}: `name` must be letters, digits, - or _ (at most 64), "
                          f"got {name!r}")
    where = f"{where} ({name!r})"
    kind = raw.get("type")
    if kind not in TYPES:
        hint = _did_you_mean(str(kind), TYPES) if isinstance(kind, str) else ""
        raise ConfigError(f"{where}: `type` {kind!r} is not a guard type{hint}; types: "
                          f"{', '.join(TYPES)}")
    t = TYPES[kind]
    for k in raw:
        if k not in COMMON and t.param(k) is None:
            raise ConfigError(f"{where}: unknown parameter {k!r} for a {kind} guard"
                              f"{_did_you_mean(k, [*COMMON, *(p.name for p in t.params)])}; "
                              f"{kind} takes: {', '.join(p.name for p in t.params)} (and "
                              f"{', '.join(COMMON[2:])})")
    params = {}
    for p in t.params:
        if p.name in raw:
            try:
                params[p.name] = _coerce(p, raw[p.name])
            except ValueError as exc:
                raise ConfigError(f"{where}: `{p.name}`: {exc} ({p.doc})") from None
        elif p.default is REQUIRED:
            raise ConfigError(f"{where}: a {kind} guard needs `{p.name}` ({p.doc})")
        else:
            params[p.name] = p.default
    _check_type(kind, params, where)
    key = _columns(raw["key"], where, "key") if "key" in raw else t.key
    kinds = t.kinds
    if "kinds" in raw:
        kinds_raw = raw["kinds"]
        if not isinstance(kinds_raw, list) or not kinds_raw or not all(
                isinstance(k, str) for k in kinds_raw):
            raise ConfigError(f"{where}: `kinds` must be a list of event kinds")
        for k in kinds_raw:
            if k not in KINDS:
                raise ConfigError(f"{where}: `kinds` names {k!r}, which is not an event kind"
                                  f"{_did_you_mean(k, KINDS)}; kinds: {', '.join(KINDS)}")
        kinds = tuple(dict.fromkeys(kinds_raw))
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise ConfigError(f"{where}: `description` must be text")
    return Guard(name, kind, params, key, kinds,
                 _where(raw["where"], where) if "where" in raw else (), description, preset)


def _check_type(kind: str, p: dict, where: str) -> None:
    """What one parameter cannot say alone."""
    if kind == "error_rate":
        if (p["window"] is None) == (p["calls"] is None):
            raise ConfigError(f"{where}: an error_rate guard needs one of `window` (a duration) "
                              "or `calls` (a count), not both")
        if (p["max_errors"] is None) == (p["max_ratio"] is None):
            raise ConfigError(f"{where}: an error_rate guard needs one of `max_errors` or "
                              "`max_ratio`, not both")
        if p["max_ratio"] is not None and not 0 < p["max_ratio"] <= 1:
            raise ConfigError(f"{where}: `max_ratio` is a share between 0 and 1, got "
                              f"{p['max_ratio']}")
    if kind in ("rate", "cycle") and p["window"] <= 0:
        raise ConfigError(f"{where}: `window` must be longer than zero")
    if kind == "isolation" and not p["agents"] and not p["self"]:
        raise ConfigError(f"{where}: an isolation guard needs `agents` (a list of actors) or "
                          "`self = true`")


def _read_toml(text: str, source: str) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"guards spec {source}: not valid TOML: {exc}") from None


def _tables(doc: dict, source: str, preset: str | None, seen: tuple[str, ...]) -> tuple[
        list[Guard], dict[str, str], float | None]:
    allowed = ("guard", "include", "description", "replay")
    for k in doc:
        if k not in allowed:
            raise ConfigError(f"guards spec {source}: unknown key {k!r}"
                              f"{_did_you_mean(k, allowed)}; a spec holds [[guard]] tables and "
                              "optionally include, description, [replay]")
    guards: list[Guard] = []
    descriptions: dict[str, str] = {}
    if preset is not None:
        descriptions[preset] = str(doc.get("description", ""))
    includes = doc.get("include", [])
    if not isinstance(includes, list) or not all(isinstance(i, str) for i in includes):
        raise ConfigError(f"guards spec {source}: `include` must be a list of preset names")
    for name in includes:
        try:
            got = preset_spec(name, seen)
        except ConfigError as exc:
            raise ConfigError(f"guards spec {source}: include: {exc}") from None
        guards += got.guards
        descriptions.update(got.descriptions)
    tables = doc.get("guard", [])
    if not isinstance(tables, list):
        raise ConfigError(f"guards spec {source}: write each guard as a [[guard]] table")
    for i, raw in enumerate(tables, 1):
        guards.append(guard_from_table(raw, f"guards spec {source}: [[guard]] #{i}", preset))
    reply = None
    if "replay" in doc:
        r = doc["replay"]
        if not isinstance(r, dict) or set(r) - {"reply_within"}:
            raise ConfigError(f"guards spec {source}: [replay] takes only reply_within")
        try:
            reply = parse_duration(r.get("reply_within", 60))
        except ValueError as exc:
            raise ConfigError(f"guards spec {source}: [replay] reply_within: {exc}") from None
    return guards, descriptions, reply


def _unique(guards: list[Guard], source: str) -> tuple[Guard, ...]:
    names: dict[str, Guard] = {}
    for g in guards:
        if g.name in names:
            raise ConfigError(f"guards spec {source}: two guards are named {g.name!r}; give each "
                              "guard its own name")
        names[g.name] = g
    return tuple(guards)


def parse_spec(text: str, source: str = "<text>") -> Spec:
    """A spec from TOML text."""
    guards, descriptions, reply = _tables(_read_toml(text, source), source, None, ())
    if not guards:
        raise ConfigError(f"guards spec {source}: no [[guard]] table (and no preset included)")
    return Spec(_unique(guards, source), source, 60.0 if reply is None else reply, descriptions)


def load_spec(path: str | Path) -> Spec:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"guards spec {p}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"guards spec {p}: cannot be read ({exc})") from None
    return parse_spec(text, str(p))


def preset_names() -> list[str]:
    folder = resources.files("loophound.guards") / "presets"
    return sorted(f.name[:-5] for f in folder.iterdir() if f.name.endswith(".toml"))


def preset_spec(name: str, seen: tuple[str, ...] = ()) -> Spec:
    """The shipped preset `name` (presets/<name>.toml)."""
    if name in seen:
        raise ConfigError(f"guard preset {name!r} includes itself (via {' → '.join(seen)})")
    names = preset_names()
    if name not in names:
        raise ConfigError(f"no guard preset {name!r}{_did_you_mean(name, names)}; presets: "
                          f"{', '.join(names)}")
    text = (resources.files("loophound.guards") / "presets" / f"{name}.toml").read_text(
        encoding="utf-8")
    source = f"preset {name}"
    guards, descriptions, reply = _tables(_read_toml(text, source), source, name, (*seen, name))
    return Spec(tuple(guards), source, 60.0 if reply is None else reply, descriptions)


def combine(specs: list[Spec]) -> Spec:
    """Several specs (a file and presets) as one; guard names stay unique."""
    guards = [g for s in specs for g in s.guards]
    source = " + ".join(s.source for s in specs)
    descriptions = {k: v for s in specs for k, v in s.descriptions.items()}
    reply = next((s.reply_within_s for s in specs if s.reply_within_s != 60.0), 60.0)
    return Spec(_unique(guards, source), source, reply, descriptions)


# -- sweeps ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sweep:
    guard: str
    param: str
    values: tuple[Any, ...]  # in the parameter's own units (seconds for durations)
    text: str  # as the user wrote it


def parse_sweep(text: str, spec: Spec, steps: int = 13) -> Sweep:
    """`GUARD.PARAM=LO..HI` → the values to replay (whole numbers for counts; durations and
    ratios spaced evenly, or geometrically over a wide range); the values the shipped presets
    give the parameter, when in range, are included, so the defaults are measured exactly."""
    m = re.fullmatch(r"\s*([A-Za-z0-9_-]+)\.([a-z_]+)\s*=\s*(\S+?)\s*\.\.\s*(\S+)\s*", text)
    if not m:
        raise ConfigError(f"--sweep {text!r}: expected GUARD.PARAM=LO..HI, e.g. "
                          "breaker.threshold=2..10 or cycle.window=5m..1h")
    gname, pname, lo_text, hi_text = m.groups()
    guard = next((g for g in spec.guards if g.name == gname), None)
    if guard is None:
        raise ConfigError(f"--sweep {text!r}: no guard named {gname!r}"
                          f"{_did_you_mean(gname, [g.name for g in spec.guards])}; guards: "
                          f"{', '.join(g.name for g in spec.guards)}")
    p = TYPES[guard.type].param(pname)
    if p is None or not p.numeric:
        numeric = [q.name for q in TYPES[guard.type].params if q.numeric]
        raise ConfigError(f"--sweep {text!r}: a {guard.type} guard has no numeric parameter "
                          f"{pname!r}{_did_you_mean(pname, numeric)}; it can sweep: "
                          f"{', '.join(numeric)}")
    try:
        lo, hi = (_coerce(p, _number_or_text(p, v)) for v in (lo_text, hi_text))
    except ValueError as exc:
        raise ConfigError(f"--sweep {text!r}: {exc}") from None
    if hi < lo:
        lo, hi = hi, lo
    if p.kind == "int":
        values = list(range(lo, hi + 1)) if hi - lo < steps * 2 else sorted(
            {round(x) for x in _spaced(lo, hi, steps * 2)})
    elif p.kind == "duration":
        nice = [x for x in NICE_DURATIONS if lo <= x <= hi]
        values = [lo, hi] + (nice if len(nice) <= steps else
                             [nice[round(i * (len(nice) - 1) / (steps - 1))] for i in range(steps)])
    else:
        values = [float(f"{x:.3g}") for x in _spaced(lo, hi, steps)]
    values += [v for v in preset_values(guard.type, pname) if lo <= v <= hi]
    if guard.params.get(pname) is not None and lo <= guard.params[pname] <= hi:
        values.append(guard.params[pname])
    return Sweep(gname, pname, tuple(sorted(set(values))), text.strip())


def _number_or_text(p: Param, text: str) -> Any:
    if p.kind == "int":
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a whole number") from None
    if p.kind == "float":
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a number") from None
    return text


def _spaced(lo: float, hi: float, n: int) -> list[float]:
    if lo == hi:
        return [lo]
    if lo > 0 and hi / lo >= 10:
        return [lo * (hi / lo) ** (i / (n - 1)) for i in range(n)]
    return [lo + (hi - lo) * i / (n - 1) for i in range(n)]


# durations a person reads without arithmetic, for sweeps
NICE_DURATIONS = tuple(float(x) for x in (
    0.1, 0.2, 0.5, 1, 2, 3, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 420, 600, 720, 900,
    1200, 1500, 1800, 2400, 2700, 3600, 5400, 7200, 10800, 14400, 21600, 28800, 43200, 86400,
    172800, 259200, 604800))


def preset_values(guard_type: str, param: str) -> list[Any]:
    """What the shipped presets set `param` of `guard_type` guards to: the defaults a sweep
    marks (a value each, with the presets that use it)."""
    return sorted({v for _, v in preset_marks(guard_type, param)})


def preset_marks(guard_type: str, param: str) -> list[tuple[str, Any]]:
    """(preset/guard name, value) for every shipped guard of `guard_type` that sets `param`."""
    out = []
    for name in preset_names():
        try:
            spec = preset_spec(name)
        except ConfigError:
            continue
        for g in spec.guards:
            if g.type == guard_type and g.preset == name and g.params.get(param) is not None:
                out.append((f"{name}: {g.name}", g.params[param]))
    return sorted(out)

"""Any other JSONL: canonical columns from a mapping file, or guessed from common key names.

A mapping file (TOML, `--mapping`) names, for each canonical column, the key holding it; dotted
paths reach into nested objects, and `[constants]` sets a column to one value for every line:

    [fields]
    time = "timestamp"        # `time` is an alias of `ts`
    actor = "from"
    target = "to"
    session = "conversation"
    action = "type"
    error = "error.code"
    [constants]
    kind = "message"

With a mapping, only the columns it names are filled (`auto = true` at the top fills the others
by guessing). Without one, each column takes the first of its usual names (`AUTO`) present in
the file's first records (its first 256 KiB, at most 1000 records): deterministic for a file.
A dotted name that is itself a key of those records (`"error.code": ...`) is read as that key.

Values are read as JSON and cast leniently: a value of the wrong type gives NULL, never an
error. Times may be epoch seconds, ms, µs or ns (numbers or numeric strings) or ISO-8601
strings with any offset (stored in UTC). `error` takes strings as they are, an object's
`code` / `type` / `name` / `message`, and `true` as `error`; an automatically chosen `status`
is an error only when it is not a success word (`ok`, `success`, ...) or is a number >= 400.
kind is the mapped or constant kind, else `message` when both actor and target are mapped,
else `record`. Keys that are not mapped whole stay in `extra`.
"""

from __future__ import annotations

import difflib
import json
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import MappingError
from .base import Format, FormatContext, any_time_to_ts, micros_to_ts, sql_str

# canonical column -> how its value is cast
COLUMN_TYPES: dict[str, str] = {
    "ts": "time", "kind": "str", "event_type": "str", "actor": "str", "target": "str",
    "session": "str", "channel": "str", "action": "str", "ok": "bool", "error": "error",
    "depth": "int", "role": "str", "corr_id": "str", "parent_id": "str", "tokens_in": "bigint",
    "tokens_out": "bigint", "cost_usd": "double", "latency_ms": "double", "model": "str",
    "tokens_cache_read": "bigint", "tokens_cache_write": "bigint", "args": "json",
    "result": "text",
}
# what a [fields] table may say beside `path` (see the module docstring)
CONDITIONS = ("equals", "not_equals", "one_of", "present")
FIELD_KEYS = ("path", "paths", "when", "format", "unit", "first_line", *CONDITIONS)
UNITS = {"s": 1_000_000, "ms": 1000, "us": 1, "ns": 0.001}
ALIASES = {"time": "ts"}
SECTIONS = ("fields", "constants", "auto", "records")

AUTO: dict[str, tuple[str, ...]] = {
    "ts": ("timestamp", "time", "ts", "@timestamp", "datetime", "date"),
    "event_type": ("event_type", "event", "type", "log_type"),
    "actor": ("from", "sender", "source", "actor", "agent", "user"),
    "target": ("to", "receiver", "target", "recipient"),
    "session": ("session", "session_id", "conversation_id", "thread_id", "trace_id"),
    "channel": ("channel", "room"),
    "action": ("action", "event", "type", "method", "tool", "command"),
    "ok": ("ok", "success"),
    "error": ("error_code", "error.code", "error", "err", "status"),
    "depth": ("depth", "hop_depth", "hops"),
    "role": ("role",),
    "corr_id": ("corr_id", "correlation_id", "request_id", "message_id", "id"),
    "parent_id": ("parent_id", "parent_message_id", "in_reply_to", "parent"),
    "tokens_in": ("tokens_in", "input_tokens", "prompt_tokens", "usage.prompt_tokens",
                  "usage.input_tokens"),
    "tokens_out": ("tokens_out", "output_tokens", "completion_tokens", "usage.completion_tokens",
                   "usage.output_tokens"),
    "cost_usd": ("cost_usd", "cost"),
    "latency_ms": ("latency_ms", "duration_ms", "elapsed_ms"),
    "model": ("model", "model_id"),
}
SUCCESS_WORDS = ("ok", "success", "succeeded", "successful", "accepted", "completed", "complete",
                 "done", "passed", "pass", "fine", "healthy", "200", "201", "204")
HEAD_BYTES = 256 * 1024
HEAD_RECORDS = 1000


@dataclass(frozen=True)
class Condition:
    """A test of one value of a line: `equals`, `not_equals`, `one_of` (a list) or `present`
    (true: the key is there and not null; false: it is not)."""

    path: tuple[str, ...]
    op: str
    value: Any


@dataclass(frozen=True)
class Field:
    column: str
    path: tuple[str, ...]  # top-level key, then nested keys
    cast: str  # a COLUMN_TYPES value, or `status` (status as an error code)
    when: Condition | None = None  # the value only on lines where this holds
    test: Condition | None = None  # `ok` from a condition: true where it holds
    paths: tuple[tuple[str, ...], ...] = ()  # a time from several fields, joined by a space
    format: str | None = None  # strptime pattern of a time
    unit: str | None = None  # epoch unit of a time: s, ms, us, ns
    constant: Any = None  # `first_line`: the value of the file's first line, on every line
    from_first_line: bool = False


@dataclass(frozen=True)
class Plan:
    fields: tuple[Field, ...]
    constants: tuple[tuple[str, Any], ...]

    def columns(self) -> set[str]:
        return {f.column for f in self.fields} | {c for c, _ in self.constants}

    def consumed_keys(self) -> frozenset[str]:
        """Top-level keys mapped whole: they leave `extra`."""
        return frozenset(f.path[0] for f in self.fields if len(f.path) == 1)


# -- the mapping file ------------------------------------------------------------------------


def load_mapping(path: Path) -> dict[str, Any]:
    """Read and check a mapping file (before any ingest work starts).

    Raises MappingError naming the file and what to change: it cannot be read, is not TOML,
    or names a section, column or value loophound does not know."""
    try:
        raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise MappingError(f"cannot read mapping file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise MappingError(f"mapping file {path} is not UTF-8 text; save it as UTF-8 TOML") from None
    except tomllib.TOMLDecodeError as exc:
        raise MappingError(f"mapping file {path} is not valid TOML ({exc}); see the README's "
                           "\"A mapping file for the generic format\"") from None
    validate_mapping(raw, path)
    return raw


def _valid_names() -> str:
    return ", ".join(sorted(set(COLUMN_TYPES) | set(ALIASES)))


def _likely_column(name: str, value: Any, section: str) -> str:
    """What to write instead of an unknown column `name = value`: ` (did you mean ...?)`, or
    nothing when no column is close. A key the automatic mapping reads for a column (`sender`)
    suggests that column."""
    if section == "fields" and isinstance(value, str) and ALIASES.get(value, value) in COLUMN_TYPES:
        return (f" (the key is the column and the value the log's key: did you mean "
                f"{value} = {json.dumps(name)}?)")
    usual = [column for column, names in AUTO.items() if name in names]
    close = usual or difflib.get_close_matches(name, sorted(set(COLUMN_TYPES) | set(ALIASES)), n=1)
    shown = json.dumps(value) if isinstance(value, str) else "..."
    return f" (did you mean {close[0]} = {shown}?)" if close else ""


def _canonical(name: Any, value: Any, section: str, where: str) -> str:
    if not isinstance(name, str) or ALIASES.get(name, name) not in COLUMN_TYPES:
        raise MappingError(f"{where} [{section}]: unknown canonical column {name!r}"
                           f"{_likely_column(str(name), value, section)}; valid names: "
                           f"{_valid_names()}")
    return ALIASES.get(name, name)


def _unknown_key(key: str, where: str) -> MappingError:
    if ALIASES.get(key, key) in COLUMN_TYPES:
        fix = f" (a column: put {key} = ... under [fields] or [constants])"
    else:
        close = difflib.get_close_matches(key, SECTIONS, n=1)
        fix = f" (did you mean {close[0] if close[0] == 'auto' else f'[{close[0]}]'}?)" if close else ""
    return MappingError(f"{where}: unknown section or key {key!r}{fix}; valid ones: [fields], "
                        "[constants], auto")


def validate_mapping(mapping: Any, source: str | Path | None = None) -> dict[str, Any]:
    """Check a parsed mapping file; return it normalised ({"fields", "constants", "auto"}).

    Raises MappingError with one sentence naming the file (`source`), the bad entry and the
    likely fix (the closest canonical name, and the valid ones)."""
    where = f"mapping file {source}" if source is not None else "mapping"
    if not isinstance(mapping, dict):
        raise MappingError(f"{where}: expected a TOML document with [fields] and/or [constants]")
    for key in mapping:
        if key not in SECTIONS:
            raise _unknown_key(key, where)
    fields_in, constants_in = mapping.get("fields", {}), mapping.get("constants", {})
    auto = mapping.get("auto", False)
    for section, table in (("fields", fields_in), ("constants", constants_in)):
        if not isinstance(table, dict):
            raise MappingError(f"{where}: [{section}] must be a table (name = value lines "
                               f"under [{section}]), not {table!r}")
    if not isinstance(auto, bool):
        raise MappingError(f"{where}: auto must be true or false, not {auto!r}")
    records = mapping.get("records")
    if records is not None and not (records == "" or _is_path(records)):
        raise MappingError(f"{where}: records must be the dotted path of the list of records "
                           f"in a whole-file JSON document (\"trajectory\", \"data.events\"), "
                           f"or \"\" for a document that is itself a list; not {records!r}")
    fields: dict[str, str | dict[str, Any]] = {}
    for name, path in fields_in.items():
        column = _canonical(name, path, "fields", where)
        if isinstance(path, dict):
            path = _check_field_table(column, name, path, f"{where} [fields.{name}]")
        elif not _is_path(path):
            raise MappingError(f"{where} [fields]: {name} must be a key name or dotted path like "
                               f"\"error.code\", or a table [fields.{name}] with `path` and "
                               f"conditions, not {path!r}")
        if column in fields:
            raise MappingError(f"{where} [fields]: {column} is mapped twice (time and ts are "
                               "one column); keep one of them")
        fields[column] = path
    constants: dict[str, Any] = {}
    for name, value in constants_in.items():
        column = _canonical(name, value, "constants", where)
        if column in fields:
            raise MappingError(f"{where}: {column} is both in [fields] and in [constants]; "
                               "keep one of them")
        if column == "ts":
            raise MappingError(f"{where} [constants]: a constant time is not allowed; map "
                               "`time` in [fields]")
        constants[column] = _check_constant(column, value, where)
    out = {"fields": fields, "constants": constants, "auto": auto}
    if records is not None:
        out["records"] = records
    return out


def _is_path(path: Any) -> bool:
    return isinstance(path, str) and bool(path) and all(path.split("."))


def _check_condition(table: Any, where: str) -> dict[str, Any]:
    """A condition table {path, one of equals / not_equals / one_of / present}."""
    if not isinstance(table, dict) or not _is_path(table.get("path")):
        raise MappingError(f"{where}: a condition is a table with a `path` and one of "
                           f"{', '.join(CONDITIONS)}, e.g. {{ path = \"exit_code\", equals = 0 }}")
    ops = [k for k in table if k in CONDITIONS]
    extra = [k for k in table if k not in CONDITIONS and k != "path"]
    if len(ops) != 1 or extra:
        raise MappingError(f"{where}: give exactly one of {', '.join(CONDITIONS)} beside `path`"
                           + (f" (unknown: {', '.join(extra)})" if extra else ""))
    op = ops[0]
    if op == "one_of" and not isinstance(table[op], list):
        raise MappingError(f"{where}: one_of takes a list, e.g. one_of = [\"failed\", \"error\"]")
    if op == "present" and not isinstance(table[op], bool):
        raise MappingError(f"{where}: present takes true or false")
    return {"path": table["path"], op: table[op]}


def _check_field_table(column: str, name: str, table: dict[str, Any], where: str) -> dict:
    """A [fields.NAME] table: `path` (or `paths` for a time), and what to do with it."""
    unknown = [k for k in table if k not in FIELD_KEYS]
    if unknown:
        close = difflib.get_close_matches(unknown[0], FIELD_KEYS, n=1)
        raise MappingError(f"{where}: unknown key {unknown[0]!r}"
                           + (f" (did you mean {close[0]}?)" if close else "")
                           + f"; a field table takes {', '.join(FIELD_KEYS)}")
    if ("path" in table) == ("paths" in table):
        raise MappingError(f"{where}: give `path` (a key or dotted path), or `paths` (a list "
                           "of them whose values are joined by a space, for a time)")
    if "paths" in table and (column != "ts" or not isinstance(table["paths"], list)
                             or not table["paths"] or not all(map(_is_path, table["paths"]))):
        raise MappingError(f"{where}: `paths` is a list of key names, and only for time")
    if "path" in table and not _is_path(table["path"]):
        raise MappingError(f"{where}: path must be a key name or dotted path, not "
                           f"{table['path']!r}")
    ops = [k for k in table if k in CONDITIONS]
    if ops and column != "ok":
        raise MappingError(f"{where}: {ops[0]} decides `ok` only; to keep {name} on some lines "
                           f"only, write when = {{ path = ..., {ops[0]} = ... }}")
    if len(ops) > 1:
        raise MappingError(f"{where}: give one of {', '.join(CONDITIONS)}")
    out = {k: v for k, v in table.items() if k not in ("when",)}
    if ops:
        out = {"path": table["path"], **_check_condition({"path": table["path"],
                                                          ops[0]: table[ops[0]]}, where)}
    if "when" in table:
        out["when"] = _check_condition(table["when"], f"{where} when")
    for key in ("format", "unit"):
        if key in table and column != "ts":
            raise MappingError(f"{where}: {key} is for time only")
    if "format" in table and not isinstance(table["format"], str):
        raise MappingError(f"{where}: format is a strptime pattern such as "
                           "\"%a %b %d %H:%M:%S %Y\"")
    if "unit" in table and table["unit"] not in UNITS:
        raise MappingError(f"{where}: unit must be one of {', '.join(UNITS)}, not "
                           f"{table['unit']!r}")
    if "first_line" in table and not isinstance(table["first_line"], bool):
        raise MappingError(f"{where}: first_line takes true or false")
    return out


def _check_constant(column: str, value: Any, where: str) -> Any:
    kind = COLUMN_TYPES[column]
    ok = {
        "bool": isinstance(value, bool),
        "int": isinstance(value, int) and not isinstance(value, bool),
        "bigint": isinstance(value, int) and not isinstance(value, bool),
        "double": isinstance(value, (int, float)) and not isinstance(value, bool)
        and math.isfinite(value),
    }.get(kind, isinstance(value, (str, int, float)) and not isinstance(value, bool))
    if not ok:
        want = {"bool": "true or false", "int": "an integer", "bigint": "an integer",
                "double": "a number"}.get(kind, "a string")
        raise MappingError(f"{where} [constants]: {column} must be {want}, not {value!r}")
    return value


# -- choosing the keys -----------------------------------------------------------------------


def head_records(path: Path) -> list[dict]:
    """The first records of the file (decompressed): what the automatic mapping looks at."""
    from ..lines import read_head
    from . import sample_records

    try:
        head = read_head(path, HEAD_BYTES)
    except (OSError, EOFError, ValueError):
        return []
    if len(head) >= HEAD_BYTES and not head.endswith(b"\n") and b"\n" in head:
        head = head[: head.rindex(b"\n")]  # a cut-off last line is not a record
    return sample_records(head, HEAD_RECORDS)


def _present(records: list[dict], path: tuple[str, ...]) -> bool:
    for r in records:
        value: Any = r
        for key in path:
            if not isinstance(value, dict) or key not in value:
                break
            value = value[key]
        else:
            if value is not None:
                return True
    return False


def _resolve(records: list[dict], dotted: str) -> tuple[str, ...]:
    """A dotted name as a path: the literal key when the records have it, else nested keys."""
    if "." in dotted and _present(records, (dotted,)):
        return (dotted,)
    return tuple(dotted.split("."))


def plan(ctx: FormatContext, records: list[dict] | None = None) -> Plan:
    """What this file's columns are read from: the mapping file, or the automatic guess."""
    raw = ctx.options.get("mapping")
    if records is None:
        return _planned(ctx)[1]
    mapping = validate_mapping(raw) if raw is not None else {"fields": {}, "constants": {},
                                                              "auto": True}
    fields = [_field(column, spec, records) for column, spec in mapping["fields"].items()]
    taken = {f.column for f in fields} | set(mapping["constants"])
    if mapping["auto"]:
        for column, candidates in AUTO.items():
            if column in taken:
                continue
            for dotted in candidates:
                path = _resolve(records, dotted)
                if _present(records, path):
                    cast = "status" if dotted == "status" else COLUMN_TYPES[column]
                    fields.append(Field(column, path, cast))
                    break
    return Plan(tuple(fields), tuple(mapping["constants"].items()))


def _condition(spec: dict[str, Any] | None, records: list[dict]) -> Condition | None:
    if spec is None:
        return None
    op = next(k for k in spec if k in CONDITIONS)
    return Condition(_resolve(records, spec["path"]), op, spec[op])


def _first_value(records: list[dict], path: tuple[str, ...]) -> Any:
    """The value at `path` in the file's first record (None when it has none)."""
    value: Any = records[0] if records else None
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _field(column: str, spec: str | dict[str, Any], records: list[dict]) -> Field:
    """A mapped column: a dotted path, or a [fields.NAME] table (conditions, time format,
    first line)."""
    cast = COLUMN_TYPES[column]
    if isinstance(spec, str):
        return Field(column, _resolve(records, spec), cast)
    paths = tuple(_resolve(records, p) for p in spec.get("paths", ()))
    path = _resolve(records, spec["path"]) if "path" in spec else paths[0]
    test = _condition(spec, records) if column == "ok" and any(k in spec for k in CONDITIONS) \
        else None
    first = bool(spec.get("first_line"))
    return Field(column, path, cast, when=_condition(spec.get("when"), records), test=test,
                 paths=paths, format=spec.get("format"), unit=spec.get("unit"),
                 constant=_first_value(records, path) if first else None, from_first_line=first)


def unmatched(ctx: FormatContext) -> list[str]:
    """Mapped paths that no line of the file's head holds: most likely a typo in the mapping
    file (ingest reports them as warnings)."""
    if ctx.options.get("mapping") is None or ctx.options["mapping"].get("records") is not None:
        return []  # a document's records are not its head lines: coverage says the rest
    records, p = _planned(ctx)
    out = []
    for f in p.fields:
        for path in f.paths or (f.path,):
            if not _present(records, path):
                out.append(f"mapping: {f.column} = \"{'.'.join(path)}\" matched none of the "
                           f"first {len(records):,} lines of this file")
    return out


def file_keys(ctx: FormatContext) -> tuple[frozenset[str], frozenset[str]]:
    """(mapped, known) top-level keys for this file, for ingest's `extra` bookkeeping: the
    keys mapped whole, and every other key seen in the file's first records."""
    records, p = _planned(ctx)
    mapped = p.consumed_keys()
    seen = frozenset(k for r in records for k in r)
    return mapped, seen - mapped


_PLANNED: dict[tuple, tuple[list[dict], Plan]] = {}


def _planned(ctx: FormatContext) -> tuple[list[dict], Plan]:
    """The file's first records and its plan, worked out once for both `file_keys` and
    `select_sql` (each read and parsed the head: half a millisecond a small file). Kept
    while the file is as it was (inode, size and modification time)."""
    try:
        st = ctx.path.stat()
        key: tuple | None = (str(ctx.path), st.st_ino, st.st_size, st.st_mtime_ns,
                             json.dumps(ctx.options.get("mapping"), sort_keys=True, default=str))
    except OSError:
        key = None
    if key is None or key not in _PLANNED:
        records = head_records(ctx.path)
        found = (records, plan(ctx, records))
        if key is None:
            return found
        if len(_PLANNED) >= 8:
            _PLANNED.clear()
        _PLANNED[key] = found
    return _PLANNED[key]


# -- SQL ---------------------------------------------------------------------------------------


def _pointer(keys: tuple[str, ...]) -> str:
    return "".join("/" + k.replace("~", "~0").replace("/", "~1") for k in keys)


def _value(path: tuple[str, ...]) -> str:
    """SQL: the JSON value at `path` (NULL when absent; JSON `null` when null)."""
    top = f"struct_extract(r, {sql_str(path[0])})"
    return f"json_extract({top}, {sql_str(_pointer(path[1:]))})" if len(path) > 1 else top


NUMERIC = "('BIGINT', 'UBIGINT', 'DOUBLE')"


def _condition_sql(c: Condition) -> str:
    """SQL: whether a line's value at `c.path` passes the condition (NULL: no value)."""
    v = _value(c.path)
    text = f"({v}->>'$')"

    def equals(x: Any) -> str:
        if isinstance(x, bool):
            return f"(json_type({v}) = 'BOOLEAN' AND {text} = '{'true' if x else 'false'}')"
        if isinstance(x, (int, float)):
            return f"(TRY_CAST({text} AS DOUBLE) = CAST({float(x)!r} AS DOUBLE))"
        return f"({text} = {sql_str(str(x))})"

    there = f"({v} IS NOT NULL AND json_type({v}) <> 'NULL')"
    if c.op == "equals":
        return equals(c.value)
    if c.op == "not_equals":
        return f"({there} AND NOT coalesce({equals(c.value)}, false))"
    if c.op == "one_of":
        return "(" + " OR ".join(equals(x) for x in c.value) + ")" if c.value else "false"
    return there if c.value else f"(NOT {there})"


def _field_sql(f: Field) -> str:
    """SQL of one mapped column: the value cast, kept only `when` its condition holds."""
    if f.from_first_line:
        expr = "NULL" if f.constant is None else _cast(
            f"CAST({sql_str(json.dumps(f.constant))} AS JSON)", f.cast)
    elif f.test is not None:  # ok: true where the condition holds, false where it does not
        v = _value(f.test.path)
        expr = (f"CASE WHEN {v} IS NULL OR json_type({v}) = 'NULL' THEN NULL "
                f"ELSE coalesce({_condition_sql(f.test)}, false) END")
    elif f.cast == "time" and (f.paths or f.format or f.unit):
        expr = _time_sql(f)
    else:
        expr = _cast(_value(f.path), f.cast)
    if f.when is not None:
        expr = f"CASE WHEN coalesce({_condition_sql(f.when)}, false) THEN {expr} END"
    return f"{expr} AS {f.column}"


def _time_sql(f: Field) -> str:
    """A time in a stated shape: a strptime `format` (of one field, or of `paths` joined by a
    space), or an epoch number in a stated `unit`."""
    parts = [f"({_value(p)}->>'$')" for p in (f.paths or (f.path,))]
    text = parts[0] if len(parts) == 1 else f"concat_ws(' ', {', '.join(parts)})"
    if f.unit:
        return micros_to_ts(f"(TRY_CAST({text} AS DOUBLE) * {UNITS[f.unit]!r})")
    t = f"try_strptime({text}, {sql_str(f.format)})"
    # a pattern with an offset (%z) gives a time with a zone: stored in UTC like any other
    return (f"CAST(CASE WHEN {t} >= TIMESTAMP '1900-01-01' AND {t} < TIMESTAMP '2200-01-01' "
            f"THEN {t} END AS TIMESTAMP)")


def _cast(v: str, cast: str) -> str:
    text = f"({v}->>'$')"
    if cast == "time":
        return any_time_to_ts(v)
    if cast == "str":
        return text
    if cast == "json":  # arguments: the JSON as text, so action_key can mask and hash it
        return f"CAST({v} AS VARCHAR)"
    if cast == "text":  # a result: its text when a string, else its JSON, first 4 KiB
        return (f"left(CASE json_type({v}) WHEN 'VARCHAR' THEN {text} "
                f"ELSE CAST({v} AS VARCHAR) END, 4096)")
    if cast == "int":
        return f"TRY_CAST(TRY_CAST({text} AS DOUBLE) AS INTEGER)"
    if cast == "bigint":
        return f"TRY_CAST(TRY_CAST({text} AS DOUBLE) AS BIGINT)"
    if cast == "double":
        return f"TRY_CAST({text} AS DOUBLE)"
    if cast == "bool":
        return f"""CASE json_type({v}) WHEN 'BOOLEAN' THEN {text} = 'true'
          WHEN 'VARCHAR' THEN TRY_CAST({text} AS BOOLEAN)
          WHEN 'BIGINT' THEN TRY_CAST({text} AS DOUBLE) <> 0
          WHEN 'UBIGINT' THEN TRY_CAST({text} AS DOUBLE) <> 0 END"""
    if cast == "error":
        return f"""CASE json_type({v}) WHEN 'NULL' THEN NULL
          WHEN 'OBJECT' THEN nullif(coalesce({v}->>'$.code', {v}->>'$.type', {v}->>'$.name',
                                             {v}->>'$.message'), '')
          WHEN 'BOOLEAN' THEN CASE WHEN {text} = 'true' THEN 'error' END
          ELSE nullif({text}, '') END"""
    if cast == "status":
        words = ", ".join(sql_str(w) for w in SUCCESS_WORDS)
        return f"""CASE WHEN json_type({v}) = 'VARCHAR'
               THEN CASE WHEN lower(trim({text})) IN ({words}) THEN NULL ELSE nullif({text}, '') END
          WHEN json_type({v}) IN {NUMERIC} AND TRY_CAST({text} AS DOUBLE) >= 400 THEN {text} END"""
    raise AssertionError(cast)


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return f"CAST({value} AS BIGINT)"
    if isinstance(value, float):
        return f"CAST({value!r} AS DOUBLE)"
    return sql_str(str(value))


def select_sql(ctx: FormatContext) -> str:
    p = plan(ctx)
    exprs = [_field_sql(f) for f in p.fields]
    exprs += [f"{_literal(value)} AS {column}" for column, value in p.constants]
    columns = p.columns()
    if "kind" not in columns:
        kind = "message" if {"actor", "target"} <= columns else "record"
        exprs.append(f"{sql_str(kind)} AS kind")
    consumed = p.consumed_keys()
    if consumed:
        nulls = sql_str(json.dumps({k: None for k in sorted(consumed)}))
        exprs.append(f"nullif(CAST(json_merge_patch(text, {nulls}) AS VARCHAR), '{{}}') AS extra")
    else:
        exprs.append("nullif(CAST(json(text) AS VARCHAR), '{}') AS extra")
    tops = sorted({path[0] for f in p.fields if not f.from_first_line
                   for path in (f.path, *f.paths, *(c.path for c in (f.when, f.test) if c))})
    parsed = "raw"
    if tops:
        spec = sql_str(json.dumps({k: "JSON" for k in tops}))
        parsed = f"(SELECT *, from_json(text, {spec}) AS r FROM raw)"
    return f"""
    SELECT line, byte_offset, byte_length, text,
      {(',' + chr(10) + '      ').join(exprs)}
    FROM {parsed}
    """


def records_at(path: str, data: bytes) -> list[tuple[int, int]] | None:
    """(offset, length) of each element of the list at dotted `path` of a whole-file JSON
    document (`""`: the document is the list), found by a streaming scan of its bytes, never
    by re-serialising (evidence quotes the file's own bytes); None when there is no list."""
    from ._document import element_ranges, members, top

    at = top(data)
    for key in [k for k in path.split(".") if k] if path else []:
        if at is None or data[at:at + 1] != b"{":
            return None
        found, _ = members(data, at)
        at = next((m.start for m in found if m.key == key), None)
    if at is None or data[at:at + 1] != b"[":
        return None
    return element_ranges(data, at)


def document_format(mapping: dict) -> Format | None:
    """The generic format reading a whole-file JSON document's list, when the mapping names
    one (`records = "..."`): the records go through the same mapping as lines do."""
    import dataclasses
    import functools

    path = mapping.get("records") if mapping else None
    if path is None:
        return None
    return dataclasses.replace(FORMAT, records=functools.partial(records_at, path),
                               groupable=False)


def sniff(records: list[dict], path: Path) -> bool:
    return len(records) > 0


FORMAT = Format(
    name="generic",
    description="any other JSONL: columns from a --mapping TOML file or common key names",
    sniff=sniff,
    select_sql=select_sql,
    file_keys=file_keys,
    priority=99,
    groupable=True,
    notes=unmatched,
)

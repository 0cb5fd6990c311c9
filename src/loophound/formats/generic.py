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
from .base import Format, FormatContext, any_time_to_ts, sql_str

# canonical column -> how its value is cast
COLUMN_TYPES: dict[str, str] = {
    "ts": "time", "kind": "str", "event_type": "str", "actor": "str", "target": "str",
    "session": "str", "channel": "str", "action": "str", "ok": "bool", "error": "error",
    "depth": "int", "role": "str", "corr_id": "str", "parent_id": "str", "tokens_in": "bigint",
    "tokens_out": "bigint", "cost_usd": "double", "latency_ms": "double", "model": "str",
}
ALIASES = {"time": "ts"}
SECTIONS = ("fields", "constants", "auto")

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
class Field:
    column: str
    path: tuple[str, ...]  # top-level key, then nested keys
    cast: str  # a COLUMN_TYPES value, or `status` (status as an error code)


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
    fields: dict[str, str] = {}
    for name, path in fields_in.items():
        column = _canonical(name, path, "fields", where)
        if not isinstance(path, str) or not path or any(not p for p in path.split(".")):
            raise MappingError(f"{where} [fields]: {name} must be a key name or dotted path like "
                               f"\"error.code\", not {path!r}")
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
    return {"fields": fields, "constants": constants, "auto": auto}


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
        records = head_records(ctx.path)
    mapping = validate_mapping(raw) if raw is not None else {"fields": {}, "constants": {},
                                                              "auto": True}
    fields = [Field(column, _resolve(records, dotted), COLUMN_TYPES[column])
              for column, dotted in mapping["fields"].items()]
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


def file_keys(ctx: FormatContext) -> tuple[frozenset[str], frozenset[str]]:
    """(mapped, known) top-level keys for this file, for ingest's `extra` bookkeeping: the
    keys mapped whole, and every other key seen in the file's first records."""
    records = head_records(ctx.path)
    mapped = plan(ctx, records).consumed_keys()
    seen = frozenset(k for r in records for k in r)
    return mapped, seen - mapped


# -- SQL ---------------------------------------------------------------------------------------


def _pointer(keys: tuple[str, ...]) -> str:
    return "".join("/" + k.replace("~", "~0").replace("/", "~1") for k in keys)


def _value(path: tuple[str, ...]) -> str:
    """SQL: the JSON value at `path` (NULL when absent; JSON `null` when null)."""
    top = f"struct_extract(r, {sql_str(path[0])})"
    return f"json_extract({top}, {sql_str(_pointer(path[1:]))})" if len(path) > 1 else top


NUMERIC = "('BIGINT', 'UBIGINT', 'DOUBLE')"


def _cast(v: str, cast: str) -> str:
    text = f"({v}->>'$')"
    if cast == "time":
        return any_time_to_ts(v)
    if cast == "str":
        return text
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
    exprs = [f"{_cast(_value(f.path), f.cast)} AS {f.column}" for f in p.fields]
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
    tops = sorted({f.path[0] for f in p.fields})
    parsed = "raw"
    if tops:
        spec = sql_str(json.dumps({k: "JSON" for k in tops}))
        parsed = f"(SELECT *, from_json(text, {spec}) AS r FROM raw)"
    return f"""
    SELECT line, byte_offset, byte_length, text,
      {(',' + chr(10) + '      ').join(exprs)}
    FROM {parsed}
    """


def sniff(records: list[dict], path: Path) -> bool:
    return len(records) > 0


FORMAT = Format(
    name="generic",
    description="any other JSONL: columns from a --mapping TOML file or common key names",
    sniff=sniff,
    select_sql=select_sql,
    file_keys=file_keys,
    priority=99,
)

"""What a log format is to loophound: a name, a one-line description, a recogniser and a
mapping of whole columns onto the canonical event table.

Formats map columns in SQL (DuckDB), not records in Python: the mapper sees a relation
``raw(line, byte_offset, byte_length, text)`` holding every valid JSON-object line of one file
and returns a SELECT over it. Per-line Python would make a 235 MB log take minutes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from ..db import sql_literal

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass(frozen=True)
class FormatContext:
    """What a mapper may know about the file besides its lines."""

    path: Path  # the file on disk
    display_path: str  # how the user named it; stored in `events.file`
    input_id: int
    options: dict[str, Any] = field(default_factory=dict)  # e.g. a mapping file's contents


@dataclass(frozen=True)
class FormatProfile:
    """What detectors may know of a format beyond the canonical columns: the limits its
    runtime enforces and the `extra` keys that carry meaning. Detectors consult the profile of
    the format an event came from; the defaults are neutral (nothing is known, and only the
    canonical columns are read), which is what a format without a profile gets."""

    # messages stored by both ends (sven): the `extra` key whose value, `outbound` or
    # `inbound`, says which end stored a copy; it ties a node's local name to its peer id
    direction_key: str | None = None
    # the depth at which the runtime drops a message instead of answering it (sven
    # MAX_HOP_DEPTH = MAX_ROOM_POST_DEPTH)
    max_hop_depth: int | None = None
    # the pause after which the runtime treats a conversation as a new one (sven
    # DEFAULT_BREAK_THRESHOLD)
    break_threshold_s: float | None = None
    # repair loops (LabTrust): the `extra` key holding the fingerprint of a proposal
    proposal_hash_key: str | None = None
    # the service's own waits before it answers a request (bproxy `pacing_wait`,
    # `error_delay`): `event_type`s of lifecycle lines answering it, with the wait in
    # milliseconds under the `extra` key `delay_key`
    delay_events: tuple[str, ...] = ()
    delay_key: str | None = None
    # errors the service says never to retry (bproxy's retry hint `never`)
    terminal_errors: tuple[str, ...] = ()
    # errors the service's own rate guard answers with (bproxy)
    rate_guard_errors: tuple[str, ...] = ()
    # how the format places events its log gives no time (a simulated clock: a trajectory's
    # step index), for whatever shows times to say so; None: every time is the log's own
    simulated_clock: str | None = None
    # the `extra` key holding a message's text (its content, as JSON when it is not a plain
    # string), which repeated_message compares after masking
    text_key: str | None = None
    # the `extra` key a runtime's own progress check sets on its record: `true` where it judged
    # its run looping or making no progress (Magentic-One's progress ledger), `false` where it
    # judged otherwise; no_progress reads a run of such judgements as what the log says
    stalled_key: str | None = None


@dataclass(frozen=True)
class Format:
    name: str
    description: str
    # True when these sample records (the first parsed lines) and path are this format's.
    sniff: Callable[[list[dict], Path], bool]
    # SELECT over `raw` producing canonical columns by name, plus `line`, `byte_offset`,
    # `byte_length` and `text` passed through unchanged (one output row per input row);
    # absent columns become NULL.
    select_sql: Callable[[FormatContext], str]
    # Keys the mapper turns into columns: they are left out of `extra`.
    mapped_keys: frozenset[str] = frozenset()
    # SQL over a line's `text`: the name of its record type (Claude Code's `type`), and the
    # names the format knows. A line of another type is still read (as a `record`, the fields
    # no column holds in `extra`) and counted by name in ingest's warnings: a release that adds
    # a record type loses nothing, silently or not.
    line_type: str | None = None
    known_types: frozenset[str] = frozenset()
    # Keys documented for the format but kept only in `extra`: not reported as unknown. The
    # mapper reads them as JSON and builds `extra` with `extra_json` (cheap); only lines with
    # keys outside both sets pay for the exact, slower merge.
    known_keys: frozenset[str] = frozenset()
    # Optional step over the mapped batch (table `batch`), e.g. joining responses to requests.
    # It may read earlier events of the same file through the view `stored_events`; what it
    # learns of those (a request's outcome from its response) it adds to `late_outcomes`
    # (event_id, ok, error, latency_ms), since written events are never rewritten.
    finish: Callable[[duckdb.DuckDBPyConnection, FormatContext], None] | None = None
    # The same step on the batch's rows in Arrow (every column `batch` would hold, in its
    # order), returning them finished, for a format that has it instead of `finish`: a read
    # then keeps its chunks in Arrow, never copied into DuckDB and out again (`batch` is not
    # made; the step may make it of the rows where it needs SQL on them).
    finish_rows: Callable[[duckdb.DuckDBPyConnection, FormatContext, pa.Table], pa.Table] \
        | None = None
    # The columns `finish` reads or writes in `batch`, when it names them: a read then keeps
    # only those (and what ingest itself reads of a chunk) in DuckDB, and the rest of each
    # row in Arrow beside it, instead of copying every column of every chunk in and out
    # (the text columns, `extra` above all, are most of a chunk's bytes). None: every column.
    finish_columns: frozenset[str] | None = None
    # Files that sit beside a log and are read with it (LabTrust results.json).
    companions: Callable[[Path], list[Path]] | None = None
    # Turns a companion file into canonical rows (list of dicts keyed by column name).
    read_companion: Callable[[Path, FormatContext], list[dict]] | None = None
    # A format whose files are each one JSON document (a trajectory), not lines: the
    # (offset, length) of each record (a step) in the document's bytes, found by a streaming
    # scan, never by re-serialising; None when the document holds no records this format
    # knows. Ingest maps the records as it maps lines (line = the record's place, 1-based) and
    # reads a document that changed again whole, its earlier events replaced.
    records: Callable[[bytes], list[tuple[int, int]] | None] | None = None
    # Per-file (mapped, known) keys, for formats whose columns depend on the file (generic).
    file_keys: Callable[[FormatContext], tuple[frozenset[str], frozenset[str]]] | None = None
    priority: int = 50  # lower sniffs first; the generic mapping is last
    # Optional: True when the file's first bytes (after a byte order mark) are this format's,
    # for files whose first line can be longer than the head that is parsed for `sniff`.
    sniff_head: Callable[[bytes, Path], bool] | None = None
    # A format that reads several events from one line (the spans of an OTLP export) numbers
    # them 0, 1, ... in a column `sub` of its SELECT; the event id is then input × 2^32 +
    # line × 2^sub_bits + sub (still unique, still in log order). 0: one event per line.
    sub_bits: int = 0
    # what detectors may know of the format (see FormatProfile); neutral by default
    profile: FormatProfile = FormatProfile()
    # True when the format's SQL keeps the inputs of one batch apart: `select_sql` reads each
    # line alone (no window over `raw`, nothing from ctx but the path), and `finish` joins
    # and orders rows only within an input (`event_id >> 32`). Ingest then maps many small
    # new files of the format in one pass (those whose `select_sql` is the same text).
    groupable: bool = False
    # Optional: warnings about how this file was read (a mapping key no line holds)
    notes: Callable[[FormatContext], list[str]] | None = None
    # True when `finish` resolves a line only against the lines of the same read (OTLP's
    # span tree): a large file is then read in whole chunks of CHUNK_BYTES, where the others
    # are read in chunks sized for ingest's pipeline (a small first one, smaller last ones),
    # whose ends are elsewhere and would cut more spans from their ancestors.
    whole_chunks: bool = False


sql_str = sql_literal  # the formats' name for it


def struct_spec(fields: dict[str, str]) -> str:
    """from_json structure literal: {"key": "TYPE", ...} as a SQL string."""
    inner = ", ".join(f'"{k}": "{v}"' for k, v in fields.items())
    return sql_str("{" + inner + "}")


# The times a log can mean: 1900-01-01 to 2200-01-01, in microseconds since the epoch. A
# value outside (1e16 ms, 1e300, NaN, infinity) gives its event no time (counted in ingest's
# warnings) instead of an error that would fail the mapping of its whole file.
EARLIEST_US, LATEST_US = -2208988800 * 10**6, 7258118400 * 10**6

_EPOCH_US = """CASE WHEN abs({v}) >= 1e17 THEN {v} / 1000
  WHEN abs({v}) >= 1e14 THEN {v}
  WHEN abs({v}) >= 1e11 THEN {v} * 1000
  ELSE {v} * 1000000 END"""


def micros_to_ts(us: str) -> str:
    """SQL: microseconds since the epoch (a DOUBLE) → TIMESTAMP, NULL when not a time a log
    can mean (out of range, NaN, infinite)."""
    return (f"CASE WHEN {us} IS NULL OR isnan({us}) OR isinf({us}) THEN NULL "
            f"WHEN {us} >= {EARLIEST_US} AND {us} < {LATEST_US} "
            f"THEN make_timestamp(CAST({us} AS BIGINT)) END")


def epoch_to_ts(expr: str) -> str:
    """SQL: a number of seconds, ms, µs or ns since the epoch (told apart by magnitude) → TIMESTAMP."""
    v = f"CAST({expr} AS DOUBLE)"
    return f"CAST({micros_to_ts('(' + _EPOCH_US.format(v=v) + ')')} AS TIMESTAMP_MS)"


def epoch_ms_to_ts(expr: str) -> str:
    """SQL: whole milliseconds since the epoch → TIMESTAMP (NULL when out of range)."""
    return f"CAST({micros_to_ts(f'(CAST({expr} AS DOUBLE) * 1000)')} AS TIMESTAMP_MS)"


def iso_to_ts(expr: str) -> str:
    """SQL: an ISO-8601 string (any offset, or none meaning UTC) → UTC TIMESTAMP (NULL when it
    is not one, or not a time a log can mean)."""
    t = f"CAST(TRY_CAST({expr} AS TIMESTAMPTZ) AS TIMESTAMP)"
    return (f"CAST(CASE WHEN TRY_CAST({expr} AS TIMESTAMPTZ) >= TIMESTAMPTZ '1900-01-01 00:00:00+00' "
            f"AND TRY_CAST({expr} AS TIMESTAMPTZ) < TIMESTAMPTZ '2200-01-01 00:00:00+00' "
            f"THEN {t} END AS TIMESTAMP_MS)")


def any_time_to_ts(json_expr: str) -> str:
    """SQL: a JSON value that is either an epoch number or an ISO-8601 / numeric string."""
    return f"""CASE json_type({json_expr})
      WHEN 'VARCHAR' THEN coalesce({iso_to_ts(f"{json_expr}->>'$'")},
                                   {epoch_to_ts(f"TRY_CAST({json_expr}->>'$' AS DOUBLE)")})
      WHEN 'NULL' THEN NULL
      ELSE {epoch_to_ts(f"TRY_CAST({json_expr}->>'$' AS DOUBLE)")} END"""


def extra_json(keys, alias: str = "r") -> str:
    """SQL: a JSON object of the keys (read as JSON by from_json) that are present. A key
    that is absent is NULL, and so is its `"key":value` (`||` passes NULL on), which
    `concat_ws` leaves out; `concat` makes the braces in one string, where each `||` made
    a string of its own (a third of the time of this column, on every line of a chunk)."""
    parts = ", ".join(f"""'"{k}":' || CAST({alias}."{k}" AS VARCHAR)""" for k in sorted(keys))
    return f"nullif(concat('{{', concat_ws(',', {parts}), '}}'), '{{}}')"


def json_fields(keys) -> dict[str, str]:
    """from_json structure entries reading `keys` as raw JSON."""
    return {k: "JSON" for k in sorted(keys)}

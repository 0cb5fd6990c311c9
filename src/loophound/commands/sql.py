"""`loophound sql`, `loophound shell` and `loophound query`: read-only SQL over the store.

Every statement runs on `queries.readonly_connection` (the documented views, file access locked
down) after `queries.check_read_only` has refused anything that is not a query, so none of these
commands can change the evidence; after each, `queries.check_untouched` makes sure none did. A
bad query prints DuckDB's own message, which points at the position, and exits with status 2.

What the logs hold is shown inert on a terminal (`text.inert`: an escape sequence in an actor
name is printed as `\x1b[2J`, not obeyed): every table, and CSV written to a terminal. CSV to a
file or a pipe is the data exact; JSON is exact everywhere, spelling those characters as JSON
escapes.
"""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import json
import math
import os
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Annotated, Any

import duckdb
import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .. import queries
from ..errors import UserError, no_store
from ..outputs import atomic_file, check_output
from ..store import DEFAULT_STORE, Store
from ..text import inert, json_inert

FORMATS = ("table", "csv", "json", "jsonl", "parquet")
TABLE_LIMIT = 50
BATCH = 2048

VIEW_DOCS = {
    "events": "every event read from the logs: one row per log line (see `.schema events`)",
    "requests": "each request joined to its response: outcome, latency, bytes and lines",
    "messages": "peer messages and room posts (kind message, room_post)",
    "triggers": "hook triggers and the sessions they start and end",
    "llm_calls": "LLM calls with model, tokens and stated cost",
    "quarantine": "lines that could not be read as events, with the reason",
    "inputs": "the input files: path, format, SHA-256, bytes and lines read",
    "findings": "the last scan's findings, one row each",
    "finding_events": "which events each finding claims (finding_id, event_id)",
    "event_costs": "cost per event at query time: stated, priced, assumed or unpriced",
}

# What `.schema` says about columns that are not `events` columns (those come from schema.py).
COLUMN_DOCS = {
    "requests": {
        "ok": "outcome: the request's own, else its response's (ingest writes it on the request)",
        "error": "error code: the request's own, else its response's",
        "latency_ms": "latency: the request's own, else its response's",
        "response_ts": "when the response was logged (NULL: no response)",
        "response_line": "the response's line in the same file",
        "bytes": "bytes of the request line plus its response and lifecycle lines",
        "lines": "lines of the exchange: the request plus its response and lifecycle lines",
    },
    "inputs": {
        "path": "the file as it was named on the command line",
        "format": "the format that read it",
        "compression": "gzip, zstd, ... or NULL",
        "sha256": "SHA-256 of the bytes read so far (the whole file once complete)",
        "bytes": "bytes read (decompressed)",
        "lines": "complete lines read",
        "pending_bytes": "an unterminated last line waiting for its newline",
        "first_seen": "when loophound first read it",
        "last_read": "when loophound last read new bytes of it",
        "input_id": "the input's number (the high half of event_id)",
    },
    "findings": {
        "id": "stable id: the same loop has the same id in every scan",
        "detector": "the detector that found it", "severity": "low, medium, high, critical",
        "title": "one line", "summary": "what happened, with the numbers that decided it",
        "actors": "who looped", "targets": "who or what they looped on",
        "sessions": "sessions involved", "start": "first claimed event (ISO 8601, UTC)",
        "end": "last claimed event (ISO 8601, UTC)",
        "events": "the runaway actions it counts (requests, messages, ... not responses)",
        "lines": "log lines it claims", "bytes": "bytes of those lines",
        "tokens": "LLM tokens of those lines", "cost_usd": "their cost (NULL: unpriced)",
        "status": "the finding's state across scans, when the scan records one",
        "json": "the whole finding as in `scan --json`",
    },
    "finding_events": {"finding_id": "findings.id", "event_id": "events.event_id"},
    "event_costs": {
        "event_id": "events.event_id", "cost_usd": "USD (NULL when unpriced)",
        "cost_status": "stated, priced (tokens × price table), assumed (per call) or unpriced",
        "tokens": "input plus output tokens",
    },
}

StoreOpt = Annotated[Path, typer.Option("--store", "-s", help="Store folder, or a bare folder "
                                        "of its Parquet files.")]
FormatOpt = Annotated[str, typer.Option("--format", help="table, csv, json, jsonl or parquet "
                                        "(parquet needs --out).")]
OutOpt = Annotated[Path | None, typer.Option("--out", "-o", help="Write the result to this file "
                                             "instead of standard output.")]
LimitOpt = Annotated[int | None, typer.Option(
    "--limit", help=f"At most this many rows (0: all). Default: {TABLE_LIMIT} for a table, "
                    "all for the other formats.")]
ParamOpt = Annotated[list[str] | None, typer.Option("--param", "-p", help="NAME=VALUE, bound to "
                                                    "$NAME (repeatable).")]
DEFAULT_TIMEOUT = 300.0  # seconds: a query of the 235 MB incident's events takes seconds
TimeoutOpt = Annotated[float, typer.Option(
    "--timeout", help="Stop a query that runs longer than this many seconds (0: never).")]


class Failure(Exception):
    """A user error: printed as a message, exit status 2."""


class Cancelled(Exception):
    """A statement stopped by Ctrl-C (the command ends with status 130; the shell goes on)."""


# -- stopping a statement ----------------------------------------------------------------------

def stoppable(con: duckdb.DuckDBPyConnection, work: Callable[[], None],
              timeout: float | None) -> None:
    """Run `work` (statements on `con` and the writing of their results) so that it can be
    stopped: Ctrl-C raises `Cancelled`, running past `timeout` seconds raises `Failure`, and
    either interrupts DuckDB (`con.interrupt()`) and waits for it to let go.

    Why a thread: while DuckDB works, the thread that called it is inside DuckDB, and Python
    runs a signal handler only in the main thread between two of its own instructions, so
    Ctrl-C went unheard until the query ended (a recursive CTE: never). The main thread now
    only waits, and hears it at once. What the statement spilled is in the connection's spill
    folder, removed when the process ends (`db.spill_folder`)."""
    failed: list[BaseException] = []
    done = threading.Event()  # not Thread.join: a join Ctrl-C interrupts may say "ended" early

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 — handed to the waiting thread
            failed.append(exc)
        finally:
            done.set()

    deadline = time.monotonic() + timeout if timeout and timeout > 0 else None
    threading.Thread(target=run, name="loophound-query", daemon=True).start()
    try:
        while not done.is_set():
            left = 0.1 if deadline is None else min(0.1, deadline - time.monotonic())
            if left <= 0:
                _stop(con, done)
                raise Failure(f"the query ran longer than {timeout:g} s and was stopped: narrow "
                              "it (a WHERE on ts, a LIMIT) or give a longer --timeout (0: "
                              "never)")
            done.wait(left)
    except KeyboardInterrupt:
        _stop(con, done)
        raise Cancelled("interrupted: the statement was stopped") from None
    if failed:
        raise failed[0]


def _stop(con: duckdb.DuckDBPyConnection, done: threading.Event) -> None:
    """Interrupt DuckDB until the statement has ended (an interrupted query ends within
    milliseconds; one interrupt may land between two of its calls, hence the loop)."""
    while not done.is_set():
        con.interrupt()
        done.wait(0.1)


# -- values ------------------------------------------------------------------------------------

def _plain(v: Any) -> Any:
    """A JSON-ready value."""
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dt.datetime):
        return v.isoformat()
    if isinstance(v, (dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, dt.timedelta):
        return v.total_seconds()
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    if isinstance(v, uuid.UUID):
        return str(v)
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return str(v)


def _text(v: Any) -> str:
    """A value as one cell of text (CSV, table)."""
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dt.datetime):
        s = v.isoformat(sep=" ", timespec="milliseconds" if v.microsecond % 1000 == 0
                        else "microseconds")
        return s.removesuffix(".000")
    if isinstance(v, (list, tuple, dict)):
        return json.dumps(_plain(v), ensure_ascii=False)
    return str(_plain(v))


# -- output ------------------------------------------------------------------------------------

@contextmanager
def _sink(out: Path | None, binary: bool = False) -> Iterator[IO]:
    """Standard output, or `out` written whole or not at all."""
    if out is None or str(out) == "-":
        yield sys.stdout.buffer if binary and hasattr(sys.stdout, "buffer") else sys.stdout
        return
    with atomic_file(out, binary) as f:
        yield f


def _rows(res: duckdb.DuckDBPyConnection, limit: int) -> Iterator[tuple]:
    left = limit if limit > 0 else None
    while left is None or left > 0:
        chunk = res.fetchmany(BATCH if left is None else min(BATCH, left))
        if not chunk:
            return
        if left is not None:
            left -= len(chunk)
        yield from chunk


def _arrow_reader(res: duckdb.DuckDBPyConnection):
    with warnings.catch_warnings():  # "makes an extra copy": one batch at a time is fine here
        warnings.simplefilter("ignore", UserWarning)
        return res.to_arrow_reader(BATCH * 8)


def _drain(res: duckdb.DuckDBPyConnection) -> int:
    """Finish a pending result, counting the rows left."""
    return sum(b.num_rows for b in _arrow_reader(res))


def render_table(res: duckdb.DuckDBPyConnection, console: Console, limit: int) -> int:
    """A rich table of the first `limit` rows (log text shown as text, never as markup, and
    inert: control characters and bidi overrides escaped)."""
    cols = [d[0] for d in res.description]
    rows = list(_rows(res, limit))
    more = _drain(res) if limit > 0 and len(rows) == limit else 0
    numeric = [all(isinstance(r[i], (int, float, decimal.Decimal)) and not isinstance(r[i], bool)
                   for r in rows if r[i] is not None) and any(r[i] is not None for r in rows)
               for i in range(len(cols))]
    table = Table(show_edge=False, header_style="bold", highlight=False)
    for c, num in zip(cols, numeric, strict=True):
        table.add_column(Text(inert(c)), justify="right" if num else "left", overflow="fold")
    for r in rows:
        table.add_row(*(Text("NULL", style="dim") if v is None else Text(inert(_text(v)))
                        for v in r))
    console.print(table)
    shown = len(rows)
    note = f"{shown + more:,} row{'s' if shown + more != 1 else ''}"
    if more:
        note += f" (first {shown:,} shown: --limit 0 for all, or --format csv)"
    console.print(Text(note, style="dim"))
    return shown + more


def write_result(res: duckdb.DuckDBPyConnection, fmt: str, out: Path | None,
                 limit: int | None, console: Console | None = None) -> int:
    """Write a pending result in `fmt`; returns the rows written (or counted)."""
    cols = [d[0] for d in res.description]
    if fmt == "table":
        lim = TABLE_LIMIT if limit is None else limit
        if out is None or str(out) == "-":
            return render_table(res, console or _stdout_console(), lim)
        with _sink(out) as f:
            return render_table(res, Console(file=f, width=10_000, color_system=None), lim)
    lim = 0 if limit is None else limit
    n = 0
    if fmt == "parquet":
        import pyarrow.parquet as pq

        if out is None or str(out) == "-":
            raise Failure("--format parquet writes a file: give --out FILE.parquet")
        reader = _arrow_reader(res)
        with _sink(out, binary=True) as f, pq.ParquetWriter(f, reader.schema) as w:
            for batch in reader:  # read to the end, so the result is finished
                if lim and n + batch.num_rows > lim:
                    batch = batch.slice(0, max(lim - n, 0))
                if batch.num_rows:
                    w.write_batch(batch)
                n += batch.num_rows
        return n
    with _sink(out) as f:
        if fmt == "csv":
            cell = inert if _is_terminal(f) else str  # the data exact to a file or a pipe
            w = csv.writer(f, lineterminator="\n")
            w.writerow([cell(c) for c in cols])
            for r in _rows(res, lim):
                w.writerow([cell(_text(v)) for v in r])
                n += 1
        elif fmt == "jsonl":
            for r in _rows(res, lim):
                f.write(_json_row(cols, r) + "\n")
                n += 1
        elif fmt == "json":
            f.write("[")
            for r in _rows(res, lim):
                f.write(("," if n else "") + "\n  " + _json_row(cols, r))
                n += 1
            f.write("\n]\n" if n else "]\n")
        else:  # pragma: no cover — checked by the caller
            raise Failure(f"unknown format {fmt!r}")
    if lim:
        _drain(res)
    return n


def _json_row(cols: list[str], row: tuple) -> str:
    """One row as a JSON object: the same value as the data, and inert on a terminal."""
    return json_inert(json.dumps(dict(zip(cols, map(_plain, row), strict=True)),
                                 ensure_ascii=False))


def _is_terminal(stream: IO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _stdout_console() -> Console:
    from .shell import out

    if out.is_terminal:
        return out
    return Console(file=sys.stdout, width=10_000, color_system=None, highlight=False)


# -- running statements ------------------------------------------------------------------------

def _check_options(fmt: str, out: Path | None, store: Path) -> None:
    if fmt not in FORMATS:
        raise Failure(f"--format must be one of {', '.join(FORMATS)}; got {fmt!r}")
    if fmt == "parquet" and (out is None or str(out) == "-"):
        raise Failure("--format parquet writes a file: give --out FILE.parquet")
    if out is not None:
        check_output(out, "--out", Store(store))


def open_store(store: Path) -> duckdb.DuckDBPyConnection:
    s = Store(store)
    if not s.exists():
        raise Failure(str(no_store(store)))
    return queries.readonly_connection(s, costs_when_used=True)


def user_params(statement: queries.Statement, given: dict[str, str]) -> dict[str, str]:
    """The --param values a statement uses, as text (DuckDB casts them where the SQL says)."""
    missing = sorted(statement.params - given.keys())
    if missing:
        raise Failure(f"the query uses {', '.join('$' + m for m in missing)}: give "
                      f"{' '.join(f'--param {m}=VALUE' for m in missing)}")
    return {k: given[k] for k in statement.params}


def parse_assignments(items: Iterable[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise Failure(f"--param {item!r}: expected NAME=VALUE, e.g. session=6afr3v")
        out[key.strip().lstrip("$")] = value
    return out


@contextmanager
def untouched(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """Run a statement, then make sure the store's files are as they were (even when it
    failed: a write may come before an error)."""
    try:
        yield
    finally:
        queries.check_untouched(con)


def run_sql(con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, str], fmt: str,
            out: Path | None, limit: int | None, console: Console | None = None) -> None:
    """Check, then run, every statement of `sql`; DuckDB errors propagate as duckdb.Error."""
    statements = queries.check_read_only(sql, con)
    if not statements:
        raise Failure("no SQL statement given")
    if len(statements) > 1 and fmt != "table":
        raise Failure(f"--format {fmt} writes one result: give one statement, not "
                      f"{len(statements)}")
    unused = set(params) - set().union(*(s.params for s in statements))
    if unused:
        raise Failure(f"--param {', '.join(sorted(unused))}: the SQL has no "
                      f"{', '.join('$' + u for u in sorted(unused))}")
    for st in statements:
        bound = user_params(st, params)
        # Leading newlines keep DuckDB's LINE numbers those of the whole input.
        with untouched(con):
            res = queries.run(con, "\n" * (st.line - 1) + st.sql.lstrip(), bound or None)
            if res.description is not None:
                write_result(res, fmt, out, limit, console)


def report_error(exc: BaseException, console: Console | None = None) -> None:
    """DuckDB's message (with its LINE and ^ position) or ours, without a traceback; inert, as
    it may quote a value from the logs."""
    from .shell import err

    console = console or err
    text = inert(str(exc).rstrip(), newlines=True)
    console.print(Text.assemble(("error: ", "bold red"), text), soft_wrap=True, highlight=False)


USER_ERRORS = (duckdb.Error, Failure, UserError)


def _guard(action: Callable[[], None]) -> None:
    try:
        action()
    except USER_ERRORS as exc:
        report_error(exc)
        raise typer.Exit(2) from None
    except Cancelled:  # `run` says it, as for any command stopped by Ctrl-C
        raise typer.Exit(130) from None


# -- commands ----------------------------------------------------------------------------------

def sql_cmd(
    sql: Annotated[str | None, typer.Argument(help="SQL to run; - (or nothing, with input "
                                              "piped in) reads standard input.")] = None,
    file: Annotated[Path | None, typer.Option("--file", help="Read the SQL from this file.")]
    = None,
    store: StoreOpt = Path(DEFAULT_STORE),
    fmt: FormatOpt = "table",
    out: OutOpt = None,
    limit: LimitOpt = None,
    param: ParamOpt = None,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT,
) -> None:
    """Run read-only SQL over the store's views (events, requests, findings, ...).

    Example: loophound sql "SELECT error, count(*) FROM requests GROUP BY ALL ORDER BY 2 DESC"

    Parameters are bound, never pasted: loophound sql "SELECT * FROM events WHERE session =
    $s" --param s=6afr3v. Statements that could change anything (COPY, ATTACH, CREATE, INSERT,
    SET, ...) are refused; write results with --format csv|json|jsonl|parquet --out FILE.
    A query stops after --timeout seconds, or at Ctrl-C (exit status 130).
    """
    def action() -> None:
        text = _read_sql(sql, file)
        _check_options(fmt, out, store)
        con = open_store(store)
        bound = parse_assignments(param or [])
        stoppable(con, lambda: run_sql(con, text, bound, fmt, out, limit), timeout)

    _guard(action)


def _read_sql(sql: str | None, file: Path | None) -> str:
    if file is not None:
        if sql is not None:
            raise Failure("give the SQL as an argument or with --file, not both")
        try:
            return file.read_text(encoding="utf-8")
        except OSError as exc:
            raise Failure(f"cannot read {file}: {exc.strerror or exc}") from None
    if sql is None or sql == "-":
        if sql is None and sys.stdin.isatty():
            raise Failure('give SQL to run, e.g. loophound sql "SELECT count(*) FROM events", '
                          "or --file FILE, or pipe it in")
        return sys.stdin.read()
    return sql


def query_cmd(
    name: Annotated[str | None, typer.Argument(help="Named query (see --list).")] = None,
    list_: Annotated[bool, typer.Option("--list", help="List the named queries.")] = False,
    show_sql: Annotated[bool, typer.Option("--sql", help="Print the query's SQL and parameter "
                                           "values instead of running it.")] = False,
    param: Annotated[list[str] | None, typer.Option(
        "--param", "-p", help="NAME=VALUE, read as the type of the parameter's default "
                              "(repeatable).")] = None,
    store: StoreOpt = Path(DEFAULT_STORE),
    fmt: FormatOpt = "table",
    out: OutOpt = None,
    limit: LimitOpt = None,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT,
) -> None:
    """Run a named query from the library (queries/*.sql) with bound parameters.

    Example: loophound query after_close --param session=6afr3v
    """
    def action() -> None:
        if list_ or name is None:
            from .shell import out as console

            print_query_list(console)
            return
        q = queries.load(name)
        bound = q.bind(param or [])
        if show_sql:
            print_query_sql(q, bound)
            return
        _check_options(fmt, out, store)
        con = open_store(store)

        def work() -> None:
            with untouched(con):
                write_result(queries.execute(con, q, bound), fmt, out, limit)

        stoppable(con, work, timeout)

    _guard(action)


def print_query_list(console: Console) -> None:
    table = Table(show_edge=False, header_style="bold", highlight=False)
    table.add_column("query")
    table.add_column("what it answers", overflow="fold")
    table.add_column("parameters (defaults)", overflow="fold")
    for q in queries.list_queries():
        params = ", ".join(f"{p.name}={_default_text(p.default)}" for p in q.params)
        table.add_row(Text(q.name, style="bold"), Text(f"{q.title}: {q.description}"),
                      Text(params or "-"))
    console.print(table)
    console.print(Text("Run one: loophound query NAME --param key=value  (--sql shows its SQL)",
                       style="dim"))


def _default_text(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def print_query_sql(q: queries.NamedQuery, bound: dict[str, Any]) -> None:
    sys.stdout.write(f"-- {q.name}: {q.title}\n-- {q.path}\n")
    for p in q.params:
        sys.stdout.write(f"-- ${p.name} ({p.type}) = {_default_text(bound[p.name])}"
                         f"{'  -- ' + p.help if p.help else ''}\n")
    sys.stdout.write(q.sql + ";\n")


# -- the shell ---------------------------------------------------------------------------------

SHELL_HELP = """\
End a statement with ; (it may span lines). Only queries run: SELECT, WITH, FROM, DESCRIBE,
SHOW, SUMMARIZE, EXPLAIN, PRAGMA table_info. Commands:
  .tables              the views, with what each holds
  .schema NAME         a view's columns and types
  .queries             the named queries
  .query NAME [k=v..]  run a named query with parameters
  .format FMT          table (default), csv, json or jsonl
  .limit N             rows shown in a table (0: all)
  .help                this text
  .quit                leave (also .exit or end of input)"""


class Shell:
    def __init__(self, con: duckdb.DuckDBPyConnection, console: Console, errors: Console,
                 store: Path, timeout: float | None = DEFAULT_TIMEOUT):
        self.con, self.console, self.errors, self.store = con, console, errors, store
        self.fmt, self.limit, self.failed, self.timeout = "table", TABLE_LIMIT, 0, timeout

    def run_statement(self, text: str) -> None:
        """Run what was typed; Ctrl-C stops it and the prompt comes back."""
        self._stoppable(lambda: run_sql(self.con, text, {}, self.fmt, None, self.limit,
                                        self.console))

    def _stoppable(self, work: Callable[[], None]) -> None:
        try:
            stoppable(self.con, work, self.timeout)
        except (*USER_ERRORS, Cancelled) as exc:
            self._error(exc)

    def _error(self, exc: BaseException) -> None:
        self.failed += 1
        report_error(exc, self.errors)

    def command(self, line: str) -> bool:
        """Run a dot command; False to leave the shell."""
        word, _, rest = line.strip().partition(" ")
        rest = rest.strip()
        word = word.lower()
        try:
            if word in (".quit", ".exit", ".q"):
                return False
            if word == ".help":
                self.console.print(Text(SHELL_HELP))
            elif word == ".tables":
                self._tables()
            elif word == ".schema":
                self._schema(rest)
            elif word == ".queries":
                print_query_list(self.console)
            elif word == ".query":
                self._query(rest)
            elif word == ".format":
                if rest not in FORMATS or rest == "parquet":
                    raise Failure(".format takes table, csv, json or jsonl")
                self.fmt = rest
            elif word == ".limit":
                try:
                    self.limit = int(rest)
                except ValueError:
                    raise Failure(".limit takes a number of rows (0: all)") from None
            else:
                raise Failure(f"unknown command {word}; .help lists them")
        except USER_ERRORS as exc:
            self._error(exc)
        return True

    def _tables(self) -> None:
        table = Table(show_edge=False, header_style="bold", highlight=False)
        table.add_column("view")
        table.add_column("columns", justify="right")
        table.add_column("holds", overflow="fold")
        queries.define_pending(self.con)
        counts = dict(self.con.execute(
            "SELECT table_name, count(*) FROM duckdb_columns() GROUP BY ALL").fetchall())
        for name, _kind in queries.user_tables(self.con):
            table.add_row(Text(name, style="bold"), str(counts.get(name, "")),
                          Text(VIEW_DOCS.get(name, "")))
        self.console.print(table)

    def _schema(self, name: str) -> None:
        from ..schema import COLUMNS

        name = name.strip().strip(";").strip('"')
        if not name:
            raise Failure(".schema needs a view name; .tables lists them")
        queries.define_pending(self.con)
        cols = self.con.execute(
            "SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = ? "
            "AND NOT starts_with(table_name, '_') ORDER BY column_index", [name]).fetchall()
        if not cols:
            raise Failure(f"no view named {name!r}; .tables lists them")
        from ..schema import QUARANTINE_COLUMNS

        base = QUARANTINE_COLUMNS if name == "quarantine" else COLUMNS
        docs = {c.name: c.doc for c in base} | COLUMN_DOCS.get(name, {})
        if name in ("inputs", "findings", "finding_events", "event_costs"):
            docs = COLUMN_DOCS[name]
        table = Table(show_edge=False, header_style="bold", highlight=False)
        table.add_column("column")
        table.add_column("type")
        table.add_column("meaning", overflow="fold")
        for col, type_ in cols:
            table.add_row(Text(col, style="bold"), Text(type_), Text(docs.get(col, "")))
        self.console.print(table)

    def _query(self, rest: str) -> None:
        import shlex

        parts = shlex.split(rest)
        if not parts:
            raise Failure(".query needs a name; .queries lists them")
        q = queries.load(parts[0])
        bound = q.bind(parts[1:])

        def work() -> None:
            with untouched(self.con):
                res = queries.execute(self.con, q, bound)
                write_result(res, self.fmt, None, self.limit, self.console)

        self._stoppable(work)


def _statement_complete(buffer: str) -> bool:
    """A statement ends with `;` outside strings and comments, as DuckDB's own scanner reads
    them: a dollar-quoted `$$a;b$$`, an escape string `E'\\';'` or an unterminated comment
    are its to know, not a hand-written scanner's."""
    text = buffer.rstrip()
    if ";" not in text:
        return False
    try:
        found = duckdb.tokenize(text)
    except Exception:  # noqa: BLE001 — text it cannot scan is not a statement yet
        return False
    for i in range(len(found) - 1, -1, -1):
        at, kind = found[i]
        if kind == duckdb.token_type.comment:
            continue
        end = found[i + 1][0] if i + 1 < len(found) else len(text)
        return kind == duckdb.token_type.operator and text[at:end].rstrip().endswith(";")
    return False


def _history_file() -> Path:
    env = os.environ.get("LOOPHOUND_HISTORY")
    return Path(env).expanduser() if env else Path("~/.loophound_history").expanduser()


def shell_loop(shell: Shell, read: Callable[[str], str | None], interactive: bool) -> None:
    buffer = ""
    while True:
        try:
            line = read("lh> " if not buffer else " ..> ")
        except KeyboardInterrupt:
            if not interactive:
                raise
            shell.console.print()
            buffer = ""
            continue
        if line is None:  # end of input
            if buffer.strip():
                shell.run_statement(buffer)
            return
        if not buffer and line.strip().startswith("."):
            if not shell.command(line):
                return
            continue
        if not buffer and not line.strip():
            continue
        buffer += line + "\n"
        if _statement_complete(buffer):
            statement, buffer = buffer, ""
            shell.run_statement(statement)


def shell_cmd(store: StoreOpt = Path(DEFAULT_STORE),
              timeout: TimeoutOpt = DEFAULT_TIMEOUT) -> None:
    """An interactive, read-only SQL prompt over the store's views.

    Statements may span lines and end with ;. .tables lists the views, .schema NAME shows
    columns, .queries the named queries, .help the rest. History is kept in
    ~/.loophound_history (or $LOOPHOUND_HISTORY). Input can be piped in.

    Ctrl-C stops the statement running and keeps the prompt; so does --timeout.

    Example: echo "SELECT count(*) FROM events;" | loophound shell --store .loophound
    """
    from .shell import err

    try:
        con = open_store(store)
    except USER_ERRORS as exc:
        report_error(exc)
        raise typer.Exit(2) from None
    interactive = sys.stdin.isatty()
    console = _stdout_console()
    shell = Shell(con, console, err, store, timeout)
    if interactive:
        history = _enable_history(_history_file())
        console.print(Text.assemble(
            ("loophound shell", "bold"), f" on {store} (read-only). Views: ",
            ", ".join(n for n, _ in queries.user_tables(con)),
            ".\nEnd statements with ;  .help for commands, .quit to leave."))

        def read(prompt: str) -> str | None:
            try:
                return input(prompt)
            except EOFError:
                console.print()
                return None

        try:
            shell_loop(shell, read, True)
        finally:
            history()
        return

    def read_piped(_prompt: str) -> str | None:
        line = sys.stdin.readline()
        return None if line == "" else line.rstrip("\n")

    shell_loop(shell, read_piped, False)
    if shell.failed:
        raise typer.Exit(2)


def _enable_history(path: Path) -> Callable[[], None]:
    """Load readline history; returns the function that saves it."""
    try:
        import readline
    except ImportError:  # pragma: no cover — Windows without pyreadline
        return lambda: None
    readline.set_history_length(2000)
    try:
        readline.read_history_file(path)
    except OSError:
        pass

    def save() -> None:
        try:
            readline.write_history_file(path)
        except OSError:
            pass

    return save


def register(app: typer.Typer) -> None:
    app.command("sql")(sql_cmd)
    app.command("shell")(shell_cmd)
    app.command("query")(query_cmd)


__all__ = ["register", "run_sql", "write_result", "render_table", "Shell", "shell_loop"]

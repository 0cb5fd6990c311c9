"""Named DuckDB queries over the store's views, and the read-only connection they run on.

A named query is a `.sql` file (one SELECT) whose header says what it is. The shipped ones are
edited in the checkout's top-level `queries/` and installed as the package
`loophound.named_queries`; LOOPHOUND_QUERIES names folders of your own. A header:

    -- title: Top errors
    -- description: The error codes returned most often, ...
    --   (an indented comment line continues the field above it)
    -- param: limit = 20  -- rows to return
    -- param: file: str = null  -- only this input file (default: every file)

A parameter is `name[: type] = default  -- help`. The default is a literal: an integer, a
decimal, `true`/`false`, `null`, a 'quoted string' or a bare word (a string). Its type (or the
explicit `int`, `float`, `bool`, `str`, `timestamp`) decides how a `--param name=value` string
is read. The SQL refers to parameters as `$name` and they are always bound, never pasted into
the SQL text. The report's tables are these files' answers (`records`), and anything else
can run them with `execute` or `records`, so one question has one answer everywhere.

`readonly_connection` opens a store for untrusted SQL: the documented views over the committed
Parquet files, then the configuration locked so that no statement can touch the file system
beyond reading those files; `check_read_only` refuses every statement that is not a query.
"""

from __future__ import annotations

import datetime as dt
import difflib
import importlib.util
import json
import os
import re
import shutil
import tempfile
import warnings
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from . import db
from .db import sql_list
from .store import Store

# Where the shipped named queries live: the top-level `queries/` of the source checkout, which
# is installed as the package `loophound.named_queries` (a wheel holds a copy, an editable
# install maps the package to the folder). LOOPHOUND_QUERIES (paths separated by os.pathsep)
# adds folders of your own, searched first.
SOURCE_QUERIES = Path(__file__).resolve().parents[2] / "queries"
SHIPPED_PACKAGE = f"{__package__}.named_queries"

# The views a read-only session offers (documented in the README).
VIEWS = ("events", "requests", "messages", "triggers", "llm_calls", "quarantine", "inputs",
         "findings", "finding_events", "event_costs")

TYPES = ("int", "float", "bool", "str", "timestamp")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HEADER_KEYS = ("title", "description", "param")


# QueryError (a named query that does not exist, has a bad header or was given a bad parameter)
# and ReadOnlyViolation (a statement that could change something, refused before it runs) are
# user errors of the one hierarchy; they stay importable from here.
from .errors import QueryError, ReadOnlyViolation  # noqa: E402


@dataclass(frozen=True)
class Param:
    name: str
    type: str  # one of TYPES
    default: Any
    help: str = ""

    def coerce(self, raw: Any) -> Any:
        """`raw` (usually the text after `--param name=`) as this parameter's type."""
        return coerce(raw, self.type, f"parameter {self.name}")


@dataclass(frozen=True)
class NamedQuery:
    name: str
    title: str
    description: str
    params: tuple[Param, ...]
    sql: str
    path: Path

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise QueryError(f"query {self.name} has no parameter {name!r}; it has: "
                         f"{', '.join(p.name for p in self.params) or 'none'}")

    def bind(self, values: Mapping[str, Any] | Iterable[str] | None = None) -> dict[str, Any]:
        """Every parameter's value: the defaults, overridden by `values` (a mapping, or
        `key=value` strings as given to `--param`). Strings are read as each parameter's type."""
        bound = {p.name: p.default for p in self.params}
        if values is None:
            return bound
        items = values.items() if isinstance(values, Mapping) else _split_assignments(values)
        for key, value in items:
            p = self.param(key)
            bound[key] = p.coerce(value)
        return bound


def _split_assignments(values: Iterable[str]) -> list[tuple[str, str]]:
    out = []
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise QueryError(f"--param {item!r}: expected NAME=VALUE, e.g. limit=5")
        out.append((key.strip(), value))
    return out


# -- values ------------------------------------------------------------------------------------

def coerce(raw: Any, type_: str, where: str = "value") -> Any:
    """Read `raw` as `type_`. The text `null` (any case) is NULL for every type."""
    if raw is None:
        return None
    if not isinstance(raw, str):
        return _check_type(raw, type_, where)
    text = raw.strip()
    if text.lower() == "null":
        return None
    try:
        if type_ == "int":
            return int(text)
        if type_ == "float":
            return float(text)
        if type_ == "bool":
            low = text.lower()
            if low in ("true", "1", "yes", "on"):
                return True
            if low in ("false", "0", "no", "off"):
                return False
            raise ValueError(text)
        if type_ == "timestamp":
            return _timestamp(text)
        return raw
    except ValueError:
        raise QueryError(f"{where}: {raw!r} is not a valid {type_}") from None


def _check_type(value: Any, type_: str, where: str) -> Any:
    ok = {
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "bool": lambda v: isinstance(v, bool),
        "str": lambda v: isinstance(v, str),
        "timestamp": lambda v: isinstance(v, dt.datetime),
    }[type_]
    if not ok(value):
        raise QueryError(f"{where}: {value!r} is not a {type_}")
    return float(value) if type_ == "float" else value


def _timestamp(text: str) -> dt.datetime:
    t = dt.datetime.fromisoformat(text)
    if t.tzinfo is not None:  # the store's times are naive UTC
        t = t.astimezone(dt.UTC).replace(tzinfo=None)
    return t


def _literal(text: str) -> tuple[Any, str]:
    """A header default: (value, inferred type)."""
    if text.lower() == "null":
        return None, "str"
    if text.lower() in ("true", "false"):
        return text.lower() == "true", "bool"
    if re.fullmatch(r"[+-]?\d+", text):
        return int(text), "int"
    if re.fullmatch(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?", text):
        return float(text), "float"
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1].replace("''", "'"), "str"
    return text, "str"


# -- the library -------------------------------------------------------------------------------

def shipped_dirs() -> list[Path]:
    """The folder of the named queries that come with loophound: that of the package
    `loophound.named_queries` wherever it is installed, else (the checkout's `src/` on the
    path, not installed) the checkout's `queries/`."""
    try:
        spec = importlib.util.find_spec(SHIPPED_PACKAGE)
    except ImportError:
        spec = None
    if spec is not None and spec.submodule_search_locations:
        return [Path(p) for p in spec.submodule_search_locations]
    return [SOURCE_QUERIES]


def query_dirs() -> list[Path]:
    extra = [Path(p) for p in os.environ.get("LOOPHOUND_QUERIES", "").split(os.pathsep) if p]
    return [d for d in (*extra, *shipped_dirs()) if d.is_dir()]


def _files() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for d in query_dirs():
        for f in sorted(d.glob("*.sql")):
            found.setdefault(f.stem, f)  # the first folder wins
    return found


def names() -> list[str]:
    return sorted(_files())


def list_queries() -> list[NamedQuery]:
    return [load(n) for n in names()]


def load(name: str, parser: duckdb.DuckDBPyConnection | None = None) -> NamedQuery:
    files = _files()
    if name not in files:
        close = difflib.get_close_matches(name.lower(), list(files), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise QueryError(f"no named query {name!r}{hint} (list them with `loophound query "
                         "--list`)")
    path = files[name]
    return parse(path.read_text(encoding="utf-8"), name, path, parser)


def statements_of(sql: str, parser: duckdb.DuckDBPyConnection | None = None) -> list:
    """DuckDB's statements of `sql`, parsed by `parser` (a connection the caller has) or by
    DuckDB's default connection: made the first time it is asked, that is a database of its
    own (16-25 ms), which a report or `loophound sql` need not make beside theirs."""
    return (parser or duckdb).extract_statements(sql)


def parse(text: str, name: str, path: Path | None = None,
          parser: duckdb.DuckDBPyConnection | None = None) -> NamedQuery:
    """A query file: its header, then exactly one SELECT using every declared `$param`
    (`parser`: see `statements_of`)."""
    where = str(path or name)
    fields: dict[str, list[str]] = {"title": [], "description": []}
    params: list[Param] = []
    last: str | None = None
    lines = text.splitlines()
    body_start = len(lines)
    for i, line in enumerate(lines):
        stripped = line.strip()
        if not stripped:
            continue
        if not stripped.startswith("--"):
            body_start = i
            break
        content = stripped[2:].strip()
        key, sep, value = content.partition(":")
        if sep and key.strip().lower() in _HEADER_KEYS:
            last = key.strip().lower()
            if last == "param":
                params.append(_parse_param(value.strip(), where))
            else:
                fields[last].append(value.strip())
        elif last == "param" and content:
            p = params[-1]
            params[-1] = Param(p.name, p.type, p.default, f"{p.help} {content}".strip())
        elif last and content:
            fields[last].append(content)
    sql = "\n".join(lines[body_start:]).strip()
    title = " ".join(fields["title"]).strip()
    if not title:
        raise QueryError(f"{where}: the header needs a `-- title: ...` line")
    if not sql:
        raise QueryError(f"{where}: no SQL after the header")
    seen = set()
    for p in params:
        if p.name in seen:
            raise QueryError(f"{where}: parameter {p.name} is declared twice")
        seen.add(p.name)
    try:
        statements = statements_of(sql, parser)
    except duckdb.Error as exc:
        raise QueryError(f"{where}: {exc}") from None
    if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
        raise QueryError(f"{where}: a named query is exactly one SELECT statement")
    used = set(statements[0].named_parameters)
    if used != seen:
        missing, unused = sorted(used - seen), sorted(seen - used)
        raise QueryError(f"{where}: " + "; ".join(
            ([f"uses undeclared parameters {', '.join('$' + m for m in missing)}"] if missing
             else []) + ([f"declares unused parameters {', '.join(unused)}"] if unused else [])))
    return NamedQuery(name, title, " ".join(fields["description"]).strip(), tuple(params),
                      sql.rstrip().rstrip(";"), path or Path(name))


def _parse_param(spec: str, where: str) -> Param:
    m = re.match(r"^([A-Za-z_]\w*)\s*(?::\s*([A-Za-z]+)\s*)?=\s*(.*)$", spec)
    if not m:
        raise QueryError(f"{where}: bad parameter line {spec!r}; expected "
                         "`-- param: name[: type] = default  -- help`")
    name, type_, rest = m.group(1), m.group(2), m.group(3).strip()
    if rest.startswith("'"):  # a quoted default may itself contain `--`
        end = 1
        while True:
            end = rest.find("'", end)
            if end < 0:
                raise QueryError(f"{where}: unterminated quoted default in {spec!r}")
            if rest[end + 1:end + 2] == "'":
                end += 2
                continue
            break
        default_text, tail = rest[:end + 1], rest[end + 1:].strip()
    else:
        default_text, sep, tail = rest.partition("--")
        default_text, tail = default_text.strip(), sep + tail
    help_ = tail[2:].strip() if tail.startswith("--") else tail.strip()
    if not default_text:
        raise QueryError(f"{where}: parameter {name} needs a default (`null` for none)")
    default, inferred = _literal(default_text)
    if type_ is None:
        return Param(name, inferred, default, help_)
    type_ = type_.lower()
    if type_ not in TYPES:
        raise QueryError(f"{where}: parameter {name}: unknown type {type_!r}; types: "
                         f"{', '.join(TYPES)}")
    if default is not None:
        text = default if inferred == "str" else default_text
        default = coerce(text, type_, f"{where}: default of {name}")
    return Param(name, type_, default, help_)


# -- running -----------------------------------------------------------------------------------

def _defined(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    """Whether `con` has a view or table `name` (a scan's `event_costs` is a table, priced
    with the scan's cost model: it must not be replaced by one priced with the default)."""
    return bool(con.execute(
        "SELECT count(*) FROM (SELECT view_name AS n FROM duckdb_views() UNION ALL "
        "SELECT table_name FROM duckdb_tables()) WHERE n = ?", [name]).fetchall()[0][0])


def execute(con: duckdb.DuckDBPyConnection, query: str | NamedQuery,
            params: Mapping[str, Any] | Iterable[str] | None = None) -> duckdb.DuckDBPyConnection:
    """Run a named query on `con` (any connection with the store's views); the result is
    pending on the returned connection: fetch it before the next statement."""
    q = load(query, con) if isinstance(query, str) else query
    bound = q.bind(params)
    if "event_costs" in q.sql and not _defined(con, "event_costs"):
        _define_costs(con)
    return con.execute(q.sql, bound)


def records(con: duckdb.DuckDBPyConnection, query: str | NamedQuery,
            params: Mapping[str, Any] | Iterable[str] | None = None, **kw: Any) -> list[dict]:
    """A named query's rows as dicts: `records(con, "top_errors", limit=5)`."""
    merged = dict(params or {}) if not isinstance(params, (list, tuple)) else dict(
        _split_assignments(params))
    merged.update(kw)
    return dicts(execute(con, query, merged))


def dicts(res: duckdb.DuckDBPyConnection) -> list[dict]:
    """The rows of an executed statement `res` as dicts, by column name."""
    cols = [d[0] for d in res.description]
    return [dict(zip(cols, row, strict=True)) for row in res.fetchall()]


# -- read-only sessions ------------------------------------------------------------------------

# PRAGMAs that only describe: everything else is refused.
ALLOWED_PRAGMAS = ("table_info", "show", "show_tables", "show_tables_expanded", "version",
                   "platform", "database_list", "functions", "collations")

READ_ONLY_HINT = ("loophound's SQL is read-only: queries (SELECT, WITH, FROM, VALUES, DESCRIBE, "
                  "SHOW, SUMMARIZE, EXPLAIN, PRAGMA table_info) only; write a result with "
                  "--format/--out instead")


@dataclass(frozen=True)
class Statement:
    sql: str  # the statement's own text
    line: int  # 1-based line of the input where it begins
    params: frozenset[str]


def check_read_only(sql: str, parser: duckdb.DuckDBPyConnection | None = None
                    ) -> list[Statement]:
    """Split `sql` into statements and refuse, before anything runs, any that is not a query.

    Every decision is DuckDB's own, never a reading of the text: the statement types of its
    parser, the tokens of its scanner (so a comment is a comment wherever it is) and, for what
    an EXPLAIN wraps, its parser and its SELECT-only serializer again. A syntax error raises
    DuckDB's own `duckdb.ParserException` (its message points at the position); a statement
    that could change something raises `ReadOnlyViolation`. `parser`: see `statements_of`."""
    statements = statements_of(sql, parser)
    out: list[Statement] = []
    pos = 0
    for n, st in enumerate(statements, 1):
        text = st.query
        at = sql.find(text.strip(), pos) if text.strip() else -1
        if at >= 0:
            pos = at + len(text.strip())
        line = sql.count("\n", 0, at) + 1 if at >= 0 else 1
        where = f"statement {n} (line {line})" if len(statements) > 1 else "the statement"
        _refuse_unless_query(st, text, where)
        out.append(Statement(text, line, frozenset(st.named_parameters)))
    return out


def _refuse_unless_query(st, text: str, where: str) -> None:
    try:
        kind = st.type
    except ValueError:  # a kind DuckDB's Python module has no name for (UPDATE EXTENSIONS)
        raise ReadOnlyViolation(f"refused {where}: {_first_words(text)} is not a query; "
                                f"{READ_ONLY_HINT}") from None
    if kind == duckdb.StatementType.SELECT:
        return
    if kind == duckdb.StatementType.EXPLAIN:
        inner = _explained(text)
        if inner is not None and _one_select(inner):
            return
        raise ReadOnlyViolation(f"refused {where}: EXPLAIN of anything but a query (EXPLAIN "
                                "ANALYZE runs what it explains); " + READ_ONLY_HINT)
    if kind == duckdb.StatementType.PRAGMA:
        words = _tokens(text)
        name = words[1][2] if len(words) > 1 and words[0][2].upper() == "PRAGMA" else ""
        if name.lower() in ALLOWED_PRAGMAS and words[1][1] != duckdb.token_type.string_const:
            return
        raise ReadOnlyViolation(f"refused {where}: PRAGMA {name} (only "
                                f"{', '.join(ALLOWED_PRAGMAS)} are allowed); {READ_ONLY_HINT}")
    if kind == duckdb.StatementType.MULTI:
        raise ReadOnlyViolation(f"refused {where}: it expands into several statements (a PIVOT "
                                "without an IN list does: name the values, `ON kind IN "
                                f"('request', 'response')`); {READ_ONLY_HINT}")
    name = str(kind).rsplit(".", 1)[-1].replace("_", " ")
    raise ReadOnlyViolation(f"refused {where}: {name} statements cannot run here; "
                            f"{READ_ONLY_HINT}")


def _first_words(text: str) -> str:
    """The statement's first two words, to name a statement kind that has no name."""
    return " ".join(w for _, _, w in _tokens(text)[:2]).upper() or "it"


def _tokens(text: str) -> list[tuple[int, Any, str]]:
    """(position, kind, text) of each token of `text` as DuckDB's own scanner reads it (the one
    its parser uses), comments left out: a comment can hide nothing from this."""
    found = duckdb.tokenize(text)
    out = []
    for i, (at, kind) in enumerate(found):
        if kind == duckdb.token_type.comment:
            continue
        end = found[i + 1][0] if i + 1 < len(found) else len(text)
        out.append((at, kind, text[at:end].strip()))
    return out


def _explained(text: str) -> str | None:
    """The text of the statement an EXPLAIN wraps: what follows `EXPLAIN`, an optional
    `ANALYZE` and an optional parenthesised list of options, all as DuckDB's scanner splits
    them. None when there is nothing after them."""
    words = _tokens(text)
    if not words or words[0][2].upper() != "EXPLAIN":
        return None
    i = 1
    if i < len(words) and words[i][2].upper() in ("ANALYZE", "ANALYSE"):
        i += 1
    if i < len(words) and words[i][2] == "(":
        depth = 0
        while i < len(words):
            if words[i][1] == duckdb.token_type.operator:
                depth += words[i][2].count("(") - words[i][2].count(")")
            i += 1
            if depth <= 0:
                break
    return text[words[i][0]:] if i < len(words) else None


_SERIALIZER: list[duckdb.DuckDBPyConnection] = []


def _one_select(sql: str) -> bool:
    """Whether `sql` is exactly one SELECT to DuckDB's parser and to its serializer
    (`json_serialize_sql`, which accepts nothing but a SELECT)."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error:
        return False
    if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
        return False
    if not _SERIALIZER:  # it only parses: it needs no file and no setting but its own
        serializer = duckdb.connect()
        serializer.execute("SET enable_external_access = false")
        serializer.execute("SET lock_configuration = true")
        _SERIALIZER.append(serializer)
    try:
        answer = _SERIALIZER[0].cursor().execute("SELECT json_serialize_sql(?)", [sql]).fetchall()
        return json.loads(answer[0][0]).get("error") is False
    except (duckdb.Error, ValueError):
        return False


def readonly_connection(store: Store, costs=None, *,
                        costs_when_used: bool = False) -> duckdb.DuckDBPyConnection:
    """The store's views on an in-memory connection that cannot write anywhere it matters.

    After the views are defined, DuckDB may open no file but the committed Parquet files
    (`allowed_paths`, read by the views) and its own private spill folder (always allowed to
    it, removed with the connection); extensions cannot be installed or loaded, and the
    configuration is locked, so no statement can switch any of it back. DuckDB has no
    read-only kind of allowed path, so statements must still pass `check_read_only`; and in
    case one that writes ever got past it, the committed files have no write permission on
    disk (`Store.seal`), and `check_untouched` tells, after each statement, whether any of
    them changed.

    `event_costs` prices every event, which takes a pass over all of them (a quarter of a
    one-line query's time on a 1.2 M-line log): with `costs_when_used`, it is made only when
    a statement run through `run` may read it (see `needs_costs`)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Arrow output on a DB-API result")
        con = store.connect(isolated=True)
    with db.hosting(con):
        files = store.committed_files()
    _COSTS_LATER[con] = costs
    if not costs_when_used:
        _define_costs(con)
    readable = sorted({f for fs in files.values() for f in fs})
    spill = tempfile.mkdtemp(prefix="loophound-sql-")
    weakref.finalize(con, shutil.rmtree, spill, True)  # when the connection goes, or at exit
    con.execute(f"SET temp_directory = {sql_list([spill])[1:-1]}")
    con.execute(f"SET allowed_paths = {sql_list(readable)}")
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    con.execute("SET allow_community_extensions = false")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    _READ.setdefault(con, _fingerprints(readable))
    return con


# per read-only connection whose `event_costs` is not made yet: the cost model to make it with
# (None: the default)
_COSTS_LATER: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

# What in a statement says it may read `event_costs`: its name, or a look at the catalog of
# views (which lists it). Text, not tokens: a false alarm costs time, never a wrong answer; a
# name built at run time (`query_table(...)`) is caught by `run` when DuckDB misses it.
COSTS_WORDS = ("event_costs", "duckdb_", "information_schema", "pg_", "sqlite_", "show",
               "describe", "summarize", "pragma", "query")


def needs_costs(sql: str) -> bool:
    low = sql.lower()
    return any(w in low for w in COSTS_WORDS)


def define_pending(con: duckdb.DuckDBPyConnection) -> None:
    """Make every view a read-only connection left until it is used (`event_costs`)."""
    if con in _COSTS_LATER:
        _define_costs(con)


def _define_costs(con: duckdb.DuckDBPyConnection) -> bool:
    """Make `event_costs` on `con` (with the model it was opened with); False when it was
    made already."""
    from .attribute.costs import define_cost_view, load_cost_model

    if con not in _COSTS_LATER and _defined(con, "event_costs"):
        return False
    costs = _COSTS_LATER.pop(con, None)
    define_cost_view(con, costs or load_cost_model())
    return True


def run(con: duckdb.DuckDBPyConnection, sql: str,
        params: Mapping[str, Any] | None = None) -> duckdb.DuckDBPyConnection:
    """Run one statement that passed `check_read_only` on a read-only connection, making
    first what it may read that was left until used; the result is pending on `con`."""
    if con in _COSTS_LATER and needs_costs(sql):
        _define_costs(con)
    try:
        return con.execute(sql, params)
    except duckdb.CatalogException as exc:
        if "event_costs" not in str(exc) or con not in _COSTS_LATER:
            raise
        _define_costs(con)
        return con.execute(sql, params)


# per read-only connection: the files it may read, as they were when it was opened
_READ: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _fingerprints(paths: Iterable[str]) -> dict[str, tuple[int, int, int] | None]:
    out: dict[str, tuple[int, int, int] | None] = {}
    for p in paths:
        try:
            s = os.stat(p)
            out[p] = (s.st_size, s.st_mtime_ns, s.st_ino)
        except OSError:
            out[p] = None
    return out


def check_untouched(con: duckdb.DuckDBPyConnection) -> None:
    """Raise `ReadOnlyViolation` naming the store's files a read-only connection may read that
    changed since it was opened (size, modification time or inode): the last statement wrote
    to the evidence, which `check_read_only` exists to prevent. Run after every statement."""
    before = _READ.get(con)
    if not before:
        return
    now = _fingerprints(before)
    changed = [p for p in before if now[p] != before[p]]
    if changed:
        shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3
                                          else "")
        raise ReadOnlyViolation(
            f"the store's files changed while the statement ran: {shown}. A write got past the "
            "read-only check (please report it); `loophound verify` names every committed file "
            "that no longer matches its recorded hash")


def user_tables(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    """(name, 'view'|'table') of what a user may query, internal `_` names left out."""
    rows = con.execute(
        "SELECT view_name, 'view' FROM duckdb_views() WHERE NOT internal "
        "UNION ALL SELECT table_name, 'table' FROM duckdb_tables() WHERE NOT internal"
    ).fetchall()
    order = {v: i for i, v in enumerate(VIEWS)}
    return sorted(((n, k) for n, k in rows if not n.startswith("_")),
                  key=lambda r: (order.get(r[0], len(order)), r[0]))

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


def load(name: str) -> NamedQuery:
    files = _files()
    if name not in files:
        close = difflib.get_close_matches(name.lower(), list(files), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise QueryError(f"no named query {name!r}{hint} (list them with `loophound query "
                         "--list`)")
    path = files[name]
    return parse(path.read_text(encoding="utf-8"), name, path)


def parse(text: str, name: str, path: Path | None = None) -> NamedQuery:
    """A query file: its header, then exactly one SELECT using every declared `$param`."""
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
        statements = duckdb.extract_statements(sql)
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
    q = load(query) if isinstance(query, str) else query
    bound = q.bind(params)
    if "event_costs" in q.sql and not _defined(con, "event_costs"):
        from .attribute.costs import define_cost_view, load_cost_model

        define_cost_view(con, load_cost_model())
    return con.execute(q.sql, bound)


def records(con: duckdb.DuckDBPyConnection, query: str | NamedQuery,
            params: Mapping[str, Any] | Iterable[str] | None = None, **kw: Any) -> list[dict]:
    """A named query's rows as dicts: `records(con, "top_errors", limit=5)`."""
    merged = dict(params or {}) if not isinstance(params, (list, tuple)) else dict(
        _split_assignments(params))
    merged.update(kw)
    res = execute(con, query, merged)
    cols = [d[0] for d in res.description]
    return [dict(zip(cols, row, strict=True)) for row in res.fetchall()]


# -- read-only sessions ------------------------------------------------------------------------

# PRAGMAs that only describe: everything else is refused.
ALLOWED_PRAGMAS = ("table_info", "show", "show_tables", "show_tables_expanded", "version",
                   "platform", "database_list", "functions", "collations")
_LEADING = r"^(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/)*"
_EXPLAIN = re.compile(_LEADING + r"EXPLAIN\s+(?:ANALY[SZ]E\s+)?(?:\([^)]*\)\s*)?",
                      re.IGNORECASE | re.DOTALL)
_PRAGMA = re.compile(_LEADING + r"PRAGMA\s+(\w+)", re.IGNORECASE | re.DOTALL)

READ_ONLY_HINT = ("loophound's SQL is read-only: queries (SELECT, WITH, FROM, VALUES, DESCRIBE, "
                  "SHOW, SUMMARIZE, EXPLAIN, PRAGMA table_info) only; write a result with "
                  "--format/--out instead")


@dataclass(frozen=True)
class Statement:
    sql: str  # the statement's own text
    line: int  # 1-based line of the input where it begins
    params: frozenset[str]


def check_read_only(sql: str) -> list[Statement]:
    """Split `sql` into statements and refuse, before anything runs, any that is not a query.

    A syntax error raises DuckDB's own `duckdb.ParserException` (its message points at the
    position); a statement that could change something raises `ReadOnlyViolation`."""
    statements = duckdb.extract_statements(sql)
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
    kind = st.type
    if kind == duckdb.StatementType.SELECT:
        return
    if kind == duckdb.StatementType.EXPLAIN:
        m = _EXPLAIN.match(text)
        inner = duckdb.extract_statements(text[m.end():]) if m else []
        if len(inner) == 1 and inner[0].type == duckdb.StatementType.SELECT:
            return
        raise ReadOnlyViolation(f"refused {where}: EXPLAIN of anything but a query; "
                                f"{READ_ONLY_HINT}")
    if kind == duckdb.StatementType.PRAGMA:
        m = _PRAGMA.match(text)
        if m and m.group(1).lower() in ALLOWED_PRAGMAS:
            return
        raise ReadOnlyViolation(f"refused {where}: PRAGMA {m.group(1) if m else ''} "
                                f"(only {', '.join(ALLOWED_PRAGMAS)} are allowed); "
                                f"{READ_ONLY_HINT}")
    if kind == duckdb.StatementType.MULTI:
        raise ReadOnlyViolation(f"refused {where}: it expands into several statements (a PIVOT "
                                "without an IN list does: name the values, `ON kind IN "
                                f"('request', 'response')`); {READ_ONLY_HINT}")
    name = str(kind).rsplit(".", 1)[-1].replace("_", " ")
    raise ReadOnlyViolation(f"refused {where}: {name} statements cannot run here; "
                            f"{READ_ONLY_HINT}")


def readonly_connection(store: Store, costs=None) -> duckdb.DuckDBPyConnection:
    """The store's views on an in-memory connection that cannot write anywhere.

    After the views are defined, file access is limited to reading the committed Parquet
    files (`allowed_paths`) and a private spill folder, extensions cannot be installed or
    loaded, and the configuration is locked, so no statement can switch any of it back.
    Statements must still pass `check_read_only`: `allowed_paths` alone would let COPY write
    over the very files it allows reading."""
    from .attribute.costs import define_cost_view, load_cost_model

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Arrow output on a DB-API result")
        con = store.connect(isolated=True)
    files = store.committed_files()
    define_cost_view(con, costs or load_cost_model())
    readable = sorted({f for fs in files.values() for f in fs})
    spill = tempfile.mkdtemp(prefix="loophound-sql-")
    weakref.finalize(con, shutil.rmtree, spill, True)  # when the connection goes, or at exit
    con.execute(f"SET temp_directory = {sql_list([spill])[1:-1]}")
    con.execute(f"SET allowed_directories = {sql_list([spill + os.sep])}")
    con.execute(f"SET allowed_paths = {sql_list(readable)}")
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


def user_tables(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    """(name, 'view'|'table') of what a user may query, internal `_` names left out."""
    rows = con.execute(
        "SELECT view_name, 'view' FROM duckdb_views() WHERE NOT internal "
        "UNION ALL SELECT table_name, 'table' FROM duckdb_tables() WHERE NOT internal"
    ).fetchall()
    order = {v: i for i, v in enumerate(VIEWS)}
    return sorted(((n, k) for n, k in rows if not n.startswith("_")),
                  key=lambda r: (order.get(r[0], len(order)), r[0]))

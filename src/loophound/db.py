"""DuckDB connections set up the one way loophound needs them."""

from __future__ import annotations

import duckdb


def sql_literal(value: str) -> str:
    """A string we built (a path, a name), quoted as a SQL literal. Never for log content:
    that is always bound as a parameter."""
    return "'" + value.replace("'", "''") + "'"


def sql_list(values) -> str:
    """[`'a'`, `'b'`] as a DuckDB list literal."""
    return "[" + ", ".join(sql_literal(v) for v in values) + "]"


def connect(database: str = ":memory:", read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """A connection that works in UTC and never draws DuckDB's own progress bar on stdout
    (it would corrupt `--format csv` output and cron mail)."""
    con = duckdb.connect(database, read_only=read_only)
    con.execute("SET enable_progress_bar = false")
    if database == ":memory:":
        con.execute("SET TimeZone = 'UTC'")
    return con

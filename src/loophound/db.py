"""DuckDB connections set up the one way loophound needs them."""

from __future__ import annotations

import duckdb


def connect(database: str = ":memory:", read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """A connection that works in UTC and never draws DuckDB's own progress bar on stdout
    (it would corrupt `--format csv` output and cron mail)."""
    con = duckdb.connect(database, read_only=read_only)
    con.execute("SET enable_progress_bar = false")
    if database == ":memory:":
        con.execute("SET TimeZone = 'UTC'")
    return con

"""How findings are kept in the store: the last scan's findings and the events each claims.

Kept apart from detection so that the SQL views exist (empty) before any scan has run.
"""

from __future__ import annotations

import duckdb

from .schema import Column

FINDING_COLUMNS = tuple(Column(n, t, "") for n, t in (
    ("id", "VARCHAR"), ("detector", "VARCHAR"), ("severity", "VARCHAR"), ("title", "VARCHAR"),
    ("summary", "VARCHAR"), ("actors", "VARCHAR[]"), ("targets", "VARCHAR[]"),
    ("sessions", "VARCHAR[]"), ("start", "VARCHAR"), ("end", "VARCHAR"), ("events", "BIGINT"),
    ("lines", "BIGINT"), ("bytes", "BIGINT"), ("tokens", "BIGINT"), ("cost_usd", "DOUBLE"),
    ("status", "VARCHAR"), ("json", "VARCHAR"),
))
FINDING_EVENT_COLUMNS = (Column("finding_id", "VARCHAR", ""), Column("event_id", "BIGINT", ""))


def define_finding_views(con: duckdb.DuckDBPyConnection, files: dict[str, list[str]]) -> None:
    from .store import parquet_select

    con.execute("CREATE OR REPLACE TEMP VIEW findings AS "
                + parquet_select(files.get("findings", []), FINDING_COLUMNS))
    claims = files.get("finding_events", [])
    # several files: a full scan's claims and what scheduled scans added; a finding a later
    # scan found afresh may repeat some
    unique = "SELECT DISTINCT * FROM " if len(claims) > 1 else "SELECT * FROM "
    con.execute("CREATE OR REPLACE TEMP VIEW finding_events AS "
                f"{unique}({parquet_select(claims, FINDING_EVENT_COLUMNS)})")

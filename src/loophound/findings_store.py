"""How findings are kept in the store: the last scan's findings and the events each claims.

Kept apart from detection so that the SQL views exist (empty) before any scan has run.
"""

from __future__ import annotations

import duckdb

FINDING_COLUMNS = (
    ("id", "VARCHAR"), ("detector", "VARCHAR"), ("severity", "VARCHAR"), ("title", "VARCHAR"),
    ("summary", "VARCHAR"), ("actors", "VARCHAR[]"), ("targets", "VARCHAR[]"),
    ("sessions", "VARCHAR[]"), ("start", "VARCHAR"), ("end", "VARCHAR"), ("events", "BIGINT"),
    ("lines", "BIGINT"), ("bytes", "BIGINT"), ("tokens", "BIGINT"), ("cost_usd", "DOUBLE"),
    ("status", "VARCHAR"), ("json", "VARCHAR"),
)
FINDING_EVENT_COLUMNS = (("finding_id", "VARCHAR"), ("event_id", "BIGINT"))


def _view(files: list[str], columns) -> str:
    if files:
        listed = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
        return f"SELECT * FROM read_parquet([{listed}])"
    cols = ", ".join(f'CAST(NULL AS {t}) AS "{n}"' for n, t in columns)
    return f"SELECT {cols} WHERE false"


def define_finding_views(con: duckdb.DuckDBPyConnection, files: dict[str, list[str]]) -> None:
    con.execute("CREATE OR REPLACE TEMP VIEW findings AS "
                + _view(files.get("findings", []), FINDING_COLUMNS))
    con.execute("CREATE OR REPLACE TEMP VIEW finding_events AS "
                + _view(files.get("finding_events", []), FINDING_EVENT_COLUMNS))

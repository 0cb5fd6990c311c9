"""Event rates, shared by the detectors that count unit events in time buckets (rate_spike,
unusual_actor): which kinds count, how wide a bucket is, and the span a format's events cover.
"""

from __future__ import annotations

import datetime as dt

import duckdb

from ..store import define_message_copies, shared_once

UNIT_KINDS = ("request", "message", "room_post", "step", "llm_call", "trigger", "session_start",
              "tool_call")
NICE_WIDTHS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600,
                 43200, 86400)
EPOCH = dt.datetime(1970, 1, 1)

SPAN_SQL = """
SELECT format, count(*) AS n, min(epoch_ms(ts)) AS lo,
       quantile_disc(epoch_ms(ts), 0.01) AS q1, quantile_disc(epoch_ms(ts), 0.99) AS q99
FROM events e WHERE list_contains($kinds, kind) AND ts IS NOT NULL {copies}
GROUP BY format ORDER BY format
"""


def format_spans(con: duckdb.DuckDBPyConnection, copies: str) -> list[tuple]:
    """SPAN_SQL's rows (format, events, first, 1st and 99th percentile times), worked out
    once for the detectors' lanes: rate_spike and unusual_actor both start from them."""
    return shared_once(con, "format spans " + copies, lambda: con.execute(
        SPAN_SQL.format(copies=copies), {"kinds": list(UNIT_KINDS)}).fetchall())


def skip_copies(con: duckdb.DuckDBPyConnection) -> str:
    """The SQL condition that counts a message both parties stored once (see
    store.define_message_copies); empty when no message was stored twice."""
    if not define_message_copies(con):
        return ""
    return "AND e.event_id NOT IN (SELECT event_id FROM _copies)"


def bucket_width_s(span_s: float, target: int) -> int:
    for w in NICE_WIDTHS_S:
        if span_s / w <= target:
            return w
    return NICE_WIDTHS_S[-1]

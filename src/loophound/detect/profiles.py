"""What detectors know of a log format, read from the format's own module (its `profile`).

Knowledge specific to one format (sven's `direction` key and hop-depth guard, LabTrust's
`proposal_hash`, bproxy's pacing and error codes) lives in `formats/<name>.py` as a
`FormatProfile`; a detector asks here for the profile of the format an event came from, and
a format that states nothing gets the neutral profile: only canonical columns are read.
"""

from __future__ import annotations

import duckdb

from ..db import sql_literal
from ..formats import FORMATS
from ..formats.base import FormatProfile

NEUTRAL = FormatProfile()


def profile(fmt: str | None) -> FormatProfile:
    """The profile of format `fmt` (neutral for a format that is not registered)."""
    known = FORMATS.get(fmt) if fmt is not None else None
    return known.profile if known is not None else NEUTRAL


def extra_key_sql(attr: str, alias: str = "") -> str:
    """SQL: the string under the `extra` key that each format's profile names in `attr`
    (e.g. `direction_key`), for the events of those formats; NULL for every other event."""
    col = f"{alias}." if alias else ""
    cases = []
    for name, fmt in FORMATS.items():
        key = getattr(fmt.profile, attr)
        if key:  # the LIKE skips, cheaply, the lines that do not have the key at all
            has_key, path = sql_literal(f'%"{key}"%'), sql_literal(f"$.{key}")
            cases.append(f"WHEN {col}format = {sql_literal(name)} AND {col}extra LIKE {has_key} "
                         f"THEN json_extract_string({col}extra, {path})")
    return f"CASE {' '.join(cases)} END" if cases else "CAST(NULL AS VARCHAR)"


def input_formats(con: duckdb.DuckDBPyConnection) -> dict[int, str]:
    """Input id (an event's `event_id >> 32`) → the format it was read as."""
    return dict(con.execute("SELECT input_id, format FROM inputs").fetchall())

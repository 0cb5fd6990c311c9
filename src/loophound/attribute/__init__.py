"""Attribute the log to findings: which events each finding claims, what they occupy and cost.

Every event belongs to at most one finding (the detector with the lowest rank explains it
best, then the more severe finding) or to the background; each finding also keeps its own
claimed totals, so a rate spike on top of a retry storm still says how big it was.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb

from ..detect import DETECTORS, Finding
from ..detect.base import severity_rank
from .costs import CostModel, define_cost_view, load_cost_model


@dataclass
class Totals:
    events: int
    lines: int
    bytes: int
    tokens: int
    cost_usd: float | None
    cost_status: dict[str, int] = field(default_factory=dict)
    unpriced_tokens: int = 0
    start: object = None
    end: object = None


@dataclass
class Attributed:
    finding: Finding
    events: int
    lines: int
    bytes: int
    tokens: int
    cost_usd: float | None
    cost_status: dict[str, int]
    unpriced_tokens: int
    evidence: list[dict]
    exclusive_events: int = 0
    exclusive_lines: int = 0
    exclusive_bytes: int = 0
    exclusive_cost_usd: float | None = None


UNIT_KINDS_ALL = ("request", "message", "room_post", "session_start", "step", "llm_call",
                  "repair_attempt", "record", "connection", "config", "trigger", "audit")


def attribute(con: duckdb.DuckDBPyConnection, findings: list[Finding],
              costs: CostModel | None = None) -> tuple[list[Attributed], Totals]:
    """Claim, price and measure. Leaves tables `claims` and `owner` in `con` for the report."""
    define_cost_view(con, costs or load_cost_model())
    con.execute("CREATE OR REPLACE TEMP TABLE claims (finding_id VARCHAR, event_id BIGINT, "
                "rank INTEGER, sev INTEGER)")
    for f in findings:
        rank = DETECTORS[f.detector].rank if f.detector in DETECTORS else 99
        con.execute(
            f"INSERT INTO claims SELECT DISTINCT {_lit(f.id)}, event_id, {rank}, "
            f"{severity_rank(f.severity)} FROM ({f.claim_sql})",
            f.claim_params or None,
        )
    con.execute("""CREATE OR REPLACE TEMP TABLE owner AS
        SELECT event_id, arg_min(finding_id, (rank, -sev, finding_id)) AS finding_id
        FROM claims GROUP BY event_id""")
    own = _measure(con, "claims")
    exclusive = _measure(con, "owner")
    out = []
    for f in findings:
        m = own.get(f.id, {})
        x = exclusive.get(f.id, {})
        units = _count_units(con, f)
        out.append(Attributed(
            f, units, m.get("lines", 0), m.get("bytes", 0), m.get("tokens", 0),
            m.get("cost"), m.get("status", {}), m.get("unpriced_tokens", 0),
            _evidence(con, f), _count_units(con, f, "owner"), x.get("lines", 0),
            x.get("bytes", 0), x.get("cost"),
        ))
    return out, totals(con)


def _lit(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _measure(con: duckdb.DuckDBPyConnection, table: str) -> dict[str, dict]:
    rows = con.execute(f"""
      SELECT c.finding_id, count(*) AS lines, sum(e.byte_length) AS bytes,
             sum(coalesce(ec.tokens, 0)) AS tokens, sum(ec.cost_usd) AS cost,
             sum(CASE WHEN ec.cost_status = 'unpriced' THEN ec.tokens ELSE 0 END) AS unpriced,
             list(ec.cost_status) FILTER (WHERE ec.cost_status IS NOT NULL) AS statuses
      FROM {table} c JOIN events e USING (event_id)
      LEFT JOIN event_costs ec USING (event_id)
      GROUP BY c.finding_id""").fetchall()
    out = {}
    for fid, lines, nbytes, tokens, cost, unpriced, statuses in rows:
        status: dict[str, int] = {}
        for s in statuses or []:
            status[s] = status.get(s, 0) + 1
        out[fid] = {"lines": lines, "bytes": int(nbytes or 0), "tokens": int(tokens or 0),
                    "cost": None if cost is None else float(cost), "status": status,
                    "unpriced_tokens": int(unpriced or 0)}
    return out


# A message both parties stored (sven keeps one copy per node) is one message: units are
# counted once per (kind, corr_id) for these kinds.
UNIT = ("CASE WHEN e.kind IN ('message', 'room_post') AND e.corr_id IS NOT NULL "
        "THEN e.kind || ':' || e.corr_id ELSE CAST(e.event_id AS VARCHAR) END")


def _count_units(con: duckdb.DuckDBPyConnection, f: Finding, table: str = "claims") -> int:
    return con.execute(
        f"SELECT count(DISTINCT {UNIT}) FROM {table} c JOIN events e USING (event_id) "
        "WHERE c.finding_id = ? AND list_contains(?, e.kind)",
        [f.id, list(f.unit_kinds)],
    ).fetchall()[0][0]


def _evidence(con: duckdb.DuckDBPyConnection, f: Finding) -> list[dict]:
    """The lines a reader should look at: the detector's own picks (e.g. the session.close the
    caller ignored), then the first and last claimed actions and a few between."""
    picked = [dict(e) for e in f.details.get("evidence", [])]
    rows = con.execute(
        """SELECT e.file, e.line FROM claims c JOIN events e USING (event_id)
           WHERE c.finding_id = ? AND list_contains(?, e.kind)
           ORDER BY e.ts NULLS LAST, e.file, e.line""",
        [f.id, list(f.unit_kinds)],
    ).fetchall()
    if rows:
        n = len(rows)
        idx = sorted({0, 1, 2, n // 2, n - 1} & set(range(n)))[: max(f.evidence_limit - len(picked), 2)]
        if n - 1 not in idx:
            idx[-1] = n - 1
        picked += [{"file": rows[i][0], "line": rows[i][1]} for i in idx]
    seen, out = set(), []
    for e in picked:
        k = (e["file"], e["line"])
        if k not in seen:
            seen.add(k)
            out.append(e)
    return out


def totals(con: duckdb.DuckDBPyConnection) -> Totals:
    row = con.execute(f"""
      SELECT count(DISTINCT {UNIT}) FILTER (WHERE list_contains($units, e.kind)), count(*),
             coalesce(sum(e.byte_length), 0), coalesce(sum(ec.tokens), 0), sum(ec.cost_usd),
             coalesce(sum(CASE WHEN ec.cost_status = 'unpriced' THEN ec.tokens END), 0),
             min(e.ts), max(e.ts)
      FROM events e LEFT JOIN event_costs ec USING (event_id)""",
                      {"units": list(UNIT_KINDS_ALL)}).fetchall()[0]
    status = dict(con.execute(
        "SELECT cost_status, count(*) FROM event_costs GROUP BY 1 ORDER BY 1").fetchall())
    return Totals(row[0], row[1], int(row[2]), int(row[3]),
                  None if row[4] is None else float(row[4]), status, int(row[5]), row[6], row[7])


__all__ = ["Attributed", "CostModel", "Totals", "attribute", "load_cost_model"]

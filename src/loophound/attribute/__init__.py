"""Attribute the log to findings: which events each finding claims, what they occupy and cost.

Every event belongs to at most one finding (the detector with the lowest rank explains it
best, then the more severe finding) or to the background; each finding also keeps its own
claimed totals, so a rate spike on top of a retry storm still says how big it was.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb

from ..db import sql_literal
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
    """Claim, price and measure. Leaves tables `claims`, `owner` and `claimed` in `con` for
    the report. Each claimed event is joined to its size and price once (`claimed`); every
    figure after that is an aggregate over that table, so a 1.2 M-event storm is one pass."""
    define_cost_view(con, costs or load_cost_model())
    con.execute("CREATE OR REPLACE TEMP TABLE claims (finding_id VARCHAR, event_id BIGINT, "
                "rank INTEGER, sev INTEGER, fidx INTEGER, prio BIGINT)")
    con.execute("CREATE OR REPLACE TEMP TABLE finding_units (fidx INTEGER, kind VARCHAR)")
    con.execute("CREATE OR REPLACE TEMP TABLE _findx (fidx INTEGER, finding_id VARCHAR)")
    # who explains an event best, as one integer: detector rank, then severity, then order
    order = sorted(range(len(findings)), key=lambda i: (
        DETECTORS[findings[i].detector].rank if findings[i].detector in DETECTORS else 99,
        -severity_rank(findings[i].severity), findings[i].id))
    for pos, i in enumerate(order):
        f = findings[i]
        rank = DETECTORS[f.detector].rank if f.detector in DETECTORS else 99
        con.execute(
            f"INSERT INTO claims SELECT DISTINCT {sql_literal(f.id)}, event_id, {rank}, "
            f"{severity_rank(f.severity)}, {i}, {pos} FROM ({f.claim_sql})",
            f.claim_params or None,
        ).fetchall()
        con.executemany("INSERT INTO finding_units VALUES (?, ?)", [(i, k) for k in f.unit_kinds])
        con.execute("INSERT INTO _findx VALUES (?, ?)", [i, f.id]).fetchall()
    con.execute("""CREATE OR REPLACE TEMP TABLE owner AS
        SELECT o.event_id, c.fidx, x.finding_id
        FROM (SELECT event_id, min(prio) AS prio FROM claims GROUP BY event_id) o
        JOIN (SELECT DISTINCT fidx, prio FROM claims) c USING (prio)
        JOIN _findx x USING (fidx)""")
    con.execute("""CREATE OR REPLACE TEMP TABLE claimed AS
        SELECT c.fidx, c.event_id, o.fidx = c.fidx AS owned, e.byte_length, e.ts,
               -- a unit is counted once: a second stored copy only when its first is not here
               u.kind IS NOT NULL AND (cp.canon IS NULL OR c2.event_id IS NULL) AS is_unit,
               u.kind IS NOT NULL AND (cp.canon IS NULL OR o2.event_id IS NULL) AS is_owned_unit,
               ec.tokens, ec.cost_usd, ec.cost_status
        FROM claims c
        JOIN events e USING (event_id)
        JOIN owner o USING (event_id)
        LEFT JOIN _copies cp USING (event_id)
        LEFT JOIN claims c2 ON c2.fidx = c.fidx AND c2.event_id = cp.canon
        LEFT JOIN owner o2 ON o2.fidx = c.fidx AND o2.event_id = cp.canon
        LEFT JOIN finding_units u ON u.fidx = c.fidx AND u.kind = e.kind
        LEFT JOIN event_costs ec USING (event_id)""")
    stats = {r[0]: r[1:] for r in con.execute("""
        SELECT fidx,
          count(*) FILTER (WHERE is_unit), count(*), sum(byte_length),
          sum(coalesce(tokens, 0)), sum(cost_usd),
          coalesce(sum(tokens) FILTER (WHERE cost_status = 'unpriced'), 0),
          count(*) FILTER (WHERE is_owned_unit AND owned), count(*) FILTER (WHERE owned),
          coalesce(sum(byte_length) FILTER (WHERE owned), 0), sum(cost_usd) FILTER (WHERE owned)
        FROM claimed GROUP BY fidx""").fetchall()}
    basis: dict[str, dict[str, int]] = {}
    for fid, status, n in con.execute(
            "SELECT fidx, cost_status, count(*) FROM claimed WHERE cost_status IS NOT NULL "
            "GROUP BY ALL ORDER BY ALL").fetchall():
        basis.setdefault(fid, {})[status] = n
    evidence = _evidence(con, findings)
    out = []
    for i, f in enumerate(findings):
        units, lines, nbytes, tokens, cost, unpriced, x_units, x_lines, x_bytes, x_cost = \
            stats.get(i, (0, 0, 0, 0, None, 0, 0, 0, 0, None))
        out.append(Attributed(
            f, units, lines, int(nbytes or 0), int(tokens or 0), _num(cost), basis.get(i, {}),
            int(unpriced), evidence.get(i, []), x_units, x_lines, int(x_bytes), _num(x_cost),
        ))
    return out, totals(con)


def _num(v) -> float | None:
    return None if v is None else float(v)


def _evidence(con: duckdb.DuckDBPyConnection, findings: list[Finding]) -> dict[int, list[dict]]:
    """The lines a reader should look at: the detector's own picks (e.g. the session.close the
    caller ignored), then the first claimed actions and the last."""
    ends = con.execute("""
        SELECT fidx, arg_min(event_id, (ts, event_id), 3), arg_max(event_id, (ts, event_id))
        FROM claimed WHERE is_unit GROUP BY fidx""").fetchall()
    wanted = sorted({e for _, first, last in ends for e in [*first, last]})
    where = dict(((r[0]), {"file": r[1], "line": r[2]}) for r in con.execute(
        "SELECT event_id, file, line FROM events WHERE list_contains(?, event_id)",
        [wanted]).fetchall()) if wanted else {}
    picks = {fidx: ([where[e] for e in first if e in where], where.get(last))
             for fidx, first, last in ends}
    out = {}
    for i, f in enumerate(findings):
        chosen = [dict(e) for e in f.details.get("evidence", [])]
        first, last = picks.get(i, ([], None))
        room = max(f.evidence_limit - len(chosen) - 1, 1)
        chosen += [{"file": p["file"], "line": p["line"]} for p in first[:room]]
        if last:
            chosen.append({"file": last["file"], "line": last["line"]})
        seen, unique = set(), []
        for e in chosen:
            key = (e["file"], e["line"])
            if key not in seen:
                seen.add(key)
                unique.append(e)
        out[i] = unique
    return out


def totals(con: duckdb.DuckDBPyConnection) -> Totals:
    row = con.execute("""
      SELECT count(*) FILTER (WHERE list_contains($units, e.kind))
               - (SELECT count(*) FROM _copies), count(*),
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

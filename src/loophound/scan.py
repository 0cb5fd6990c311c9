"""Run the detectors over a store, attribute the findings, keep them in the store.

This is the one place that strings detect → attribute → findings JSON together, so `scan`,
`investigate`, `watch` and the report all see the same findings for the same store.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa

from . import findings_json
from .attribute import UNIT_KINDS_ALL, Attributed, Totals, attribute
from .attribute.costs import CostModel, load_cost_model
from .db import sql_literal
from .detect import DETECTORS, run_detectors, settings
from .detect.base import SEVERITIES, param_docs
from .store import Store
from .watch import Tracked, previous_document, track


@dataclass
class ScanResult:
    document: dict  # the loophound.findings/v1 object
    attributed: list[Attributed]
    totals: Totals
    con: duckdb.DuckDBPyConnection  # views + claims/owner tables, for the report
    tracked: Tracked  # each finding's status against the previous scan, and the alerts


def inputs_of(con: duckdb.DuckDBPyConnection) -> list[dict]:
    rows = con.execute(
        "SELECT path, sha256, bytes, lines, format FROM inputs ORDER BY path").fetchall()
    return [{"path": p, "sha256": s, "bytes": b, "lines": n, "format": f}
            for p, s, b, n, f in rows]


def method(params: dict, costs: CostModel) -> dict:
    return {
        "detectors": {
            name: {f.name: getattr(params[name], f.name) for f in dataclasses.fields(params[name])}
            for name in sorted(params)
        },
        "cost_model": costs.describe(),
        "time_zone": "UTC",
        "simulated_clock_epoch": "2000-01-01T00:00:00Z (LabTrust t_s seconds are added to it)",
    }


def scan_store(store: Store, config_file: Path | None = None, overrides: list[str] = (),
               costs: CostModel | None = None, only: list[str] | None = None,
               alert_on: str = "high", lookback: dt.timedelta | None = None) -> ScanResult:
    """Detect and attribute over `store`; the store keeps the findings (the last scan's),
    each with its status against the scan before (new, growing, escalated, ongoing, ended).

    With `lookback` (scheduled scans), the detectors read only the events since the last
    scan's latest event minus `lookback`, and what they find continues the last scan's
    findings: the cost of a scan follows what is new, not the size of the store."""
    params = settings(config_file, overrides)
    costs = costs or load_cost_model()
    before_doc = previous_document(store)
    before = {f["id"]: f for f in before_doc["findings"]} if before_doc else {}
    since = None
    if lookback is not None and before_doc and before_doc["totals"].get("end"):
        since = _parse_iso(before_doc["totals"]["end"]) - lookback
        only = only or alerting_detectors(alert_on)
    con = store.connect(since)
    findings = run_detectors(con, params, only)
    attributed, totals = attribute(con, findings, costs, for_report=since is None)
    doc = findings_json.document(inputs_of(con), totals, attributed, method(params, costs))
    if since is not None:
        doc = continue_findings(con, before_doc, doc, since)
        doc["method"]["incremental"]["detectors_run"] = sorted(only or DETECTORS)
    tracked = track(doc, before, alert_on)
    if store.catalog.exists():
        save_findings(store, con, doc, tracked.statuses)
    return ScanResult(doc, attributed, totals, con, tracked)


def alerting_detectors(alert_on: str) -> list[str]:
    """Detectors that can report a finding at or above `alert_on`: a scheduled scan runs only
    these (unusual_actor stays at medium, and importing scikit-learn alone takes seconds)."""
    floor = SEVERITIES.index(alert_on) if alert_on in SEVERITIES else 0
    return [n for n, d in DETECTORS.items() if SEVERITIES.index(d.max_severity) >= floor]


def _parse_iso(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.rstrip("Z"))


def _same_loop(f: dict) -> tuple:
    return (f["detector"], tuple(f["actors"]), tuple(f["targets"]), tuple(f["sessions"]))


def continue_findings(con: duckdb.DuckDBPyConnection, before: dict, window: dict,
                      since: dt.datetime) -> dict:
    """The last scan's findings, continued by those found in the recent window: a window
    finding with the same detector and participants as one still active at `since` is that
    finding going on (same id, its start, its counts plus what is new); others are new.
    Titles and summaries keep the wording of the scan that found them; a full `scan` gives
    fresh ones."""
    merged = {f["id"]: dict(f) for f in before["findings"]}
    active = {}
    for f in before["findings"]:
        if f["end"] and _parse_iso(f["end"]) >= since:
            active[_same_loop(f)] = f
    fidx = dict(con.execute("SELECT finding_id, fidx FROM _findx").fetchall())
    for w in window["findings"]:
        prev = active.get(_same_loop(w))
        if prev is None:
            merged[w["id"]] = w
            continue
        seen = con.execute(
            """SELECT count(*) FILTER (WHERE is_unit), count(*), coalesce(sum(byte_length), 0),
                      coalesce(sum(tokens), 0), sum(cost_usd)
               FROM claimed WHERE fidx = ? AND ts <= ?""",
            [fidx[w["id"]], _parse_iso(prev["end"])]).fetchall()[0]
        m = merged[prev["id"]]
        for key, old in zip(("events", "lines", "bytes", "tokens"), seen[:4], strict=True):
            m[key] = prev[key] + w[key] - old
        if w["cost_usd"] is not None:
            m["cost_usd"] = round((prev["cost_usd"] or 0) + w["cost_usd"] - (seen[4] or 0), 6)
        m["end"] = max(prev["end"], w["end"])
        if ("low", "medium", "high", "critical").index(w["severity"]) > \
                ("low", "medium", "high", "critical").index(prev["severity"]):
            m["severity"] = w["severity"]
        m["evidence"] = prev["evidence"][:-1] + w["evidence"][-1:]
    doc = dict(window)
    doc["findings"] = sorted(merged.values(), key=findings_json.sort_key)
    doc["totals"] = _continued_totals(con, before["totals"])
    doc["method"] = dict(window["method"], incremental={
        "window_start": findings_json.iso(since),
        "note": "detectors read only recent events; figures of continuing findings are the "
                "previous scan's plus what is new"})
    return doc


def _continued_totals(con: duckdb.DuckDBPyConnection, before: dict) -> dict:
    """Whole-log totals: the last scan's, plus the events after its latest one."""
    end = _parse_iso(before["end"])
    units, lines, nbytes, tokens, cost, last = con.execute(
        """SELECT count(*) FILTER (WHERE list_contains($units, kind)), count(*),
                  coalesce(sum(byte_length), 0), coalesce(sum(tokens), 0), sum(cost_usd),
                  max(ts)
           FROM _event_facts WHERE ts > $end""",
        {"units": list(UNIT_KINDS_ALL), "end": end}).fetchall()[0]
    out = dict(before)
    out["events"] = before["events"] + units
    out["lines"] = before["lines"] + lines
    out["bytes"] = before["bytes"] + int(nbytes)
    out["tokens"] = before["tokens"] + int(tokens)
    if cost is not None:
        out["cost_usd"] = round((before["cost_usd"] or 0) + float(cost), 6)
    if last is not None:
        out["end"] = findings_json.iso(last)
    return out


def save_findings(store: Store, con: duckdb.DuckDBPyConnection, doc: dict,
                  statuses: dict[str, str]) -> None:
    """Findings and the events each claims become Parquet files, committed like a batch."""
    with store.writing():
        with store.catalog_connection(read_only=True) as cat:
            run_id = cat.execute("SELECT coalesce(max(run_id), 0) + 1 FROM findings_runs"
                                 ).fetchall()[0][0]
        (store.root / "findings").mkdir(exist_ok=True)
        f_rel = f"findings/findings-{run_id:06d}.parquet"
        e_rel = f"findings/finding-events-{run_id:06d}.parquet"
        rows = doc["findings"]
        table = pa.table({
            "id": [r["id"] for r in rows], "detector": [r["detector"] for r in rows],
            "severity": [r["severity"] for r in rows], "title": [r["title"] for r in rows],
            "summary": [r["summary"] for r in rows],
            "actors": pa.array([r["actors"] for r in rows], pa.list_(pa.string())),
            "targets": pa.array([r["targets"] for r in rows], pa.list_(pa.string())),
            "sessions": pa.array([r["sessions"] for r in rows], pa.list_(pa.string())),
            "start": [r["start"] for r in rows], "end": [r["end"] for r in rows],
            "events": pa.array([r["events"] for r in rows], pa.int64()),
            "lines": pa.array([r["lines"] for r in rows], pa.int64()),
            "bytes": pa.array([r["bytes"] for r in rows], pa.int64()),
            "tokens": pa.array([r["tokens"] for r in rows], pa.int64()),
            "cost_usd": pa.array([r["cost_usd"] for r in rows], pa.float64()),
            "status": pa.array([statuses.get(r["id"]) for r in rows], pa.string()),
            "json": [json.dumps(r, sort_keys=True) for r in rows],
        })
        con.register("_findings", table)
        con.execute(f"COPY _findings TO {sql_literal(str(store.root / f_rel))} (FORMAT parquet)")
        con.unregister("_findings")
        con.execute(f"COPY (SELECT finding_id, event_id FROM claims ORDER BY finding_id, "
                    f"event_id) TO {sql_literal(str(store.root / e_rel))} (FORMAT parquet)")
        now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        with store.catalog_connection() as cat:
            cat.execute("INSERT INTO findings_runs VALUES (?, ?, ?, ?, ?)",
                        [run_id, now, f_rel, e_rel, findings_json.dumps(doc)])
    from .findings_store import define_finding_views

    define_finding_views(con, store.committed_files())


def detector_docs() -> list[tuple[str, str, list[tuple[str, object, str]]]]:
    return [(d.name, d.description, param_docs(d.params)) for d in DETECTORS.values()]

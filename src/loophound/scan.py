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
from .attribute import Attributed, Totals, attribute
from .attribute.costs import CostModel, load_cost_model
from .detect import DETECTORS, run_detectors, settings
from .detect.base import param_docs
from .store import Store
from .watch import Tracked, previous_findings, track


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
               alert_on: str = "high") -> ScanResult:
    """Detect and attribute over `store`; the store keeps the findings (the last scan's),
    each with its status against the scan before (new, growing, escalated, ongoing, ended)."""
    params = settings(config_file, overrides)
    costs = costs or load_cost_model()
    before = previous_findings(store)
    con = store.connect()
    cache_events(con)
    findings = run_detectors(con, params, only)
    attributed, totals = attribute(con, findings, costs)
    doc = findings_json.document(inputs_of(con), totals, attributed, method(params, costs))
    tracked = track(doc, before, alert_on)
    if store.catalog.exists():
        save_findings(store, con, doc, tracked.statuses)
    return ScanResult(doc, attributed, totals, con, tracked)


# Detectors and attribution each read the events several times; decoding the Parquet files
# once into memory is cheaper when they fit (about 400 MB per million events).
CACHE_MAX_EVENTS = 3_000_000


def cache_events(con: duckdb.DuckDBPyConnection, limit: int = CACHE_MAX_EVENTS) -> bool:
    """Hold the events in memory for this connection's views, if there are few enough."""
    n = con.execute("SELECT count(*) FROM events").fetchall()[0][0]
    if not n or n > limit:
        return False
    con.execute("CREATE OR REPLACE TEMP TABLE _events_in_memory AS SELECT * FROM events")
    con.execute("CREATE OR REPLACE TEMP VIEW events AS SELECT * FROM _events_in_memory")
    return True


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
        target = str(store.root / f_rel).replace("'", "''")
        con.execute(f"COPY _findings TO '{target}' (FORMAT parquet)")
        con.unregister("_findings")
        target = str(store.root / e_rel).replace("'", "''")
        con.execute(f"COPY (SELECT finding_id, event_id FROM claims ORDER BY finding_id, "
                    f"event_id) TO '{target}' (FORMAT parquet)")
        now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        with store.catalog_connection() as cat:
            cat.execute("INSERT INTO findings_runs VALUES (?, ?, ?, ?, ?)",
                        [run_id, now, f_rel, e_rel, findings_json.dumps(doc)])
    from .findings_store import define_finding_views

    define_finding_views(con, store.committed_files())


def detector_docs() -> list[tuple[str, str, list[tuple[str, object, str]]]]:
    return [(d.name, d.description, param_docs(d.params)) for d in DETECTORS.values()]

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

from . import db, findings_json
from .attribute import Attributed, Totals, attribute
from .attribute.costs import CostModel, load_cost_model
from .detect import DETECTORS, run_detectors, settings
from .detect.base import SEVERITIES, param_docs
from .store import ADDED, Store
from .watch import Tracked, previous_document, track

MAX_ADDED = 32  # a scheduled scan's claim files merged into one every this many scans


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
    goes_on = None
    if since is not None:
        goes_on = continuing(findings, before_doc, since)
        _mark_unseen(con, store)
    attributed, totals = attribute(con, findings, costs, for_report=since is None,
                                   continuing=goes_on)
    doc = findings_json.document(inputs_of(con), totals, attributed, method(params, costs))
    if since is not None:
        for i, prev_id in goes_on.items():  # its events are claimed under the id it goes on
            con.execute("UPDATE _findx SET finding_id = ? WHERE fidx = ?", [prev_id, i])
        doc = continue_findings(before_doc, doc, {findings[i].id: p for i, p in goes_on.items()},
                                since)
        doc["method"]["incremental"]["detectors_run"] = sorted(only or DETECTORS)
    tracked = track(doc, before, alert_on)
    if store.catalog.exists():
        save_findings(store, con, doc, tracked.statuses)
    return ScanResult(doc, attributed, totals, con, tracked)


def _mark_unseen(con: duckdb.DuckDBPyConnection, store: Store) -> None:
    """`_upto(input_id, upto)`: per input, the first event id the last scan had not seen,
    which attribution counts from for the findings that go on."""
    marks = store.seen_by_last_scan()
    db.temp_table(con, "_upto", {"input_id": ("INTEGER", [m[0] for m in marks]),
                                 "upto": ("BIGINT", [m[1] for m in marks])})


def alerting_detectors(alert_on: str) -> list[str]:
    """Detectors that can report a finding at or above `alert_on`: a scheduled scan runs only
    these (unusual_actor stays at medium, and importing scikit-learn alone takes seconds)."""
    floor = SEVERITIES.index(alert_on) if alert_on in SEVERITIES else 0
    return [n for n, d in DETECTORS.items() if SEVERITIES.index(d.max_severity) >= floor]


def _parse_iso(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.rstrip("Z"))


def _same_loop(detector: str, actors, targets, sessions) -> tuple:
    return (detector, *(tuple(sorted(set(x))) for x in (actors, targets, sessions)))


def continuing(findings: list, before: dict, since: dt.datetime) -> dict[int, str]:
    """Which of the window's findings go on from one of the last scan's, still active at
    `since` (same detector, same participants): index → the id they go on under."""
    active = {_same_loop(f["detector"], f["actors"], f["targets"], f["sessions"]): f["id"]
              for f in before["findings"] if f["end"] and _parse_iso(f["end"]) >= since}
    out = {}
    for i, f in enumerate(findings):
        prev = active.get(_same_loop(f.detector, f.actors, f.targets, f.sessions))
        if prev is not None:
            out[i] = prev
    return out


# figures that add up across scans: a continuing finding's, and the whole log's totals
_SUMMED = ("events", "lines", "bytes", "tokens", "unpriced_tokens")


def _plus(before: dict, new: dict) -> dict:
    """`before` with `new`'s figures added: counts, cost (None while nothing is priced) and
    the events per cost basis."""
    out = dict(before)
    for key in _SUMMED:
        out[key] = before[key] + new[key]
    out["cost_usd"] = _add_cost(before["cost_usd"], new["cost_usd"])
    out["cost_basis"] = {k: before["cost_basis"].get(k, 0) + new["cost_basis"].get(k, 0)
                         for k in sorted(before["cost_basis"].keys() | new["cost_basis"].keys())}
    return out


def continue_findings(before: dict, window: dict, goes_on: dict[str, str],
                      since: dt.datetime) -> dict:
    """The last scan's findings, continued by those found in the recent window: a window
    finding that goes on from one of the last scan's (`goes_on`: its id → that one's) keeps
    that id and start and adds its figures, which count only what the last scan had not
    seen; others are new. Titles and summaries keep the wording of the scan that found
    them; a full `scan` gives fresh ones."""
    merged = {f["id"]: dict(f) for f in before["findings"]}
    for w in window["findings"]:
        if w["id"] not in goes_on:
            merged[w["id"]] = w
            continue
        prev = merged[goes_on[w["id"]]]
        m = merged[prev["id"]] = _plus(prev, w)
        share, more = prev["attributed"], w["attributed"]
        m["attributed"] = {k: _add_cost(share[k], more[k]) if k == "cost_usd" else share[k] + more[k]
                           for k in share}
        m["end"] = max(prev["end"], w["end"])
        if m["start"]:
            m["duration_s"] = round((_parse_iso(m["end"]) - _parse_iso(m["start"])).total_seconds(),
                                    6)
        if SEVERITIES.index(w["severity"]) > SEVERITIES.index(prev["severity"]):
            m["severity"] = w["severity"]
        if w["lines"]:  # the last line it claims is new
            m["evidence"] = prev["evidence"][:-1] + w["evidence"][-1:]
    doc = dict(window)
    doc["findings"] = sorted(merged.values(), key=findings_json.sort_key)
    doc["totals"] = _continued_totals(before["totals"], window["totals"])
    doc["method"] = dict(window["method"], incremental={
        "window_start": findings_json.iso(since),
        "note": "detectors read only recent events; figures of continuing findings and the "
                "totals are the previous scan's plus the events it had not seen"})
    return doc


def _add_cost(a: float | None, b: float | None) -> float | None:
    return None if a is None and b is None else round((a or 0) + (b or 0), 6)


def _continued_totals(before: dict, new: dict) -> dict:
    """Whole-log totals: the last scan's, plus those of the events it had not seen."""
    out = _plus(before, new)
    out["start"] = min(filter(None, (before["start"], new["start"])), default=None)
    out["end"] = max(filter(None, (before["end"], new["end"])), default=None)
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
        claims = "SELECT finding_id, event_id FROM claims"
        # a scheduled scan's claims are what it added to the last scan's (store.since_full_scan);
        # every MAX_ADDED scans they are merged into one file, so reading them stays cheap
        scheduled, suffix = "incremental" in doc["method"], ".parquet"
        if scheduled:
            earlier = store.committed_files()["finding_events"]
            if len(earlier) < MAX_ADDED:
                suffix = ADDED
            else:
                claims = f"SELECT * FROM read_parquet({db.sql_list(earlier)}) UNION {claims}"
        e_rel = f"findings/finding-events-{run_id:06d}{suffix}"
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
        con.execute(f"COPY _findings TO {db.sql_literal(str(store.root / f_rel))} (FORMAT parquet)")
        con.unregister("_findings")
        con.execute(f"COPY ({claims} ORDER BY finding_id, event_id) "
                    f"TO {db.sql_literal(str(store.root / e_rel))} (FORMAT parquet)")
        now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        with store.catalog_connection() as cat:
            cat.execute("INSERT INTO findings_runs (run_id, started, findings_file, "
                        "finding_events_file, json, batches_seen) "
                        "VALUES (?, ?, ?, ?, ?, (SELECT max(batch_id) FROM batches))",
                        [run_id, now, f_rel, e_rel, findings_json.dumps(doc)])
    if not scheduled:  # the report reads them; a scheduled scan's window has no use for them
        from .findings_store import define_finding_views

        define_finding_views(con, store.committed_files())



def detector_docs() -> list[tuple[str, str, list[tuple[str, object, str]]]]:
    return [(d.name, d.description, param_docs(d.params)) for d in DETECTORS.values()]

"""Run the detectors over a store, attribute the findings, keep them in the store.

This is the one place that strings detect → attribute → findings JSON together, so `scan`,
`investigate`, `watch` and the report all see the same findings for the same store.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb

from . import coverage, db, findings_json
from .attribute import Attributed, Totals, attribute, claim_overlaps
from .attribute.costs import CostModel, load_cost_model
from .detect import DETECTORS, Finding, run_detectors, settings
from .detect.base import SEVERITIES, param_docs
from .incidents import DEFAULT_RULES
from .process import GC_PAUSED
from .runs import define_scan_views, save_in_folder, save_in_store
from .store import Store
from .watch import Tracked, previous_document, track

RULES = DEFAULT_RULES  # how findings are grouped into incidents (loophound.incidents)


@dataclass
class ScanResult:
    document: dict  # the loophound.findings/v1 object
    attributed: list[Attributed]
    totals: Totals
    con: duckdb.DuckDBPyConnection  # views + claims/owner tables, for the report
    tracked: Tracked  # each finding's status against the previous scan, and the alerts
    saved_in: Path | None = None  # where the run was saved, when not in the store

    @property
    def unit_kinds(self) -> dict[str, tuple[str, ...]]:
        """Finding id → the event kinds it counts as its actions (requests, not responses)."""
        return {a.finding.id: tuple(a.finding.unit_kinds) for a in self.attributed}


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
        "incidents": RULES.describe(),
    }


@GC_PAUSED.using()  # (loophound.process) a scan's garbage is the young kind
def scan_store(store: Store, config_file: Path | None = None, overrides: list[str] = (),
               costs: CostModel | None = None, only: list[str] | None = None,
               alert_on: str = "high", lookback: dt.timedelta | None = None,
               save: bool = True, save_to: Path | None = None,
               detect: Callable[..., list[Finding]] = run_detectors,
               for_report: bool = True) -> ScanResult:
    """Detect and attribute over `store`; the store keeps the findings (the last scan's),
    each with its status against the scan before (new, growing, escalated, ongoing, ended).

    A store that may not be written (a copy without its catalog, a read-only mount) is never
    changed: its run is saved in `save_to`, or a new temporary folder (`ScanResult.saved_in`
    says which). `save_to` also sends a writable store's run there; `save=False` keeps the
    run in memory only (a report made without a saved run).

    With `lookback` (scheduled scans), the detectors read only the events since the last
    scan's latest event minus `lookback`, and what they find continues the last scan's
    findings: the cost of a scan follows what is new, not the size of the store.

    `for_report=False` (`loophound scan`, which writes no report): attribution's per-event
    table leaves out who acted on what (actor, target, model, error), a fifth of attribution
    at ten times the incident; a report made from the result adds them back."""
    params = settings(config_file, overrides)
    costs = costs or load_cost_model()
    before_doc = previous_document(store)
    since = None
    if lookback is not None and before_doc and before_doc["totals"].get("end"):
        since = _parse_iso(before_doc["totals"]["end"]) - lookback
        # a log whose clock is behind the others' (another host, a replay) is looked at from
        # its own latest time: its new lines are never older than the window
        own = store.window_start(lookback)
        since = min(since, own) if own is not None else since
        only = only or alerting_detectors(alert_on)
    con = store.connect(since)
    db.leave_room_for_python(con)  # what the detectors hold in Python is the process's too
    # a full scan's coverage needs no finding: measured in a lane of the detectors' own
    measured: list = []
    beside = [lambda c: measured.append(coverage.measure(c))] if since is None else []
    findings = detect(con, params, only, beside=beside)
    goes_on = None
    if since is not None:
        goes_on = continuing(findings, before_doc, since)
        _mark_unseen(con, store)
    # a saved run keeps each event's owner and price, read from the facts' table
    attributed, totals = attribute(con, findings, costs, for_report=for_report and since is None,
                                   continuing=goes_on, keep_facts=save)
    doc = findings_json.document(inputs_of(con), totals, attributed, method(params, costs))
    claimed_in, shared = claim_overlaps(con)
    if since is None:  # what could be judged: a full scan's verdict (a window's is partial)
        found_in = {p for files in claimed_in.values() for p in files} | {
            e["file"] for f in doc["findings"] for e in f["evidence"]}
        doc["coverage"] = coverage.document(len(findings), measured[0],
                                            coverage.skipped_logs(con), found_in)
    if since is not None:
        for i, prev_id in goes_on.items():  # its events are claimed under the id it goes on
            con.execute("UPDATE _findx SET finding_id = ? WHERE fidx = ?", [prev_id, i])
        doc = continue_findings(before_doc, doc, {findings[i].id: p for i, p in goes_on.items()},
                                since)
        doc["method"]["incremental"]["detectors_run"] = sorted(only or DETECTORS)
    ids = [goes_on.get(i, a.finding.id) if goes_on else a.finding.id
           for i, a in enumerate(attributed)]  # a finding that goes on keeps its earlier id
    doc["incidents"] = group_incidents(doc, claimed_in, shared, ids,
                                       before_doc if since is not None else None)
    tracked = track(doc, before_doc, alert_on)
    result = ScanResult(doc, attributed, totals, con, tracked)
    if not save:  # the views describe this scan, not the store's last saved one
        define_scan_views(con, doc, tracked.statuses)
        return result
    if save_to is not None or store.read_only:
        if since is not None:
            raise ValueError("a scheduled scan keeps its findings in its store")
        result.saved_in = save_in_folder(save_to, con, doc, tracked.statuses, result.unit_kinds)
    elif store.catalog.exists():
        save_in_store(store, con, doc, tracked.statuses, result.unit_kinds)
    else:
        define_scan_views(con, doc, tracked.statuses)
    return result


def group_incidents(doc: dict, files: dict[int, list[str]], shared: dict[tuple[int, int], int],
                    ids: list[str], before: dict | None = None) -> list[dict]:
    """The document's incidents (`loophound.incidents`), from what attribution knows of the
    claims (`files` and `shared`, by finding index; `ids`: index → finding id). A scheduled
    scan (`before`: the last scan's document) knows the claims of its window only: a finding
    it did not see again is placed by its evidence and the files of its earlier incident, and
    an incident that continues one of the last scan's (a member in common) keeps its id."""
    own = {ids[i]: f for i, f in files.items()}
    earlier: dict[str, list[str]] = {}
    for inc in findings_json.incidents_in(before) if before else []:
        for m in inc["members"]:
            earlier[m] = inc.get("files") or []
    sources = {}
    for f in doc["findings"]:
        got = set(own.get(f["id"], [])) | set(earlier.get(f["id"], []))
        if f["id"] not in own:
            got |= {e["file"] for e in f["evidence"]}
        sources[f["id"]] = sorted(got)
    pairs = {(ids[a], ids[b]): n for (a, b), n in shared.items()}
    out = findings_json.incidents_of(doc["findings"], None, sources, pairs, RULES)
    if before is not None:
        _keep_ids(out, findings_json.incidents_in(before))
    return out


def _keep_ids(incidents: list[dict], before: list[dict]) -> None:
    """Each incident that continues one of `before` (a member in common: the one holding its
    primary, else the one it shares most members with) takes that one's id; no two take one."""
    was = {m: inc["id"] for inc in before for m in inc["members"]}
    taken: set[str] = set()
    for inc in incidents:  # most severe first: the worse loop keeps the id
        votes = Counter(was[m] for m in inc["members"] if m in was)
        first = was.get(inc["primary"])
        order = ([first] if first else []) + [i for i, _ in votes.most_common()]
        choice = next((i for i in order if i not in taken), None)
        if choice is not None:
            inc["id"] = choice
            taken.add(choice)


def _mark_unseen(con: duckdb.DuckDBPyConnection, store: Store) -> None:
    """`_upto(input_id, upto)`: per input, the first event id the last scan had not seen,
    which attribution counts from for the findings that go on."""
    marks = store.seen_by_last_scan()
    db.temp_table(con, "_upto", {"input_id": ("INTEGER", [m[0] for m in marks]),
                                 "upto": ("BIGINT", [m[1] for m in marks])})


def alerting_detectors(alert_on: str) -> list[str]:
    """Detectors that can report a finding at or above `alert_on`: a scheduled scan runs only
    these (unusual_actor stays at medium)."""
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
        m["attributed"] = _plus_owned(prev["attributed"], w["attributed"])
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


def _plus_owned(before: dict, new: dict) -> dict:
    """A finding's owned figures (`attributed`), the last scan's plus the new events'."""
    out = {}
    for k in sorted(before.keys() | new.keys()):
        a, b = before.get(k), new.get(k)
        if k == "cost_usd":
            out[k] = _add_cost(a, b)
        elif isinstance(a, dict) or isinstance(b, dict):
            a, b = a or {}, b or {}
            out[k] = {x: a.get(x, 0) + b.get(x, 0) for x in sorted(a.keys() | b.keys())}
        else:
            out[k] = (a or 0) + (b or 0)
    return out


def _add_cost(a: float | None, b: float | None) -> float | None:
    return None if a is None and b is None else round((a or 0) + (b or 0), 6)


def _continued_totals(before: dict, new: dict) -> dict:
    """Whole-log totals: the last scan's, plus those of the events it had not seen."""
    out = _plus(before, new)
    out["start"] = min(filter(None, (before["start"], new["start"])), default=None)
    out["end"] = max(filter(None, (before["end"], new["end"])), default=None)
    return out


def detector_docs() -> list[tuple[str, str, list[tuple[str, object, str]]]]:
    return [(d.name, d.description, param_docs(d.params)) for d in DETECTORS.values()]

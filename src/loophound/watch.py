"""Scheduled scans: follow findings and incidents across runs and alert once per runaway
loop, not once per run, nor once per detector that saw it.

A finding keeps its id while it grows (the id is what it is: detector, participants and where
it began), and an incident keeps its primary finding's, so comparing this scan's with the last
scan's says which are new, which still grow, which escalated and which ended. Alerts are per
incident: when it is new, when it escalated, and once when it ended.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field

from .findings_json import incidents_in
from .store import Store
from .vocabulary import SEVERITIES

QUIET_AFTER = dt.timedelta(minutes=10)


@dataclass
class Tracked:
    statuses: dict[str, str]  # finding id → new, growing, escalated, ongoing, ended
    alerts: list[dict] = field(default_factory=list)  # one per incident that is news
    incidents: dict[str, str] = field(default_factory=dict)  # incident id → its status


def previous_document(store: Store) -> dict | None:
    """The findings document of the last scan kept in the store."""
    if not store.catalog.exists():
        return None
    with store.catalog_connection(read_only=True) as cat:
        rows = cat.execute("SELECT json FROM findings_runs ORDER BY run_id DESC LIMIT 1").fetchall()
    if not rows or not rows[0][0]:
        return None
    return json.loads(rows[0][0])


def status(now: dict, before: dict | None, latest: dt.datetime | None) -> str:
    """A finding's or an incident's state against the last scan's: new, escalated (more
    severe), growing (more events), ended (quiet for QUIET_AFTER before the log's latest
    event) or ongoing."""
    if before is None:
        return "new"
    if SEVERITIES.index(now["severity"]) > SEVERITIES.index(before["severity"]):
        return "escalated"
    if now["events"] > before["events"]:
        return "growing"
    if _quiet(now, latest):
        return "ended"
    return "ongoing"


def _quiet(x: dict, latest: dt.datetime | None) -> bool:
    end = _parse(x["end"])
    return bool(latest and end and latest - end > QUIET_AFTER)


def track(doc: dict, before_doc: dict | None, alert_on: str = "high") -> Tracked:
    """Give each finding and each incident of `doc` a status against `before_doc` (the last
    scan's document); an alert for each incident at or above `alert_on` that is new, that
    escalated, or that ended since the last scan (`loophound.incident-alert/v1`): one loop
    found by three detectors is one alert. `doc` itself is left alone: the findings JSON stays
    the same for the same inputs, however often they were scanned."""
    latest = _parse(doc["totals"].get("end"))
    floor = SEVERITIES.index(alert_on) if alert_on in SEVERITIES else len(SEVERITIES)
    before = {f["id"]: f for f in before_doc["findings"]} if before_doc else {}
    out = Tracked({f["id"]: status(f, before.get(f["id"]), latest) for f in doc["findings"]})
    earlier = {i["id"]: i for i in incidents_in(before_doc)} if before_doc else {}
    was_latest = _parse(before_doc["totals"].get("end")) if before_doc else None
    for inc in doc.get("incidents") or []:
        old = earlier.get(inc["id"])
        now = out.incidents[inc["id"]] = status(inc, old, latest)
        news = now in ("new", "escalated") or (
            _quiet(inc, latest) and old is not None and not _quiet(old, was_latest))
        if news and SEVERITIES.index(inc["severity"]) >= floor:
            out.alerts.append(alert(inc, "ended" if now not in ("new", "escalated") else now,
                                    old))
    return out


ALERT_SCHEMA = "loophound.incident-alert/v1"


def alert(inc: dict, status: str, old: dict | None) -> dict:
    """One incident as an alert: what it is, how bad, what it cost, where to look."""
    return {
        "schema": ALERT_SCHEMA, "status": status, "id": inc["id"],
        "severity": inc["severity"], "previous_severity": old["severity"] if old else None,
        "title": inc["title"], "summary": inc["summary"], "detector": inc["detector"],
        "detectors": inc["detectors"], "primary": inc["primary"], "members": inc["members"],
        "also_seen_as": [s["text"] for s in inc["signals"]],
        "interruptions": inc["interruptions"], "start": inc["start"], "end": inc["end"],
        "events": inc["events"], "cost_usd": inc["cost_usd"], "actors": inc["actors"],
        "targets": inc["targets"], "sessions": inc["sessions"],
        "evidence": inc["evidence"][:3], "recommendation": inc["recommendation"],
    }


def post_webhook(url: str, payload: dict, timeout: float = 10.0) -> str | None:
    """POST one alert as JSON; return an error message instead of raising (an unreachable
    webhook must not stop the scan that found the loop). urllib is imported here, not with
    the module: every scan imports this one, few post (15-20 ms of each scan's start)."""
    import urllib.error
    import urllib.request

    body = json.dumps(payload, sort_keys=True).encode()
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"Content-Type": "application/json",
                                          "User-Agent": "loophound"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            if resp.status >= 300:
                return f"webhook {url} answered HTTP {resp.status}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return f"webhook {url} failed: {exc}"
    return None


def _parse(iso: str | None) -> dt.datetime | None:
    if not iso:
        return None
    return dt.datetime.fromisoformat(iso.rstrip("Z"))


def parse_every(text: str) -> float:
    """'30s', '5m', '1h' or a number of seconds → seconds."""
    units = {"s": 1, "m": 60, "h": 3600}
    text = text.strip().lower()
    try:
        if text and text[-1] in units:
            value = float(text[:-1]) * units[text[-1]]
        else:
            value = float(text)
    except ValueError:
        raise ValueError(f"--every {text!r}: expected a duration like 30s, 5m or 1h") from None
    if value <= 0:
        raise ValueError("--every must be positive")
    return value

"""Scheduled scans: follow findings across runs and alert once per runaway, not once per run.

A finding keeps its id while it grows (the id is what it is: detector, participants and where
it began), so comparing this scan's findings with the last scan's says which are new, which
still grow, which escalated and which ended. Only new and escalated ones are alerts.
"""

from __future__ import annotations

import datetime as dt
import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from .store import Store
from .vocabulary import SEVERITIES

QUIET_AFTER = dt.timedelta(minutes=10)


@dataclass
class Tracked:
    statuses: dict[str, str]  # finding id → new, growing, escalated, ongoing, ended
    alerts: list[dict] = field(default_factory=list)


def previous_document(store: Store) -> dict | None:
    """The findings document of the last scan kept in the store."""
    if not store.catalog.exists():
        return None
    with store.catalog_connection(read_only=True) as cat:
        rows = cat.execute("SELECT json FROM findings_runs ORDER BY run_id DESC LIMIT 1").fetchall()
    if not rows or not rows[0][0]:
        return None
    return json.loads(rows[0][0])


def track(doc: dict, before: dict[str, dict], alert_on: str = "high") -> Tracked:
    """Give each finding of `doc` a status against `before`; alerts for new or escalated
    findings at or above `alert_on`. `doc` itself is left alone: the findings JSON stays the
    same for the same inputs, however often they were scanned."""
    latest = _parse(doc["totals"].get("end"))
    floor = SEVERITIES.index(alert_on) if alert_on in SEVERITIES else len(SEVERITIES)
    out = Tracked({})
    for f in doc["findings"]:
        old = before.get(f["id"])
        end = _parse(f["end"])
        if old is None:
            status = "new"
        elif SEVERITIES.index(f["severity"]) > SEVERITIES.index(old["severity"]):
            status = "escalated"
        elif f["events"] > old["events"]:
            status = "growing"
        elif latest and end and latest - end > QUIET_AFTER:
            status = "ended"
        else:
            status = "ongoing"
        out.statuses[f["id"]] = status
        if status in ("new", "escalated") and SEVERITIES.index(f["severity"]) >= floor:
            out.alerts.append(alert(f, status, old))
    return out


def alert(f: dict, status: str, old: dict | None) -> dict:
    return {
        "schema": "loophound.alert/v1", "status": status, "id": f["id"],
        "detector": f["detector"], "severity": f["severity"],
        "previous_severity": old["severity"] if old else None,
        "title": f["title"], "summary": f["summary"], "start": f["start"], "end": f["end"],
        "events": f["events"], "cost_usd": f["cost_usd"], "actors": f["actors"],
        "sessions": f["sessions"], "evidence": f["evidence"][:3],
        "recommendation": f["recommendation"],
    }


def post_webhook(url: str, payload: dict, timeout: float = 10.0) -> str | None:
    """POST one alert as JSON; return an error message instead of raising (an unreachable
    webhook must not stop the scan that found the loop)."""
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

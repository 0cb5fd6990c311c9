"""The findings contract (`loophound.findings/v1`): the JSON other programs rely on.

Deterministic by construction: sorted keys and lists, rounded floats, no wall-clock time,
ids derived from what a finding is, so the same inputs give byte-identical output.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any

from ._version import __version__
from .attribute import Attributed, Totals
from .vocabulary import Severity

SCHEMA = "loophound.findings/v1"
# findings are listed most severe first: critical 0, high 1, medium 2, low 3
SEVERITY_ORDER = {s.value: len(Severity) - 1 - s.rank for s in Severity}


def iso(ts: Any) -> str | None:
    if ts is None:
        return None
    if isinstance(ts, dt.datetime):
        if ts.tzinfo is not None:
            ts = ts.astimezone(dt.UTC).replace(tzinfo=None)
        return ts.isoformat(timespec="milliseconds") + "Z"
    return str(ts)


def _clean(value: Any) -> Any:
    """JSON-safe, stable values: rounded floats, ISO times, sorted sets."""
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return None
        return round(value, 6)
    if isinstance(value, dt.datetime):
        return iso(value)
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(_clean(v) for v in value)
    if hasattr(value, "item"):  # numpy scalars
        return _clean(value.item())
    return value


def finding_dict(a: Attributed) -> dict:
    f = a.finding
    return _clean({
        "id": f.id,
        "detector": f.detector,
        "severity": f.severity,
        "title": f.title,
        "summary": f.summary,
        "actors": sorted(set(f.actors)),
        "targets": sorted(set(f.targets)),
        "sessions": sorted(set(f.sessions)),
        "start": iso(f.start),
        "end": iso(f.end),
        "duration_s": (f.end - f.start).total_seconds() if f.start and f.end else None,
        "events": a.events,
        "lines": a.lines,
        "bytes": a.bytes,
        "tokens": a.tokens,
        "cost_usd": a.cost_usd,
        "cost_basis": a.cost_status,
        "unpriced_tokens": a.unpriced_tokens,
        "attributed": {"events": a.exclusive_events, "lines": a.exclusive_lines,
                       "bytes": a.exclusive_bytes, "cost_usd": a.exclusive_cost_usd},
        "evidence": a.evidence,
        "recommendation": f.recommendation,
        "details": dict(f.details),
    })


def sort_key(d: dict) -> tuple:
    return (SEVERITY_ORDER.get(d["severity"], 9), d["start"] or "", d["detector"], d["id"])


def document(inputs: list[dict], totals: Totals, attributed: list[Attributed],
             method: dict) -> dict:
    findings = sorted((finding_dict(a) for a in attributed), key=sort_key)
    return _clean({
        "schema": SCHEMA,
        "tool_version": __version__,
        "inputs": sorted(inputs, key=lambda i: i["path"]),
        "totals": {"events": totals.events, "lines": totals.lines, "bytes": totals.bytes,
                   "tokens": totals.tokens, "cost_usd": totals.cost_usd,
                   "cost_basis": totals.cost_status, "unpriced_tokens": totals.unpriced_tokens,
                   "start": iso(totals.start), "end": iso(totals.end)},
        "method": method,
        "findings": findings,
    })


def dumps(doc: dict) -> str:
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"

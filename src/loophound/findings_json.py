"""The findings contract (`loophound.findings/v1`): the JSON other programs rely on.

Deterministic by construction: sorted keys and lists, rounded floats, no wall-clock time,
ids derived from what a finding is, so the same inputs give byte-identical output.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any

from . import incidents as grouping
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
                       "bytes": a.exclusive_bytes, "cost_usd": a.exclusive_cost_usd,
                       "events_by_kind": dict(sorted(a.exclusive_by_kind.items())),
                       "tokens": a.exclusive_tokens,
                       "unpriced_tokens": a.exclusive_unpriced_tokens,
                       "cost_basis": dict(sorted(a.exclusive_cost_status.items()))},
        "evidence": a.evidence,
        "recommendation": f.recommendation,
        "signal": f.signal or f.title,
        "details": dict(f.details),
    })


def sort_key(d: dict) -> tuple:
    return (SEVERITY_ORDER.get(d["severity"], 9), d["start"] or "", d["detector"], d["id"])


def document(inputs: list[dict], totals: Totals, attributed: list[Attributed],
             method: dict, incidents: list[dict] | None = None) -> dict:
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
        "incidents": incidents or [],
    })


# -- incidents: one per loop, over the findings that describe it --------------------------------


def detector_ranks() -> dict[str, int]:
    from .detect import DETECTORS

    return {name: d.rank for name, d in DETECTORS.items()}


def incidents_of(findings: list[dict], ranks: dict[str, int] | None = None,
                 sources: dict[str, list[str]] | None = None,
                 shared: dict[tuple[str, str], int] | None = None,
                 rules: grouping.Rules = grouping.DEFAULT_RULES) -> list[dict]:
    """The `incidents` of a document whose findings are `findings`: grouped by the rules of
    `loophound.incidents` (`ranks`: detector → rank, default the registered detectors';
    `sources`: finding id → the files its claims are in, default its evidence's; `shared`:
    how many events two findings both claim)."""
    ranks = detector_ranks() if ranks is None else ranks
    sources = sources or {}
    items = [grouping.item(f, ranks.get(f["detector"], 99), sources.get(f["id"])) for f in findings]
    by_id = {f["id"]: f for f in findings}
    return [incident_dict(i, by_id) for i in grouping.group(items, shared, rules)]


_ADDED = ("lines", "bytes", "tokens", "unpriced_tokens")


def incident_dict(inc: grouping.Incident, findings: dict[str, dict]) -> dict:
    """One incident as the document holds it. Its figures are those of the events its members
    own (each event has one owner, so incidents and the background add up to the whole log);
    its title says what looped and those figures (`incidents.title`), never a piece's count;
    its summary, evidence and recommendation are its primary finding's."""
    members = [findings[m] for m in inc.members]
    head = findings[inc.primary]
    owned = [m["attributed"] for m in members]
    by_kind: dict[str, int] = {}
    basis: dict[str, int] = {}
    for o in owned:
        for k, n in (o.get("events_by_kind") or {}).items():
            by_kind[k] = by_kind.get(k, 0) + n
        for k, n in (o.get("cost_basis") or {}).items():
            basis[k] = basis.get(k, 0) + n
    costs = [o["cost_usd"] for o in owned if o.get("cost_usd") is not None]
    start, end = iso(inc.start), iso(inc.end)
    events = sum(by_kind.values())
    duration_s = (inc.end - inc.start).total_seconds() if inc.start and inc.end else None
    return _clean({
        "id": inc.id,
        "severity": inc.severity,
        "highest_member_severity": inc.highest,
        "title": grouping.title(head, events, duration_s),
        "summary": head["summary"],
        "primary": inc.primary,
        "detector": head["detector"],
        "detectors": inc.detectors,
        "members": inc.members,
        "pieces": inc.pieces,
        "interruptions": inc.interruptions,
        "interrupted_s": inc.interrupted_s,
        "signals": [{"finding": s, "detector": findings[s]["detector"],
                     "severity": findings[s]["severity"],
                     "text": findings[s].get("signal") or findings[s]["title"]}
                    for s in inc.signals],
        "actors": sorted({a for m in members for a in m["actors"]}),
        "targets": sorted({t for m in members for t in m["targets"]}),
        "sessions": sorted({s for m in members for s in m["sessions"]}),
        "files": inc.sources,
        "start": start,
        "end": end,
        "duration_s": duration_s,
        "events": events,
        "events_by_kind": dict(sorted(by_kind.items())),
        **{k: sum(int(o.get(k) or 0) for o in owned) for k in _ADDED},
        "cost_usd": round(sum(costs), 6) if costs else None,
        "cost_basis": dict(sorted(basis.items())),
        "evidence": head["evidence"],
        "recommendation": head["recommendation"],
    })


def incidents_in(doc: dict) -> list[dict]:
    """A document's incidents; those of one a version without incidents wrote are grouped
    again from its findings (placed by their evidence lines)."""
    if "incidents" in doc:
        return doc["incidents"]
    return incidents_of(doc["findings"])


def runaway(incident: dict) -> bool:
    """Whether an incident is a runaway loop. A low one is an unusual pattern (an actor unlike
    the rest, a loop that ended with another answer): listed apart, never counted as a loop."""
    return incident["severity"] != Severity.LOW.value


COULD_NOT_JUDGE = "could not judge"


def verdict(doc: dict) -> tuple[str, str]:
    """What a scan says first, in the CLI and the report alike: (`findings`, `clean` or
    `could not judge`, the sentence that goes with it). A runaway loop found is a finding
    whatever else could not be judged (which is said too); no runaway loop is `clean` only
    when every log read could be judged and none was skipped."""
    incidents = incidents_in(doc)
    loops = [i for i in incidents if runaway(i)]
    unusual = len(incidents) - len(loops)
    aside = (f"; {unusual:,} unusual pattern{'s' if unusual != 1 else ''} (not runaway loops)"
             if unusual else "")
    blind = unjudged_reason(doc.get("coverage"))
    if loops:
        sev = ", ".join(f"{n} {s.value}" for s in reversed(Severity)
                        if (n := sum(1 for i in loops if i["severity"] == s.value)))
        return ("findings", f"{len(loops):,} runaway loop{'s' if len(loops) != 1 else ''} "
                            f"({sev}){aside}" + (f"; {blind}" if blind else ""))
    if blind:
        return (COULD_NOT_JUDGE, f"{blind}; no runaway loop in what could be judged{aside}")
    return ("clean", f"no runaway loop, and every log read could be judged{aside}")


def unjudged_reason(coverage: dict | None) -> str | None:
    """Why some of a full scan's logs could not be judged, in a phrase (None: all could; a
    scheduled scan's window states no coverage)."""
    if not coverage:
        return None
    inputs, skipped = coverage.get("inputs") or [], coverage.get("skipped") or []
    if not inputs and not skipped:
        return "no log was read"
    parts = []
    blind = [i for i in inputs if not i["judged"]]
    if blind:
        missing = sorted({m for i in blind for m in i.get("missing") or []})
        parts.append(f"{len(blind):,} of {len(inputs):,} logs could not be judged"
                     + (f" (missing {'; '.join(missing)})" if missing else ""))
    if skipped:
        parts.append(f"{len(skipped):,} file{'s' if len(skipped) != 1 else ''} not read")
    return "; ".join(parts) or None


def incident_sort_key(d: dict) -> tuple:
    return (SEVERITY_ORDER.get(d["severity"], 9), d["start"] or "", d["id"])


def dumps(doc: dict) -> str:
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"

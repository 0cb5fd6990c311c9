"""Replay a spec's guards over a scanned log and measure what each would have stopped: the
`loophound.guards/v1` document.

Each guard is replayed on its own (side by side, not stacked): what it refuses, what those
refusals would have prevented (their descendants), which findings' events that is and from
when, and what it refuses that no finding claims (false blocks). Figures come in two bounds:
`blocked` counts the refused events alone (a lower bound), `blocked_upper` adds everything
they would have caused (an upper bound: the log cannot say whether the caller would have
found another way). Nothing is extrapolated past the end of the log.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import duckdb
import numpy as np

from .._version import __version__
from ..findings_json import dumps, iso
from .log import Log, load
from .machines import machine, replay, replay_group
from .spec import TYPES, Guard, Spec, Sweep, preset_marks, show_value

SCHEMA = "loophound.guards/v1"
MAX_EXAMPLES = 5


def _iso_ms(ms: int | None) -> str | None:
    if ms is None:
        return None
    import datetime as dt

    return iso(dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=int(ms)))


def _money(x: float) -> float:
    return round(float(x), 6)


def figures(log: Log, positions: np.ndarray) -> dict:
    """Actions, lines, bytes, tokens and dollars of the events at `positions`."""
    if not len(positions):
        return {"events": 0, "lines": 0, "bytes": 0, "tokens": 0, "cost_usd": 0.0}
    lines = np.zeros(log.lines, dtype=bool)
    lines[log.line[positions]] = True
    return {"events": int(log.unit[positions].sum()), "lines": int(lines.sum()),
            "bytes": int(log.nbytes[positions].sum()),
            "tokens": int(log.tokens[positions].sum()),
            "cost_usd": _money(log.cost[positions].sum())}


def _finding_rows(log: Log, findings: list[dict], unit_kinds: dict[str, tuple[str, ...]],
                  gone: np.ndarray, blocked: np.ndarray, incident_of: dict[str, str]) -> list[dict]:
    rows = []
    for f in findings:
        cp = log.claims.get(f["id"], np.zeros(0, dtype=np.int64))
        kinds = log.kind.isin(unit_kinds.get(f["id"]) or ())
        units = cp[log.unit[cp] & kinds[cp]] if len(cp) else cp
        prevented = cp[gone[cp]] if len(cp) else cp
        first = int(prevented[0]) if len(prevented) else None
        before = cp if first is None else cp[cp < first]
        row = {
            "finding_id": f["id"], "detector": f["detector"], "severity": f["severity"],
            "title": f["title"],
            "events": int(len(units)),
            "blocked_events": int(gone[units].sum()) if len(units) else 0,
            "blocked_directly": int(blocked[units].sum()) if len(units) else 0,
            "first_block": _iso_ms(log.t[first]) if first is not None else None,
            "events_before_block": int((units < first).sum()) if first is not None else
            int(len(units)),
            "cost_usd": _money(log.cost[cp].sum()) if len(cp) else 0.0,
            "cost_before_block": _money(log.cost[before].sum()) if len(before) else 0.0,
        }
        row["share_blocked"] = round(row["blocked_events"] / row["events"], 6) \
            if row["events"] else None
        if f["id"] in incident_of:
            row["incident"] = incident_of[f["id"]]
        rows.append(row)
    return rows


def measure(log: Log, guard: Guard, findings: list[dict],
            unit_kinds: dict[str, tuple[str, ...]], incident_of: dict[str, str],
            healthy: int, per_finding: bool = True) -> dict:
    """Replay `guard` over `log`: its entry in the document."""
    out = replay_selection(log, guard)
    blocked = out[0]
    gone = log.closure(blocked)
    gone_pos = np.flatnonzero(gone)
    is_blocked = np.zeros(log.n, dtype=bool)
    is_blocked[blocked] = True
    false = blocked[~log.claimed[blocked]] if len(blocked) else blocked
    false_units = int(log.unit[false].sum()) if len(false) else 0
    entry = {
        "name": guard.name, "type": guard.type, "params": guard.describe(),
        "trips": out[1],
        "first_block": _iso_ms(log.t[blocked[0]]) if len(blocked) else None,
        "blocked": figures(log, blocked),
        "blocked_upper": figures(log, gone_pos),
        "false_blocks": int(len(false)),
        "false_block_share": round(false_units / healthy, 6) if healthy else None,
        "false_blocks_upper": int((gone & ~log.claimed & log.unit).sum()),
    }
    if guard.description:
        entry["description"] = guard.description
    if guard.preset:
        entry["preset"] = guard.preset
    if per_finding:
        entry["first_block_at"] = _located(log, blocked[:1])[0] if len(blocked) else None
        entry["false_block_examples"] = _located(log, false[:MAX_EXAMPLES])
        entry["incidents"] = _finding_rows(log, findings, unit_kinds, gone, is_blocked,
                                           incident_of)
    return entry


def replay_selection(log: Log, guard: Guard) -> tuple[np.ndarray, int]:
    """The positions `guard` refuses over `log` (in time order), and its trips. A guard whose
    keys are independent, none of whose refusals causes an event it judges, runs key by key
    and skips each stretch a key is refused (`replay_group`): a 17-hour storm costs a few
    decisions per minute, not one per request. Any other runs event by event, following
    descendants."""
    sel = log.select(guard)
    if not len(sel.pos):
        return np.zeros(0, dtype=np.int64), 0
    reach = log.reaches(sel.mask)
    m = machine(guard)
    if m.keyed and not reach[sel.pos].any():
        stretches: list = []
        trips = sum(replay_group(m, g, log.t[g], sel.event, stretches) for g in sel.groups())
        blocked = np.concatenate(stretches) if stretches else np.zeros(0, dtype=np.int64)
        return np.sort(blocked.astype(np.int64)), trips
    out = replay(sel.events(), guard, log.children, walk=reach.__getitem__)
    return np.array(out.blocked, dtype=np.int64), out.trips


def _located(log: Log, positions: np.ndarray) -> list[dict]:
    return [{"file": r["file"], "line": r["line"], "ts": _iso_ms(r["t"])}
            for r in log.where([int(p) for p in positions])]


def sweep(log: Log, spec: Spec, sw: Sweep, healthy: int) -> dict:
    """Replay one guard with one parameter over a range: saved cost against false blocks,
    the presets' values marked, and the setting with the best saving at the fewest false
    blocks recommended."""
    guard = next(g for g in spec.guards if g.name == sw.guard)
    p = TYPES[guard.type].param(sw.param)
    rows = []
    for value in sw.values:
        m = measure(log, guard.replace(sw.param, value), [], {}, {}, healthy, per_finding=False)
        rows.append({"value": show_value(p, value), "trips": m["trips"],
                     "blocked": m["blocked"], "blocked_upper": m["blocked_upper"],
                     "false_blocks": m["false_blocks"],
                     "saved_usd": m["blocked_upper"]["cost_usd"]})
    fewest = min(r["false_blocks"] for r in rows)
    current = guard.params.get(sw.param)

    def closeness(i: int) -> float:
        return abs(sw.values[i] - current) if current is not None else float(i)

    best = max((i for i, r in enumerate(rows) if r["false_blocks"] == fewest),
               key=lambda i: (rows[i]["saved_usd"], rows[i]["blocked_upper"]["events"],
                              -closeness(i)))
    lo, hi = sw.values[0], sw.values[-1]
    marks = [{"label": label, "value": show_value(p, v)}
             for label, v in preset_marks(guard.type, sw.param) if lo <= v <= hi]
    if current is not None:
        marks.append({"label": f"this spec: {guard.name}", "value": show_value(p, current)})
    r = rows[best]
    return {
        "guard": guard.name, "type": guard.type, "param": sw.param, "range": sw.text,
        "rows": rows, "marks": marks,
        "recommended": {
            "value": r["value"], "saved_usd": r["saved_usd"], "false_blocks": r["false_blocks"],
            "blocked_events": r["blocked_upper"]["events"],
            "reason": ("the largest saving with no false block" if fewest == 0 else
                       f"the largest saving at the fewest false blocks ({fewest}): every "
                       "setting in the range blocks some healthy traffic"),
        },
    }


def run(con: duckdb.DuckDBPyConnection, document: dict, unit_kinds: dict[str, tuple[str, ...]],
        spec: Spec, sw: Sweep | None = None, run_number: int | None = None,
        progress: Callable[[str], Any] | None = None) -> dict:
    """The `loophound.guards/v1` document of `spec` over the scan whose views `con` holds."""
    log = load(con, list(spec.guards), spec.reply_within_s)
    healthy = int((log.unit & ~log.claimed).sum())
    incident_of = {m: inc["id"] for inc in document.get("incidents") or []
                   for m in inc.get("members", [])}
    findings = document["findings"]
    guards = []
    for g in spec.guards:
        if progress:
            progress(g.name)
        guards.append(measure(log, g, findings, unit_kinds, incident_of, healthy))
    timed = log.t[log.t != np.iinfo(np.int64).min]
    claimed_units = log.unit & log.claimed
    doc = {
        "schema": SCHEMA, "tool_version": __version__, "spec": spec.source,
        "presets": dict(sorted(spec.descriptions.items())),
        "log": {
            "run": run_number, "findings": len(findings), "events": int(log.unit.sum()),
            "lines": figures(log, np.arange(log.n))["lines"], "healthy_events": healthy,
            "loop_events": int(claimed_units.sum()),
            "cost_usd": _money(log.cost.sum()),
            "loop_cost_usd": _money(log.cost[log.claimed].sum()),
            "start": _iso_ms(timed.min()) if len(timed) else None,
            "end": _iso_ms(timed.max()) if len(timed) else None,
        },
        "replay": {
            "order": "event time, ties by file and line; events without a time are not judged",
            "reply_within_s": spec.reply_within_s,
            "note": "each guard replayed alone; blocked: the refused events (lower bound); "
                    "blocked_upper: with everything they would have caused (upper bound); "
                    "nothing extrapolated past the end of the log",
        },
        "guards": guards,
        "sweep": sweep(log, spec, sw, healthy) if sw is not None else None,
    }
    con.unregister("_guard_ev")
    return doc


__all__ = ["SCHEMA", "dumps", "figures", "measure", "run", "sweep"]

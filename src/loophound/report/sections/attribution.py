"""Who owns the log: each runaway loop's share (every event counted for one incident), the
background, and the total."""

from __future__ import annotations

from collections import Counter

from .. import fmt
from ..html import Charts
from ..model import Figures, Report
from ._util import incident_link, section, table

HEADERS = [("Runaway loop", "l"), ("Severity", "l"), ("Events", "r"), ("Share", "r"),
           ("Log bytes", "r"), ("Share", "r"), ("Duration", "r"), ("Rate", "r"),
           ("Tokens", "r"), ("Cost", "r"), ("Burn $/h", "r"), ("A day of it", "r")]


def _row(name: str, sev: str, x: Figures, own: Figures | None) -> list[str]:
    timing = own or x
    return [name, sev, fmt.count(x.events), fmt.pct(x.events_share), fmt.size(x.bytes),
            fmt.pct(x.bytes_share), fmt.esc(fmt.duration(timing.duration_s)),
            fmt.esc(fmt.rate(timing.rate_per_s)), fmt.count(x.tokens),
            fmt.esc(fmt.money(x.cost_usd, "–" if not x.tokens else "unpriced")),
            fmt.esc(fmt.money(timing.usd_per_hour, "–")) if own else "",
            fmt.esc(fmt.money(timing.usd_per_day, "–")) if own else ""]


def _where(p) -> str:
    """The file the loop's primary finding points at (its name's end, where logs differ) and
    when the loop began."""
    files = list(dict.fromkeys(e.file for e in p.evidence)) or p.incident.get("files") or []
    out = ""
    if files:
        tail = files[0] if len(files[0]) <= 70 else "…" + files[0][-69:]
        out += (f' <span class="hint">in</span> <code title="{fmt.esc(files[0])}">'
                f"{fmt.esc(tail)}</code>")
    return out + f' <span class="hint">from {fmt.esc(fmt.when(p.incident["start"]))}</span>'


def render(r: Report, charts: Charts) -> str:
    rows = []
    # loops over one session (a log and its trimmed copy) read alike: each says where, when
    sessions = Counter(s for p in r.panels for s in set(p.incident.get("sessions") or []))
    for p in r.panels:
        title = fmt.rich(fmt.short(p.incident["title"], 110))
        name = f"{incident_link(p.label)} {title}"
        if any(sessions[s] > 1 for s in p.incident.get("sessions") or []):
            name += _where(p)
        seen = list(dict.fromkeys(s["detector"] for s in p.signals))
        if seen:
            name += f' <span class="hint">(also seen as {fmt.esc(", ".join(seen))})</span>'
        if p.own.lines == 0 and p.overlaps:
            name += (' <span class="hint">(its events are counted in '
                     + ", ".join(incident_link(label) for label, _ in p.overlaps) + ")</span>")
        level = fmt.esc(p.incident["severity"])
        sev = f'<span class="sev sev-{level}">{level}</span>'
        rows.append(_row(name, sev, p.own, p.own))
    if r.rest is not None:
        rows.append(_row(f"<em>{r.panels_omitted:,} more runaway loops</em> (in the findings JSON)",
                         "", r.rest, None))
    rows.append(_row("<em>background</em> (no loop)", "", r.background, None))
    t = r.totals
    rows.append(["<strong>whole log</strong>", "", fmt.count(t.events), "100%", fmt.size(r.log_bytes),
                 "100%", fmt.esc(fmt.duration(t.duration_s if r.time_ranges <= 1 else r.active_s)),
                 "", fmt.count(t.tokens), fmt.esc(fmt.money(t.cost_usd)), "", ""])
    intro = ("One row per runaway loop. Each log line is counted once: for the loop whose "
             "finding explains it best (the more specific detector, then the more severe "
             "finding) or for the background, so events, lines, bytes and cost add up to the "
             "whole log. Events are units of work (requests, messages, sessions, steps; not "
             "responses). Duration, rate and burn rate are the loop's own. “A day of it” is what "
             "the loop would have cost had it run on for 24 hours at the same pace.")
    if r.panels_omitted:
        intro += f" {r.panels_omitted} lower-ranked loops are in the findings JSON only."
    return section("attribution", "Attribution", table(HEADERS, rows, "numbers"), fmt.esc(intro))

"""One panel per incident (a runaway loop): its primary finding's story and numbers, the other
findings that saw the same loop ("also seen as"), pictures, the evidence verbatim, what to do.

The pictures are the panel's extras, registered for the shape its detector declares
(`model.SHAPE_EXTRAS`); each extra has a renderer here (`RENDERERS`), and one without a
renderer is an error."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...findings_json import runaway
from .. import charts as ch
from .. import fmt, pictures
from ..html import Charts
from ..model import EXTRAS, MissingRenderer, Panel, Report
from ._util import code, incident_link, section


def _figures(p: Panel) -> str:
    o = p.own
    basis = ", ".join(f"{n:,} {k}" for k, n in sorted(o.cost_basis.items()))
    cost = fmt.money(o.cost_usd, "unpriced" if o.tokens else "–")
    if o.unpriced_tokens:
        cost += f" + {o.unpriced_tokens:,} unpriced tokens"
    kinds = ", ".join(f"{n:,} {noun}" for noun, n in p.kinds) if len(p.kinds) > 1 else ""
    items = [
        (p.noun.capitalize(), f"{o.events:,}",
         f"{fmt.pct(o.events_share)} of all events" + (f": {kinds}" if kinds else "")),
        ("Log lines", f"{o.lines:,}", f"{fmt.size(o.bytes)}, {fmt.pct(o.bytes_share)} of the log"),
        ("Duration", fmt.duration(o.duration_s), f"{fmt.when(o.start)} → {fmt.when(o.end)}"),
        ("Rate", fmt.rate(o.rate_per_s), f"{p.noun} while it ran"),
        ("Tokens", f"{o.tokens:,}", ""),
        ("Cost", cost, f"basis: {basis}" if basis else "no cost data"),
        ("Burn rate", fmt.money(o.usd_per_hour, "–") + ("/h" if o.usd_per_hour is not None else ""),
         "cost per hour while it ran"),
        ("A day of it", fmt.money(o.usd_per_day, "–"),
         f"{o.rate_per_s * 86400:,.0f} {p.noun}" if o.rate_per_s else ""),
    ]
    return '<dl class="figures">' + "".join(
        f'<div><dt>{fmt.esc(k)}</dt><dd>{fmt.esc(v)}</dd><dd class="sub">{fmt.esc(s)}</dd></div>'
        for k, v, s in items) + "</dl>"


def _parties(x: dict) -> str:
    rows = []
    for key, name in (("actors", "Who"), ("targets", "Acting on"), ("sessions", "Sessions"),
                      ("files", "Files")):
        vals = x.get(key) or []
        if vals:
            shown = " ".join(code(v, 90 if key == "files" else 60) for v in vals[:8])
            more = f" and {len(vals) - 8} more" if len(vals) > 8 else ""
            rows.append(f"<div><span class=\"k\">{name}</span> {shown}{fmt.esc(more)}</div>")
    return f'<div class="parties">{"".join(rows)}</div>' if rows else ""


def _signals(p: Panel) -> str:
    """The other findings of the loop: the detectors that corroborate it, and its pieces."""
    inc = p.incident
    parts = []
    if p.signals:
        items = "".join(
            f'<li><span class="sev sev-{fmt.esc(s["severity"])}">{fmt.esc(s["severity"])}</span> '
            f'{fmt.rich(s["text"])} <span class="hint">({fmt.esc(s["detector"])}, finding '
            f'<code>{fmt.esc(s["finding"])}</code>)</span></li>' for s in p.signals)
        parts.append(f'<div class="signals"><strong>Also seen as:</strong><ul>{items}</ul></div>')
    if inc.get("interruptions"):
        n = inc["interruptions"]
        parts.append(f'<p class="pieces">The loop was interrupted {n:,} time{"s" if n != 1 else ""} '
                     f"({fmt.esc(fmt.duration(inc.get('interrupted_s')))} in all) and went on: "
                     f"{len(inc['pieces']):,} runs of the same "
                     f"<code>{fmt.esc(inc['detector'])}</code> finding, one loop.</p>")
    if inc["severity"] != inc.get("highest_member_severity", inc["severity"]):
        parts.append(f'<p class="pieces">Severity raised from '
                     f'{fmt.esc(inc["highest_member_severity"])}: {len(inc["detectors"])} '
                     "different detectors found this loop.</p>")
    return "".join(parts)


def _evidence(p: Panel) -> str:
    items = []
    for e in p.evidence:
        loc = f'<span class="loc">{fmt.esc(e.file)}:{e.line}</span>'
        note = f' <span class="why">{fmt.rich(e.note)}</span>' if e.note else ""
        if e.text is not None:
            cut = (f'<div class="cut">first {len(e.text.encode()):,} of {e.byte_length:,} bytes '
                   "shown</div>" if e.truncated else "")
            body = f'<pre class="line">{fmt.esc(e.text)}</pre>{cut}'
        else:
            body = f'<div class="missing">{fmt.esc(e.problem or "not quoted")}</div>'
        items.append(f"<li>{loc}{note}{body}</li>")
    if not items:
        return ""
    return ('<h4>Evidence <span class="hint">(lines quoted verbatim from the input files)</span>'
            f'</h4><ol class="evidence">{"".join(items)}</ol>')


def _details(p: Panel) -> str:
    if not p.details:
        return ""
    rows = "".join(f"<tr><th>{fmt.esc(k)}</th><td>{fmt.esc(v)}</td></tr>" for k, v in p.details)
    return (f'<details class="det"><summary>What the detector measured ({fmt.esc(p.finding["detector"])})'
            f'</summary><table class="kv">{rows}</table></details>')


# -- the extras' renderers: one per extra a shape may name (model.SHAPE_EXTRAS) ---------------


def _rate(p: Panel, data: Any, charts: Charts) -> str:
    return charts.add(f"incident-{p.label}-rate", ch.rate(p, data),
                      f"{fmt.esc(p.label)}’s {fmt.esc(p.noun)} (colour) against everything else "
                      "in the same files (grey)")


def _sequence(p: Panel, data: Any, charts: Charts) -> str:
    if data is None:
        return ""
    return ('<h4>Sequence <span class="hint">(the first messages)</span></h4>'
            + pictures.sequence(data, p.label))


def _graph(p: Panel, data: Any, charts: Charts) -> str:
    if data is None:
        return ""
    return "<h4>Who triggered whom</h4>" + pictures.graph(data, p.label)


RENDERERS: dict[str, Callable[[Panel, Any, Charts], str]] = {
    "rate": _rate, "sequence": _sequence, "graph": _graph,
}


def render_extra(p: Panel, name: str, data: Any, charts: Charts) -> str:
    try:
        renderer = RENDERERS[name]
    except KeyError:
        raise MissingRenderer(f"panel extra {name!r} has no renderer in "
                              "loophound.report.sections.findings.RENDERERS") from None
    return renderer(p, data, charts)


def panel(p: Panel, charts: Charts) -> str:
    inc, f = p.incident, p.finding
    sev = fmt.esc(inc["severity"])
    overlap = ""
    if p.overlaps:
        others = ", ".join(f"{incident_link(label)} ({n:,} lines)" for label, n in p.overlaps)
        overlap = (f'<p class="overlap">Some events its findings claim belong to {others}; '
                   "they are counted there in the attribution.</p>")
    extras = "".join(render_extra(p, name, data, charts) for name, data in p.extras)
    return f"""<article class="finding incident sev-{sev}" id="incident-{fmt.esc(p.label)}">
<h3><span class="sev sev-{sev}">{sev}</span> <span class="label">{fmt.esc(p.label)}</span>
{fmt.rich(inc["title"])}</h3>
<p class="summary">{fmt.rich(inc["summary"])}</p>
{_signals(p)}
{_parties(inc)}
{_figures(p)}
{overlap}
{extras}
{_evidence(p)}
<h4>Recommendation</h4>
<p class="recommendation">{fmt.rich(inc["recommendation"])}</p>
{_details(p)}
<p class="fid">incident id <code>{fmt.esc(inc["id"])}</code> · primary finding
<code>{fmt.esc(f["id"])}</code> · detector <code>{fmt.esc(f["detector"])}</code></p>
</article>
"""


def _unusual(panels: list[Panel]) -> str:
    """Low incidents: unusual patterns, not runaway loops, a line each (a panel each took
    half the page of a 235 MB log's report for six healthy sessions)."""
    if not panels:
        return ""
    rows = "".join(
        f'<li id="incident-{fmt.esc(p.label)}"><span class="label">{fmt.esc(p.label)}</span> '
        f"{fmt.rich(p.incident['title'])} <span class=\"hint\">"
        f"({fmt.esc(', '.join(p.incident['detectors']))}; {fmt.esc(fmt.when(p.incident['start']))})"
        "</span></li>" for p in panels)
    return ('<h3 id="unusual">Unusual, not runaway loops</h3><p class="note">Low findings: '
            "patterns unlike the rest of the log, or loops that ended with another answer. "
            "Worth a look; not counted as runaway loops.</p>"
            f'<ul class="unusual">{rows}</ul>')


def render(r: Report, charts: Charts) -> str:
    loops = [p for p in r.panels if runaway(p.incident)]
    unusual = _unusual([p for p in r.panels if not runaway(p.incident)])
    if not loops:
        return section("incidents", "Runaway loops",
                       "<p>No runaway loop: nothing in these logs looks like one with the "
                       "parameters below.</p>" + unusual)
    body = "".join(panel(p, charts) for p in loops)
    if r.panels_omitted:
        body += (f'<p class="note">{r.panels_omitted} more incidents are not shown here; '
                 "they are in the findings JSON (<code>loophound scan --json</code>).</p>")
    return section("incidents", "Runaway loops", body + unusual,
                   "One panel per loop, most severe first. A loop is often seen by several "
                   "detectors: the most specific one tells its story, the others are listed as "
                   "“also seen as”. Each line of evidence is quoted from the input file at the "
                   "line the detector points to.")


__all__ = ["EXTRAS", "RENDERERS", "panel", "render"]

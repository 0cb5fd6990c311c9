"""One panel per finding: the numbers, a picture, the evidence verbatim, what to do."""

from __future__ import annotations

from .. import charts as ch
from .. import fmt, pictures
from ..html import Charts
from ..model import Panel, Report
from ._util import code, finding_link, section


def _figures(p: Panel) -> str:
    o, x = p.own, p.exclusive
    basis = ", ".join(f"{n:,} {k}" for k, n in sorted(o.cost_basis.items()))
    cost = fmt.money(o.cost_usd, "unpriced" if o.tokens else "–")
    if o.unpriced_tokens:
        cost += f" + {o.unpriced_tokens:,} unpriced tokens"
    items = [
        (p.noun.capitalize(), f"{o.events:,}", f"{fmt.pct(o.events_share)} of all events"),
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
    if x.lines < o.lines:
        items.append(("Counted here", f"{x.events:,}",
                      f"{p.noun}; {x.lines:,} of its {o.lines:,} lines, {fmt.money(x.cost_usd, '–')}"
                      ": another finding explains the rest"))
    return '<dl class="figures">' + "".join(
        f'<div><dt>{fmt.esc(k)}</dt><dd>{fmt.esc(v)}</dd><dd class="sub">{fmt.esc(s)}</dd></div>'
        for k, v, s in items) + "</dl>"


def _parties(f: dict) -> str:
    rows = []
    for key, name in (("actors", "Who"), ("targets", "Acting on"), ("sessions", "Sessions")):
        vals = f.get(key) or []
        if vals:
            shown = " ".join(code(v) for v in vals[:8])
            more = f" and {len(vals) - 8} more" if len(vals) > 8 else ""
            rows.append(f"<div><span class=\"k\">{name}</span> {shown}{fmt.esc(more)}</div>")
    return f'<div class="parties">{"".join(rows)}</div>' if rows else ""


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


def panel(p: Panel, charts: Charts) -> str:
    f = p.finding
    sev = fmt.esc(f["severity"])
    overlap = ""
    if p.overlaps:
        others = ", ".join(f"{finding_link(label)} ({n:,} lines)" for label, n in p.overlaps)
        overlap = (f'<p class="overlap">Some of its events are explained better by {others}; '
                   "they are counted there in the attribution.</p>")
    pics = []
    if p.sequence is not None:
        pics.append('<h4>Sequence <span class="hint">(the first messages)</span></h4>'
                    + pictures.sequence(p.sequence, p.label))
    if p.graph is not None:
        pics.append('<h4>Who triggered whom</h4>' + pictures.graph(p.graph, p.label))
    rate = charts.add(f"finding-{p.label}-rate", ch.rate(p),
                      f"{fmt.esc(p.label)}’s {fmt.esc(p.noun)} (colour) against everything else in "
                      "the same files (grey)")
    return f"""<article class="finding sev-{sev}" id="finding-{fmt.esc(p.label)}">
<h3><span class="sev sev-{sev}">{sev}</span> <span class="label">{fmt.esc(p.label)}</span>
{fmt.rich(f["title"])}</h3>
<p class="summary">{fmt.rich(f["summary"])}</p>
{_parties(f)}
{_figures(p)}
{overlap}
{rate}
{"".join(pics)}
{_evidence(p)}
<h4>Recommendation</h4>
<p class="recommendation">{fmt.rich(f["recommendation"])}</p>
{_details(p)}
<p class="fid">finding id <code>{fmt.esc(f["id"])}</code> · detector <code>{fmt.esc(f["detector"])}</code></p>
</article>
"""


def render(r: Report, charts: Charts) -> str:
    if not r.panels:
        return section("findings", "Findings", "<p>No finding: nothing in these logs looks like a "
                                               "runaway loop with the parameters below.</p>")
    body = "".join(panel(p, charts) for p in r.panels)
    if r.panels_omitted:
        body += (f'<p class="note">{r.panels_omitted} more findings are not shown here; they are '
                 "in the findings JSON (<code>loophound scan --json</code>).</p>")
    return section("findings", "Findings", body,
                   "Most severe first. Each line of evidence is quoted from the input file "
                   "at the line the detector points to.")

"""The top of the page: what ran away, who caused it, what it cost, in one sentence."""

from __future__ import annotations

from .. import fmt
from ..html import Charts
from ..model import Report
from ._util import segments

NAV = (("coverage", "What could be judged"), ("timeline", "Timeline"),
       ("attribution", "Attribution"), ("incidents", "Runaway loops"),
       ("talkers", "Top talkers"), ("errors", "Error codes"), ("costs", "Cost"),
       ("method", "Method and inputs"))
GUARDS = ("guards", "What would have stopped it")  # after the loops, when guards were replayed


def contents(r: Report) -> list[tuple[str, str]]:
    """The table of contents: (anchor, title) of each section the page holds, in its order."""
    if not r.guards:
        return list(NAV)
    at = [a for a, _ in NAV].index("incidents") + 1
    return [*NAV[:at], GUARDS, *NAV[at:]]


def render(r: Report, charts: Charts) -> str:
    kpis = "".join(
        f'<div class="kpi"><div class="kpi-label">{fmt.esc(label)}</div>'
        f'<div class="kpi-value">{fmt.esc(value)}</div>'
        f'<div class="kpi-note">{fmt.esc(note)}</div></div>' for label, value, note in r.kpis)
    notes = "".join(f"<li>{fmt.rich(n)}</li>" for n in r.cost_notes)
    nav = " · ".join(f'<a href="#{a}">{fmt.esc(t)}</a>' for a, t in contents(r))
    return f"""<header class="top">
<div class="meta">loophound {fmt.esc(r.tool_version)} · incident report · generated
<time class="generated">{fmt.esc(r.generated_at)}</time></div>
<h1>{fmt.esc(r.title)}</h1>
<p class="headline" id="headline">{segments(r.headline)}</p>
<div class="kpis">{kpis}</div>
<div class="cost-notes"><strong>What the dollars rest on.</strong><ul>{notes}</ul></div>
<nav class="toc">{nav}</nav>
</header>
"""

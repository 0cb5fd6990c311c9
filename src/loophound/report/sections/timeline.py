"""The event rate over time, the findings' events stacked against the background."""

from __future__ import annotations

from .. import charts as ch
from .. import fmt
from ..html import Charts
from ..model import Report
from ._util import section


def render(r: Report, charts: Charts) -> str:
    if not r.timeline:
        return section("timeline", "Timeline", "<p>No event in these logs has a time.</p>")
    detectors = {r.labels[i["id"]]: i["detector"] for i in r.incidents}
    parts = []
    for i, g in enumerate(r.timeline):
        files = ", ".join(g.files[:6]) + (f" and {len(g.files) - 6} more" if len(g.files) > 6 else "")
        caption = (f"{fmt.esc(g.name)}: {fmt.esc(fmt.when(g.start))} to {fmt.esc(fmt.when(g.end))}, "
                   f"one bar per {fmt.esc(fmt.duration(g.bucket_s))}"
                   + (" (simulated clock)" if g.simulated else "")
                   + f'. <span class="files">{fmt.esc(files)}</span>')
        parts.append(charts.add(f"timeline-{i + 1}", ch.timeline(g, detectors), caption))
    if r.timeline_omitted:
        parts.append(f'<p class="note">Not plotted (fewer events): '
                     f'{fmt.esc(", ".join(r.timeline_omitted))}.</p>')
    intro = ("Events (requests, messages, steps, calls; not responses) per time bucket. Colours are "
             "the runaway loops that explain them, shaded over each loop's span; grey is the "
             "background no loop claims. Stretches of activity more than 6 hours apart get "
             "their own chart. Drag to zoom, double-click to reset; “log” shows a small "
             "background beside a large loop.")
    return section("timeline", "Timeline", "".join(parts), intro)

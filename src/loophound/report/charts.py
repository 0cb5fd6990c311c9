"""Plotly figures from the report's model: small, aggregated, and safe to hand to plotly.js.

Figures are built with plotly's graph objects (so a wrong property fails here, in Python, not
silently in a reader's browser) and kept as plain JSON specs. Text that came from a log goes
through `fmt.plot_text`, because plotly.js renders a subset of HTML in labels and hover text.
"""

from __future__ import annotations

import plotly.graph_objects as go

from . import fmt
from .model import Panel, RateChart, TimelineGroup

# Okabe–Ito and Tableau hues: distinguishable, also for most colour-blind readers.
PALETTE = ("#d55e00", "#0072b2", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#8c564b",
           "#7f3c8d", "#b8860b", "#1f77b4", "#e15759", "#59a14f")
BACKGROUND = "#b9bec7"
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"


def color_of(label: str) -> str:
    """An incident's colour, the same in every chart and picture (from its label I1, I2, ...)."""
    try:
        n = int(label.lstrip("IF"))
    except ValueError:
        return "#6b7280"
    return PALETTE[(n - 1) % len(PALETTE)]


def _layout(height: int, **more) -> dict:
    base = dict(
        template="none", height=height, margin=dict(l=64, r=16, t=36, b=48),
        font=dict(family=FONT, size=12, color="#1f2937"), paper_bgcolor="#ffffff",
        plot_bgcolor="#ffffff", hovermode="x unified", bargap=0.05,
        legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0, xanchor="left",
                    traceorder="normal"),
    )
    base.update(more)
    return base


def spec(fig: go.Figure) -> dict:
    """The figure as plain JSON data, with the options every report chart shares."""
    data = fig.to_plotly_json()
    return {"data": data["data"], "layout": data["layout"],
            "config": {"displaylogo": False, "responsive": True,
                       "modeBarButtonsToRemove": ["select2d", "lasso2d"]}}


def warm_up() -> None:
    """Build and serialise one throwaway figure: the first figure of a process loads plotly's
    graph objects and validators (0.1-0.3 s), which `prepare` does ahead of the report."""
    fig = go.Figure(go.Bar(x=["2000-01-01T00:00:00.000"], y=[0], marker=dict(color=BACKGROUND)))
    fig.update_layout(**_layout(100, barmode="stack"))
    spec(fig)


def timeline(g: TimelineGroup, detectors: dict[str, str]) -> dict:
    fig = go.Figure()
    width_ms = g.bucket_s * 1000
    for s in g.series:
        if not s.x:
            continue
        if s.key == "background":
            name, color = "background (no loop)", BACKGROUND
        elif s.key == "other":
            name, color = fmt.plot_text(s.name), "#6b7280"
        else:
            name, color = f"{s.key} {detectors.get(s.key, '')}".strip(), color_of(s.key)
        fig.add_trace(go.Bar(
            x=s.x, y=s.y, name=name, marker=dict(color=color, line=dict(width=0)),
            width=[width_ms] * len(s.x), hovertemplate="%{y:,}<extra>" + name + "</extra>",
        ))
    shapes, notes = _marks(g.marks)
    unit = fmt.duration(g.bucket_s)
    scale = dict(type="buttons", direction="right", showactive=True, x=0, xanchor="left", y=1.03,
                 yanchor="bottom", pad=dict(r=0, t=0, l=0, b=0), font=dict(size=11), buttons=[
                     dict(label="linear", method="relayout", args=[{"yaxis.type": "linear"}]),
                     dict(label="log", method="relayout", args=[{"yaxis.type": "log"}])])
    fig.update_layout(**_layout(
        320, barmode="stack", shapes=shapes, annotations=notes, updatemenus=[scale],
        legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0.13, xanchor="left",
                    traceorder="normal"),
        xaxis=dict(type="date", title=dict(
            text="simulated time from 2000-01-01 (LabTrust t_s, trajectory steps)" if g.simulated
            else "time (UTC)"),
            showgrid=False, linecolor="#9ca3af"),
        yaxis=dict(title=dict(text=f"events per {unit}"), gridcolor="#e5e7eb", rangemode="tozero"),
    ))
    return spec(fig)


def _marks(marks: list[tuple[str, str, str]]) -> tuple[list[dict], list[dict]]:
    shapes, notes = [], []
    for i, (label, start, end) in enumerate(marks):
        c = color_of(label)
        shapes.append(dict(type="rect", xref="x", yref="paper", x0=start, x1=end, y0=0, y1=1,
                           fillcolor=c, opacity=0.07, line=dict(color=c, width=1, dash="dot"),
                           layer="below"))
        notes.append(dict(x=start, y=1 - 0.07 * (i % 4), xref="x", yref="paper", text=label,
                          showarrow=False, xanchor="left", yanchor="top",
                          font=dict(color=c, size=11)))
    return shapes, notes


def rate(p: Panel, r: RateChart | None) -> dict | None:
    if r is None:
        return None
    width_ms = r.bucket_s * 1000
    c = color_of(p.label)
    fig = go.Figure()
    fig.add_trace(go.Bar(x=r.x, y=r.other, name="everything else in these files",
                         marker=dict(color=BACKGROUND, line=dict(width=0)),
                         width=[width_ms] * len(r.x),
                         hovertemplate="%{y:,}<extra>everything else</extra>"))
    fig.add_trace(go.Bar(x=r.x, y=r.own, name=f"{p.label}: {p.noun}",
                         marker=dict(color=c, line=dict(width=0)), width=[width_ms] * len(r.x),
                         hovertemplate="%{y:,}<extra>" + p.label + "</extra>"))
    shapes, _ = _marks([(p.label, p.own.start.rstrip("Z"), p.own.end.rstrip("Z"))]
                       if p.own.start and p.own.end else [])
    fig.update_layout(**_layout(
        240, barmode="stack", shapes=shapes,
        xaxis=dict(type="date", showgrid=False, linecolor="#9ca3af",
                   range=[r.start, r.end]),
        yaxis=dict(title=dict(text=f"per {fmt.duration(r.bucket_s)}"), gridcolor="#e5e7eb",
                   rangemode="tozero"),
    ))
    return spec(fig)


def talkers(rows: list[dict], limit: int = 10) -> dict | None:
    rows = [r for r in rows if r["events"]][:limit]
    if not rows:
        return None
    labels = [f"{i + 1}. {fmt.plot_text(r['actor'] if r['actor'] is not None else '(none)', 28)}"
              for i, r in enumerate(rows)]
    fig = go.Figure()
    fig.add_trace(go.Bar(y=labels, x=[r["in_incidents"] for r in rows], orientation="h",
                         name="in a runaway loop", marker=dict(color=PALETTE[0]),
                         hovertemplate="%{x:,}<extra>in a runaway loop</extra>"))
    fig.add_trace(go.Bar(y=labels, x=[r["events"] - r["in_incidents"] for r in rows],
                         orientation="h", name="background", marker=dict(color=BACKGROUND),
                         hovertemplate="%{x:,}<extra>background</extra>"))
    fig.update_layout(**_layout(
        max(200, 34 * len(rows) + 80), barmode="stack", hovermode="y unified",
        margin=dict(l=260, r=16, t=36, b=40),
        yaxis=dict(autorange="reversed", type="category", automargin=False),
        xaxis=dict(title=dict(text="events"), gridcolor="#e5e7eb", rangemode="tozero"),
    ))
    return spec(fig)

"""Static SVG pictures drawn in Python: a ping-pong's sequence and a trigger cycle's graph.

No script draws them, so they show even where scripts are blocked; every label is escaped
and every attribute is a number or a constant, so no log string reaches an attribute.
"""

from __future__ import annotations

import math

from . import fmt
from .charts import color_of
from .model import Graph, Sequence

WIDTH = 720


def _label(text: str, limit: int = 30) -> tuple[str, str]:
    """(shown, full) both escaped: the full name goes in a <title> tooltip."""
    return fmt.esc(fmt.short(text, limit)), fmt.esc(text)


def sequence(seq: Sequence, label: str) -> str:
    lanes = seq.lanes or ["?"]
    n = len(lanes)
    margin = 110
    step = (WIDTH - 2 * margin) / max(n - 1, 1)
    xs = {name: margin + i * step if n > 1 else WIDTH / 2 for i, name in enumerate(lanes)}
    top, row = 56, 30
    height = top + row * len(seq.steps) + (48 if seq.total > len(seq.steps) else 24)
    color = color_of(label)
    marker = f"arrow-{label.lower()}"
    out = [f'<svg class="picture" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" '
           f'height="{height}" role="img" aria-label="sequence of the first messages">',
           f'<defs><marker id="{marker}" viewBox="0 0 10 10" refX="10" refY="5" '
           f'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
           f'<path d="M0,0 L10,5 L0,10 z" fill="{color}"/></marker></defs>']
    for name, x in xs.items():
        shown, full = _label(name)
        out.append(f'<g><title>{full}</title><rect x="{x - 100:.1f}" y="6" width="200" '
                   f'height="26" rx="5" fill="#f3f4f6" stroke="#9ca3af"/>'
                   f'<text x="{x:.1f}" y="24" text-anchor="middle" class="lane">{shown}</text></g>')
        out.append(f'<line x1="{x:.1f}" y1="32" x2="{x:.1f}" y2="{height - 8}" '
                   f'stroke="#9ca3af" stroke-dasharray="4 4"/>')
    for i, s in enumerate(seq.steps):
        y = top + i * row
        x1, x2 = xs.get(s["from"]), xs.get(s["to"])
        when = "" if s["offset_s"] is None else f"+{_secs(s['offset_s'])}"
        text = " · ".join(t for t in (when, s["label"]) if t)
        if x1 is None or x2 is None or x1 == x2:
            x = x1 if x1 is not None else (x2 if x2 is not None else WIDTH / 2)
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{color}"/>')
            out.append(f'<text x="{x + 8:.1f}" y="{y + 4:.1f}" class="step">{fmt.esc(text)}</text>')
            continue
        out.append(f'<line x1="{x1:.1f}" y1="{y:.1f}" x2="{x2:.1f}" y2="{y:.1f}" '
                   f'stroke="{color}" stroke-width="1.6" marker-end="url(#{marker})"/>')
        out.append(f'<text x="{(x1 + x2) / 2:.1f}" y="{y - 5:.1f}" text-anchor="middle" '
                   f'class="step">{fmt.esc(text)}</text>')
    if seq.total > len(seq.steps):
        more = seq.total - len(seq.steps)
        over = f" over {fmt.duration(seq.duration_s)}" if seq.duration_s else ""
        y = top + row * len(seq.steps) + 10
        out.append(f'<text x="{WIDTH / 2:.1f}" y="{y:.1f}" text-anchor="middle" class="more">'
                   f'… and {more:,} more{fmt.esc(over)}</text>')
    out.append("</svg>")
    return "".join(out)


def _secs(s: float) -> str:
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 120:
        return f"{s:.1f} s"
    return fmt.duration(s)


def graph(g: Graph, label: str) -> str:
    n = len(g.nodes)
    radius = 120 if n > 2 else 170
    height = 2 * radius + 90 if n > 2 else 130
    cx, cy = WIDTH / 2, (radius + 45 if n > 2 else 55)
    pos = {}
    for i, name in enumerate(g.nodes):
        if n == 1:
            pos[name] = (cx, cy)
        elif n == 2:
            pos[name] = (cx + (-1 if i == 0 else 1) * radius, cy)
        else:
            a = -math.pi / 2 + 2 * math.pi * i / n
            pos[name] = (cx + radius * math.cos(a), cy + radius * math.sin(a))
    color = color_of(label)
    marker = f"garrow-{label.lower()}"
    in_cycle = set()
    if g.cycle:
        ring = list(g.cycle) + [g.cycle[0]]
        in_cycle = {(ring[i], ring[i + 1]) for i in range(len(g.cycle))}
    out = [f'<svg class="picture" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" '
           f'height="{height}" role="img" aria-label="who triggered whom">',
           f'<defs><marker id="{marker}" viewBox="0 0 10 10" refX="10" refY="5" '
           f'markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" '
           f'fill="#374151"/></marker></defs>']
    node_r = 16
    for a, b, times in g.edges:
        (x1, y1), (x2, y2) = pos[a], pos[b]
        dx, dy = x2 - x1, y2 - y1
        d = math.hypot(dx, dy) or 1.0
        ux, uy = dx / d, dy / d
        # bend to the right of the direction of travel, so a→b and b→a do not overlap
        mx, my = (x1 + x2) / 2 + uy * 28, (y1 + y2) / 2 - ux * 28
        sx, sy = x1 + ux * node_r, y1 + uy * node_r
        ex, ey = x2 - ux * (node_r + 3), y2 - uy * (node_r + 3)
        stroke = color if (a, b) in in_cycle else "#6b7280"
        width = 2.4 if (a, b) in in_cycle else 1.4
        out.append(f'<path d="M{sx:.1f},{sy:.1f} Q{mx:.1f},{my:.1f} {ex:.1f},{ey:.1f}" fill="none" '
                   f'stroke="{stroke}" stroke-width="{width}" marker-end="url(#{marker})"/>')
        out.append(f'<text x="{mx:.1f}" y="{my:.1f}" text-anchor="middle" class="edge">'
                   f'{times:,}×</text>')
    for name, (x, y) in pos.items():
        shown, full = _label(name, 26)
        fill = color if any(name == c for c in g.cycle) else "#e5e7eb"
        below = y >= cy or n <= 2
        ty = y + node_r + 16 if below else y - node_r - 8
        out.append(f'<g><title>{full}</title><circle cx="{x:.1f}" cy="{y:.1f}" r="{node_r}" '
                   f'fill="{fill}" fill-opacity="0.85" stroke="#374151"/>'
                   f'<text x="{x:.1f}" y="{ty:.1f}" text-anchor="middle" class="node">{shown}'
                   f'</text></g>')
    out.append("</svg>")
    return "".join(out)

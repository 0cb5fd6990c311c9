"""What would have stopped it: the guard lab's replay, side by side (a `loophound.guards/v1`
document, present when the report was made with guards: `loophound guards ... --report FILE`
or `loophound investigate ... --preset NAME`).

Reads the document only (it does not import `loophound.guards`): a table of the guards, what
each would have refused and prevented and what it refused of the healthy traffic; a table of
the runaway loops against the guards; and, for a sweep, saved cost against false blocks over
the parameter's range, with the presets' values marked and the recommended setting.
"""

from __future__ import annotations

import plotly.graph_objects as go

from .. import fmt
from ..charts import BACKGROUND, PALETTE, _layout, spec
from ..html import Charts
from ..model import Report
from ._util import code, incident_link, section, table

MAX_LOOP_ROWS = 20

HEADERS = [("Guard", "l"), ("Type", "l"), ("Trips", "r"), ("First block", "r"),
           ("Refused", "r"), ("Prevented", "r"), ("Saved", "r"), ("Of loop cost", "r"),
           ("False blocks", "r"), ("Of healthy", "r")]


def _guard_cell(g: dict) -> str:
    name = f'<code class="name">{fmt.esc(g["name"])}</code>'
    if g.get("preset"):
        name += f'<br><span class="hint">{fmt.esc(g["preset"])}</span>'
    return name


def _where(example: dict) -> str:
    """`file:line`, the file by its last part (the whole path on hover)."""
    path = str(example["file"])
    tail = path.rsplit("/", 1)[-1]
    return (f'<code title="{fmt.esc(path)}">{fmt.esc(fmt.short(tail, 28))}:'
            f'{fmt.esc(example["line"])}</code>')


def _false_cell(g: dict) -> str:
    cell = fmt.count(g["false_blocks"])
    examples = g.get("false_block_examples") or []
    if examples:
        cell += '<br><span class="hint">' + ", ".join(_where(x) for x in examples[:2]) + "</span>"
    return cell


def _described(doc: dict) -> str:
    """What each guard is: its description and parameters, folded away."""
    rows = []
    for g in doc["guards"]:
        params = ", ".join(f"{k} = {v}" for k, v in g["params"].items()
                           if v not in (None, [], {}))
        rows.append([f'<code class="name">{fmt.esc(g["name"])}</code>',
                     fmt.esc(g.get("description") or ""), f"<code>{fmt.esc(params)}</code>"])
    return ('<details class="det"><summary>What each guard is</summary>'
            + table([("Guard", "l"), ("What it does", "l"), ("Parameters", "l")], rows)
            + "</details>")


def _guards_table(doc: dict) -> str:
    loop_cost = doc["log"].get("loop_cost_usd") or 0
    rows = []
    for g in doc["guards"]:
        lo, hi = g["blocked"], g["blocked_upper"]
        saved = fmt.money(hi["cost_usd"])
        if lo["cost_usd"] != hi["cost_usd"]:
            saved = f"{fmt.money(lo['cost_usd'])} – {saved}"
        rows.append([
            _guard_cell(g), f'<code class="name">{fmt.esc(g["type"])}</code>',
            fmt.count(g["trips"]),
            fmt.esc(fmt.when(g["first_block"])).replace(" UTC", "<br>UTC")
            if g["first_block"] else '<span class="none">never</span>',
            fmt.count(lo["events"]), fmt.count(hi["events"]), fmt.esc(saved),
            fmt.pct(hi["cost_usd"] / loop_cost) if loop_cost else "–",
            _false_cell(g), fmt.pct(g.get("false_block_share"))])
    return table(HEADERS, rows, "numbers guards") + _described(doc)


def _loop_rows(r: Report, doc: dict) -> list[tuple[str, str]]:
    """(finding id, row label) of the loops to show: each incident's primary finding when
    the report groups findings into incidents, else every finding, in the document's order."""
    titles = {f["id"]: f for f in r.document.get("findings", [])}
    incidents = getattr(r, "incidents", None) or []
    labels = getattr(r, "labels", None) or {}
    out = []
    if incidents:
        for inc in incidents:
            fid = inc.get("primary")
            if fid in titles:
                label = labels.get(inc.get("id"), "")
                title = fmt.rich(fmt.short(titles[fid]["title"], 90))
                out.append((fid, f"{incident_link(label)} {title}" if label else title))
    else:
        for f in r.document.get("findings", []):
            out.append((f["id"], fmt.rich(fmt.short(f["title"], 90))))
    return out[:MAX_LOOP_ROWS]


def _loops_table(r: Report, doc: dict) -> str:
    acting = [g for g in doc["guards"] if g["blocked_upper"]["events"]]
    idle = [g["name"] for g in doc["guards"] if not g["blocked_upper"]["events"]]
    rows_of = {g["name"]: {x["finding_id"]: x for x in g.get("incidents", [])}
               for g in doc["guards"]}
    headers = [("Runaway loop", "l"), ("Events", "r")] + [(g["name"], "r") for g in acting]
    rows = []
    for fid, label in _loop_rows(r, doc):
        events = next((rows_of[g["name"]][fid]["events"] for g in doc["guards"]
                       if fid in rows_of[g["name"]]), None)
        if not events:
            continue
        row = [label, fmt.count(events)]
        for g in acting:
            x = rows_of[g["name"]].get(fid)
            if x is None or not x["blocked_events"]:
                row.append('<span class="none">0%</span>')
                continue
            row.append(f"<strong>{fmt.pct(x['share_blocked'])}</strong>"
                       f'<br><span class="hint">after {fmt.count(x["events_before_block"])}, '
                       f"{fmt.esc(fmt.money(x['cost_before_block']))}</span>")
        rows.append(row)
    if not rows or not acting:
        return ""
    note = (f" Prevented nothing: {', '.join(idle)}." if idle else "")
    return ("<h3>Each runaway loop against each guard</h3>"
            '<p class="intro">The share of the loop\'s events the guard would have prevented '
            "(refused, or caused by a refused event), and how many events and dollars of it had "
            f"happened before the guard's first refusal.{fmt.esc(note)}</p>"
            + table(headers, rows, "numbers"))


def sweep_chart(sw: dict) -> dict:
    xs = [str(row["value"]) for row in sw["rows"]]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=xs, y=[row["false_blocks"] for row in sw["rows"]],
                         name="false blocks", yaxis="y2", marker=dict(color=BACKGROUND),
                         hovertemplate="%{y:,} false blocks<extra></extra>"))
    fig.add_trace(go.Scatter(x=xs, y=[row["saved_usd"] for row in sw["rows"]], mode="lines+markers",
                             name="saved $ (with what refusals would have caused)",
                             line=dict(color=PALETTE[1], width=2),
                             hovertemplate="$%{y:,.2f}<extra>saved, upper bound</extra>"))
    fig.add_trace(go.Scatter(x=xs, y=[row["blocked"]["cost_usd"] for row in sw["rows"]],
                             mode="lines", name="saved $ (refused events only)",
                             line=dict(color=PALETTE[1], width=1, dash="dot"),
                             hovertemplate="$%{y:,.2f}<extra>saved, lower bound</extra>"))
    shapes, notes = [], []
    marked: dict[str, list[str]] = {}
    for m in sw["marks"]:
        marked.setdefault(str(m["value"]), []).append(m["label"])
    for i, (x, labels) in enumerate(sorted(marked.items(), key=lambda kv: xs.index(kv[0])
                                           if kv[0] in xs else 0)):
        if x not in xs:
            continue
        shapes.append(dict(type="line", xref="x", yref="paper", x0=x, x1=x, y0=0, y1=1,
                           line=dict(color=PALETTE[0], width=1, dash="dash")))
        notes.append(dict(x=x, y=1 - 0.09 * (i % 5), xref="x", yref="paper", showarrow=False,
                          xanchor="left", yanchor="top", font=dict(color=PALETTE[0], size=10),
                          text=fmt.plot_text("; ".join(labels), 60)))
    rec = str(sw["recommended"]["value"])
    if rec in xs:
        shapes.append(dict(type="rect", xref="x", yref="paper", x0=xs.index(rec) - 0.45,
                           x1=xs.index(rec) + 0.45, y0=0, y1=1, fillcolor=PALETTE[2],
                           opacity=0.12, line=dict(width=0), layer="below"))
    fig.update_layout(**_layout(
        340, shapes=shapes, annotations=notes, hovermode="x unified",
        xaxis=dict(type="category", title=dict(text=fmt.plot_text(
            f"{sw['guard']}.{sw['param']}")), linecolor="#9ca3af"),
        yaxis=dict(title=dict(text="saved (USD)"), gridcolor="#e5e7eb", rangemode="tozero"),
        yaxis2=dict(title=dict(text="false blocks"), overlaying="y", side="right",
                    rangemode="tozero", showgrid=False, tickformat=",d",
                    dtick=1 if max(r["false_blocks"] for r in sw["rows"]) <= 5 else None),
        margin=dict(l=64, r=64, t=36, b=48)))
    return spec(fig)


def _sweep(sw: dict, charts: Charts) -> str:
    rec = sw["recommended"]
    text = (f"Recommended: <code>{fmt.esc(sw['param'])} = {fmt.esc(rec['value'])}</code>, "
            f"{fmt.esc(rec['reason'])}: it would have saved up to "
            f"{fmt.esc(fmt.money(rec['saved_usd']))} ({fmt.count(rec['blocked_events'])} events "
            f"prevented) with {fmt.count(rec['false_blocks'])} false blocks.")
    marks = "; ".join(f"{m['label']} = {m['value']}" for m in sw["marks"])
    caption = fmt.esc(f"Each setting replayed over the whole log. Marked: {marks}." if marks
                      else "Each setting replayed over the whole log.")
    rows = [[code(row["value"]), fmt.count(row["trips"]), fmt.count(row["blocked"]["events"]),
             fmt.count(row["blocked_upper"]["events"]), fmt.esc(fmt.money(row["saved_usd"])),
             fmt.count(row["false_blocks"])] for row in sw["rows"]]
    listing = table([(sw["param"], "l"), ("Trips", "r"), ("Refused", "r"), ("Prevented", "r"),
                     ("Saved", "r"), ("False blocks", "r")], rows, "numbers")
    return (f"<h3>Sweep: {code(sw['guard'] + '.' + sw['param'])} over "
            f"{fmt.esc(sw['range'].split('=', 1)[-1])}"
            f"</h3><p class=\"recommendation\">{text}</p>"
            + charts.add("guards-sweep", sweep_chart(sw), caption)
            + '<details class="det"><summary>Every setting</summary>' + listing + "</details>")


def render(r: Report, charts: Charts) -> str:
    doc = r.guards
    if not doc:
        return ""
    log = doc["log"]
    intro = (f"Each guard replayed alone over this log ({fmt.count(log['events'])} events) in "
             "event time, its state kept per key as the guard would keep it. “Refused” counts "
             "the events it would have refused (a lower bound); “Prevented” adds everything "
             "those would have caused: their answers, the sessions they would have started, "
             "the replies they would have drawn (an upper bound). “Saved” is the dollars of "
             "those events. A false block is a refused event that no finding claims "
             f"(healthy traffic: {fmt.count(log['healthy_events'])} events). Nothing is "
             "extrapolated past the end of the log.")
    body = _guards_table(doc) + _loops_table(r, doc)
    if doc.get("sweep"):
        body += _sweep(doc["sweep"], charts)
    body += (f'<p class="fid">Spec: {fmt.esc(doc.get("spec", ""))}; contract '
             f'{fmt.esc(doc["schema"])} (<code>loophound guards --json</code>).</p>')
    return section("guards", "What would have stopped it", body, fmt.esc(intro))

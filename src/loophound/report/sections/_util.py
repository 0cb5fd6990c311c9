"""Small HTML helpers shared by the sections. Everything variable goes through `fmt.esc`."""

from __future__ import annotations

from .. import fmt


def table(headers: list[tuple[str, str]], rows: list[list[str]], cls: str = "") -> str:
    """`headers` are (text, css class) pairs; cells are already-escaped HTML."""
    head = "".join(f'<th class="{c}">{fmt.esc(h)}</th>' for h, c in headers)
    body = "".join(
        "<tr>" + "".join(f'<td class="{headers[i][1]}">{cell}</td>' for i, cell in enumerate(r))
        + "</tr>" for r in rows)
    return (f'<div class="table-wrap"><table class="{cls}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>")


def code(text: object, limit: int = 60) -> str:
    if text is None:
        return '<span class="none">(none)</span>'
    s = str(text)
    if len(s) > limit:
        return f'<code title="{fmt.esc(s)}">{fmt.esc(fmt.short(s, limit))}</code>'
    return f"<code>{fmt.esc(s)}</code>"


def segments(parts: list[tuple[str, str]]) -> str:
    out = []
    for style, text in parts:
        if style == "code":
            out.append(f"<code>{fmt.esc(text)}</code>")
        elif style == "b":
            out.append(f"<strong>{fmt.esc(text)}</strong>")
        else:
            out.append(fmt.esc(text))
    return "".join(out)


def incident_link(label: str) -> str:
    # labels are I<number>, made by loophound; escaped anyway
    return f'<a href="#incident-{fmt.esc(label)}">{fmt.esc(label)}</a>'


def section(anchor: str, title: str, body: str, intro: str = "") -> str:
    lead = f'<p class="intro">{intro}</p>' if intro else ""
    return (f'<section id="{anchor}" class="section"><h2>{fmt.esc(title)}</h2>{lead}{body}'
            "</section>\n")

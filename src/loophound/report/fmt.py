"""Numbers and words for people, and the one way text from a log reaches the page.

Every string that came from a log is hostile until proven otherwise: agents misbehave and
attackers write logs too. `esc` is the only door from text to HTML; it also makes invisible
control and bidirectional-override characters visible, so a log line cannot hide or reorder
what the reader sees. `plot_text` does the same for strings handed to plotly.js, which reads a
small HTML subset in labels and hover text.
"""

from __future__ import annotations

import datetime as dt
import html
import math
import re

from ..text import apart

# C0/C1 controls (tab and newline excepted), DEL, bidi embeddings/overrides/isolates, LRM/RLM,
# the line/paragraph separators (they end a JavaScript string in old engines) and BOM.
_INVISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069"
                        "\u2028\u2029\ufeff\ud800-\udfff]")


def visible(text: object) -> str:
    """`text` with invisible or reordering characters shown as escapes (`\\u202e`), and names
    that would look alike told apart (`text.apart`: `adm\\u200bin`, `\\u0430dmin`)."""
    s = apart("" if text is None else str(text))
    return _INVISIBLE.sub(lambda m: f"\\u{ord(m.group()):04x}" if ord(m.group()) > 0xff
                          else f"\\x{ord(m.group()):02x}", s)


def esc(text: object) -> str:
    """HTML text or attribute value: escaped, quotes included, controls made visible."""
    return html.escape(visible(text), quote=True)


def plot_text(text: object, limit: int = 80) -> str:
    """A label for plotly.js: its markup (`<b>`, `<a href>`) must stay text."""
    s = visible(text)
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    # `<`, `>` and `&` only: with no `<` left plotly sees no tag, and it decodes &lt; &gt; &amp;
    # back for display but not &quot; (a quote is harmless outside a tag)
    return html.escape(s, quote=False)


def rich(text: object) -> str:
    """Escaped text where `code` spans (the detectors' backticks) become <code>."""
    s = "" if text is None else str(text)
    parts = s.split("`")
    if len(parts) % 2 == 0:  # unbalanced: show the backticks as they are
        return esc(s)
    return "".join(esc(p) if i % 2 == 0 else f"<code>{esc(p)}</code>" for i, p in enumerate(parts))


def short(text: object, limit: int = 48) -> str:
    s = "" if text is None else str(text)
    return s if len(s) <= limit else s[: limit - 1] + "…"


# -- numbers -------------------------------------------------------------------------------


def count(n: int | float | None) -> str:
    return "–" if n is None else f"{int(n):,}"


def money(usd: float | None, unpriced: str = "unpriced") -> str:
    if usd is None or (isinstance(usd, float) and math.isnan(usd)):
        return unpriced
    if usd == 0:
        return "$0.00"
    if abs(usd) < 0.01:
        return f"${usd:.2g}" if abs(usd) >= 0.001 else f"${usd:.1e}"
    return f"${usd:,.2f}"


def pct(share: float | None) -> str:
    if share is None:
        return "–"
    p = share * 100
    if p == 0:
        return "0%"
    if p < 0.1:
        return "<0.1%"
    if p >= 99.95 and share < 1:
        return ">99.9%"
    if 99 < p < 100:
        return f"{p:.1f}%"
    return f"{p:.0f}%" if p >= 10 else f"{p:.1f}%"


def size(nbytes: int | None) -> str:
    if nbytes is None:
        return "–"
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= div:
            return f"{nbytes / div:,.1f} {unit}"
    return f"{nbytes:,} B"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        h = seconds / 3600
        return f"{h:.0f} h" if h >= 10 else f"{h:.1f} h"
    return f"{seconds / 86400:.1f} days"


def rate(per_s: float | None) -> str:
    if per_s is None:
        return "–"
    if per_s >= 1:
        return f"{per_s:,.3g}/s"
    if per_s * 60 >= 1:
        return f"{per_s * 60:,.3g}/min"
    return f"{per_s * 3600:,.3g}/h"


def when(ts: str | dt.datetime | None) -> str:
    """ISO time as `2026-06-18 23:42:21 UTC`."""
    if ts is None:
        return "–"
    if isinstance(ts, dt.datetime):
        return ts.strftime("%Y-%m-%d %H:%M:%S") + " UTC"
    s = str(ts).replace("T", " ")
    if s.endswith("Z"):
        s = s[:-1]
    return s.split(".")[0] + " UTC"

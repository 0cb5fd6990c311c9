"""Assemble the one self-contained HTML file: a template, inline CSS, plotly.js inlined once.

Defence in depth against hostile log content, in layers:
1. every text node and attribute value is escaped (`fmt.esc`); no log string is ever put in a
   URL, an `href`/`src`, a `style` or an event-handler attribute;
2. chart data travels as JSON in `<script type="application/json">`, encoded so that `<`, `>`,
   `&` and U+2028/2029 are `\\uXXXX` escapes: `</script>` in the data cannot end the element;
3. a Content-Security-Policy allows only the page's own two scripts, by SHA-256 hash, and no
   network at all: an injected `<script>` or `onerror=` would not run even if 1 and 2 failed.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import math
import re
from typing import Any

from . import fmt

# Runs the charts one after another, yielding to the browser between them, so the page can be
# read while plotly draws; `data-charts` on <html> says how many were drawn (the tests read it).
INIT_JS = """(function () {
  "use strict";
  var divs = Array.prototype.slice.call(document.querySelectorAll("div[data-fig]"));
  var drawn = 0, failed = 0, root = document.documentElement;
  function next(i) {
    if (i >= divs.length) {
      root.setAttribute("data-charts", String(drawn));
      root.setAttribute("data-charts-failed", String(failed));
      return;
    }
    var div = divs[i];
    var fig;
    try {
      fig = JSON.parse(document.getElementById(div.getAttribute("data-fig")).textContent);
    } catch (e) {
      failed++; console.error("loophound: chart data unreadable", e); next(i + 1); return;
    }
    Plotly.newPlot(div, fig.data, fig.layout, fig.config).then(function () {
      drawn++;
    }, function (e) {
      failed++; console.error("loophound: chart failed", e);
    }).then(function () { window.setTimeout(function () { next(i + 1); }, 0); });
  }
  if (typeof Plotly === "undefined") {
    console.error("loophound: plotly.js is missing");
    return;
  }
  next(0);
})();
"""


def script_json(obj: Any) -> str:
    """JSON that is safe inside a <script> element, byte-identical for equal data."""
    text = json.dumps(_stable(obj), ensure_ascii=True, sort_keys=True, separators=(",", ":"),
                      allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _stable(v: Any) -> Any:
    """Floats rounded (sums in parallel SQL differ in the last bits), NaN/inf as null."""
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return None
        return float(f"{v:.10g}")
    if isinstance(v, dict):
        return {str(k): _stable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_stable(x) for x in v]
    if hasattr(v, "tolist"):
        return _stable(v.tolist())
    return v


class Charts:
    """Collects the page's charts; each gets a fixed id from the section that made it."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    def add(self, name: str, spec: dict | None, caption: str = "") -> str:
        if spec is None:
            return ""
        cid = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
        if cid in self.ids:
            raise ValueError(f"two charts named {cid}")
        self.ids.append(cid)
        cap = f'<p class="caption">{caption}</p>' if caption else ""
        return (f'<figure class="chart-box"><div class="chart" id="chart-{cid}" '
                f'data-fig="fig-{cid}"></div>{cap}</figure>\n'
                f'<script type="application/json" id="fig-{cid}">{script_json(spec)}</script>\n')


@functools.lru_cache(maxsize=1)
def plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    js = get_plotlyjs()
    if re.search(r"</script", js, re.IGNORECASE):  # cannot happen today; must never break us
        js = re.sub(r"</(script)", r"<\\/\1", js, flags=re.IGNORECASE)
    return js


def csp_hash(script: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode() + "'"


@functools.lru_cache(maxsize=1)
def script_sources() -> str:
    """The CSP's `script-src`: the hashes of the page's two scripts (plotly.js is 4.8 MB)."""
    return f"{csp_hash(plotly_js())} {csp_hash(INIT_JS)}"


def page(title: str, body: str, css: str, generated_at: str, tool_version: str) -> str:
    js = plotly_js()
    csp = ("default-src 'none'; "
           f"script-src {script_sources()}; "
           "style-src 'unsafe-inline'; img-src data:; font-src data:; "
           "connect-src 'none'; base-uri 'none'; form-action 'none'")
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<meta name="referrer" content="no-referrer">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="loophound {fmt.esc(tool_version)}">
<title>{fmt.esc(title)}</title>
<style>{css}</style>
</head>
<body>
{body}
<footer class="footer">Made by loophound {fmt.esc(tool_version)}. Generated at
<time>{fmt.esc(generated_at)}</time>: the only part of this file that differs between two
reports of the same inputs. Charts by plotly.js, included in this file: it opens offline.</footer>
<script>{js}</script>
<script>{INIT_JS}</script>
</body>
</html>
"""

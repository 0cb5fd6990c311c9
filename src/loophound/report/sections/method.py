"""How the report was made: detectors and their parameters, the cost model, the inputs."""

from __future__ import annotations

from .. import fmt
from ..html import Charts
from ..model import Report
from ._util import code, section, table


def _param_docs() -> dict[str, tuple[str, dict[str, str]]]:
    from ...detect import DETECTORS
    from ...detect.base import param_docs

    return {name: (d.description, {n: doc for n, _, doc in param_docs(d.params)})
            for name, d in DETECTORS.items()}


def render(r: Report, charts: Charts) -> str:
    docs = _param_docs()
    m = r.method
    parts = []
    det_rows = []
    for name in sorted(m.get("detectors", {})):
        desc, pdocs = docs.get(name, ("", {}))
        params = m["detectors"][name]
        plist = "".join(f"<li><code>{fmt.esc(k)} = {fmt.esc(v)}</code> "
                        f'<span class="hint">{fmt.esc(pdocs.get(k, ""))}</span></li>'
                        for k, v in sorted(params.items()))
        det_rows.append([f'<code class="name">{fmt.esc(name)}</code>', fmt.esc(desc),
                         f'<ul class="params">{plist}</ul>'])
    parts.append("<h3>Detectors and parameters</h3>" + table(
        [("Detector", "l"), ("Looks for", "l"), ("Parameters", "l")], det_rows))
    parts.append(
        "<p>Change a parameter with <code>--set DETECTOR.PARAM=VALUE</code> or a TOML file "
        "(<code>--config</code>). Attribution: each event belongs to at most one finding, the one "
        "whose detector is most specific (lowest rank), then the most severe; the rest is the "
        "background. Times are UTC; LabTrust's simulated seconds are placed on 2000-01-01.</p>")
    cm = m.get("cost_model", {})
    cost_rows = [["Price table version", fmt.esc(cm.get("price_table_version"))],
                 ["Models with a price", fmt.esc(cm.get("priced_models"))],
                 ["Cost per agent call (assumed)",
                  fmt.esc(fmt.money(cm.get("cost_per_agent_call_usd"), "not priced"))],
                 ["Assumption", fmt.esc(cm.get("assumption"))]]
    parts.append("<h3>Cost model</h3>" + table([("", "l"), ("", "l")], cost_rows, "kv"))
    inputs = [[code(i["path"], 90), fmt.esc(i.get("format")), fmt.count(i.get("lines")),
               fmt.size(i.get("bytes")), f'<code class="sha">{fmt.esc(i.get("sha256"))}</code>']
              for i in r.inputs]
    parts.append("<h3>Inputs</h3>" + table(
        [("File", "l"), ("Format", "l"), ("Lines", "r"), ("Size", "r"), ("SHA-256", "l")],
        inputs, "numbers"))
    if r.quarantine:
        q = [[code(x["file"], 90), fmt.esc(x["reason"].replace("_", " ")), fmt.count(x["lines"])]
             for x in r.quarantine]
        parts.append("<h3>Lines that are not events (quarantined)</h3>" + table(
            [("File", "l"), ("Reason", "l"), ("Lines", "r")], q, "numbers")
            + '<p class="hint">See them with <code>loophound sql "SELECT * FROM quarantine"</code>.</p>')
    parts.append(f"<p>Tool: loophound {fmt.esc(r.tool_version)}. Findings schema "
                 f"<code>{fmt.esc(r.document.get('schema'))}</code>. Report generated at "
                 f"{fmt.esc(r.generated_at)} (the only value that changes between runs).</p>")
    return section("method", "Method and inputs", "".join(parts))

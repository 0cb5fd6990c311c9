"""How the report was made: detectors and their parameters, the cost model, the inputs."""

from __future__ import annotations

from .. import fmt
from ..html import Charts
from ..model import Report
from ._util import code, incident_link, section, table


def _param_docs() -> dict[str, tuple[str, dict[str, str]]]:
    from ...detect import DETECTORS
    from ...detect.base import param_docs

    return {name: (d.description, {n: doc for n, _, doc in param_docs(d.params)})
            for name, d in DETECTORS.items()}


RULES = (
    "Findings of one detector on the same actors, targets and sessions, in a file in common, "
    "whose spans overlap or lie at most {gap} apart are one run of a loop; each gap between "
    "them is an interruption, counted.",
    "Two runs describe the same loop when they claim events in a file in common, their spans "
    "overlap or lie at most {gap} apart, their actors do not contradict (when both name "
    "actors, they share one), and they share a participant (actor, target, session, pair or "
    "cycle member) or {share} of the smaller one's claimed events are claimed by both.",
    "Runs are taken in attribution's order (the most specific detector, the most severe, the "
    "earliest): one that describes no incident's loop starts an incident as its primary; "
    "any other joins the one incident it shares the most events with, as a signal (“also "
    "seen as”). A signal never merges two loops.",
    "An incident's severity is its members' highest, one level higher when {agree} or more "
    "different detectors found it. Its id derives from its primary finding's, so it is "
    "stable across scans.",
)


def _grouping(r: Report) -> str:
    """How findings became the runaway loops above, and every finding behind them."""
    rules = r.method.get("incidents") or {}
    gap = fmt.duration(rules.get("gap_s", 300))
    share = fmt.pct(rules.get("shared_share", 0.5))
    items = "".join(f"<li>{fmt.esc(x.format(gap=gap, share=share, agree=rules.get('agree', 3)))}"
                    "</li>" for x in RULES)
    by_id = {f["id"]: f for f in r.document["findings"]}
    rows = []
    for inc in r.incidents:
        label = r.labels[inc["id"]]
        for m in inc["members"]:
            f = by_id[m]
            role = ("primary" if m == inc["primary"] else
                    "run piece" if m in inc["pieces"] else "signal")
            rows.append([incident_link(label), fmt.esc(role),
                         f'<span class="sev sev-{fmt.esc(f["severity"])}">'
                         f'{fmt.esc(f["severity"])}</span>', code(f["detector"]),
                         fmt.rich(fmt.short(f["title"], 120)), code(f["id"])])
    listing = ""
    if rows:
        listing = ("<h4>Every finding, by the loop it belongs to</h4>" + table(
            [("Loop", "l"), ("Role", "l"), ("Severity", "l"), ("Detector", "l"), ("Finding", "l"),
             ("Id", "l")], rows))
    return ("<h3>From findings to runaway loops</h3><p>Several detectors often see one loop, "
            "and a long loop can come out in pieces; the report groups the findings into "
            f"incidents, one per loop, by these rules:</p><ol>{items}</ol>{listing}")


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
        "whose detector is most specific (lowest rank), then the most severe, then the earlier; "
        "the rest is the background. Times are UTC; LabTrust's simulated seconds are placed on "
        "2000-01-01.</p>")
    parts.append(_grouping(r))
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

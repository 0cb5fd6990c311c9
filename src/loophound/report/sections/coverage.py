"""What could be judged, near the top: a report never reads as an all-clear for logs that
loophound could not interpret. The verdict, each log's share of events with a time, an actor,
a session, an outcome and arguments, the detectors that had nothing to read, and the files
that were not read at all."""

from __future__ import annotations

from ...findings_json import COULD_NOT_JUDGE, verdict
from .. import fmt
from ..html import Charts
from ..model import Report
from ._util import section, table

VERDICTS = {  # by findings_json.verdict's word: the one the headline and the CLI lead with
    "findings": "Runaway loops were found (below). What each log allowed to judge:",
    "clean": "No runaway loop was found, and every log read could be judged: an all-clear "
             "these logs back.",
    COULD_NOT_JUDGE: "No runaway loop was found, but <strong>not every log could be "
                     "judged</strong>: this is not an all-clear. The logs below lack the fields "
                     "the detectors read; a mapping file naming them (<code>--mapping</code>) "
                     "would fill them. A log where a detector found something was judged.",
}
SHOWN = ("time", "actor", "session", "outcome", "action", "arguments")


def _pct(share: float) -> str:
    return f"{share * 100:.0f}%"


def render(r: Report, charts: Charts) -> str:
    cov = r.document.get("coverage")
    if not cov:
        return ""
    rows = []
    for i in cov["inputs"]:
        state = ("context" if i.get("context_only") else "judged" if i["judged"]
                 else "<strong>not judged</strong>")
        why = "" if i["judged"] else fmt.esc("missing " + "; ".join(i["missing"]))
        if i.get("unmapped_keys") and not i["judged"]:
            why += "; its fields: " + ", ".join(f"<code>{fmt.esc(k)}</code>"
                                                for k in i["unmapped_keys"][:8])
        rows.append([f"<code>{fmt.esc(i['path'])}</code>", fmt.esc(i["format"]),
                     f"{i['events']:,}", *(_pct(i["shares"].get(k, 0.0)) for k in SHOWN),
                     state, why])
    for s in cov.get("skipped", []):
        rows.append([f"<code>{fmt.esc(s['path'])}</code>", "", "0", *("" for _ in SHOWN),
                     "<strong>not read</strong>", fmt.esc(s["reason"])])
    headers = [("log", ""), ("format", ""), ("events", "num"),
               *((k, "num") for k in SHOWN), ("verdict", ""), ("why", "")]
    idle = [d for d in cov["detectors"] if not d["judged"]]
    note = ""
    if idle:
        note = ("<p class=\"note\">Detectors with nothing to read: " + "; ".join(
            f"<code>{fmt.esc(d['name'])}</code> ({fmt.esc(d['reason'])})" for d in idle)
            + ".</p>")
    # what needs a reader's eye (logs not judged, files not read) stays in view; the logs
    # that could be judged fold away behind one line
    problems = [r for r in rows if "<strong>" in r[-2]]
    fine = [r for r in rows if "<strong>" not in r[-2]]
    judged = sum(1 for i in cov["inputs"] if i["judged"])
    summary = (f"{judged:,} of {len(cov['inputs']):,} logs could be judged"
               + (f"; {len(cov.get('skipped', [])):,} file(s) not read"
                  if cov.get("skipped") else ""))
    body = f'<p class="coverage-summary"><strong>{fmt.esc(summary)}.</strong></p>'
    if problems:
        body += table(headers, problems, "coverage")
    if fine:
        body += (f"<details><summary>The {len(fine):,} logs that could be judged, with the "
                 "share of their events carrying each field</summary>"
                 f"{table(headers, fine, 'coverage')}</details>")
    body += note
    return section("coverage", "What could be judged", body, VERDICTS[verdict(r.document)[0]])

"""Top talkers, error codes, and cost by actor and model."""

from __future__ import annotations

from .. import charts as ch
from .. import fmt
from ..html import Charts
from ..model import Report
from ._util import code, incident_link, section, table


def _links(labels: list[str]) -> str:
    return " ".join(incident_link(label) for label in labels[:6]) + (
        f" +{len(labels) - 6}" if len(labels) > 6 else "")


def talkers(r: Report, charts: Charts) -> str:
    rows = [[code(t["actor"]), fmt.count(t["events"]), fmt.pct(t["events_share"]),
             fmt.count(t["in_incidents"]), fmt.count(t["errors"]), fmt.size(t["bytes"]),
             fmt.esc(fmt.money(t["cost_usd"], "–")), _links(t["incidents"])] for t in r.talkers]
    headers = [("Actor", "l"), ("Events", "r"), ("Share", "r"), ("In loops", "r"),
               ("Errors", "r"), ("Log bytes", "r"), ("Cost", "r"), ("Loops", "l")]
    chart = charts.add("talkers", ch.talkers(r.talkers))
    more = (f" Showing {len(r.talkers)} of {r.actors_total:,} actors."
            if r.actors_total > len(r.talkers) else "")
    return section("talkers", "Top talkers", chart + table(headers, rows, "numbers"),
                   fmt.esc("Actors by the number of events they produced." + more))


def errors(r: Report, charts: Charts) -> str:
    if not r.errors:
        return section("errors", "Error codes", "<p>No event in these logs carries an error.</p>")
    rows = [[code(e["error"]), fmt.count(e["events"]), fmt.count(e["in_incidents"]),
             fmt.count(e["actors"]), code(e["top_actor"]), _links(e["incidents"])] for e in r.errors]
    headers = [("Error", "l"), ("Events", "r"), ("In loops", "r"), ("Actors", "r"),
               ("Most from", "l"), ("Loops", "l")]
    return section("errors", "Error codes", table(headers, rows, "numbers"),
                   "Errors returned to (or recorded by) the agents, most frequent first.")


def costs(r: Report, charts: Charts) -> str:
    def model_name(m, basis):
        if m is not None:
            return code(m)
        return ('<span class="none">(per-call assumption)</span>' if basis == "assumed"
                else '<span class="none">(not logged)</span>')

    rows = [[model_name(c["model"], c["basis"]), fmt.esc(c["basis"]), fmt.count(c["items"]),
             fmt.count(c["actors"]), fmt.count(c["tokens"]), fmt.esc(fmt.money(c["cost_usd"]))]
            for c in r.cost_by_model]
    by_model = table([("Model", "l"), ("Basis", "l"), ("Events", "r"), ("Actors", "r"),
                      ("Tokens", "r"), ("Cost", "r")], rows, "numbers")
    rows = [[code(c["actor"]), model_name(c["model"], c["basis"]), fmt.esc(c["basis"]),
             fmt.count(c["items"]), fmt.count(c["tokens"]), fmt.esc(fmt.money(c["cost_usd"]))]
            for c in r.cost_by_actor_model]
    by_actor = table([("Actor", "l"), ("Model", "l"), ("Basis", "l"), ("Events", "r"),
                      ("Tokens", "r"), ("Cost", "r")], rows, "numbers")
    notes = "".join(f"<li>{fmt.rich(n)}</li>" for n in r.cost_notes)
    body = (f'<ul class="notes">{notes}</ul><h3>By model</h3>{by_model}'
            f"<h3>By actor and model</h3>{by_actor}")
    intro = ("Basis: <em>stated</em> = the log gives the cost; <em>priced</em> = tokens × the "
             "price table; <em>assumed</em> = a set cost per agent call for logs without tokens; "
             "<em>unpriced</em> = tokens of a model without a price (never counted as $0).")
    return section("costs", "Cost by actor and model", body, intro)


def render(r: Report, charts: Charts) -> str:
    return talkers(r, charts) + errors(r, charts) + costs(r, charts)

"""Everything the report shows, gathered from a scan into plain data, before any HTML exists.

Computing is kept apart from rendering (the sections only format what is here), so the figures
can be tested without a browser and every number on the page has one origin. Aggregation
happens in SQL over one narrow view of per-event facts (`_rep`): the report of a 1.2 M-line
log carries a few thousand numbers, not a million points.

The report leads with incidents (`loophound.incidents`): one panel per runaway loop, led by
its primary finding, with the findings that corroborate it as "also seen as" signals, and one
row per incident in the attribution, each owning its events.

Determinism: every query has a total order, labels come from the incidents' order in the
findings document, and the only wall-clock value is the labelled generation time.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import duckdb

from .. import db, queries
from ..attribute import DECIMAL_SUM, UNIT_KINDS_ALL, facts_table
from ..findings_json import COULD_NOT_JUDGE, incidents_in, runaway, verdict
from ..incidents import phrase
from ..store import define_message_copies
from . import fmt
from .evidence import Evidence, quote

MAX_TIMELINE_BUCKETS = 360
MAX_RATE_BUCKETS = 120
MAX_TIMELINE_GROUPS = 6
MAX_TRACES_PER_GROUP = 8
MAX_PANELS = 60
SEQUENCE_STEPS = 12
MAX_GRAPH_NODES = 12
TOP_ROWS = 15
# bucket widths a person reads without arithmetic, in seconds
NICE_WIDTHS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600,
               43200, 86400, 172800, 604800, 2592000)
SIMULATED_BEFORE = dt.datetime(2001, 1, 1)
SPLIT_GAP = dt.timedelta(hours=6)  # a quiet stretch this long starts a new timeline chart

NOUNS = {
    "request": "requests", "message": "messages", "room_post": "room posts",
    "session_start": "sessions", "step": "steps", "llm_call": "LLM calls",
    "repair_attempt": "repair attempts", "record": "records", "connection": "connections",
    "config": "config changes", "trigger": "hook firings", "audit": "audit records",
}


# -- the data the sections render -----------------------------------------------------------


@dataclass
class Figures:
    """What one finding (or the background, or the whole log) occupies and costs."""

    events: int = 0
    events_share: float | None = None
    lines: int = 0
    bytes: int = 0
    bytes_share: float | None = None
    tokens: int = 0
    cost_usd: float | None = None
    cost_basis: dict[str, int] = field(default_factory=dict)
    unpriced_tokens: int = 0
    start: str | None = None
    end: str | None = None
    duration_s: float | None = None
    rate_per_s: float | None = None
    usd_per_hour: float | None = None
    usd_per_day: float | None = None


@dataclass
class Series:
    name: str  # legend text (already plot-safe? no: raw; the chart escapes it)
    key: str  # finding label, "background" or "other"
    x: list[str]  # bucket centres, ISO
    y: list[int]


@dataclass
class TimelineGroup:
    name: str
    files: list[str]
    simulated: bool
    bucket_s: int
    start: str
    end: str
    series: list[Series]
    marks: list[tuple[str, str, str]]  # (label, start, end) of findings inside the range


@dataclass
class RateChart:
    bucket_s: int
    x: list[str]
    own: list[int]
    other: list[int]
    start: str
    end: str


@dataclass
class Sequence:
    lanes: list[str]  # party names as shown
    steps: list[dict]  # {from, to, offset_s, label, file, line}
    total: int
    duration_s: float | None


@dataclass
class Graph:
    nodes: list[str]
    edges: list[tuple[str, str, int]]  # (from, to, times)
    cycle: list[str]


@dataclass
class Panel:
    """One incident: a runaway loop, its primary finding and the findings that corroborate it."""

    label: str  # I1, I2, ... in the findings document's order of incidents
    incident: dict  # the loophound.findings/v1 incident
    finding: dict  # its primary finding
    members: list[dict]  # every finding of the incident, the primary first
    own: Figures  # the events the incident owns: each counted for one incident only
    noun: str
    kinds: list[tuple[str, int]]  # its events by kind, as (noun, count), most first
    phrase: list[tuple[str, str]]  # who did what, as (style, text) segments
    overlaps: list[tuple[str, int]]  # (label of the incident that owns them, lines)
    evidence: list[Evidence]
    # (extra, its data) in the order registered for its primary's shape (SHAPE_EXTRAS)
    extras: list[tuple[str, Any]] = field(default_factory=list)
    details: list[tuple[str, str]] = field(default_factory=list)

    @property
    def signals(self) -> list[dict]:
        return self.incident["signals"]

    def extra(self, name: str) -> Any:
        return next((data for n, data in self.extras if n == name), None)


@dataclass
class Report:
    title: str
    tool_version: str
    generated_at: str
    headline: list[tuple[str, str]]  # (style, text): style "t" text, "code", "b" bold
    kpis: list[tuple[str, str, str]]  # (label, value, note)
    cost_notes: list[str]
    totals: Figures
    log_bytes: int
    background: Figures
    panels: list[Panel]
    panels_omitted: int
    rest: Figures | None  # the incidents past MAX_PANELS, together
    timeline: list[TimelineGroup]
    timeline_omitted: list[str]
    time_ranges: int
    active_s: float
    talkers: list[dict]
    actors_total: int
    errors: list[dict]
    cost_by_actor_model: list[dict]
    cost_by_model: list[dict]
    inputs: list[dict]
    quarantine: list[dict]
    method: dict
    document: dict
    incidents: list[dict] = field(default_factory=list)  # the document's, in its order
    labels: dict[str, str] = field(default_factory=dict)  # incident id → I1, I2, ...
    incident_of: dict[str, str] = field(default_factory=dict)  # finding id → incident id
    guards: dict | None = None  # a loophound.guards/v1 replay: the section and its TOC entry

    @property
    def headline_text(self) -> str:
        return "".join(t for _, t in self.headline)


# -- gathering -------------------------------------------------------------------------------


def generation_time(explicit: dt.datetime | str | None = None) -> str:
    """The one wall-clock value in a report: given, from SOURCE_DATE_EPOCH, or now."""
    if isinstance(explicit, str):
        explicit = dt.datetime.fromisoformat(explicit.replace("Z", "+00:00"))
    if explicit is None and os.environ.get("SOURCE_DATE_EPOCH", "").strip().isdigit():
        explicit = dt.datetime.fromtimestamp(int(os.environ["SOURCE_DATE_EPOCH"]), dt.UTC)
    if explicit is None:
        explicit = dt.datetime.now(dt.UTC)
    if explicit.tzinfo is not None:
        explicit = explicit.astimezone(dt.UTC).replace(tzinfo=None)
    return explicit.strftime("%Y-%m-%d %H:%M:%S UTC")


def gather(result: Any, generated_at: dt.datetime | str | None = None) -> Report:
    """The report's data from a scan's results: anything with `document` (the findings
    document), `unit_kinds` (finding id → the kinds it counts as actions) and `con` (the views
    and the attribution's tables): a fresh `ScanResult`, or a saved run read back."""
    con: duckdb.DuckDBPyConnection = result.con
    doc: dict = result.document
    findings = doc["findings"]
    by_id = {f["id"]: f for f in findings}
    incidents = incidents_in(doc)
    labels = {inc["id"]: f"I{i + 1}" for i, inc in enumerate(incidents)}
    incident_of = {m: inc["id"] for inc in incidents for m in inc["members"]}
    _facts(con, incident_of)
    _groups(con)
    log_bytes = sum(int(i.get("bytes") or 0) for i in doc["inputs"])
    t = doc["totals"]
    total_events = int(t["events"])
    totals = _figures(
        events=total_events, lines=t["lines"], nbytes=t["bytes"], tokens=t["tokens"],
        cost=t["cost_usd"], basis=t["cost_basis"], unpriced=t["unpriced_tokens"],
        start=t["start"], end=t["end"], total_events=total_events, log_bytes=log_bytes,
    )
    owned = _owned(con)
    shown = incidents[:MAX_PANELS]
    kinds = _kinds(con)
    overlaps = _overlaps(con, labels)
    inputs = _incident_inputs(con)
    wanted = [(e["file"], e["line"]) for inc in shown for e in by_id[inc["primary"]]["evidence"]]
    quoted = quote(con, wanted)

    panels = []
    for inc in shown:
        head = by_id[inc["primary"]]
        own = _owned_figures(owned.get(inc["id"]), inc["start"], inc["end"], total_events,
                             log_bytes)
        counts = sorted(kinds.get(inc["id"], {}).items(), key=lambda kv: (-kv[1], kv[0]))
        noun = _noun(counts)
        evidence = []
        for e in head["evidence"]:
            q = quoted[(e["file"], e["line"])]
            evidence.append(Evidence(q.file, q.line, e.get("note"), q.text, q.byte_length,
                                     q.truncated, q.problem))
        panel = Panel(labels[inc["id"]], inc, head, [by_id[m] for m in inc["members"]], own,
                      noun, [(NOUNS.get(k, k), n) for k, n in counts], phrase(head, noun),
                      overlaps.get(inc["id"], []), evidence, details=_details(head["details"]))
        context = _Context(con, inc, head, inputs.get(inc["id"], []))
        panel.extras = [(name, EXTRAS[name](context)) for name in extras_of(head["detector"])]
        panels.append(panel)

    rest = None
    if len(incidents) > MAX_PANELS:  # the attribution still adds up: the others in one row
        extra = [owned[i["id"]] for i in incidents[MAX_PANELS:] if i["id"] in owned]
        merged = {"events": sum(o["events"] for o in extra),
                  "lines": sum(o["lines"] for o in extra), "bytes": sum(o["bytes"] for o in extra),
                  "tokens": sum(o["tokens"] for o in extra),
                  "cost": sum(o["cost"] for o in extra if o["cost"] is not None)
                  if any(o["cost"] is not None for o in extra) else None,
                  "basis": {}, "unpriced": sum(o["unpriced"] for o in extra)}
        rest = _owned_figures(merged, None, None, total_events, log_bytes)
    groups = _time_groups(con)
    active_s = sum((g["end"] - g["start"]).total_seconds() for g in groups)
    background = _owned_figures(owned.get(None), totals.start, totals.end, total_events,
                                log_bytes, duration_s=active_s if len(groups) > 1 else None)
    timeline, omitted = _timeline(con, groups, incidents, labels)
    talkers, actors_total = _talkers(con, labels, total_events, t["bytes"])
    cost_notes = _cost_notes(con, doc)
    report = Report(
        title=_title(doc),
        tool_version=doc["tool_version"],
        generated_at=generation_time(generated_at),
        headline=headline(doc, panels, totals, log_bytes),
        kpis=[],
        cost_notes=cost_notes,
        totals=totals,
        log_bytes=log_bytes,
        background=background,
        panels=panels,
        panels_omitted=max(0, len(incidents) - MAX_PANELS),
        rest=rest,
        timeline=timeline,
        timeline_omitted=omitted,
        time_ranges=len(groups),
        active_s=active_s,
        talkers=talkers,
        actors_total=actors_total,
        errors=_errors(con, labels),
        cost_by_actor_model=_cost_by_actor_model(con),
        cost_by_model=_cost_by_model(con),
        inputs=list(doc["inputs"]),
        quarantine=_quarantine(con),
        method=doc["method"],
        document=doc,
        incidents=incidents,
        labels=labels,
        incident_of=incident_of,
    )
    report.kpis = _kpis(report)
    con.execute("DROP VIEW IF EXISTS _rep")
    con.execute("DROP TABLE IF EXISTS _rep_groups")
    return report


# -- panel extras: what a panel shows besides its figures, by the shape of its finding ---------
# A panel's pictures depend on what its primary finding is about, which its detector declares
# (`Detector.shape`): `events` get the rate chart of the loop's events, a `pair` also the
# sequence of its first messages, a `cycle` the who-triggered-whom graph. Each shape's extras
# are registered here; each extra has a gatherer here (`EXTRAS`) and a renderer in
# sections/findings.py (`RENDERERS`). A detector of a shape without an entry, or an extra
# without a gatherer or a renderer, is an error, never a panel silently drawn without it.

SHAPE_EXTRAS: dict[str, tuple[str, ...]] = {
    "events": ("rate",),
    "pair": ("rate", "sequence"),
    "cycle": ("rate", "graph"),
}


class MissingRenderer(LookupError):
    """A detector, or a shape or an extra it names, that the report has no renderer for."""


def extras_of(detector: str) -> tuple[str, ...]:
    """The extras a panel led by one of `detector`'s findings shows, in order."""
    from ..detect import DETECTORS

    if detector not in DETECTORS:
        raise MissingRenderer(f"no detector {detector!r} is registered, so the report does not "
                              "know what its findings are about")
    shape = DETECTORS[detector].shape
    if shape not in SHAPE_EXTRAS:
        raise MissingRenderer(f"detector {detector!r} declares shape {shape!r}, which has no "
                              "panel extras in loophound.report.model.SHAPE_EXTRAS")
    names = SHAPE_EXTRAS[shape]
    missing = [n for n in names if n not in EXTRAS]
    if missing:
        raise MissingRenderer(f"shape {shape!r} wants panel extras {missing} that have no "
                              "gatherer in loophound.report.model.EXTRAS")
    return names


@dataclass
class _Context:
    """What an extra's gatherer may read: the connection (with `_rep`), the incident, its
    primary finding, and the inputs its events are in."""

    con: duckdb.DuckDBPyConnection
    incident: dict
    finding: dict
    inputs: list[int]


def _facts(con: duckdb.DuckDBPyConnection, incident_of: dict[str, str]) -> None:
    """One narrow row per event with its owner, the owner's incident and the cost
    (attribution's `_event_facts`, owners named): every aggregate below reads this, most
    of them through its groups (`_groups`).
    `unit`: the event is a unit of work (a request, message, step, ...), counted once: the
    second stored copy of a message both parties recorded (`_copies`) is not one.
    A view: each aggregate's pass over `_event_facts` names the owners through a table of a
    few rows, which costs less than writing a million rows again (0.27 s of CPU at 1.27 M).
    `unit` is spelled as comparisons, not `kind IN (...)`: DuckDB makes a long IN list a join,
    which every query over the view then pays, even one that never reads `unit` (0.02-0.03 s
    of CPU a query at 1.27 M rows)."""
    facts_table(con, who=True)  # a scan without a report in mind left out who did what
    has_copies = define_message_copies(con) > 0
    copies = "LEFT JOIN _copies cp USING (event_id)" if has_copies else ""
    not_copy = "AND cp.event_id IS NULL" if has_copies else ""
    owners = con.execute("SELECT fidx, finding_id FROM _findx ORDER BY fidx").fetchall()
    fidx, finding_id = [o[0] for o in owners], [o[1] for o in owners]
    db.temp_table(con, "_rep_owner", {
        "fidx": ("INTEGER", fidx), "finding_id": ("VARCHAR", finding_id),
        "incident": ("VARCHAR", [incident_of.get(f) for f in finding_id])})
    units = " OR ".join(f"e.kind = {db.sql_literal(k)}" for k in UNIT_KINDS_ALL)
    con.execute(f"""
      CREATE OR REPLACE TEMP VIEW _rep AS
      SELECT e.event_id, e.input_id, e.ts, e.kind, e.actor, e.target, e.model, e.error, e.ok,
             e.byte_length, x.finding_id AS owner, x.incident, e.cost_usd, e.cost_status,
             e.tokens, (({units}) {not_copy}) AS unit
      FROM _event_facts e
      LEFT JOIN _rep_owner x USING (fidx)
      {copies}""")


def _groups(con: duckdb.DuckDBPyConnection) -> None:
    """`_rep_groups`: the events of `_rep` counted by what the report's small figures and
    tables tell apart (incident, cost basis, kind, input, unit or not, actor, error, model,
    failed or not): a few rows, which the incidents' shares, kinds and inputs, the talkers,
    the errors and the cost tables read instead of every event, one pass where there were
    nine (0.53 s of 0.69 s of gathering at 1.27 M events; 0.08 s so). Dollars are
    decimals: they add up exactly however the rows are grouped."""
    con.execute(f"""
      CREATE OR REPLACE TEMP TABLE _rep_groups AS
      SELECT incident, cost_status, kind, input_id, unit, actor, error, model,
             error IS NOT NULL OR ok = false AS failed, count(*) AS n,
             sum(byte_length) AS bytes, sum(tokens) AS tokens, {DECIMAL_SUM} AS cost
      FROM _rep GROUP BY ALL""")


def _hours(seconds: float | None) -> float | None:
    return None if not seconds or seconds <= 0 else seconds / 3600


def _parse(ts: str | None) -> dt.datetime | None:
    if not ts:
        return None
    return dt.datetime.fromisoformat(ts.replace("Z", "+00:00")).replace(tzinfo=None)


def _iso(ts: dt.datetime) -> str:
    return ts.isoformat(timespec="milliseconds")


def _figures(*, events, lines, nbytes, tokens, cost, basis, unpriced, start, end, total_events,
             log_bytes) -> Figures:
    s, e = _parse(start), _parse(end)
    dur = (e - s).total_seconds() if s and e else None
    h = _hours(dur)
    return Figures(
        events=int(events or 0),
        events_share=(events / total_events) if total_events else None,
        lines=int(lines or 0), bytes=int(nbytes or 0),
        bytes_share=(nbytes / log_bytes) if log_bytes else None,
        tokens=int(tokens or 0), cost_usd=cost, cost_basis=dict(basis or {}),
        unpriced_tokens=int(unpriced or 0), start=start, end=end, duration_s=dur,
        rate_per_s=(events / dur) if dur else None,
        usd_per_hour=(cost / h) if cost is not None and h else None,
        usd_per_day=(cost / h * 24) if cost is not None and h else None,
    )


def _owned(con) -> dict[str | None, dict]:
    """Each incident's share (and the background's, under None): they add up to the whole
    log, because every event has at most one owner, and each owner one incident."""
    rows = con.execute("""
      SELECT incident, cost_status, coalesce(sum(n) FILTER (WHERE unit), 0), sum(n),
             coalesce(sum(bytes), 0), coalesce(sum(tokens), 0), sum(cost)
      FROM _rep_groups GROUP BY ALL
      ORDER BY incident NULLS FIRST, cost_status NULLS FIRST""").fetchall()
    out: dict[str | None, dict] = {}
    for owner, status, events, lines, nbytes, tokens, cost in rows:
        o = out.setdefault(owner, {"events": 0, "lines": 0, "bytes": 0, "tokens": 0,
                                   "cost": None, "basis": {}, "unpriced": 0})
        o["events"] += int(events)
        o["lines"] += int(lines)
        o["bytes"] += int(nbytes)
        o["tokens"] += int(tokens)
        if cost is not None:
            o["cost"] = (o["cost"] or 0.0) + float(cost)
        if status is not None:
            o["basis"][status] = int(lines)
        if status == "unpriced":
            o["unpriced"] += int(tokens)
    return out


def _owned_figures(o: dict | None, start, end, total_events: int, log_bytes: int,
                   duration_s: float | None = None) -> Figures:
    """What an owner (an incident, the background) owns: its events (units of work, counted
    as the whole log's are), lines, bytes and cost, from the owner table."""
    o = o or {"events": 0, "lines": 0, "bytes": 0, "tokens": 0, "cost": None, "basis": {},
              "unpriced": 0}
    fig = _figures(events=o["events"], lines=o["lines"],
                   nbytes=o["bytes"], tokens=o["tokens"], cost=o["cost"], basis=o["basis"],
                   unpriced=o["unpriced"], start=start, end=end, total_events=total_events,
                   log_bytes=log_bytes)
    if duration_s is not None:
        h = _hours(duration_s)
        fig.duration_s = duration_s
        fig.rate_per_s = fig.events / duration_s if duration_s else None
        fig.usd_per_hour = fig.cost_usd / h if fig.cost_usd is not None and h else None
        fig.usd_per_day = fig.usd_per_hour * 24 if fig.usd_per_hour is not None else None
    return fig


@dataclass
class _Window:
    lo: dt.datetime
    hi: dt.datetime
    width_s: int
    origin_ms: int

    def bucket(self, t_ms: int) -> int:
        return int((t_ms - self.origin_ms) // (self.width_s * 1000))


def _window(x: dict) -> _Window | None:
    """The span a rate chart shows: the incident's own, with a margin either side."""
    s, e = _parse(x["start"]), _parse(x["end"])
    if not s or not e:
        return None
    span = max((e - s).total_seconds(), 1.0)
    pad = dt.timedelta(seconds=max(span * 0.15, 30.0))
    lo, hi = s - pad, e + pad
    width = nice_width((hi - lo).total_seconds(), MAX_RATE_BUCKETS)
    origin_ms = int(math.floor(_epoch_ms(lo) / (width * 1000)) * width * 1000)
    return _Window(lo, hi, width, origin_ms)


def _epoch_ms(t: dt.datetime) -> int:
    return int(round(t.replace(tzinfo=dt.UTC).timestamp() * 1000))


def _kinds(con) -> dict[str, dict[str, int]]:
    """Each incident's units of work by kind (requests, sessions started, hooks fired, ...)."""
    out: dict[str, dict[str, int]] = {}
    for inc, kind, n in con.execute("""
          SELECT incident, kind, sum(n) FROM _rep_groups WHERE unit AND incident IS NOT NULL
          GROUP BY ALL ORDER BY ALL""").fetchall():
        out.setdefault(inc, {})[kind] = int(n)
    return out


def _noun(counts: list[tuple[str, int]]) -> str:
    """What an incident's events are, in a word: `requests`, `messages`, else `events`."""
    total = sum(n for _, n in counts)
    if counts and counts[0][1] >= 0.9 * total:
        return NOUNS.get(counts[0][0], "events")
    return "events"


def _incident_inputs(con) -> dict[str, list[int]]:
    """The inputs each incident's events are in (its rate chart compares it with them)."""
    return {inc: list(ids) for inc, ids in con.execute("""
        SELECT incident, list(DISTINCT input_id ORDER BY input_id) FROM _rep_groups
        WHERE incident IS NOT NULL GROUP BY incident ORDER BY incident""").fetchall()}


def _overlaps(con, labels: dict[str, str]) -> dict[str, list[tuple[str, int]]]:
    """For each incident, the other incidents that own lines its findings claim (and how
    many): one pass over the claims, those a finding claims and another owns (findings and
    incidents by number). Such an event has two claims or more, which the facts mark
    (`shared`): the claims are joined to those few events, not to every event (a storm's
    1.27 M: 0.11 s of CPU). A saved run's facts mark every event (`runs.run_connection`)."""
    rows = con.execute("""
      SELECT x.incident, o.incident, count(DISTINCT c.event_id)
      FROM claims c JOIN (FROM _event_facts WHERE shared) e USING (event_id)
      JOIN _rep_owner x ON x.fidx = c.fidx JOIN _rep_owner o ON o.fidx = e.fidx
      WHERE e.fidx <> c.fidx AND o.incident IS NOT NULL AND o.incident <> x.incident
      GROUP BY ALL ORDER BY ALL""").fetchall()
    out: dict[str, list[tuple[str, int]]] = {}
    for claimer, owner, n in rows:
        if owner in labels:
            out.setdefault(claimer, []).append((labels[owner], int(n)))
    return {k: sorted(v, key=lambda x: (-x[1], int(x[0][1:]))) for k, v in out.items()}


def _details(details: dict) -> list[tuple[str, str]]:
    """A detector's details as key/value text, for the reader who wants the parameters."""
    out = []
    for k in sorted(details):
        v = details[k]
        if hasattr(v, "tolist"):  # numpy values from a detector
            v = v.tolist()
        if v is None or (isinstance(v, (list, dict, str)) and not v):
            continue
        if isinstance(v, float):
            text = f"{v:.4g}"
        elif isinstance(v, (dict, list)):
            text = json.dumps(v, ensure_ascii=False, sort_keys=True,
                              default=lambda x: x.tolist() if hasattr(x, "tolist") else str(x))
        else:
            text = str(v)
        if len(text) > 300:
            text = text[:299] + "…"
        out.append((k.replace("_", " "), text))
    return out


# -- one sentence ----------------------------------------------------------------------------


def _cost_phrase(fig: Figures) -> str:
    if fig.cost_usd is None:
        return "cost unpriced" if fig.unpriced_tokens or fig.tokens else "no cost recorded"
    extra = f" plus {fig.unpriced_tokens:,} unpriced tokens" if fig.unpriced_tokens else ""
    return f"estimated cost {fmt.money(fig.cost_usd)}{extra}"


VERDICT_WORDS = {"findings": "Findings", "clean": "Clean", COULD_NOT_JUDGE: "Could not judge"}


def headline(doc: dict, panels: list[Panel], totals: Figures, log_bytes: int
             ) -> list[tuple[str, str]]:
    """The sentence at the top of the report, verdict first (the CLI's words): the runaway
    loops, counted as incidents; a low incident is unusual, never a loop counted here."""
    word, said = verdict(doc)
    lead = [("b", f"{VERDICT_WORDS[word]}: "), ("t", said[:1].upper() + said[1:] + ". ")]
    what = "this log" if len(doc["inputs"]) == 1 else "these logs"
    panels = [p for p in panels if runaway(p.incident)]
    if not panels:
        return lead + [("t", f"{totals.events:,} events over {fmt.duration(totals.duration_s)}; "
                             f"{_cost_phrase(totals)} for all of it.")]
    main = max(panels, key=_importance)
    span = f"{main.own.events:,} {main.noun} over {fmt.duration(main.own.duration_s)}"
    owned_bytes = sum(p.own.bytes for p in panels)
    if len(panels) == 1 or main.own.bytes >= 0.9 * owned_bytes:
        # one loop explains (nearly) everything the incidents hold: say it the plain way
        return lead + ([("b", fmt.pct(main.own.bytes_share)),
                        ("t", f" of {what} ({span}) came from ")]
                       + main.phrase + [("t", f"; {_cost_phrase(main.own)}.")])
    owned_events = sum(p.own.events for p in panels)
    costs = [p.own.cost_usd for p in panels if p.own.cost_usd is not None]
    together = f", an estimated {fmt.money(sum(costs))}" if costs else ""
    return lead + ([("t", f"Runaway loops made {fmt.pct(log_bytes and owned_bytes / log_bytes)} "
                          f"of {what} ({owned_events:,} of {totals.events:,} events{together}). "
                          f"The {'costliest' if main.own.cost_usd else 'largest'} ({main.label}, "
                          f"{span}) came from ")]
                   + main.phrase + [("t", f"; {_cost_phrase(main.own)}.")])


def _importance(p: Panel) -> tuple:
    """Which incident the headline is about: what it explains, in dollars, then bytes."""
    sev = {"critical": 3, "high": 2, "medium": 1, "low": 0}.get(p.incident["severity"], 0)
    return (p.own.cost_usd or 0.0, p.own.bytes, sev, p.own.events, p.label)


def _title(doc: dict) -> str:
    word, _ = verdict(doc)
    n = sum(1 for i in incidents_in(doc) if runaway(i))
    if word == "findings":
        return f"loophound incident report: {n} runaway loop{'s' if n > 1 else ''}"
    if word == COULD_NOT_JUDGE:
        return "loophound report: could not judge every log"
    return "loophound report: clean, no runaway loop found"


def _kpis(r: Report) -> list[tuple[str, str, str]]:
    t = r.totals
    owned_cost = [p.own.cost_usd for p in r.panels if p.own.cost_usd is not None]
    if r.rest is not None and r.rest.cost_usd is not None:
        owned_cost.append(r.rest.cost_usd)
    findings = r.document["findings"]
    detectors = len({f["detector"] for f in findings})
    loops = [i for i in r.incidents if runaway(i)]
    unusual = len(r.incidents) - len(loops)
    out = [
        ("Runaway loops", f"{len(loops):,}",
         ", ".join(f"{n} {s}" for s, n in _severity_counts(loops))
         + (f" (from {len(findings):,} findings by {detectors} detector"
            f"{'s' if detectors != 1 else ''})" if findings else "")
         + (f"; {unusual:,} unusual pattern{'s' if unusual != 1 else ''} apart" if unusual
            else "")),
        ("Events in the log", f"{t.events:,}",
         f"{t.lines:,} lines, {fmt.size(r.log_bytes)} over {fmt.duration(t.duration_s)}"
         if r.time_ranges <= 1 else
         f"{t.lines:,} lines, {fmt.size(r.log_bytes)}, in {r.time_ranges} separate time ranges "
         f"({fmt.duration(r.active_s)} in all)"),
        ("Estimated cost of the log", fmt.money(t.cost_usd),
         f"{t.unpriced_tokens:,} tokens unpriced" if t.unpriced_tokens else "all of it"),
        ("Cost of the loops", fmt.money(sum(owned_cost)) if owned_cost else "–",
         "events attributed to incidents, each counted once"),
    ]
    if r.panels:
        main = max(r.panels, key=_importance)
        o = main.own
        burn = fmt.money(o.usd_per_hour) + "/h" if o.usd_per_hour is not None else "unpriced"
        out.append((f"Burn rate of {main.label}", burn,
                    f"{fmt.rate(o.rate_per_s)} {main.noun} while it ran"))
        out.append((f"{main.label} running for a day", fmt.money(o.usd_per_day, "unpriced"),
                    f"{o.rate_per_s * 86400:,.0f} {main.noun}" if o.rate_per_s else ""))
    return out


def _severity_counts(items: list[dict]) -> list[tuple[str, int]]:
    c = Counter(x["severity"] for x in items)
    return [(s, c[s]) for s in ("critical", "high", "medium", "low") if c[s]]


def _cost_notes(con, doc: dict) -> list[str]:
    basis = doc["totals"]["cost_basis"] or {}
    cm = doc["method"]["cost_model"]
    notes = []
    if basis.get("stated"):
        notes.append(f"{basis['stated']:,} events state their own cost in the log; those "
                     "figures are used as they are.")
    if basis.get("priced"):
        notes.append(f"{basis['priced']:,} events are priced from their tokens with price table "
                     f"{cm['price_table_version']} (override with --prices FILE).")
    if basis.get("assumed"):
        notes.append(f"Assumption: {cm['assumption']}. {basis['assumed']:,} events are priced "
                     "this way; change it with --cost-per-call (a negative value leaves them "
                     "unpriced).")
    if basis.get("unpriced"):
        models = [m or "(no model)" for (m,) in con.execute(
            "SELECT DISTINCT model FROM _rep WHERE cost_status = 'unpriced' ORDER BY 1"
        ).fetchall()]
        notes.append(f"{basis['unpriced']:,} events ({doc['totals']['unpriced_tokens']:,} tokens) "
                     f"are of models without a price ({', '.join(models)}): they are shown as "
                     "unpriced, not as $0. Add their prices with --prices FILE.")
    if not basis:
        notes.append("Nothing in these logs carries a cost, tokens or a priced call.")
    return notes


# -- the timeline ----------------------------------------------------------------------------


def nice_width(span_s: float, max_buckets: int) -> int:
    for w in NICE_WIDTHS:
        if span_s / w <= max_buckets:
            return w
    return int(math.ceil(span_s / max_buckets))


def _time_groups(con) -> list[dict]:
    """Stretches of activity, split where nothing happened for `SPLIT_GAP`: logs of different
    days or systems are not squeezed onto one axis, and three stray records a month early do
    not shrink the incident to one bar. Read from per-minute counts, so it is cheap; each
    stretch's exact bounds are its first minute's earliest event and its last minute's
    latest. Counted by minute and input first, then by minute: a DISTINCT list in one pass
    kept a set per minute for every event (0.19 s of CPU at 1.27 M events; 0.15 s so)."""
    rows = con.execute("""
      SELECT m, sum(n)::BIGINT, list(input_id ORDER BY input_id), min(lo), max(hi) FROM (
        SELECT CAST(epoch_ms(ts) // 60000 AS BIGINT) AS m, input_id,
               count(*) FILTER (WHERE unit) AS n, min(ts) AS lo, max(ts) AS hi
        FROM _rep WHERE ts IS NOT NULL GROUP BY ALL)
      GROUP BY m ORDER BY m""").fetchall()
    paths = dict(con.execute("SELECT input_id, display_path FROM _inputs").fetchall())
    groups: list[dict] = []
    split = SPLIT_GAP.total_seconds() / 60
    for m, n, inputs, lo, hi in rows:
        g = groups[-1] if groups else None
        if g is None or m - g["last"] > split:
            g = {"first": m, "last": m, "events": 0, "inputs": set(), "start": lo}
            groups.append(g)
        g["last"] = m
        g["end"] = hi
        g["events"] += n
        g["inputs"].update(inputs)
    for g in groups:  # the files each stretch holds
        g["files"] = sorted(paths.get(i, str(i)) for i in g["inputs"])
    return groups


def _group_name(files: list[str]) -> str:
    if len(files) == 1:
        return files[0]
    try:
        common = os.path.commonpath(files)
    except ValueError:
        common = ""
    return f"{common or 'logs'}/ ({len(files)} files)"


def _timeline(con, groups: list[dict], incidents: list[dict], labels: dict[str, str]
              ) -> tuple[list[TimelineGroup], list[str]]:
    total = sum(g["events"] for g in groups) or 1
    spans = [(_parse(i["start"]), _parse(i["end"])) for i in incidents]

    def has_loop(g: dict) -> bool:
        return any(s and e and s <= g["end"] and e >= g["start"] for s, e in spans)

    # the busiest stretches first; a stretch with no loop and almost no events is only named
    ranked = sorted(groups, key=lambda g: (-g["events"], g["start"]))
    keep = [g for g in ranked if has_loop(g) or g["events"] >= 0.02 * total]
    shown = keep[:MAX_TIMELINE_GROUPS]
    omitted = [f"{g['events']:,} event{'s' if g['events'] != 1 else ''} from "
               f"{fmt.when(g['start'])} to {fmt.when(g['end'])} "
               f"({_group_name(g['files'])})" for g in ranked if not any(g is x for x in shown)]
    if not shown:
        return [], omitted
    grp, bucket, params = [], [], {}
    for gi, g in enumerate(shown):
        span = max((g["end"] - g["start"]).total_seconds(), 1.0)
        g["width"] = nice_width(span, MAX_TIMELINE_BUCKETS)
        origin_s = math.floor(g["start"].replace(tzinfo=dt.UTC).timestamp() / g["width"]) * g["width"]
        g["origin_ms"] = int(origin_s * 1000)
        grp.append(f"WHEN ts BETWEEN $lo{gi} AND $hi{gi} THEN {gi}")
        bucket.append(f"WHEN ts BETWEEN $lo{gi} AND $hi{gi} THEN "
                      f"(epoch_ms(ts) - {g['origin_ms']}) // {g['width'] * 1000}")
        params |= {f"lo{gi}": g["start"], f"hi{gi}": g["end"]}
    rows = con.execute(f"""
      SELECT grp, b, owner, count(*) AS n FROM (
        SELECT CASE {" ".join(grp)} END AS grp, CAST(CASE {" ".join(bucket)} END AS BIGINT) AS b,
               coalesce(incident, '') AS owner
        FROM _rep WHERE unit AND ts IS NOT NULL)
      WHERE grp IS NOT NULL GROUP BY ALL ORDER BY 1, 2, 3""", params).fetchall()
    counts: dict[int, dict[str, dict[int, int]]] = {}
    for gi, b, owner, n in rows:
        counts.setdefault(gi, {}).setdefault(owner, {})[b] = n
    out = []
    order = {fid: i for i, fid in enumerate(labels)}
    for gi, g in enumerate(shown):
        per_owner = counts.get(gi, {})
        owners = sorted((o for o in per_owner if o), key=lambda o: (-sum(per_owner[o].values()),
                                                                      order.get(o, 1 << 30)))
        keep = sorted(owners[:MAX_TRACES_PER_GROUP], key=lambda o: order.get(o, 1 << 30))
        rest = owners[MAX_TRACES_PER_GROUP:]

        def centre(b: int, g=g) -> str:
            return _iso(dt.datetime(1970, 1, 1) + dt.timedelta(
                milliseconds=g["origin_ms"] + b * g["width"] * 1000 + g["width"] * 500))

        def series(name: str, key: str, buckets: dict[int, int], centre=centre) -> Series:
            bs = sorted(buckets)
            return Series(name, key, [centre(b) for b in bs], [int(buckets[b]) for b in bs])

        ss = [series("background (no loop)", "background", per_owner.get("", {}))]
        for o in keep:
            ss.append(series(labels.get(o, o), labels.get(o, o), per_owner[o]))
        if rest:
            merged: Counter = Counter()
            for o in rest:
                merged.update(per_owner[o])
            ss.append(series(f"{len(rest)} more runaway loops", "other", dict(merged)))
        marks = []
        for inc in incidents:
            s, e = _parse(inc["start"]), _parse(inc["end"])
            if s and e and s <= g["end"] and e >= g["start"] and inc["id"] in per_owner:
                marks.append((labels[inc["id"]], _iso(s), _iso(e)))
        out.append(TimelineGroup(_group_name(g["files"]), list(g["files"]),
                                 g["start"] < SIMULATED_BEFORE, g["width"], _iso(g["start"]),
                                 _iso(g["end"]), ss, marks))
    return out, omitted


def _rate_extra(c: _Context) -> RateChart | None:
    """The incident's events per bucket against every other event of the same files, from a
    little before it began to a little after it ended."""
    w = _window(c.incident)
    if w is None or not c.inputs:
        return None
    rows = c.con.execute("""
      SELECT (epoch_ms(ts) - $origin) // $w AS b, count(*) FILTER (WHERE incident = $inc),
             count(*)
      FROM _rep WHERE unit AND ts BETWEEN $lo AND $hi AND list_contains($inputs, input_id)
      GROUP BY b ORDER BY b""", {"origin": w.origin_ms, "w": w.width_s * 1000, "lo": w.lo,
                                 "hi": w.hi, "inputs": c.inputs,
                                 "inc": c.incident["id"]}).fetchall()
    if not rows:
        return None
    own = {b: int(n) for b, n, _ in rows}
    every = {b: int(n) for b, _, n in rows}
    first, last = w.bucket(_epoch_ms(w.lo)), w.bucket(_epoch_ms(w.hi))
    xs, ys_own, ys_other = [], [], []
    for b in range(first, last + 1):
        xs.append(_iso(dt.datetime(1970, 1, 1) + dt.timedelta(
            milliseconds=w.origin_ms + b * w.width_s * 1000 + w.width_s * 500)))
        ys_own.append(own.get(b, 0))
        ys_other.append(every.get(b, 0) - own.get(b, 0))
    return RateChart(w.width_s, xs, ys_own, ys_other, _iso(w.lo), _iso(w.hi))


def _first_claimed(con, fid: str, limit: int) -> tuple[list[int], int]:
    ids = [r[0] for r in con.execute("""
      SELECT r.event_id FROM claims c JOIN _rep r USING (event_id)
      WHERE c.finding_id = ? AND r.unit ORDER BY r.ts NULLS LAST, r.event_id LIMIT ?""",
                                     [fid, limit]).fetchall()]
    total = con.execute("SELECT count(*) FROM claims c JOIN _rep r USING (event_id) "
                        "WHERE c.finding_id = ? AND r.unit", [fid]).fetchall()[0][0]
    return ids, int(total)


def _sequence(con, f: dict) -> Sequence | None:
    """The first exchanges of a ping-pong, as arrows between the two parties."""
    ids, total = _first_claimed(con, f["id"], SEQUENCE_STEPS)
    if not ids:
        return None
    rows = con.execute(f"""
      SELECT event_id, ts, actor, target, role, depth, file, line FROM events
      WHERE {db.one_of("event_id")} ORDER BY ts NULLS LAST, event_id""",
                       {"ids": ids}).fetchall()
    d = f["details"]
    pair = [p for p in (d.get("pair") or []) if p is not None]
    names = d.get("names") or {}
    lanes_raw: list[str] = list(pair[:2])
    steps = []
    t0 = rows[0][1]
    for _, ts, actor, target, role, depth, file, line in rows:
        if len(pair) == 2:
            if actor in pair:
                sender = actor
            elif target in pair:
                sender = pair[1] if target == pair[0] else pair[0]
            else:
                sender = actor
            receiver = pair[1] if sender == pair[0] else pair[0]
        else:
            sender, receiver = actor, target
        for p in (sender, receiver):
            if p is not None and p not in lanes_raw and len(lanes_raw) < 6:
                lanes_raw.append(p)
        label = " ".join(x for x in (role, f"depth {depth}" if depth is not None else None) if x)
        steps.append({"from": sender, "to": receiver,
                      "offset_s": (ts - t0).total_seconds() if ts and t0 else None,
                      "label": label, "file": file, "line": line})
    shown = {p: str(names.get(p, p)) for p in lanes_raw}
    for s in steps:
        s["from"] = shown.get(s["from"], s["from"])
        s["to"] = shown.get(s["to"], s["to"])
    return Sequence([shown[p] for p in lanes_raw], steps, total,
                    (_parse(f["end"]) - _parse(f["start"])).total_seconds()
                    if f["start"] and f["end"] else None)


def _sequence_extra(c: _Context) -> Sequence | None:
    return _sequence(c.con, c.finding)


def _graph_extra(c: _Context) -> Graph | None:
    return _graph(c.con, c.finding)


def _graph(con, f: dict) -> Graph | None:
    """Who triggered whom among a finding's events: the cycle, drawn as a ring."""
    rows = con.execute("""
      SELECT r.actor, r.target, bool_or(r.kind = 'trigger') AS trig, count(*) AS n
      FROM claims c JOIN _rep r USING (event_id)
      WHERE c.finding_id = ? AND r.actor IS NOT NULL AND r.target IS NOT NULL
        AND r.actor <> r.target
      GROUP BY r.actor, r.target ORDER BY n DESC, r.actor, r.target""", [f["id"]]).fetchall()
    if any(t for _, _, t, _ in rows):
        rows = [r for r in rows if r[2]]
    cycle = [str(c) for c in (f["details"].get("cycle") or [])]
    degree: Counter = Counter()
    for a, b, _, n in rows:
        degree[a] += n
        degree[b] += n
    nodes = [c for c in cycle if c in degree or not rows]
    for n, _ in sorted(degree.items(), key=lambda kv: (-kv[1], kv[0])):
        if n not in nodes:
            nodes.append(n)
    nodes = nodes[:MAX_GRAPH_NODES]
    if not nodes:
        return None
    edges = [(a, b, int(n)) for a, b, _, n in rows if a in nodes and b in nodes]
    return Graph(nodes, edges, cycle)


EXTRAS = {"rate": _rate_extra, "sequence": _sequence_extra, "graph": _graph_extra}


# -- tables ----------------------------------------------------------------------------------
# Each table holds a named query's rows (queries/*.sql, as `loophound query NAME` gives them):
# the quarantine's is the query's answer; the talkers', the errors' and the cost tables are
# summed from `_rep_groups`, which holds every figure they are made of, where each query is a
# pass over every event of its own (0.35 s of 0.69 s of gathering at 1.27 M events):
# tests/test_report.py holds them to the queries' rows, column for column. What attribution
# adds to a row (how many of its events a runaway loop owns, which incidents explain them)
# is this run's.


def talker_rows(con: duckdb.DuckDBPyConnection, limit: int | None) -> list[dict]:
    """`top_talkers`' rows (every file, `no_actor=true`) as far as the report shows them
    (actor, events, errors, bytes, tokens, cost_usd), with how many of each actor's units an
    incident owns (`in_incidents`) and which (`owners`); `actors`: how many actors there are.
    An event counts (`unit`) as the query's `act` does: an action, not a message's second
    copy; `failed` as its `failed` does. No `limit`: every actor."""
    return queries.dicts(con.execute("""
      SELECT actor, coalesce(sum(n) FILTER (WHERE unit), 0) AS events,
             coalesce(sum(n) FILTER (WHERE unit AND failed), 0) AS errors,
             coalesce(sum(bytes), 0) AS bytes, coalesce(sum(tokens), 0) AS tokens,
             CAST(round(sum(cost), 6) AS DOUBLE) AS cost_usd,
             coalesce(sum(n) FILTER (WHERE unit AND incident IS NOT NULL), 0) AS in_incidents,
             coalesce(list(DISTINCT incident ORDER BY incident)
                      FILTER (WHERE incident IS NOT NULL), []) AS owners,
             count(actor) OVER () AS actors
      FROM _rep_groups GROUP BY actor
      ORDER BY events DESC, bytes DESC, actor NULLS LAST
      LIMIT $limit""", {"limit": limit}))


def error_rows(con: duckdb.DuckDBPyConnection, limit: int | None) -> list[dict]:
    """`top_errors`' rows (every file) as far as the report shows them (error, attempts,
    actors, top_actor: the most frequent, ties to the first in sort order), with how many
    attempts an incident owns (`in_incidents`) and which (`owners`). An attempt is a unit
    with an error, as the query counts it. No `limit`: every error."""
    return queries.dicts(con.execute("""
      WITH per_actor AS (
        SELECT error, actor, sum(n) AS n,
               sum(n) FILTER (WHERE incident IS NOT NULL) AS owned,
               list(DISTINCT incident) FILTER (WHERE incident IS NOT NULL) AS owners
        FROM _rep_groups WHERE unit AND error IS NOT NULL GROUP BY ALL)
      SELECT error, CAST(sum(n) AS BIGINT) AS attempts, count(actor) AS actors,
             list_sort(list({'n': -n, 'v': actor}) FILTER (WHERE actor IS NOT NULL))[1].v
               AS top_actor,
             coalesce(sum(owned), 0) AS in_incidents,
             coalesce(list_sort(list_distinct(flatten(
               list(owners) FILTER (WHERE owners IS NOT NULL)))), []) AS owners
      FROM per_actor GROUP BY error
      ORDER BY attempts DESC, error
      LIMIT $limit""", {"limit": limit}))


def _labels_of(owners: list[str], labels: dict[str, str]) -> list[str]:
    return sorted((labels[o] for o in owners if o in labels), key=lambda s: int(s[1:]))


def _talkers(con, labels: dict[str, str], total_events: int, total_bytes: int
             ) -> tuple[list[dict], int]:
    rows = talker_rows(con, TOP_ROWS)
    out = [{
        "actor": r["actor"], "events": r["events"],
        "events_share": r["events"] / total_events if total_events else None,
        "bytes": r["bytes"], "bytes_share": r["bytes"] / total_bytes if total_bytes else None,
        "errors": r["errors"], "in_incidents": r["in_incidents"], "cost_usd": r["cost_usd"],
        "tokens": r["tokens"], "incidents": _labels_of(r["owners"], labels),
    } for r in rows]
    return out, rows[0]["actors"] if rows else 0


def _errors(con, labels: dict[str, str]) -> list[dict]:
    return [{"error": r["error"], "events": r["attempts"], "in_incidents": r["in_incidents"],
             "actors": r["actors"], "top_actor": r["top_actor"],
             "incidents": _labels_of(r["owners"], labels)}
            for r in error_rows(con, TOP_ROWS + 5)]


def _cost_by_actor_model(con) -> list[dict]:
    return [{"actor": r["actor"], "model": r["model"], "basis": r["basis"],
             "items": r["events"], "tokens": r["tokens"], "cost_usd": r["cost_usd"]}
            for r in cost_rows(con, per_actor=True, limit=TOP_ROWS + 5)]


def _cost_by_model(con) -> list[dict]:
    return [{"model": r["model"], "basis": r["basis"], "items": r["events"],
             "tokens": r["tokens"], "cost_usd": r["cost_usd"], "actors": r["actors"]}
            for r in cost_rows(con, per_actor=False, limit=None)]


def cost_rows(con: duckdb.DuckDBPyConnection, per_actor: bool, limit: int | None
              ) -> list[dict]:
    """The rows of the named query `cost_by_actor_and_model` (every file, `per_actor` and
    `limit` as given), summed from `_rep_groups`: its figures are sums of the priced
    events by actor, model and basis, which the groups hold already, where the query
    joins every priced event to its actor and model (twice: 0.15 s of gathering at 1.27 M
    events). Its dollars are decimal sums, as the query's, so the rows are the same to
    the last digit (tests/test_report.py holds them to the query's). No `limit`: every row."""
    return queries.dicts(con.execute(f"""
      SELECT {"actor" if per_actor else "NULL"} AS actor, model, cost_status AS basis,
             CAST(sum(n) AS BIGINT) AS events, count(DISTINCT actor) AS actors,
             sum(tokens) AS tokens, CAST(round(sum(cost), 6) AS DOUBLE) AS cost_usd
      FROM _rep_groups WHERE cost_status IS NOT NULL
      GROUP BY ALL
      ORDER BY cost_usd DESC NULLS LAST, events DESC, actor NULLS LAST, model NULLS LAST, basis
      LIMIT $limit""", {"limit": limit}))


def _quarantine(con) -> list[dict]:
    return [{"file": r["file"], "reason": r["reason"], "lines": r["lines"]}
            for r in queries.records(con, "quarantine_summary")]

"""Attribute the log to findings: which events each finding claims, what they occupy and cost.

Every event belongs to at most one finding (the detector with the lowest rank explains it
best, then the more severe finding, then the one that began first) or to the background;
each finding also keeps its own claimed totals, so a rate spike on top of a retry storm
still says how big it was.
"""

from __future__ import annotations

import datetime as dt
import re
import weakref
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import duckdb

from .. import db
from ..store import define_message_copies, kind_counts
from .costs import CostModel, load_cost_model, price_events

if TYPE_CHECKING:  # the detectors (numpy) load when findings are attributed, not when the SQL
    from ..detect import Finding  # sandbox imports `attribute.costs` for its cost view


@dataclass
class Totals:
    events: int
    lines: int
    bytes: int
    tokens: int
    cost_usd: float | None
    cost_status: dict[str, int] = field(default_factory=dict)
    unpriced_tokens: int = 0
    start: object = None
    end: object = None


@dataclass
class Attributed:
    finding: Finding
    events: int
    lines: int
    bytes: int
    tokens: int
    cost_usd: float | None
    cost_status: dict[str, int]
    unpriced_tokens: int
    evidence: list[dict]
    exclusive_events: int = 0
    exclusive_lines: int = 0
    exclusive_bytes: int = 0
    exclusive_cost_usd: float | None = None
    # what the events it owns are, as the whole log's totals count them: actions of every
    # kind (a second stored copy of a message is not one) by kind, tokens, and cost basis
    exclusive_by_kind: dict[str, int] = field(default_factory=dict)
    exclusive_tokens: int = 0
    exclusive_unpriced_tokens: int = 0
    exclusive_cost_status: dict[str, int] = field(default_factory=dict)


# Who acted on what, and how it went: what a report reads of each event beside its owner and
# price (attribution's `_event_facts` has them `for_report`)
WHO_COLUMNS = ("actor", "target", "model", "error", "ok")


UNIT_KINDS_ALL = ("request", "message", "room_post", "session_start", "step", "llm_call",
                  "repair_attempt", "record", "connection", "config", "trigger", "audit",
                  "tool_call")


def attribute(con: duckdb.DuckDBPyConnection, findings: list[Finding],
              costs: CostModel | None = None, for_report: bool = True,
              continuing: Collection[int] | None = None,
              keep_facts: bool = True) -> tuple[list[Attributed], Totals]:
    """Claim, price and measure. Leaves the views `claims`, `claimed` and `owner` and the
    table `_event_facts` in `con` for the report. Each event is joined to its owner,
    size and price once (`_event_facts`); every figure after that, here and in the report, is
    an aggregate over that table, so a 1.2 M-event storm is read once. Who acted on what
    (actor, target, model, error) is in it only `for_report`: a scheduled scan has no use
    for those strings.

    `continuing` (a scheduled scan): the indexes of the findings that go on from the last
    scan. Those claim only the events the last scan had not seen (table `_upto` in `con`:
    per input, the first such event id), and every figure, totals included, is over those
    events and what the other findings claim: what the scan adds to the last one's.

    `keep_facts=False` (nothing reads the events' facts again: a scan neither saved nor
    reported): `_event_facts` is not written. The facts are summed in the statement that
    makes them, held meanwhile as DuckDB holds a query's intermediate result, and
    `_event_facts` is a view that makes them again for whatever asks (`facts_table` makes
    it a table). Writing the table was a third of attribution at the incident's size."""
    keep_facts = keep_facts or for_report
    _claim(con, findings)
    who = "".join(f"e.{c}, " for c in WHO_COLUMNS) if for_report else ""
    # source: the events to count; fresh: those the scan this one continues had not seen
    source, fresh = "events", "true"
    if continuing is not None:
        _keep_unseen(con, continuing, for_report)
        source, fresh = "_scope", "e.fresh"
    # one pass over the events: each with its owner and its price; `event_costs` is then the
    # priced ones (a second pass over the events, and a join of every event to its price,
    # cost a fifth of the whole again)
    priced, price_joins = price_events(con, costs or load_cost_model(), source)
    copies = define_message_copies(con) > 0  # built with the prices
    def facts(within: str) -> str:
        return f"""
            SELECT e.event_id, CAST(e.event_id >> 32 AS INTEGER) AS input_id, o.fidx, e.ts,
                   e.kind, {who} e.byte_length, {priced}, {fresh} AS fresh, o.claims > 1 AS shared
            FROM (FROM {source} {within.format(id="event_id")}) e
            LEFT JOIN (SELECT c.event_id, arg_min(c.fidx, x.prio) AS fidx, count(*) AS claims
                       FROM _claims c JOIN _findx x USING (fidx) {within.format(id="c.event_id")}
                       GROUP BY c.event_id) o
              ON o.event_id = e.event_id
            {price_joins}"""

    for i, within in enumerate(_id_ranges(con, source)):
        # what the figures sum up, from the range's facts while they are in memory
        if keep_facts:
            con.execute(f"{_made_or_added('_event_facts', not i)} {facts(within)}")
            _sum_facts(con, not i, within=within)
        else:
            _sum_facts(con, not i, made=facts(within))
    _split_sums(con, copies)
    if not keep_facts:
        con.execute(f"CREATE OR REPLACE TEMP VIEW _event_facts AS {facts('')}")
    _define_fact_views(con, copies)
    stats, basis, ends, overlaps = _claimed_figures(con, parts_made=True)
    _OVERLAPS[con] = overlaps
    evidence = _evidence(con, findings, ends)
    owns = _owned_by_kind(con)
    out = []
    for i, f in enumerate(findings):
        units, lines, nbytes, tokens, cost, unpriced, x_units, x_lines, x_bytes, x_cost = \
            stats.get(i, (0, 0, 0, 0, None, 0, 0, 0, 0, None))
        by_kind, x_tokens, x_unpriced, x_basis = owns.get(i, ({}, 0, 0, {}))
        out.append(Attributed(
            f, units, lines, int(nbytes or 0), int(tokens or 0), _num(cost), basis.get(i, {}),
            int(unpriced), evidence.get(i, []), x_units, x_lines, int(x_bytes), _num(x_cost),
            by_kind, x_tokens, x_unpriced, x_basis,
        ))
    return out, totals(con)


# Above this many events `_event_facts` is made a range of event ids at a time: the claims'
# aggregate and the join of the events to it then fit DuckDB's share of memory, where at 10x
# the incident (13.3 M claims, 12.7 M events) they spilled (that table 10.2 → 7.6 s and 8.9 →
# 5.9 s in two pairs at a load of 4.5).
FACTS_RANGE_EVENTS = 2_000_000


def _id_ranges(con: duckdb.DuckDBPyConnection, source: str) -> list[str]:
    """WHERE clauses (`{id}` the event id column) that split `source`'s event ids into ranges
    of about FACTS_RANGE_EVENTS events; one empty clause for a smaller log. Any cuts give the
    same table; these keep the ranges even: an input's ids are its lines (and a few bits for
    several events of one line), so equal spans of one hold about equal numbers, and small
    inputs share a range."""
    total = sum(kind_counts(con).values()) if source == "events" else con.execute(
        f"SELECT count(*) FROM {source}").fetchall()[0][0]
    if total <= FACTS_RANGE_EVENTS:
        return [""]
    cuts, held = [], 0  # held: events of small inputs since the last cut
    for lo, hi, n in con.execute(f"""SELECT min(event_id), max(event_id), count(*)
                                     FROM {source} GROUP BY event_id >> 32 ORDER BY 1""").fetchall():
        if n > FACTS_RANGE_EVENTS:
            parts = -(-n // FACTS_RANGE_EVENTS)
            cuts += [lo - 1] if held else []
            cuts += [lo + (hi - lo + 1) * k // parts - 1 for k in range(1, parts)] + [hi]
            held = 0
        elif (held := held + n) >= FACTS_RANGE_EVENTS:
            cuts.append(hi)
            held = 0
    bounds = [None, *(cuts[:-1] if not held else cuts), None]
    return ["WHERE " + " AND ".join(([f"{{id}} > {a}"] if a is not None else [])
                                    + ([f"{{id}} <= {b}"] if b is not None else []))
            for a, b in zip(bounds, bounds[1:], strict=False)]


def _made_or_added(table: str, first: bool) -> str:
    """SQL before a SELECT: the temporary `table` made of its rows (`first`: the first range
    of `_id_ranges`), or the rows added to it (a later range)."""
    return f"CREATE OR REPLACE TEMP TABLE {table} AS" if first else f"INSERT INTO {table}"


def _define_fact_views(con: duckdb.DuckDBPyConnection, copies: bool) -> None:
    """`event_costs`, `owner` and `claimed` over `_event_facts`. `event_costs` is a view: a
    scan reads the facts themselves, and a table of them was a pass over every event (1.1 s
    at 10x the incident) for the notebook that asks."""
    con.execute("""CREATE OR REPLACE TEMP VIEW event_costs AS
        SELECT event_id, cost_usd, cost_status, tokens FROM _event_facts
        WHERE cost_status IS NOT NULL""")
    con.execute("""CREATE OR REPLACE TEMP VIEW owner AS
        SELECT o.event_id, o.fidx, x.finding_id FROM _event_facts o JOIN _findx x USING (fidx)""")
    define_claimed(con, copies)


def define_claimed(con: duckdb.DuckDBPyConnection, copies: bool) -> None:
    """The view `claimed`: every claim with its event's facts, read once (`_claimed_figures`;
    at 12 M claims a table of them was 1 GB that DuckDB had to hold or spill). An event
    claimed once (`shared` false in `_event_facts`: nearly every event of a storm) is its
    owner's claim, read from `_event_facts` alone; only the claims of events claimed more
    than once are joined to their facts (joining every claim built a hash table of every
    claimed event: 3.4 s of a 10x scan, 0.2 s at 1x). A unit is counted once: a second
    stored copy (`copies`: there are some) only when its first is not claimed (owned) by the
    same finding."""
    con.execute(f"CREATE OR REPLACE TEMP VIEW claimed AS {_claimed(copies)}")


# The owner of each event that a stored second copy is a copy of (`_copies.canon`), from the
# claims: what `_event_facts` says of it, whichever range of events the facts at hand hold.
CANON_OWNERS = """(SELECT c.event_id, arg_min(c.fidx, x.prio) AS fidx
    FROM _claims c JOIN _findx x USING (fidx) SEMI JOIN _copies k ON k.canon = c.event_id
    GROUP BY c.event_id)"""


def _claimed(copies: bool, facts: str = "_event_facts", every: bool = True) -> str:
    """The SELECT of `claimed` (`define_claimed`) over the events' facts in `facts`; not
    `every`: only the claims that `_event_sums_of` cannot count, those of events claimed
    more than once and of second copies (the rest is every event claimed once)."""
    def columns(claim: str) -> tuple[str, str, str]:
        if not copies:
            return ("u.kind IS NOT NULL",) * 2 + ("",)
        return ("u.kind IS NOT NULL AND (cp.canon IS NULL OR c2.event_id IS NULL)",
                "u.kind IS NOT NULL AND (cp.canon IS NULL OR o2.event_id IS NULL)",
                f"""LEFT JOIN _copies cp USING (event_id)
        LEFT JOIN _claims c2 ON c2.fidx = {claim}.fidx AND c2.event_id = cp.canon
        LEFT JOIN {CANON_OWNERS} o2 ON o2.fidx = {claim}.fidx AND o2.event_id = cp.canon""")

    (unit, owned_unit, joins), (unit1, owned_unit1, joins1) = columns("c"), columns("e")
    once = f"""
        SELECT e.fidx, e.event_id, true AS owned, e.fidx AS owner, e.byte_length, e.ts,
               {unit1} AS is_unit, {owned_unit1} AS is_owned_unit,
               e.tokens, e.cost_usd, e.cost_status
        FROM {facts} e
        {joins1}
        LEFT JOIN finding_units u ON u.fidx = e.fidx AND u.kind = e.kind
        WHERE NOT e.shared {"" if every else "AND cp.canon IS NOT NULL"}
        UNION ALL"""
    return f"""{once if every or copies else ""}
        SELECT c.fidx, c.event_id, e.fidx = c.fidx AS owned, e.fidx AS owner, e.byte_length, e.ts,
               {unit} AS is_unit, {owned_unit} AS is_owned_unit,
               e.tokens, e.cost_usd, e.cost_status
        FROM _claims c
        JOIN (FROM {facts} WHERE shared) e USING (event_id)
        {joins}
        LEFT JOIN finding_units u ON u.fidx = c.fidx AND u.kind = e.kind"""


# Dollars summed as decimals (to 10⁻¹² $): a float sum depends on the order of its rows, which
# the claims' order, the plan and DuckDB's threads decide; the last digit of a cost must not.
DECIMAL_SUM = "sum(CAST(cost_usd AS DECIMAL(38, 12)))"


# per connection: what claim_overlaps reads, worked out by attribution's pass over the claims
_OVERLAPS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


# A claimed unit's place in (time, event id) order as one number, NULL times last (as a
# pair orders them): the time in microseconds (±infinity at either end) times 2⁶³, plus the
# event id (never negative: an input's number, then its line). `min`/`max` of one integer
# cost a seventh of the claims' pass less than of the pair; `_event_of` reads the id back.
UNIT_ORDER = """(coalesce(epoch_us(ts), CASE WHEN ts IS NULL THEN 9223372036854775808
                                          WHEN ts > TIMESTAMP '1970-01-01' THEN 9223372036854775807
                                          ELSE -9223372036854775808 END)::HUGEINT
               * 9223372036854775808 + event_id)"""


def _event_of(order: int) -> int:
    """The event id in a UNIT_ORDER number."""
    return order & (2**63 - 1)


def _add_parts(con: duckdb.DuckDBPyConnection, within: str = "", first: bool = True) -> None:
    """`_parts` (see `_claimed_figures`), made (`first`) or added to from the claims of the
    events `within` (a clause of `_id_ranges`): parts of one key from several ranges are
    summed again like any others. The first and last units are the smallest and largest
    of their UNIT_ORDER numbers."""
    con.execute(f"{_made_or_added('_parts', first)} {_parts_of('claimed', within)}")


def _parts_of(claimed: str, within: str = "") -> str:
    """The SELECT of `_parts` from the claims in `claimed` (`_add_parts`)."""
    return f"""
        SELECT fidx, cost_status, CASE WHEN owned THEN NULL ELSE owner END AS other, owned,
          CAST(event_id >> 32 AS INTEGER) AS input_id,
          count(*) FILTER (WHERE is_unit) AS units, count(*) AS n, sum(byte_length) AS bytes,
          sum(coalesce(tokens, 0)) AS tokens, {DECIMAL_SUM} AS cost,
          sum(tokens) FILTER (WHERE cost_status = 'unpriced') AS unpriced,
          count(*) FILTER (WHERE is_owned_unit AND owned) AS owned_units,
          min({UNIT_ORDER}, 3) FILTER (WHERE is_unit) AS first,
          max({UNIT_ORDER}) FILTER (WHERE is_unit) AS last
        FROM {claimed} {within.format(id="event_id")} GROUP BY ALL"""


def _claimed_figures(con: duckdb.DuckDBPyConnection, parts_made: bool = False):
    """Every figure attribution takes from the claims, in one pass over `claimed`: per
    finding its counts and sums (`stats`), events per cost basis (`basis`), its first three
    and last unit events by time (`ends`), and per (finding, other owner) how many events
    and in which inputs (`overlaps`). The pass sums the claims by finding, cost basis,
    owner and input (a few rows: `_parts`), and the figures are those rows summed again, by
    finding alone, with its cost basis, with its other owner (dollars as decimals, which
    add up exactly however they are grouped; the first and last events are the first and
    last of each part's own). Grouping sets straight over the claims computed every
    aggregate for every set, three passes over a million claims. `parts_made`: attribution
    made `_parts` as it made the facts (`_add_parts`)."""
    if not parts_made:
        _add_parts(con)
    try:
        rows = con.execute("""
            SELECT fidx, cost_status, other, grouping(cost_status) AS by_status,
              grouping(other) AS by_other,
              sum(units), sum(n), sum(bytes), sum(tokens), CAST(sum(cost) AS DOUBLE),
              coalesce(sum(unpriced), 0),
              coalesce(sum(owned_units) FILTER (WHERE owned), 0),
              coalesce(sum(n) FILTER (WHERE owned), 0),
              coalesce(sum(bytes) FILTER (WHERE owned), 0),
              CAST(sum(cost) FILTER (WHERE owned) AS DOUBLE),
              max(last), list(DISTINCT input_id ORDER BY input_id)
            FROM _parts
            GROUP BY GROUPING SETS ((fidx), (fidx, cost_status), (fidx, other))
            ORDER BY ALL""").fetchall()
        first = {fidx: [_event_of(k) for k in ks] for fidx, ks in con.execute("""
            SELECT fidx, min(k, 3) FROM (SELECT fidx, unnest(first) AS k FROM _parts)
            GROUP BY fidx""").fetchall()}
    finally:
        con.execute("DROP TABLE IF EXISTS _parts")
    stats, basis, ends, overlaps = {}, {}, [], []
    for fidx, status, other, by_status, by_other, *figures in rows:
        if by_status and by_other:  # (fidx)
            stats[fidx] = tuple(figures[:10])
            if figures[10] is not None:  # it claims a unit
                ends.append((fidx, first[fidx], _event_of(figures[10])))
        elif by_other:  # (fidx, cost_status)
            if status is not None:
                basis.setdefault(fidx, {})[status] = figures[1]
        else:  # (fidx, other)
            overlaps.append((fidx, other, figures[11], figures[1]))
    return stats, basis, ends, overlaps


def _event_sums_of(facts: str, within: str = "") -> str:
    """The SELECT of the event sums (`_sums`): the events' facts in `facts` (those `within`, a clause of
    `_id_ranges`) summed by owner, kind, cost basis, whether the scan had seen the event
    before (`fresh`), whether it is a second stored copy (`copy`), whether it is claimed
    more than once (`shared`) and input: a few rows. Both the whole log's figures
    (`_fact_groups`) and the claims of the events claimed once (`_parts`) are these rows
    summed again: one pass over the events where there were two (and one more, and a join
    of a million claims to the findings' unit kinds). Dollars are decimals, which add up
    exactly however they are grouped; the first and last units, UNIT_ORDER numbers, are
    kept of what can be a claimed unit. `special`: the facts of the events whose claims
    the sums cannot count (claimed twice, or a claimed second copy), few, listed in their
    row: each fact is then read once, not held for a second look."""
    return f"""
        SELECT e.fidx, e.kind, e.cost_status, e.fresh, cp.event_id IS NOT NULL AS copy,
               e.shared, CAST(e.event_id >> 32 AS INTEGER) AS input_id,
               count(*) AS n, sum(e.byte_length) AS bytes, sum(e.tokens) AS tokens,
               {DECIMAL_SUM} AS cost,
               sum(e.tokens) FILTER (WHERE e.cost_status = 'unpriced') AS unpriced,
               min(e.ts) AS first_ts, max(e.ts) AS last_ts,
               min({UNIT_ORDER}, 3) FILTER (WHERE e.fidx IS NOT NULL) AS first,
               max({UNIT_ORDER}) FILTER (WHERE e.fidx IS NOT NULL) AS last,
               list(struct_pack(event_id := e.event_id, fidx := e.fidx, kind := e.kind,
                                byte_length := e.byte_length, ts := e.ts, tokens := e.tokens,
                                cost_usd := e.cost_usd, cost_status := e.cost_status,
                                shared := e.shared))
                 FILTER (WHERE e.shared OR (cp.event_id IS NOT NULL AND e.fidx IS NOT NULL))
                 AS special
        FROM {facts} e LEFT JOIN _copies cp USING (event_id)
        {within.format(id="e.event_id")} GROUP BY ALL"""


def _sum_facts(con: duckdb.DuckDBPyConnection, first: bool, within: str = "",
               made: str | None = None) -> None:
    """`_sums` (`_event_sums_of`) made (`first`) or added to, from the events `within` of
    `_event_facts`, or from the facts `made` (a SELECT of its rows) as they are made: not
    written as a table, which cost more than making them (0.09 of 0.24 s at the incident's
    size)."""
    facts = "_event_facts" if made is None else f"({made})"
    con.execute(f"{_made_or_added('_sums', first)} {_event_sums_of(facts, within)}")


def _split_sums(con: duckdb.DuckDBPyConnection, copies: bool) -> None:
    """`_sums` (`_sum_facts`) as the tables `_parts` (the claims' parts: those of events
    claimed once, their own owner's, from the sums; the others from the claims of the
    special events) and `_fact_groups` (the sums by owner, kind, cost basis, `fresh` and
    `copy`, which the findings' owned actions (`_owned_by_kind`) and the whole log's
    `totals` sum again)."""
    con.execute("CREATE OR REPLACE TEMP TABLE _special_facts AS "
                "SELECT unnest(special, recursive := true) FROM _sums WHERE special IS NOT NULL")
    con.execute(f"""CREATE OR REPLACE TEMP TABLE _parts AS
        {_parts_of(f"({_claimed(copies, '_special_facts', every=False)})")}
        UNION ALL
        SELECT s.fidx, s.cost_status, CAST(NULL AS INTEGER), true, s.input_id,
               CASE WHEN u.kind IS NULL THEN 0 ELSE s.n END, s.n, s.bytes,
               coalesce(s.tokens, 0), s.cost, s.unpriced,
               CASE WHEN u.kind IS NULL THEN 0 ELSE s.n END,
               CASE WHEN u.kind IS NOT NULL THEN s.first END,
               CASE WHEN u.kind IS NOT NULL THEN s.last END
        FROM _sums s LEFT JOIN finding_units u ON u.fidx = s.fidx AND u.kind = s.kind
        WHERE s.fidx IS NOT NULL AND NOT s.shared AND NOT s.copy""")
    con.execute("""CREATE OR REPLACE TEMP TABLE _fact_groups AS
        SELECT fidx, kind, cost_status, fresh, copy, CAST(sum(n) AS BIGINT) AS n,
               sum(bytes) AS bytes, sum(tokens) AS tokens, sum(cost) AS cost,
               sum(unpriced) AS unpriced, min(first_ts) AS first, max(last_ts) AS last
        FROM _sums GROUP BY ALL""")
    con.execute("DROP TABLE _sums")
    con.execute("DROP TABLE _special_facts")


def facts_table(con: duckdb.DuckDBPyConnection, who: bool = False) -> None:
    """`_event_facts` as a table, for what reads it many times (a report), with who acted on
    what (WHO_COLUMNS) when `who`: a scan that kept nothing left it a view
    (`attribute(keep_facts=False)`), one without a report in mind left those columns out."""
    is_view = con.execute("SELECT count(*) FROM duckdb_views() "
                          "WHERE temporary AND view_name = '_event_facts'").fetchall()[0][0] > 0
    has = {c for (c,) in con.execute("SELECT column_name FROM (DESCRIBE _event_facts)").fetchall()}
    add = who and "actor" not in has
    if not (is_view or add):
        return
    extra, join = ("".join(f", e.{c}" for c in WHO_COLUMNS),
                   "JOIN events e USING (event_id)") if add else ("", "")
    con.execute(f"CREATE OR REPLACE TEMP TABLE _event_facts_made AS "
                f"SELECT f.* {extra} FROM _event_facts f {join}")
    con.execute(f"DROP {'VIEW' if is_view else 'TABLE'} _event_facts")
    con.execute("ALTER TABLE _event_facts_made RENAME TO _event_facts")


def _owned_by_kind(con: duckdb.DuckDBPyConnection
                   ) -> dict[int, tuple[dict[str, int], int, int, dict[str, int]]]:
    """Per owning finding: its owned actions by kind (counted as the totals count them, so a
    finding's, an incident's and the background's add up to the whole log), its owned tokens,
    unpriced tokens and events per cost basis. From `_fact_groups`."""
    rows = con.execute("""
        SELECT fidx, kind, cost_status,
               coalesce(sum(n) FILTER (WHERE list_contains($units, kind) AND NOT copy), 0),
               sum(n), coalesce(sum(tokens), 0)
        FROM _fact_groups WHERE fidx IS NOT NULL GROUP BY ALL ORDER BY ALL""",
                       {"units": list(UNIT_KINDS_ALL)}).fetchall()
    out: dict[int, tuple[dict[str, int], int, int, dict[str, int]]] = {}
    for fidx, kind, status, actions, n, tokens in rows:
        by_kind, tok, unpriced, basis = out.get(fidx, ({}, 0, 0, {}))
        if actions:
            by_kind[kind] = by_kind.get(kind, 0) + int(actions)
        if status is not None:
            basis[status] = basis.get(status, 0) + int(n)
        out[fidx] = (by_kind, tok + int(tokens),
                     unpriced + (int(tokens) if status == "unpriced" else 0), basis)
    return out


def claim_overlaps(con: duckdb.DuckDBPyConnection
                   ) -> tuple[dict[int, list[str]], dict[tuple[int, int], int]]:
    """What grouping findings into incidents needs of their claims: the input files each
    finding claims events in, and for two findings, how many events one claims that the other
    owns (a signal's events that the loop's finding explains better). Attribution counted
    them in its pass over the claims, which pairs every claim with the event's owner."""
    paths = dict(con.execute("SELECT input_id, path FROM inputs").fetchall())
    files: dict[int, list[str]] = {}
    shared: dict[tuple[int, int], int] = {}
    for fidx, owner, inputs, n in _OVERLAPS.get(con) or _claimed_figures(con)[3]:
        files.setdefault(fidx, [])
        files[fidx] = sorted(set(files[fidx]) | {paths.get(i, str(i)) for i in inputs})
        if owner is not None:
            shared[(fidx, owner)] = int(n)
    return files, shared


def priority(f: Finding) -> tuple:
    """Which finding explains an event best, the first: the most specific detector (lowest
    rank), then the most severe finding, then the one that began first."""
    from ..detect import DETECTORS
    from ..detect.base import severity_rank

    rank = DETECTORS[f.detector].rank if f.detector in DETECTORS else 99
    return (rank, -severity_rank(f.severity), f.start or dt.datetime.max, f.id)


def _claim(con: duckdb.DuckDBPyConnection, findings: list[Finding]) -> None:
    """`_claims`: every finding's events (by index), with the answer lines of its requests."""
    # `_claims` holds integers only (a finding's index, an event); `claims` names the finding
    con.execute("CREATE OR REPLACE TEMP TABLE _claims (fidx INTEGER, event_id BIGINT)")
    order = sorted(range(len(findings)), key=lambda i: priority(findings[i]))
    units = [(i, k) for i, f in enumerate(findings) for k in f.unit_kinds]
    db.temp_table(con, "finding_units", {"fidx": ("INTEGER", [u[0] for u in units]),
                                         "kind": ("VARCHAR", [u[1] for u in units])})
    # prio: who explains an event best, as one integer (detector rank, severity, then id)
    db.temp_table(con, "_findx", {"fidx": ("INTEGER", order),
                                  "finding_id": ("VARCHAR", [findings[i].id for i in order]),
                                  "prio": ("INTEGER", list(range(len(order))))})
    con.execute("""CREATE OR REPLACE TEMP VIEW claims AS
        SELECT x.finding_id, c.event_id, c.fidx FROM _claims c JOIN _findx x USING (fidx)""")
    for sql, members in _claim_groups(findings, order):
        if (len(members) <= CLAIM_ONE_BY_ONE
                or not _claim_together(con, sql, [(i, findings[i]) for i in members])):
            for i in members:
                con.execute(f"INSERT INTO _claims SELECT {_distinct(sql)} {i}, event_id "
                            f"FROM ({sql})", findings[i].claim_params or None).fetchall()
    _claim_answer_lines(con)


# Up to this many findings of one claim SQL are claimed a statement each: with its parameters
# constants, DuckDB filters in the scan and skips row groups by their times, which the LATERAL
# of `_claim_together` cannot (two repeated_error findings of the second-storm log: 0.09 s of
# CPU against 0.20 s; two unusual_actor findings of the incident 0.012 s against 0.066 s);
# beyond it, one statement for them all (226 findings a statement each took 11.5 s of an
# 18.5 s scan). Copies of the incident's unusual_actor findings: even at six, LATERAL's at 12.
CLAIM_ONE_BY_ONE = 6
_PARAM = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
# a claim that is one condition over `events` (no subquery, join or union in it: the shape
# `claim_units` and most detectors write) names each event at most once, as the view has one
# row per event
_ONE_FILTER = re.compile(
    r"\s*SELECT\s+(?:e\.)?event_id\s+FROM\s+events(?:\s+e)?\s+WHERE\s"
    r"(?:(?!\b(?:SELECT|JOIN|UNION)\b).)*",
    re.IGNORECASE | re.DOTALL)


def _distinct(sql: str) -> str:
    """`DISTINCT`, unless the claim SQL cannot name an event twice: hashing every claimed event
    to find none twice took a storm ten times the incident's a second of single-threaded CPU
    (6 M events), of an INSERT that takes one without it."""
    return "" if _ONE_FILTER.fullmatch(sql) else "DISTINCT"


def _claim_groups(findings: list[Finding], order: list[int]) -> list[tuple[str, list[int]]]:
    """Findings by their claim SQL and the names of its parameters, in priority order: a
    detector's findings share one SQL and differ in its parameters."""
    groups: dict[tuple[str, tuple[str, ...]], list[int]] = {}
    for i in order:
        f = findings[i]
        groups.setdefault((f.claim_sql, tuple(sorted(f.claim_params or {}))), []).append(i)
    return [(sql, members) for (sql, _), members in groups.items()]


def _claim_together(con: duckdb.DuckDBPyConnection, sql: str,
                    members: list[tuple[int, Finding]]) -> bool:
    """Claim the events of findings sharing one claim SQL in one statement: their
    parameters as rows of a table, the SQL run for each row as a LATERAL subquery. One query
    per finding read the store's events once per finding (50 ms each on a store of a few
    thousand small agent transcripts: 11.5 s of an 18.5 s scan for 226 findings). False when
    DuckDB cannot bind a parameter's values as one column or run the SQL so (the caller then
    claims one by one; a failed statement inserts nothing)."""
    names = sorted(members[0][1].claim_params or {})
    if not names or not set(_PARAM.findall(sql)) <= set(names):
        return False
    cols = ", ".join(f"unnest($p{k}) AS {name}" for k, name in enumerate(names))
    values = {f"p{k}": [f.claim_params[name] for _, f in members] for k, name in enumerate(names)}
    try:
        con.execute(f"CREATE OR REPLACE TEMP TABLE _claim_params AS "
                    f"SELECT unnest($fidx) AS _fidx, {cols}",
                    {"fidx": [i for i, _ in members]} | values).fetchall()
    except duckdb.Error:
        return False
    inner = _PARAM.sub(lambda m: f"_claim_params.{m.group(1)}", sql)
    try:
        # one row per finding (`_fidx`), so each row's events are what the SQL names alone
        con.execute(f"INSERT INTO _claims SELECT {_distinct(sql)} _claim_params._fidx, q.event_id "
                    f"FROM _claim_params, LATERAL ({inner}) q").fetchall()
    except duckdb.Error:
        return False
    finally:
        con.execute("DROP TABLE _claim_params")
    return True


def _keep_unseen(con: duckdb.DuckDBPyConnection, continuing: Collection[int],
                 for_report: bool) -> None:
    """Continuing findings give up the events the last scan counted for them; `_scope` holds
    what is left to count, read from the window once: the unseen events, and every event
    some finding still claims, with what pricing and counting them needs."""
    con.execute("""DELETE FROM _claims USING _upto u
        WHERE u.input_id = _claims.event_id >> 32 AND _claims.event_id < u.upto
          AND list_contains(?, _claims.fidx)""", [sorted(continuing)]).fetchall()
    who = "e.actor, e.target, e.error," if for_report else ""
    con.execute(f"""CREATE OR REPLACE TEMP TABLE _scope AS
        SELECT e.event_id, e.ts, e.kind, e.byte_length, {who} e.model, e.tokens_in,
               e.tokens_out, e.tokens_cache_read, e.tokens_cache_write, e.cost_usd,
               e.event_id >= coalesce(u.upto, 0) AS fresh
        FROM events e LEFT JOIN _upto u ON u.input_id = e.event_id >> 32
        WHERE e.event_id >= coalesce(u.upto, 0) OR e.event_id IN (SELECT event_id FROM _claims)""")


def _claim_answer_lines(con: duckdb.DuckDBPyConnection) -> None:
    """The response and lifecycle lines of every claimed request join its claims: one join
    for all findings, on the request's event id that ingest recorded in `answers`."""
    con.execute("""
        INSERT INTO _claims
        SELECT c.fidx, a.event_id
        FROM (SELECT event_id, answers FROM events WHERE answers IS NOT NULL) a
        JOIN _claims c ON c.event_id = a.answers""").fetchall()


def _num(v) -> float | None:
    return None if v is None else float(v)


def _evidence(con: duckdb.DuckDBPyConnection, findings: list[Finding],
              ends: list[tuple[int, list[int], int]]) -> dict[int, list[dict]]:
    """The lines a reader should look at: the detector's own picks (e.g. the session.close the
    caller ignored), then the first claimed actions and the last (`ends`: per finding, its
    first three unit events by time and its last)."""
    wanted = sorted({e for _, first, last in ends for e in [*first, last]})
    where = dict(((r[0]), {"file": r[1], "line": r[2]}) for r in con.execute(
        "SELECT event_id, file, line FROM events WHERE " + db.one_of("event_id"),
        {"ids": wanted}).fetchall()) if wanted else {}
    picks = {fidx: ([where[e] for e in first if e in where], where.get(last))
             for fidx, first, last in ends}
    out = {}
    for i, f in enumerate(findings):
        chosen = [e.as_dict() for e in f.evidence]
        first, last = picks.get(i, ([], None))
        room = max(f.evidence_limit - len(chosen) - 1, 1)
        chosen += [{"file": p["file"], "line": p["line"]} for p in first[:room]]
        if last:
            chosen.append({"file": last["file"], "line": last["line"]})
        seen, unique = set(), []
        for e in chosen:
            key = (e["file"], e["line"])
            if key not in seen:
                seen.add(key)
                unique.append(e)
        out[i] = unique
    return out


def totals(con: duckdb.DuckDBPyConnection) -> Totals:
    """The whole log's figures (a scheduled scan's: those of the events new to it), summed
    from `_fact_groups`."""
    row = con.execute("""
      SELECT coalesce(sum(n) FILTER (WHERE list_contains($units, kind)), 0)
               - coalesce(sum(n) FILTER (WHERE copy), 0),
             coalesce(sum(n), 0), coalesce(sum(bytes), 0), coalesce(sum(tokens), 0),
             CAST(sum(cost) AS DOUBLE), coalesce(sum(unpriced), 0), min(first), max(last)
      FROM _fact_groups WHERE fresh""",
                      {"units": list(UNIT_KINDS_ALL)}).fetchall()[0]
    status = dict(con.execute(
        "SELECT cost_status, sum(n) FROM _fact_groups WHERE fresh AND cost_status IS NOT NULL "
        "GROUP BY 1 ORDER BY 1").fetchall())
    return Totals(row[0], row[1], int(row[2]), int(row[3]),
                  None if row[4] is None else float(row[4]), status, int(row[5]), row[6], row[7])


__all__ = ["Attributed", "CostModel", "Totals", "attribute", "claim_overlaps", "facts_table",
           "load_cost_model", "priority"]

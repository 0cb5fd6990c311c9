"""Prices come from a maintained table (genai-prices, its snapshot bundled: offline), cache
tokens at their own rates; a model no table knows stays unpriced, never $0."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loophound.attribute import WHO_COLUMNS
from loophound.attribute.costs import load_cost_model, table_version
from loophound.ingest import IngestOptions, ingest
from loophound.scan import scan_store
from loophound.store import Store

MAPPING = {"fields": {"time": "ts", "actor": "agent", "model": "model", "tokens_in": "in",
                      "tokens_out": "out", "tokens_cache_read": "cache_read",
                      "tokens_cache_write": "cache_write"},
           "constants": {"kind": "llm_call"}, "auto": False}


def _store(tmp_path, rows, prices=None):
    log = tmp_path / "calls.jsonl"
    log.write_text("".join(json.dumps({"ts": 1750000000 + i, "agent": "a", **r}) + "\n"
                           for i, r in enumerate(rows)))
    store = Store(tmp_path / "st")
    ingest([str(log)], store, IngestOptions(format="generic", mapping=MAPPING))
    doc = scan_store(store, costs=load_cost_model(prices), save=False).document
    return doc, store


def test_cache_tokens_are_priced_at_their_own_rates(tmp_path):
    # claude-sonnet-4-5: $3 input, $15 output, $0.30 cache read, $3.75 cache write per million
    doc, _ = _store(tmp_path, [
        {"model": "claude-sonnet-4-5", "in": 1000, "out": 200, "cache_read": 10000,
         "cache_write": 2000},
    ])
    totals = doc["totals"]
    assert totals["cost_basis"] == {"priced": 1}
    expected = (1000 * 3 + 200 * 15 + 10000 * 0.30 + 2000 * 3.75) / 1e6
    assert totals["cost_usd"] == pytest.approx(expected)
    assert doc["method"]["cost_model"]["price_table_version"] == table_version()
    assert table_version().startswith("genai-prices ")


def test_an_unknown_model_is_unpriced_never_zero_and_a_price_file_overrides(tmp_path):
    rows = [{"model": "llama3.1:8b", "in": 500, "out": 50},
            {"model": "gpt-4o", "in": 1_000_000, "out": 0}]
    doc, _ = _store(tmp_path, rows)
    t = doc["totals"]
    assert t["cost_basis"] == {"priced": 1, "unpriced": 1}
    assert t["unpriced_tokens"] == 550 and t["cost_usd"] == pytest.approx(2.50)
    prices = tmp_path / "prices.toml"
    prices.write_text('version = "ours-1"\n[models."llama3.1:8b"]\ninput = 0.1\noutput = 0.2\n')
    (tmp_path / "again").mkdir()
    doc, _ = _store(tmp_path / "again", rows, prices)
    assert doc["totals"]["cost_basis"] == {"priced": 2}
    assert doc["totals"]["cost_usd"] == pytest.approx(2.50 + (500 * 0.1 + 50 * 0.2) / 1e6)
    assert doc["method"]["cost_model"]["price_table_version"].endswith("+ours-1")


def test_findings_claimed_together_or_one_by_one_are_the_same(tmp_path, monkeypatch):
    """Attribution claims a detector's findings in one LATERAL statement when it has more than
    a few (CLAIM_ONE_BY_ONE); claimed one query a finding (the few, and the fallback) every
    figure, cost to the last digit, is the same: dollars are summed exactly, whatever order
    the claims come in."""
    import loophound.attribute as attribution
    from loophound.synth import write_samples

    write_samples(tmp_path / "logs", seed=5)
    store = Store(tmp_path / "st")
    ingest([str(tmp_path / "logs")], store)

    def document() -> str:
        d = scan_store(store).document
        return json.dumps({k: d[k] for k in ("findings", "incidents", "totals")}, sort_keys=True,
                          default=str)

    grouped = attribution._claim_together
    took: list[tuple[int, bool]] = []  # (findings in the statement, claimed)
    monkeypatch.setattr(attribution, "_claim_together",
                        lambda con, sql, members: took.append(
                            (len(members), grouped(con, sql, members))) or took[-1][1])
    by_default = document()  # a few a statement each, more in one
    assert (True in {ok for _, ok in took}
            and min(n for n, _ in took) > attribution.CLAIM_ONE_BY_ONE)
    took.clear()
    monkeypatch.setattr(attribution, "CLAIM_ONE_BY_ONE", 1)  # any two in one statement
    together = document()
    assert any(2 <= n <= 6 for n, ok in took if ok), "no few findings were claimed together"
    monkeypatch.setattr(attribution, "_claim_together", lambda *args: False)
    assert json.loads(together)["findings"] and document() == together == by_default


@pytest.mark.parametrize(("sql", "once"), [
    ("SELECT e.event_id FROM events e WHERE e.ts BETWEEN $start AND $stop "
     "AND e.actor IS NOT DISTINCT FROM $actor", True),
    ("SELECT event_id FROM events\nWHERE kind = 'request' AND list_contains($ids, corr_id)", True),
    ("SELECT e.event_id FROM events e WHERE e.x IN (SELECT y FROM t)", False),
    ("SELECT e.event_id FROM events e WHERE e.a = 1 UNION ALL SELECT 7", False),
    ("SELECT e.event_id FROM events e JOIN t USING (x) WHERE e.a = 1", False),
    ("SELECT e.event_id FROM events e, t WHERE e.a = t.a", False),
    ("SELECT e2.event_id FROM events e2 WHERE e2.a = 1", False),
    ("SELECT CAST(unnest($ids) AS BIGINT) AS event_id", False),
])
def test_a_claim_is_deduplicated_unless_it_is_one_filter_over_the_events(sql, once):
    """An event can be named twice only by a join, a union or a subquery (or a list of ids):
    those claims are made DISTINCT; one condition over `events` is not, which at 6 M claimed
    events saves a second of single-threaded hashing."""
    from loophound.attribute import _distinct

    assert _distinct(sql) == ("" if once else "DISTINCT")


def test_claims_made_without_distinct_are_those_made_with_it(tmp_path, monkeypatch):
    """Every claim of the samples is one row per (finding, event), and the figures are those
    of claims all made DISTINCT."""
    import loophound.attribute as attribution
    from loophound.synth import write_samples

    write_samples(tmp_path / "logs", seed=5)
    store = Store(tmp_path / "st")
    ingest([str(tmp_path / "logs")], store)
    used = []
    decide = attribution._distinct
    monkeypatch.setattr(attribution, "_distinct", lambda sql: used.append(decide(sql)) or used[-1])
    result = scan_store(store, save=False)
    assert "" in used, "no claim was made without DISTINCT"
    assert result.con.execute("SELECT count(*) - count(DISTINCT (fidx, event_id)) "
                              "FROM _claims").fetchall() == [(0,)]
    monkeypatch.setattr(attribution, "_distinct", lambda sql: "DISTINCT")
    again = scan_store(store, save=False).document
    for key in ("findings", "incidents", "totals"):
        assert json.dumps(again[key], default=str) == json.dumps(result.document[key], default=str)


def test_facts_made_a_range_of_event_ids_at_a_time_are_those_made_at_once(tmp_path, monkeypatch):
    """A large log's `_event_facts` is made a range of event ids at a time (each range's
    claims and events: what fits DuckDB's memory), and the claimed parts and fact groups
    summed range by range; with ranges of 300 events the samples' (inputs split, small ones
    sharing a range) give the same table and figures."""
    import loophound.attribute as attribution
    from loophound.detect import run_detectors, settings
    from loophound.synth import write_samples

    write_samples(tmp_path / "logs", seed=5)
    store = Store(tmp_path / "st")
    ingest([str(tmp_path / "logs")], store)
    con = store.connect()
    findings = run_detectors(con, settings())

    def attributed(c, keep: bool = True) -> tuple:
        out, totals = attribution.attribute(c, findings, keep_facts=keep)
        return ([(a.events, a.lines, a.bytes, a.tokens, a.cost_usd, a.cost_status, a.evidence,
                  a.exclusive_events, a.exclusive_cost_usd, a.exclusive_by_kind) for a in out],
                totals, attribution.claim_overlaps(c),
                c.execute("SELECT * FROM _event_facts ORDER BY event_id").fetchall())

    whole = attributed(con)
    assert attributed(store.connect(), keep=False) == whole  # summed as they are made
    ranges = []
    split = attribution._id_ranges
    monkeypatch.setattr(attribution, "FACTS_RANGE_EVENTS", 300)
    monkeypatch.setattr(attribution, "_id_ranges", lambda *a: ranges.append(split(*a)) or ranges[-1])
    assert attributed(store.connect()) == whole
    assert attributed(store.connect(), keep=False) == whole
    assert len(ranges[0]) > 10 and len(ranges[1]) > 10


def test_a_scan_that_keeps_no_facts_has_the_same_figures_and_report(tmp_path):
    """A scan neither saved nor reported (`attribute(keep_facts=False)`) sums the events'
    facts as it makes them and leaves `_event_facts` a view: the same figures, claims and
    facts as a scan that keeps them, and a report made from it afterwards is the same."""
    from loophound.report import build
    from loophound.synth import write_samples

    write_samples(tmp_path / "logs", seed=5)
    store = Store(tmp_path / "st")
    ingest([str(tmp_path / "logs")], store)
    kept = scan_store(store, save=False, for_report=True)
    lean = scan_store(store, save=False, for_report=False)
    assert lean.con.execute("SELECT count(*) FROM duckdb_views() WHERE temporary "
                            "AND view_name = '_event_facts'").fetchall() == [(1,)]
    assert json.dumps(lean.document, default=str) == json.dumps(kept.document, default=str)
    who = f"EXCLUDE ({', '.join(WHO_COLUMNS)})"  # the report's columns, only in `kept`
    assert (lean.con.execute("SELECT * FROM _event_facts ORDER BY event_id").fetchall()
            == kept.con.execute(f"SELECT * {who} FROM _event_facts ORDER BY event_id").fetchall())
    reports = [build(r, "2026-01-01T00:00:00Z") for r in (kept, lean)]
    assert reports[0] == reports[1]


# every claim joined to its event's facts: what `claimed` held before it read the events
# claimed once from `_event_facts` alone
EVERY_CLAIM_JOINED = """
SELECT c.fidx, c.event_id, e.fidx = c.fidx AS owned, e.fidx AS owner, e.byte_length, e.ts,
       u.kind IS NOT NULL AND (cp.canon IS NULL OR c2.event_id IS NULL) AS is_unit,
       u.kind IS NOT NULL AND (cp.canon IS NULL OR o2.event_id IS NULL) AS is_owned_unit,
       e.tokens, e.cost_usd, e.cost_status
FROM _claims c JOIN _event_facts e USING (event_id)
LEFT JOIN _copies cp USING (event_id)
LEFT JOIN _claims c2 ON c2.fidx = c.fidx AND c2.event_id = cp.canon
LEFT JOIN _event_facts o2 ON o2.fidx = c.fidx AND o2.event_id = cp.canon
LEFT JOIN finding_units u ON u.fidx = c.fidx AND u.kind = e.kind
"""


def test_the_claimed_rows_are_every_claim_joined_to_its_facts(tmp_path):
    """`claimed` reads an event claimed once from `_event_facts` and joins only the claims
    of events claimed more than once; its rows are those of the join of every claim, on
    samples with findings that share events and messages stored twice (copies)."""
    from loophound.synth import write_samples

    write_samples(tmp_path / "logs", seed=5)
    store = Store(tmp_path / "st")
    ingest([str(tmp_path / "logs")], store)
    con = scan_store(store, save=False).con
    shared, once, copies = con.execute(
        "SELECT count(*) FILTER (WHERE shared), count(*) FILTER (WHERE NOT shared), "
        "(SELECT count(*) FROM _copies) FROM _event_facts").fetchall()[0]
    assert shared and once and copies, "the samples claim no event twice, or have no copies"
    for a, b in (("claimed", f"({EVERY_CLAIM_JOINED})"), (f"({EVERY_CLAIM_JOINED})", "claimed")):
        assert con.execute(f"SELECT count(*) FROM (FROM {a} EXCEPT ALL FROM {b})"
                           ).fetchall() == [(0,)]


_TIMES = [None, "infinity", "-infinity", "1969-12-31 23:59:59.999999", "1970-01-01",
          "2026-12-01 17:18:33.5", "0001-01-01", "294246-12-31"]


@given(st.lists(st.tuples(st.sampled_from(_TIMES), st.integers(0, 2**63 - 1)), min_size=1,
                max_size=40))
@settings(max_examples=60, deadline=None)
def test_a_units_order_number_orders_as_its_time_and_event_id(units):
    """UNIT_ORDER orders claimed units as the pair (time, event id) orders them, NULL times
    last and ±infinity at either end, and `_event_of` reads the event id back from it."""
    import duckdb

    from loophound.attribute import UNIT_ORDER, _event_of

    con = duckdb.connect()
    rows = con.execute(f"""
        SELECT event_id, {UNIT_ORDER} AS k FROM (
          SELECT CAST(unnest($ts) AS TIMESTAMP) AS ts, CAST(unnest($ids) AS BIGINT) AS event_id)
        ORDER BY struct_pack(ts, event_id)""",
                       {"ts": [u[0] for u in units], "ids": [u[1] for u in units]}).fetchall()
    assert [_event_of(k) for _, k in rows] == [e for e, _ in rows]
    keys = [k for _, k in rows]
    assert keys == sorted(keys)


# the whole log's figures as attribution summed them from `_event_facts` before it summed the
# events and the claims in one pass (`_sums`)
FACT_GROUPS = """
SELECT e.fidx, e.kind, e.cost_status, e.fresh, cp.event_id IS NOT NULL AS copy,
       count(*) AS n, sum(e.byte_length) AS bytes, sum(e.tokens) AS tokens,
       sum(CAST(cost_usd AS DECIMAL(38, 12))) AS cost,
       sum(e.tokens) FILTER (WHERE e.cost_status = 'unpriced') AS unpriced,
       min(e.ts) AS first, max(e.ts) AS last
FROM _event_facts e LEFT JOIN _copies cp USING (event_id) GROUP BY ALL
"""


@pytest.mark.parametrize("keep", [True, False])
@pytest.mark.parametrize("range_events", [None, 300])
@pytest.mark.parametrize("only", [None, ["ping_pong"]])
def test_the_figures_summed_in_one_pass_are_those_of_every_claim(tmp_path, monkeypatch, keep,
                                                                  range_events, only):
    """Attribution sums the events once (`_sums`) and counts the claims of events
    claimed once from those sums: its figures are those of the `claimed` view, every claim
    with its facts (events claimed twice and messages stored twice among them), and its
    fact groups those of every event, whether the facts are kept and however many ranges."""
    import loophound.attribute as attribution
    from loophound.detect import run_detectors, settings
    from loophound.synth import write_samples

    write_samples(tmp_path / "logs", seed=5)
    store = Store(tmp_path / "st")
    ingest([str(tmp_path / "logs")], store)
    if range_events:
        monkeypatch.setattr(attribution, "FACTS_RANGE_EVENTS", range_events)
    con = store.connect()
    findings = run_detectors(con, settings(), only)  # ping_pong alone: copies claimed once
    summed = []
    figures = attribution._claimed_figures
    monkeypatch.setattr(attribution, "_claimed_figures",
                        lambda c, parts_made=False: summed.append(figures(c, parts_made))
                        or summed[-1])
    attribution.attribute(con, findings, keep_facts=keep)
    shared, copies = con.execute(
        "SELECT count(*) FILTER (WHERE shared), count(*) FILTER (WHERE fidx IS NOT NULL "
        "AND NOT shared AND event_id IN (SELECT event_id FROM _copies)) FROM _event_facts"
    ).fetchall()[0]
    assert (copies if only else shared), "no copy claimed once, or no event claimed twice"
    assert figures(con) == summed[0]  # `_parts` made again from `claimed`
    groups = "SELECT * FROM _fact_groups ORDER BY ALL"
    assert con.execute(groups).fetchall() == con.execute(
        f"SELECT * FROM ({FACT_GROUPS}) ORDER BY ALL").fetchall()

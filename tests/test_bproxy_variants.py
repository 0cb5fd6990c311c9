"""bproxy logs of shapes the project did not write: the request id under another key, or none,
nested objects, key order, extra keys, 20 healthy sessions interleaved with the storm. Every
shape must give the same storm finding (synth/bproxy_variants.py writes them, small here)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from loophound.ingest import ingest
from loophound.scan import scan_store
from loophound.store import Store
from loophound.synth.bproxy_variants import VARIANTS, Variant, variant, write_bproxy_variant

SMALL = {"storm_requests": 400, "storm_hours": 40 / 3600, "session_minutes": 1.0}
T0 = 1781826140544


def _scan(tmp_path: Path, v: Variant) -> tuple[dict, list[dict]]:
    log = tmp_path / "logs" / "daemon.log"
    key = write_bproxy_variant(log, v, **SMALL)
    store = Store(tmp_path / "st")
    ingest([str(log)], store)
    doc = scan_store(store, save=False).document
    return key, [f for f in doc["findings"] if f["detector"] == "repeated_error"]


@pytest.mark.parametrize("v", VARIANTS, ids=[v.name for v in VARIANTS])
def test_every_shape_gives_the_same_storm_finding(tmp_path, v):
    key, runs = _scan(tmp_path, v)
    assert [(f["events"], f["sessions"]) for f in runs] == [
        (s["requests"], [s["session"]]) for s in key["storms"]]
    assert key["healthy_requests"] > key["storms"][0]["requests"] // 2  # truly interleaved


@pytest.mark.parametrize("id_key", ["id", "req_id", "reqId", "request_id", "requestId", None])
def test_the_storm_is_one_finding_whatever_the_id_key(tmp_path, id_key):
    _, runs = _scan(tmp_path, Variant("keys", id_key=id_key))
    assert [(f["events"], f["sessions"]) for f in runs] == [(400, ["6afr3v"])]


def _answers(tmp_path: Path, v: Variant) -> list[tuple]:
    log = tmp_path / str(v.id_key) / "daemon.log"
    write_bproxy_variant(log, v, **SMALL)
    store = Store(tmp_path / str(v.id_key) / "st")
    ingest([str(log)], store)
    con = store.connect()
    return con.execute("""SELECT e.line, e.kind, e.action, e.session, r.line, e.error, e.ok
                          FROM events e LEFT JOIN events r ON r.event_id = e.answers
                          WHERE e.kind IN ('request', 'response', 'lifecycle')
                          ORDER BY e.line""").fetchall()


def test_without_ids_each_answer_finds_the_request_its_id_would_have_named(tmp_path):
    """The same log with and without ids (same seed, same times): every response is joined to
    the same request, by time − elapsed, caller and order. A `forwarded` line names neither
    caller nor elapsed time: it goes with its process's nearest request before it, under
    interleaving not always its own."""
    without = variant("no_id")
    guessed, known = _answers(tmp_path, without), _answers(tmp_path, replace(without, id_key="id"))
    assert len(guessed) == len(known)
    answers = [(g, k) for g, k in zip(guessed, known, strict=True) if k[1] != "lifecycle"]
    assert len(answers) > 1400 and all(g == k for g, k in answers)
    forwarded = [(g, k) for g, k in zip(guessed, known, strict=True) if k[1] == "lifecycle"]
    assert sum(g == k for g, k in forwarded) >= 0.8 * len(forwarded)


def _line(t: int, **fields) -> str:
    return json.dumps({"level": 30, "time": T0 + t, "pid": 7, "hostname": "h", **fields},
                      separators=(",", ":")) + "\n"


def _two_runs(tmp_path: Path, then: str) -> Store:
    """A log of two requests ingested, then `then` appended to it and ingested."""
    log = tmp_path / "d.log"
    log.write_text(_line(0, event="received", action="navigate", session="s1", ownerHash="a")
                   + _line(100, event="received", action="click", session="s2", ownerHash="b"))
    store = Store(tmp_path / "st")
    ingest([str(log)], store)
    with log.open("a") as fh:
        fh.write(then)
    ingest([str(log)], store)
    return store


def test_an_answer_without_id_finds_its_request_in_an_earlier_run(tmp_path):
    """A slow response read by a later ingest than its request: looked for among the stored
    requests, its outcome reaching the request as a late outcome."""
    con = _two_runs(tmp_path, _line(150, event="response", ok=True, elapsed_ms=50, ownerHash="b")
                    + _line(30_000, event="response", ok=False, elapsed_ms=30_000,
                            error_code="TIMEOUT", ownerHash="a")).connect()
    rows = con.execute("""SELECT e.line, r.line, e.action, e.session FROM events e
                          JOIN events r ON r.event_id = e.answers ORDER BY e.line""").fetchall()
    assert rows == [(3, 2, "click", "s2"), (4, 1, "navigate", "s1")]
    assert con.execute("SELECT line, error FROM requests ORDER BY line").fetchall() == [
        (1, "TIMEOUT"), (2, None)]


def test_a_line_nothing_places_goes_with_the_last_stored_request(tmp_path):
    """A response without an id or a time, read by a later ingest than any request: nothing
    of its batch places it, so it goes with the last request stored, whose outcome it is."""
    con = _two_runs(tmp_path, json.dumps({"event": "response", "pid": 7, "ok": False,
                                          "error_code": "TAB_NOT_FOUND"}) + "\n").connect()
    assert con.execute("""SELECT e.line, r.line, e.action, e.session, e.corr_id FROM events e
                          JOIN events r ON r.event_id = e.answers""").fetchall() == [
        (3, 2, "click", "s2", "L2")]
    assert con.execute("SELECT line, ok, error FROM requests ORDER BY line").fetchall() == [
        (1, None, None), (2, False, "TAB_NOT_FOUND")]


def test_a_request_two_responses_answer_takes_the_outcome_of_one(tmp_path):
    """Two responses whose t − e both name one request (held back across chunks or not):
    both answer it, and it takes one of their outcomes, not a mixture."""
    log = tmp_path / "d.log"
    log.write_text(_line(0, event="received", action="navigate", session="s1", ownerHash="a")
                   + _line(10, event="response", ok=True, elapsed_ms=10, ownerHash="a")
                   + _line(20, event="response", ok=False, elapsed_ms=20,
                           error_code="TAB_NOT_FOUND", ownerHash="a"))
    store = Store(tmp_path / "st")
    ingest([str(log)], store)
    con = store.connect()
    assert con.execute("""SELECT e.line, e.answers = r.event_id, e.action, e.session
        FROM events e, events r WHERE r.line = 1 AND e.line > 1 ORDER BY e.line""").fetchall() \
        == [(2, True, "navigate", "s1"), (3, True, "navigate", "s1")]
    assert con.execute("SELECT ok, error, latency_ms FROM requests").fetchall()[0] in (
        (True, None, 10.0), (False, "TAB_NOT_FOUND", 20.0))


def test_interleaved_callers_are_told_apart_by_owner_and_elapsed_time(tmp_path):
    """Two callers' requests interleave; the line before a response is the other caller's.
    A line that names no owner goes with the nearest request of its process."""
    log = tmp_path / "d.log"
    log.write_text(
        _line(0, event="received", action="navigate", session="s1", ownerHash="a")
        + _line(10, event="received", action="scroll", session="dead", ownerHash="b")
        + _line(10, event="response", ok=False, elapsed_ms=0, error_code="SESSION_NOT_FOUND",
                ownerHash="b")
        + _line(110, event="received", action="scroll", session="dead", ownerHash="b")
        + _line(111, event="forwarded", ws_client="c1")
        + _line(800, event="response", ok=True, elapsed_ms=800, ownerHash="a")
        + _line(900, event="response", ok=False, elapsed_ms=0, error_code="SESSION_NOT_FOUND",
                ownerHash="b"))
    store = Store(tmp_path / "st")
    ingest([str(log)], store)
    rows = store.connect().execute("""SELECT e.line, r.line FROM events e
        JOIN events r ON r.event_id = e.answers ORDER BY e.line""").fetchall()
    # line 7 (t 900, elapsed 0) has no request of owner b at 900: the nearest of b before it
    # is 790 ms away, within no tolerance; nor any other request: it goes with line 4, the
    # `received` line before it
    assert rows == [(3, 2), (5, 4), (6, 1), (7, 4)]


def test_a_request_id_may_be_a_number(tmp_path):
    log = tmp_path / "d.log"
    log.write_text(_line(0, event="received", action="navigate", session="s1", reqId=17,
                         ownerHash="a")
                   + _line(5, event="received", action="click", session="s1", reqId=18,
                           ownerHash="a")
                   + _line(90, event="response", ok=False, elapsed_ms=90, reqId=17,
                           error_code="X", ownerHash="a"))
    store = Store(tmp_path / "st")
    ingest([str(log)], store)
    got = store.connect().execute(
        "SELECT line, corr_id, error FROM requests ORDER BY line").fetchall()
    assert got == [(1, "17", "X"), (2, "18", None)]


def test_args_and_result_objects_are_columns_not_unknown_keys(tmp_path):
    log = tmp_path / "d.log"
    log.write_text(_line(0, event="received", action="scroll", session="s1", ownerHash="a",
                         args={"scroll": {"by": {"dy": 600}}})
                   + _line(40, event="response", ok=True, elapsed_ms=40, ownerHash="a",
                           result={"data": {"scrolled": 600}}))
    store = Store(tmp_path / "st")
    report = ingest([str(log)], store)
    assert not any("does not know" in w for w in report.files[0].warnings)
    rows = store.connect().execute(
        "SELECT args, result, extra FROM events ORDER BY line").fetchall()
    assert json.loads(rows[0][0]) == {"scroll": {"by": {"dy": 600}}}
    assert json.loads(rows[1][1]) == {"data": {"scrolled": 600}}
    assert all("args" not in (e or "") and "result" not in (e or "") for _, _, e in rows)


def test_a_variant_is_found_by_its_name_and_a_wrong_name_lists_the_names():
    assert variant("reqId").id_key == "reqId" and variant("no_id").id_key is None
    with pytest.raises(ValueError, match="no variant 'reqid': the variants are id, req_id, reqId"):
        variant("reqid")  # names are exact: pino-http's key, not a spelling of it

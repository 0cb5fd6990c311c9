"""The detectors of stuck agents (repeated_action, alternating_action, repeated_message): their
kernels on plain values, no files; their judgement on made-up measurements; and, on the sample
logs, every planted stuck loop found with its actor, session, count and cost while healthy
repetition and the clean twins stay quiet."""

from __future__ import annotations

import datetime as dt

import numpy as np

from loophound.detect import actions as ac
from loophound.detect import alternating_action as aa
from loophound.detect import repeated_action as ra
from loophound.detect import repeated_message as rm
from loophound.normalise import mask
from loophound.vocabulary import Severity

T0 = dt.datetime(2026, 1, 1)


def arr(*values, dtype=None):
    return np.array(values, dtype=dtype)


# --- what interrupts a run ----------------------------------------------------------------------


def test_being_told_something_always_interrupts_another_party_only_when_results_are_unknown():
    # merged sequence of one group: own, told, own, other, own, other, own
    group = arr(1, 1, 1, 1, 1, 1, 1)
    own = arr(True, False, True, False, True, False, True)
    told = arr(False, True, False, False, False, False, False)
    known = arr(True, True, True, False)  # per own action
    assert ac.interruptions(group, own, told, known).tolist() == [True, True, False, True]
    # another group starts a new run whatever happened
    assert ac.interruptions(arr(1, 2), arr(True, True), arr(False, False),
                            arr(True, True)).tolist() == [True, True]
    assert len(ac.interruptions(arr(1), arr(False), arr(True), arr(dtype=bool))) == 0


def test_a_turn_begins_after_the_last_own_action_or_what_the_actor_was_told():
    group = arr(1, 1, 1, 1, 2, 2, 2)
    own = arr(True, False, True, True, False, False, True)
    told = arr(False, True, False, False, True, False, False)  # 5: another party, not to it
    assert ac.anchors(group, own, told).tolist() == [-1, 1, 2, 4]
    assert ac.turn_start(np.nan, 1000.0, 60) == 999.0
    assert ac.turn_start(100.0, 1000.0, 0.5) == 500.0  # at most max_gap_s before
    assert ac.turn_start(1000.0, 1000.0, 60) == 999.0  # always before the first call


# --- runs of equal calls -------------------------------------------------------------------------


def test_runs_of_equal_calls_are_cut_by_another_call_an_interruption_or_a_long_pause():
    key = arr(7, 7, 7, 7, 8, 7, 7, 7, 7, 7, 7, 7)
    t = arr(0, 1, 2, 3, 4, 5, 6, 7, 8, 100, 101, 102)
    cut = np.zeros(12, dtype=bool)
    cut[7] = True  # told something before the 8th call
    assert ac.equal_runs(key, t, cut, 3, 50) == [(0, 4), (9, 12)]  # (5,7) too short, (7,9) too
    assert ac.equal_runs(key, t, cut, 2, 50) == [(0, 4), (5, 7), (7, 9), (9, 12)]
    assert ac.equal_runs(arr(), arr(), arr(dtype=bool), 2, 50) == []


def test_stretches_of_the_same_call_join_across_a_few_calls_that_changed_nothing():
    #        0  1  2  3  4  5  6  7  8  9 10 11 12
    key = arr(7, 7, 7, 9, 7, 7, 7, 5, 5, 7, 7, 7, 7)
    t = np.arange(13)
    known = np.ones(13, dtype=bool)
    cut = np.zeros(13, dtype=bool)
    runs = ac.equal_runs(key, t, cut, 2, 50)
    assert runs == [(0, 3), (4, 7), (7, 9), (9, 13)]
    assert ac.merge_stretches(runs, key, known, cut, t, 1, 50) == [[(0, 3), (4, 7)], [(7, 9)],
                                                                   [(9, 13)]]
    assert ac.merge_stretches(runs, key, known, cut, t, 2, 50) == [[(0, 3), (4, 7), (9, 13)],
                                                                   [(7, 9)]]
    # not where the result is not logged, nor across an interruption or a long pause
    assert len(ac.merge_stretches(runs, key, np.zeros(13, dtype=bool), cut, t, 2, 50)) == 4
    told = cut.copy()
    told[4] = True
    assert ac.merge_stretches(runs[:2], key, known, told, t, 2, 50) == [[(0, 3)], [(4, 7)]]
    assert ac.merge_stretches(runs[:2], key, known, cut, t * 100, 2, 50) == [[(0, 3)], [(4, 7)]]


# --- cycles --------------------------------------------------------------------------------------


def _cycles(keys, min_cycles=3, cut_at=(), gaps=None, max_k=4):
    key = np.array([ord(c) for c in keys])
    t = np.cumsum([0] + (gaps or [1] * (len(keys) - 1)))
    cut = np.zeros(len(keys), dtype=bool)
    cut[list(cut_at)] = True
    return ac.cycles(key, t, cut, max_k, min_cycles, 10)


def test_a_cycle_of_two_three_or_four_calls_is_found_once():
    assert _cycles("xABABABy") == [(1, 7, 2)]
    assert _cycles("ABCABCABC") == [(0, 9, 3)]
    assert _cycles("TETUTETUTETU") == [(0, 12, 4)]  # test, edit E, test, edit U: period 4
    assert _cycles("ABABA") == []  # 2.5 times round
    assert _cycles("ABABA", min_cycles=2.5) == [(0, 5, 2)]
    assert _cycles("AAAAAAAA") == []  # one call repeated is repeated_action's
    assert _cycles("AABAABAAB") == [(0, 9, 3)]  # a cycle may hold a call twice


def test_a_cycle_is_cut_by_an_interruption_or_a_long_pause():
    assert _cycles("ABABABABAB", cut_at=(4,)) == [(4, 10, 2)]  # ABAB | ABABAB
    assert _cycles("ABABABAB", gaps=[1, 1, 1, 50, 1, 1, 1]) == []


def test_minimal_period():
    assert ac.minimal_period(arr(1, 2, 1, 2)) == 2
    assert ac.minimal_period(arr(1, 2, 3)) == 3
    assert ac.minimal_period(arr(5, 5)) == 1


def test_pace_and_distinct_share():
    p = ac.Pace.of(arr(0, 1000, 2000, 3000))
    assert (p.median_ms, p.cv, p.duration_s) == (1000.0, 0.0, 3.0)
    assert ac.Pace.of(arr(5)) == ac.Pace(None, None, 0.0)
    assert ac.distinct_share(arr(1, 1, 1, 1)) == 0.25 and ac.distinct_share(arr(1, 2)) == 1.0


# --- repeated_action: judging --------------------------------------------------------------------


def _run(count=15, gap_s=10.0, cv=0.3, known=True, args='{"file_path": "a.py"}', ended=None,
         batch=0.1, tokens=500):
    return ra.Run(actor="claude", session="s1", action="Read", action_key="k", args=args,
                  result="x" if known else None, result_known=known, count=count, start=T0,
                  stop=T0 + dt.timedelta(seconds=gap_s * (count - 1)), lo=T0, until=T0,
                  pace=ac.Pace(gap_s * 1000, cv, gap_s * (count - 1)), between=0,
                  ended_by_change=ended,
                  batch_share=batch, turns=ac.Turns(count, tokens, None), first=("f", 1),
                  second=("f", 3))


def test_repeated_action_severity_grows_with_the_count():
    p = ra.Params()
    assert ra.judge(_run(count=p.min_count - 1), p) is None
    assert ra.judge(_run(count=p.min_count), p) is Severity.MEDIUM
    assert ra.judge(_run(count=p.high_count), p) is Severity.HIGH
    assert ra.judge(_run(count=p.critical_count), p) is Severity.CRITICAL


def test_healthy_repetition_stays_quiet():
    p = ra.Params()

    def quiet(r):
        return ac.quiet_reason(r.shape, p.high_count, p.critical_count, p)

    assert quiet(_run(ended=True)) == "ended with another answer"
    assert ra.judge(_run(ended=True, count=p.critical_count), p) is Severity.LOW
    health_check = _run(count=60, gap_s=180, tokens=0)
    assert quiet(health_check) == "background"
    assert ra.judge(_run(count=60, gap_s=180), p) is Severity.MEDIUM  # slow, but paid per turn
    assert quiet(_run(batch=0.9)) == "batch"
    # neither arguments nor results logged: only a long run at a machine's cadence counts
    scrolling = _run(count=18, args=None, known=False, cv=0.45, tokens=0)
    assert quiet(scrolling) == "undescribed"
    poller = _run(count=240, gap_s=2, args=None, known=False, cv=0.05, tokens=0)
    assert ra.judge(poller, p) is Severity.CRITICAL
    assert ra.judge(_run(count=p.high_count - 1, args=None, known=False, cv=0.05), p) is None
    status_poll = _run(count=420, gap_s=10, args=None, known=False, cv=0.0, tokens=0)
    assert quiet(status_poll) == "undescribed"  # a schedule, not a machine's loop


def test_without_logged_results_identical_calls_are_at_most_medium_unless_runaway():
    """A healthy session scrolled a page 10 times in 11 s: the same call and arguments, but
    the log holds no result, so "the same answer" was never seen: medium, said why. Rate kept
    up, length or cost make such a loop a runaway all the same."""
    p = ra.Params()
    scroll = _run(count=10, gap_s=11 / 9, cv=0.1, known=False, args='{"dy": 800}', tokens=0)
    assert ra.judge(scroll, p) is Severity.MEDIUM
    f = ra.describe(scroll, Severity.MEDIUM, p)
    assert f.details["severity_note"] == ac.UNSEEN_NOTE and f.details["result_logged"] is False
    assert "the same answer" not in " ".join(e.note for e in f.evidence)
    assert ra.judge(_run(count=10, gap_s=11 / 9, cv=0.1, known=True), p) is Severity.HIGH
    kept_up = _run(count=61, gap_s=1, cv=0.1, known=False, tokens=0)  # 1/s for a minute
    assert ra.judge(kept_up, p) is Severity.HIGH
    assert ra.describe(kept_up, Severity.HIGH, p).details["severity_note"] is None
    assert ra.judge(_run(count=12, gap_s=2, cv=0.1, known=False, tokens=80_000), p) is Severity.HIGH
    assert ra.judge(_run(count=40, gap_s=20, cv=0.1, known=False), p) is Severity.HIGH  # 13 min
    # a cycle of calls whose results are not logged: the same rule
    assert aa.judge(_cycle(count=27, k=3, gap_s=1, known=False, tokens=0), p=aa.Params()) \
        is Severity.MEDIUM
    assert aa.judge(_cycle(count=60, gap_s=1, known=False, tokens=0), aa.Params()) is Severity.HIGH


def test_repeated_action_describes_the_call_and_claims_its_turns():
    r = _run()
    f = ra.describe(r, Severity.HIGH, ra.Params())
    assert f.title == "`Read` called 15 times in a row with the same arguments in session s1"
    assert f.actors == ["claude"] and f.sessions == ["s1"] and f.unit_kinds == ac.ACTION_KINDS
    assert f.claim_params["keys"] == ["k"] and f.claim_params["lo"] == T0
    assert "PreToolUse hook" in f.recommendation and "max_turns" in f.recommendation
    assert [(e.file, e.line) for e in f.evidence] == [("f", 1), ("f", 3)]


# --- alternating_action: judging -----------------------------------------------------------------


def _cycle(count=18, k=2, gap_s=5.0, cv=0.3, known=True, ended=None, batch=0.1, tokens=100):
    steps = [aa.Step(f"A{i}", f"k{i}", "{}", "r", None, "f", i + 1) for i in range(k)]
    return aa.Cycle(actor="codex", session="s", steps=steps, result_known=known, count=count,
                    start=T0, stop=T0, lo=T0, until=T0, pace=ac.Pace(gap_s * 1000, cv, gap_s * count),
                    ended_by_change=ended, batch_share=batch, turns=ac.Turns(1, tokens, None))


def test_alternating_action_severity_and_quiet_cycles():
    p = aa.Params()
    assert aa.judge(_cycle(count=5), p) is None  # 2.5 times round
    assert aa.judge(_cycle(count=6), p) is Severity.MEDIUM
    assert aa.judge(_cycle(count=27, k=3), p) is Severity.HIGH
    assert aa.judge(_cycle(count=100), p) is Severity.CRITICAL
    assert aa.judge(_cycle(ended=True), p) is None
    assert aa.judge(_cycle(gap_s=120, tokens=0), p) is None
    assert aa.judge(_cycle(batch=0.8), p) is None
    f = aa.describe(_cycle(count=27, k=3), Severity.HIGH, p)
    assert "`A0` → `A1` → `A2` 9 times (27 calls)" in f.title
    assert sorted(f.claim_params["keys"]) == ["k0", "k1", "k2"] and len(f.evidence) == 3


# --- repeated_message: kernels and judging --------------------------------------------------------


def test_episodes_end_at_a_long_pause_or_where_the_sender_acted():
    t = arr(0, 10, 20, 1000, 1010)
    assert rm.episodes(t, np.array([15.0]), 100).tolist() == [1, 1, 2, 3, 3]
    assert rm.episodes(arr(), np.zeros(0), 100).tolist() == []


def test_repeating_stretches_hold_few_texts_said_at_least_twice():
    #        a new start, then X Y X Y X Y X Y, then something new
    texts = arr(1, 2, 3, 4, 3, 4, 3, 4, 3, 4, 5)
    one = np.ones(len(texts), dtype=int)
    assert rm.repeating_stretches(texts, one, 5, 0.25) == [(2, 10)]
    assert rm.repeating_stretches(texts, one, 9, 0.25) == []
    many = arr(1, 2, 3, 4, 1, 2, 3, 4)  # each said twice: too many texts for a loop
    assert rm.repeating_stretches(many, np.ones(8, dtype=int), 5, 0.25) == []
    # a text said once per episode is no repeat
    assert rm.repeating_stretches(arr(7, 7, 7, 7, 7, 7), arr(1, 2, 3, 4, 5, 6), 2, 1.0) == []


def test_overlapping_spans_are_one_group():
    assert rm.overlapping([(0, 10), (5, 20), (30, 40), (19, 25)]) == [[0, 1, 3], [2]]
    assert rm.overlapping([]) == []


def test_messages_compare_after_masking():
    assert mask("@test-agent build #1043 is out") == mask("@test-agent build #1044 is out")
    assert mask("item 17", numbers=False) != mask("item 18", numbers=False)
    assert mask("req 550e8400-e29b-41d4-a716-446655440000", numbers=False) == \
        mask("req 6ba7b810-9dad-11d1-80b4-00c04fd430c8", numbers=False)


def _repetition(count=24, gap_s=3.0, tokens=0):
    said = [rm.Said("bot", "bot", count, 1, "hello", count, ("f", 1))]
    return rm.Repetition("room:general", ["room:general"], said, list(range(count)), T0, T0,
                         ac.Pace(gap_s * 1000, 0.1, gap_s * count), tokens, ["room:general"])


def test_repeated_message_severity_and_the_periodic_status_post():
    p = rm.Params()
    assert rm.judge(_repetition(count=4), p) is None
    assert rm.judge(_repetition(count=5), p) is Severity.MEDIUM
    assert rm.judge(_repetition(count=24), p) is Severity.HIGH
    assert rm.judge(_repetition(count=150), p) is Severity.CRITICAL
    assert rm.judge(_repetition(count=150, gap_s=600), p) is None  # a status post: background
    assert rm.judge(_repetition(count=24, gap_s=600, tokens=900), p) is Severity.MEDIUM
    f = rm.describe(_repetition(), Severity.HIGH, p)
    assert f.sessions == ["room:general"] and "stop_hook_active" in f.recommendation


# --- on the sample logs: every planted stuck loop found, decoys and clean twins quiet ------------

import json  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from loophound.attribute.costs import DEFAULT_COST_PER_CALL  # noqa: E402
from loophound.cli import app  # noqa: E402

SAMPLES = Path(__file__).resolve().parents[1] / "sample_logs"
EXPECTED = json.loads((SAMPLES / "EXPECTED.json").read_text())
STUCK = ("repeated_action", "alternating_action", "repeated_message")
SERIOUS = ("high", "critical")
SECTIONS = ("bproxy", "sven", "claude-code", "codex")  # where this change planted loops
PLANTED = [(name, i) for name in SECTIONS for i in EXPECTED["sections"][name]["incidents"]
           if i.get("detector") in STUCK]
DECOYS = [(name, h) for name in SECTIONS for h in EXPECTED["sections"][name]["healthy"]]


def _scan(paths: list[Path], out: Path) -> dict:
    CliRunner().invoke(app, ["scan", *map(str, paths), "--store", str(out / "st"),
                             "--json", str(out / "f.json"), "--fail-on", "never"])
    return json.loads((out / "f.json").read_text())


@pytest.fixture(scope="module")
def samples_scanned(tmp_path_factory) -> dict:
    return _scan([SAMPLES / s for s in SECTIONS], tmp_path_factory.mktemp("stuck"))


def _count(incident: dict) -> int:
    return next(incident[k] for k in ("requests", "posts", "messages", "count", "repeats")
                if isinstance(incident.get(k), int))


def _in(finding: dict, section: str, incident: dict) -> bool:
    """The finding's evidence is in the loop's file (its section's when the key names none)."""
    file = incident.get("file")
    ends = [f"{section}/{file}"] if file else [f"{section}/{f}" for f in
                                               EXPECTED["sections"][section]["lines"]]
    return any(e["file"].endswith(x) for e in finding["evidence"] for x in ends)


def test_loops_of_each_kind_are_planted_in_three_formats_a_seed_format_among_them():
    formats = {EXPECTED["sections"][name]["format"] for name, _ in PLANTED}
    assert len(formats) >= 3 and formats & {"bproxy", "sven", "hooks", "labtrust"}
    for detector in STUCK:
        assert len({n for n, i in PLANTED if i["detector"] == detector}) >= 2, detector


@pytest.mark.parametrize("section, incident", [pytest.param(n, i, id=f"{n}:{i['kind']}")
                                               for n, i in PLANTED])
def test_a_planted_stuck_loop_is_found_with_its_actor_session_count_and_cost(
        samples_scanned, section, incident):
    hits = [f for f in samples_scanned["findings"] if f["detector"] == incident["detector"]
            and incident["actor"] in f["actors"] and _in(f, section, incident)
            and incident["session"] in f["sessions"]]
    assert len(hits) == 1, [(f["title"], f["sessions"]) for f in hits]
    f = hits[0]
    want = _count(incident)
    assert abs(f["events"] - want) <= 0.02 * want, (f["events"], want)
    assert f["severity"] in SERIOUS, f["title"]
    assert f["cost_usd"] and f["cost_usd"] > 0
    if "tokens" in incident:  # the agent's turns over the loop, as the generator counted them
        assert f["tokens"] == incident["tokens"]
    if "assumed_calls" in incident:  # no tokens in the log: the per-call assumption
        assert f["cost_usd"] == pytest.approx(incident["assumed_calls"] * DEFAULT_COST_PER_CALL)


@pytest.mark.parametrize("section, decoy", [pytest.param(n, h, id=f"{n}:{h['kind']}")
                                            for n, h in DECOYS])
def test_healthy_repetition_is_not_a_stuck_loop(samples_scanned, section, decoy):
    """Polls that end, a health check a minute, a status post every ten minutes, a batch of
    calls alike but for a number: none is a finding of the stuck-agent detectors."""
    def about(f: dict) -> bool:
        if decoy.get("actor") and decoy["actor"] not in f["actors"]:
            return False
        if decoy.get("session") and decoy["session"] not in f["sessions"]:
            return False
        if "first_line" in decoy and decoy.get("file"):
            return any(e["file"].endswith(f"{section}/{decoy['file']}")
                       and decoy["first_line"] <= e["line"] <= decoy["last_line"]
                       for e in f["evidence"])
        return bool(decoy.get("actor"))
    assert [f["title"] for f in samples_scanned["findings"]
            if f["detector"] in STUCK and about(f)] == []


def test_clean_twins_give_the_stuck_detectors_nothing_serious(tmp_path):
    from loophound.synth import SECTIONS as WRITERS

    for name in SECTIONS:
        WRITERS[name](tmp_path / "clean" / name, 7, incident=False)
    doc = _scan([tmp_path / "clean"], tmp_path)
    assert [f["title"] for f in doc["findings"] if f["detector"] in STUCK
            and f["severity"] in SERIOUS] == []


def test_the_stuck_bproxy_agents_are_where_the_answer_key_says():
    sec = EXPECTED["sections"]["bproxy"]
    records = [json.loads(x) for x in (SAMPLES / sec["dir"] / sec["file"]).read_text().splitlines()]
    stuck = [i for i in sec["incidents"] if i.get("detector") in STUCK]
    assert {i["kind"] for i in stuck} == {"stuck_poll", "wait_snapshot_cycle"}
    for inc in stuck:
        owner = inc["actor"].split(":")[1]
        calls = [n for n, r in enumerate(records, 1) if r.get("event") == "received"
                 and r.get("ownerHash") == owner and r.get("session") == inc["session"]
                 and r["action"] in inc.get("cycle", [inc.get("action")])]
        assert len(calls) == inc["requests"] == inc["assumed_calls"]
        assert (calls[0], calls[-1]) == (inc["first_line"], inc["last_line"])

"""The detectors' pure kernels (measuring and judging), on plain values: no files, no store."""

from __future__ import annotations

import datetime as dt
import math

import numpy as np

from loophound.detect import depth_violation as dv
from loophound.detect import ping_pong as pp
from loophound.detect import rate_spike as rs
from loophound.detect import repair_loop as rl
from loophound.detect import repeated_error as re_
from loophound.detect import trigger_cycle as tc
from loophound.detect import unusual_actor as ua
from loophound.detect.lineage import Lineage
from loophound.detect.messages import Spot
from loophound.vocabulary import Severity

T0 = dt.datetime(2026, 1, 1)

# --- repeated_error ----------------------------------------------------------------------------


def _runs(rows, min_count=3, max_gap_ms=10_000):
    """rows: (group, t_ms, error, failed), in group then time order."""
    g, t, err, failed = (np.array(col) for col in zip(*rows, strict=True))
    return re_.failure_runs(g, t, err, failed.astype(bool), min_count, max_gap_ms)


def test_a_run_is_cut_by_a_success_another_error_a_long_pause_or_another_caller():
    rows = ([(1, i * 1000, 7, True) for i in range(4)]  # 0..3: a run of 4
            + [(1, 4000, 0, False)]  # a success ends it
            + [(1, 5000 + i * 1000, 7, True) for i in range(3)]  # 5..7: a run of 3
            + [(1, 8000, 8, True)]  # another error: a run of 1
            + [(1, 60_000 + i, 8, True) for i in range(3)]  # after a long pause: 9..11
            + [(2, 60_010 + i, 8, True) for i in range(2)])  # another caller: only 2
    assert _runs(rows) == [(0, 4), (5, 8), (9, 12)]


def test_an_attempt_with_the_same_error_that_did_not_fail_ends_the_run_outside_it():
    rows = [(1, i, 7, True) for i in range(3)] + [(1, 3, 7, False), (1, 4, 7, True)]
    assert _runs(rows) == [(0, 3)]


def test_one_run_of_nothing_but_failures():
    assert _runs([(1, i, 7, True) for i in range(5)], min_count=5) == [(0, 5)]
    assert _runs([(1, i, 7, True) for i in range(5)], min_count=6) == []
    assert re_.failure_runs(*(np.array([]),) * 4, 3, 1.0) == []


def test_gap_figures():
    g = re_.gap_figures(np.array([0, 100, 200, 300, 1300, 2300, 3300, 4300, 5300]))
    assert g.first == [100, 100, 100, 1000, 1000] and g.last == [1000] * 5
    assert (g.early_ms, g.late_ms, g.median_ms) == (100.0, 1000.0, 1000.0)
    assert re_.gap_figures(np.array([5])) == re_.Gaps(None, None, None, None, None, [], [])


def _error_run(count, gaps):
    return re_.ErrorRun("a", "s", "scroll", "SESSION_NOT_FOUND", count, T0, T0, gaps, 0, True)


def test_a_caller_that_backs_off_is_medium_one_at_a_steady_pace_is_high_or_critical():
    p = re_.Params()
    backing = re_.gap_figures(np.cumsum([0] + [1000] * 5 + [10_000] * 15))
    assert re_.pace(21, backing, p).backing_off
    assert re_.judge(_error_run(21, backing), p) is Severity.MEDIUM
    assert re_.judge(_error_run(p.critical_count, backing), p) is Severity.HIGH
    steady = re_.gap_figures(np.arange(0, 200 * 5000, 5000))  # every 5 s: not tight
    pc = re_.pace(200, steady, p)
    assert pc.metronome and not pc.tight and not pc.backing_off and pc.cv == 0.0
    assert re_.judge(_error_run(200, steady), p) is Severity.HIGH
    tight = re_.gap_figures(np.arange(0, 100 * 200, 200))  # every 0.2 s, 10 × min_count
    assert re_.judge(_error_run(100, tight), p) is Severity.CRITICAL
    assert re_.judge(_error_run(99, tight), p) is Severity.HIGH
    assert re_.judge(_error_run(p.critical_count, steady), p) is Severity.CRITICAL


def test_the_close_the_caller_ignored_is_the_findings_evidence():
    gaps = re_.gap_figures(np.arange(0, 50 * 100, 100))
    run = _error_run(50, gaps)
    run.terminal = re_.Terminal("bproxy.log", 12, T0, "`session.close` closed session s")
    f = re_.describe(run, re_.judge(run, re_.Params()), re_.Params())
    assert [(e.file, e.line) for e in f.evidence] == [("bproxy.log", 12)]
    assert f.details["terminal_signal"]["line"] == 12 and f.details["retry_hint_never"]
    assert f.severity == "high" and "Treat SESSION_NOT_FOUND as terminal" in f.recommendation


def test_errors_that_differ_only_in_ids_are_one_error():
    import pyarrow as pa

    texts = ["lock held by pid 4182", "lock held by pid 977", "disk full", "lock held by pid 4182"]
    raw = np.array([hash(x) for x in texts])
    number, by_hash = re_.masked_errors(raw, pa.chunked_array([texts]), np.arange(len(texts)))
    assert number[0] == number[1] == number[3] != number[2]
    assert by_hash[raw[1]] == "lock held by pid 977"
    gaps = re_.gap_figures(np.array([0, 1]))
    run = re_.ErrorRun("a", "s", "lock", texts[0], 2, T0, T0, gaps, 0, False, variants=texts[:2])
    assert run.errors == texts[:2]
    assert re_.ErrorRun("a", "s", "lock", "x", 2, T0, T0, gaps, 0, False).errors == ["x"]
    f = re_.describe(run, Severity.HIGH, re_.Params())
    assert f.claim_params["errors"] == texts[:2] and f.details["error_variants"] == 2
    assert "2 texts that differ only in ids" in f.summary


# --- ping_pong ---------------------------------------------------------------------------------

def test_depth_chains_restart_where_the_depth_drops():
    assert pp.chains([0, 1, 2, None, 3, 4, 1, 2, 0, 0]) == [[0, 1, 2, 3, 4], [1, 2], [0, 0]]
    assert pp.chains([None, None]) == []


def test_a_session_chain_ends_at_the_guard_a_room_chain_one_lower():
    every_chain_to_4 = [0, 1, 2, 3, 4] * 3
    ch = pp.chain_figures(every_chain_to_4, max_hop_depth=4, is_room=False)
    assert (ch.count, ch.stopped_by_guard, ch.terminated_by_guard, ch.past_guard) == (3, 3, True, 0)
    to_3 = pp.chain_figures([0, 1, 2, 3] * 2, max_hop_depth=4, is_room=False)
    assert to_3.stopped_by_guard == 0 and not to_3.terminated_by_guard and to_3.depth_grew
    assert pp.chain_figures([0, 1, 2, 3] * 2, max_hop_depth=4, is_room=True).terminated_by_guard
    stuck = pp.chain_figures([1] * 50, max_hop_depth=4, is_room=False)
    assert not stuck.depth_grew and not stuck.terminated_by_guard and stuck.count == 1
    assert pp.chain_figures([0, 3, 5, 6], max_hop_depth=4, is_room=False).past_guard == 2


def _episode(switches, reply_s=2.0, roles=(), a2a=0, u2u=0, u2a=0, depth_seq=(), room=False):
    return pp.Episode(
        channel="peer", pair=("a", "b"), names=("a", "b"),
        kinds=["room_post"] if room else ["message"], ids=list(range(switches + 1)),
        hops=switches + 1, stored_records=switches + 1, switches=switches, start=T0,
        stop=T0 + dt.timedelta(seconds=switches * reply_s),
        gap_ms={"median": reply_s * 1000, "p10": None, "p90": None},
        reply_ms=(reply_s * 1000, reply_s * 1000), sent=(switches // 2, switches - switches // 2),
        replies_to_assistant=a2a, user_forwarded_as_user=u2u, user_then_assistant=u2a,
        roles=list(roles), depths=sorted({d for d in depth_seq if d is not None}),
        chains=pp.chain_figures(list(depth_seq), 4, room), files=["x"], first_hop=None,
        last_hop=None, first_a2a=None, first_u2u=None, first_guard=None)


def test_ping_pong_severity():
    p = pp.Params()
    assert pp.judge(_episode(2 * p.min_rounds - 3), p) is None  # too few rounds
    assert pp.judge(_episode(2 * p.min_rounds - 1), p) is Severity.MEDIUM
    assert pp.judge(_episode(2 * p.high_rounds), p) is Severity.HIGH
    assert pp.judge(_episode(2 * p.critical_rounds), p) is Severity.CRITICAL  # no roles logged
    looping = _episode(2 * p.critical_rounds, roles=["assistant"], a2a=100)
    assert pp.judge(looping, p) is Severity.CRITICAL
    healthy = _episode(2 * p.high_rounds, roles=["assistant", "user"], u2a=20)
    assert pp.judge(healthy, p) is Severity.MEDIUM  # healthy roles need critical_rounds for high
    guarded = _episode(60, depth_seq=[0, 1, 2, 3, 4] * 5)
    assert pp.judge(guarded, p) is Severity.MEDIUM
    assert pp.judge(guarded, pp.Params(guarded_high_chains=5)) is Severity.HIGH


def test_a_human_paced_pair_is_a_finding_only_when_it_runs_very_long():
    p = pp.Params()
    assert pp.judge(_episode(2 * p.slow_min_rounds - 3, reply_s=300), p) is None
    assert pp.judge(_episode(2 * p.slow_min_rounds, reply_s=300), p) is Severity.LOW
    forwarded = _episode(2 * p.slow_min_rounds, reply_s=300, roles=["user"], u2u=3)
    assert pp.judge(forwarded, p) is Severity.MEDIUM
    f = pp.describe(forwarded, Severity.MEDIUM, p)
    assert "human-paced" in f.title and not f.details["machine_paced"]


# --- trigger_cycle -----------------------------------------------------------------------------


def test_periodic_segments_find_a_repeat_and_follow_it():
    assert tc.periodic_segments(list("ABABABA"), 5) == [(0, 7, 2)]
    assert tc.periodic_segments(list("XABCABCABY"), 5) == [(1, 9, 3)]
    assert tc.periodic_segments(list("ABC"), 5) == []  # a chain that ends
    assert tc.periodic_segments(list("ABCDEFA"), 5) == []  # the repeat is too far back
    assert tc.periodic_segments(list("RSR"), 5) == [(0, 3, 2)]  # one lap: a round trip


def _chain(agents: str, minutes: float = 1.0, depths=None) -> Lineage:
    """One linear lineage: hop i goes from agents[i] to agents[i + 1]."""
    hops = [{"event_id": i, "ts": T0 + dt.timedelta(minutes=minutes * i), "file": "h.jsonl",
             "line": i + 1, "source": a, "target": b, "session": None, "corr_id": f"c{i}",
             "parent_id": None, "depth": depths[i] if depths else 0}
            for i, (a, b) in enumerate(zip(agents, agents[1:], strict=False))]
    return Lineage(hops, {}, {i: (i - 1 if i else None) for i in range(len(hops))}, {},
                   {i: "lineage" for i in range(1, len(hops))})


def test_a_ring_is_found_along_the_lineage_with_its_laps():
    [ring] = tc.find_rings(_chain("XABCABCABCA"), max_cycle_len=5, min_laps=3, max_paths=100)
    assert (ring.cycle, ring.laps, ring.entry, ring.exit) == (list("ABC"), 3, "X", None)
    assert ring.lap_hops == [1, 4, 7] and ring.hops == list(range(1, 10))
    assert tc.find_rings(_chain("XABCABCA"), max_cycle_len=5, min_laps=3, max_paths=100) == []
    assert tc.find_rings(_chain("ABCABCABCA"), max_cycle_len=2, min_laps=3, max_paths=100) == []


def test_cycle_severity_follows_laps_cost_and_the_window():
    lin = _chain("ABABABAB", minutes=10)
    [ring] = tc.find_rings(lin, 5, 3, 100)
    cycle = tc._cycle(lin, ring)
    assert cycle.lap_s == [1200.0] * (ring.laps - 1) and cycle.closing.target == "A"
    p = tc.Params()
    assert tc.judge(cycle, p) is Severity.HIGH  # a lap of 20 min, within the 30-min window
    assert tc.judge(cycle, tc.Params(window_s=600)) is Severity.MEDIUM
    assert tc.judge(cycle, tc.Params(critical_laps=ring.laps)) is Severity.CRITICAL
    cycle.cost_usd = p.critical_cost_usd
    assert tc.judge(cycle, p) is Severity.CRITICAL
    f = tc.describe(cycle, Severity.CRITICAL, p)
    assert f.details["cycle_text"] == "A → B → A" and len(f.evidence) == 3


# --- repair_loop -------------------------------------------------------------------------------


def _step(step_id, attempts=3, ok=False, session="episode-0", stated=None, max_attempt=3,
          phash="h1", hashes=1, tokens_in=1000, file="episodes.jsonl"):
    return {"file": file, "session": session, "corr_id": f"p{step_id}", "step_id": step_id,
            "attempts": attempts, "last_attempt": attempts, "last_ok": ok,
            "all_failed_validation": not ok, "hashes": hashes, "phash": phash, "start": T0,
            "stop": T0, "first_file": file, "first_line": step_id * 10,
            "last_line": step_id * 10 + attempts - 1, "actors": ["llm"], "fields": None,
            "max_attempt": max_attempt, "stated_max_repairs": stated, "tokens_in": tokens_in,
            "tokens_out": 10, "cost_usd": None, "model": "m", "llm_actor": None}


def test_the_attempt_cap_comes_from_the_setting_results_json_the_log_or_the_default():
    p = rl.Params()
    assert rl.attempt_cap(_step(1, stated=4), rl.Params(max_repairs=1)) == (2, "setting")
    assert rl.attempt_cap(_step(1, stated=4), p) == (5, "results.json")
    assert rl.attempt_cap(_step(1), p) == (3, "highest attempt_index in the episode")
    assert rl.attempt_cap(_step(1, max_attempt=1), p) == (3, "default_max_repairs")


def test_exhausted_steps_in_a_row_make_a_run_a_repaired_step_or_a_gap_ends_it():
    p = rl.Params()
    steps = ([_step(i) for i in range(1, 5)]  # 1-4 exhausted
             + [_step(5, attempts=2, ok=True)]  # repaired on the second attempt
             + [_step(i) for i in (6, 7)]  # only two
             + [_step(i) for i in (9, 10, 11)]  # a gap of two steps before: a new run
             + [_step(12, session="episode-1")])  # another episode
    runs = rl.exhausted_runs(steps, p)
    assert [[s["step_id"] for s in r] for r in runs] == [[1, 2, 3, 4], [9, 10, 11]]
    # LabTrust numbers episodes per run: another run's episode-0 is another episode
    other_run = [_step(i) for i in (1, 2)] + [_step(i, file="run2/episodes.jsonl") for i in (3, 4)]
    assert rl.exhausted_runs(other_run, p) == []
    assert rl.exhausted_runs(steps, rl.Params(max_step_gap=2))[1][0]["step_id"] == 6


def _repair_run(steps) -> rl.RepairRun:
    [run] = rl.exhausted_runs(steps, rl.Params())
    return rl._run(run)


def test_repair_loop_severity():
    p = rl.Params()
    different = _repair_run([_step(i, phash=f"h{i}", hashes=3) for i in range(1, 4)])
    different.all_failed = False
    assert rl.judge(different, p) is Severity.MEDIUM
    same = _repair_run([_step(i) for i in range(1, 4)])
    assert same.one_hash_throughout and rl.judge(same, p) is Severity.HIGH
    long = _repair_run([_step(i) for i in range(1, p.critical_steps + 1)])
    assert rl.judge(long, p) is Severity.CRITICAL
    growing = _repair_run([_step(i, phash=f"h{i}", hashes=3, tokens_in=1000 * i) for i in range(1, 9)])
    assert rl.prompt_growing(growing, p) and rl.judge(growing, p) is Severity.CRITICAL
    f = rl.describe(growing, Severity.CRITICAL, p)
    assert f.details["tokens_growing"] and [e.line for e in f.evidence] == [10, 82]


# --- depth_violation ---------------------------------------------------------------------------


def _guard(at_guard=0, answered=0, past=0, room=0):
    return dv.GuardEpisode(
        channel="peer", pair=("a", "b"), names=("a", "b"), is_room=False, messages=10, start=T0,
        stop=T0, ids=list(range(max(at_guard + past + room, 1))), at_guard=at_guard,
        answered=answered, past=past, room=room, max_depth=4,
        hits=[(Spot("x", 1, 4), bool(answered))])


def test_what_happened_at_the_guard_decides_the_severity():
    p = dv.Params()
    assert dv.guard_outcome(_guard(at_guard=1), p) == "stopped"
    assert dv.judge(_guard(at_guard=1), p) is Severity.LOW
    assert dv.judge(_guard(at_guard=p.guard_repeat), p) is Severity.MEDIUM
    assert dv.judge(_guard(room=1), p) is Severity.MEDIUM
    assert dv.judge(_guard(at_guard=2, answered=1), p) is Severity.HIGH
    assert dv.judge(_guard(past=1), p) is Severity.HIGH
    f = dv.describe(_guard(at_guard=2, answered=1), Severity.HIGH, p)
    assert "did not hold" in f.title and f.details["terminated_by_guard"] == 1
    assert list(f.details)[:4] == ["kind", "channel", "pair", "names"]


def test_a_hook_lineage_whose_depth_never_grows_is_stuck():
    flat = dv.stuck_lineages(_chain("ABCDEF"), cap=3)
    [h] = flat
    assert (h.hops, h.depth, h.hooks_beyond_cap, h.revisits_agents) == (5, 0, [3, 4], False)
    assert dv.judge(h, dv.Params()) is Severity.MEDIUM
    [cyclic] = dv.stuck_lineages(_chain("ABABAB"), cap=3)
    assert cyclic.revisits_agents and dv.judge(cyclic, dv.Params()) is Severity.LOW
    assert dv.stuck_lineages(_chain("ABCDEF", depths=[0, 1, 2, 3, 4]), cap=3) == []
    assert dv.stuck_lineages(_chain("ABC"), cap=3) == []


# --- rate_spike --------------------------------------------------------------------------------


def test_poisson_tail_matches_the_sum_of_the_distribution():
    lam, x = 3.0, 12
    exact = 1 - sum(math.exp(-lam) * lam ** k / math.factorial(k) for k in range(x))
    assert math.isclose(rs.poisson_log10_sf(x, lam), math.log10(exact), rel_tol=1e-9)
    assert rs.poisson_log10_sf(2, 3.0) == 0.0  # not in the upper tail
    assert rs.poisson_log10_sf(5, 0.0) == -math.inf
    assert rs.poisson_log10_sf(0, 3.0) == 0.0


def test_metronome_sees_near_equal_gaps_after_the_services_own_delays():
    steady = np.arange(0, 20 * 500, 500)
    cad = rs.metronome(steady, None, 0.10, 3, 60_000)
    assert cad["share_in_runs"] == 1.0 and cad["longest_run_start"] == 0
    assert cad["longest_run_gap_ms"] == 500.0 and cad["gap_cv"] == 0.0
    # the same caller, but the service paced every other answer by 400 ms: still a metronome
    paced = np.cumsum([0] + [900, 500] * 10)
    delays = np.array([400.0 if i % 2 == 0 else 0.0 for i in range(len(paced))])
    assert rs.metronome(paced, None, 0.10, 3, 60_000)["equal_runs"] == 0
    assert rs.metronome(paced, delays, 0.10, 3, 60_000)["share_in_runs"] == 1.0
    assert rs.metronome(np.array([0, 1]), None, 0.1, 3, 1.0)["gaps"] == 0


def test_a_burst_over_a_quiet_baseline_is_one_spike():
    p = rs.Params()
    idx = np.arange(200)
    counts = np.full(200, 2)
    counts[120:125] = 60
    [(first, last, lam, scale, z, lp, seg)] = rs.scan_series(idx, counts, p, floor=0.0)
    assert (first, last, lam) == (120, 124, 2)
    assert seg == {b: 60 for b in range(120, 125)} and z >= p.z and lp <= math.log10(p.alpha)
    assert rs.scan_series(idx, np.full(200, 2), p, floor=0.0) == []


def _candidate(scope, key, buckets, fmt="bproxy"):
    return rs.Candidate(fmt, scope, key, 1000, 0, min(buckets), max(buckets), 1.0, 1.0, 10.0,
                        -10.0, dict(buckets))


def test_the_narrowest_series_that_explains_a_spike_keeps_it():
    session = _candidate("session", "s1", {10: 50, 11: 50})
    actor = _candidate("actor", "a1", {10: 52, 11: 51})  # the same events, and three more
    whole = _candidate("log", "bproxy", {10: 100, 11: 100, 12: 100})  # much more than s1
    other_format = _candidate("actor", "a1", {10: 52, 11: 51}, fmt="sven")
    # the session explains the actor's spike; another format's events are another spike
    assert [(k.scope, k.key) for k in rs.keep_spikes([actor, session, other_format])] == [
        ("session", "s1"), ("actor", "a1")]
    # the whole log's spike is more than the session's: it is kept, and absorbs it
    kept = rs.keep_spikes([whole, actor, session, other_format])
    assert [(k.scope, k.key, k.fmt) for k in kept] == [("actor", "a1", "sven"),
                                                       ("log", "bproxy", "bproxy")]
    assert kept[1].includes == ["session s1"]


def test_trim_keeps_the_dense_run_and_drops_stragglers():
    sp = _candidate("session", "s", {5: 10, 6: 10})  # core: 5000 ms to 7000 ms
    core = list(range(5000, 7000, 100))
    times = np.array([1000, 3000] + list(range(4500, 5000, 100)) + core + [7000, 7100, 9500])
    i, j = rs.trim(times, sp, factor=5.0)
    assert (times[i], times[j]) == (4500, 7100)


def _spike(count=600, expected=10.0, duration_s=120, actor_rate=5.0, share=0.0):
    return rs.Spike(
        fmt="bproxy", scope="session", series="s", width_ms=10_000, baseline=1.0, scale=1.0,
        open_z=10.0, open_log10_p=-20.0, buckets=12, includes=[], start=T0,
        stop=T0 + dt.timedelta(seconds=duration_s), count=count, expected=expected,
        rate=count / duration_s, log10_p=-50.0, peak_count=100,
        cadence={"share_in_runs": share, "longest_run": 0, "longest_run_gap_ms": None},
        actors=["a"], sessions=["s"], targets=[], actor_rate=actor_rate, guard_errors=(),
        guards=0, guard_error=None, marks=[rs.Mark("first", "f", 1)])


def test_rate_spike_severity_needs_size_duration_and_machine_speed_for_high():
    p = rs.Params()
    assert rs.judge(_spike(), p) is Severity.HIGH
    assert rs.judge(_spike(actor_rate=0.5), p) is Severity.MEDIUM  # a person's pace
    assert rs.judge(_spike(duration_s=30), p) is Severity.MEDIUM  # not sustained
    small = _spike(count=40, expected=10.0, actor_rate=0.5)
    assert rs.judge(small, p) is Severity.LOW
    assert rs.judge(_spike(count=40, expected=10.0, actor_rate=0.5, share=0.9), p) is Severity.MEDIUM
    f = rs.describe(_spike(), Severity.HIGH, p)
    assert [e.note for e in f.evidence] == ["first event of the spike"]


# --- unusual_actor -----------------------------------------------------------------------------


def test_group_medians_and_distinct_counts():
    values = np.array([5, 1, 3, 10, 20, 7, 7])
    gid = np.array([0, 0, 0, 1, 1, 3, 3])
    med = ua._group_median(values, gid, 4)
    assert med[:2].tolist() == [3.0, 15.0] and math.isnan(med[2]) and med[3] == 7.0
    assert ua._group_distinct(values, gid, 4).tolist() == [3.0, 2.0, 0.0, 1.0]


def test_robust_z_scales_by_the_mad_or_when_most_windows_agree_by_the_spread():
    X = np.array([[1.0, 0.0], [2.0, 0.0], [3.0, 0.0], [4.0, 0.0], [100.0, 1.0]])
    z, med, scale = ua.robust_z(X)
    assert med.tolist() == [3.0, 0.0]
    assert math.isclose(scale[0], 1.4826) and z[4, 0] > 60
    assert scale[1] == X[:, 1].std() and math.isclose(z[4, 1], 2.5)


def _window(who="a", win=0, n=20, rate=1.0, error_share=0.0, repeat_share=0.0, gap_cv=0.5,
            tokens=0.0, fmt="bproxy"):
    return {"format": fmt, "who": who, "win": win, "n": n, "rate_per_min": rate,
            "error_share": error_share, "distinct_errors": 0.0, "distinct_targets": 1.0,
            "repeat_share": repeat_share, "gap_cv": gap_cv, "tokens_per_event": tokens}


def test_the_feature_matrix_fills_missing_values_with_the_median_and_logs_rates():
    X = ua.feature_matrix([_window(rate=9.999, gap_cv=None), _window(gap_cv=0.2),
                           _window(gap_cv=0.4, tokens=99.0)])
    assert math.isclose(X[0, 0], 1.0) and math.isclose(X[0, 5], 0.3)  # median of 0.2, 0.4
    assert math.isclose(X[2, 6], 2.0)


def test_a_window_is_loop_like_only_far_from_the_median_in_a_loop_like_direction():
    wins = [_window(win=i) for i in range(30)] + [_window(win=30, rate=600.0, gap_cv=0.01)]
    X = ua.feature_matrix(wins)
    z, med, _ = ua.robust_z(X)
    assert ua.loop_like(X[30], z[30], med, 3.0) == ["rate_per_min", "gap_cv"]
    assert ua.loop_like(X[3], z[3], med, 3.0) == []
    quiet = ua.feature_matrix(wins[:30] + [_window(win=30, rate=0.001)])
    zq, mq, _ = ua.robust_z(quiet)
    assert ua.loop_like(quiet[30], zq[30], mq, 3.0) == []  # slower is not loop-like


def test_rule_signals_and_adjacent_windows():
    p = ua.Params()
    storm = _window(n=50, rate=600.0, error_share=1.0, repeat_share=0.95, gap_cv=0.05)
    assert ua.rule_signals(storm, own=1.0, p=p) == ["repeated_error", "metronome", "rate_spike"]
    assert ua.rule_signals(_window(n=5, gap_cv=0.05), own=1.0, p=p) == []
    wins = [_window("a", 0), _window("a", 1), _window("a", 3), _window("b", 4), _window("b", 5)]
    assert ua.adjacent_groups(wins, [0, 1, 2, 3, 4]) == [[0, 1], [2], [3, 4]]
    assert ua.adjacent_groups(wins, []) == []


def test_an_outlier_is_medium_only_when_a_simple_rule_agrees():
    o = ua.Outlier(
        fmt="bproxy", who="a", scope="actor", key="a", actor="a", start=T0, stop=T0, windows=1,
        events=50, window_s=60.0, score=0.7, scores=[0.7], windows_scored=40, top_start=T0,
        top_events=50, features={f: 1.0 for f in ua.FEATURES},
        median_window={f: 0.0 for f in ua.FEATURES}, z_scores={f: 5.0 for f in ua.FEATURES},
        unusual=["rate_per_min"], signals=[], sessions=[], first_event=("f", 3))
    assert ua.judge(o, ua.Params()) is Severity.LOW
    o.signals = ["metronome"]
    assert ua.judge(o, ua.Params()) is Severity.MEDIUM
    f = ua.describe(o, Severity.MEDIUM, ua.Params())
    assert f.details["corroborated_by"] == ["metronome"] and f.evidence[0].line == 3


def test_a_retry_run_is_checked_against_the_sorted_ids_a_consecutive_run_covers():
    covered = np.array([3, 8, 20, 41])
    assert re_.any_in(np.array([7, 20]), covered)
    assert re_.any_in(np.array([41]), covered) and re_.any_in(np.array([3]), covered)
    assert not re_.any_in(np.array([1, 9, 42, 50]), covered)
    assert not re_.any_in(np.array([5]), re_.NONE) and not re_.any_in(re_.NONE, covered)

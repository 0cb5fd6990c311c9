"""Grouping findings into incidents: the rules of `loophound.incidents`, tested on findings
alone (no store, no files): findings in, incidents out."""

from __future__ import annotations

import datetime as dt
import json
import random

import pytest

from loophound.incidents import DEFAULT_RULES, Rules, group, incident_id, item, runs

T0 = dt.datetime(2026, 6, 18, 23, 0, 0)
RANK = {"repeated_error": 10, "trigger_cycle": 20, "repair_loop": 25, "ping_pong": 30,
        "depth_violation": 40, "rate_spike": 60, "unusual_actor": 90}


def finding(fid: str, detector: str, severity: str = "high", start_s: float = 0,
            end_s: float = 60, actors=(), targets=(), sessions=(), files=("a.log",),
            details=None, lines: int = 100) -> dict:
    """A findings/v1 finding with what grouping reads."""
    return {
        "id": fid, "detector": detector, "severity": severity,
        "start": (T0 + dt.timedelta(seconds=start_s)).isoformat(timespec="milliseconds") + "Z",
        "end": (T0 + dt.timedelta(seconds=end_s)).isoformat(timespec="milliseconds") + "Z",
        "actors": list(actors), "targets": list(targets), "sessions": list(sessions),
        "evidence": [{"file": f, "line": 1} for f in files], "details": details or {},
        "lines": lines,
    }


def grouped(findings: list[dict], shared=None, rules: Rules = DEFAULT_RULES):
    return group([item(f, RANK[f["detector"]]) for f in findings], shared, rules)


def storm(prefix: str = "", files=("bproxy.log",), actor="70751:1331137e", session="6afr3v",
          start_s: float = 0):
    """A retry storm as the sample log's: a run of one error, a rate spike on its session,
    an unusual actor and an unusual session."""
    return [
        finding(prefix + "re", "repeated_error", "critical", start_s + 1, start_s + 120,
                [actor], [], [session], files),
        finding(prefix + "spike", "rate_spike", "high", start_s, start_s + 120, [actor],
                ["bproxy"], [session], files),
        finding(prefix + "ua1", "unusual_actor", "medium", start_s, start_s + 100, [actor], [],
                [session], files),
        finding(prefix + "ua2", "unusual_actor", "medium", start_s, start_s + 100, [], [],
                [session], files),
    ]


def test_one_loop_seen_by_three_detectors_is_one_incident_led_by_the_most_specific():
    incidents = grouped(storm())
    assert len(incidents) == 1
    inc = incidents[0]
    assert inc.primary == "re" and inc.id == incident_id("re")
    assert inc.signals == ["spike", "ua1", "ua2"]  # attribution's order: rank, severity, start
    assert inc.detectors == ["repeated_error", "rate_spike", "unusual_actor"]
    assert inc.severity == "critical" and inc.highest == "critical"
    assert inc.start == T0 and inc.end == T0 + dt.timedelta(seconds=120)
    assert inc.members == ["re", "spike", "ua1", "ua2"]


def test_the_same_loop_in_another_file_is_another_incident():
    """The trimmed copy of a log holds the same session at the same times: another loop."""
    findings = storm("a-", files=("bproxy/x.log",)) + storm("b-", files=("trimmed/x.log",),
                                                           actor=None)
    for f in findings:
        f["actors"] = [a for a in f["actors"] if a]
    incidents = grouped(findings)
    assert sorted(i.members for i in incidents) == [
        ["a-re", "a-spike", "a-ua1", "a-ua2"], ["b-re", "b-spike", "b-ua1", "b-ua2"]]


def test_a_signal_over_two_loops_joins_one_and_never_merges_them():
    """A whole-log rate spike covering two storms (two callers) at once goes to the loop it
    shares the most events with; the storms stay two incidents."""
    findings = [
        finding("re-x", "repeated_error", "critical", 0, 100, ["x"], [], ["s1"], lines=800),
        finding("re-y", "repeated_error", "critical", 10, 90, ["y"], [], ["s2"], lines=300),
        finding("spike", "rate_spike", "medium", 0, 100, [], [], [], lines=1200),
    ]
    incidents = grouped(findings, {("re-x", "spike"): 800, ("spike", "re-y"): 300})
    assert [(i.primary, i.signals) for i in incidents] == [("re-x", ["spike"]), ("re-y", [])]


def test_findings_over_one_episode_at_the_same_time_are_one_incident():
    """A repair loop and the runner's repeated error over the same steps of one episode
    (LabTrust: every agent is in session episode-1) are one story, whatever their actors."""
    findings = [
        finding("repair", "repair_loop", "critical", 190, 500, ["coordinator"], [], ["episode-1"]),
        finding("blocked", "repeated_error", "high", 210, 340, ["A_RUNNER_0"], [], ["episode-1"]),
        finding("later", "repeated_error", "high", 900, 990, ["A_RUNNER_1"], [], ["episode-1"]),
    ]
    got = grouped(findings)
    assert [(i.primary, i.signals) for i in got] == [("blocked", ["repair"]), ("later", [])]
    assert got[0].severity == "critical" and got[0].end == T0 + dt.timedelta(seconds=500)


def test_the_same_session_in_two_logs_is_one_incident_only_where_a_finding_spans_both():
    """Two logs holding one session name at one time (a log and its trimmed copy) are two
    incidents; a finding over that session in both (a rate spike over the two copies) shows
    they are one place at one time: one incident."""
    apart = [
        finding("a", "repeated_error", "critical", 1, 120, ["x"], [], ["s"], ("a/x.log",)),
        finding("b", "repeated_error", "critical", 1, 120, [], [], ["s"], ("b/x.log",)),
    ]
    assert sorted(i.members for i in grouped(apart)) == [["a"], ["b"]]
    spike = finding("spike", "rate_spike", "high", 0, 120, ["x"], [], ["s"],
                    ("a/x.log", "b/x.log"))
    assert [i.members for i in grouped([*apart, spike])] == [["a", "b", "spike"]]


def test_no_two_incidents_share_a_session_over_overlapping_spans():
    """Whatever the detectors say, two incidents never hold one session at one time in one
    file: random findings over a few sessions, actors and times."""
    rng = random.Random(40)
    dets = list(RANK)
    for _ in range(30):
        findings = []
        for k in range(rng.randint(2, 12)):
            start = rng.uniform(0, 3000)
            findings.append(finding(f"f{k}", rng.choice(dets), rng.choice(["medium", "high"]),
                                    start, start + rng.uniform(1, 900),
                                    [rng.choice("abc")], [], [rng.choice(["s1", "s2"])]))
        by_id = {f["id"]: f for f in findings}
        got = grouped(findings)
        for x, i in enumerate(got):
            for j in got[x + 1:]:
                for m in i.members:
                    for n in j.members:
                        f, g = by_id[m], by_id[n]
                        assert not (set(f["sessions"]) & set(g["sessions"])
                                    and f["start"] <= g["end"] and g["start"] <= f["end"]), (m, n)


def test_an_incident_title_states_its_own_numbers_not_a_pieces():
    """A storm split into pieces: the title quotes the incident's events and span, never the
    first piece's count; the words come from details, not the detector's title."""
    from loophound.findings_json import incidents_of

    pieces = []
    for k, n in enumerate((6864, 9000, 14135)):
        f = finding(f"p{k}", "repeated_error", "critical", k * 1000, k * 1000 + 990, ["daemon"],
                    [], ["s"], details={"action": "text", "error": "ECONNRESET"})
        f.update(title=f"`text` failed {n:,} times in a row", summary="…", recommendation="…",
                 signal="", attributed={"events": n, "lines": n, "bytes": n, "tokens": 0,
                                        "unpriced_tokens": 0, "cost_usd": None,
                                        "events_by_kind": {"request": n}, "cost_basis": {}})
        pieces.append(f)
    [inc] = incidents_of(pieces, RANK)
    assert inc["events"] == 29999
    assert inc["title"] == ("One agent (`daemon`) retrying `text` on session `s` despite "
                            "`ECONNRESET`: 29,999 events over 50 min")
    assert "6,864" not in inc["title"]


def test_participants_in_pairs_and_cycles_link_findings():
    """A ping-pong and the depth never carried between the same pair; a trigger cycle and
    the hook depth stuck along its lineage; the other cycle at the same time stays apart."""
    findings = [
        finding("pp", "ping_pong", "critical", 0, 780, ["a", "b"], ["b", "a"], ["a↔b"],
                ("node-a/b.jsonl", "node-b/a.jsonl"), {"pair": ["a", "b"]}),
        finding("dv", "depth_violation", "medium", 2, 780, ["a", "b"], ["b", "a"], ["a↔b"],
                ("node-a/b.jsonl",), {"pair": ["a", "b"]}),
        finding("cyc1", "trigger_cycle", "critical", 0, 30000, ["ann", "elt"], ["ann", "elt"],
                ["ses_1"], ("hooks.jsonl",), {"cycle": ["ann", "elt"]}),
        finding("cyc2", "trigger_cycle", "high", 6000, 23000, ["mira", "nessa", "vic"],
                ["mira", "nessa", "vic"], ["ses_2"], ("hooks.jsonl",),
                {"cycle": ["vic", "nessa", "mira"]}),
        finding("hd1", "depth_violation", "low", 2000, 30000, ["ann", "elt"], ["ann", "elt"],
                ["ses_3"], ("hooks.jsonl",)),
        finding("hd2", "depth_violation", "low", 8000, 23000, ["mira", "nessa", "vic"],
                ["mira", "nessa", "vic"], ["ses_4"], ("hooks.jsonl",)),
    ]
    got = {i.primary: i.signals for i in grouped(findings)}
    assert got == {"pp": ["dv"], "cyc1": ["hd1"], "cyc2": ["hd2"]}


def test_findings_far_apart_in_time_are_separate_loops():
    findings = [
        finding("pp1", "ping_pong", "medium", 0, 8000, ["a", "b"], ["b", "a"], ["a↔b"]),
        finding("pp2", "ping_pong", "critical", 14000, 14800, ["a", "c"], ["c", "a"], ["a↔c"]),
        finding("spike", "rate_spike", "medium", 14000, 14800, ["a"], ["a"], []),
    ]
    got = {i.primary: i.signals for i in grouped(findings)}
    assert got == {"pp1": [], "pp2": ["spike"]}


def test_shared_events_link_a_finding_that_names_no_participant():
    """A whole-log spike names nobody; most of its events are the loop's."""
    loop = finding("pp", "ping_pong", "critical", 0, 600, ["a", "b"], ["b", "a"], lines=800)
    spike = finding("spike", "rate_spike", "medium", 0, 600, lines=900)
    assert [i.members for i in grouped([loop, spike], {("pp", "spike"): 800})] == [["pp", "spike"]]
    # a few events in common are not enough
    assert len(grouped([loop, spike], {("pp", "spike"): 100})) == 2


def test_a_storm_interrupted_by_short_gaps_is_one_incident_with_its_interruptions_counted():
    """A storm broken by stray successes comes out as runs of the same error on the same key;
    runs a few seconds apart are one loop, and a run an hour later is another."""
    pieces = [finding(f"run{k}", "repeated_error", "high" if k != 3 else "critical",
                      k * 100, k * 100 + 97, ["caller"], [], ["s"]) for k in range(6)]
    later = finding("later", "repeated_error", "high", 4000, 4100, ["caller"], [], ["s"])
    spike = finding("spike", "rate_spike", "high", 0, 597, ["caller"], [], ["s"])
    incidents = grouped([*reversed(pieces), later, spike])
    first = next(i for i in incidents if "run0" in i.members)
    assert first.primary == "run3"  # the most severe piece speaks for the run
    assert first.pieces == [f"run{k}" for k in range(6)]
    assert first.signals == ["spike"]
    assert first.interruptions == 5 and first.interrupted_s == pytest.approx(15.0)
    assert first.start == T0 and first.end == T0 + dt.timedelta(seconds=597)
    assert [i.members for i in incidents if i is not first] == [["later"]]


def test_thousands_of_pieces_merge_quickly():
    """A 17-hour storm whose responses could not be joined came out as 5,557 findings."""
    pieces = [finding(f"r{k:05d}", "repeated_error", "high", k * 11, k * 11 + 10, ["c"], [], ["s"])
              for k in range(5557)]
    incidents = grouped(pieces)
    assert len(incidents) == 1 and incidents[0].interruptions == 5556
    assert incidents[0].primary == "r00000"


def test_pieces_merge_only_within_the_same_participants_and_file():
    a = finding("a", "repeated_error", "high", 0, 50, ["c"], [], ["s"], ("x.log",))
    b = finding("b", "repeated_error", "high", 55, 100, ["c"], [], ["s"], ("y.log",))
    c = finding("c", "repeated_error", "high", 55, 100, ["d"], [], ["s"], ("x.log",))
    assert [len(r.items) for r in runs([item(f, 10) for f in (a, b, c)])] == [1, 1, 1]


def test_severity_is_the_highest_member_raised_when_enough_detectors_agree():
    base = dict(actors=["a", "b"], targets=["b", "a"], sessions=["a↔b"])
    two = [finding("pp", "ping_pong", "medium", 0, 600, **base),
           finding("dv", "depth_violation", "medium", 0, 600, **base)]
    three = two + [finding("sp", "rate_spike", "medium", 0, 600, **base)]
    assert [(i.severity, i.raised) for i in grouped(two)] == [("medium", False)]
    assert [(i.severity, i.highest) for i in grouped(three)] == [("high", "medium")]
    assert grouped(three, rules=Rules(agree=4))[0].severity == "medium"
    critical = [dict(f, severity="critical") if f["id"] == "pp" else f for f in three]
    assert grouped(critical)[0].severity == "critical"  # never above critical


def test_grouping_does_not_depend_on_the_order_findings_come_in():
    findings = storm("a-") + storm("b-", files=("other.log",), start_s=5000) + [
        finding(f"r{k}", "repeated_error", "high", 9000 + k * 60, 9000 + k * 60 + 55, ["z"], [],
                ["q"]) for k in range(8)]
    expected = [(i.id, i.members, i.interruptions) for i in grouped(findings)]
    rng = random.Random(3)
    for _ in range(5):
        rng.shuffle(findings)
        assert [(i.id, i.members, i.interruptions) for i in grouped(findings)] == expected


def test_incidents_come_most_severe_first_then_by_start():
    findings = [finding("late", "repeated_error", "critical", 500, 600, ["a"]),
                finding("low", "repeated_error", "medium", 0, 100, ["b"]),
                finding("early", "repeated_error", "critical", 0, 100, ["c"])]
    assert [i.primary for i in grouped(findings)] == ["early", "late", "low"]


# -- end to end: a log with a planted interrupted storm -------------------------------------------


def _interrupted_storm(path, bursts: int = 5, per_burst: int = 150) -> None:
    """A bproxy log: an hour of healthy traffic, then one caller scrolling a closed session at
    10/s, its storm broken into `bursts` by a stray success (and once by a 20 s pause too)."""
    base = 1_781_820_000_000  # 2026-06-18T22:00:00Z, in ms
    lines: list[str] = []

    def log(t: int, **fields) -> None:
        lines.append(json.dumps({"level": 30, "time": base + t, "pid": 7, "hostname": "h",
                                 **fields}))

    for i in range(360):  # healthy: another caller, every 10 s
        log(i * 10_000, id=f"ok{i}", action="snapshot", session="good", event="received",
            ownerHash="aaaa0001")
        log(i * 10_000 + 40, id=f"ok{i}", event="response", ok=True, elapsed_ms=40,
            ownerHash="aaaa0001")
    t = 3_600_000
    log(t, id="close", action="session.close", session="dead01", event="received",
        ownerHash="bbbb0002")
    log(t + 50, id="close", event="response", ok=True, elapsed_ms=50, ownerHash="bbbb0002")
    n = 0
    for b in range(bursts):
        for _ in range(per_burst):
            t += 100
            log(t, id=f"s{n}", action="scroll", session="dead01", event="received",
                ownerHash="bbbb0002")
            log(t + 2, id=f"s{n}", event="response", ok=False, elapsed_ms=2,
                error_code="SESSION_NOT_FOUND", ownerHash="bbbb0002")
            n += 1
        if b < bursts - 1:  # the stray success that breaks the run
            t += 20_000 if b == 1 else 100
            log(t, id=f"s{n}", action="scroll", session="dead01", event="received",
                ownerHash="bbbb0002")
            log(t + 2, id=f"s{n}", event="response", ok=True, elapsed_ms=2, ownerHash="bbbb0002")
            n += 1
    for i in range(60):  # healthy again after it
        log(t + 60_000 + i * 10_000, id=f"late{i}", action="snapshot", session="good",
            event="received", ownerHash="aaaa0001")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_a_planted_interrupted_storm_is_one_incident_in_the_scan_and_the_cli(tmp_path):
    from typer.testing import CliRunner

    from loophound.cli import app

    _interrupted_storm(tmp_path / "logs" / "daemon.log")
    out = tmp_path / "f.json"
    runner = CliRunner()
    res = runner.invoke(app, ["scan", str(tmp_path / "logs"), "--store", str(tmp_path / "st"),
                              "--json", str(out)])
    doc = json.loads(out.read_text())
    runs_of = [f for f in doc["findings"] if f["detector"] == "repeated_error"]
    assert len(runs_of) == 5  # the detector sees five runs: a success ends each
    storm = [i for i in doc["incidents"] if i["detector"] == "repeated_error"]
    assert len(storm) == 1, [i["title"] for i in doc["incidents"]]
    inc = storm[0]
    assert sorted(inc["pieces"]) == sorted(f["id"] for f in runs_of)
    assert inc["interruptions"] == 4
    assert 20 <= inc["interrupted_s"] <= 21  # the 20 s pause, and three of 0.1 s
    assert inc["events"] >= 750 and inc["sessions"] == ["dead01"]
    assert f": {inc['events']:,} events over" in inc["title"]  # its own count, not a piece's
    assert len(doc["incidents"]) == 1  # its rate spike and unusual actor are inside it too
    # the CLI lists the one loop, verdict first, and the findings only when asked
    assert res.stdout.startswith("findings: 1 runaway loop (1 critical)"), res.stdout[:200]
    assert "(interrupted 4×)" in res.output and "1 incident(s)" in res.output
    assert "detector" not in res.output.split("incident(s)")[0]
    listed = runner.invoke(app, ["scan", "--store", str(tmp_path / "st"), "--findings"])
    assert listed.output.count("repeated_error") >= 5 and "1 incident(s)" in listed.output

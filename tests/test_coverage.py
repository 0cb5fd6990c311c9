"""An honest verdict: a scan that finds nothing says whether it could judge the logs. A log
whose fields loophound cannot interpret is inconclusive (exit 4), never an all-clear."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loophound.cli import app
from loophound.coverage import InputCoverage, verdict
from loophound.vocabulary import Verdict

ROOT = Path(__file__).resolve().parents[1]


def _input(**shares) -> InputCoverage:
    base = {"time": 1.0, "actor": 1.0, "session": 1.0}
    return InputCoverage(1, "a.log", "generic", 10, base | shares, {"repeated_error": 10},
                         actions=10)


def test_the_verdict_rests_on_what_could_be_judged():
    judged = _input()
    assert verdict(0, [judged], []) == Verdict.CLEAN
    assert verdict(2, [judged], []) == Verdict.FINDINGS
    unjudged = _input(actor=0.0, session=0.1)
    assert not unjudged.understood and "actor or session" in unjudged.missing()
    assert verdict(0, [judged, unjudged], []) == Verdict.INCONCLUSIVE
    assert verdict(0, [judged], [{"path": "x.json", "reason": "not recognised"}]) == \
        Verdict.INCONCLUSIVE
    assert verdict(0, [], []) == Verdict.INCONCLUSIVE  # nothing read: nothing backed
    no_detector = InputCoverage(2, "b.log", "generic", 5, {"time": 1, "actor": 1}, {}, actions=5)
    assert verdict(0, [judged, no_detector], []) == Verdict.INCONCLUSIVE
    metrics = InputCoverage(3, "results.json", "labtrust", 4, {"time": 0.0}, {}, actions=0)
    assert metrics.context_only and verdict(0, [judged, metrics], []) == Verdict.CLEAN


def test_a_log_loophound_cannot_interpret_is_inconclusive_not_clean(tmp_path):
    """A transcript-like log of which automatic mapping finds only the time: no finding,
    and the scan says so, names the log, the missing fields and the keys to map; exit 4."""
    log = tmp_path / "session.jsonl"
    log.write_text("".join(json.dumps({
        "type": "assistant", "timestamp": f"2026-01-01T10:{m:02d}:00Z", "uuid": f"u{m}",
        "message": {"role": "assistant", "content": [{"type": "tool_use", "name": "Bash"}]},
    }) + "\n" for m in range(30)))
    runner = CliRunner()
    done = runner.invoke(app, ["ingest", str(log), "--store", str(tmp_path / "st"),
                               "--format", "generic"])
    assert done.exit_code == 0, done.output
    scan = runner.invoke(app, ["scan", "--store", str(tmp_path / "st"),
                               "--json", str(tmp_path / "f.json")])
    assert scan.exit_code == 4, scan.output
    assert scan.stdout.startswith("could not judge: 1 of 1 logs could not be judged")
    assert "no runaway loop in what could be judged" in scan.stdout.splitlines()[0]
    assert "clean" not in scan.stdout and "session.jsonl" in scan.stdout
    assert "message" in scan.stdout and "--mapping" in scan.stdout
    cov = json.loads((tmp_path / "f.json").read_text())["coverage"]
    assert cov["verdict"] == "inconclusive"
    (entry,) = cov["inputs"]
    assert entry["judged"] is False and entry["shares"]["time"] == 1.0
    assert entry["shares"]["actor"] == 0.0 and "actor or session" in entry["missing"]
    assert "message" in entry["unmapped_keys"]
    never = runner.invoke(app, ["scan", "--store", str(tmp_path / "st"), "--fail-on", "never"])
    assert never.exit_code == 0 and never.stdout.startswith("could not judge:")
    # the report leads with the same verdict, never "no runaway loop found"
    made = runner.invoke(app, ["report", "--store", str(tmp_path / "st"), "--out",
                               str(tmp_path / "r.html")])
    assert made.exit_code == 0, made.output
    html = (tmp_path / "r.html").read_text()
    assert "<h1>loophound report: could not judge every log</h1>" in html
    assert "<strong>Could not judge: </strong>" in html and "no runaway loop found" not in html


def test_clean_twins_are_clean_and_say_so(tmp_path):
    from loophound.synth import write_clean_twins

    write_clean_twins(tmp_path / "logs")
    (tmp_path / "logs" / "EXPECTED.json").unlink()  # the answer key: not a log of the system
    scan = CliRunner().invoke(app, ["scan", str(tmp_path / "logs"), "--store",
                                    str(tmp_path / "st"), "--json", str(tmp_path / "f.json"),
                                    "--fail-on", "high"])
    doc = json.loads((tmp_path / "f.json").read_text())
    cov = doc["coverage"]
    if doc["findings"]:  # healthy look-alikes may give low/medium findings, never an all-clear lie
        assert cov["verdict"] == "findings" and scan.exit_code == 0
    else:
        assert cov["verdict"] == "clean" and scan.exit_code == 0
    assert all(i["judged"] for i in cov["inputs"]), [i for i in cov["inputs"] if not i["judged"]]


@pytest.fixture(scope="module")
def sample_doc(tmp_path_factory) -> tuple[dict, Path]:
    tmp = tmp_path_factory.mktemp("coverage")
    CliRunner().invoke(app, ["investigate", str(ROOT / "sample_logs"), "--out",
                             str(tmp / "r.html"), "--store", str(tmp / "st")])
    done = CliRunner().invoke(app, ["scan", "--store", str(tmp / "st"), "--json",
                                    str(tmp / "f.json"), "--fail-on", "never"])
    assert done.exit_code == 0
    return json.loads((tmp / "f.json").read_text()), tmp / "r.html"


def test_the_samples_name_what_was_not_read(sample_doc):
    doc, report = sample_doc
    cov = doc["coverage"]
    assert cov["verdict"] == "findings"
    assert [s["path"] for s in cov["skipped"]] == [str(ROOT / "sample_logs" / "EXPECTED.json")]
    assert {d["name"] for d in cov["detectors"] if d["judged"]} >= {
        "repeated_error", "ping_pong", "trigger_cycle", "rate_spike", "repair_loop"}
    html = report.read_text()
    start = html.index('<section id="coverage"')
    assert start < html.index('id="timeline"')  # near the top
    section = html[start:html.index("</section>", start)]
    assert "EXPECTED.json" in section and "not read" in section


def _measured_in_one_pass(con) -> dict:
    """What `coverage.measure` counts, as one filtered count per figure over every event (by
    input): the definition its passes must add up to."""
    from loophound.coverage import FIELDS
    from loophound.detect import DETECTORS

    def per_input(condition: str) -> dict[int, int]:
        return dict(con.execute(f"SELECT CAST(event_id >> 32 AS INTEGER), count(*) FILTER "
                                f"(WHERE {condition}) FROM events GROUP BY 1").fetchall())

    events = per_input("true")
    shares = {name: per_input(sql) for name, sql in FIELDS.items()}
    judged = {}
    for name, d in DETECTORS.items():
        needs = " AND ".join("(" + " OR ".join(f"{c} IS NOT NULL" for c in group) + ")"
                             for group in d.needs)
        kinds = ", ".join(f"'{k}'" for k in d.reads)
        judged[name] = per_input(f"kind IN ({kinds}) AND {needs}")
    return {i: (n, {f: round(shares[f][i] / n, 4) for f in FIELDS},
                {d: judged[d][i] for d in DETECTORS}) for i, n in events.items()}


def test_each_figure_is_counted_over_the_events_that_carry_it(sample_doc):
    """A column costly to read that only some kinds' detectors need (`corr_id`, for repair
    attempts) is measured in a pass over those kinds alone; every share and every count of
    judged events is still that of one pass over every event."""
    from loophound import coverage
    from loophound.store import Store

    con = Store(sample_doc[1].parent / "st").connect()
    flags = list(dict.fromkeys([*coverage.FIELDS.values(), "corr_id IS NOT NULL",
                                "depth IS NOT NULL"]))
    first, *apart = coverage._flag_passes(flags)
    assert flags.index("corr_id IS NOT NULL") not in first[1]
    assert "repair_attempt" in first[0] and "NOT IN" in first[0]  # left to its own pass
    assert any("kind = 'repair_attempt'" in source and flags.index("corr_id IS NOT NULL") in got
               for source, got in apart)
    got = {c.input_id: (c.events, c.shares, c.judged_by) for c in coverage.measure(con)}
    assert got == _measured_in_one_pass(con)
    assert any(judged["repair_loop"] for _, _, judged in got.values())
    assert any(judged["depth_violation"] for _, _, judged in got.values())


def test_a_log_where_a_detector_found_a_loop_was_judged():
    """A finding in a log whose actor share is low: the detector judged those events, so the
    coverage never says "0 of 1 logs could be judged" beside it."""
    from loophound.coverage import document

    thin = _input(actor=0.1, session=0.1)
    assert not thin.understood
    (entry,) = document(1, [thin], [])["inputs"]
    assert entry["judged"] is False
    (entry,) = document(1, [thin], [], found_in={"a.log"})["inputs"]
    assert entry["judged"] is True and entry["missing"] == []


def test_the_verdict_line_is_findings_clean_or_could_not_judge_with_the_reason():
    from loophound.findings_json import verdict as said

    def doc(severities, inputs=(True,), skipped=()):
        return {"findings": [], "incidents": [{"severity": s} for s in severities],
                "coverage": {"inputs": [{"judged": j, "missing": [] if j else ["time"]}
                                        for j in inputs],
                             "skipped": [{"path": p, "reason": "?"} for p in skipped]}}

    assert said(doc(["critical", "low"])) == (
        "findings", "1 runaway loop (1 critical); 1 unusual pattern (not runaway loops)")
    assert said(doc(["low", "low"])) == (
        "clean", "no runaway loop, and every log read could be judged; 2 unusual patterns "
                 "(not runaway loops)")
    assert said(doc([], (True, False))) == (
        "could not judge", "1 of 2 logs could not be judged (missing time); no runaway loop "
                           "in what could be judged")
    assert said(doc([], (), ())) == ("could not judge",
                                     "no log was read; no runaway loop in what could be judged")
    assert said(doc(["high"], (False,), ("x.png",)))[1].endswith(
        "; 1 of 1 logs could not be judged (missing time); 1 file not read")

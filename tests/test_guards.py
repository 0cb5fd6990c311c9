"""The guard lab on the sample logs and their clean twins: each incident's write-up guard stops
it, the defences that failed stop (almost) nothing, false blocks are counted; the contract is
deterministic; the command and the report section work."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loophound import api
from loophound.guards import SCHEMA, combine, preset_spec
from loophound.guards.lab import replay_selection
from loophound.guards.log import load
from loophound.guards.machines import predicate, replay
from loophound.runs import load_run, open_run
from loophound.store import Store

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_logs"
CLI = [sys.executable, "-c", "from loophound.cli import run; run()"]


def _store(tmp: Path, paths: list[Path]) -> Path:
    store = tmp / "store"
    api.scan(store, [str(p) for p in paths])
    return store


@pytest.fixture(scope="module")
def samples(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("guard-samples")
    return _store(tmp, [SAMPLES / d for d in ("bproxy", "hooks", "sven", "labtrust")])


@pytest.fixture(scope="module")
def twins(tmp_path_factory) -> Path:
    from loophound.synth import write_clean_twins

    tmp = tmp_path_factory.mktemp("guard-twins")
    write_clean_twins(tmp / "logs")
    return _store(tmp, [tmp / "logs" / d for d in ("bproxy", "hooks", "sven", "labtrust")])


@pytest.fixture(scope="module")
def lab(samples) -> dict:
    return api.guards(samples, presets=["had", "adopted"]).document


def _guard(doc: dict, name: str) -> dict:
    return next(g for g in doc["guards"] if g["name"] == name)


def _rows(g: dict, detector: str, fmt: str | None = None) -> list[dict]:
    return [r for r in g["incidents"] if r["detector"] == detector
            and (fmt is None or fmt in r["title"] or fmt in r["finding_id"])]


def test_the_breaker_blocks_all_but_the_first_few_dead_session_requests(lab):
    g = _guard(lab, "bproxy-breaker")
    storms = [r for r in _rows(g, "repeated_error") if "SESSION_NOT_FOUND" in r["title"]]
    assert storms
    for r in storms:
        assert r["events"] == 1200 and r["events_before_block"] <= 3
        assert r["blocked_events"] >= 1197 and r["share_blocked"] > 0.99
    assert g["false_blocks"] == 0 and g["trips"] == 1
    assert g["blocked"]["cost_usd"] >= 2.39  # 1,197 requests at the assumed $0.002


def test_the_cycle_check_blocks_the_hook_cycle_from_its_first_closing_hop(lab):
    g = _guard(lab, "hooks-cycle")
    cycles = _rows(g, "trigger_cycle")
    assert len(cycles) == 2
    for r in cycles:
        # the root session and the hop that opened the cycle happened; the closing hop is
        # refused and every session it would have started is prevented
        assert r["events_before_block"] <= 3 and r["share_blocked"] > 0.89
        assert r["first_block"] is not None
    assert g["blocked"]["cost_usd"] == 0 and g["blocked_upper"]["cost_usd"] > 200


def test_the_hop_budget_stops_the_echo(lab):
    g = _guard(lab, "sven-hop-budget")
    echoes = [r for r in _rows(g, "ping_pong") if r["events"] >= 300]
    assert len(echoes) == 2  # the gateways' assistant echo and the two bots in a room
    for r in echoes:
        assert r["share_blocked"] > 0.95 and r["events_before_block"] <= 4
    # the user-role chain the log shows stopped at depth 4 each time: nothing more to stop
    (stopped,) = [r for r in _rows(g, "ping_pong") if r["events"] == 24]
    assert stopped["blocked_events"] == 0
    assert g["false_blocks"] == 0


def test_what_they_had_blocks_nothing_of_the_loops(lab):
    for name in ("bproxy-pacing", "hooks-exclude-self", "hooks-origin-depth",
                 "hooks-idempotency", "hooks-per-completion", "hooks-hourly-20",
                 "sven-stated-depth"):
        g = _guard(lab, name)
        assert g["blocked"]["events"] == 0 and g["blocked_upper"]["events"] == 0, name
        assert all(r["blocked_events"] == 0 for r in g["incidents"]), name


def test_no_guard_of_what_they_had_or_adopted_blocks_the_clean_twins(twins):
    doc = api.guards(twins, presets=["had", "adopted"], sweep="hooks-cycle.window=5m..1h").document
    assert doc["log"]["healthy_events"] > 1000 and doc["log"]["findings"] == 0
    names = {g.name for p in ("had", "adopted") for g in preset_spec(p).guards}
    assert {g["name"] for g in doc["guards"]} == names and len(names) == 16
    for g in doc["guards"]:
        assert g["false_blocks"] == 0 and g["blocked"]["events"] == 0, g["name"]
        assert g["false_block_share"] == 0 and g["false_block_examples"] == [], g["name"]
    # the zeros are not for want of look-alikes: the twin's review round trips come back 34
    # and 40 minutes after they left, so a cycle check of 35 minutes or more refuses them
    at = {r["value"]: r for r in doc["sweep"]["rows"]}
    assert at["30m"]["false_blocks"] == 0 and at["40m"]["false_blocks"] == 2
    assert at["1h"]["blocked"]["events"] == 2


def _hooks_line(minute: float, event: str, source: str, target: str, session: str,
                completion: str | None, parent: str | None) -> dict:
    ts = dt.datetime(2026, 5, 4, 9, tzinfo=dt.UTC) + dt.timedelta(minutes=minute)
    return {"ts": ts.isoformat(), "event": event, "source_agent": source, "target_agent": target,
            "completion_id": completion, "session_id": session,
            "parent_completion_id": parent, "hook_origin_depth": 0}


def test_a_round_trip_inside_the_window_and_a_monitoring_hand_off_are_false_blocks(tmp_path):
    """What the clean twin no longer holds, by hand: a review round trip whose return hop comes
    17 minutes after the first, and one monitoring agent hooking another. No detector calls
    either a loop, so the cycle check's and isolation's refusals are false blocks."""
    lines = [
        _hooks_line(0, "session_started", "user:sanne", "rutger", "s1", None, None),
        _hooks_line(9, "session_completed", "user:sanne", "rutger", "s1", "c1", None),
        _hooks_line(9.1, "hook_fired", "rutger", "saskia", "s1", "c1", None),
        _hooks_line(9.2, "session_started", "rutger", "saskia", "s2", None, "c1"),
        _hooks_line(26, "session_completed", "rutger", "saskia", "s2", "c2", "c1"),
        _hooks_line(26.1, "hook_fired", "saskia", "rutger", "s2", "c2", "c1"),  # line 6
        _hooks_line(26.2, "session_started", "saskia", "rutger", "s3", None, "c2"),
        _hooks_line(40, "session_completed", "saskia", "rutger", "s3", "c3", "c2"),
        _hooks_line(120, "session_started", "cron", "annegreet", "s4", None, None),
        _hooks_line(130, "session_completed", "cron", "annegreet", "s4", "c4", None),
        _hooks_line(130.1, "hook_fired", "annegreet", "eltjo", "s4", "c4", None),  # line 11
        _hooks_line(130.2, "session_started", "annegreet", "eltjo", "s5", None, "c4"),
        _hooks_line(140, "session_completed", "annegreet", "eltjo", "s5", "c5", "c4"),
    ]
    log = tmp_path / "logs" / "hooks.jsonl"
    log.parent.mkdir()
    log.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    store = _store(tmp_path, [log])
    doc = api.guards(store, presets=["hooks-fix"]).document
    assert doc["log"]["findings"] == 0
    for name, line in (("hooks-cycle", 6), ("hooks-isolation", 11)):
        g = _guard(doc, name)
        assert g["blocked"]["events"] == g["false_blocks"] == g["trips"] == 1, name
        assert [(x["file"], x["line"]) for x in g["false_block_examples"]] == [(str(log), line)]
        assert g["false_blocks_upper"] == 2  # the hook and the session it would have started
        assert g["false_block_share"] > 0
    # a window shorter than the 17 minutes between the hops lets the round trip through
    sweep = api.guards(store, presets=["hooks-fix"], sweep="hooks-cycle.window=10m..30m")
    at = {r["value"]: r["false_blocks"] for r in sweep.document["sweep"]["rows"]}
    assert at["15m"] == 0 and at["20m"] == 1


def test_the_contract_is_complete_and_deterministic(samples, lab):
    again = api.guards(samples, presets=["had", "adopted"]).document
    from loophound.findings_json import dumps

    assert dumps(again) == dumps(lab)
    assert lab["schema"] == SCHEMA == "loophound.guards/v1"
    for g in lab["guards"]:
        assert {"name", "type", "params", "trips", "first_block", "blocked", "blocked_upper",
                "false_blocks", "incidents"} <= g.keys()
        for bound in (g["blocked"], g["blocked_upper"]):
            assert {"events", "tokens", "cost_usd"} <= bound.keys()
        assert g["blocked"]["events"] <= g["blocked_upper"]["events"]
        for r in g["incidents"]:
            assert {"finding_id", "detector", "events", "blocked_events", "first_block",
                    "events_before_block", "cost_before_block"} <= r.keys()
    assert lab["log"]["end"] and lab["sweep"] is None


def test_a_sweep_marks_the_defaults_and_recommends_a_setting(samples):
    doc = api.guards(samples, presets=["hooks-fix"], sweep="hooks-cycle.window=5m..1h").document
    sw = doc["sweep"]
    values = [r["value"] for r in sw["rows"]]
    assert values[0] == "5m" and values[-1] == "1h" and "30m" in values
    assert {"label": "hooks-fix: hooks-cycle", "value": "30m"} in sw["marks"]
    at = {r["value"]: r for r in sw["rows"]}
    assert at["5m"]["saved_usd"] == 0 and at["10m"]["saved_usd"] > 100
    # up to 30 minutes no healthy hook is refused; the review round trips, back after 34 and
    # 40 minutes, are refused by the wider windows
    assert at["30m"]["false_blocks"] == 0 and at["40m"]["false_blocks"] == 2
    assert at["30m"]["saved_usd"] > at["10m"]["saved_usd"]  # the three-agent ring too
    rec = sw["recommended"]
    assert rec["value"] == "30m" and rec["false_blocks"] == 0 and rec["saved_usd"] > 200


def test_the_fast_replay_and_the_numpy_selection_agree_with_the_plain_ones(samples):
    """Every shipped guard: key by key with skips (where it is allowed) refuses what event by
    event refuses, and the vectorised `where` selects what `machines.predicate` selects."""
    s = Store(samples)
    opened = open_run(s, load_run(s))
    spec = combine([preset_spec(p) for p in ("had", "adopted", "frameworks")])
    log = load(opened.con, list(spec.guards))
    try:
        for g in spec.guards:
            fast, trips = replay_selection(log, g)
            sel = log.select(g)
            events = sel.events()
            plain = replay(events, g, log.children)
            assert (sorted(fast), trips) == (plain.blocked, plain.trips), g.name
            test = predicate(g.where)
            if test is not None:
                everything = log.select(dataclasses.replace(g, where=()))
                picked = [e.pos for e in everything.events() if test(e)]
                assert picked == sel.pos.tolist(), g.name
    finally:
        opened.con.close()


def test_the_command_writes_the_contract_and_says_a_mistake_in_one_line(samples, tmp_path):
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    done = subprocess.run([*CLI, "guards", "--store", str(samples), "--preset", "adopted",
                           "--json", "-"], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert [g["name"] for g in doc["guards"]][:3] == ["bproxy-breaker", "bproxy-error-throttle",
                                                      "bproxy-activity-cap"]
    bad = tmp_path / "bad.toml"
    bad.write_text('[[guard]]\nname = "b"\ntype = "breaker"\nthreshhold = 3\n')
    done = subprocess.run([*CLI, "guards", "--store", str(samples), "--spec", str(bad)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2
    assert done.stderr.startswith("error: guards spec") and "did you mean threshold" in \
        done.stderr and done.stderr.count("\n") == 1


def test_guards_scan_first_when_no_saved_scan_covers_the_store(tmp_path):
    store = tmp_path / "store"
    api.ingest([str(SAMPLES / "hooks")], store)
    got = api.guards(store, presets=["hooks-fix"])
    assert got.source.startswith("a new scan")
    assert _guard(got.document, "hooks-cycle")["blocked"]["events"] == 2  # one closing hop a cycle
    again = api.guards(store, presets=["hooks-fix"])
    assert again.source.startswith("saved run") and again.document == got.document


@pytest.fixture(scope="module")
def guards_report(samples, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("guards-report") / "report.html"
    api.guards(samples, presets=["had", "adopted"], sweep="hooks-cycle.window=5m..1h",
               report=out, generated_at="2026-06-19T08:00:00Z")
    return out


def test_the_report_compares_the_guards_side_by_side(guards_report):
    html = guards_report.read_text(encoding="utf-8")
    assert '<section id="guards"' in html and "What would have stopped it" in html
    assert "bproxy-breaker" in html and "hooks-cycle" in html and 'id="chart-guards-sweep"' in html
    assert "Recommended:" in html


@pytest.mark.browser
def test_the_guards_section_renders_in_chromium(guards_report):
    from test_report_browser import Browser, _load, require_chromium

    b = Browser(require_chromium())
    try:
        page = _load(b, guards_report)
        assert b.console_errors() == []
        assert page["failed"] == 0 and page["charts"] == page["figures"] > 5
        section = b.eval("""(() => {
          const s = document.getElementById('guards');
          return {text: s.innerText, svgs: s.querySelectorAll('div[data-fig] .main-svg').length,
                  rows: s.querySelectorAll('table.guards tbody tr').length,
                  marks: Array.from(s.querySelectorAll('div[data-fig] svg text')).map(
                    t => t.textContent).join('\\n')};
        })()""")
        assert section["svgs"] >= 1 and section["rows"] == 16
        assert "hooks-fix: hooks-cycle" in section["marks"]
        assert "What would have stopped it" in section["text"]
    finally:
        b.close()


def test_no_guard_named_is_a_clear_error(samples):
    from loophound.errors import ConfigError

    with pytest.raises(ConfigError, match="presets: adopted"):
        api.guards(samples)


def test_investigate_with_guards_gives_the_report_with_the_section_in_one_command(tmp_path):
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "SOURCE_DATE_EPOCH": "1767225600"}
    hooks = str(SAMPLES / "hooks")
    out = tmp_path / "with.html"
    done = subprocess.run([*CLI, "investigate", hooks, "--out", str(out), "--preset", "hooks-had",
                           "--preset", "hooks-fix", "--sweep", "hooks-cycle.window=10m..1h"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "hooks-cycle" in done.stdout and "recommended: window = 30m" in done.stdout
    html = out.read_text(encoding="utf-8")
    assert '<section id="guards"' in html and 'id="chart-guards-sweep"' in html
    assert '<a href="#guards">What would have stopped it</a>' in html
    assert html.index('<section id="incidents"') < html.index('<section id="guards"')
    # the same section as `loophound guards ... --report` over the same logs
    other = tmp_path / "guards.html"
    api.guards(tmp_path / "store", [hooks], presets=["hooks-had", "hooks-fix"],
               sweep="hooks-cycle.window=10m..1h", report=other, generated_at="2026-01-01T00:00:00Z")

    def section(text: str) -> str:
        start = text.index('<section id="guards"')
        return text[start:text.index("</section>", start)]

    assert section(html) == section(other.read_text(encoding="utf-8"))
    assert "hooks-cycle" in section(html) and "hooks-exclude-self" in section(html)

    plain = tmp_path / "without.html"
    done = subprocess.run([*CLI, "investigate", hooks, "--out", str(plain)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    html = plain.read_text(encoding="utf-8")
    assert 'href="#guards"' not in html and 'id="guards"' not in html

    # the guards are checked before a log is read: one line, exit 2, no report
    bad = tmp_path / "bad.toml"
    bad.write_text('[[guard]]\nname = "c"\ntype = "cycle"\nwindow = "30 minutes"\n')
    for options in (["--spec", str(bad)], ["--preset", "adoptd"], ["--sweep", "x.window=1m..2m"]):
        lost = tmp_path / "never.html"
        done = subprocess.run([*CLI, "investigate", hooks, "--out", str(lost), *options],
                              capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 2, options
        assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
        assert "reading the logs" not in done.stderr and not lost.exists()


def test_investigate_saves_its_run_only_in_a_store_that_is_kept(tmp_path):
    """Without --store the run lives in memory (the temporary store is removed unread), so
    the guards document's `log.run` names none; with one, the run is saved and named."""
    hooks = [str(SAMPLES / "hooks")]
    fleeting = api.investigate(hooks, tmp_path / "a.html", presets=["hooks-had"],
                               generated_at="2026-01-01T00:00:00Z")
    assert fleeting.guards["log"]["run"] is None and fleeting.report.path.exists()
    kept = api.investigate(hooks, tmp_path / "b.html", store=tmp_path / "store",
                           presets=["hooks-had"], generated_at="2026-01-01T00:00:00Z")
    assert kept.guards["log"]["run"] == 1
    assert api.load_run(Store(tmp_path / "store")).number == 1
    assert fleeting.guards["guards"] == kept.guards["guards"]
    assert (tmp_path / "a.html").read_bytes() == (tmp_path / "b.html").read_bytes()


GUARDS_AND_LIST = """
import sys
from loophound import api
doc = api.guards(sys.argv[1], [sys.argv[2]], presets=["had", "adopted"]).document
print(len(doc["guards"]) > 0, "pandas" in sys.modules)
"""


def test_a_replay_does_not_import_pandas(tmp_path):
    """pyarrow imports pandas (0.3-2 s of CPU) when it is installed, at `to_numpy()` of a
    column or a `pa.array` of numpy values: the replay converts with `db.arrow_numpy` and
    `db.numpy_arrow`, as ingest and the scan do."""
    pytest.importorskip("pandas")
    import loophound

    done = subprocess.run([sys.executable, "-c", GUARDS_AND_LIST, str(tmp_path / "st"),
                           str(Path(__file__).resolve().parents[1] / "sample_logs")],
                          capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PYTHONPATH=str(Path(loophound.__file__).parents[1])))
    assert done.stdout.split() == ["True", "False"], done.stderr[-3000:]

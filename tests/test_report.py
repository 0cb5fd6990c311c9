"""The HTML report: its figures (from the model, without a browser), its determinism, how it
quotes evidence, and how it treats hostile text. The browser half is test_report_browser.py."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import re
import shutil
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loophound import formats, queries
from loophound.attribute.costs import load_cost_model
from loophound.ingest import ingest
from loophound.report import build, fmt, gather, render
from loophound.report.evidence import MAX_QUOTE_BYTES, quote
from loophound.report.html import script_json
from loophound.report.model import TOP_ROWS
from loophound.scan import scan_store
from loophound.store import Store

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_logs"
EXPECTED = json.loads((SAMPLES / "EXPECTED.json").read_text())
WHEN = "2026-01-01T00:00:00Z"


def _store(tmp: Path, paths: list[Path], name: str = "store") -> Store:
    store = Store(tmp / name)
    ingest([str(p) for p in paths], store)
    return store


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory) -> Store:
    return _store(tmp_path_factory.mktemp("report"), [SAMPLES])


@pytest.fixture(scope="module")
def sample(sample_store):
    result = scan_store(sample_store)
    model = gather(result, WHEN)
    return result, model, render(model)


def _panel_html(html: str, label: str) -> str:
    start = html.index(f'id="incident-{label}"')
    end = html.find("</article>", start)
    return html[start:end]


# -- every sample incident is named, with its cost ---------------------------------------------


def _incidents() -> list[tuple[str, dict]]:
    return [(name, inc) for name, sec in EXPECTED["sections"].items() for inc in sec["incidents"]]


STUCK = {"same_file_reread": "repeated_action", "stuck_poll": "repeated_action",
         "restore_and_retry": "repeated_action",
         "wait_snapshot_cycle": "alternating_action", "restore_and_reedit": "alternating_action",
         "bot_repeats_message": "repeated_message", "stop_hook_loop": "repeated_message"}


def _match(section: str, inc: dict, panels) -> list:
    """The panels that name this incident of the answer key."""
    out = []
    for p in panels:
        f, d = p.finding, p.finding["details"]
        files = {e.file for e in p.evidence}
        in_section = any(section in Path(x).parts for x in files)
        kind = inc["kind"]
        if kind == "dead_session_retry":  # a member: the log and its trimmed copy are one
            ok = any(m["detector"] == "repeated_error" and inc["session"] in m["sessions"]
                     and m["details"].get("action") == inc["action"]
                     and any(section in Path(e["file"]).parts for e in m["evidence"])
                     for m in p.members)
        elif kind == "blocked_repeat":
            ok = (f["detector"] == "repeated_error" and inc["agent_id"] in f["actors"]
                  and d.get("action") == inc["action_type"])
        elif kind in ("p2p_echo", "echo_guarded"):
            ok = f["detector"] == "ping_pong" and set(d.get("pair", [])) == set(inc["peers"])
        elif kind == "room_flood":
            ok = f["detector"] == "ping_pong" and d.get("channel") == inc["channel"]
        elif kind == "repair_loop":  # a member: the runner's blocked repeat of its episode
            ok = in_section and any(m["detector"] == "repair_loop" for m in p.members)
        elif kind == "hook_cycle":
            ok = f["detector"] == "trigger_cycle" and set(d.get("cycle", [])) == set(inc["cycle"])
        elif kind == "handoff_loop":
            ok = f["detector"] == "ping_pong" and set(d.get("pair", [])) == set(inc["peers"])
        elif kind == "tool_error_loop":
            ok = (f["detector"] == "repeated_error" and inc["actor"] in f["actors"]
                  and d.get("action") == inc["action"] and in_section)
        elif kind in ("commit_rejected_by_hook", "subagent_reruns_failing_test",
                      "same_edit_not_verbatim", "same_failing_test"):
            ok = (f["detector"] == "repeated_error" and inc["actor"] in f["actors"]
                  and inc["session"] in f["sessions"] and d.get("action") == inc["action"]
                  and in_section)
        elif kind in STUCK:  # a member of the incident (a ping-pong of one message may lead)
            ok = in_section and any(
                m["detector"] == STUCK[kind] and inc["actor"] in m["actors"]
                and inc["session"] in m["sessions"] for m in p.members)
        else:
            raise AssertionError(f"answer key has an incident kind this test does not know: {kind}")
        if ok:
            out.append(p)
    return out


DETECTOR_OF = {"dead_session_retry": "repeated_error", "blocked_repeat": "repeated_error",
               "p2p_echo": "ping_pong", "echo_guarded": "ping_pong", "room_flood": "ping_pong",
               "repair_loop": "repair_loop", "hook_cycle": "trigger_cycle",
               "commit_rejected_by_hook": "repeated_error",
               "subagent_reruns_failing_test": "repeated_error",
               **STUCK,  # the stuck agents' loops: the detector the answer key names
               "handoff_loop": "ping_pong", "tool_error_loop": "repeated_error",
               "same_edit_not_verbatim": "repeated_error", "same_failing_test": "repeated_error"}


@pytest.mark.parametrize("section,incident", _incidents(),
                         ids=[f"{s}-{i['kind']}" for s, i in _incidents()])
def test_every_sample_incident_is_named_with_its_cost(sample, section, incident):
    from loophound.detect import DETECTORS

    if incident.get("awaits"):  # planted for a detector that does not exist yet
        pytest.skip(f"{incident['kind']} awaits {incident['awaits']}")
    if DETECTOR_OF[incident["kind"]] not in DETECTORS:
        pytest.skip(f"detector {DETECTOR_OF[incident['kind']]} has not landed yet")
    _, model, html = sample
    panels = _match(section, incident, model.panels)
    assert panels, f"no runaway loop in the report names {section}:{incident['kind']}"
    # one loop, one panel: the other findings that saw it are inside it, not panels of their own
    assert len(panels) == 1, [p.label for p in panels]
    p = panels[0]
    body = _panel_html(html, p.label)
    assert fmt.rich(p.incident["title"]) in body
    # the cost is on the panel, and it is the right one where the answer key states it
    cost = p.own.cost_usd
    shown = fmt.money(cost, "unpriced" if p.own.tokens else "–")
    assert f"<dt>Cost</dt><dd>{fmt.esc(shown)}" in body
    if incident["kind"] == "hook_cycle":
        assert cost == pytest.approx(incident["cost_usd"], abs=0.01)
    elif incident["kind"] == "repair_loop":
        assert cost == pytest.approx(incident["cost_usd"], rel=1e-3)
    elif incident["kind"] == "dead_session_retry":
        # every request of the loop is assumed to cost one call: the storm's 1,200 in each
        # copy of the log (its rate spike over both makes them one incident), and the
        # session.close the spike saw begin it
        copies = sum(1 for m in p.members if m["detector"] == "repeated_error")
        assert copies == 2 and abs(p.own.events - copies * incident["requests"]) <= 4
        assert cost == pytest.approx(p.own.events * 0.002, rel=1e-6)
        assert "0.002" in " ".join(model.cost_notes)  # and the assumption is stated
    elif incident["kind"] in ("p2p_echo", "room_flood"):
        assert cost is not None and cost > 0


def test_headline_counts_runaway_loops_and_names_the_costliest(sample):
    result, model, html = sample
    text = model.headline_text
    incidents = result.document["incidents"]
    critical = sum(1 for i in incidents if i["severity"] == "critical")
    assert text.startswith(f"Findings: {len(incidents)} runaway loops ({critical} critical, ")
    assert len(incidents) < len(result.document["findings"])  # loops, not findings, counted
    assert "$" in text and "Runaway loops made" in text
    main = max(model.panels, key=lambda p: (p.own.cost_usd or 0))
    assert f"({main.label}," in text
    assert fmt.money(main.own.cost_usd) in text
    assert '<p class="headline" id="headline">' in html
    assert model.title == f"loophound incident report: {len(incidents)} runaway loops"


# -- figures --------------------------------------------------------------------------------


def test_attribution_adds_up_to_the_whole_log(sample):
    """One row per runaway loop, each owning its events: loops and background add up to the
    whole log in events, lines, bytes, tokens and dollars, and so do their shares."""
    _, model, html = sample
    t = model.totals
    parts = [p.own for p in model.panels] + [model.background]
    parts += [model.rest] if model.rest is not None else []
    assert sum(x.events for x in parts) == t.events
    assert sum(x.lines for x in parts) == t.lines
    assert sum(x.bytes for x in parts) == t.bytes
    assert sum(x.tokens for x in parts) == t.tokens
    # the whole log's cost is rounded to a millionth of a dollar, as every figure
    assert sum(x.cost_usd or 0 for x in parts) == pytest.approx(t.cost_usd, abs=1e-6)
    assert sum(x.events_share for x in parts) == pytest.approx(1.0)
    for p in model.panels:  # every row owns its events
        assert p.own.events > 0 and p.own.lines > 0, p.label
    rows = re.search(r'<section id="attribution".*?</section>', html, re.S).group(0)
    assert rows.count('<a href="#incident-I') == len(model.panels)
    assert "all its events are counted in" not in rows
    # the storm of the log and of its trimmed copy: one row (a spike over both copies)
    assert len(re.findall(r"retrying <code>scroll</code>", rows)) == 1


def test_incidents_of_the_report_are_the_findings_json_incidents(sample):
    """The report's incident figures are the ones the findings JSON states (each event owned
    by one incident), and every finding of the document is in exactly one panel."""
    result, model, _ = sample
    doc = result.document
    assert [p.incident["id"] for p in model.panels] == [i["id"] for i in doc["incidents"]]
    for p in model.panels:
        inc = p.incident
        assert (p.own.events, p.own.lines, p.own.bytes, p.own.tokens) == (
            inc["events"], inc["lines"], inc["bytes"], inc["tokens"]), p.label
        assert p.own.cost_usd == pytest.approx(inc["cost_usd"], abs=1e-6)
        assert p.finding["id"] == inc["primary"] and p.members[0]["id"] == inc["primary"]
    members = [m["id"] for p in model.panels for m in p.members]
    assert sorted(members) == sorted(f["id"] for f in doc["findings"])


def test_findings_past_the_panel_limit_still_add_up(sample, monkeypatch):
    import loophound.report.model as model_module

    result, _, _ = sample
    monkeypatch.setattr(model_module, "MAX_PANELS", 3)
    model = gather(result, WHEN)
    assert len(model.panels) == 3
    assert model.panels_omitted == len(result.document["incidents"]) - 3
    parts = [p.own for p in model.panels] + [model.rest, model.background]
    assert sum(x.events for x in parts) == model.totals.events
    assert sum(x.lines for x in parts) == model.totals.lines
    assert sum(x.bytes for x in parts) == model.totals.bytes
    assert f"{model.panels_omitted:,} more runaway loops" in render(model)


def test_clean_logs_say_so(tmp_path):
    from loophound.synth import write_hooks_log

    write_hooks_log(tmp_path / "hooks", 7, incident=False)
    result = scan_store(_store(tmp_path, [tmp_path / "hooks"]))
    model = gather(result, WHEN)
    if result.document["findings"]:
        pytest.skip("a detector flags the clean twin: a detector test reports that")
    assert model.headline_text.startswith("Clean: No runaway loop, and every log read could "
                                          "be judged.")
    assert model.title == "loophound report: clean, no runaway loop found"
    assert "$" in model.headline_text  # the hooks log states its costs
    html = render(model)
    assert "No runaway loop: nothing in these logs looks like one" in html


def test_burn_rate_and_a_day_of_it(sample):
    _, model, _ = sample
    for p in model.panels:
        o = p.own
        if o.cost_usd is not None and o.duration_s:
            assert o.usd_per_hour == pytest.approx(o.cost_usd / (o.duration_s / 3600))
            assert o.usd_per_day == pytest.approx(o.usd_per_hour * 24)
            assert o.rate_per_s == pytest.approx(o.events / o.duration_s)


def test_unpriced_model_is_shown_unpriced_never_zero(sample):
    _, model, html = sample
    rows = [r for r in model.cost_by_model if r["basis"] == "unpriced"]
    assert rows and all(r["cost_usd"] is None for r in rows)
    assert any(r["model"] == "llama3.1:8b" for r in rows)
    assert any("not as $0" in n for n in model.cost_notes)
    # the by-model table row of an unpriced model says so
    row = re.search(r"<code>llama3\.1:8b</code>.*?</tr>", html, re.S).group(0)
    assert "unpriced" in row and "$0.00" not in row


def test_cost_per_call_assumption_is_settable_and_stated(sample_store):
    result = scan_store(sample_store, costs=load_cost_model(cost_per_call=0.01))
    model = gather(result, WHEN)
    note = " ".join(model.cost_notes)
    assert "$0.01" in note and "--cost-per-call" in note
    storm = next(p for p in model.panels if p.finding["detector"] == "repeated_error"
                 and "6afr3v" in p.finding["sessions"])
    assert storm.own.cost_usd == pytest.approx(storm.own.events * 0.01, rel=1e-6)
    assert storm.finding["cost_usd"] == pytest.approx(storm.finding["events"] * 0.01, rel=1e-6)
    # the cost tables are priced as the scan was, not with the default cost per call
    assumed = next(c for c in model.cost_by_actor_model if c["basis"] == "assumed")
    assert assumed["cost_usd"] == pytest.approx(assumed["items"] * 0.01)


def test_tables_top_talkers_and_errors(sample):
    _, model, _ = sample
    assert model.talkers[0]["events"] >= model.talkers[-1]["events"]
    top_error = model.errors[0]
    assert top_error["error"] == "SESSION_NOT_FOUND" and top_error["in_incidents"] == top_error["events"]
    assert model.inputs and all(len(i["sha256"]) == 64 for i in model.inputs)


def test_tables_are_the_named_queries_answers(sample):
    """The tables are the rows `loophound query` gives, and they count what attribution
    counts: every action once, every line's bytes, every dollar."""
    result, model, _ = sample
    con, totals = result.con, result.document["totals"]
    talkers = queries.records(con, "top_talkers", limit=1 << 30, no_actor=True)
    # the talkers, errors and cost tables are summed from the report's groups: the queries'
    # rows, column for column, to the last digit
    shown = ("actor", "events", "bytes", "errors", "tokens", "cost_usd")
    assert len(model.talkers) == TOP_ROWS < len(talkers)
    assert [tuple(t[c] for c in shown) for t in model.talkers] == [
        tuple(r[c] for c in shown) for r in talkers[:len(model.talkers)]]
    assert model.actors_total == sum(1 for r in talkers if r["actor"] is not None)
    assert sum(r["events"] for r in talkers) == totals["events"]
    assert sum(r["bytes"] for r in talkers) == totals["bytes"]
    assert sum(r["cost_usd"] or 0 for r in talkers) == pytest.approx(totals["cost_usd"])
    errors = queries.records(con, "top_errors", limit=1 << 30)
    assert 3 < len(model.errors) == min(len(errors), TOP_ROWS + 5)
    assert [(e["error"], e["events"], e["actors"], e["top_actor"]) for e in model.errors] == [
        (r["error"], r["attempts"], r["actors"], r["top_actor"]) for r in errors[:TOP_ROWS + 5]]
    by_model = queries.records(con, "cost_by_actor_and_model", per_actor=False, limit=None)
    assert {b: sum(r["events"] for r in by_model if r["basis"] == b)
            for b in totals["cost_basis"]} == totals["cost_basis"]
    assert model.cost_by_model == [
        {"model": r["model"], "basis": r["basis"], "items": r["events"], "tokens": r["tokens"],
         "cost_usd": r["cost_usd"], "actors": r["actors"]} for r in by_model]
    by_actor = queries.records(con, "cost_by_actor_and_model",
                               limit=len(model.cost_by_actor_model))
    assert len(by_actor) > 5
    assert model.cost_by_actor_model == [
        {"actor": r["actor"], "model": r["model"], "basis": r["basis"], "items": r["events"],
         "tokens": r["tokens"], "cost_usd": r["cost_usd"]} for r in by_actor]


def test_timeline_is_aggregated_and_split_by_quiet_stretches(sample):
    _, model, _ = sample
    assert 1 <= len(model.timeline) <= 6
    for g in model.timeline:
        points = sum(len(s.x) for s in g.series)
        assert points <= 360 * len(g.series)
        assert g.bucket_s >= 1
    # the simulated LabTrust clock gets its own, labelled, chart
    assert any(g.simulated for g in model.timeline)


# -- evidence --------------------------------------------------------------------------------


def _line(path: Path, n: int) -> str:
    """Line `n` of the file; of a file that is one JSON document (a trajectory), step `n`."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        data = fh.read()
    fmt_ = formats.sniff(data[:65536], path)
    if fmt_ is not None and fmt_.records is not None:
        offset, length = fmt_.records(data)[n - 1]
        return data[offset:offset + length].decode()
    with opener(path, "rb") as fh:
        for i, raw in enumerate(fh, 1):
            if i == n:
                return raw.decode().rstrip("\r\n")
    raise AssertionError(f"{path} has no line {n}")


def test_evidence_is_quoted_verbatim_with_file_and_line(sample):
    _, model, html = sample
    quoted = 0
    for p in model.panels:
        for e in p.evidence:
            assert e.problem is None, e.problem
            line = _line(Path(e.file), e.line)  # a long line (an OTLP export) is quoted in part
            want = (line.encode()[:MAX_QUOTE_BYTES].decode("utf-8", "backslashreplace")
                    if e.truncated else line)
            assert e.text == want
            assert f'<span class="loc">{fmt.esc(e.file)}:{e.line}</span>' in html
            assert f'<pre class="line">{fmt.esc(e.text)}</pre>' in html
            quoted += 1
    assert quoted >= len(model.panels)


def test_evidence_from_a_compressed_log_and_a_changed_or_missing_file(tmp_path):
    src = SAMPLES / "bproxy" / "2026-06-18.log"
    gz = tmp_path / "logs" / "bproxy.log.gz"
    plain = tmp_path / "logs" / "copy.log"
    gz.parent.mkdir()
    gz.write_bytes(gzip.compress(src.read_bytes()))
    trimmed = SAMPLES / "bproxy-trimmed" / "2026-06-18.log"
    shutil.copy(trimmed, plain)
    store = _store(tmp_path, [gz, plain])
    result = scan_store(store)
    con = result.con
    want = [(str(gz), 1209), (str(gz), 3630), (str(plain), 595)]
    got = quote(con, [(f, n) for f, n in want])
    for f, n in want:
        assert got[(f, n)].problem is None
        assert got[(f, n)].text == _line(Path(f), n)
    # the file changes: its first bytes no longer match what was hashed at ingest
    plain.write_bytes(b"X" + trimmed.read_bytes()[1:])
    changed = quote(con, [(str(plain), 595)])[(str(plain), 595)]
    assert changed.text is None and "changed" in changed.problem
    plain.unlink()
    gone = quote(con, [(str(plain), 595)])[(str(plain), 595)]
    assert gone.text is None and "no longer" in gone.problem
    missing = quote(con, [(str(plain), 999_999)])[(str(plain), 999_999)]
    assert missing.text is None and "not in the store" in missing.problem


# -- determinism --------------------------------------------------------------------------------


def test_same_inputs_same_report_apart_from_the_generation_time(sample, tmp_path):
    _, _, html = sample
    other = scan_store(_store(tmp_path, [SAMPLES]))
    again = build(other, WHEN)
    assert again == html
    later = render(gather(other, "2027-02-03T04:05:06Z"))  # the same scan, another time
    a, b = html.splitlines(), later.splitlines()
    diff = [(x, y) for x, y in zip(a, b, strict=True) if x != y]
    assert diff and all("2026-01-01 00:00:00 UTC" in x and "2027-02-03 04:05:06 UTC" in y
                        for x, y in diff)


def test_generation_time_from_source_date_epoch(monkeypatch):
    from loophound.report.model import generation_time

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767225600")
    assert generation_time() == "2026-01-01 00:00:00 UTC"
    assert generation_time("2026-06-19T08:00:00+02:00") == "2026-06-19 06:00:00 UTC"


# -- the page: self-contained, small, strict ---------------------------------------------------


def _scripts(html: str) -> list[tuple[str, str]]:
    return re.findall(r"<script([^>]*)>(.*?)</script>", html, re.S)


def test_page_is_self_contained_with_a_strict_policy(sample):
    _, _, html = sample
    assert len(html.encode()) < 10_000_000
    assert html.count("* plotly.js v") == 1  # the bundle once
    markup = re.sub(r"<script([^>]*)>.*?</script>", "", html, flags=re.S)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", markup)
    assert "<link" not in markup and "@import" not in markup
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html).group(1)
    assert "default-src 'none'" in csp and "'unsafe-inline'" not in csp.split("style-src")[0]
    code = [body for attrs, body in _scripts(html) if "application/json" not in attrs]
    assert len(code) == 2
    for body in code:
        digest = base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
        assert f"'sha256-{digest}'" in csp
    ids = re.findall(r'id="(chart-[^"]+)"', html)
    assert len(ids) == len(set(ids)) and all(re.fullmatch(r"chart-[a-z0-9-]+", i) for i in ids)


def test_script_json_cannot_close_its_element():
    nasty = {"x": "</script><script>alert(1)</script>", "y": "<!-- & \u2028\u2029 -->",
             "z": [1.5, float("nan")]}
    text = script_json(nasty)
    assert not re.search(r"[<>&\u2028\u2029]", text)
    back = json.loads(text)
    assert back["x"] == nasty["x"] and back["y"] == nasty["y"] and back["z"] == [1.5, None]


def test_escaping_helpers():
    assert fmt.esc('<a href="x">') == "&lt;a href=&quot;x&quot;&gt;"
    assert fmt.esc("evil\u202etxt.exe") == "evil\\u202etxt.exe"
    assert fmt.esc("bell\x07") == "bell\\x07"
    assert fmt.rich("retry `<b>` now") == "retry <code>&lt;b&gt;</code> now"
    assert fmt.plot_text("<b>x</b>") == "&lt;b&gt;x&lt;/b&gt;"
    assert fmt.plot_text('<a href="j">') == '&lt;a href="j"&gt;'
    assert fmt.money(None) == "unpriced" and fmt.money(0.0) == "$0.00"
    assert fmt.money(1217.934) == "$1,217.93"
    assert fmt.pct(0.999) == "99.9%" and fmt.pct(0.93) == "93%" and fmt.pct(0.0004) == "<0.1%"


ALLOWED_TAGS = {
    "html", "head", "meta", "title", "style", "body", "header", "footer", "nav", "section",
    "article", "figure", "div", "p", "h1", "h2", "h3", "h4", "strong", "em", "code", "time", "a",
    "span", "table", "thead", "tbody", "tr", "th", "td", "dl", "dt", "dd", "ol", "ul", "li",
    "pre", "details", "summary", "script", "svg", "defs", "marker", "path", "g", "rect", "text",
    "line", "circle",
}


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def test_hostile_text_is_escaped_everywhere(tmp_path):
    from test_report_browser import PAYLOADS, write_hostile_logs

    write_hostile_logs(tmp_path / "logs")
    result = scan_store(_store(tmp_path, [tmp_path / "logs"]))
    html = build(result, WHEN)
    assert result.document["findings"], "the hostile logs should produce findings"
    for p in PAYLOADS:
        if re.search(r"[<>\"]", p):  # markup never reaches the page as markup
            assert p not in html
        assert fmt.esc(p) in html  # shown, as text (`javascript:` included: never as a link)
    # the structure is the report's own: no tag, attribute or link a log could have written
    parser = _Tags()
    parser.feed(html)
    for tag, attrs in parser.tags:
        assert tag in ALLOWED_TAGS, tag
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)
        assert not any(k in attrs for k in ("src", "srcdoc", "style", "action", "formaction",
                                             "xlink:href", "data")), (tag, attrs)
        if tag == "a":
            assert re.fullmatch(r"#incident-I\d+|#[a-z]+", attrs["href"]), attrs
        if tag == "script":
            assert attrs == {} or (attrs.get("type") == "application/json"
                                   and re.fullmatch(r"fig-[a-z0-9-]+", attrs["id"])), attrs
    assert sum(1 for t, a in parser.tags if t == "script" and not a) == 2


# -- the commands -------------------------------------------------------------------------------


def test_report_and_investigate_commands(sample_store, tmp_path):
    from loophound.cli import app

    runner = CliRunner()
    out = tmp_path / "r" / "report.html"
    r = runner.invoke(app, ["report", "--store", str(sample_store.root), "--out", str(out),
                            "--generated-at", WHEN])
    assert r.exit_code == 0, r.output
    assert out.exists() and "2026-01-01 00:00:00 UTC" in out.read_text()
    out2 = tmp_path / "inv.html"
    before = set(Path(tempfile.gettempdir()).glob("loophound-store-*"))
    r = runner.invoke(app, ["investigate", str(SAMPLES / "hooks"), "--out", str(out2),
                            "--generated-at", WHEN, "--fail-on", "critical"])
    assert r.exit_code == 1, r.output  # a critical hook cycle
    assert out2.exists() and "Trigger cycle" in out2.read_text()
    assert set(Path(tempfile.gettempdir()).glob("loophound-store-*")) <= before  # removed
    r = runner.invoke(app, ["report", "--store", str(sample_store.root), "--out", str(out),
                            "--generated-at", "yesterday"])
    assert r.exit_code != 0


# -- panel extras: registered for the shape of a finding ----------------------------------------


def test_panel_pictures_come_from_a_registry_where_a_missing_renderer_is_an_error(sample,
                                                                                 monkeypatch):
    """A panel's pictures are those registered for the shape its primary's detector declares
    (no switching on detector names); a shape or an extra without a renderer is an error."""
    import dataclasses

    from loophound.detect import DETECTORS
    from loophound.report import model as m
    from loophound.report.sections import findings as sec

    assert {d.shape for d in DETECTORS.values()} <= set(m.SHAPE_EXTRAS)
    wanted = {x for names in m.SHAPE_EXTRAS.values() for x in names}
    assert wanted == set(m.EXTRAS) == set(sec.RENDERERS)
    result, model, html = sample
    for p in model.panels:
        shape = DETECTORS[p.finding["detector"]].shape
        assert [n for n, _ in p.extras] == list(m.SHAPE_EXTRAS[shape])
    cycle = next(p for p in model.panels if p.finding["detector"] == "trigger_cycle")
    echo = next(p for p in model.panels if p.finding["detector"] == "ping_pong")
    assert cycle.extra("graph").cycle and echo.extra("sequence").steps
    assert 'aria-label="who triggered whom"' in _panel_html(html, cycle.label)
    assert 'aria-label="sequence of the first messages"' in _panel_html(html, echo.label)
    # a shape the report has no pictures for, an extra without a renderer: errors, not a
    # panel silently drawn without its picture
    monkeypatch.setitem(DETECTORS, "trigger_cycle",
                        dataclasses.replace(DETECTORS["trigger_cycle"], shape="tree"))
    with pytest.raises(m.MissingRenderer, match="shape 'tree'"):
        gather(result, WHEN)
    monkeypatch.undo()
    monkeypatch.delitem(sec.RENDERERS, "graph")
    with pytest.raises(m.MissingRenderer, match="graph"):
        render(gather(result, WHEN))


def test_a_scan_not_saved_in_the_store_has_views_of_its_own(sample, sample_store, tmp_path):
    """A report made from a scan in memory (other settings, or a run saved in a folder) reads
    `findings` and `finding_events` of that scan, not of the store's last saved run."""
    saved = sample[0].document
    for kwargs in ({"save": False}, {"save_to": tmp_path / "run"}):
        result = scan_store(sample_store, overrides=["repeated_error.min_count=100000"],
                            **kwargs)
        ids = sorted(f["id"] for f in result.document["findings"])
        assert len(ids) < len(saved["findings"])
        con = result.con
        assert sorted(r[0] for r in con.execute("SELECT id FROM findings").fetchall()) == ids
        claimed = {r[0] for r in con.execute(
            "SELECT DISTINCT finding_id FROM finding_events").fetchall()}
        assert claimed == set(ids)
        rows = queries.records(con, "largest_findings", limit=100)
        assert sorted(r["id"] for r in rows) == ids


def test_a_scan_made_without_a_report_in_mind_reports_the_same(sample_store, sample):
    """`loophound scan` attributes without who acted on what (`for_report=False`); a report
    made from such a scan adds them back and is the same page."""
    lean = scan_store(sample_store, save=False, for_report=False)
    has = {c for (c,) in lean.con.execute("SELECT column_name FROM (DESCRIBE _event_facts)")
           .fetchall()}
    assert "actor" not in has and "event_id" in has
    assert lean.document["findings"] == sample[0].document["findings"]
    assert build(lean, WHEN) == sample[2]


def test_low_incidents_are_unusual_never_counted_as_runaway_loops():
    """Six low unusual-actor windows beside one real loop: the title, the headline and the
    KPI count one runaway loop; the low ones are listed apart, a line each."""
    from loophound.report.model import _title, headline

    doc = {"inputs": [{"path": "a.log"}], "findings": [],
           "coverage": {"inputs": [{"judged": True}], "skipped": []},
           "incidents": [{"severity": "critical"}] + [{"severity": "low"}] * 6}
    assert _title(doc) == "loophound incident report: 1 runaway loop"
    totals = type("T", (), {"events": 10, "duration_s": 60.0, "cost_usd": None,
                            "unpriced_tokens": 0, "tokens": 0})()
    text = "".join(t for _, t in headline(doc, [], totals, 100))
    assert text.startswith("Findings: 1 runaway loop (1 critical); 6 unusual patterns (not "
                           "runaway loops).")
    doc["incidents"] = doc["incidents"][1:]
    assert _title(doc) == "loophound report: clean, no runaway loop found"

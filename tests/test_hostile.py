"""Hostile input and faults: a line costs itself, never its file or its neighbours; nothing
crashes; what was skipped is named; counts stay exact across runs, copies and cuts."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loophound import formats
from loophound.cli import app
from loophound.formats.base import Format
from loophound.ingest import IngestOptions, discover, ingest
from loophound.store import Store

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_logs"
BPROXY = SAMPLES / "bproxy" / "2026-06-18.log"
HOOKS = SAMPLES / "hooks" / "hooks.jsonl"
LABTRUST = SAMPLES / "labtrust" / "episodes.jsonl"
STORM = json.loads((SAMPLES / "EXPECTED.json").read_text())["sections"]["bproxy"]["incidents"][0]


def lines_of(path: Path) -> int:
    return path.read_bytes().count(b"\n")


def counts(store: Path, sql: str) -> list[tuple]:
    return Store(store).connect().execute(sql).fetchall()


def generic_log(path: Path, last: str, n: int = 50) -> Path:
    path.write_text("".join(json.dumps({"timestamp": 1750000000 + k, "from": "a", "to": "b",
                                        "error": "E"}) + "\n" for k in range(n)) + last + "\n")
    return path


def accounted(store: Path) -> int:
    """Events plus quarantined lines: every line read is one or the other."""
    ev, = counts(store, "SELECT count(*) FROM events")[0]
    qu, = counts(store, "SELECT count(*) FROM quarantine")[0]
    return ev + qu


# -- a value a line cannot be mapped with costs that line -----------------------------------

@pytest.mark.parametrize("value", ["1e300", '"NaN"', "1e400", "-1e20", '"99999-01-01"'])
def test_an_absurd_time_costs_its_line_nothing_else(tmp_path, value):
    log = generic_log(tmp_path / "g.jsonl", '{"timestamp": ' + value + ', "from": "a", "to": "b"}')
    report = ingest([str(log)], Store(tmp_path / "st"))
    assert report.events == 51 and accounted(tmp_path / "st") == lines_of(log)
    assert counts(tmp_path / "st", "SELECT count(*) FROM events WHERE ts IS NULL") == [(1,)]
    assert any("no readable timestamp" in w for w in report.files[0].warnings)


def test_one_bproxy_line_with_a_far_time_does_not_hide_the_storm(tmp_path):
    log = tmp_path / "bproxy.log"
    shutil.copy(BPROXY, log)
    with log.open("a") as fh:
        fh.write('{"level":30,"time":1e16,"pid":1,"event":"received","id":"x","action":"a",'
                 '"ownerHash":"h"}\n')
    done = CliRunner().invoke(app, ["scan", str(log), "--store", str(tmp_path / "st"),
                                    "--json", str(tmp_path / "f.json"), "--fail-on", "never"])
    assert done.exit_code == 0, done.output
    storm = [f for f in json.loads((tmp_path / "f.json").read_text())["findings"]
             if f["detector"] == "repeated_error"]
    assert [f["events"] for f in storm] == [STORM["requests"]]
    assert accounted(tmp_path / "st") == lines_of(log)


def test_a_labtrust_step_far_in_simulated_time_keeps_the_episode(tmp_path):
    lines = LABTRUST.read_text().splitlines()
    step = json.loads(next(line for line in lines if '"t_s"' in line))
    step["t_s"] = 1e16
    (tmp_path / "lt").mkdir()
    log = tmp_path / "lt" / "episodes.jsonl"
    log.write_text("\n".join([*lines, json.dumps(step)]) + "\n")
    report = ingest([str(log)], Store(tmp_path / "st"))
    assert report.events == len(lines) + 1


def test_a_line_the_format_cannot_map_is_quarantined_alone(tmp_path, monkeypatch):
    """Whatever a mapping did not foresee (here a cast that fails on one line's value): that
    line goes to quarantine with the reason, its neighbours are events."""
    picky = Format(
        name="picky", description="casts n to an integer", sniff=lambda records, path: False,
        select_sql=lambda ctx: ("SELECT line, byte_offset, byte_length, text, "
                                "CAST(json_extract_string(text, '$.n') AS INTEGER) AS depth "
                                "FROM raw"),
        mapped_keys=frozenset({"n"}))
    monkeypatch.setitem(formats.FORMATS, "picky", picky)
    log = tmp_path / "p.jsonl"
    log.write_text("".join(json.dumps({"n": v}) + "\n" for v in [1, 2, "three", 4, 5, "six", 7]))
    report = ingest([str(log)], Store(tmp_path / "st"), IngestOptions(format="picky"))
    assert report.events == 5 and report.files[0].quarantined == {"unmappable": 2}
    rows = counts(tmp_path / "st", "SELECT line, reason FROM quarantine ORDER BY line")
    assert rows == [(3, "unmappable"), (6, "unmappable")]
    assert counts(tmp_path / "st", "SELECT list(depth ORDER BY line) FROM events") == [
        ([1, 2, 4, 5, 7],)]


# -- nothing crashes on any JSON value --------------------------------------------------------

def test_deep_nesting_anywhere_is_a_quarantined_line_not_a_crash(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    deep_object = '{"a":' * 3000 + "1" + "}" * 3000
    deep_array = "[" * 5000 + "]" * 5000
    good = "".join(json.dumps({"timestamp": 1750000000 + k, "from": "a", "to": "b"}) + "\n"
                   for k in range(5))
    (logs / "head.jsonl").write_text(deep_object + "\n" + good)
    (logs / "middle.jsonl").write_text(good + deep_array + "\n" + good)
    (logs / "last.jsonl").write_text(good + "{" * 3000)  # unterminated, and invalid
    (logs / "z-after.jsonl").write_text(good)  # the files after it are still read
    done = CliRunner().invoke(app, ["ingest", str(logs), "--store", str(tmp_path / "st")])
    assert done.exit_code == 0 and "Traceback" not in done.output, done.output
    per_file = dict(counts(tmp_path / "st", "SELECT file, count(*) FROM events GROUP BY 1"))
    assert per_file == {str(logs / "head.jsonl"): 6, str(logs / "middle.jsonl"): 10,
                        str(logs / "last.jsonl"): 5, str(logs / "z-after.jsonl"): 5}


def test_an_event_field_that_is_an_object_does_not_stop_recognition(tmp_path):
    log = tmp_path / "b.log"
    log.write_text('{"level":30,"time":1781822975544,"pid":1,"event":{"x":1}}\n'
                   '{"level":30,"time":1781822975544,"pid":1,"event":[1,2]}\n'
                   + BPROXY.read_text())
    report = ingest([str(log)], Store(tmp_path / "st"))
    assert report.files[0].format == "bproxy" and report.events == lines_of(log)


# -- what is damaged keeps what it holds; what is skipped is named --------------------------

def test_a_truncated_gzip_keeps_every_complete_line_it_yielded(tmp_path):
    packed = gzip.compress(BPROXY.read_bytes())
    log = tmp_path / "2026-06-18.log.gz"
    log.write_bytes(packed[: len(packed) // 2])
    report = ingest([str(log)], Store(tmp_path / "st"))
    kept = report.events
    assert kept > 1000 and kept == report.files[0].lines
    assert any("stopped reading" in w and f"{kept:,} complete lines" in w
               for w in report.files[0].warnings)
    # the whole file later: the rest is read, nothing twice
    log.write_bytes(packed)
    ingest([str(log)], Store(tmp_path / "st"))
    assert accounted(tmp_path / "st") == lines_of(BPROXY)


def test_a_first_line_longer_than_the_sniffed_head_is_still_recognised(tmp_path):
    log = tmp_path / "long.jsonl"
    log.write_text(json.dumps({"timestamp": 1750000000, "from": "a", "to": "b",
                               "prompt": "x" * 200_000}) + "\n"
                   + "".join(json.dumps({"timestamp": 1750000001 + k, "from": "a", "to": "b"})
                             + "\n" for k in range(20)))
    report = ingest([str(log)], Store(tmp_path / "st"))
    assert report.files[0].status == "new" and report.events == 21


def test_a_folder_that_cannot_be_listed_is_named(tmp_path, monkeypatch):
    (tmp_path / "logs" / "secret").mkdir(parents=True)
    shutil.copy(HOOKS, tmp_path / "logs" / "hooks.jsonl")
    real = os.scandir

    def scandir(path="."):
        if str(path).endswith("secret"):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    found, passed_over = discover([str(tmp_path / "logs")])
    assert [p.name for p, _ in found] == ["hooks.jsonl"]
    assert passed_over == [(str(tmp_path / "logs" / "secret"),
                            "cannot read this folder: Permission denied")]


# -- counts stay exact ------------------------------------------------------------------------

def test_a_byte_order_mark_is_not_a_quarantined_first_line(tmp_path):
    log = tmp_path / "hooks.jsonl"
    log.write_bytes(b"\xef\xbb\xbf" + HOOKS.read_bytes())
    report = ingest([str(log)], Store(tmp_path / "st"))
    assert report.events == lines_of(HOOKS) and not report.files[0].quarantined
    assert counts(tmp_path / "st", "SELECT byte_offset FROM events WHERE line = 1") == [(3,)]


def test_a_crlf_line_completed_later_leaves_no_phantom_line(tmp_path):
    rows = [json.dumps({"timestamp": 1750000000 + k, "from": "a", "to": "b"}) for k in range(6)]
    log = tmp_path / "a.jsonl"
    log.write_bytes(("\r\n".join(rows[:4])).encode())  # the last object still awaits its \r\n
    store = Store(tmp_path / "st")
    ingest([str(log)], store)
    with log.open("ab") as fh:
        fh.write(("\r\n" + "\r\n".join(rows[4:]) + "\r\n").encode())
    ingest([str(log)], store)
    assert counts(tmp_path / "st", "SELECT list(line ORDER BY line) FROM events") == [
        ([1, 2, 3, 4, 5, 6],)]
    assert counts(tmp_path / "st", "SELECT count(*) FROM quarantine") == [(0,)]


def test_an_older_copy_of_a_grown_log_adds_nothing(tmp_path):
    """a.jsonl read (200 lines), then a copy that has grown (205): 5 more; then a.jsonl
    again: nothing (it was counted twice: 405)."""
    older, grown = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    text = HOOKS.read_text().splitlines(keepends=True)
    older.write_text("".join(text[:200]))
    grown.write_text("".join(text[:205]))
    store = Store(tmp_path / "st")
    assert [ingest([str(p)], store).events for p in (older, grown, older, grown)] == [200, 5, 0, 0]
    assert accounted(tmp_path / "st") == 205


def test_a_log_cut_back_to_its_first_lines_is_a_new_generation_not_read_again(tmp_path):
    log = tmp_path / "a.jsonl"
    text = HOOKS.read_text().splitlines(keepends=True)
    log.write_text("".join(text[:130]))
    store = Store(tmp_path / "st")
    assert ingest([str(log)], store).events == 130
    log.write_text("".join(text[:50]))
    cut = ingest([str(log)], store)
    assert cut.events == 0 and cut.files[0].status == "prefix"
    assert ingest([str(log)], store).events == 0
    with log.open("a") as fh:  # what is written after the cut is new
        fh.writelines(text[200:210])
    assert ingest([str(log)], store).events == 10
    assert accounted(tmp_path / "st") == 140


def test_a_response_read_by_a_later_ingest_fills_its_request(tmp_path):
    """The sample log appended in ten slices, ingested after each: the same outcomes, the
    same findings as one ingest of the whole (was 1,197 failures and no unusual_actor)."""
    text = BPROXY.read_bytes().splitlines(keepends=True)
    log, store = tmp_path / "d.log", tmp_path / "st"
    for k in range(10):
        with log.open("ab") as fh:
            fh.writelines(text[k * len(text) // 10:(k + 1) * len(text) // 10])
        ingest([str(log)], Store(store))
    assert counts(store, "SELECT count(*) FROM events WHERE kind = 'request' AND error = "
                         "'SESSION_NOT_FOUND'") == [(STORM["requests"],)]
    whole = tmp_path / "whole"
    runner = CliRunner()
    found = []
    for where, paths in ((store, []), (whole, [str(BPROXY)])):
        runner.invoke(app, ["scan", *paths, "--store", str(where), "--fail-on", "never",
                            "--json", str(tmp_path / "f.json")])
        doc = json.loads((tmp_path / "f.json").read_text())
        found.append(sorted((f["detector"], f["severity"], f["events"]) for f in doc["findings"]))
    assert found[0] == found[1] and any(d == "unusual_actor" for d, _, _ in found[0])


def test_a_log_with_a_lagging_clock_is_still_scanned_by_scheduled_scans(tmp_path):
    """Two logs, one written by a host whose clock is two days behind: when a trigger cycle
    appears in it, the scheduled scan still finds it and alerts (it was never looked at)."""
    from loophound.synth import write_hooks_log

    logs = tmp_path / "logs"
    write_hooks_log(logs, seed=1)
    hooks = next(logs.glob("*.jsonl"))
    lines = hooks.read_text().splitlines(keepends=True)
    first_incident = next(i for i, line in enumerate(lines) if '"hook_fired"' in line)
    quiet = tmp_path / "quiet.log"  # a log on the right clock, two days ahead of the hooks
    quiet.write_text("".join(json.dumps({"level": 30, "time": 1_777_000_000_000 + i * 60_000,
                                         "pid": 1, "id": f"r{i}", "event": event,
                                         "ownerHash": "a1", "action": "scroll",
                                         "session": "s"}) + "\n"
                             for i in range(5) for event in ("received", "response")))
    early = tmp_path / "early.jsonl"
    early.write_text("".join(lines[:first_incident]))
    runner = CliRunner()
    args = ["scan", str(quiet), str(early), "--store", str(tmp_path / "st"), "--incremental",
            "--alerts", str(tmp_path / "alerts.jsonl")]
    runner.invoke(app, args)
    early.write_text("".join(lines))
    later = runner.invoke(app, args)
    assert later.exception is None or isinstance(later.exception, SystemExit), later.output
    alerts = [json.loads(line) for line in (tmp_path / "alerts.jsonl").read_text().splitlines()]
    assert any(a["detector"] == "trigger_cycle" for a in alerts)

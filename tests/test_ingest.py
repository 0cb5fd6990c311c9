"""Ingest: every line becomes an event or a quarantine row, and nothing is read twice."""

from __future__ import annotations

import bz2
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import zstandard
from typer.testing import CliRunner

from loophound.cli import app
from loophound.ingest import IngestOptions, ingest
from loophound.schema import COLUMNS
from loophound.store import Store

SAMPLES = Path(__file__).resolve().parents[1] / "sample_logs"
BPROXY = SAMPLES / "bproxy" / "2026-06-18.log"
T0 = 1781826140544


def pino(i: int, event: str = "received", **fields) -> str:
    base = {"level": 30, "time": T0 + i * 100, "pid": 4242, "hostname": "h", "id": f"req-{i}",
            "event": event, "ownerHash": "a3f7c012"}
    if event == "received":
        base |= {"action": "scroll", "session": "6afr3v", "destructive": False}
    if event == "response":
        base |= {"ok": False, "elapsed_ms": 0, "error_code": "SESSION_NOT_FOUND"}
    base |= fields
    return json.dumps(base, separators=(",", ":")) + "\n"


def pair(i: int) -> str:
    return pino(i) + pino(i, "response")


def q(store: Store, sql: str, params=None):
    return store.connect().execute(sql, params).fetchall()


def test_sample_bproxy_log_ingests_whole_with_its_hash(tmp_path):
    store = Store(tmp_path / "st")
    report = ingest([str(BPROXY)], store)
    lines = BPROXY.read_bytes().count(b"\n")
    assert report.events == lines and report.quarantined == 0
    (path, sha, nbytes, nlines, fmt), = q(store, "SELECT path, sha256, bytes, lines, format FROM inputs")
    assert sha == hashlib.sha256(BPROXY.read_bytes()).hexdigest()
    assert (nbytes, nlines, fmt) == (BPROXY.stat().st_size, lines, "bproxy")


def test_responses_carry_their_requests_action_session_and_owner(tmp_path):
    log = tmp_path / "d.log"
    log.write_text(pair(1) + pino(2, "error_delay", delay_ms=800) + pair(3))
    store = Store(tmp_path / "st")
    ingest([str(log)], store)
    rows = q(store, "SELECT line, kind, actor, session, action, ok, error FROM events ORDER BY line")
    assert rows[1] == (2, "response", "4242:a3f7c012", "6afr3v", "scroll", False, "SESSION_NOT_FOUND")
    assert rows[0][5:] == (False, "SESSION_NOT_FOUND")  # the request knows its outcome
    assert rows[2][1:5] == ("lifecycle", "4242:a3f7c012", None, None)  # error_delay of req-2: no received
    req = q(store, "SELECT lines, bytes FROM requests WHERE corr_id = 'req-1'")
    assert req == [(2, len(pair(1)))]


def test_answer_lines_name_their_request_even_when_it_came_in_an_earlier_run(tmp_path):
    log = tmp_path / "d.log"
    log.write_text(pino(1) + pino(2))
    store = Store(tmp_path / "st")
    ingest([str(log)], store)
    with log.open("a") as fh:  # the answers arrive after the first run stored the requests
        fh.write(pino(1, "response") + pino(1, "error_delay", delay_ms=800) + pair(3))
    ingest([str(log)], store)
    rows = q(store, "SELECT line, kind, answers, event_id FROM events ORDER BY line")
    ids = {line: event_id for line, _, _, event_id in rows}
    assert [(line, kind, answers) for line, kind, answers, _ in rows] == [
        (1, "request", None), (2, "request", None), (3, "response", ids[1]),
        (4, "lifecycle", ids[1]), (5, "request", None), (6, "response", ids[5])]
    assert q(store, "SELECT line, lines, error FROM requests ORDER BY line") == [
        (1, 3, "SESSION_NOT_FOUND"), (2, 1, None), (5, 2, "SESSION_NOT_FOUND")]


def test_an_answer_finds_its_request_batches_back(tmp_path, monkeypatch):
    """A response is looked for among the file's newest batches first, then among all."""
    from loophound import ingest as ingest_module

    monkeypatch.setattr(ingest_module, "RECENT", 1)
    log = tmp_path / "d.log"
    log.write_text(pino(1))
    store = Store(tmp_path / "st")
    ingest([str(log)], store)
    for more in (pair(2), pino(1, "response") + pair(3)):  # the answer two runs later
        with log.open("a") as fh:
            fh.write(more)
        ingest([str(log)], store)
    rows = q(store, "SELECT line, kind, answers, event_id FROM events ORDER BY line")
    ids = {line: event_id for line, _, _, event_id in rows}
    assert [(line, answers) for line, kind, answers, _ in rows if kind == "response"] == [
        (3, ids[2]), (4, ids[1]), (6, ids[5])]


def test_an_input_keeps_when_it_was_first_seen_when_it_grows(tmp_path):
    log = tmp_path / "d.log"
    log.write_text(pair(1))
    store = Store(tmp_path / "st")
    ingest([str(log)], store)
    first = q(store, "SELECT first_seen, last_read FROM inputs")[0]
    with log.open("a") as fh:
        fh.write(pair(2))
    ingest([str(log)], store)
    again = q(store, "SELECT first_seen, last_read FROM inputs")[0]
    assert again[0] == first[0] and again[1] > first[1]


def test_a_store_written_before_a_column_existed_reads_it_as_null(tmp_path):
    import pyarrow.parquet as pq

    log = tmp_path / "d.log"
    log.write_text(pair(1))
    store = Store(tmp_path / "st")
    ingest([str(log)], store)
    for f in (tmp_path / "st" / "events").glob("*.parquet"):
        pq.write_table(pq.read_table(f).drop_columns(["answers"]), f)
    assert q(store, "SELECT line, answers FROM events ORDER BY line") == [(1, None), (2, None)]


def test_trimmed_form_without_ids_joins_each_response_to_the_request_before_it(tmp_path):
    log = tmp_path / "trimmed.log"
    log.write_text(
        '{"time":1781826140544,"action":"session.close","session":"6afr3v","event":"received"}\n'
        '{"time":1781826140545,"event":"response","ok":true,"elapsed_ms":1}\n'
        '{"time":1781826141514,"action":"scroll","session":"6afr3v","event":"received"}\n'
        '{"time":1781826141515,"event":"response","ok":false,"elapsed_ms":0,'
        '"error_code":"SESSION_NOT_FOUND"}\n')
    store = Store(tmp_path / "st")
    ingest([str(log)], store)
    rows = q(store, "SELECT line, action, session, ok, error, corr_id FROM events ORDER BY line")
    assert rows[3] == (4, "scroll", "6afr3v", False, "SESSION_NOT_FOUND", "L3")
    assert rows[2][3:5] == (False, "SESSION_NOT_FOUND")
    assert rows[1][1:4] == ("session.close", "6afr3v", True)


def test_bad_lines_are_quarantined_with_file_line_and_reason(tmp_path):
    log = tmp_path / "ugly.log"
    parts = [
        pair(1).encode(),                                   # 1-2 fine
        b'{"level":30,"time":1781826140900,"event":"recei\n',  # 3 malformed JSON
        b'{"level":30,"time":1781826141000,"event":"received","action":"\xff\xfe"}\n',  # 4 bad UTF-8
        b"\x00\x01\x02\x03garbage\x00\n",                   # 5 binary
        b"\n",                                              # 6 blank
        b"[1, 2, 3]\n",                                     # 7 not an object
        pino(9).encode(),                                   # 8 fine
        b'{"event":"received","action":"scroll","session":"6afr3v"}\n',  # 9 no time: kept
        pino(2, extra_field="surprise").encode(),           # 10 unknown key, earlier time
        b'{"level":30,"time":17818261',                     # 11 truncated last line
    ]
    log.write_bytes(b"".join(parts))
    store = Store(tmp_path / "st")
    report = ingest([str(log)], store)
    (f,) = report.files
    assert f.events == 5
    assert dict(f.quarantined) == {"invalid_json": 1, "invalid_utf8": 1, "binary": 1, "blank": 1,
                                   "not_an_object": 1}
    assert f.pending is not None and f.pending.line == 11
    reasons = q(store, "SELECT line, reason FROM quarantine ORDER BY line")
    assert reasons == [(3, "invalid_json"), (4, "invalid_utf8"), (5, "binary"), (6, "blank"),
                       (7, "not_an_object"), (11, "truncated_last_line")]
    assert any("no readable timestamp" in w for w in f.warnings)
    assert any("earlier than the line before" in w for w in f.warnings)
    assert any("extra_field (1)" in w for w in f.warnings)
    (extra,) = q(store, "SELECT extra FROM events WHERE line = 10")[0]
    assert json.loads(extra)["extra_field"] == "surprise"
    # every line is accounted for: events + quarantine = lines in the file
    total = q(store, "SELECT (SELECT count(*) FROM events) + (SELECT count(*) FROM quarantine)")
    assert total == [(11,)]


def test_settled_files_are_checked_by_size_and_tail_not_read_again(tmp_path, monkeypatch):
    import loophound.ingest as ingest_module

    logs = tmp_path / "logs"
    logs.mkdir()
    for i in range(3):
        (logs / f"day-{i}.log").write_text(pair(10 * i) + pair(10 * i + 1))
    store = Store(tmp_path / "st")
    ingest([str(logs)], store)
    read_into_store, read_with_others = ingest_module._read_into_store, ingest_module._Group.add

    def check(path):
        if path.name != "day-2.log":
            raise AssertionError(f"{path.name} is unchanged and was read again")

    def refuse(path, *args, **kwargs):
        check(path)
        return read_into_store(path, *args, **kwargs)

    def refuse_in_group(group, path, *args, **kwargs):  # a small new file is read in a group
        check(path)
        return read_with_others(group, path, *args, **kwargs)

    monkeypatch.setattr(ingest_module, "_read_into_store", refuse)
    monkeypatch.setattr(ingest_module._Group, "add", refuse_in_group)
    with (logs / "day-2.log").open("a") as fh:
        fh.write(pair(99))
    report = ingest([str(logs)], store)
    assert {f.path.rsplit("/", 1)[-1]: (f.status, f.events) for f in report.files} == {
        "day-0.log": ("unchanged", 0), "day-1.log": ("unchanged", 0), "day-2.log": ("appended", 2)}
    # the same size but other last bytes is not "unchanged": the file is read and compared
    (logs / "day-0.log").write_text(pair(50) + pair(51))
    with pytest.raises(AssertionError, match="day-0.log is unchanged and was read again"):
        ingest([str(logs)], store)


def test_a_50_mb_line_is_quarantined_not_loaded(tmp_path):
    log = tmp_path / "huge.log"
    big = '{"level":30,"time":1781826141000,"event":"received","blob":"' + "x" * (50 << 20) + '"}\n'
    log.write_text(pair(1) + big + pair(2))
    store = Store(tmp_path / "st")
    (f,) = ingest([str(log)], store).files
    assert f.events == 4 and dict(f.quarantined) == {"line_too_long": 1}
    (line, length, reason), = q(store, "SELECT line, byte_length, reason FROM quarantine")
    assert (line, length, reason) == (3, len(big), "line_too_long")
    assert q(store, "SELECT line FROM events ORDER BY line") == [(1,), (2,), (4,), (5,)]


def test_reingest_adds_nothing_and_appended_bytes_are_read_alone(tmp_path):
    log = tmp_path / "grow.log"
    log.write_text(pair(1) + pino(2))
    store = Store(tmp_path / "st")
    ingest([str(log)], store)
    again = ingest([str(log)], store)
    assert again.events == 0 and again.files[0].status == "unchanged"
    with log.open("a") as fh:
        fh.write(pino(2, "response") + pair(3))
    more = ingest([str(log)], store)
    assert more.events == 3 and more.files[0].status == "appended"
    assert more.files[0].new_bytes == len(pino(2, "response") + pair(3))
    rows = q(store, "SELECT line, kind, action, session FROM events ORDER BY line")
    assert [r[0] for r in rows] == [1, 2, 3, 4, 5, 6]
    # the response in the new batch found its request in the old one
    assert rows[3] == (4, "response", "scroll", "6afr3v")
    assert q(store, "SELECT sha256 FROM inputs") == [(hashlib.sha256(log.read_bytes()).hexdigest(),)]


def test_a_partial_last_line_waits_until_it_is_complete(tmp_path):
    log = tmp_path / "live.log"
    whole = pino(5)
    log.write_text(pair(1) + whole[:30])
    store = Store(tmp_path / "st")
    first = ingest([str(log)], store)
    assert first.events == 2 and first.files[0].pending.line == 3
    assert q(store, "SELECT reason FROM quarantine") == [("truncated_last_line",)]
    with log.open("a") as fh:
        fh.write(whole[30:])
    second = ingest([str(log)], store)
    assert second.events == 1
    assert q(store, "SELECT count(*) FROM quarantine") == [(0,)]
    assert q(store, "SELECT line, corr_id FROM events WHERE line = 3") == [(3, "req-5")]


def test_a_complete_last_line_without_newline_is_read_and_not_read_again(tmp_path):
    log = tmp_path / "nonl.log"
    log.write_text(pair(1) + pino(2).rstrip("\n"))
    store = Store(tmp_path / "st")
    assert ingest([str(log)], store).events == 3
    with log.open("a") as fh:
        fh.write("\n" + pino(3))
    assert ingest([str(log)], store).events == 1
    assert q(store, "SELECT count(*), count(DISTINCT line) FROM events") == [(4, 4)]
    assert q(store, "SELECT count(*) FROM quarantine") == [(0,)]


def test_rotation_by_rename_is_recognised_and_nothing_counts_twice(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "app.log"
    log.write_text(pair(1))
    store = Store(tmp_path / "st")
    ingest([str(logs)], store)
    with log.open("a") as fh:
        fh.write(pair(2))  # written after the scan, before rotation
    log.rename(logs / "app.log.1")
    (logs / "app.log").write_text(pair(7))
    report = ingest([str(logs)], store)
    assert report.events == 4  # two late lines of the rotated file + the new file's two
    assert q(store, "SELECT count(*) FROM events") == [(6,)]
    assert q(store, "SELECT count(*) FROM inputs") == [(2,)]


def test_copytruncate_and_compressed_rotated_copies(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "app.log"
    log.write_text(pair(1) + pair(2))
    store = Store(tmp_path / "st")
    ingest([str(logs)], store)
    with gzip.open(logs / "app.log.1.gz", "wb") as gz:  # copy, compress ...
        gz.write(log.read_bytes())
    log.write_text(pair(9))  # ... and truncate, then the writer goes on
    report = ingest([str(logs)], store)
    assert report.events == 2
    assert q(store, "SELECT count(*) FROM events") == [(6,)]


@pytest.mark.parametrize("suffix, opener", [
    (".gz", gzip.open), (".bz2", bz2.open),
    (".zst", lambda p, m: zstandard.open(p, m)),
])
def test_compressed_logs_are_read_transparently(tmp_path, suffix, opener):
    target = tmp_path / f"2026-06-18.log{suffix}"
    with opener(target, "wb") as fh:
        fh.write(BPROXY.read_bytes())
    store = Store(tmp_path / "st")
    report = ingest([str(target)], store)
    assert report.events == BPROXY.read_bytes().count(b"\n")
    assert q(store, "SELECT sha256 FROM inputs") == [(hashlib.sha256(BPROXY.read_bytes()).hexdigest(),)]


def test_a_key_first_seen_deep_in_a_large_file_is_not_lost(tmp_path):
    log = tmp_path / "late-key.log"
    with log.open("w") as fh:
        for i in range(60_000):
            fh.write(pair(i) if i != 54_321 else pino(i, late_key={"nested": [1, 2]}) + pino(i, "response"))
    store = Store(tmp_path / "st")
    ingest([str(log)], store)
    rows = q(store, "SELECT line, extra FROM events WHERE extra LIKE '%late_key%'")
    assert len(rows) == 1 and json.loads(rows[0][1])["late_key"] == {"nested": [1, 2]}


def test_directories_globs_and_duplicates(tmp_path):
    shutil.copytree(SAMPLES / "bproxy", tmp_path / "a")
    store = Store(tmp_path / "st")
    report = ingest([str(tmp_path / "a"), str(tmp_path / "a" / "*.log")], store)
    assert report.events == BPROXY.read_bytes().count(b"\n")  # named twice, read once


def test_a_copy_of_a_known_file_elsewhere_is_the_same_evidence(tmp_path):
    store = Store(tmp_path / "st")
    ingest([str(BPROXY)], store)
    copy = tmp_path / "copy.log"
    shutil.copy(BPROXY, copy)
    assert ingest([str(copy)], store).events == 0


def test_cli_reports_missing_paths_and_unknown_formats_without_a_traceback(tmp_path):
    runner = CliRunner()
    res = runner.invoke(app, ["ingest", str(tmp_path / "nope.log"), "--store", str(tmp_path / "s")])
    assert res.exit_code == 2 and "no such file" in res.output and "Traceback" not in res.output
    res = runner.invoke(app, ["ingest", str(BPROXY), "--format", "klingon",
                              "--store", str(tmp_path / "s")])
    assert res.exit_code == 2 and "unknown format 'klingon'" in res.output


def test_text_that_is_not_json_is_passed_over_with_a_reason(tmp_path):
    txt = tmp_path / "notes.log"
    txt.write_text("2026-01-01 INFO started\n2026-01-01 WARN something\n")
    report = ingest([str(txt)], Store(tmp_path / "st"))
    assert report.files[0].status == "skipped" and "not recognised" in report.files[0].skipped_reason


def test_max_line_bytes_is_a_setting(tmp_path):
    log = tmp_path / "d.log"
    log.write_text(pair(1))
    report = ingest([str(log)], Store(tmp_path / "st"), IngestOptions(max_line_bytes=100))
    assert dict(report.files[0].quarantined) == {"line_too_long": 2}


def test_verify_rehashes_everything_and_names_changed_or_missing_inputs(tmp_path):
    log = tmp_path / "a.log"
    log.write_text(pair(1) + pair(2) + pair(3))
    gone = tmp_path / "b.log"
    gone.write_text(pair(7))
    store = tmp_path / "st"
    ingest([str(log), str(gone)], Store(store))
    runner = CliRunner()
    assert runner.invoke(app, ["verify", "--store", str(store)]).exit_code == 0
    data = bytearray(log.read_bytes())
    data[len(data) // 2] ^= 1  # one bit in the middle: neither head nor tail
    log.write_bytes(bytes(data))
    gone.unlink()
    res = runner.invoke(app, ["verify", "--store", str(store)])
    assert res.exit_code == 1 and "changed" in res.output and "gone" in res.output


def test_an_append_is_hashed_alone_even_after_runs_that_found_nothing_new(tmp_path, monkeypatch):
    from loophound import digest

    if not digest.available():
        pytest.skip("no libcrypto: appends are re-hashed in full")
    log = tmp_path / "grow.log"
    log.write_text("".join(pair(i) for i in range(2000)))
    store = Store(tmp_path / "st")
    ingest([str(log)], store)
    ingest([str(log)], store)  # nothing new
    hashed = []
    real = digest.Sha256.update
    monkeypatch.setattr(digest.Sha256, "update", lambda self, b: (hashed.append(len(b)), real(self, b)))
    extra = pair(5000)
    with log.open("a") as fh:
        fh.write(extra)
    assert ingest([str(log)], store).events == 2
    assert sum(hashed) == len(extra)
    assert q(store, "SELECT sha256 FROM inputs") == [(hashlib.sha256(log.read_bytes()).hexdigest(),)]


def test_a_rewritten_companion_replaces_its_rows_and_their_files(tmp_path):
    """LabTrust rewrites results.json whole: its rows are replaced, and the Parquet files of
    the rows that no longer stand are deleted with them, not left for a search of the store."""
    import json as json_module

    from loophound.synth.labtrust import write_labtrust_run

    write_labtrust_run(tmp_path / "run", seed=3)
    store = Store(tmp_path / "st")
    ingest([str(tmp_path / "run")], store)
    metrics = "SELECT count(*) FROM events WHERE kind = 'episode_metrics'"
    first = q(store, metrics)
    files = set((tmp_path / "st" / "events").glob("*.parquet"))
    results = tmp_path / "run" / "results.json"
    doc = json_module.loads(results.read_text())
    doc["episodes"] = doc["episodes"] * 2  # the run went on: twice the episodes
    results.write_text(json_module.dumps(doc))
    ingest([str(tmp_path / "run")], store)
    now = set((tmp_path / "st" / "events").glob("*.parquet"))
    assert q(store, metrics) == [(2 * first[0][0],)]
    assert len(now - files) == 1 and len(files - now) == 1  # the old rows' file went too


def small_chunks(monkeypatch) -> None:
    """A log read alone (not with other small files), in 16 KiB chunks holding back 20
    lines, each chunk mapped ahead in parts of 16 lines and more: a small log goes through
    every step a large one does, many times."""
    from loophound import ingest as ingest_module

    monkeypatch.setattr(ingest_module, "GROUP_FILE_BYTES", 0)
    monkeypatch.setattr(ingest_module, "CHUNK_BYTES", 16 * 1024)
    monkeypatch.setattr(ingest_module, "HOLD_LINES", 20)
    monkeypatch.setattr(ingest_module, "PART_ROWS", 16)


def read_chunked(log: Path, root: Path) -> tuple[Store, list[tuple], list[str]]:
    """`log` ingested into a new store at `root`: the store, its events (every column but
    `file`, in event order) and the file's warnings."""
    store = Store(root)
    report = ingest([str(log)], store)
    rows = store.connect().execute(
        "SELECT * EXCLUDE (file) FROM events ORDER BY event_id").fetchall()
    return store, rows, report.files[0].warnings


@pytest.mark.parametrize("id_key", ["req_id", None])
def test_the_index_of_read_rows_kept_on_disk_changes_nothing(tmp_path, monkeypatch, id_key):
    """Past SPILL_ROWS the narrow index of a read's rows (which responses look back into)
    waits in scratch Parquet files: the events, the requests' outcomes and the warnings are
    those of a read that kept it all in memory, and the scratch files are gone after."""
    from loophound import ingest as ingest_module
    from loophound.synth.bproxy_variants import Variant, write_bproxy_variant

    log = tmp_path / "daemon.log"
    write_bproxy_variant(log, Variant("spill", id_key=id_key), storm_requests=300,
                         storm_hours=30 / 3600, session_minutes=1.0)
    with log.open("a") as fh:  # a step back in time and a line without one, late in the log
        fh.write(json.dumps({"event": "received", "time": 1000, "pid": 1, "action": "x"}) + "\n")
        fh.write(json.dumps({"event": "received", "pid": 1, "action": "y"}) + "\n")
    small_chunks(monkeypatch)

    def read(name: str) -> tuple:
        store, rows, warnings = read_chunked(log, tmp_path / name)
        outcomes = store.connect().execute("SELECT * FROM requests ORDER BY 1").fetchall()
        assert not any((store.root / "scratch").glob("*"))
        return rows, outcomes, warnings

    in_memory = read("memory")
    monkeypatch.setattr(ingest_module, "SPILL_ROWS", 150)
    spills = []
    spill = ingest_module._FileRows._spill
    monkeypatch.setattr(ingest_module._FileRows, "_spill",
                        lambda self: spills.append(1) or spill(self))
    spilled = read("spilled")
    assert len(spills) > 5
    assert in_memory[0] and any(w.startswith("1 events are earlier") for w in in_memory[2])
    assert spilled == in_memory


@pytest.mark.parametrize("id_key", ["reqId", None])
def test_a_request_cut_from_its_response_by_a_chunk_is_no_late_outcome(
        tmp_path, monkeypatch, id_key):
    """Read in small chunks, many requests are written with one chunk while their response
    waits, held back, for the next: such a request took its outcome when both were joined,
    so the catalog records a late outcome (which every query of `events` pays a join for)
    only for a request written before its response was read, and the events are those of
    the log read in one piece."""
    from loophound.synth.bproxy_variants import Variant, write_bproxy_variant

    log = tmp_path / "daemon.log"
    write_bproxy_variant(log, Variant("cut", id_key=id_key), storm_requests=300,
                         storm_hours=30 / 3600, session_minutes=1.0)
    whole = ingest([str(log)], Store(tmp_path / "whole"))
    small_chunks(monkeypatch)
    store, rows, _ = read_chunked(log, tmp_path / "chunked")
    con = store.connect()
    files = str(store.root / "events" / "*.parquet")
    written_unanswered = {r[0] for r in con.execute("""
        SELECT q.event_id FROM read_parquet(?) q JOIN read_parquet(?) a ON a.answers = q.event_id
        WHERE q.kind = 'request' AND q.ok IS NULL AND a.kind = 'response'""",
        [files, files]).fetchall()}
    late = {r[0] for r in con.execute("SELECT event_id FROM _outcomes").fetchall()}
    assert late == written_unanswered and len(late) < 20
    assert whole.events == len(rows) > 600
    assert Store(tmp_path / "whole").connect().execute(
        "SELECT * EXCLUDE (file) FROM events ORDER BY event_id").fetchall() == rows
    # the chunks cut requests from their responses: some request was written before its
    # response was read
    cut = con.execute("""SELECT count(*) FROM events a JOIN events q ON q.event_id = a.answers
        WHERE a.kind = 'response' AND q.ok IS NOT NULL
          AND (a.line - 1) // 40 <> (q.line - 1) // 40""").fetchall()[0][0]
    assert cut > 0


def test_chunks_mapped_ahead_give_what_chunks_mapped_in_turn_give(tmp_path, monkeypatch):
    """A read of many chunks maps the next chunk on another thread while the one before is
    finished; a chunk with a line that is not JSON is mapped again on the careful path. The
    events, the quarantine and the warnings are those of the same chunks mapped one after
    the other on the ingesting thread."""
    from loophound import ingest as ingest_module
    from loophound.synth.bproxy_variants import Variant, write_bproxy_variant

    log = tmp_path / "daemon.log"
    write_bproxy_variant(log, Variant("bad", id_key="reqId"), storm_requests=200,
                         storm_hours=20 / 3600, session_minutes=1.0)
    lines = log.read_bytes().splitlines(keepends=True)
    # a line cut short, and a response without the id every other line has (it crashed
    # the id-less correlation: no request without an id to look for)
    lines[700:700] = [b'{"event": "received", "time": 1781826140544, "pid": \n',
                      b'{"event": "response", "time": 1781826140545, "pid": 7, "ok": true}\n']
    log.write_bytes(b"".join(lines))
    small_chunks(monkeypatch)
    taken = []
    rows = ingest_module._Mapper.rows
    monkeypatch.setattr(ingest_module._Mapper, "rows",
                        lambda self, batch, mapped=None: taken.append(mapped is None) or rows(
                            self, batch, mapped))

    def read(name: str) -> tuple:
        store, rows, warnings = read_chunked(log, tmp_path / name)
        bad = store.connect().execute(
            "SELECT line, reason FROM quarantine ORDER BY line").fetchall()
        return rows, bad, warnings

    ahead = read("ahead")
    assert len(taken) > 10 and sum(taken) == 1  # mapped ahead, but the cut line's chunk
    monkeypatch.setattr(ingest_module._MapAhead, "_map", lambda self, batch: None)
    in_turn = read("in_turn")
    assert ahead[1] == [(701, "invalid_json")]
    assert [r[6] for r in ahead[0] if r[2] == 702] == ["response"]  # line, kind
    assert ahead == in_turn


@pytest.mark.parametrize("name", ["req_id", "request_id", "no_id"])
def test_keys_and_merges_of_chunks_mapped_ahead_are_those_of_the_careful_path(
        tmp_path, monkeypatch, name):
    """A chunk mapped ahead computes its action and result keys once per distinct value and
    puts the exact `extra` of lines with unknown keys in place in Arrow; the careful path
    computes both in SQL, row by row. Every shape (undocumented keys on every line, shuffled
    keys, no id) and some odd unknown keys (escaped, non-ASCII, nested nulls, large numbers)
    give the same events both ways."""
    from loophound import ingest as ingest_module
    from loophound.synth.bproxy_variants import variant, write_bproxy_variant

    log = tmp_path / "daemon.log"
    write_bproxy_variant(log, variant(name), storm_requests=200, storm_hours=20 / 3600,
                         session_minutes=1.0)
    lines = log.read_bytes().splitlines(keepends=True)
    odd = [{"event": "received", "time": 1781826140544, "pid": 7, "action": "scroll",
            "args": {"dy": 120, "id": "3f2a9c1e-0b4d-4c8e-9a7f-2d5e6b1c0a99"}, 'k"\\ü': None,
            "deep": {"a": [1, 2.5, None, {"b": None}], "n": 12345678901234567890}},
           {"event": "response", "time": 1781826140545, "pid": 7, "ok": False,
            "result": {"at": "2026-01-01T00:00:00Z", "n": 17}, "ünknown": "x", "empty": {}}]
    lines[300:300] = [json.dumps(r, ensure_ascii=i == 0).encode() + b"\n"
                      for i, r in enumerate(odd)]
    log.write_bytes(b"".join(lines))
    small_chunks(monkeypatch)
    parts = []  # how many parts each chunk mapped ahead was cut into
    submit = ingest_module._MapAhead.submit
    monkeypatch.setattr(ingest_module._MapAhead, "submit", lambda self, batch: parts.append(
        len((mapping := submit(self, batch)).parts)) or mapping)
    ahead = read_chunked(log, tmp_path / "ahead")[1:]
    assert parts.count(2) > 10 and set(parts) <= {1, 2}  # in two parts, but a last short one
    monkeypatch.setattr(ingest_module._MapAhead, "_map", lambda self, batch: None)
    careful = read_chunked(log, tmp_path / "careful")[1:]
    assert ahead == careful
    columns = [c.name for c in COLUMNS if c.name != "file"]
    extra, key = columns.index("extra"), columns.index("action_key")
    assert sum(1 for r in ahead[0] if r[key]) > 200  # keys were computed, not left out
    assert any(r[extra] and "ünknown" in r[extra] for r in ahead[0])


def test_duckdb_has_its_threads_back_after_a_read_mapped_ahead(tmp_path, monkeypatch):
    """While a read maps ahead DuckDB runs each query on one thread; afterwards the process's
    database has the threads it had (a scan in the same process, `investigate`, uses them)."""
    from loophound import db
    from loophound import ingest as ingest_module
    from loophound.synth.bproxy_variants import variant, write_bproxy_variant

    log = tmp_path / "daemon.log"
    write_bproxy_variant(log, variant("id"), storm_requests=100, storm_hours=10 / 3600,
                         session_minutes=0.5)
    small_chunks(monkeypatch)
    con = db.scratch()
    con.execute("SET threads = 3")
    during = []
    map_ahead = ingest_module._MapAhead._map

    def threads() -> int:  # a setting of the database: any cursor of it tells
        cursor = db.scratch()
        try:
            return cursor.execute("SELECT current_setting('threads')").fetchall()[0][0]
        finally:
            cursor.close()

    monkeypatch.setattr(ingest_module._MapAhead, "_map",
                        lambda self, lines: during.append(threads()) or map_ahead(self, lines))
    try:
        assert ingest([str(log)], Store(tmp_path / "s")).events > 100
        assert during and set(during) == {1}
        assert con.execute("SELECT current_setting('threads')").fetchall()[0][0] == 3
    finally:
        con.execute("RESET threads")
        con.close()


def test_finished_rows_are_put_together_by_event_id_whatever_order_finish_left():
    """A read keeps in DuckDB only the columns `finish` names and the rest in Arrow; the two
    are put back together by event id: in the same order at once, in another order (a
    `finish` that rebuilt `batch`) after sorting both, and a `finish` that lost or renamed
    rows is an error, not a misaligned file."""
    import pyarrow as pa

    from loophound.ingest import _beside

    wide = pa.table({"event_id": [1, 2, 3], "text": ["a", "b", "c"], "kind": ["x", "x", "x"]})
    narrow = pa.table({"event_id": [3, 1, 2], "kind": ["k3", "k1", "k2"]})
    together = _beside(wide, narrow)
    assert together.column_names == ["event_id", "text", "kind"]
    assert together.to_pylist() == [{"event_id": 1, "text": "a", "kind": "k1"},
                                    {"event_id": 2, "text": "b", "kind": "k2"},
                                    {"event_id": 3, "text": "c", "kind": "k3"}]
    in_order = pa.table({"event_id": [1, 2, 3], "kind": ["k1", "k2", "k3"]})
    assert _beside(wide, in_order).equals(together)
    with pytest.raises(RuntimeError, match="number of rows"):
        _beside(wide, narrow.slice(1))
    with pytest.raises(RuntimeError, match="event ids"):
        _beside(wide, pa.table({"event_id": [1, 2, 4], "kind": ["k1", "k2", "k4"]}))


def test_finished_rows_are_cut_at_a_line_in_any_order():
    """The rows finished up to a line and those held for the next chunk: slices of rows in
    the order they were read (no copy), and the same rows, in their order, of rows that a
    `finish` left in another order."""
    import pyarrow as pa

    from loophound.ingest import _cut

    read = pa.table({"line": [1, 2, 2, 5, 9], "v": ["a", "b", "c", "d", "e"]})
    done, held = _cut(read, 2)
    assert done.column("v").to_pylist() == ["a", "b", "c"] and held["v"].to_pylist() == ["d", "e"]
    assert done.column("v").chunk(0).buffers()[2].address == read["v"].chunk(0).buffers()[2].address
    assert [t.num_rows for t in _cut(read, 0)] == [0, 5] and [t.num_rows for t in _cut(read, 9)] == [5, 0]
    shuffled = read.take([3, 0, 4, 2, 1])
    done, held = _cut(shuffled, 2)
    assert done.to_pylist() == shuffled.filter(pa.array([False, True, False, True, True])).to_pylist()
    assert held["v"].to_pylist() == ["d", "e"]


@pytest.mark.parametrize("name", ["reqId", "no_id"])
def test_a_batch_of_the_columns_finish_names_gives_the_events_of_a_batch_of_all(
        tmp_path, monkeypatch, name):
    """bproxy names the columns its `finish` reads and writes, so `batch` holds only those
    and the rest of each row waits in Arrow: chunk after chunk, with lines held back and
    answers to requests of earlier chunks, the events are those of a read that kept every
    column in `batch` (what a format that names none gets)."""
    import dataclasses

    from loophound.formats import bproxy
    from loophound.synth.bproxy_variants import variant, write_bproxy_variant

    log = tmp_path / "daemon.log"
    write_bproxy_variant(log, variant(name), storm_requests=300, storm_hours=30 / 3600,
                         session_minutes=1.0)
    small_chunks(monkeypatch)
    assert bproxy.FORMAT.finish_columns
    _, narrow, warnings = read_chunked(log, tmp_path / "narrow")
    from loophound import formats
    from loophound import ingest as ingest_module

    every = dataclasses.replace(bproxy.FORMAT, finish_columns=None)
    assert ingest_module._batch_columns(every) is None
    monkeypatch.setitem(formats.FORMATS, "bproxy", every)
    _, full, full_warnings = read_chunked(log, tmp_path / "full")
    assert len(narrow) > 1000 and narrow == full and warnings == full_warnings


# Ingests in a new interpreter, then lists whether pandas was imported: each log path is read
# into the store, a path ending in "+" twice (its first part, then the whole, as an appended file)
INGEST_AND_LIST = """
import sys
from pathlib import Path
from loophound.ingest import ingest
from loophound.store import Store
store, *logs = sys.argv[1:]
for log in logs:
    if log.endswith("+"):
        whole = Path(log[:-1]).read_bytes()
        Path(log[:-1]).write_bytes(whole[:whole.index(b"\\n", len(whole) // 2) + 1])
        ingest([log[:-1]], Store(store))
        Path(log[:-1]).write_bytes(whole)
        log = log[:-1]
    ingest([log], Store(store))
print("pandas" in sys.modules)
"""


def test_ingest_does_not_import_pandas(tmp_path):
    """pyarrow imports pandas (0.3-0.45 s of CPU, in the first chunk's work) when it is
    installed, as CI's `spark` extra does, at the first `pa.array` of numpy values or a
    list, or `to_numpy()` of a column: ingest converts with `db.numpy_arrow` and
    `db.arrow_numpy` instead. A library user may import pandas: it is never hidden."""
    pytest.importorskip("pandas")
    import loophound
    from loophound.synth.bproxy_variants import Variant, write_bproxy_variant

    logs = [str(p) for p in sorted(SAMPLES.iterdir()) if p.is_dir()]
    for id_key in ("reqId", None):  # by id, and joined by time, caller and order
        log = tmp_path / f"{id_key}.log"
        write_bproxy_variant(log, Variant("keys", id_key=id_key), storm_requests=300,
                             storm_hours=0.01, session_minutes=1.0)
        logs.append(f"{log}+")
    hostile = tmp_path / "hostile.jsonl"  # quarantined lines, and a last one without newline
    hostile.write_bytes(b'{"ts": 1767600000, "from": "a", "to": "b"}\n{"broken\n\xff\n[1]\n'
                        b'{"ts": 1767600001')
    done = subprocess.run([sys.executable, "-c", INGEST_AND_LIST, str(tmp_path / "st"), *logs,
                           str(hostile)], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PYTHONPATH=str(Path(loophound.__file__).parents[1])))
    assert done.stdout.split() == ["False"], done.stderr[-3000:]
    con = Store(tmp_path / "st").connect()
    quarantined = con.execute("SELECT count(*) FROM quarantine").fetchall()[0][0]
    assert quarantined >= 3  # the hostile lines were read (and the samples' own)


def test_chunk_buffers_are_read_into_again_only_once_nothing_holds_them():
    from loophound.lines import ChunkBuffers

    buffers = ChunkBuffers(keep=2)
    first = buffers.take(10)
    view = memoryview(first)  # a batch's text over the chunk, say
    second = buffers.take(10)
    assert second is not first
    view.release()
    again = buffers.take(12)  # a longer tail before the next read
    assert again is first and len(again) == 12
    held = memoryview(again), memoryview(second)
    third = buffers.take(8)
    assert third is not first and third is not second and len(buffers.buffers) == 2
    del held
    assert buffers.take(8) is first


def test_a_pipelined_read_starts_and_ends_with_small_chunks():
    """Ingest's reads of large files start with a small chunk (the mapping starts at once)
    and halve their chunks towards the end (the last is finished alone): every byte is read
    once, no chunk is larger than asked, and a size not known, or a file grown since its
    size was taken, is read in whole chunks."""
    from loophound.lines import (
        CHUNK_BYTES,
        FIRST_CHUNK_BYTES,
        LAST_CHUNK_BYTES,
        pipeline_chunk_bytes,
    )

    mib = 1 << 20
    for total in (CHUNK_BYTES + 1, 40 * mib, 258 * mib, 324 * mib, 2350 * mib):
        sizes, done = [], 0
        while done < total:
            sizes.append(pipeline_chunk_bytes(done, total))
            done += sizes[-1]
        assert done == total and sizes[0] == FIRST_CHUNK_BYTES
        assert max(sizes) <= CHUNK_BYTES
        assert sizes[-1] <= LAST_CHUNK_BYTES * 1.5 and sizes[-2] <= 2 * LAST_CHUNK_BYTES
        assert sizes[1:-1] == sorted(sizes[1:-1], reverse=True)  # whole chunks, then halves
        if total > 4 * CHUNK_BYTES:
            assert sizes.count(CHUNK_BYTES) >= len(sizes) - 5
    assert [pipeline_chunk_bytes(n, 0) for n in (0, 1, CHUNK_BYTES)] == [
        FIRST_CHUNK_BYTES, CHUNK_BYTES, CHUNK_BYTES]
    assert pipeline_chunk_bytes(50 * mib, 40 * mib) == CHUNK_BYTES  # grew since
    assert pipeline_chunk_bytes(0, 10 * mib, chunk_bytes=1024) == 1024  # never above the chunk

"""Scheduled scans: alert once per runaway, and survive kills and a second scan at once."""

from __future__ import annotations

import http.server
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loophound import db
from loophound.cli import app
from loophound.store import Store
from loophound.synth import write_bproxy_log

LOOPHOUND = [sys.executable, "-c", "from loophound.cli import run; run()"]


def scan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*LOOPHOUND, "scan", *args], capture_output=True, text=True, timeout=300)


def events_of(store: Path) -> list[tuple]:
    con = Store(store).connect()
    return con.execute("SELECT event_id, kind, actor, session, action, error, byte_offset "
                       "FROM events ORDER BY event_id").fetchall()


@pytest.fixture(scope="module")
def storm_log(tmp_path_factory) -> Path:
    """A bproxy log with a long storm: big enough that a scan takes a second or two."""
    d = tmp_path_factory.mktemp("storm")
    write_bproxy_log(d, seed=3, storm_requests=60_000)
    return next(d.glob("*.log"))


@pytest.fixture(scope="module")
def reference(storm_log, tmp_path_factory) -> list[tuple]:
    """What one clean, uninterrupted run stores."""
    store = tmp_path_factory.mktemp("ref") / "st"
    assert scan(str(storm_log), "--store", str(store), "--fail-on", "never").returncode == 0
    return events_of(store)


def test_alerts_once_for_a_new_runaway_then_stays_quiet_while_it_grows(tmp_path):
    """One loop found by three detectors (a run of errors, a rate spike, an unusual actor) is
    one incident and one alert; it stays quiet while the loop grows, and says once that it
    ended."""
    logs = tmp_path / "logs"
    logs.mkdir()
    full = tmp_path / "full"
    write_bproxy_log(full, seed=5, storm_requests=600)
    text = next(full.glob("*.log")).read_text().splitlines(keepends=True)
    log = logs / "daemon.log"
    store = tmp_path / "st"
    runner = CliRunner()

    def scan_alerts() -> tuple[int, list[dict]]:
        res = runner.invoke(app, ["scan", str(logs), "--store", str(store), "--incremental"])
        return res.exit_code, [json.loads(x) for x in res.stdout.splitlines() if x.startswith("{")]

    cut = len(text) * 2 // 3
    log.write_text("".join(text[:cut]))
    code, alerts = scan_alerts()
    assert code == 1
    assert len(alerts) == 1, [(a["detector"], a["title"]) for a in alerts]
    storm = alerts[0]
    assert storm["schema"] == "loophound.incident-alert/v1" and storm["status"] == "new"
    assert storm["detector"] == "repeated_error" and storm["sessions"] == ["6afr3v"]
    assert storm["detectors"] == ["repeated_error", "rate_spike", "unusual_actor"]
    assert len(storm["members"]) == 3 and len(storm["also_seen_as"]) == 2
    first = Store(store).connect()
    assert first.execute("SELECT count(*) FROM findings").fetchall() == [(3,)]  # 3 findings
    assert scan_alerts() == (0, [])  # nothing new: quiet
    log.write_text("".join(text))  # the storm went on, then stopped: more of the same appended
    code, again = scan_alerts()
    assert code == 0  # a loop that ended is news, not a failure
    assert [(a["id"], a["status"]) for a in again] == [(storm["id"], "ended")]
    # the alert's text is the incident's now, not the first scan's
    assert again[0]["events"] > storm["events"]
    assert f": {again[0]['events']:,} events over" in again[0]["title"]
    later = [json.loads(line) for line in text[-6:]]
    for n, line in enumerate(later):  # healthy traffic a minute on: the loop stays ended
        line["time"] += 60_000
        line["id"] = f"later-{n // 2}"
    log.write_text("".join(text) + "".join(json.dumps(x) + "\n" for x in later))
    assert scan_alerts() == (0, [])
    con = Store(store).connect()  # the loop's finding counted its growth all along
    grown = con.execute("SELECT events FROM findings WHERE id = ?", [storm["primary"]]).fetchall()
    assert grown[0][0] >= 600 > storm["events"]


class _Hook(http.server.BaseHTTPRequestHandler):
    received: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 — http.server's naming
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Hook.received.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def test_alerts_are_posted_to_a_webhook(tmp_path):
    server = http.server.HTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        logs = tmp_path / "logs"
        write_bproxy_log(logs, seed=5, storm_requests=300)
        url = f"http://127.0.0.1:{server.server_port}/hook"
        res = CliRunner().invoke(app, ["scan", str(logs), "--store", str(tmp_path / "st"),
                                       "--incremental", "--webhook", url,
                                       "--alerts", str(tmp_path / "alerts.jsonl")])
        assert res.exit_code == 1
        written = [json.loads(x) for x in (tmp_path / "alerts.jsonl").read_text().splitlines()]
        assert written and sorted(a["id"] for a in _Hook.received) == sorted(a["id"] for a in written)
        assert all(a["schema"] == "loophound.incident-alert/v1" for a in _Hook.received)
        assert len(_Hook.received) == 1  # one loop, one alert, whatever saw it
    finally:
        server.shutdown()


def test_an_unreachable_webhook_warns_but_the_scan_still_reports(tmp_path):
    logs = tmp_path / "logs"
    write_bproxy_log(logs, seed=5, storm_requests=300)
    res = CliRunner().invoke(app, ["scan", str(logs), "--store", str(tmp_path / "st"),
                                   "--incremental", "--webhook", "http://127.0.0.1:9/none"])
    assert res.exit_code == 1 and "webhook" in res.output and '"status": "new"' in res.output


def test_a_scan_killed_at_any_moment_leaves_a_store_the_next_run_completes(storm_log, reference,
                                                                           tmp_path):
    rng = random.Random(11)
    store = tmp_path / "st"
    for _ in range(4):
        proc = subprocess.Popen([*LOOPHOUND, "scan", str(storm_log), "--store", str(store),
                                 "--fail-on", "never"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.3, 2.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait()  # the next attempt resumes the store this one left
    done = scan(str(storm_log), "--store", str(store), "--fail-on", "never")
    assert done.returncode == 0, done.stderr
    got = events_of(store)
    assert len(got) == len({e[0] for e in got})  # no duplicate
    assert got == reference  # no gap, nothing different
    leftovers = {p.name for p in (store / "events").glob("*.parquet")}
    assert leftovers == {Path(f).name for f in Store(store).committed_files()["events"]}


def test_a_second_scan_at_once_waits_or_says_why(storm_log, reference, tmp_path):
    store = tmp_path / "st"
    first = subprocess.Popen([*LOOPHOUND, "scan", str(storm_log), "--store", str(store),
                              "--fail-on", "never"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not (store / "lock").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)
    busy = scan(str(storm_log), "--store", str(store), "--no-wait")
    queued = subprocess.Popen([*LOOPHOUND, "scan", str(storm_log), "--store", str(store),
                               "--fail-on", "never"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert first.wait(timeout=300) == 0
    assert queued.wait(timeout=300) == 0
    if first.returncode == 0 and busy.returncode != 2:
        pytest.skip("the first scan finished before the second started (machine too fast)")
    assert busy.returncode == 2 and "another loophound process is writing" in busy.stderr
    assert "Traceback" not in busy.stderr
    assert events_of(store) == reference


def test_the_catalog_is_locked_only_while_in_use(tmp_path):
    """A scan attaches the catalog for each use and detaches it after, so another process
    (an analyst's `loophound sql`) can open it between uses."""
    path = str(tmp_path / "catalog.duckdb")
    probe = [sys.executable, "-c", "import duckdb, sys; "
             "duckdb.connect(sys.argv[1], read_only=True).execute('SELECT 1').fetchall()", path]
    with db.open_file(path) as con:
        con.execute("CREATE TABLE t (a INTEGER)")
        with db.open_file(path, read_only=True) as inner:  # a nested use shares the attachment
            assert inner.execute("SELECT count(*) FROM t").fetchall() == [(0,)]
        assert subprocess.run(probe, capture_output=True).returncode != 0
    assert subprocess.run(probe, capture_output=True).returncode == 0


def test_watch_runs_scans_on_a_schedule_and_stops_on_sigterm(tmp_path):
    logs = tmp_path / "logs"
    write_bproxy_log(logs, seed=5, storm_requests=300)
    proc = subprocess.Popen([*LOOPHOUND, "watch", str(logs), "--store", str(tmp_path / "st"),
                             "--every", "1s"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    time.sleep(6)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert '"status": "new"' in out  # the first scan alerted
    assert out.count('"status": "new"') == len(out.splitlines())  # later scans did not repeat
    assert "watch stopped after" in err


def test_a_scan_of_recent_events_opens_only_the_files_that_hold_some(tmp_path):
    """A store of many days of logs: a scheduled scan's window lists the recent batches only,
    by their time range in the catalog, so its cost does not grow with the days kept. (Each
    day's logs are ingested as they come: small logs read in one run share one file.)"""
    import datetime as dt

    logs = tmp_path / "logs"
    write_bproxy_log(logs / "old", seed=1, storm_requests=50)
    write_bproxy_log(logs / "new", seed=2, storm_requests=50)
    new_log = next((logs / "new").glob("*.log"))
    shift = 30 * 86_400_000  # the new log's lines a month later than the old one's
    lines = [json.loads(line) for line in new_log.read_text().splitlines()]
    new_log.write_text("".join(json.dumps(r | {"time": r["time"] + shift}) + "\n" for r in lines))
    store = Store(tmp_path / "st")
    for day in ("old", "new"):
        CliRunner().invoke(app, ["ingest", str(logs / day), "--store", str(store.root)])
    every = store.committed_files()["events"]
    con = store.connect()
    since = con.execute("SELECT max(ts) FROM events").fetchall()[0][0] - dt.timedelta(days=1)
    recent = store.committed_files(since)["events"]
    assert len(every) == 2 and len(recent) == 1
    expected = con.execute("SELECT count(*) FROM events WHERE ts >= ?", [since]).fetchall()[0][0]
    window = store.connect(since).execute("SELECT count(*), min(ts) >= ? FROM events",
                                          [since]).fetchall()[0]
    assert expected > 0 and window == (expected, True)
    with db.open_file(str(store.catalog)) as cat:  # a catalog from before batches had times
        cat.execute("ALTER TABLE batches DROP COLUMN max_ts")
    assert store.committed_files(since)["events"] == every


def test_deleted_files_keep_their_events(tmp_path):
    logs = tmp_path / "logs"
    write_bproxy_log(logs, seed=5, storm_requests=100)
    store = tmp_path / "st"
    CliRunner().invoke(app, ["scan", str(logs), "--store", str(store), "--incremental"])
    before = events_of(store)
    shutil.rmtree(logs)
    os.makedirs(logs)
    CliRunner().invoke(app, ["scan", str(logs), "--store", str(store), "--incremental"])
    assert events_of(store) == before


def test_incremental_scans_add_up_to_what_one_full_scan_finds(tmp_path, monkeypatch):
    """A runaway followed across four scheduled scans counts exactly what a full scan of the
    same store counts: each scan adds only what is new, nothing twice, nothing dropped; the
    events each finding claims are kept in few files however many scans added to them."""
    from loophound import runs as runs_module
    from loophound.watch import previous_document

    monkeypatch.setattr(runs_module, "MAX_ADDED", 2)  # merge the claim files every 2 scans

    write_bproxy_log(tmp_path / "full", seed=5, storm_requests=900)
    text = next((tmp_path / "full").glob("*.log")).read_text().splitlines(keepends=True)
    logs, store = tmp_path / "logs", tmp_path / "st"
    logs.mkdir()
    runner = CliRunner()
    for quarter in (1, 2, 3, 4):
        (logs / "daemon.log").write_text("".join(text[:len(text) * quarter // 4]))
        runner.invoke(app, ["scan", str(logs), "--store", str(store), "--incremental"])
    shutil.copytree(store, tmp_path / "again")
    runner.invoke(app, ["scan", "--store", str(tmp_path / "again"), "--json", str(tmp_path / "f.json")])
    full = json.loads((tmp_path / "f.json").read_text())
    followed = previous_document(Store(store))
    figures = ("events", "lines", "bytes", "tokens", "cost_usd", "cost_basis", "unpriced_tokens",
               "attributed", "start", "end", "duration_s")
    storm = next(f for f in full["findings"] if f["detector"] == "repeated_error")
    same = next(f for f in followed["findings"] if f["id"] == storm["id"])
    assert {k: same[k] for k in figures} == {k: storm[k] for k in figures}
    assert followed["totals"] == full["totals"]
    claimed = Store(store).connect().execute(
        "SELECT count(*) FROM finding_events WHERE finding_id = ?", [storm["id"]]).fetchall()
    assert claimed == [(storm["lines"],)]
    # a full scan's file, an added one, both merged into one, and what the last scan added
    assert [p.name for p in sorted((store / "findings").glob("finding-events-*"))] == [
        "finding-events-000001.parquet", "finding-events-000002-added.parquet",
        "finding-events-000003.parquet", "finding-events-000004-added.parquet"]
    assert len(Store(store).committed_files()["finding_events"]) == 2



def test_a_watch_keeps_recent_events_in_memory_and_finds_what_a_cron_scan_finds(tmp_path,
                                                                                monkeypatch):
    """`watch` keeps each store's look-back window in memory between cycles: its findings
    are those of scans that read the window from Parquet each time, and a window holding a
    file the store no longer lists (a rewritten document's batches are replaced) is read
    again."""
    import datetime as dt

    from loophound import store as store_module
    from loophound.watch import previous_document

    write_bproxy_log(tmp_path / "full", seed=5, storm_requests=900)
    text = next((tmp_path / "full").glob("*.log")).read_text().splitlines(keepends=True)
    docs = []
    for keep in (False, True):
        kept = store_module._KeptWindows()
        kept.on = keep
        monkeypatch.setattr(store_module, "_KEPT", kept)
        monkeypatch.chdir(tmp_path / "full")  # the same relative paths in both findings
        (tmp_path / "full" / f"{keep}").mkdir()
        monkeypatch.chdir(tmp_path / "full" / f"{keep}")
        Path("logs").mkdir()
        for quarter in (1, 2, 3, 4):
            Path("logs/daemon.log").write_text("".join(text[:len(text) * quarter // 4]))
            CliRunner().invoke(app, ["scan", "logs", "--store", "st", "--incremental"])
        docs.append(previous_document(Store("st")))
        assert len(kept.windows) == keep  # kept only when asked
    assert docs[1] == docs[0]
    store = Store("st")
    since = dt.datetime.fromisoformat(docs[1]["totals"]["end"].rstrip("Z")) - dt.timedelta(hours=1)

    def window() -> list[tuple]:
        return store.connect(since).execute("SELECT count(*), max(event_id) FROM events").fetchall()

    with db.open_file(str(store.catalog)) as cat:
        cat.execute("DELETE FROM batches WHERE batch_id = (SELECT max(batch_id) FROM batches)")
    from_memory = window()
    kept.on = False
    assert from_memory == window()


def test_a_kept_window_follows_its_start_and_is_written_afresh_as_rows_drop_out(tmp_path,
                                                                               monkeypatch):
    """As the look-back window moves on, `watch`'s copy in memory holds exactly the events the
    Parquet files hold for it, and is written afresh once as many rows went as are left
    (DuckDB keeps the memory of deleted rows otherwise)."""
    from loophound import store as store_module

    kept = store_module._KeptWindows()
    monkeypatch.setattr(store_module, "_KEPT", kept)
    write_bproxy_log(tmp_path / "logs", seed=5, storm_requests=100)
    store = Store(tmp_path / "st")
    CliRunner().invoke(app, ["ingest", str(tmp_path / "logs"), "--store", str(store.root)])
    lo, hi = store.connect().execute("SELECT min(ts), max(ts) FROM events").fetchall()[0]
    query = "SELECT count(*), min(ts), sum(event_id) FROM events"
    first = None
    for step in range(1, 6):
        since = lo + (hi - lo) * step / 6
        kept.on = True
        from_memory = store.connect(since).execute(query).fetchall()
        kept.on = False
        assert from_memory == store.connect(since).execute(query).fetchall()
        first = first or from_memory[0][0]
    window = next(iter(kept.windows.values()))
    assert 0 <= window.dropped < first - from_memory[0][0]


def test_files_a_killed_run_left_are_removed_and_a_clean_store_is_not_searched(tmp_path,
                                                                                monkeypatch):
    """A writer that ends normally leaves the mark `clean`: the next one need not look for
    leftovers. Without the mark (a kill, a failure), the next writer deletes the files a writer
    recorded as in progress (the journal) that no commit lists, and nothing else: a file it
    did not write (copied in by hand, another version's) is never deleted."""
    write_bproxy_log(tmp_path / "logs", seed=5, storm_requests=50)
    store = tmp_path / "st"
    CliRunner().invoke(app, ["scan", str(tmp_path / "logs"), "--store", str(store), "--incremental"])
    before = events_of(store)
    searched = []
    original = Store._remove_orphans
    monkeypatch.setattr(Store, "_remove_orphans", lambda self: searched.append(1) or original(self))
    assert (store / "clean").exists()
    orphan = store / "events" / "00099-0999999.parquet"  # what a killed run wrote last
    Store(store).intend("events/00099-0999999.parquet")
    shutil.copy(next((store / "events").glob("*.parquet")), orphan)
    foreign = store / "events" / "00098-0999999.parquet"  # not written by loophound
    shutil.copy(orphan, foreign)
    (store / "clean").unlink()
    CliRunner().invoke(app, ["scan", str(tmp_path / "logs"), "--store", str(store), "--incremental"])
    assert searched == [1] and not orphan.exists() and (store / "clean").exists()
    assert foreign.exists() and not (store / "writing.journal").exists()
    foreign.unlink()
    CliRunner().invoke(app, ["scan", str(tmp_path / "logs"), "--store", str(store), "--incremental"])
    assert searched == [1] and events_of(store) == before


def test_a_scheduled_scan_takes_in_what_another_process_ingested(tmp_path):
    """New batches are new whoever committed them: after a `loophound ingest` by hand, the
    next scheduled scan finds no new bytes in its logs but still scans what was added."""
    from loophound.watch import previous_document

    write_bproxy_log(tmp_path / "full", seed=5, storm_requests=900)
    text = next((tmp_path / "full").glob("*.log")).read_text().splitlines(keepends=True)
    logs, store = tmp_path / "logs", tmp_path / "st"
    logs.mkdir()
    runner = CliRunner()
    (logs / "daemon.log").write_text("".join(text[:len(text) // 2]))
    runner.invoke(app, ["scan", str(logs), "--store", str(store), "--incremental"])
    before = previous_document(Store(store))["totals"]["events"]
    (logs / "daemon.log").write_text("".join(text))
    runner.invoke(app, ["ingest", str(logs), "--store", str(store)])
    later = runner.invoke(app, ["scan", str(logs), "--store", str(store), "--incremental"])
    assert "0 new events" in later.stderr and "nothing to scan" not in later.stderr
    assert previous_document(Store(store))["totals"]["events"] > before


def test_a_quiet_store_with_nothing_new_is_not_scanned_again(tmp_path):
    """A log where nothing loops: the next scheduled scan with no new bytes does no work."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "daemon.log").write_text("".join(
        json.dumps({"level": 30, "time": 1_750_000_000_000 + i * 60_000, "pid": 1, "id": f"r{i}",
                    "event": event, "ownerHash": "a1", "action": "scroll", "session": "s"}) + "\n"
        for i in range(3) for event in ("received", "response")))
    store = tmp_path / "st"
    runs = [CliRunner().invoke(app, ["scan", str(logs), "--store", str(store), "--incremental"])
            for _ in range(2)]
    assert [r.exit_code for r in runs] == [0, 0]
    assert "findings:" in runs[0].stderr and Store(store).connect().execute(
        "SELECT count(*) FROM findings").fetchall() == [(0,)]
    # nothing new prints nothing: cron mails whatever a job prints, every 5 minutes
    assert (runs[1].stdout, runs[1].stderr) == ("", "")

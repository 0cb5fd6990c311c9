"""The Spark engine gives the default engine's answers: the same events from `ingest`, the
same findings document from `scan`, on the sample logs (every format, seed 7) and on another
seed's incidents with their clean twins (files that continue others: read on the driver).

One SparkSession (`local[2]`) serves every test (a start costs ~20 s). Without PySpark or
Java the tests are skipped, except where LOOPHOUND_REQUIRE_SPARK is set (CI), where they
fail: CI must run them."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loophound.cli import app
from loophound.detect import DETECTORS
from loophound.ingest import ingest
from loophound.scan import scan_store
from loophound.store import Store
from loophound.synth import write_clean_twins, write_samples

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def spark():
    """The test session's one SparkSession, or a skip (a failure under CI)."""
    why = None
    try:
        import pyspark  # noqa: F401
    except ImportError:
        why = "PySpark is not installed (pip install -e '.[test,spark]')"
    if why is None and shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        why = "Java is not installed (apt-get install openjdk-17-jre-headless)"
    if why is not None:
        if os.environ.get("LOOPHOUND_REQUIRE_SPARK"):
            pytest.fail(f"LOOPHOUND_REQUIRE_SPARK is set but {why}")
        pytest.skip(why)
    from loophound.spark import session

    s = session("local[2]")
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()


def _incidents(root: Path) -> Path:
    """Seed 11's incidents of every format, and the clean twins of the same seed beside them:
    several twins start like an incident's file (same first lines), so the run has files that
    continue others of it."""
    write_samples(root / "s11", seed=11)
    write_clean_twins(root / "twins", seed=11)
    good = b'{"ts": "2026-06-18T10:00:0%d Z", "from": "a", "to": "b", "text": "hi"}\n'
    (root / "damaged.jsonl").write_bytes(  # quarantined lines, and a last one still pending
        good % 1 + b"{not json\n" + b"\n" + b"\xff\xfe\n" + good % 2 + b'{"ts": "2026-06-18T1')
    return root


@pytest.fixture(scope="session")
def stores(spark, tmp_path_factory):
    """Each data set ingested by both engines: name → (DuckDB's store, Spark's store)."""
    from loophound.spark.ingest import ingest_on_spark

    tmp = tmp_path_factory.mktemp("engines")
    sets = {"samples": [str(ROOT / "sample_logs")],
            "incidents": [str(_incidents(tmp / "incidents"))]}
    out = {}
    for name, paths in sets.items():
        # a folder name Hadoop would take for a glob: the engine reads it literally
        a, b = Store(tmp / f"{name}-duckdb"), Store(tmp / f"{name}-spark[local-2]")
        ingest(paths, a)
        ingest_on_spark(spark, paths, b)
        out[name] = (a, b)
    return out


def _rows(store: Store, sql: str) -> list[tuple]:
    con = store.connect(isolated=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_spark_ingest_stores_the_same_events_with_the_same_ids(stores):
    a, b = stores["samples"]
    for sql in ("SELECT * FROM events ORDER BY event_id",
                "SELECT * FROM quarantine ORDER BY file, line",
                "SELECT * EXCLUDE (first_seen, last_read) FROM inputs ORDER BY input_id"):
        assert _rows(a, sql) == _rows(b, sql), sql
    assert len(_rows(a, "SELECT * FROM events")) > 10_000
    # read in parallel: the samples' 26 inputs were cut into several tasks' files
    assert len(list((b.root / "events").glob("*.parquet"))) > 1
    assert not (b.root / "spark-staging").exists()


def test_files_continuing_others_are_read_after_the_new_ones_on_the_driver(stores):
    a, b = stores["incidents"]
    # the ids of the files read on the driver come after the executors' files: compare the
    # events by where they are (file, line), and the outcome joins by what they answer
    sql = """SELECT e.* EXCLUDE (event_id, answers), q.file, q.line
             FROM events e LEFT JOIN events q ON q.event_id = e.answers
             ORDER BY e.file, e.line, e.event_id & 4294967295"""
    left, right = _rows(a, sql), _rows(b, sql)
    assert len(left) > 10_000 and left == right
    quarantine = "SELECT * FROM quarantine ORDER BY file, line"
    assert len(_rows(a, quarantine)) == 4 and _rows(a, quarantine) == _rows(b, quarantine)
    inputs = "SELECT path, format, sha256, bytes, lines FROM inputs ORDER BY path"
    assert _rows(a, inputs) == _rows(b, inputs)


def _document(result) -> dict:
    doc = json.loads(json.dumps(result.document, default=str))
    doc.pop("generated_at", None)
    return doc


# seed 11's incidents are scanned with the detectors whose groups they test most: many
# findings of one detector (17 rate spikes), a detector gathered from its groups
# (unusual_actor), formats tied by name (ping_pong, trigger_cycle); every detector runs on
# the samples (a Spark job per detector costs the test suite seconds)
ON_INCIDENTS = ["rate_spike", "unusual_actor", "ping_pong", "trigger_cycle"]


@pytest.mark.parametrize("data, only", [("samples", None), ("incidents", ON_INCIDENTS)],
                         ids=["samples", "incidents"])
def test_spark_scan_finds_what_the_default_engine_finds(spark, stores, data, only):
    """The detectors, on both engines: the same findings document, whole."""
    from loophound.spark.scan import scan_on_spark

    a, b = stores[data]
    expected = _document(scan_store(a, save=False, only=only))
    got = _document(scan_on_spark(spark, b, only=only))
    # each has findings of every detector it runs, so each detector's groups are compared
    # (runaway_subagents: its scenario is not in the sample logs yet, see below)
    assert {f["detector"] for f in expected["findings"]} == set(only or DETECTORS) - {
        "runaway_subagents"}
    assert got == expected
    # the run is saved in the store as the default engine saves it: `report`/`sql` read it
    assert _rows(b, "SELECT count(*) FROM findings")[0][0] == len(expected["findings"])


def test_every_detector_declares_how_its_events_divide():
    """Spark runs each detector on groups of events: every detector says which (a two-step
    one, which gathers its groups' parts, declares both steps)."""
    for name, d in DETECTORS.items():
        assert d.partition_by, name
        assert (d.parts is None) == (d.gather is None), name
    assert DETECTORS["unusual_actor"].gather is not None


def test_scan_on_spark_says_which_names_are_not_detectors(tmp_path):
    got = CliRunner().invoke(app, ["scan", "--store", str(tmp_path), "--engine", "spark",
                                   "--only", "repeated_error,loops"])
    assert got.exit_code == 2
    assert "no detector named loops" in got.output and "unusual_actor" in got.output
    got = CliRunner().invoke(app, ["scan", "--store", str(tmp_path), "--engine", "spark",
                                   "--incremental"])
    assert got.exit_code == 2 and "--incremental" in got.output


def test_the_default_engine_never_imports_pyspark(tmp_path):
    code = ("import sys, loophound.cli, loophound.api, loophound.scan; "
            "print('pyspark' in sys.modules or 'loophound.spark' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=os.environ | {"PYTHONPATH": str(ROOT / "src")}, timeout=120)
    assert done.stdout.strip() == "False", done.stderr


def test_scan_only_runs_the_detectors_named_on_the_default_engine_too(tmp_path):
    store = tmp_path / "store"
    got = CliRunner().invoke(app, ["scan", str(ROOT / "sample_logs" / "bproxy"), "--store",
                                   str(store), "--only", "repeated_error", "--json", "-"])
    assert got.exit_code == 1, got.output  # the storm is critical
    doc = json.loads(got.stdout[got.stdout.index("{"):])
    assert doc["findings"] and {f["detector"] for f in doc["findings"]} == {"repeated_error"}
    got = CliRunner().invoke(app, ["scan", "--store", str(store), "--only", "loops"])
    assert got.exit_code == 2 and "no detector named loops" in got.output


def test_the_command_line_ingests_and_scans_on_spark(spark, tmp_path):
    """`ingest` and `scan` with --engine spark (the test's session is the one they get)."""
    logs = str(ROOT / "sample_logs" / "bproxy")
    store = str(tmp_path / "store")
    engine = ["--engine", "spark", "--spark-master", "local[2]"]
    got = CliRunner().invoke(app, ["ingest", logs, "--store", store, *engine])
    assert got.exit_code == 0, got.output
    got = CliRunner().invoke(app, ["scan", "--store", store, "--json", "-", *engine])
    assert got.exit_code == 1, got.output  # the storm is critical
    doc = _json_of(got.stdout)
    assert doc["findings"] and doc == _default_scan(logs, tmp_path / "default")


def _json_of(stdout: str) -> dict:
    """The findings document `scan --json -` printed, without its time stamp."""
    doc = json.loads(stdout[stdout.index("{"):])
    doc.pop("generated_at", None)
    return doc


def _default_scan(logs: str, store: Path) -> dict:
    """`loophound scan LOGS --json -` on the default engine, into a new store."""
    return _json_of(CliRunner().invoke(app, ["scan", logs, "--store", str(store),
                                             "--json", "-"]).stdout)


def _found(events, inputs, names: list[str]) -> list[tuple]:
    """What `names` find over `events` alone, as comparable tuples (the way an executor
    runs them: `group_connection`)."""
    from loophound.detect import run_detectors, settings
    from loophound.spark.scan import group_connection

    con = group_connection(events, inputs)
    try:
        return sorted((f.id, f.severity, str(f.start), str(f.end), f.title, f.summary,
                       json.dumps(f.claim_params, default=str), f.claim_sql)
                      for f in run_detectors(con, settings(), names))
    finally:
        con.close()


def test_formats_a_detector_ties_by_name_are_one_group(tmp_path):
    """A detector grouped by format relates events by names and ids no format owns: every
    other line of sven's logs read as another format names the same peers. The formats its
    `links` tie are one group, and the groups then find what all events find; grouped by
    plain format, ping_pong finds otherwise (what makes the ties needed)."""
    import pyarrow.compute as pc

    from loophound.spark.scan import group_connection, tied_formats

    store = Store(tmp_path / "store")
    ingest([str(ROOT / "sample_logs" / "sven"), str(ROOT / "sample_logs" / "codex")], store)
    con = store.connect()
    events = con.sql("SELECT * REPLACE (CASE WHEN format = 'sven' AND line % 2 = 0 "
                     "THEN 'generic' ELSE format END AS format) FROM events").to_arrow_table()
    inputs = con.sql("SELECT * FROM inputs").to_arrow_table()
    con.close()
    whole = group_connection(events, inputs)
    linked = [n for n, d in DETECTORS.items() if d.links]
    ties = {n: tied_formats(whole, DETECTORS[n].links) for n in linked}
    whole.close()
    assert ties["ping_pong"] == {"sven": "generic"} and ties["trigger_cycle"] == {}

    def by_group(name: str, tied: dict[str, str]) -> list[tuple]:
        label = [tied.get(f, f) for f in events["format"].to_pylist()]
        return sorted(x for g in sorted(set(label))
                      for x in _found(events.filter(pc.equal(label, g)), inputs, [name]))

    for name in linked:
        assert by_group(name, ties[name]) == _found(events, inputs, [name]), name
    expected = _found(events, inputs, ["ping_pong"])
    assert expected and by_group("ping_pong", {}) != expected


def test_tied_formats_are_one_group_on_spark(spark):
    """`grouped` puts a tied format's events in the group of the format it is tied to, and a
    line that answers another in the group of the line it answers."""
    import pyarrow as pa

    from loophound.spark.scan import grouped

    events = spark.createDataFrame([(1, "a", None), (2, "b", None), (3, "c", None), (4, "c", 1)],
                                   "event_id long, format string, answers long")

    def formats(group: pa.Table) -> pa.Table:
        ids = sorted(group["event_id"].to_pylist())
        return pa.table({"ids": [",".join(map(str, ids))]})

    got = grouped(events, ("format",), {"b": "a"}).applyInArrow(formats, "ids string").collect()
    assert sorted(r["ids"] for r in got) == ["1,2,4", "3"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def connect_server(spark, tmp_path_factory):
    """A Spark Connect server on this machine (loopback only), started as a user starts one
    (PySpark's `sbin/start-connect-server.sh`, `local[2]`): its address `sc://127.0.0.1:port`
    and the folder of its log."""
    import pyspark

    home = Path(pyspark.__file__).parent
    run = tmp_path_factory.mktemp("connect")
    port = _free_port()
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_PID_DIR": str(run),
           "SPARK_LOG_DIR": str(run), "PYSPARK_PYTHON": sys.executable,
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    subprocess.run(["bash", str(home / "sbin" / "start-connect-server.sh"), "--master",
                    "local[2]", "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                    "--conf", f"spark.connect.grpc.binding.port={port}",
                    "--conf", "spark.sql.session.timeZone=UTC"], env=env, check=True,
                   capture_output=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    logs = "".join(p.read_text() for p in run.glob("*.out"))
                    pytest.fail(f"the Spark Connect server did not start:\n{logs[-3000:]}")
                time.sleep(1)
        yield f"sc://127.0.0.1:{port}", run
    finally:
        subprocess.run(["bash", str(home / "sbin" / "stop-connect-server.sh")], env=env,
                       capture_output=True)


def test_spark_connect_ingests_and_scans_as_the_default_engine(connect_server, tmp_path):
    """`--spark-master sc://...` (Spark Connect): the engine's DataFrames, Arrow functions and
    reads go through the Connect client, and every detector's findings are the default's."""
    logs = str(ROOT / "sample_logs")
    store = str(tmp_path / "store")
    address, server_logs = connect_server
    engine = ["--engine", "spark", "--spark-master", address]

    def loophound(*args: str) -> subprocess.CompletedProcess:
        # a process of its own, as a user runs it: this one already has a classic session,
        # beside which PySpark starts no Connect session
        return subprocess.run([sys.executable, "-m", "loophound.cli", *args], text=True,
                              capture_output=True, timeout=600)

    got = loophound("ingest", logs, "--store", store, *engine)
    assert got.returncode == 0, got.stdout + got.stderr
    got = loophound("scan", "--store", store, "--json", "-", *engine)
    assert got.returncode == 1, got.stdout + got.stderr  # the bproxy storm is critical
    doc = _json_of(got.stdout)
    # every detector whose scenario the sample logs plant (runaway_subagents' is written by
    # synth.write_subagent_sessions and scanned in test_detect_runaway_subagents; sample_logs
    # has no section of it yet)
    assert {f["detector"] for f in doc["findings"]} == set(DETECTORS) - {"runaway_subagents"}
    assert doc == _default_scan(logs, tmp_path / "default")
    # the server ran the work: the ingest's tasks and the scan's groups (applyInArrow)
    log = "".join(p.read_text() for p in server_logs.glob("*.out"))
    assert "Spark Connect - session_id" in log and "FlatMapGroupsInBatchExec" in log

"""`scan --engine spark`: the detectors run on the executors, each over groups of events.

There is one definition of each detector: its `measure`, `judge` and `describe`, the SQL and
numpy of `loophound.detect`. What a detector adds for Spark is a declaration,
`Detector.partition_by`: the event columns whose groups hold everything one of its findings
is reasoned from (repeated_error: a session). Spark reads the store's Parquet files, groups
the events by those columns (`groupBy(...).applyInArrow`), and each group becomes the
`events` table of an in-memory DuckDB connection on an executor, with the store's derived
views over it, where the ordinary `run_detectors` runs the group's detectors. The findings
come back to the driver, which attributes them, groups incidents and saves the run exactly
as the default engine does (`scan_store`, with this runner).

A detector with a global step (unusual_actor scores every actor's windows against all the
others) is two steps (`Detector.parts`, `gather`): its parts are measured on the executors,
group by group, and gathered on the driver, which judges them with a connection to the
store for the evidence lines. The attribution runs on the driver, in DuckDB over the store's
files.
"""

from __future__ import annotations

import pickle
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from .. import db
from ..attribute.costs import CostModel
from ..detect import DETECTORS, Finding, run_detectors
from ..scan import ScanResult, scan_store
from ..schema import COLUMNS
from ..store import DERIVED_VIEWS, Store, event_kinds
from . import EngineUnavailable


def on_spark(only: list[str] | None = None,
             present: set[str] | None = None) -> dict[tuple[str, ...], list[str]]:
    """The detectors to run (all, or `only`; of those, the ones that read a kind in
    `present`, when given, as `run_detectors` picks them), by the columns their events are
    grouped by; raises `EngineUnavailable` for a name that is not a detector's."""
    unknown = sorted(set(only or ()) - set(DETECTORS))
    if unknown:
        raise EngineUnavailable(f"no detector named {', '.join(unknown)}; detectors: "
                                f"{', '.join(DETECTORS)}")
    by_key: dict[tuple[str, ...], list[str]] = {}
    for n, d in DETECTORS.items():
        if (only and n not in only) or (present is not None and not d.has_to_read(present)):
            continue
        if not d.partition_by:  # a bug in the detector's declaration, not the user's
            raise ValueError(f"detector {n} declares no partition_by")
        by_key.setdefault(d.partition_by, []).append(n)
    return by_key


def events_frame(spark: Any, store: Store) -> Any | None:
    """The store's `events` as a Spark DataFrame (None when it holds none): its committed
    Parquet files, with the outcomes a later ingest learnt of (the catalog's `outcomes`)."""
    from pyspark.sql import functions as F

    files = store.committed_files()["events"]
    if not files:
        return None
    events = spark.read.option("mergeSchema", "true").parquet(*(literal_path(f) for f in files))
    con = store.connect()
    try:
        outcomes = con.sql("SELECT event_id, ok AS o_ok, error AS o_error, "
                           "latency_ms AS o_latency_ms FROM _outcomes").to_arrow_table()
    finally:
        con.close()
    if outcomes.num_rows:
        late = spark.createDataFrame(outcomes.to_pandas())
        events = (events.join(late, "event_id", "left")
                  .withColumn("ok", F.coalesce("ok", "o_ok"))
                  .withColumn("error", F.coalesce("error", "o_error"))
                  .withColumn("latency_ms", F.coalesce("latency_ms", "o_latency_ms"))
                  .drop("o_ok", "o_error", "o_latency_ms"))
    return events


def grouped(events: Any, key: tuple[str, ...], tied: dict[str, str] | None = None) -> Any:
    """`events` grouped by the columns `key`, where a line that answers another (a response,
    `answers`) goes with the line it answers: the derived `requests` view joins the two, and
    a response does not always carry its request's session. `tied`: formats that go in
    another format's group (`tied_formats`)."""
    from pyspark.sql import functions as F

    asked = events.select(F.col("event_id").alias("_q_id"),
                          *(F.col(c).alias(f"_q_{c}") for c in key))
    joined = events.join(asked, events["answers"] == asked["_q_id"], "left")
    parts = []
    for c in key:
        part = F.when(F.col("_q_id").isNotNull(), F.col(f"_q_{c}")).otherwise(F.col(c))
        if c == "format" and tied:
            to = F.create_map(*(F.lit(x) for pair in sorted(tied.items()) for x in pair))
            part = F.coalesce(to[part], part)
        parts.append(part.alias(f"_part_{c}"))
    return joined.groupBy(*parts)


def tied_formats(con: duckdb.DuckDBPyConnection, links: str) -> dict[str, str]:
    """The formats that share a link (`Detector.links`) with another, directly or through
    others, each → the first by name of the formats so tied (whose group they join)."""
    shared = con.execute(f"""SELECT list(DISTINCT format ORDER BY format)
        FROM ({links}) AS l(format, link) WHERE link IS NOT NULL
        GROUP BY link HAVING count(DISTINCT format) > 1""").fetchall()
    first: dict[str, str] = {}

    def root(f: str) -> str:
        while first.get(f, f) != f:
            f = first[f]
        return f

    for (formats,) in shared:
        roots = sorted({root(f) for f in formats})
        for r in roots[1:]:
            first[r] = roots[0]
    return {f: root(f) for f in first}


def literal_path(path: str) -> str:
    """`path` as Spark reads it literally: Hadoop takes `[`, `{`, `*`, `?` as a glob, so a store
    in `runs/local[2]/` would be a pattern that matches nothing; a backslash escapes each."""
    return re.sub(r"([\\\[\]{}*?])", r"\\\1", path)


def group_connection(group: pa.Table, inputs: pa.Table) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection whose `events` are `group` (in the store's columns and types, in
    event order, as the store's view reads them), with `inputs` and the derived views."""
    con = db.connect()
    con.execute("SET threads = 1")  # Spark runs one task a core
    have = set(group.column_names)
    cols = ", ".join(f'CAST("{c.name}" AS {c.sql_type}) AS "{c.name}"' if c.name in have
                     else f'CAST(NULL AS {c.sql_type}) AS "{c.name}"' for c in COLUMNS)
    con.register("_group", group)
    con.execute(f"CREATE TEMP TABLE events AS SELECT {cols} FROM _group ORDER BY event_id")
    con.unregister("_group")
    con.register("_inputs_arrow", inputs)
    con.execute("CREATE TEMP TABLE inputs AS SELECT * FROM _inputs_arrow")
    con.unregister("_inputs_arrow")
    for name, sql in DERIVED_VIEWS.items():
        con.execute(f"CREATE TEMP VIEW {name} AS {sql}")
    return con


def _group_task(names: list[str], params: dict, inputs: pa.Table):
    """The function each group runs (`applyInArrow`): the ordinary detectors over it, and the
    first step of the two-step ones; a row per finding, or per part, with its detector."""
    whole = [n for n in names if DETECTORS[n].gather is None]
    two_step = [n for n in names if DETECTORS[n].gather is not None]

    def run(group: pa.Table) -> pa.Table:
        con = group_connection(group, inputs)
        try:
            # one lane: Spark runs other groups beside it, and a sibling connection would
            # copy the group's events (a temporary table here)
            found = run_detectors(con, params, whole, lanes=1) if whole else []
            present = event_kinds(con)
            parts = [(n, part) for n in two_step if DETECTORS[n].has_to_read(present)
                     for part in DETECTORS[n].parts(con, params[n])]
        finally:
            con.close()
        rows = [(f.detector, pickle.dumps(f)) for f in found] + [
            (n, pickle.dumps(part)) for n, part in parts]
        return pa.table({"detector": pa.array([r[0] for r in rows], pa.string()),
                         "part": pa.array([n in two_step for n, _ in rows], pa.bool_()),
                         "item": pa.array([r[1] for r in rows], pa.binary())})
    return run


def order(findings: list[Finding]) -> list[Finding]:
    """Findings gathered from groups, in one order whatever order the groups came back in:
    by detector (as registered), then start, then id."""
    rank = {n: i for i, n in enumerate(DETECTORS)}
    return sorted(findings, key=lambda f: (rank.get(f.detector, len(rank)),
                                           f.start is None, f.start or 0, f.id))


def plan(con: duckdb.DuckDBPyConnection,
         only: list[str] | None) -> dict[tuple[tuple[str, ...], tuple], list[str]]:
    """The Spark jobs, one a grouping: (the columns, the formats tied by `links`) → the
    detectors grouped so (those with anything to read in the store `con` reads)."""
    jobs: dict[tuple[tuple[str, ...], tuple], list[str]] = {}
    for key, names in on_spark(only, event_kinds(con)).items():
        for n in names:
            links = DETECTORS[n].links
            tied = tied_formats(con, links) if links else {}
            jobs.setdefault((key, tuple(sorted(tied.items()))), []).append(n)
    return jobs


class SparkDetectors:
    """`scan_store`'s detector runner on Spark (see the module's docstring)."""

    def __init__(self, spark: Any, store: Store):
        self.spark, self.store = spark, store

    def __call__(self, con: duckdb.DuckDBPyConnection, params: dict,
                 only: list[str] | None,
                 beside: Sequence[Callable[[duckdb.DuckDBPyConnection], Any]] = ()
                 ) -> list[Finding]:
        """The findings of the detectors (all, or `only`) over the store: each detector's
        groups on the executors; the two-step ones' parts gathered here, where `con` reads
        the store's events. `beside` (work that needs no finding) runs here after them."""
        found = self._detect(con, params, only)
        for work in beside:
            work(con)
        return found

    def _detect(self, con: duckdb.DuckDBPyConnection, params: dict,
                only: list[str] | None) -> list[Finding]:
        events = events_frame(self.spark, self.store)
        if events is None:
            return []
        jobs = plan(con, only)
        two_step = [n for names in jobs.values() for n in names if DETECTORS[n].gather]
        for n in two_step:  # started now, it goes on beside the Spark jobs
            if DETECTORS[n].prepare is not None:
                DETECTORS[n].prepare(con, params[n])
        inputs = con.sql("SELECT * FROM inputs").to_arrow_table()
        found: list[Finding] = []
        parts: dict[str, list[Any]] = {n: [] for n in two_step}
        for (key, tied), names in jobs.items():
            rows = (grouped(events, key, dict(tied))
                    .applyInArrow(_group_task(names, {n: params[n] for n in names}, inputs),
                                  "detector string, part boolean, item binary")
                    .collect())
            for r in rows:
                item = pickle.loads(r["item"])
                if r["part"]:
                    parts[r["detector"]].append(item)
                else:
                    found.append(item)
        for n in two_step:
            found += DETECTORS[n].gather(con, parts[n], params[n])
        return order(found)


def scan_on_spark(spark: Any, store: Store, config_file: Path | None = None,
                  overrides: list[str] = (), costs: CostModel | None = None,
                  only: list[str] | None = None, save_to: Path | None = None) -> ScanResult:
    """`loophound scan --engine spark`: a full scan whose detectors run on Spark; the run is
    saved as the default engine saves it (in the store, or `save_to`)."""
    on_spark(only)  # a name that is no detector's is said before anything is read
    detect = SparkDetectors(spark, store)
    if store.read_only or save_to is not None:  # nothing is written in the store: no lock
        return scan_store(store, config_file, overrides, costs, only=only, save_to=save_to,
                          detect=detect)
    with store.writing():
        return scan_store(store, config_file, overrides, costs, only=only, detect=detect)

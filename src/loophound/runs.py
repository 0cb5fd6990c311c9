"""Saved runs: what a scan found, kept as files so that anything later reads them, not a scan.

A run is four files with one number: `findings-N.parquet` (the findings), `finding-events-N
.parquet` (the events each claims), `attribution-N.parquet` (the finding that owns each event,
and what each event cost: the attribution) and `run-N.json` (the findings document and what
the report needs besides). They are written into the store's `findings/` folder and committed
in its catalog, or, for a store that may not be written (a copy of the Parquet folders kept
as evidence, a read-only mount), into a folder of the user's, with no catalog at all.

`load_run` finds the newest run of a store or folder; `run_connection` gives the views and
tables the report reads over it, exactly those a scan leaves, so `report --store` needs no
lock, writes nothing and makes the report `investigate` made.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from . import db
from .attribute import WHO_COLUMNS
from .store import ADDED, Store, define_finding_views

RUN_SCHEMA = "loophound.run/v1"
MAX_ADDED = 32  # a scheduled scan's claim files merged into one every this many scans
_RUN_FILE = re.compile(r"run-(\d+)\.json$")


@dataclass
class SavedRun:
    """One scan's results, read back from its files."""

    folder: Path  # where its files are
    number: int
    document: dict  # the loophound.findings/v1 object
    unit_kinds: dict[str, tuple[str, ...]]  # finding id → the event kinds it counts as actions
    full: bool  # a full scan (a scheduled scan's run holds only what it added)
    batches_seen: int | None = None  # the newest batch of the store it saw
    files: dict[str, str] = field(default_factory=dict)  # kind → path relative to `folder`

    def path(self, kind: str) -> Path | None:
        rel = self.files.get(kind)
        return self.folder / rel if rel else None


def _findings_table(con: duckdb.DuckDBPyConnection, name: str, rows: list[dict],
                    statuses: dict[str, str]) -> None:
    """The temporary table `name`: one row per finding (what `findings-N.parquet` holds).
    Made by DuckDB from Python lists: pyarrow would import pandas to build it (0.5-2 s)."""
    def column(key: str) -> list:
        return [r[key] for r in rows]

    db.temp_table(con, name, {
        **{k: ("VARCHAR", column(k)) for k in ("id", "detector", "severity", "title", "summary")},
        **{k: ("VARCHAR[]", column(k)) for k in ("actors", "targets", "sessions")},
        "start": ("VARCHAR", column("start")), "end": ("VARCHAR", column("end")),
        **{k: ("BIGINT", column(k)) for k in ("events", "lines", "bytes", "tokens")},
        "cost_usd": ("DOUBLE", column("cost_usd")),
        "status": ("VARCHAR", [statuses.get(r["id"]) for r in rows]),
        "json": ("VARCHAR", [json.dumps(r, sort_keys=True) for r in rows])})


def _write_files(con: duckdb.DuckDBPyConnection, folder: Path, number: int, doc: dict,
                 statuses: dict[str, str], unit_kinds: dict[str, tuple[str, ...]],
                 claims_sql: str, suffix: str, full: bool,
                 batches_seen: int | None, intend=None) -> dict[str, str]:
    """Write one run's files into `folder` (`intend` is told each name first); return them."""
    from .findings_json import dumps

    files = {"findings": f"findings-{number:06d}.parquet",
             "claims": f"finding-events-{number:06d}{suffix}",
             "inputs": f"inputs-{number:06d}.parquet",
             "outcomes": f"outcomes-{number:06d}.parquet",
             "skipped": f"skipped-{number:06d}.parquet",
             "run": f"run-{number:06d}.json"}
    if full:  # a scheduled scan attributes only what is new: no whole-log attribution
        files["attribution"] = f"attribution-{number:06d}.parquet"
    if intend:
        intend(*files.values())
    _findings_table(con, "_findings", doc["findings"], statuses)
    con.execute(f"COPY _findings TO {db.sql_literal(str(folder / files['findings']))} "
                "(FORMAT parquet)")
    con.execute("DROP TABLE _findings")
    con.execute(f"COPY ({claims_sql} ORDER BY finding_id, event_id) "
                f"TO {db.sql_literal(str(folder / files['claims']))} (FORMAT parquet)")
    # the catalog's inputs as the scan saw them: a copy of the folders then still knows its
    # files' names, hashes and heads (the report quotes evidence lines from them)
    con.execute(f"COPY (SELECT * FROM _inputs ORDER BY input_id) "
                f"TO {db.sql_literal(str(folder / files['inputs']))} (FORMAT parquet)")
    con.execute(f"COPY (SELECT * FROM _outcomes ORDER BY event_id) "
                f"TO {db.sql_literal(str(folder / files['outcomes']))} (FORMAT parquet)")
    con.execute(f"COPY (SELECT path, reason FROM skipped ORDER BY path) "
                f"TO {db.sql_literal(str(folder / files['skipped']))} (FORMAT parquet)")
    if full:
        # every event that is owned or costs something: the owner, and the price it was given
        # (attribution's `_event_facts` has both, and `owner` and `event_costs` are its rows
        # with one or the other)
        con.execute(f"""COPY (
            SELECT e.event_id, x.finding_id AS owner, e.cost_usd, e.cost_status, e.tokens
            FROM _event_facts e LEFT JOIN _findx x USING (fidx)
            WHERE e.fidx IS NOT NULL OR e.cost_status IS NOT NULL ORDER BY event_id)
            TO {db.sql_literal(str(folder / files['attribution']))} (FORMAT parquet)""")
    run = {"schema": RUN_SCHEMA, "number": number, "full": full,
           "batches_seen": batches_seen, "files": files,
           "unit_kinds": {k: list(v) for k, v in sorted(unit_kinds.items())},
           "document": doc}
    tmp = folder / f".{files['run']}.tmp"
    tmp.write_text(dumps(run), encoding="utf-8")
    os.replace(tmp, folder / files["run"])
    return files


def save_in_store(store: Store, con: duckdb.DuckDBPyConnection, doc: dict,
                  statuses: dict[str, str], unit_kinds: dict[str, tuple[str, ...]]) -> None:
    """Findings, claims and attribution become Parquet files, committed like a batch."""
    from .findings_json import dumps

    with store.writing():
        with store.catalog_connection(read_only=True) as cat:
            run_id, seen = cat.execute(
                "SELECT coalesce(max(run_id), 0) + 1, (SELECT max(batch_id) FROM batches) "
                "FROM findings_runs").fetchall()[0]
        folder = store.root / "findings"
        folder.mkdir(exist_ok=True)
        claims = "SELECT finding_id, event_id FROM claims"
        # a scheduled scan's claims are what it added to the last scan's (store.since_full_scan);
        # every MAX_ADDED scans they are merged into one file, so reading them stays cheap
        scheduled, suffix = "incremental" in doc["method"], ".parquet"
        if scheduled:
            earlier = store.committed_files()["finding_events"]
            if len(earlier) < MAX_ADDED:
                suffix = ADDED
            else:
                claims = f"SELECT * FROM read_parquet({db.sql_list(earlier)}) UNION {claims}"
        files = _write_files(con, folder, run_id, doc, statuses, unit_kinds, claims, suffix,
                             not scheduled, seen,
                             intend=lambda *names: store.intend(*(f"findings/{n}" for n in names)))
        rel = {k: f"findings/{v}" for k, v in files.items()}
        store.seal(*rel.values(), record=True)  # hashed for `verify`, and read-only on disk
        now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        with store.catalog_connection() as cat:
            cat.execute("INSERT INTO findings_runs (run_id, started, findings_file, "
                        "finding_events_file, json, batches_seen, attribution_file, run_file, "
                        "inputs_file, outcomes_file, skipped_file) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        [run_id, now, rel["findings"], rel["claims"], dumps(doc), seen,
                         rel.get("attribution"), rel["run"], rel["inputs"], rel["outcomes"],
                         rel["skipped"]])
    if not scheduled:  # the report reads them; a scheduled scan's window has no use for them
        define_finding_views(con, store.committed_files())


def save_in_folder(folder: Path | None, con: duckdb.DuckDBPyConnection, doc: dict,
                   statuses: dict[str, str], unit_kinds: dict[str, tuple[str, ...]]) -> Path:
    """A full scan's run written into `folder` (created; a new temporary folder when None),
    for a store that may not be written. Returns the folder."""
    if folder is None:
        folder = Path(tempfile.mkdtemp(prefix="loophound-findings-"))
    folder.mkdir(parents=True, exist_ok=True)
    taken = [int(m.group(1)) for p in folder.glob("run-*.json") if (m := _RUN_FILE.search(p.name))]
    files = _write_files(con, folder, max(taken, default=0) + 1, doc, statuses, unit_kinds,
                         "SELECT finding_id, event_id FROM claims", ".parquet", True, None)
    # the views describe this run (the store's own, if any, is an older scan's)
    define_finding_views(con, {"findings": [str(folder / files["findings"])],
                               "finding_events": [str(folder / files["claims"])]})
    return folder


def define_scan_views(con: duckdb.DuckDBPyConnection, doc: dict,
                      statuses: dict[str, str]) -> None:
    """`findings` and `finding_events` over a scan kept in memory (not saved, or in a store
    without a catalog): they describe this scan, not the store's last saved run."""
    _findings_table(con, "_scan_findings", doc["findings"], statuses)
    con.execute("CREATE OR REPLACE TEMP VIEW findings AS SELECT * FROM _scan_findings")
    con.execute("CREATE OR REPLACE TEMP VIEW finding_events AS "
                "SELECT finding_id, event_id FROM claims")


def load_run(store: Store | None = None, folder: Path | None = None) -> SavedRun | None:
    """The newest saved run of `folder` (a run folder), or else of `store` (its catalog's
    newest run; a copy without a catalog: the newest `run-N.json` in its `findings/`). None
    when there is none, or the newest was saved by a version that wrote no run file."""
    if folder is None and store is not None and store.catalog.exists():
        with store.catalog_connection(read_only=True) as cat:
            has = cat.execute("SELECT count(*) FROM duckdb_columns() WHERE "
                              "database_name = current_database() AND table_name = 'findings_runs' "
                              "AND column_name = 'run_file'").fetchall()[0][0]
            rows = cat.execute("SELECT run_file FROM findings_runs ORDER BY run_id DESC LIMIT 1"
                               ).fetchall() if has else []
        if not rows or not rows[0][0]:
            return None
        return _read(store.root / rows[0][0])
    if folder is None:
        if store is None:
            return None
        folder = store.root / "findings"
    found = sorted((int(m.group(1)), p) for p in Path(folder).glob("run-*.json")
                   if (m := _RUN_FILE.search(p.name)))
    return _read(found[-1][1]) if found else None


def _read(path: Path) -> SavedRun | None:
    try:
        run = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    if run.get("schema") != RUN_SCHEMA:
        return None
    return SavedRun(path.parent, int(run["number"]), run["document"],
                    {k: tuple(v) for k, v in run["unit_kinds"].items()}, bool(run["full"]),
                    run.get("batches_seen"), dict(run["files"]))


def is_current(store: Store, run: SavedRun) -> bool:
    """Whether `run` saw every batch the store now holds (a copy without a catalog cannot
    tell, and is taken as it is)."""
    if not store.catalog.exists():
        return True
    with store.catalog_connection(read_only=True) as cat:
        newest = cat.execute("SELECT max(batch_id) FROM batches").fetchall()[0][0]
    return newest is None or (run.batches_seen is not None and run.batches_seen >= newest)


@dataclass
class OpenedRun:
    """A saved run with the connection the report reads: what `report.build` takes, like a
    fresh `ScanResult`."""

    run: SavedRun
    con: duckdb.DuckDBPyConnection

    @property
    def document(self) -> dict:
        return self.run.document

    @property
    def unit_kinds(self) -> dict[str, tuple[str, ...]]:
        return self.run.unit_kinds


def open_run(store: Store, run: SavedRun, tables: bool = True) -> OpenedRun:
    """`run` over `store`'s events, ready for the report (`tables=False`: the views only)."""
    return OpenedRun(run, run_connection(store, run, tables))


def run_connection(store: Store, run: SavedRun, tables: bool = True) -> duckdb.DuckDBPyConnection:
    """The store's views, with the tables a scan leaves for the report rebuilt from `run`:
    `_findx` (finding index → id), `event_costs`, `_event_facts` (each event's owner, size
    and price), `claims` and `owner`. Nothing is detected or priced again. `tables=False`:
    only the views of the run's findings, claims (`finding_events`) and attribution
    (`_attribution`), which is what a replay of guards reads, without building tables."""
    con = store.connect()
    claims, attribution = run.path("claims"), run.path("attribution")
    define_finding_views(con, {"findings": [str(run.path("findings"))],
                               "finding_events": [str(claims)]})
    ids = [f["id"] for f in run.document["findings"]]
    db.temp_table(con, "_findx", {"fidx": ("INTEGER", list(range(len(ids)))),
                                  "finding_id": ("VARCHAR", ids),
                                  "prio": ("INTEGER", list(range(len(ids))))})
    con.execute(f"CREATE OR REPLACE TEMP VIEW _attribution AS "
                f"SELECT * FROM read_parquet({db.sql_literal(str(attribution))})")
    if not tables:
        return con
    con.execute("""CREATE OR REPLACE TEMP TABLE event_costs AS
        SELECT event_id, cost_usd, cost_status, tokens FROM _attribution
        WHERE cost_status IS NOT NULL""")
    # `shared` (claimed by more than one finding) is not saved: every event may be
    con.execute(f"""CREATE OR REPLACE TEMP TABLE _event_facts AS
        SELECT e.event_id, CAST(e.event_id >> 32 AS INTEGER) AS input_id, x.fidx, e.ts, e.kind,
               {"".join(f"e.{c}, " for c in WHO_COLUMNS)}e.byte_length, a.tokens, a.cost_usd,
               a.cost_status, true AS fresh, true AS shared
        FROM events e LEFT JOIN _attribution a USING (event_id)
        LEFT JOIN _findx x ON x.finding_id = a.owner""")
    con.execute("""CREATE OR REPLACE TEMP VIEW claims AS
        SELECT c.finding_id, c.event_id, x.fidx FROM finding_events c JOIN _findx x
        USING (finding_id)""")
    con.execute("""CREATE OR REPLACE TEMP VIEW owner AS
        SELECT o.event_id, o.fidx, x.finding_id FROM _event_facts o JOIN _findx x USING (fidx)""")
    return con

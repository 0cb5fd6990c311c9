"""The evidence store: Parquet files for events and quarantine, a small DuckDB catalog that
says which Parquet files are committed, and the documented views everything else reads.

Why a catalog of files rather than a glob: a Parquet file becomes visible only when the
transaction that lists it commits, so a scan killed at any moment leaves either the old store
or the new one, never half of a batch. Heavy work happens outside the catalog connection, so
the catalog is locked for writing only for the instant of a commit (a scheduled scan, about
a second long, keeps it open throughout: see `Store.writing`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import hashlib
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from . import db
from .errors import StoreBusy, StoreError, StoreReadOnly, no_store
from .schema import COLUMNS, QUARANTINE_COLUMNS, Column, create_table_sql

DEFAULT_STORE = ".loophound"
# a store's own working folder: the Spark engine's tasks stage their stores there, removed
# after the run; the one place inside a store where a store may be made
STAGING = "spark-staging"
CATALOG = "catalog.duckdb"

CATALOG_SCHEMA = """
CREATE TABLE IF NOT EXISTS inputs (
  input_id INTEGER PRIMARY KEY,
  path VARCHAR,             -- where the file was last seen (absolute)
  display_path VARCHAR,     -- as the user named it
  format VARCHAR,
  compression VARCHAR,
  sha256 VARCHAR,           -- SHA-256 of the bytes read so far (the file on disk when complete)
  bytes BIGINT,             -- bytes read so far (decompressed)
  lines BIGINT,             -- complete lines read so far
  head_sha256 VARCHAR,      -- SHA-256 of the first head_len bytes: recognises renamed files
  head_len INTEGER,
  pending_offset BIGINT,    -- an unterminated last line waiting for its newline
  pending_length BIGINT,
  pending_preview VARCHAR,
  ended_without_newline BOOLEAN,
  first_seen TIMESTAMP,
  last_read TIMESTAMP,
  sha_state BLOB,           -- SHA-256 midstate at `bytes`: appended bytes are hashed alone
  tail_sha256 VARCHAR       -- SHA-256 of the 4 KiB before `bytes`: proves the file is the same
);
-- stores written before these columns existed gain them (NULL: re-hashed in full once)
ALTER TABLE inputs ADD COLUMN IF NOT EXISTS sha_state BLOB;
ALTER TABLE inputs ADD COLUMN IF NOT EXISTS tail_sha256 VARCHAR;
-- SHA-256 of the head up to its last newline: a short head (a whole small file) is found by
-- it with one lookup per line of a file that continues it (NULL: found by its length)
ALTER TABLE inputs ADD COLUMN IF NOT EXISTS head_lines_sha256 VARCHAR;
CREATE TABLE IF NOT EXISTS batches (
  batch_id INTEGER PRIMARY KEY,
  input_id INTEGER,
  events_file VARCHAR,      -- relative to the store; small files read together share one
  quarantine_file VARCHAR,
  first_offset BIGINT,
  end_offset BIGINT,
  first_line BIGINT,
  end_line BIGINT,
  events BIGINT,
  quarantined BIGINT,
  sha256 VARCHAR,           -- SHA-256 of this batch's bytes [first_offset, end_offset)
  committed TIMESTAMP,
  min_ts TIMESTAMP,         -- the batch's earliest and latest event time: a scan of recent
  max_ts TIMESTAMP          -- events opens only the files that hold some
);
ALTER TABLE batches ADD COLUMN IF NOT EXISTS min_ts TIMESTAMP;
ALTER TABLE batches ADD COLUMN IF NOT EXISTS max_ts TIMESTAMP;
-- SHA-256 of the batch's Parquet files as committed: `verify` re-hashes them (NULL: committed
-- by a version that did not record them)
ALTER TABLE batches ADD COLUMN IF NOT EXISTS events_sha256 VARCHAR;
ALTER TABLE batches ADD COLUMN IF NOT EXISTS quarantine_sha256 VARCHAR;
-- SHA-256 of a saved run's files as written (`Store.seal`), for `verify` likewise
CREATE TABLE IF NOT EXISTS sealed_files (file VARCHAR PRIMARY KEY, sha256 VARCHAR);
CREATE TABLE IF NOT EXISTS findings_runs (
  run_id INTEGER PRIMARY KEY,
  started TIMESTAMP,
  findings_file VARCHAR,
  finding_events_file VARCHAR, -- a scheduled scan's (`-added`) holds only what it added
  json VARCHAR,
  batches_seen INTEGER      -- the newest batch when it ran: later batches are new to the next
);
ALTER TABLE findings_runs ADD COLUMN IF NOT EXISTS batches_seen INTEGER;
-- a saved run: which finding owns each event and what each event cost, and the run's
-- document as a file, so a report and a copy of the folders need nothing else
ALTER TABLE findings_runs ADD COLUMN IF NOT EXISTS attribution_file VARCHAR;
ALTER TABLE findings_runs ADD COLUMN IF NOT EXISTS run_file VARCHAR;
ALTER TABLE findings_runs ADD COLUMN IF NOT EXISTS inputs_file VARCHAR;
ALTER TABLE findings_runs ADD COLUMN IF NOT EXISTS outcomes_file VARCHAR;
ALTER TABLE findings_runs ADD COLUMN IF NOT EXISTS skipped_file VARCHAR;
-- the mapping each input was read with (`--mapping`): a later plain ingest reads its new lines
-- the same way, and another mapping reads it again whole
CREATE TABLE IF NOT EXISTS readings (input_id INTEGER PRIMARY KEY, format VARCHAR, mapping VARCHAR);
-- files ingest passed over although they looked like logs: a verdict must name them
CREATE TABLE IF NOT EXISTS skipped (path VARCHAR PRIMARY KEY, reason VARCHAR, seen TIMESTAMP);
-- the outcome of a request whose response a later ingest read (events files are written once)
CREATE TABLE IF NOT EXISTS outcomes (
  event_id BIGINT, ok BOOLEAN, error VARCHAR, latency_ms DOUBLE
);
"""


# The newest batch the last scan kept in the store had seen (runs from before the column
# existed: the newest batch committed before the scan started).
_LAST_SEEN = """WITH last AS (
  SELECT coalesce(batches_seen, (SELECT max(batch_id) FROM batches b
                                 WHERE b.committed <= r.started)) AS seen
  FROM findings_runs r ORDER BY run_id DESC LIMIT 1)"""


# Files a writer is about to write, one relative path a line, made durable before the file
# is: after a kill, recovery deletes only what is listed here and no commit lists. Nothing
# else in a store folder is ever deleted by a recovery (a copy, a user's file, a newer
# version's file stays).
JOURNAL = "writing.journal"

OUTCOME_COLUMNS = "event_id BIGINT, ok BOOLEAN, error VARCHAR, latency_ms DOUBLE"

_READ_ONLY_ERRNOS = (errno.EROFS, errno.EACCES, errno.EPERM)


class Store:
    """A store folder. Read views with `connect()`; change it only inside `writing()`."""

    def __init__(self, root: str | os.PathLike = DEFAULT_STORE):
        self.root = Path(root)

    @property
    def catalog(self) -> Path:
        return self.root / CATALOG

    @property
    def is_bare(self) -> bool:
        """A directory of Parquet files copied without the catalog (shared for analysis)."""
        return not self.catalog.exists() and any(self.root.glob("events/*.parquet"))

    def exists(self) -> bool:
        return self.catalog.exists() or self.is_bare

    @property
    def read_only(self) -> bool:
        """Evidence this process may read but not write: a copy without its catalog, or a
        folder (or catalog) the file system will not let us change. Reading commands work on
        it; a scan saves its findings elsewhere (see `loophound.scan`)."""
        if self.is_bare:
            return True
        if not self.root.exists():
            return False
        return not (os.access(self.root, os.W_OK)
                    and (not self.catalog.exists() or os.access(self.catalog, os.W_OK)))

    def require_writable(self) -> None:
        """Raise `StoreReadOnly` with what to do, for commands that must write the store."""
        if self.is_bare:
            raise StoreReadOnly(
                f"{self.root} holds Parquet files but no catalog ({CATALOG}): it is a copy, kept "
                "as read-only evidence. `scan`, `report`, `sql` and `verify` read it as it is; "
                "to add logs, ingest them into a new store (--store NEW)")
        if self.read_only:
            raise StoreReadOnly(
                f"{self.root} cannot be written (read-only file system or no permission); "
                "reading commands work on it, or copy it somewhere writable")

    def require_own_folder(self) -> None:
        """Raise `StoreError` for a --store that is a file (a log named by mistake) or a folder
        inside another store (its `events/`): a store is made only where it is no evidence."""
        if self.root.exists() and not self.root.is_dir():
            raise StoreError(f"--store {self.root} is a file, not a store folder; name a folder "
                             "(new or a store), e.g. --store .loophound")
        here = self.root.resolve()
        for parent in here.parents:
            if Store(parent).exists() and here.relative_to(parent).parts[0] != STAGING:
                raise StoreError(f"--store {self.root} is inside the store {parent}: a store's "
                                 "folders are evidence and never written into; choose a folder "
                                 "outside it")

    # -- writing -----------------------------------------------------------------------

    _held: dict[Path, int] = {}  # stores this process holds the write lock of (re-entrant)

    @contextmanager
    def writing(self, wait: bool = True, on_wait=None,
                hold_catalog: bool = False) -> Iterator[None]:
        """Hold the store's write lock: one writer at a time, across processes. Re-entrant
        within a process, so a scan can hold it across ingest, detection and saving.

        With `hold_catalog`, the catalog also stays open (locked to other processes) until
        the lock is released: for a scheduled scan, which lasts about a second and uses the
        catalog a dozen times, each open and close costing 10-20 ms. Others keep it closed
        between uses, so a long ingest never stalls a reader."""
        key = self.root.resolve()
        if not Store._held.get(key):
            self.require_writable()
            self.require_own_folder()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _unwritable(self.root, exc) from None
        if Store._held.get(key):
            Store._held[key] += 1
            try:
                yield
            finally:
                Store._held[key] -= 1
            return
        try:
            (self.root / "events").mkdir(exist_ok=True)
            (self.root / "quarantine").mkdir(exist_ok=True)
            fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise _unwritable(self.root, exc) from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not wait:
                    raise StoreBusy(
                        f"another loophound process is writing to {self.root}; "
                        "try again when it ends, or drop --no-wait to queue behind it"
                    ) from None
                if on_wait:
                    on_wait()
                fcntl.flock(fd, fcntl.LOCK_EX)
            Store._held[key] = 1
            # `clean`: the last writer ended normally, so no file it wrote is uncommitted and
            # the folders (thousands of files after a month of scheduled scans) need no look
            clean = self.root / "clean"
            with contextlib.ExitStack() as held:
                con = held.enter_context(self.catalog_connection())
                con.execute(CATALOG_SCHEMA)
                if not hold_catalog:
                    held.close()
                if clean.exists():
                    clean.unlink()
                else:  # killed, failed, or written by a version that did not leave the mark
                    self._remove_orphans()
                yield
                (self.root / JOURNAL).unlink(missing_ok=True)  # all it lists is committed
                clean.touch()
        finally:
            Store._held.pop(key, None)
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    @contextmanager
    def catalog_connection(self, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """Open the catalog, retrying briefly while another process has it open."""
        deadline = time.monotonic() + 30
        with contextlib.ExitStack() as stack:
            while True:
                try:
                    con = stack.enter_context(
                        db.open_file(str(self.catalog.resolve()), read_only=read_only))
                    break
                except duckdb.IOException as exc:
                    if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                        raise StoreBusy(f"cannot open {self.catalog}: {exc}") from exc
                    time.sleep(0.05)
            yield con

    def intend(self, *relative: str) -> None:
        """Record that this writer is about to write these files (paths relative to the
        store), durably, before it writes them: only such files may a recovery delete."""
        path = self.root / JOURNAL
        with open(path, "a", encoding="utf-8") as fh:
            fh.writelines(r + "\n" for r in relative)
            fh.flush()
            os.fsync(fh.fileno())

    def seal(self, *relative: str, record: bool = False) -> dict[str, str]:
        """The SHA-256 of each of these files of the store (paths relative to it), just written
        and about to be committed; each is made read-only on disk (write permission removed):
        a committed file is never written again, so a write that got past the SQL sandbox's
        check fails on it (for any user but root). With `record`, the hashes go into the
        catalog's `sealed_files` now (files not committed by the caller's own transaction: a
        saved run's); otherwise the caller records them as it commits (a batch's). `loophound
        verify` re-hashes every file so recorded."""
        sealed = {}
        for rel in relative:
            path = self.root / rel
            with open(path, "rb") as fh:
                sealed[rel] = hashlib.file_digest(fh, "sha256").hexdigest()
            with contextlib.suppress(OSError):
                os.chmod(path, path.stat().st_mode & ~0o222)
        if record and sealed:
            with self.catalog_connection() as con:
                con.executemany("INSERT OR REPLACE INTO sealed_files VALUES (?, ?)",
                                list(sealed.items()))
        return sealed

    def _remove_orphans(self) -> None:
        """Files a killed writer recorded as in progress (`intend`) but never committed are
        invisible to every reader: delete them, and nothing else."""
        journal = self.root / JOURNAL
        if not journal.exists():
            return
        intended = {line.strip() for line in journal.read_text(encoding="utf-8").splitlines()
                    if line.strip()}
        with self.catalog_connection(read_only=True) as con:
            listed = {r[0] for r in con.execute(
                "SELECT events_file FROM batches UNION SELECT quarantine_file FROM batches "
                "UNION SELECT findings_file FROM findings_runs "
                "UNION SELECT finding_events_file FROM findings_runs "
                "UNION SELECT attribution_file FROM findings_runs "
                "UNION SELECT run_file FROM findings_runs "
                "UNION SELECT inputs_file FROM findings_runs "
                "UNION SELECT outcomes_file FROM findings_runs "
                "UNION SELECT skipped_file FROM findings_runs"
            ).fetchall() if r[0]}
        for rel in sorted(intended - listed):
            target = (self.root / rel).resolve()
            if target.parent.parent == self.root.resolve():  # only inside the store's folders
                target.unlink(missing_ok=True)
        journal.unlink()

    # -- reading -----------------------------------------------------------------------

    def connect(self, since: dt.datetime | None = None,
                isolated: bool = False) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB connection with the store's views defined over it; with
        `since`, `events` (and every view over it) holds only the events at or after it.
        `isolated`: a database of its own, whose settings the caller may lock (the `sql`
        sandbox); otherwise a cursor on the process's shared one, which is 30 ms cheaper."""
        if not self.exists():
            raise no_store(self.root)
        if not isolated:
            con = db.scratch()
            define_views(con, self, since)
            return con
        con = db.connect()
        with db.hosting(con):
            define_views(con, self, since)
        return con

    def seen_by_last_scan(self) -> list[tuple[int, int]]:
        """Per input, the first event id the last scan kept in the store had not seen: what a
        scheduled scan adds to the figures it continues. By batch, not by time, so a line
        that arrives late, or a response stamped after its finding's end, counts once."""
        with self.catalog_connection(read_only=True) as con:
            return con.execute(f"""{_LAST_SEEN}
                SELECT input_id, (CAST(input_id AS BIGINT) << 32) + max(end_line)
                FROM batches, last WHERE batch_id <= last.seen
                GROUP BY input_id ORDER BY input_id""").fetchall()

    def record_reading(self, input_id: int, format_name: str, mapping: str | None) -> None:
        """Remember what an input was read with (its format and mapping text)."""
        with self.catalog_connection() as con:
            con.execute("INSERT OR REPLACE INTO readings VALUES (?, ?, ?)",
                        [input_id, format_name, mapping])

    def record_readings(self, display_paths: list[str], mapping: str | None) -> None:
        """Remember the mapping the inputs shown by these names were read with."""
        if not display_paths:
            return
        with self.catalog_connection() as con:
            con.execute("INSERT OR REPLACE INTO readings SELECT input_id, format, ? FROM inputs "
                        "WHERE list_contains(?, display_path)", [mapping, display_paths])

    def record_skipped(self, skipped: list[tuple[str, str]], read: list[str]) -> None:
        """Remember the files an ingest passed over although they looked like logs (path,
        reason), and forget those it has now read: a later verdict names what was not read."""
        if not skipped and not read:
            return
        now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        with self.catalog_connection() as con:
            con.execute("BEGIN")
            if read:
                con.execute("DELETE FROM skipped WHERE list_contains(?, path)", [read])
            for path, reason in skipped:
                con.execute("INSERT OR REPLACE INTO skipped VALUES (?, ?, ?)", [path, reason, now])
            con.execute("COMMIT")

    def window_start(self, lookback: dt.timedelta) -> dt.datetime | None:
        """The earliest time a scheduled scan must read from so that every log with lines
        the last scan had not seen is looked at against its own clock: its latest time the
        last scan saw, minus `lookback` (a log new since then: from its first time)."""
        with self.catalog_connection(read_only=True) as con:
            return con.execute(f"""{_LAST_SEEN}
                SELECT min(start) FROM (
                  SELECT coalesce(max(b.max_ts) FILTER (WHERE b.batch_id <= l.seen) - $lookback,
                                  min(b.min_ts) FILTER (WHERE b.batch_id > l.seen)) AS start
                  FROM batches b, last l GROUP BY b.input_id
                  HAVING count(*) FILTER (WHERE b.batch_id > l.seen) > 0)""",
                               {"lookback": lookback}).fetchall()[0][0]

    def has_unseen_batches(self) -> bool:
        """Whether batches were committed since the last scan kept in the store (by this
        process or by any other, e.g. a `loophound ingest` run by hand); any batch, when no
        scan has been kept yet."""
        with self.catalog_connection(read_only=True) as con:
            return con.execute(f"""{_LAST_SEEN}
                SELECT count(*) > 0 FROM batches
                WHERE batch_id > coalesce((SELECT seen FROM last), -1)""").fetchall()[0][0]

    def committed_files(self, since: dt.datetime | None = None) -> dict[str, list[str]]:
        """Absolute paths of the committed Parquet files, by kind. With `since`, only the
        events files that may hold an event at or after it (a batch's latest time is in the
        catalog; a batch without one, or a bare store's file, is always listed)."""
        if self.is_bare:
            def latest(pattern: str) -> list[str]:
                found = sorted((self.root / "findings").glob(pattern))
                return [str(found[-1].resolve())] if found else []

            def committed(kind: str) -> list[str]:  # commit order: by batch id
                return [str(p.resolve()) for p in sorted(
                    (self.root / kind).glob("*.parquet"), key=lambda p: (p.stem[-7:], p.name))]

            return {k: committed(k) for k in ("events", "quarantine")} | {
                "findings": latest("findings-*.parquet"),
                "finding_events": [str(f.resolve()) for f in since_full_scan(
                    sorted((self.root / "findings").glob("finding-events-*.parquet")))]}
        if not self.catalog.exists():
            return {"events": [], "quarantine": [], "findings": [], "finding_events": []}
        with self.catalog_connection(read_only=True) as con:
            recent = ""
            if since is not None and con.execute(  # a store from before max_ts: every file
                    "SELECT count(*) FROM duckdb_columns() WHERE database_name = current_database() "
                    "AND table_name = 'batches' "
                    "AND column_name = 'max_ts'").fetchall()[0][0]:
                recent = "AND (max_ts IS NULL OR max_ts >= $since)"
            # once each: the batches of small files read together share their files
            ev = [r[0] for r in con.execute(
                f"SELECT events_file FROM batches WHERE events_file IS NOT NULL {recent} "
                "GROUP BY events_file ORDER BY min(batch_id)",
                {"since": since} if recent else None).fetchall()]
            qu = [r[0] for r in con.execute(
                "SELECT quarantine_file FROM batches WHERE quarantine_file IS NOT NULL "
                "GROUP BY quarantine_file ORDER BY min(batch_id)").fetchall()]
            runs = con.execute(
                "SELECT findings_file, finding_events_file FROM findings_runs "
                "ORDER BY run_id").fetchall()
        root = self.root.resolve()
        fi = [str(root / runs[-1][0])] if runs and runs[-1][0] else []
        fe = [str(root / f) for f in since_full_scan([r[1] for r in runs if r[1]])]
        return {"events": [str(root / p) for p in ev], "quarantine": [str(root / p) for p in qu],
                "findings": fi, "finding_events": fe}


def _unwritable(root: Path, exc: OSError) -> Exception:
    """An OSError while preparing to write, as the user's condition when it is one."""
    if exc.errno in _READ_ONLY_ERRNOS:
        return StoreReadOnly(f"cannot write the store {root}: {exc.strerror} "
                             "(read-only file system or no permission); reading commands "
                             "work on it, or use a writable --store")
    return exc


def since_full_scan(files: list) -> list:
    """Of the findings runs' claim files (oldest first), those that together say which events
    the last scan's findings claim: the last full scan's, then what each scheduled scan since
    added (`-added` files: a continuing finding's new events, a new finding's all)."""
    full = [i for i, f in enumerate(files) if not str(f).endswith(ADDED)]
    return files[full[-1] if full else 0:]


ADDED = "-added.parquet"


def parquet_select(con: duckdb.DuckDBPyConnection, files: list[str], columns) -> str:
    """All of `files` as one relation with every one of `columns`. Files are in commit order,
    and the newest has every column this version writes; columns it lacks (a store written
    by an earlier version) read as NULL. (Its footer is read by `con`'s DuckDB, not pyarrow,
    which `loophound sql` would spend 0.3 s importing.)"""
    if files:
        have = {r[0] for r in con.execute(
            f"DESCRIBE SELECT * FROM read_parquet({db.sql_literal(files[-1])})").fetchall()}
        missing = "".join(f', CAST(NULL AS {c.sql_type}) AS "{c.name}"'
                          for c in columns if c.name not in have)
        return f"SELECT *{missing} FROM read_parquet({db.sql_list(files)}, union_by_name = true)"
    cols = ", ".join(f'CAST(NULL AS {c.sql_type}) AS "{c.name}"' for c in columns)
    return f"SELECT {cols} WHERE false"


def events_of_kinds(kinds) -> str:
    """SQL, in place of a table: the `events` of `kinds` (our own names, never a log's), one
    scan per kind. DuckDB evaluates an equality inside the Parquet scan, so the other columns
    are read only for that kind's rows; a filter on several values (IN, OR, list_contains)
    only skips row groups there, and every row's columns are read, then filtered: the
    message detectors' pass over 10x the incident read every column of 12.7 M requests and
    responses to keep its 20,000 `stats` records (1.9 s; 0.16 s so)."""
    return " UNION ALL ".join(f"SELECT * FROM events WHERE kind = {db.sql_literal(k)}"
                              for k in kinds)


# Views other than `events` and `quarantine`: what detectors, queries and the report read.
DERIVED_VIEWS = {
    # A request's outcome is on its own row: ingest writes its response's there when it
    # matches them (and in the catalog's `outcomes`, which `events` reads, when the response
    # came in a later read). The answering lines are joined only for the columns that need
    # them: a query that reads none of those (`WHERE error = ...`) has the join dropped by
    # DuckDB (each request has at most one row on the right), and reads the requests alone:
    # 0.06 s instead of 0.3-0.7 s on 1.2 M lines. (With `WHERE answers IS NOT NULL` in the
    # subquery DuckDB 2.0 keeps the join; the one group of lines that answer nothing joins
    # no request.) A request answered twice shows its first response, whatever the order of
    # the rows.
    "requests": """
      SELECT q.event_id, q.ts, q.file, q.line, q.format, q.actor, q.target, q.session,
             q.action, q.corr_id, q.ok, q.error, q.latency_ms,
             a.ts AS response_ts, a.line AS response_line,
             q.byte_length + coalesce(a.bytes, 0) AS bytes,
             1 + coalesce(a.lines, 0) AS lines
      FROM events q
      LEFT JOIN (SELECT answers, arg_min(ts, line) FILTER (WHERE kind = 'response') AS ts,
                        min(line) FILTER (WHERE kind = 'response') AS line,
                        sum(byte_length) AS bytes, count(*) AS lines
                 FROM events GROUP BY answers) a
        ON a.answers = q.event_id
      WHERE q.kind = 'request'""",
    "messages": events_of_kinds(("message", "room_post")),
    "triggers": events_of_kinds(("trigger", "session_start", "session_end")),
    "llm_calls": "SELECT * FROM events WHERE kind = 'llm_call'",
}


def define_views(con: duckdb.DuckDBPyConnection, store: Store,
                 since: dt.datetime | None = None) -> None:
    """Create the documented views in `con` over the store's committed files, `events` over
    those at or after `since` when it is given (scheduled scans read what is recent: the
    files are chosen by their time range in the catalog, their row groups by their
    statistics, and each query reads just its own columns; such a window has the views
    detection reads, not `quarantine`, `findings` or `finding_events`).

    The catalog's own tables are copied in, not attached, so that a long analysis session
    never holds a lock that would stall the next scan.
    """
    files = store.committed_files(since)
    events = parquet_select(con, files["events"], COLUMNS)
    if since is not None:
        events = f"SELECT * FROM ({events}) WHERE {_at_or_after(since)}"
        if _KEPT.on:
            events = _KEPT.window(con, store, since, files["events"], events)
    late = _copy_catalog(con, store)
    if late:
        # requests whose response was read by a later ingest (a log appended between runs):
        # their outcome was recorded then, beside the catalog, since Parquet files are
        # written once; a store without any pays no join
        events = f"""SELECT e.* REPLACE (coalesce(e.ok, o.ok) AS ok, coalesce(e.error, o.error)
                       AS error, coalesce(e.latency_ms, o.latency_ms) AS latency_ms)
                     FROM ({events}) e LEFT JOIN _outcomes o USING (event_id)"""
    con.execute(f"CREATE OR REPLACE TEMP VIEW events AS {events}")
    con.execute("DROP TABLE IF EXISTS _copies")  # derived from the events it replaced
    _DERIVED.pop(con, None)
    with _SHARED_LOCK:
        _SHARED.pop(con, None)
    con.execute("""CREATE OR REPLACE TEMP VIEW inputs AS
      SELECT display_path AS path, format, compression, sha256, bytes, lines,
             pending_length AS pending_bytes, first_seen, last_read, input_id
      FROM _inputs""")
    for name, sql in DERIVED_VIEWS.items():
        con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS {sql}")
    if since is not None:
        # a window is a scheduled scan's: its detectors read neither the quarantine nor earlier
        # findings, whose files grow in number with every scan
        return
    con.execute(
        "CREATE OR REPLACE TEMP VIEW quarantine AS "
        f"{parquet_select(con, files['quarantine'], QUARANTINE_COLUMNS)} UNION ALL BY NAME "
        """SELECT display_path AS file, lines + 1 AS line, pending_offset AS byte_offset,
             pending_length AS byte_length, 'truncated_last_line' AS reason,
             'last line has no newline (cut off, or still being written); '
             || 'it is read once it is complete' AS detail, pending_preview AS preview
           FROM _inputs WHERE pending_length > 0"""
    )
    define_finding_views(con, files)


FINDING_COLUMNS = tuple(Column(n, t, "") for n, t in (
    ("id", "VARCHAR"), ("detector", "VARCHAR"), ("severity", "VARCHAR"), ("title", "VARCHAR"),
    ("summary", "VARCHAR"), ("actors", "VARCHAR[]"), ("targets", "VARCHAR[]"),
    ("sessions", "VARCHAR[]"), ("start", "VARCHAR"), ("end", "VARCHAR"), ("events", "BIGINT"),
    ("lines", "BIGINT"), ("bytes", "BIGINT"), ("tokens", "BIGINT"), ("cost_usd", "DOUBLE"),
    ("status", "VARCHAR"), ("json", "VARCHAR"),
))
FINDING_EVENT_COLUMNS = (Column("finding_id", "VARCHAR", ""), Column("event_id", "BIGINT", ""))


def define_finding_views(con: duckdb.DuckDBPyConnection, files: dict[str, list[str]]) -> None:
    """`findings` and `finding_events`: the last scan's findings and the events each claims
    (empty, with their columns, before any scan has run)."""
    con.execute("CREATE OR REPLACE TEMP VIEW findings AS "
                + parquet_select(con, files.get("findings", []), FINDING_COLUMNS))
    claims = files.get("finding_events", [])
    # several files: a full scan's claims and what scheduled scans added; a finding a later
    # scan found afresh may repeat some
    unique = "SELECT DISTINCT * FROM " if len(claims) > 1 else "SELECT * FROM "
    con.execute("CREATE OR REPLACE TEMP VIEW finding_events AS "
                f"{unique}({parquet_select(con, claims, FINDING_EVENT_COLUMNS)})")


def _at_or_after(since: dt.datetime) -> str:
    """`ts >= ...`: a time of ours, not from a log, so it is written as a literal."""
    return f"ts >= TIMESTAMP '{since.isoformat(sep=' ', timespec='milliseconds')}'"


@dataclass
class _Window:
    table: str  # in the process's in-memory database, which every cursor on it sees
    files: set[str]  # the events files whose rows at or after `since` it holds
    since: dt.datetime
    dropped: int = 0  # rows deleted since it was last written afresh


class _KeptWindows:
    """The recent events of each store, kept in memory between the scans of one long-running
    process (`watch`): each scan adds the files committed since the last one and drops what
    fell out of its window, so its detectors query a table in memory instead of decoding the
    same Parquet pages again (DuckDB reads a table of 70,000 events two to three times faster).
    A window is rebuilt whenever a file it holds is no longer in the store (a rewritten
    document replaces its batches) or a scan reaches further back than it."""

    def __init__(self) -> None:
        self.on = False
        self.windows: dict[Path, _Window] = {}

    def window(self, con: duckdb.DuckDBPyConnection, store: Store, since: dt.datetime,
               files: list[str], select: str) -> str:
        key = store.root.resolve()
        w = self.windows.get(key)
        if w is None or since < w.since or not w.files <= set(store.committed_files()["events"]):
            table = w.table if w else f"memory.main._window_{len(self.windows) + 1}"
            con.execute(f"CREATE OR REPLACE TABLE {table} AS {select}")
            w = self.windows[key] = _Window(table, set(files), since)
        else:
            new = [f for f in files if f not in w.files]
            if new:
                con.execute(f"INSERT INTO {w.table} BY NAME SELECT * FROM "
                            f"({parquet_select(con, new, COLUMNS)}) WHERE {_at_or_after(since)}")
            w.dropped += con.execute(
                f"DELETE FROM {w.table} WHERE NOT ({_at_or_after(since)})").fetchall()[0][0]
            w.files.update(new)
            w.since = since
            # DuckDB does not give the memory of deleted rows back: written afresh once as
            # many rows went as are left, a day of cycles holds 15-27 MB, not a growing heap
            if w.dropped > con.execute(f"SELECT count(*) FROM {w.table}").fetchall()[0][0]:
                con.execute(f"CREATE OR REPLACE TABLE {w.table} AS SELECT * FROM {w.table}")
                w.dropped = 0
        return f"SELECT * FROM {w.table}"


_KEPT = _KeptWindows()


def keep_windows() -> None:
    """From now on, this process keeps each store's recent events in memory between scans
    (for `watch`, which scans the same store every few minutes)."""
    _KEPT.on = True


def _copy_catalog(con: duckdb.DuckDBPyConnection, store: Store) -> int:
    """Copy the catalog's `inputs`, `skipped` and `outcomes` into `con` (`_inputs`, `skipped`,
    `_outcomes`); a copy of the folders without a catalog has them as its last scan saved
    them. DuckDB copies them from database to database: no Arrow on the way, so `loophound
    sql` never imports pyarrow (0.3 s). Returns how many late outcomes there are."""
    if not store.catalog.exists():
        return _copy_snapshots(con, store)
    with store.catalog_connection(read_only=True) as cat:
        name = cat.execute("SELECT current_database()").fetchall()[0][0]
        if con.execute("SELECT count(*) FROM duckdb_databases() WHERE database_name = ?",
                       [name]).fetchall()[0][0]:  # a cursor on the process's shared database
            return _copy_tables(con, _catalog_tables(con, name))
    path = str(store.catalog.resolve())
    if db.is_attached(path):
        # held by this process's shared database (a writer's open catalog): a second handle
        # on the file, closed, would release the process's lock on it (POSIX locks are the
        # process's); copy through Arrow instead
        return _copy_through_arrow(con, store)
    with _attached(con, path) as name:  # `con` is a database of its own (the `sql` sandbox)
        return _copy_tables(con, _catalog_tables(con, name))


def _catalog_tables(con: duckdb.DuckDBPyConnection, name: str) -> dict[str, str | None]:
    """The catalog tables attached as database `name`, as relations (None: a catalog
    written before the table existed)."""
    have = {t for (t,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE "
                                      "database_name = ?", [name]).fetchall()}
    at = f'"{name}".main'
    return {"inputs": f"SELECT * FROM {at}.inputs ORDER BY input_id",
            "skipped": f"SELECT path, reason FROM {at}.skipped" if "skipped" in have else None,
            "outcomes": f"SELECT * FROM {at}.outcomes" if "outcomes" in have else None}


@contextmanager
def _attached(con: duckdb.DuckDBPyConnection, path: str) -> Iterator[str]:
    """The DuckDB file at `path` attached to `con` read-only for a moment, retrying briefly
    while another process writes it (as `Store.catalog_connection` does)."""
    name = "_catalog_copy"
    deadline = time.monotonic() + 30
    while True:
        try:
            con.execute(f"ATTACH {db.sql_literal(path)} AS {name} (READ_ONLY)")
            break
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                raise StoreBusy(f"cannot open {path}: {exc}") from exc
            time.sleep(0.05)
    try:
        yield name
    finally:
        con.execute(f"DETACH {name}")


def _copy_snapshots(con: duckdb.DuckDBPyConnection, store: Store) -> int:
    """A bare copy of the folders: the catalog tables as its last scan saved them beside its
    run (an empty `inputs` when none did)."""
    def snapshot(kind: str) -> str | None:
        found = sorted((store.root / "findings").glob(f"{kind}-*.parquet"))
        return f"SELECT * FROM read_parquet({db.sql_literal(str(found[-1]))})" if found else None

    name = "_no_catalog"
    con.execute(f"ATTACH ':memory:' AS {name}")
    try:
        here = con.execute("SELECT current_database()").fetchall()[0][0]
        con.execute(f"USE {name}")
        try:
            con.execute(CATALOG_SCHEMA)
        finally:
            con.execute(f'USE "{here}"')
        tables = _catalog_tables(con, name)
        return _copy_tables(con, {"inputs": snapshot("inputs") or tables["inputs"],
                                  "skipped": snapshot("skipped"),
                                  "outcomes": snapshot("outcomes")})
    finally:
        con.execute(f"DETACH {name}")


def _copy_through_arrow(con: duckdb.DuckDBPyConnection, store: Store) -> int:
    with store.catalog_connection(read_only=True) as cat:
        name = cat.execute("SELECT current_database()").fetchall()[0][0]
        tables = {k: None if v is None else cat.sql(v).to_arrow_table()
                  for k, v in _catalog_tables(cat, name).items()}
    for kind, table in tables.items():
        if table is not None:
            con.register(f"_{kind}_arrow", table)
    try:
        return _copy_tables(con, {k: None if t is None else f"SELECT * FROM _{k}_arrow"
                                  for k, t in tables.items()})
    finally:
        for kind, table in tables.items():
            if table is not None:
                con.unregister(f"_{kind}_arrow")


def _copy_tables(con: duckdb.DuckDBPyConnection, tables: dict[str, str | None]) -> int:
    """`_inputs`, `skipped` and `_outcomes` in `con` from these relations (None: empty)."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE _inputs AS {tables['inputs']}")
    if tables["skipped"] is None:
        con.execute("CREATE OR REPLACE TEMP TABLE skipped (path VARCHAR, reason VARCHAR)")
    else:
        con.execute(f"CREATE OR REPLACE TEMP TABLE skipped AS {tables['skipped']}")
    if tables["outcomes"] is None:
        con.execute(f"CREATE OR REPLACE TEMP TABLE _outcomes ({OUTCOME_COLUMNS})")
        return 0
    # a response read twice (a run killed after it recorded them) says the same: one row each
    con.execute("CREATE OR REPLACE TEMP TABLE _outcomes AS SELECT event_id, any_value(ok) AS ok, "
                "any_value(error) AS error, any_value(latency_ms) AS latency_ms "
                f"FROM ({tables['outcomes']}) GROUP BY event_id")
    return con.execute("SELECT count(*) FROM _outcomes").fetchall()[0][0]


def define_message_copies(con: duckdb.DuckDBPyConnection) -> int:
    """`_copies(event_id, canon)`: every stored copy of a message after the first (sven keeps
    one per node, with the same message id), and the event it copies; a copy is of its own
    format (two formats' messages that happen to share an id are two messages, and a
    format's events alone say which of its messages are copies). Rates, units and costs
    count a message once; findings still claim both copies, whose lines are the loop's.
    Returns how many copies there are. Built once per connection (rate_spike, unusual_actor
    and the cost view all need it)."""
    return _once(con, "copies", lambda: _build_copies(con))


def _build_copies(con: duckdb.DuckDBPyConnection) -> int:
    if not event_kinds(con) & {"message", "room_post"}:  # no messages: no window over them
        con.execute("CREATE OR REPLACE TEMP TABLE _copies (event_id BIGINT, canon BIGINT)")
        return 0
    con.execute("""CREATE OR REPLACE TEMP TABLE _copies AS
        SELECT event_id, canon FROM (
          SELECT event_id, min(event_id) OVER (PARTITION BY format, kind, corr_id) AS canon
          FROM messages WHERE corr_id IS NOT NULL)
        WHERE event_id <> canon""")
    return con.execute("SELECT count(*) FROM _copies").fetchall()[0][0]


def event_kinds(con: duckdb.DuckDBPyConnection) -> set[str]:
    """The kinds of event in `events`, read once per connection (which detectors have
    anything to read, whether there are messages to count once)."""
    return set(kind_counts(con))


def kind_counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """How many events of each kind `events` holds, read once per connection (one pass over
    `kind`, as the kinds alone take)."""
    return _once(con, "kinds", lambda: dict(con.execute(
        "SELECT kind, count(*) FROM events GROUP BY kind").fetchall()))


def shared_once(con: duckdb.DuckDBPyConnection, name: str, compute):
    """What `compute` says of `con`'s events as a plain value (a table is one connection's
    own), worked out once for `con` and its siblings (`sibling`): the detectors' lanes ask
    for some of the same things, and a lane that asks while another works it out waits for
    that answer. `define_views`, which redefines `events`, forgets it."""
    memo = _shared_memo(con)
    with memo.lock:
        lock = memo.locks.setdefault(name, threading.Lock())
    with lock:
        if name not in memo.values:
            memo.values[name] = compute()
        return memo.values[name]


@dataclass
class _SharedMemo:
    lock: threading.Lock = field(default_factory=threading.Lock)
    locks: dict[str, threading.Lock] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)


def _shared_memo(con: duckdb.DuckDBPyConnection) -> _SharedMemo:
    with _SHARED_LOCK:
        return _SHARED.setdefault(con, _SharedMemo())


def _once(con: duckdb.DuckDBPyConnection, name: str, compute):
    """What `compute` says of `con`'s events, worked out once per connection; `define_views`,
    which redefines `events`, forgets it."""
    memo = _DERIVED.setdefault(con, {})
    if name not in memo:
        memo[name] = compute()
    return memo[name]


# per connection: what was derived from its `events` (see `_once`)
_DERIVED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# per connection, one for it and its siblings: the plain values of `shared_once`
_SHARED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


def sibling(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """Another connection to `con`'s database with `con`'s views, copies of its temporary
    tables, and what was derived from its events (`_once`): for another thread (a DuckDB
    connection is one thread's, and temporary views and tables are a connection's own).
    The views are made from the SQL DuckDB keeps of them (what it stores a database's views
    as), so they read the very files `con` reads, whatever was committed since."""
    return sibling_to_make(con)()


def sibling_to_make(con: duckdb.DuckDBPyConnection) -> Callable[[], duckdb.DuckDBPyConnection]:
    """`sibling(con)` in two steps: what it copies is read from `con` now, in `con`'s thread
    (8 ms), and the function returned makes it, in any thread: a lane of detectors makes its
    own connection (15-25 ms of views bound and tables filled) while `con` is at work."""
    other = db.session(con.cursor())
    tables = [(sql, name, con.sql(f'SELECT * FROM temp.main."{name}"').to_arrow_table())
              for name, sql in con.execute("SELECT table_name, sql FROM duckdb_tables() "
                                           "WHERE temporary ORDER BY table_oid").fetchall()]
    views = [sql for (sql,) in con.execute(
        "SELECT sql FROM duckdb_views() WHERE temporary AND NOT internal ORDER BY view_oid"
    ).fetchall()]
    derived = dict(_DERIVED[con]) if con in _DERIVED else None
    memo = _shared_memo(con)

    def make() -> duckdb.DuckDBPyConnection:
        try:
            _copy_into(other, tables, views)
        except BaseException:
            other.close()  # half made: nobody else holds it to close it
            raise
        if derived is not None:
            _DERIVED[other] = derived
        with _SHARED_LOCK:
            _SHARED[other] = memo  # the same values, whichever computes them
        return other

    return make


def _copy_into(other: duckdb.DuckDBPyConnection, tables: list[tuple[str, str, Any]],
               views: list[str]) -> None:
    """`tables` ((its SQL, name, rows)) and `views` (their SQL, in the order they were made)
    made on `other`: `sibling_to_make`'s second step."""
    for sql, name, rows in tables:
        other.execute(sql)  # its exact column types, which Arrow need not keep
        with db.registered(other, "_sibling_rows", rows):
            other.execute(f'INSERT INTO temp.main."{name}" SELECT * FROM _sibling_rows')
    pending = views
    while pending:  # in the order they were made; one redefined since waits for what it reads
        left = []
        for sql in pending:
            try:
                other.execute(sql)
            except duckdb.CatalogException:
                left.append(sql)
        if len(left) == len(pending):
            other.execute(left[0])  # raises what keeps it from being made
        pending = left


def create_batch_table(con: duckdb.DuckDBPyConnection, name: str = "batch") -> None:
    con.execute(create_table_sql(name).replace("CREATE TABLE", "CREATE OR REPLACE TEMP TABLE"))

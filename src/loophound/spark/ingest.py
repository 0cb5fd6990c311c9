"""`ingest --engine spark`: the files new to a store read on the executors, in parallel.

The driver finds the files (`discover`) and looks at each one's head once: a file the store
knows (appended lines, a rotated copy, a rewritten document), or one that continues another
file of this run, is read afterwards on the driver by the ordinary ingest, which reads only
its new bytes. The others are cut into contiguous slices, balanced by size, and each slice
is one Spark task: loophound's own `ingest_files` into a staging store of its own (under the
store's `spark-staging/`, so the store's folder must be one the executors share), numbering
its inputs from the number the whole run would give its first file. Every event therefore
has the event id (input << 32 + line), the columns and the values the default engine gives
it; only how events are grouped into Parquet files differs (a slice's small files share
files, as a run's do).

The driver then moves the slices' Parquet files into `events/` and `quarantine/` (named with
batch ids taken from the store, recorded in the write journal first) and commits every
slice's inputs, batches, readings, outcomes and skipped files in one catalog transaction: a
run killed before it leaves the store as it was (the journaled files are deleted by the
next writer), never half of it.
"""

from __future__ import annotations

import dataclasses
import pickle
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import db, formats
from ..formats.base import Format
from ..ingest import (
    SNIFF_BYTES,
    FileReport,
    Headed,
    IngestOptions,
    IngestReport,
    _cache,
    _HeadIndex,
    _match,
    discover,
    forced_format,
    ingest_files,
)
from ..lines import read_head
from ..store import CATALOG, STAGING, Store
from . import parallelism

# under the store: the tasks' staging stores, removed after the run (the store knows the name)


@dataclass(frozen=True)
class Unit:
    """A file new to the store, read by a task, and how many input ids it takes there (its
    own and its companions': none when no format recognises it)."""

    path: str
    shown: str
    size: int
    ids: int


@dataclass(frozen=True)
class Slice:
    """Files read by one task, in the run's order; its first new input is numbered `first_id`."""

    index: int
    first_id: int
    units: tuple[Unit, ...]


@dataclass
class _Head(Headed):
    """The head of a file of this run."""

    head: bytes


def plan(files: list[tuple[Path, str]], store: Store, forced: Format | None
         ) -> tuple[list[Unit], list[tuple[Path, str]]]:
    """The files the executors read (in the run's order) and those the driver reads after
    them: known to the store, continuing another file of the run, or sharing a companion
    with one. Called under the store's write lock."""
    cache = _cache(store)
    known_paths = {k.path for k in cache.known}
    heads, companions_seen = _HeadIndex(), set()
    units, later = [], []
    for path, shown in files:
        try:
            head = read_head(path, SNIFF_BYTES)
        except (OSError, EOFError, ValueError):  # the task says it cannot be read
            units.append(Unit(str(path), shown, 0, 0))
            continue
        if str(path) in known_paths or _match(head, str(path), cache) or heads.find(head):
            later.append((path, shown))
            continue
        fmt = forced or formats.sniff(head, path)
        companions = {c.resolve() for c in (fmt.companions(path) if fmt and fmt.companions else [])}
        if companions & companions_seen or any(str(c) in known_paths for c in companions):
            later.append((path, shown))
            continue
        companions_seen |= companions
        heads.add(_Head(head))
        units.append(Unit(str(path), shown, path.stat().st_size,
                          1 + len(companions) if fmt else 0))
    return units, later


def slices(units: list[Unit], first_id: int, count: int) -> list[Slice]:
    """`units` cut into at most `count` contiguous slices of about equal bytes, each with the
    input id its first file takes in the whole run."""
    if not units:
        return []
    total = sum(max(u.size, 1) for u in units)
    count = max(1, min(count, len(units)))
    out: list[Slice] = []
    current: list[Unit] = []
    done, next_id, start_id = 0, first_id, first_id
    for u in units:
        current.append(u)
        done += max(u.size, 1)
        next_id += u.ids
        if done >= total * (len(out) + 1) / count and len(out) < count - 1:
            out.append(Slice(len(out), start_id, tuple(current)))
            current, start_id = [], next_id
    if current:
        out.append(Slice(len(out), start_id, tuple(current)))
    return out


def read_slice(piece: Slice, stage: str, options: IngestOptions) -> tuple[str, list[FileReport]]:
    """On an executor: the slice's files into a staging store of this attempt's own (a retried
    or speculative attempt never shares one), with the ordinary ingest. Returns the staging
    store's folder (relative to `stage`) and what was read of each file."""
    name = f"slice-{piece.index:05d}-{uuid.uuid4().hex[:12]}"
    staging = Store(Path(stage) / name)
    options = dataclasses.replace(options, wait=False)
    files = [(Path(u.path), u.shown) for u in piece.units]
    report = ingest_files(files, [], staging, options, forced_format(options),
                          first_input_id=piece.first_id)
    return name, report.files


def _task(pieces: list[Slice], stage: str, options: IngestOptions):
    """The function each task runs over its row of slice numbers (`mapInArrow`)."""
    def run(batches):
        import pyarrow as pa

        for batch in batches:
            for k in batch.column("id").to_pylist():
                name, reports = read_slice(pieces[k], stage, options)
                yield pa.RecordBatch.from_pydict(
                    {"slice": [k], "staging": [name], "reports": [pickle.dumps(reports)]})
    return run


def ingest_on_spark(spark: Any, paths: list[str], store: Store,
                    options: IngestOptions | None = None) -> IngestReport:
    """`loophound ingest PATHS --engine spark`: new files on the executors, then what the store
    knows on the driver (see the module's docstring)."""
    options = options or IngestOptions()
    forced = forced_format(options)
    files, passed_over = discover(paths)
    report = IngestReport()
    with store.writing(wait=options.wait):
        store._ingest_cache = None  # read afresh under the lock
        units, later = plan(files, store, forced)
        pieces = slices(units, _cache(store).next["inputs"], 2 * parallelism(spark))
        stage = store.root.resolve() / STAGING / uuid.uuid4().hex[:12]
        stage.mkdir(parents=True)
        try:
            if pieces:
                rows = (spark.range(0, len(pieces), 1, len(pieces))
                        .mapInArrow(_task(pieces, str(stage), options),
                                    "slice long, staging string, reports binary")
                        .collect())
                got = sorted((r["slice"], r["staging"], pickle.loads(r["reports"])) for r in rows)
                merge(store, stage, pieces, [(name, reps) for _, name, reps in got])
                for _, _, reps in got:
                    report.files.extend(reps)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
            _remove_if_empty(stage.parent)
        store._ingest_cache = None  # the catalog now holds the slices' inputs
        rest = ingest_files(later, passed_over, store, options, forced)
        report.files = rest.files[:len(passed_over)] + report.files + rest.files[len(passed_over):]
        store.record_skipped([], [f.path for f in report.files if f.status != "skipped"])
    return report


def _remove_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass


def merge(store: Store, stage: Path, pieces: list[Slice],
          staged: list[tuple[str, list[FileReport]]]) -> None:
    """Move the slices' Parquet files into the store and commit their catalog rows, all in
    one transaction. Each slice's inputs must lie within the ids planned for it: another
    numbering would give events ids that are not the default engine's (a bug: raised)."""
    aliases = [f"s{k}" for k in range(len(staged))]
    with store.catalog_connection() as cat:
        for alias, (name, _) in zip(aliases, staged, strict=True):
            cat.execute(f"ATTACH {db.sql_literal(str(stage / name / CATALOG))} AS {alias} "
                        "(READ_ONLY)")
        try:
            moves, batch_rows = _plan_moves(cat, store, stage, pieces, aliases, staged)
            store.intend(*(new for _, new in moves))
            for old, new in moves:
                (old).replace(store.root / new)
            cat.execute("BEGIN")
            try:
                for alias in aliases:
                    cat.execute(f"INSERT INTO inputs BY NAME SELECT * FROM {alias}.inputs")
                    cat.execute(f"INSERT OR REPLACE INTO readings BY NAME "
                                f"SELECT * FROM {alias}.readings")
                    cat.execute(f"INSERT INTO outcomes BY NAME SELECT * FROM {alias}.outcomes")
                    cat.execute(f"INSERT OR REPLACE INTO skipped BY NAME "
                                f"SELECT * FROM {alias}.skipped")
                if batch_rows:
                    names = list(batch_rows[0])
                    cat.executemany(f"INSERT INTO batches ({', '.join(names)}) VALUES "
                                    f"({', '.join('?' * len(names))})",
                                    [list(r.values()) for r in batch_rows])
            except BaseException:
                cat.execute("ROLLBACK")
                raise
            cat.execute("COMMIT")
        finally:
            for alias in aliases:
                cat.execute(f"DETACH {alias}")


def _plan_moves(cat, store: Store, stage: Path, pieces: list[Slice], aliases: list[str],
                staged: list[tuple[str, list[FileReport]]]) -> tuple[list, list[dict]]:
    """Where each staged Parquet file goes (its batch renumbered after the store's last),
    and the batch rows that name them; checks each slice's input ids."""
    next_batch = cat.execute("SELECT coalesce(max(batch_id), 0) + 1 FROM batches").fetchall()[0][0]
    taken = {r[0] for r in cat.execute("SELECT input_id FROM inputs").fetchall()}
    moves, rows = [], []
    for piece, alias, (name, _) in zip(pieces, aliases, staged, strict=True):
        ids = [r[0] for r in cat.execute(f"SELECT input_id FROM {alias}.inputs").fetchall()]
        limit = piece.first_id + sum(u.ids for u in piece.units)
        if any(i < piece.first_id or i >= limit or i in taken for i in ids):
            raise RuntimeError(f"slice {piece.index} numbered its inputs {sorted(ids)}, not within "
                               f"[{piece.first_id}, {limit}): a bug in loophound's Spark ingest")
        cur = cat.execute(f"SELECT * FROM {alias}.batches ORDER BY batch_id")
        names = [d[0] for d in cur.description]
        staged_rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
        renumber = {r["batch_id"]: next_batch + i for i, r in enumerate(staged_rows)}
        next_batch += len(staged_rows)
        renamed: dict[str, str] = {}
        for r in staged_rows:
            r["batch_id"] = renumber[r["batch_id"]]
            for col in ("events_file", "quarantine_file"):
                old = r[col]
                if old is None:
                    continue
                if old not in renamed:
                    folder, stem = old.split("/", 1)
                    input_part, batch_part = stem.removesuffix(".parquet").split("-")
                    renamed[old] = f"{folder}/{input_part}-{renumber[int(batch_part)]:07d}.parquet"
                    moves.append((stage / name / old, renamed[old]))
                r[col] = renamed[old]
            rows.append(r)
    return moves, rows

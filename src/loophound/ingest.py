"""Files → canonical events in the store.

Each file is read once, front to back: bytes already in the store are only hashed (to prove
the file is the one read before), new bytes are split into lines, mapped in SQL by the file's
format, and committed as one Parquet batch. Every line ends up as an event or a quarantine
row; every file gets a SHA-256, a size and a line count.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import errno
import glob
import hashlib
import io
import json
import os
import queue
import stat
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from . import db, digest, formats
from .digest import Sha256
from .errors import InputError
from .formats.base import Format, FormatContext
from .formats.generic import document_format, validate_mapping
from .lines import (
    BOM,
    CHUNK_BYTES,
    MAX_LINE_BYTES,
    LineBatch,
    ReadState,
    Rejected,
    StopAtDamage,
    complete_partial,
    compression_of,
    open_binary,
    read_head,
    read_lines,
    records_batch,
)
from .normalise import key_sql
from .process import WhileInUse
from .schema import COLUMNS, COSTLY_TO_READ, QUARANTINE_COLUMNS, Column
from .store import OUTCOME_COLUMNS, Store, create_batch_table

HEAD_LEN = 4096
TAIL_LEN = 4096
# how `_find_unknown_keys` counts a line of a record type its format does not know (a name
# no JSON key of a real log holds: it begins with the unit separator)
UNKNOWN_TYPE = "\x1ftype:"
SNIFF_BYTES = 65536  # the head of a file that formats are recognised by
LOG_SUFFIXES = {".jsonl", ".ndjson", ".log", ".json", ".traj"}  # .traj: SWE-agent


class IngestError(InputError):
    """A path the user named that does not exist, or a glob that matches nothing."""


@dataclass
class FileReport:
    path: str
    format: str | None = None
    status: str = "new"  # new, appended, unchanged, renamed, replaced, skipped
    events: int = 0
    quarantined: Counter = field(default_factory=Counter)
    new_bytes: int = 0
    lines: int = 0
    sha256: str | None = None
    pending: Rejected | None = None
    warnings: list[str] = field(default_factory=list)
    skipped_reason: str | None = None


@dataclass
class IngestReport:
    files: list[FileReport] = field(default_factory=list)

    @property
    def events(self) -> int:
        return sum(f.events for f in self.files)

    @property
    def quarantined(self) -> int:
        return sum(sum(f.quarantined.values()) for f in self.files)


@dataclass
class IngestOptions:
    format: str | None = None
    mapping: dict | None = None  # contents of a --mapping TOML file
    max_line_bytes: int = MAX_LINE_BYTES
    wait: bool = True


# -- finding the files ----------------------------------------------------------------------


def _is_log_name(p: Path) -> bool:
    name = p.name.lower()
    for suffix in (".gz", ".zst", ".bz2"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    stem_suffixes = Path(name).suffixes
    # rotated copies keep their base suffix before a number: app.log.1, app.log.2.gz
    return any(s in LOG_SUFFIXES for s in stem_suffixes) and not name.endswith("results.json")


def discover(paths: Iterable[str]) -> tuple[list[tuple[Path, str]], list[tuple[str, str]]]:
    """Expand files, directories (recursively) and globs into (path, display name) pairs.

    Returns the files and the (name, reason) of what was passed over, so nothing is silent.
    """
    found: list[tuple[Path, str]] = []
    passed_over: list[tuple[str, str]] = []
    for raw in paths:
        matches = sorted(glob.glob(raw, recursive=True)) if glob.has_magic(raw) else [raw]
        if not matches:
            raise IngestError(f"{raw}: no such file or directory (and no file matches it)")
        for m in matches:
            p = Path(m)
            if p.is_dir():
                for f in _files_below(p, passed_over):
                    if _is_log_name(f):
                        found.append((f, os.path.normpath(str(f))))
                    elif not f.name.lower().endswith("results.json"):
                        passed_over.append((os.path.normpath(str(f)), NOT_A_LOG
                                            + " (.jsonl, .ndjson, .log, .json, .traj, maybe compressed)"))
            elif p.is_file():
                found.append((p, os.path.normpath(m)))
            elif (why := not_a_regular_file(p)) is not None:
                raise IngestError(f"{m} is {why}")
            elif not p.exists():
                raise IngestError(f"{m}: no such file or directory")
    seen: set[Path] = set()
    unique = []
    for p, shown in found:
        key = p.resolve()  # resolved once here: the catalog knows files by their real path
        if key not in seen:
            seen.add(key)
            unique.append((key, shown))
    return unique, passed_over


NOT_A_LOG = "not a log file name"  # passed over by name: never read, not a log that was missed


def _files_below(folder: Path, passed_over: list[tuple[str, str]]) -> list[Path]:
    """Every file below `folder` (hidden ones left out), sorted; a folder that cannot be
    listed is named in `passed_over` with the reason, never skipped without a word."""
    def unreadable(exc: OSError) -> None:
        passed_over.append((os.path.normpath(exc.filename or str(folder)),
                            f"cannot read this folder: {exc.strerror or exc}"))

    found = []
    for top, dirs, files in os.walk(folder, onerror=unreadable):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found += [Path(top) / f for f in files if not f.startswith(".")]
    regular = []
    for f in sorted(found):
        if f.is_file():
            regular.append(f)
        elif (why := not_a_regular_file(f)) is not None:  # never opened: named, not silent
            passed_over.append((os.path.normpath(str(f)), f"not read: {why}"))
    return regular


def not_a_regular_file(path: Path) -> str | None:
    """Why `path` is nothing to read as a log (None: a file, a folder, or nothing there). A
    named pipe waits for a writer forever, /dev/zero and /dev/urandom never end and hold no
    lines, a symbolic link that loops leads nowhere: each was read as nothing, silently."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        return "a symbolic link that loops (it leads back to itself)" \
            if exc.errno == errno.ELOOP else None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    if stat.S_ISFIFO(mode):
        return ("a named pipe (FIFO), not a file: reading it waits for whatever writes to it; "
                "save what it carries to a file and read that")
    if stat.S_ISCHR(mode):
        return "a character device (such as /dev/zero or /dev/urandom), not a log file"
    if stat.S_ISBLK(mode):
        return "a block device, not a log file"
    if stat.S_ISSOCK(mode):
        return "a socket, not a log file"
    return "not a regular file"


# -- the catalog's memory of a file ---------------------------------------------------------


@dataclass
class Known:
    input_id: int
    path: str
    sha256: str
    bytes: int
    lines: int
    head_sha256: str
    head_len: int
    ended_without_newline: bool
    format: str
    sha_state: bytes | None  # SHA-256 midstate at `bytes` (resumable), when libcrypto is there
    tail_sha256: str | None  # SHA-256 of the TAIL_LEN bytes before `bytes`
    lines_sha256: str | None = None  # SHA-256 of the head up to its last newline


def _lines_sha256(head: bytes) -> str | None:
    """SHA-256 of a head's complete lines (up to its last newline), None when it has none."""
    cut = head.rfind(b"\n") + 1
    return hashlib.sha256(head[:cut]).hexdigest() if cut else None


class _HeadIndex:
    """Heads (length, SHA-256) to be found from a file's first bytes without comparing them
    with every one: a head of HEAD_LEN bytes by its hash; a shorter one (all of a small file)
    by the hash of its complete lines, looked up once per line of the file. Only a short head
    without a newline, or one stored by a version that kept no such hash, is looked up by its
    length (a hash for each length). A folder of 10,000 small logs has about as many head
    lengths: looking each up cost 5 ms a file."""

    def __init__(self) -> None:
        self.by_head: dict[tuple[int, str], list] = {}
        self.by_lines: dict[str, list] = {}
        self.odd_lens: set[int] = set()

    def add(self, k) -> None:
        self.by_head.setdefault((k.head_len, k.head_sha256), []).append(k)
        if k.head_len >= HEAD_LEN:
            return
        if k.lines_sha256:
            self.by_lines.setdefault(k.lines_sha256, []).append(k)
        else:
            self.odd_lens.add(k.head_len)

    def remove(self, k) -> None:
        self.by_head[(k.head_len, k.head_sha256)].remove(k)
        if k.head_len < HEAD_LEN and k.lines_sha256:
            self.by_lines[k.lines_sha256].remove(k)

    def find(self, head: bytes) -> list:
        """Every head `head` starts with."""
        def sha(n: int) -> str:
            return hashlib.sha256(head[:n]).hexdigest()

        found = list(self.by_head.get((HEAD_LEN, sha(HEAD_LEN)), ())) if len(head) >= HEAD_LEN else []
        if self.by_lines:
            running, start, end = hashlib.sha256(), 0, min(len(head), HEAD_LEN - 1)
            while (nl := head.find(b"\n", start, end)) >= 0:
                running.update(head[start:nl + 1])
                start = nl + 1
                found += [k for k in self.by_lines.get(running.hexdigest(), ())
                          if k.head_len == start or (len(head) >= k.head_len
                                                     and sha(k.head_len) == k.head_sha256)]
        for n in self.odd_lens:
            if len(head) >= n:
                found += self.by_head.get((n, sha(n)), ())
        return found


class _CatalogCache:
    """What ingest needs from the catalog, read once per run: while ingest holds the write
    lock nobody else changes it, and each open of the catalog costs tens of milliseconds."""

    def __init__(self, store: Store):
        self.heads = _HeadIndex()
        with store.catalog_connection(read_only=True) as con:
            self.known = _read_known(con)
            self.next = {t: con.execute(f"SELECT coalesce(max({c}), 0) + 1 FROM {t}").fetchall()[0][0]
                         for t, c in (("inputs", "input_id"), ("batches", "batch_id"))}
            self.files_of = _events_files_by_input(con, store)
            # the mapping each input was read with (none: the format's own, or guessed)
            has = con.execute("SELECT count(*) FROM duckdb_tables() WHERE database_name = "
                              "current_database() AND table_name = 'readings'").fetchall()[0][0]
            self.readings: dict[int, str] = dict(con.execute(
                "SELECT input_id, mapping FROM readings").fetchall()) if has else {}

    @property
    def known(self) -> list[Known]:
        return list(self._known.values())

    @known.setter
    def known(self, inputs: list[Known]) -> None:
        self._known: dict[int, Known] = {}
        for k in inputs:
            self.remember(k)

    def remember(self, k: Known) -> None:
        """What the catalog now says of input `k.input_id`, kept as a commit writes it (not read
        back: a first scan of 300 logs would read all inputs 300 times). Indexed by head
        (`_HeadIndex`), so a folder of 300 logs is matched with 300 lookups, not 300 × 300
        comparisons."""
        old = self._known.get(k.input_id)
        if old is not None:
            self.heads.remove(old)
        self._known[k.input_id] = k
        self.heads.add(k)

    def take_id(self, table: str) -> int:
        self.next[table] += 1
        return self.next[table] - 1


def _events_files_by_input(con: duckdb.DuckDBPyConnection, store: Store) -> dict[int, list[str]]:
    """Each input's committed events files, in commit order: a file's earlier events are
    looked up in its own files only, however many other logs the store holds."""
    root = store.root.resolve()
    out: dict[int, list[str]] = {}
    for input_id, rel in con.execute("SELECT input_id, events_file FROM batches WHERE "
                                     "events_file IS NOT NULL ORDER BY batch_id").fetchall():
        out.setdefault(input_id, []).append(str(root / rel))
    return out


def _cache(store: Store) -> _CatalogCache:
    cache = getattr(store, "_ingest_cache", None)
    if cache is None:
        cache = store._ingest_cache = _CatalogCache(store)
    return cache


def _known_inputs(store: Store) -> list[Known]:
    return _cache(store).known


def _read_known(con: duckdb.DuckDBPyConnection) -> list[Known]:
    rows = con.execute(
        "SELECT input_id, path, sha256, bytes, lines, head_sha256, head_len, "
        "coalesce(ended_without_newline, false), format, sha_state, tail_sha256, "
        "head_lines_sha256 FROM inputs ORDER BY input_id"
    ).fetchall()
    return [Known(*r) for r in rows]



def _match(head: bytes, resolved: str, cache: _CatalogCache) -> Known | None:
    """The stored input this file continues: same first bytes, same path preferred."""
    candidates = cache.heads.find(head)
    # the same path first; of its inputs the newest (a generation started when the file was
    # cut back); else the largest (of a rotated log's copies, the one read furthest)
    candidates.sort(key=lambda k: (k.path != resolved, -k.input_id if k.path == resolved
                                   else -k.bytes))
    return candidates[0] if candidates else None


# -- ingest -----------------------------------------------------------------------------------


def ingest(
    paths: Iterable[str],
    store: Store,
    options: IngestOptions | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    on_wait: Callable[[], None] | None = None,
) -> IngestReport:
    """Read `paths` into `store`: new files whole, known files from where they stopped."""
    options = options or IngestOptions()
    forced = forced_format(options)  # a bad format or mapping is said before any file is read
    files, passed_over = discover(paths)
    return ingest_files(files, passed_over, store, options, forced, on_progress, on_wait)


def forced_format(options: IngestOptions) -> Format | None:
    """The format every file is read as (`--format`, or a mapping naming a document's list of
    records), None to recognise each file; raises on a bad format name or mapping."""
    forced = formats.get(options.format) if options.format else None
    if options.mapping is not None:
        validate_mapping(options.mapping)
        # a mapping naming the list of records of whole-file JSON documents reads them so
        forced = document_format(validate_mapping(options.mapping)) or forced
    return forced


def ingest_files(files: list[tuple[Path, str]], passed_over: list[tuple[str, str]],
                 store: Store, options: IngestOptions, forced: Format | None,
                 on_progress: Callable[[int, int], None] | None = None,
                 on_wait: Callable[[], None] | None = None,
                 first_input_id: int | None = None) -> IngestReport:
    """`ingest` of files already found (`discover`: resolved paths and the names shown).
    `first_input_id`: new inputs are numbered from it (at least), so that a part of a run
    read elsewhere (a Spark task's staging store) gives each file the input id, and so the
    event ids, the whole run gives it."""
    report = IngestReport()
    db.use_whole_budget(db.scratch())  # after a scan in this process (watch), not its share
    for name, reason in passed_over:
        report.files.append(FileReport(name, status="skipped", skipped_reason=reason))
    total = sum(p.stat().st_size for p, _ in files)
    done = 0
    companions_seen: set[Path] = set()
    with store.writing(wait=options.wait, on_wait=on_wait), _CatalogHold(store) as hold, \
            _ARROW_ON_JEMALLOC.using():
        store._ingest_cache = None  # read afresh under the lock
        if first_input_id is not None:
            ids = _cache(store).next
            ids["inputs"] = max(ids["inputs"], first_input_id)
        group = _Group(store, options)
        for path, shown in files:
            size = path.stat().st_size
            hold.tick()

            def progress(n: int, base=done) -> None:
                if on_progress:
                    on_progress(base + n, total)

            rep = _ingest_file(path, shown, store, forced, options, progress, group)
            report.files.append(rep)
            if group.full():
                group.flush()
            fmt = formats.get(rep.format) if rep.format else None
            for companion in fmt.companions(path) if fmt and fmt.companions else []:
                if companion.resolve() not in companions_seen:
                    companions_seen.add(companion.resolve())
                    shown_c = os.path.normpath(os.path.join(os.path.dirname(shown), companion.name))
                    report.files.append(_ingest_companion(companion, shown_c, store, fmt))
            done += size
            if on_progress:
                on_progress(done, total)
        group.flush()
        if options.mapping is not None:  # a later plain ingest reads their new lines alike
            store.record_readings([f.path for f in report.files
                                   if f.status in ("new", "appended", "renamed")],
                                  mapping_text(options.mapping))
        store.record_skipped(
            [(f.path, f.skipped_reason or "") for f in report.files
             if f.status == "skipped" and not (f.skipped_reason or "").startswith(NOT_A_LOG)],
            [f.path for f in report.files if f.status != "skipped"])
    return report


def _ingest_file(path: Path, shown: str, store: Store, forced: Format | None,
                 options: IngestOptions, progress, group: _Group | None = None) -> FileReport:
    rep = FileReport(shown)
    try:
        head = read_head(path, SNIFF_BYTES)
    except (OSError, EOFError, ValueError) as exc:
        rep.status, rep.skipped_reason = "skipped", f"cannot read: {exc}"
        return rep
    known = _match(head, str(path), _cache(store))  # `path` is resolved (discover)
    if known is None and group is not None and group.heads.find(head):
        group.flush()  # it starts like a file of the group: that one is committed first
        known = _match(head, str(path), _cache(store))
    # a file read before keeps the format it was read with
    fmt = forced or (formats.FORMATS.get(known.format) if known else None) or formats.sniff(head, path)
    if fmt is None:
        rep.status = "skipped"
        rep.skipped_reason = ("not recognised: its first lines are not JSON objects of any known "
                              "format; name one with --format, or describe it with --mapping")
        return rep
    rep.format = fmt.name
    if fmt.records is not None:  # one JSON document, not lines: known by its path alone
        _ingest_document(path, shown, store, fmt, options, rep, progress)
        return rep
    if known is not None:
        stored = _cache(store).readings.get(known.input_id)
        if (forced is not None and forced.name != known.format) or (
                options.mapping is not None and mapping_text(options.mapping) != stored):
            # read before another way: its events are those of the new reading, never both
            _read_again(path, shown, store, fmt, known, options, rep, progress, head)
            return rep
        if options.mapping is None and stored is not None:  # new lines as the old ones
            options = dataclasses.replace(options, mapping=json.loads(stored))
    if known is not None and _unchanged(path, known):
        rep.status, rep.sha256, rep.lines = "unchanged", known.sha256, known.lines
        return rep
    if known is not None and _start_generation(path, shown, store, fmt, known, head, rep):
        return rep
    _read_file(path, shown, store, fmt, known, options, rep, progress, head, group)
    return rep


def mapping_text(mapping: dict | None) -> str | None:
    """A mapping as the catalog keeps it: canonical JSON (so the same mapping compares equal)."""
    return None if mapping is None else json.dumps(mapping, sort_keys=True, default=str)


def _read_again(path: Path, shown: str, store: Store, fmt: Format, known: Known,
                options: IngestOptions, rep: FileReport, progress, head: bytes) -> None:
    """Read a known input whole again with another format or mapping, replacing it: the
    catalog keeps what it was read with, so the next plain ingest continues the same way."""
    try:
        _read_into_store(path, shown, store, fmt, None, options, rep, progress, head,
                         replacing=known)
    except (OSError, EOFError) as exc:
        rep.warnings.append(f"stopped reading: {exc}; what was read before is kept")
        return
    rep.status = "replaced"
    rep.warnings.append(f"read again with {'the mapping given' if options.mapping else ''}"
                        f"{' and ' if options.mapping and fmt.name != known.format else ''}"
                        f"{'format ' + fmt.name if fmt.name != known.format else ''}: its "
                        f"earlier {known.lines:,} lines' events were replaced")
    store.record_reading(known.input_id, fmt.name, mapping_text(options.mapping))


def _read_file(path: Path, shown: str, store: Store, fmt: Format, known: Known | None,
               options: IngestOptions, rep: FileReport, progress, head: bytes,
               group: _Group | None = None) -> None:
    """Read the file's new bytes into the store: now, or (a small new file) with a group."""
    try:
        if known is None and group is not None and group.add(path, shown, fmt, head, rep):
            return
        _read_into_store(path, shown, store, fmt, known, options, rep, progress, head)
    except (OSError, EOFError) as exc:
        rep.warnings.append(f"stopped reading: {exc} (a damaged or truncated compressed file?); "
                            "what was read before is kept")
    except duckdb.Error as exc:
        rep.status = "skipped"
        rep.skipped_reason = (f"the {fmt.name} format could not map this file ({exc}); nothing "
                              "of it was stored. This is a loophound bug: please report it with "
                              "the file's first lines")


def _ingest_document(path: Path, shown: str, store: Store, fmt: Format, options: IngestOptions,
                     rep: FileReport, progress) -> None:
    """A file that is one JSON document (a trajectory), read whole; nothing of it is stored
    unless all of it is (an earlier read's events stand until then)."""
    try:
        _read_document(path, shown, store, fmt, options, rep, progress)
    except (OSError, EOFError) as exc:
        rep.status, rep.skipped_reason = "skipped", f"cannot read: {exc}"
    except duckdb.Error as exc:
        rep.status = "skipped"
        rep.skipped_reason = (f"the {fmt.name} format could not map this document ({exc}); "
                              "nothing of it was stored. This is a loophound bug: please "
                              "report it with the document's first steps")


def _read_document(path: Path, shown: str, store: Store, fmt: Format, options: IngestOptions,
                   rep: FileReport, progress) -> None:
    """Its records (`fmt.records`: the steps) are mapped as lines are, record n as line n at
    its own bytes. A document is rewritten, not appended to: when it changes it is read again
    whole and its earlier events are replaced in one commit (as a companion's are); unchanged,
    it costs a stat and its last 4 KiB. It is known by its path, never by its first bytes
    (trajectories of one agent start alike); the same bytes already read at another path (a
    copy) are not read again."""
    known = next((k for k in _known_inputs(store) if k.path == str(path)), None)
    if known is not None and _unchanged(path, known):
        rep.status, rep.sha256, rep.lines = "unchanged", known.sha256, known.lines
        return
    with open_binary(path) as stream:
        data = stream.read()
    progress(len(data))
    digest = hashlib.sha256(data).hexdigest()
    same = known if known is not None and known.sha256 == digest else next(
        (k for k in _known_inputs(store) if k.sha256 == digest and k.format == fmt.name
         and known is None), None)
    if same is not None:
        rep.status, rep.sha256, rep.lines = "unchanged", same.sha256, same.lines
        if same is not known:
            rep.warnings.append(f"the same bytes as {same.path}, already read: not read again")
        return
    _map_document(path, shown, store, fmt, options, rep, data, digest, known)


def _map_document(path: Path, shown: str, store: Store, fmt: Format, options: IngestOptions,
                  rep: FileReport, data: bytes, digest: str, known: Known | None) -> None:
    """Map the records of a whole document into one batch and commit it, replacing what an
    earlier read of it committed."""
    ranges = fmt.records(data)
    input_id = known.input_id if known else _next_id(store, "inputs", "input_id")
    ctx = FormatContext(path=path, display_path=shown, input_id=input_id,
                        options={"mapping": options.mapping} if options.mapping else {})
    con = db.scratch()
    create_batch_table(con)
    batch_id = _next_id(store, "batches", "batch_id")
    # its earlier events no longer stand: the formats see only what this read finished
    sink = _ChunkSink(con, fmt, ctx, store, batch_id, earlier=[])
    mapper = _Mapper(con, fmt, ctx, into="fresh")
    if ranges is None:  # nothing the format knows: the document is one quarantined record
        ranges = []
        rejected = [Rejected(1, 0, len(data), "unmappable",
                             f"the {fmt.name} format finds no list of steps in this document",
                             data[:200].decode("utf-8", errors="backslashreplace"))]
    else:
        records = records_batch(data, ranges, options.max_line_bytes)
        sink.add(mapper.rows(records))
        rejected = records.rejected
    try:
        sink.flush(final=True)
    finally:
        events = sink.close()
    _record_late_outcomes(store, con)
    rows = sink.rows
    state = ReadState(next_line=max(len(ranges), len(rejected)) + 1, next_offset=len(data))
    rep.events, rep.new_bytes, rep.sha256 = events, len(data), digest
    rep.quarantined = Counter(r.reason for r in rejected)
    rep.lines = state.next_line - 1
    rep.warnings += rows.warnings()
    if mapper.unknown:
        rep.warnings.append(f"keys of its steps the {fmt.name} format does not know: "
                            f"{_counted(mapper.unknown)}; kept in the `extra` column")
    rep.status = "new" if known is None else "replaced"
    _commit(store, con, path, shown, fmt, known, input_id, state, rejected, digest,
            head_bytes=data[:HEAD_LEN], ended_without_newline=False, first_offset=0,
            range_sha=digest, compressed=compression_of(path) is not None, batch_id=batch_id,
            events_file=sink.relative if events else None, events=events,
            replace=known is not None, tail=data[-TAIL_LEN:],
            ts_range=rows.ts_range)
    con.close()


def _start_generation(path: Path, shown: str, store: Store, fmt: Format, known: Known,
                      head: bytes, rep: FileReport) -> bool:
    """A file shorter than a stored input it starts like, whose every complete line is one
    that input already holds (a log cut back to its own first lines, or an older copy of a
    log that grew): nothing in it is new. It becomes a new generation, an input of its own
    whose watermark is its end, so what is appended to it later is read, and nothing is read
    twice. False when it is not such a prefix (then it is read as a file of its own)."""
    if compression_of(path) is not None:
        return False
    try:
        if path.stat().st_size >= known.bytes:
            return False
        data = path.read_bytes()
    except OSError:
        return False
    complete = data[: data.rfind(b"\n") + 1]
    if not complete or not _holds_prefix(store, known, complete):
        return False
    hasher = Sha256()
    hasher.update(complete)
    state = ReadState(next_line=complete.count(b"\n") + 1, next_offset=len(complete))
    con = db.scratch()
    input_id = _next_id(store, "inputs", "input_id")
    _commit(store, con, path, shown, fmt, None, input_id, state, [], hasher.hexdigest(),
            head_bytes=head[:HEAD_LEN], ended_without_newline=False, first_offset=0,
            range_sha=hasher.hexdigest(), compressed=False, batch_id=_next_id(store, "batches",
                                                                              "batch_id"),
            events_file=None, events=0, sha_state=hasher.state(), tail=complete[-TAIL_LEN:])
    con.close()
    rep.status, rep.sha256, rep.lines = "prefix", hasher.hexdigest(), state.next_line - 1
    rep.warnings.append(f"its {rep.lines:,} lines are the first lines of {known.path}, already "
                        "read: nothing new; lines appended to it later are read")
    return True


def _holds_prefix(store: Store, known: Known, data: bytes) -> bool:
    """Whether `data` (complete lines) is the start of what `known` was read from: the
    batches it covers whole by their SHA-256, the lines after the last of them by the offset
    and length of the events stored for them."""
    with store.catalog_connection(read_only=True) as cat:
        batches = cat.execute(
            "SELECT first_offset, end_offset, sha256 FROM batches WHERE input_id = ? "
            "ORDER BY first_offset", [known.input_id]).fetchall()
    covered = 0
    for first, end, sha in batches:
        if end > len(data) or first != covered:
            break
        if hashlib.sha256(data[first:end]).hexdigest() != sha:
            return False
        covered = end
    rest = data[covered:]
    if not rest:
        return True
    bounds = [covered + i + 1 for i, b in enumerate(rest) if b == 0x0A]
    starts = [covered, *bounds[:-1]]
    if covered == 0 and data.startswith(BOM):
        starts[0] = len(BOM)
    lines = [(s, e - s) for s, e in zip(starts, bounds, strict=True)]
    files = _cache(store).files_of.get(known.input_id, [])
    if not files:
        return False
    lo = known.input_id << 32
    con = db.scratch()
    stored = con.execute(
        f"SELECT byte_offset, byte_length FROM read_parquet({db.sql_list(files)}) "
        f"WHERE event_id >= {lo} AND event_id < {lo + (1 << 32)} "
        f"AND byte_offset >= {covered} AND byte_offset < {len(data)} ORDER BY byte_offset"
    ).fetchall()
    con.close()
    return [tuple(r) for r in stored] == lines


def _unchanged(path: Path, known: Known) -> bool:
    """The file (at its resolved `path`) is, where it was, exactly as read last time: same
    size, same last bytes (by their SHA-256). Checked first, so a scheduled scan of a folder
    of settled logs costs a stat and a 4 KiB read per file, not a batch each. A small
    compressed file is decompressed whole (a fraction of a millisecond; read again, it cost a
    batch of statements and a commit: 15 ms); a large one is read from where it stopped."""
    if known.path != str(path) or not known.tail_sha256:
        return False
    try:
        if compression_of(path):
            return _unchanged_compressed(path, known)
        if path.stat().st_size != known.bytes:
            return False
        with path.open("rb") as fh:
            fh.seek(max(0, known.bytes - TAIL_LEN))
            return hashlib.sha256(fh.read(TAIL_LEN)).hexdigest() == known.tail_sha256
    except (OSError, EOFError):
        return False


def _unchanged_compressed(path: Path, known: Known) -> bool:
    if path.stat().st_size >= GROUP_FILE_BYTES:
        return False
    try:
        with open_binary(path) as stream:
            data = b""
            while len(data) <= known.bytes and (piece := stream.read(known.bytes + 1)):
                data += piece
    except Exception:  # damaged (zlib, zstd errors are not OSError): read as before, and said
        return False
    return (len(data) == known.bytes
            and hashlib.sha256(data[-TAIL_LEN:]).hexdigest() == known.tail_sha256)


def _ingest_companion(path: Path, shown: str, store: Store, fmt: Format) -> FileReport:
    """A whole-document file read with a log (LabTrust results.json): re-read whole when it
    changes, its earlier rows replaced, so no episode is counted twice."""
    rep = FileReport(shown, format=fmt.name)
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    known = next((k for k in _known_inputs(store) if k.path == str(path.resolve())), None)
    if known is not None and known.sha256 == digest:
        rep.status = "unchanged"
        return rep
    input_id = known.input_id if known else _next_id(store, "inputs", "input_id")
    ctx = FormatContext(path=path, display_path=shown, input_id=input_id)
    try:
        rows = fmt.read_companion(path, ctx) if fmt.read_companion else []
    except (OSError, ValueError) as exc:
        rep.status, rep.skipped_reason = "skipped", f"cannot read: {exc}"
        return rep
    con = db.scratch()
    create_batch_table(con)
    for row in rows:
        values = {c.name: row.get(c.name) for c in COLUMNS}
        values |= {"event_id": (input_id << 32) + int(row["line"]), "file": shown,
                   "format": fmt.name, "byte_offset": 0, "byte_length": 0}
        casts = ", ".join(f"?::{c.sql_type} AS {c.name}" for c in COLUMNS)
        con.execute(f"INSERT INTO batch BY NAME SELECT {casts}",
                    [values[c.name] for c in COLUMNS]).fetchall()
    state = ReadState(next_line=data.count(b"\n") + 1, next_offset=len(data))
    rep.events, rep.new_bytes, rep.sha256, rep.lines = len(rows), len(data), digest, state.next_line - 1
    rep.status = "new" if known is None else "replaced"
    batch_id = _next_id(store, "batches", "batch_id")
    relative = f"events/{input_id:05d}-{batch_id:07d}.parquet"
    if rows:
        store.intend(relative)
        con.execute(f"COPY batch TO {db.sql_literal(str(store.root / relative))} (FORMAT parquet)")
    _commit(store, con, path, shown, fmt, known, input_id, state, [], digest, head_bytes=data[:HEAD_LEN],
            ended_without_newline=False, first_offset=0, range_sha=digest, compressed=False,
            batch_id=batch_id, events_file=relative if rows else None, events=len(rows),
            replace=known is not None,
            ts_range=con.execute("SELECT min(ts), max(ts) FROM batch").fetchall()[0])
    con.close()
    return rep


def _read_into_store(path: Path, shown: str, store: Store, fmt: Format, known: Known | None,
                     options: IngestOptions, rep: FileReport, progress, head: bytes,
                     replacing: Known | None = None) -> None:
    """`head` is the file's first bytes, read once for sniffing: they identify it next time.
    `replacing`: an input read before with another format or mapping, read again whole in
    its place (its earlier events and quarantine go in the same commit)."""
    compressed = compression_of(path) is not None
    with open_binary(path) as stream:
        hasher, state, tail_before = Sha256(), ReadState(), b""
        if known is not None:
            resumed = _resume(stream, path, known, compressed)
            if resumed is None:
                known = None
                rep.warnings.append("the file starts like one read before but differs within "
                                    "the part already read: read as a new file")
                stream.close()
                stream = open_binary(path)
            else:
                hasher, tail_before = resumed
                state = ReadState(next_line=known.lines + 1, next_offset=known.bytes)
        input_id = (known.input_id if known else replacing.input_id if replacing
                    else _next_id(store, "inputs", "input_id"))
        ctx = FormatContext(path=path, display_path=shown, input_id=input_id,
                            options={"mapping": options.mapping} if options.mapping else {})
        con = db.scratch()
        create_batch_table(con)
        batch_id = _next_id(store, "batches", "batch_id")
        # threads pay off only when there are several chunks to overlap (each costs 1-2 ms)
        threaded = path.stat().st_size * (8 if compressed else 1) > CHUNK_BYTES
        sink = _ChunkSink(con, fmt, ctx, store, batch_id, threaded)
        rejected: list[Rejected] = []
        first_offset = state.next_offset
        range_hash = hashlib.sha256()
        recent = bytearray(tail_before)  # the last TAIL_LEN bytes read: the next run's check

        def on_consumed(data: bytes | bytearray | memoryview) -> None:
            hasher.update(data)
            if first_offset:
                range_hash.update(data)
            recent.extend(data[-TAIL_LEN:])
            del recent[:-TAIL_LEN]

        read = 0

        def on_read(n: int) -> None:
            nonlocal read
            read += n
            progress(first_offset + read)

        if known is not None and known.ended_without_newline:
            # the line read last had no newline then; if its newline came since, skip it
            # (`\r\n` in a CRLF log: both, or the next line would be a phantom blank one)
            first = stream.read(1)
            if first == b"\r":
                second = stream.read(1)
                if second == b"\n":
                    first += second
                elif second:
                    stream = _Prepend(second, stream)
            if first in (b"\n", b"\r\n"):
                on_consumed(first)
                state.next_offset += len(first)
            elif first:
                stream = _Prepend(first, stream)
        stream = StopAtDamage(stream, state.next_offset, compressed)
        mapper = _Mapper(con, fmt, ctx, into="fresh")
        ahead = _MapAhead(fmt, ctx) if threaded else None
        try:
            # threaded: the chunks feed the pipeline, sized for it (unless the format
            # resolves lines within a chunk), the file's size known unless it is compressed
            left = 0 if compressed else max(0, path.stat().st_size - state.next_offset)
            pipelined = left if threaded and not fmt.whole_chunks else None
            chunks = read_lines(stream, state, chunk_bytes=CHUNK_BYTES, on_consumed=on_consumed,
                                on_read=on_read, max_line_bytes=options.max_line_bytes,
                                pipelined=pipelined)
            chunks = _read_ahead(chunks) if threaded else chunks
            batch = next(chunks, None)
            mapping = ahead.submit(batch) if ahead and batch is not None else None
            while batch is not None:
                sink.add(mapper.rows(batch, mapping.result() if mapping is not None else None))
                rejected.extend(batch.rejected)
                batch = next(chunks, None)
                if batch is not None:  # the last chunk is written whole by the final flush
                    mapping = ahead.submit(batch) if ahead else None  # mapped while this flushes
                    sink.flush()
            ended_without_newline = False
            if state.partial is not None and state.tail and _is_json_object(state.tail):
                batch = complete_partial(state.tail, state)
                sink.add(mapper.rows(batch))
                rejected.extend(batch.rejected)
                on_consumed(state.tail)
                state.next_line += 1
                state.next_offset += len(state.tail)
                state.partial, state.tail = None, b""
                ended_without_newline = True
            sink.flush(final=True)
        finally:
            if ahead is not None:
                ahead.close()
            events = sink.close()
        if stream.damage:
            rep.warnings.append(_damage_warning(stream.damage, state.next_line - 1))
        _record_late_outcomes(store, con)
        ts_range = sink.rows.ts_range
        rep.events, rep.new_bytes = events, state.next_offset - first_offset
        rep.quarantined = Counter(r.reason for r in rejected)
        rep.lines = state.next_line - 1
        rep.pending = state.partial
        rep.warnings += sink.rows.warnings() + _unknown_warning(fmt.name, mapper.unknown)
        rep.warnings += fmt.notes(ctx) if fmt.notes else []
        digest = hasher.hexdigest()  # of exactly the bytes up to the watermark
        rep.sha256 = digest
        if known is None:
            rep.status = "new"
        elif events == 0 and not rejected:
            rep.status = "unchanged"
        else:
            rep.status = "appended"
        if known is not None and known.path != str(path.resolve()):
            rep.status = "renamed" if rep.status == "unchanged" else rep.status
        _commit(store, con, path, shown, fmt, known, input_id, state, rejected, digest,
                head_bytes=head[:HEAD_LEN], ended_without_newline=ended_without_newline,
                first_offset=first_offset, compressed=compressed, batch_id=batch_id,
                range_sha=range_hash.hexdigest() if first_offset else digest,
                events_file=sink.relative if events else None, events=events,
                sha_state=hasher.state(), tail=bytes(recent), ts_range=ts_range,
                replace=replacing is not None)
        con.close()


def _record_late_outcomes(store: Store, con: duckdb.DuckDBPyConnection) -> None:
    """The outcomes this read learnt of requests already written (their responses came in
    a later chunk or run), kept in the catalog before the batch commits: a kill between the
    two leaves rows the rerun writes again, which the views read once."""
    rows = con.execute("SELECT * FROM late_outcomes").fetchall()
    if not rows:
        return
    with store.catalog_connection() as cat:
        cat.executemany("INSERT INTO outcomes VALUES (?, ?, ?, ?)", rows)


# -- many small files, read together ----------------------------------------------------------

GROUP_FILE_BYTES = 1 << 20  # a new file smaller than this (on disk, and read) joins a group
GROUP_BYTES = 32 << 20  # a group is committed when it holds this many bytes ...
GROUP_FILES = 4000  # ... or this many files
LINE_BITS = 32  # while a group is mapped, its lines are numbered input × 2^32 + line
ROW_GROUP = 64 * 1024  # rows per Parquet row group of a group's events file


class Headed:
    """Something with a file's first bytes (`head`), looked up as `_HeadIndex` looks heads up."""

    head: bytes

    @property
    def head_len(self) -> int:
        return min(HEAD_LEN, len(self.head))

    @property
    def head_sha256(self) -> str:
        return hashlib.sha256(self.head[:HEAD_LEN]).hexdigest()

    @property
    def lines_sha256(self) -> str | None:
        return _lines_sha256(self.head[:HEAD_LEN])


@dataclass(eq=False)
class _Member(Headed):
    """A small new file of a group: read, hashed and split into lines, waiting to be mapped
    and committed with the others. Its head is kept by `_HeadIndex` (head_len, head_sha256,
    lines_sha256), so a later file that starts like it is not taken for a new one."""

    path: Path
    shown: str
    fmt: Format
    rep: FileReport
    input_id: int
    head: bytes
    state: ReadState
    hasher: Sha256
    tail: bytes  # the last TAIL_LEN bytes read
    ended_without_newline: bool
    damage: str | None
    lines: pa.Table | None  # line, byte_offset, byte_length, text: what is to be mapped
    rejected: list[Rejected]
    key: tuple | None  # the mapping: members of one key are mapped by one statement
    unknown: Counter = field(default_factory=Counter)
    events: int = 0
    ts_range: tuple = (None, None)


class _Group:
    """New small files read together: each is read, hashed and split into lines on its own
    (Python and numpy, a fraction of a millisecond), then the group is mapped by one SQL
    statement per format and mapping, written as one events file and one quarantine file,
    and committed in one catalog transaction. Read alone, a small file cost 50-75 ms of
    statements, a Parquet file, a thread and a catalog transaction (10,000 small logs: 12
    minutes), and left one Parquet file per log for every later scan to open.

    Each file is still an input of its own, with its own SHA-256, watermark and batch row
    (`batches` rows of a group name the same files), and event ids input × 2^32 + line: its
    appended lines are later read on their own, as any file's. Only formats whose SQL keeps
    the inputs of one batch apart (`Format.groupable`) are read so; a file whose mapping
    fails with the others' is read again on its own."""

    def __init__(self, store: Store, options: IngestOptions):
        self.store, self.options = store, options
        self.members: list[_Member] = []
        self.size = 0
        self.heads = _HeadIndex()  # the members' heads: a file that continues one is not new

    def full(self) -> bool:
        return self.size >= GROUP_BYTES or len(self.members) >= GROUP_FILES

    def _context(self, path: Path) -> FormatContext:
        """What a group's mapping may know of a file: its path (sven's node, the generic
        mapping's head), never its input id or name, which differ row by row."""
        return FormatContext(path=path, display_path="", input_id=0,
                             options={"mapping": self.options.mapping} if self.options.mapping else {})

    def add(self, path: Path, shown: str, fmt: Format, head: bytes, rep: FileReport) -> bool:
        """Read `path` (new to the store) into the group when it is small and its format
        maps several inputs at once; False when it is to be read on its own."""
        if not fmt.groupable or fmt.sub_bits or path.stat().st_size >= GROUP_FILE_BYTES:
            return False
        with open_binary(path) as raw:
            stream = StopAtDamage(raw, 0, compression_of(path) is not None)
            data = bytearray()
            while len(data) <= GROUP_FILE_BYTES and (piece := stream.read(GROUP_FILE_BYTES)):
                data += piece
        if len(data) > GROUP_FILE_BYTES:  # large once decompressed
            return False
        data = bytes(data)
        state = ReadState()
        batches = list(read_lines(io.BytesIO(data), state, chunk_bytes=max(1, len(data)),
                                  max_line_bytes=self.options.max_line_bytes))
        ended_without_newline = False
        if state.partial is not None and state.tail and _is_json_object(state.tail):
            batches.append(complete_partial(state.tail, state))
            state.next_line += 1
            state.next_offset += len(state.tail)
            state.partial, state.tail = None, b""
            ended_without_newline = True
        hasher = Sha256()
        hasher.update(data[:state.next_offset])  # exactly the bytes up to the watermark
        tables = [b.table for b in batches if b.table.num_rows]
        key = None
        if tables:
            ctx = self._context(path)
            mapped, known = fmt.file_keys(ctx) if fmt.file_keys else (fmt.mapped_keys,
                                                                      fmt.known_keys)
            key = (fmt.name, fmt.select_sql(ctx), mapped, mapped | known)
        member = _Member(
            path, shown, fmt, rep, _next_id(self.store, "inputs", "input_id"), head, state,
            hasher, data[max(0, state.next_offset - TAIL_LEN):state.next_offset],
            ended_without_newline, stream.damage,
            (pa.concat_tables(tables) if len(tables) > 1 else tables[0]) if tables else None,
            [r for b in batches for r in b.rejected], key)
        self.members.append(member)
        self.heads.add(member)
        self.size += len(data)
        return True

    def flush(self) -> None:
        """Map, write and commit the files read so far."""
        members, self.members, self.size, self.heads = self.members, [], 0, _HeadIndex()
        if not members:
            return
        con = db.scratch()
        try:
            failed = self._map(con, members)
            self._commit(con, [m for m in members if m not in failed])
        finally:
            con.close()
        for m in failed:  # mapped with the others it failed: alone, as any file is read
            m.rep.warnings.clear()
            _read_file(m.path, m.shown, self.store, m.fmt, None, self.options, m.rep,
                       lambda n: None, m.head)

    def _map(self, con: duckdb.DuckDBPyConnection, members: list[_Member]) -> list[_Member]:
        """Every member's events into the temp table `_rows`, one mapping at a time; returns
        the members of mappings that failed as a whole (a line that cannot be mapped is
        quarantined alone, as in a file read alone: that is not a failure)."""
        create_batch_table(con)
        con.execute("CREATE OR REPLACE TEMP TABLE _rows AS SELECT * FROM batch")
        _FileRows(con, self.store, "", [], 0)  # nothing of a new file is stored
        db.temp_table(con, "_group_files", {
            "input_id": ("BIGINT", [m.input_id for m in members]),
            "file": ("VARCHAR", [m.shown for m in members])})
        by_key: dict[tuple, list[_Member]] = {}
        for m in members:
            if m.key is not None:
                by_key.setdefault(m.key, []).append(m)
        failed: list[_Member] = []
        for same in by_key.values():
            try:
                self._map_together(con, same)
            except duckdb.Error:
                failed += same
        return failed

    def _map_together(self, con: duckdb.DuckDBPyConnection, same: list[_Member]) -> None:
        """Members of one mapping in one pass: their lines are numbered input × 2^32 + line,
        so that the mapping (made for input 0) gives each line its event id; then the lines
        get their numbers back, and the events their file's name, before `finish`."""
        fmt, by_id = same[0].fmt, {m.input_id: m for m in same}
        create_batch_table(con)
        lines = pa.concat_tables([m.lines for m in same]) if len(same) > 1 else same[0].lines
        base = np.repeat(np.array([m.input_id << LINE_BITS for m in same], dtype=np.int64),
                         [m.lines.num_rows for m in same])
        lines = lines.set_column(0, "line", db.numpy_arrow(db.arrow_numpy(lines["line"]) + base))
        ctx = self._context(same[0].path)
        rejected = _Mapper(con, fmt, ctx).map(LineBatch(lines, []))
        unknown = con.execute("SELECT line >> 32, k, count(*) FROM (SELECT line, unnest(keys) "
                              "AS k FROM unknown) GROUP BY ALL").fetchall()
        con.execute(f"""CREATE OR REPLACE TEMP TABLE batch AS
            SELECT b.* REPLACE (b.line & {(1 << LINE_BITS) - 1} AS line, g.file AS file)
            FROM batch b JOIN _group_files g ON g.input_id = b.event_id >> {LINE_BITS}""")
        if fmt.finish_rows:
            db.insert_arrow(con, "_rows", fmt.finish_rows(
                con, ctx, con.sql("SELECT * FROM batch").to_arrow_table()))
        else:
            if fmt.finish:
                fmt.finish(con, ctx)
            con.execute("INSERT INTO _rows SELECT * FROM batch")
        for r in rejected:  # the mapping stood: what it found is each file's
            by_id[r.line >> LINE_BITS].rejected.append(r)
            r.line &= (1 << LINE_BITS) - 1
        for input_id, key, n in unknown:
            by_id[input_id].unknown[key] += n

    def _commit(self, con: duckdb.DuckDBPyConnection, members: list[_Member]) -> None:
        """One events file, one quarantine file and one catalog transaction for the group;
        each member keeps its own input row and batch row."""
        store, cache = self.store, _cache(self.store)
        stats = {row[0]: row[1:] for row in con.execute(f"""
            SELECT event_id >> {LINE_BITS}, count(*), count(*) FILTER (WHERE ts IS NULL),
                   count(*) FILTER (WHERE ts < prev), max(prev - ts) FILTER (WHERE ts < prev),
                   min(ts), max(ts)
            FROM (SELECT event_id, ts, lag(ts IGNORE NULLS) OVER (
                    PARTITION BY event_id >> {LINE_BITS} ORDER BY line) AS prev FROM _rows)
            GROUP BY 1""").fetchall()}
        listed, batch_of = [], {}
        for m in members:
            events, missing, back, step, *ts_range = stats.get(m.input_id, (0, 0, 0, None, None, None))
            m.events, m.ts_range = events, tuple(ts_range)
            if m.damage:
                m.rep.warnings.append(_damage_warning(m.damage, m.state.next_line - 1))
            m.rep.warnings += (_time_warnings(missing, back, step)
                               + _unknown_warning(m.fmt.name, m.unknown)
                               + (m.fmt.notes(self._context(m.path)) if m.fmt.notes else []))
            batch_of[m.input_id] = _next_id(store, "batches", "batch_id")
            if events or m.rejected:
                listed.append(m)
        name = (f"{listed[0].input_id:05d}-{batch_of[listed[0].input_id]:07d}.parquet"
                if listed else "")
        ev_rel = f"events/{name}" if any(m.events for m in listed) else None
        qu_rel = f"quarantine/{name}" if any(m.rejected for m in listed) else None
        written = [rel for rel in (ev_rel, qu_rel) if rel]
        store.intend(*written)
        if ev_rel:
            pq.write_table(con.sql("SELECT * FROM _rows ORDER BY event_id").to_arrow_table(),
                           store.root / ev_rel, row_group_size=ROW_GROUP, **EVENTS_PARQUET)
        if qu_rel:
            _write_quarantine(con, store, qu_rel, [(m.shown, r) for m in listed
                                                   for r in m.rejected])
        _record_late_outcomes(store, con)
        sealed = store.seal(*written)
        now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        knowns, inputs, batches = [], [], []
        for m in members:
            known, row = _input_row(m.input_id, m.path, m.shown, m.fmt, m.hasher.hexdigest(),
                                    m.state, m.head, m.ended_without_newline, m.hasher.state(),
                                    m.tail, now, now)
            knowns.append(known)
            inputs.append(row)
            if m in listed:
                ev, qu = (ev_rel if m.events else None), (qu_rel if m.rejected else None)
                batches.append([batch_of[m.input_id], m.input_id, ev, qu, 0, m.state.next_offset,
                                0, m.state.next_line, m.events, len(m.rejected),
                                m.hasher.hexdigest(), now, *m.ts_range, sealed.get(ev),
                                sealed.get(qu)])
        with store.catalog_connection() as cat, _transaction(cat):
            _insert_rows(cat, "inputs", INPUT_FIELDS, inputs)
            _insert_rows(cat, "batches", BATCH_FIELDS, batches)
        for known in knowns:
            cache.remember(known)
        events_path = str((store.root / ev_rel).resolve()) if ev_rel else ""
        for m in members:
            if m.events:
                cache.files_of.setdefault(m.input_id, []).append(events_path)
            rep = m.rep
            rep.status, rep.events, rep.new_bytes = "new", m.events, m.state.next_offset
            rep.quarantined = Counter(r.reason for r in m.rejected)
            rep.lines, rep.pending = m.state.next_line - 1, m.state.partial
            rep.sha256 = m.hasher.hexdigest()


def _insert_rows(cat: duckdb.DuckDBPyConnection, table: str, fields: tuple[str, ...],
                 rows: list[list]) -> None:
    """Rows into a catalog table in one statement (DuckDB's executemany: 0.1 ms a row), each
    column bound as one list (10 µs a row; an Arrow table of the rows would import pandas)."""
    if not rows:
        return
    columns = [list(c) for c in zip(*rows, strict=True)]
    unnested = ", ".join(f"unnest(${i})" for i in range(1, len(fields) + 1))
    cat.execute(f"INSERT INTO {table} ({', '.join(fields)}) SELECT {unnested}", columns)


class _CatalogHold:
    """The catalog kept attached across the files of one ingest (attaching and detaching it
    costs 3-5 ms each, twice a file), and let go of for PAUSE seconds every HOLD seconds:
    while it is attached no other process may open it, so a reader (which retries every 50
    ms) waits at most about HOLD seconds, never the whole ingest."""

    HOLD, PAUSE = 0.5, 0.2

    def __init__(self, store: Store):
        self.store = store
        self.held: contextlib.ExitStack | None = None
        self.since = time.monotonic()

    def __enter__(self) -> _CatalogHold:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def tick(self) -> None:
        """Between two files: let go of the catalog, or take it again, when it is time."""
        now = time.monotonic()
        if self.held is not None and now - self.since >= self.HOLD:
            self.release()
        elif self.held is None and now - self.since >= self.PAUSE:
            held = contextlib.ExitStack()
            held.enter_context(self.store.catalog_connection())
            self.held, self.since = held, now

    def release(self) -> None:
        if self.held is not None:
            self.held.close()
            self.held, self.since = None, time.monotonic()


class _Prepend:
    def __init__(self, first: bytes, stream):
        self.first, self.stream = first, stream

    def read(self, n: int = -1) -> bytes:
        if self.first:
            out, self.first = self.first + self.stream.read(n - 1 if n > 0 else -1), b""
            return out
        return self.stream.read(n)

    def close(self) -> None:
        self.stream.close()


def _resume(stream, path: Path, known: Known, compressed: bool) -> tuple[Sha256, bytes] | None:
    """Position `stream` at the stored watermark if the file still holds what was read there,
    returning the SHA-256 to continue and the bytes just before the watermark; None when it
    does not hold them (rotated, rewritten, truncated).

    With a saved SHA-256 state this reads only the TAIL_LEN bytes before the watermark (the
    head was matched already), so a scan of an appended log costs what was appended. Without
    one (no libcrypto) the whole prefix is re-hashed and compared.
    """
    if known.sha_state and known.tail_sha256 and digest.available():
        start = max(0, known.bytes - TAIL_LEN)
        if compressed:
            _discard(stream, start)
            tail = stream.read(known.bytes - start)
        else:
            stream.seek(start)
            tail = stream.read(known.bytes - start)
        if len(tail) != known.bytes - start or hashlib.sha256(tail).hexdigest() != known.tail_sha256:
            return None
        return Sha256(known.sha_state), tail
    hasher = Sha256()
    remaining, tail = known.bytes, b""
    while remaining:
        chunk = stream.read(min(remaining, 8 * 1024 * 1024))
        if not chunk:
            return None
        hasher.update(chunk)
        tail = (tail + chunk)[-TAIL_LEN:]
        remaining -= len(chunk)
    return (hasher, tail) if hasher.hexdigest() == known.sha256 else None


def _discard(stream, n: int) -> None:
    while n:
        chunk = stream.read(min(n, 8 * 1024 * 1024))
        if not chunk:
            return
        n -= len(chunk)


def _is_json_object(raw: bytes) -> bool:
    try:
        return isinstance(json.loads(raw), dict)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return False


NARROW = "event_id, line, ts, kind, corr_id, actor, session, action"
HOLD_LINES = 1024
RECENT = 4  # a file's newest batches, where formats look first for what a new line answers


# How events files are written. Dictionaries only for the text columns whose values repeat:
# a dictionary of numbers, times or request ids (nearly one value a row) is built and then
# given up for every page, a third of the writer's time, and larger files (a chunk of the
# bproxy log: 0.081 s and 3.35 MB with them, 0.053 s and 2.13 MB without). Numbers and times
# are delta-encoded (ids, lines, offsets and times climb: a few bits a row where plain
# encoding took 8 bytes). Every query of a scan decompresses the columns it reads again, so
# they are LZ4, which decompresses several times faster than zstd; zstd only for the request
# ids, which are large, unique and read by few. Against zstd alone on the 235 MB incident
# log: 15.2 MB instead of 20.5, writing 0.40 s of CPU instead of 0.49, and its scan 9-14 %
# faster (zstd's decoding was 12 % of the scan's CPU samples). Statistics (each row group's
# least and greatest value) for the numbers and times, and for the text columns that name a
# slice of the events (a file, format, kind, actor, session...): a filter on one of those
# skips the row groups and files that cannot hold it. Not for the text that no filter skips
# by (arguments, results, extra, errors, ids): every text column's statistics were a fifth
# of the writer's CPU, about 1 ms a column (a 160,000-row chunk of the no-id bproxy log:
# 76 ms with every column's, 58 ms with no text column's, 70 ms with these).
SLICE_COLUMNS = ("file", "format", "kind", "event_type", "actor", "target", "session",
                 "channel", "model")
EVENTS_PARQUET = {
    "compression": {c.name: "zstd" if c.name in COSTLY_TO_READ else "lz4" for c in COLUMNS},
    "use_dictionary": [c.name for c in COLUMNS
                       if c.sql_type == "VARCHAR" and c.name not in COSTLY_TO_READ],
    "column_encoding": {c.name: "DELTA_BINARY_PACKED" for c in COLUMNS
                        if c.sql_type in ("BIGINT", "INTEGER", "TIMESTAMP")},
    "write_statistics": [c.name for c in COLUMNS
                         if c.sql_type != "VARCHAR" or c.name in SLICE_COLUMNS],
}


class _ChunkSink:
    """Finishes each mapped chunk and streams it into the batch's one Parquet file.

    Chunks go to disk as they are done, so memory holds one chunk plus a narrow index of the
    file's newest rows (`_FileRows`), which formats join against through `stored_events`
    (this file's every earlier event) or `recent_stored_events` (those of its newest
    batches). `earlier`: the committed events files the formats may look back into (by
    default the file's own).

    The temp table `batch`, where `finish` works, holds only the columns it reads or writes
    (`Format.finish_columns`) and those of the index; the rest of each row waits in Arrow
    (`pending`) and is put beside them when the rows are written. Copying every column into
    DuckDB and out again cost more than the format's joins (on a chunk of the `reqId`
    bproxy log: 0.145 s for all columns, 0.034 s for the narrow ones). A format that
    finishes rows in Arrow (`Format.finish_rows`) has them kept there (`unfinished`, with
    `batch`'s columns and types), never copied into DuckDB (0.05 s a chunk)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, fmt: Format, ctx: FormatContext,
                 store: Store, batch_id: int, threaded: bool = True,
                 earlier: list[str] | None = None):
        self.con, self.fmt, self.ctx = con, fmt, ctx
        stem = f"{ctx.input_id:05d}-{batch_id:07d}"
        self.relative = f"events/{stem}.parquet"
        self.path = store.root / self.relative
        store.intend(self.relative)
        self.events = 0
        self.writer: pq.ParquetWriter | None = None
        # one chunk waits while one is written: each is an Arrow table of 50-100 MB
        self.queue: queue.Queue = queue.Queue(maxsize=1)
        self.failure: list[BaseException] = []
        self.thread = threading.Thread(target=self._write, daemon=True) if threaded else None
        if self.thread is not None:
            self.thread.start()
        if earlier is None:
            earlier = _cache(store).files_of.get(ctx.input_id, [])
        self.columns = _batch_columns(fmt)
        self.pending: list[pa.Table] = []  # the rows in `batch`, every column, in its order
        if self.columns is not None:
            con.execute(f"CREATE OR REPLACE TEMP TABLE batch AS SELECT {', '.join(self.columns)} "
                        "FROM batch LIMIT 0")
        self.rows = _FileRows(con, store, stem, earlier, ctx.input_id)
        self.schema = (con.sql("SELECT * FROM batch LIMIT 0").to_arrow_table().schema
                       if fmt.finish_rows else None)
        self.unfinished: list[pa.Table] = []  # the rows of `batch` when they stay in Arrow

    def add(self, table: pa.Table) -> None:
        """Add a chunk's mapped rows (every column) after those in `batch`."""
        if not table.num_rows:
            return
        if self.schema is not None:
            self.unfinished.append(_as_schema(table, self.schema))
            if self.columns is not None:
                self.pending.append(table)
            return
        columns = "*" if self.columns is None else ", ".join(self.columns)
        with db.registered(self.con, "_mapped", table):
            self.con.execute(f"CREATE OR REPLACE TEMP TABLE batch AS SELECT * FROM batch "
                             f"UNION ALL SELECT {columns} FROM _mapped").fetchall()
        if self.columns is not None:
            self.pending.append(table)

    def flush(self, final: bool = False) -> None:
        """Finish what is mapped and write it, except the last HOLD_LINES lines (unless
        `final`): a request near a chunk's end meets its response in the next chunk."""
        if self.schema is not None:
            self._flush_rows(final)
            return
        con = self.con
        lo, hi = con.execute("SELECT min(line), max(line) FROM batch").fetchall()[0]
        if lo is None:
            return
        cutoff = hi if final else hi - HOLD_LINES
        if cutoff < lo:  # nothing to write yet: finished with the next chunk
            return
        if self.fmt.finish:
            self.fmt.finish(con, self.ctx)
        table = self._finished(int(cutoff))
        # a new table, not DELETE: deleted rows would still be scanned by every later chunk
        con.execute(f"CREATE OR REPLACE TEMP TABLE batch AS SELECT * FROM batch "
                    f"WHERE line > {int(cutoff)}").fetchall()
        self._write_finished(table)

    def _flush_rows(self, final: bool) -> None:
        """`flush` of the rows kept in Arrow: finished there (`Format.finish_rows`), the
        lines held back kept for the next chunk."""
        if not self.unfinished:
            return
        rows = pa.concat_tables(self.unfinished) if len(self.unfinished) > 1 else self.unfinished[0]
        lines = db.arrow_numpy(rows["line"])
        cutoff = int(lines.max()) if final else int(lines.max()) - HOLD_LINES
        if cutoff < int(lines.min()):  # nothing to write yet: finished with the next chunk
            return
        done, held = _cut(self.fmt.finish_rows(self.con, self.ctx, rows), cutoff)
        self.unfinished = [_as_schema(held, self.schema)] if held.num_rows else []
        self._write_finished(self._finished(cutoff, done))

    def _write_finished(self, table: pa.Table) -> None:
        """Index finished rows (every column), and write them."""
        self.rows.add(table)
        self.events += table.num_rows
        if self.failure:
            raise self.failure[0]
        if self.thread is None:
            self._write_table(table)
        else:
            self.queue.put(table)

    def _finished(self, cutoff: int, done: pa.Table | None = None) -> pa.Table:
        """The rows of `batch` (or those `finish_rows` returned up to `cutoff`, `done`) up to
        line `cutoff`, every column: those of `batch` with the others of `pending` (which
        keeps the rows after `cutoff`)."""
        if done is None:
            done = self.con.sql(f"SELECT * FROM batch WHERE line <= {cutoff}").to_arrow_table()
        if self.columns is None:
            return done
        wide = pa.concat_tables(self.pending) if len(self.pending) > 1 else self.pending[0]
        head, rest = _cut(wide, cutoff)
        self.pending = [rest] if rest.num_rows else []
        return _beside(head, done)

    def _write(self) -> None:
        while (table := self.queue.get()) is not None:
            try:
                self._write_table(table)
            except BaseException as exc:  # handed to the ingesting thread
                self.failure.append(exc)

    def _write_table(self, table: pa.Table) -> None:
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.path, table.schema, **EVENTS_PARQUET)
        self.writer.write_table(table)

    def close(self) -> int:
        try:
            if self.thread is not None:
                self.queue.put(None)
                self.thread.join()
            if self.writer is not None:
                self.writer.close()
        finally:
            self.rows.close()
        if self.failure:
            raise self.failure[0]
        return self.events


def _cut(table: pa.Table, cutoff: int) -> tuple[pa.Table, pa.Table]:
    """The rows of `table` up to line `cutoff`, and the rows after it. Slices when its lines
    are in the order they were read (a chunk's rows are): a filter copied every column of
    the chunk, 0.17 s of the ingesting thread in a profile of the `reqId` log's ingest."""
    lines = db.arrow_numpy(table["line"])
    if len(lines) < 2 or bool(np.all(lines[1:] >= lines[:-1])):
        k = int(np.searchsorted(lines, cutoff, side="right"))
        return table.slice(0, k), table.slice(k)
    up_to = db.numpy_arrow(lines <= cutoff)
    return table.filter(up_to), table.filter(pc.invert(up_to))


def _as_schema(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """The columns of `schema` of `table`, of its types."""
    if table.schema.equals(schema):
        return table
    return pa.Table.from_arrays([table[f.name].cast(f.type) for f in schema], schema=schema)


def _batch_columns(fmt: Format) -> list[str] | None:
    """The columns `batch` holds while a file is read (None: all): what the format's `finish`
    (or `finish_rows`) names and what the index of the file's rows reads (NARROW), in the
    schema's order."""
    if (fmt.finish or fmt.finish_rows) and fmt.finish_columns is None:
        return None
    wanted = set(NARROW.split(", ")) | (fmt.finish_columns or set())
    return [c.name for c in COLUMNS if c.name in wanted]


def _beside(wide: pa.Table, narrow: pa.Table) -> pa.Table:
    """`wide` with the columns of `narrow` (the same rows, by event id) in place of its own."""
    ids, wide_ids = db.arrow_numpy(narrow["event_id"]), db.arrow_numpy(wide["event_id"])
    if len(ids) != wide.num_rows:
        raise RuntimeError("finish changed the number of rows of `batch`")
    if not np.array_equal(ids, wide_ids):  # rows in another order
        wide = wide.take(db.numpy_arrow(np.argsort(wide_ids, kind="stable")))
        narrow = narrow.take(db.numpy_arrow(np.argsort(ids, kind="stable")))
        if not np.array_equal(db.arrow_numpy(narrow["event_id"]),
                              db.arrow_numpy(wide["event_id"])):
            raise RuntimeError("finish changed the event ids of `batch`")
    columns = [narrow[f.name].cast(f.type) if f.name in narrow.column_names else wide[f.name]
               for f in wide.schema]
    return pa.Table.from_arrays(columns, schema=wide.schema)


SPILL_ROWS = 1 << 18  # narrow rows of a read kept in memory (33 MB); older ones wait in Parquet
_NAT = np.iinfo(np.int64).min  # numpy's "no time", as an integer


def _from_us(us: int) -> dt.datetime:
    return dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=us)


class _FileRows:
    """The narrow rows (NARROW) of what this read has finished, which the formats' look-back
    joins read, and what ingest says of their times. The newest rows are `file_rows`,
    Arrow tables registered with DuckDB; each time they hold SPILL_ROWS they go to a scratch
    Parquet file in the store (`scratch/`, deleted when the read ends; a killed read's are
    deleted as orphans), so memory stays bounded at any size of log: in memory, the index of
    a 12.7 M-line log took 1.6 GB. The times are summed up as rows arrive, not sorted again at the end.

    The views: `stored_events`, every earlier event of the file (its committed events
    files `earlier`, the scratch files, `file_rows`), and `recent_stored_events`, those of
    its newest batches (the last RECENT committed files, the last scratch file, `file_rows`:
    at least SPILL_ROWS of the newest rows of this read), where formats look first. Every
    version of loophound wrote these columns, so the files are read with the first one's
    schema (`union_by_name` would read every file's footer to define the view: 60 ms for a
    log scanned every five minutes for a day)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, store: Store, stem: str,
                 earlier: list[str], input_id: int):
        self.con, self.store, self.stem = con, store, stem
        self.earlier, self.input_id = earlier, input_id
        self.spilled: list[str] = []  # scratch files, relative to the store
        self.missing_ts = self.back = 0
        self.largest_step = None
        self.ts_range: tuple = (None, None)
        self.last_ts: int | None = None  # the last time of the rows so far (line order), µs
        # the rows in memory: Arrow tables of NARROW columns that DuckDB reads in place (an
        # INSERT into a table copied them, a third of the cost of finishing a chunk)
        self.empty = con.sql(f"SELECT {NARROW} FROM batch LIMIT 0").to_arrow_table()
        self.frames: list[pa.Table] = []
        self._register()
        con.execute(f"CREATE OR REPLACE TEMP TABLE late_outcomes ({OUTCOME_COLUMNS})")
        self._views()

    @property
    def in_memory(self) -> int:
        """How many of the read's rows wait in memory, not yet spilled."""
        return sum(f.num_rows for f in self.frames)

    def _register(self) -> None:
        self.con.register("file_rows", pa.concat_tables([self.empty, *self.frames]))

    def _views(self) -> None:
        lo, hi = self.input_id << 32, (self.input_id + 1) << 32
        scratch = [str(self.store.root / rel) for rel in self.spilled]
        for view, some, spilled in (("stored_events", self.earlier, scratch),
                                    ("recent_stored_events", self.earlier[-RECENT:], scratch[-1:])):
            parts = [f"SELECT {NARROW} FROM read_parquet({db.sql_list(some)}) "
                     f"WHERE event_id >= {lo} AND event_id < {hi}"] if some else []
            parts += [f"SELECT {NARROW} FROM read_parquet({db.sql_list(spilled)})"] if spilled else []
            parts.append(f"SELECT {NARROW} FROM file_rows")
            self.con.execute(f"CREATE OR REPLACE TEMP VIEW {view} AS {' UNION ALL '.join(parts)}")

    def add(self, table: pa.Table) -> None:
        """The rows of `table` are finished: index them, sum up their times, and spill when
        memory holds enough."""
        self._sum_times(table)
        self.frames.append(table.select(self.empty.column_names).cast(self.empty.schema))
        self._register()
        if self.in_memory >= SPILL_ROWS:
            self._spill()

    def _sum_times(self, table: pa.Table) -> None:
        """As the warnings read all rows in line order: those without a time, and those
        earlier than the last time before them (a step back), with the largest step; and the
        time range. In numpy, on the rows just written (a window in SQL cost a sort)."""
        if not table.num_rows:
            return
        ts = db.arrow_numpy(table.column("ts").cast(pa.timestamp("us")).cast(pa.int64()),
                            null=_NAT)
        order = np.lexsort((db.arrow_numpy(table.column("event_id")),
                            db.arrow_numpy(table.column("line"))))
        ts = ts[order]
        timed = ts != _NAT
        self.missing_ts += int(len(ts) - timed.sum())
        if not timed.any():
            return
        # the last time at or before each row, then the one before each row
        at = np.maximum.accumulate(np.where(timed, np.arange(len(ts)), -1))
        before = np.concatenate(([-1], at[:-1]))
        prev = np.where(before >= 0, ts[np.maximum(before, 0)],
                        _NAT if self.last_ts is None else self.last_ts)
        back = timed & (prev != _NAT) & (ts < prev)
        if back.any():
            self.back += int(back.sum())
            step = dt.timedelta(microseconds=int((prev[back] - ts[back]).max()))
            if self.largest_step is None or step > self.largest_step:
                self.largest_step = step
        first, last = int(ts[timed].min()), int(ts[timed].max())
        lo, hi = self.ts_range
        self.ts_range = (_from_us(first) if lo is None else min(lo, _from_us(first)),
                         _from_us(last) if hi is None else max(hi, _from_us(last)))
        self.last_ts = int(ts[timed][-1])

    def _spill(self) -> None:
        rel = f"scratch/{self.stem}-rows-{len(self.spilled) + 1}.parquet"
        (self.store.root / "scratch").mkdir(exist_ok=True)
        self.store.intend(rel)
        # written to be read back soon, by this process and from the page cache: no
        # compression and no dictionaries (a spill cost two thirds of writing the events
        # themselves), and statistics only where a look-back's filter can use them
        pq.write_table(pa.concat_tables([self.empty, *self.frames]), self.store.root / rel,
                       compression="none", use_dictionary=False,
                       write_statistics=["event_id", "line", "ts"])
        self.spilled.append(rel)
        self.frames = []
        self._register()
        self._views()

    def warnings(self) -> list[str]:
        return _time_warnings(self.missing_ts, self.back, self.largest_step)

    def close(self) -> None:
        """Delete the scratch files (the views over them go first)."""
        self.frames = []
        self._register()
        if self.spilled:
            self.spilled, spilled = [], self.spilled
            self._views()
            for rel in spilled:
                (self.store.root / rel).unlink(missing_ok=True)


def _read_ahead(batches: Iterator[LineBatch], depth: int = 2) -> Iterator[LineBatch]:
    """Split the next chunk on a second thread while DuckDB maps this one (numpy, hashlib and
    file reads release the GIL), so reading costs little on top of parsing."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    done = object()
    failure: list[BaseException] = []

    def produce() -> None:
        try:
            for b in batches:
                q.put(b)
        except BaseException as exc:  # handed to the consumer, raised there
            failure.append(exc)
        finally:
            q.put(done)

    t = threading.Thread(target=produce, daemon=True)
    t.start()
    while (item := q.get()) is not done:
        yield item
    t.join()
    if failure:
        raise failure[0]


class _Mapper:
    """Maps line batches of one file with the format's SQL, adding the rows to the temp table
    `into` (by default `batch`, which `finish` reads)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, fmt: Format, ctx: FormatContext,
                 into: str = "batch"):
        self.con, self.fmt, self.ctx, self.into = con, fmt, ctx, into
        self.unknown: Counter = Counter()
        if fmt.file_keys:
            self.mapped, known = fmt.file_keys(ctx)
        else:
            self.mapped, known = fmt.mapped_keys, fmt.known_keys
        self.expected = self.mapped | known
        self._sql: dict[bool, str] = {}
        self._schema: pa.Schema | None = None

    def map(self, batch: LineBatch) -> list[Rejected]:
        con = self.con
        if batch.table.num_rows == 0:
            return batch.rejected
        con.register("raw_all", batch.table)
        # Optimistic: most chunks hold only valid JSON, and the key check parses every line
        # anyway, so validity costs a pass of its own only when that parse fails.
        valid = "true"
        con.execute("CREATE OR REPLACE TEMP VIEW raw AS SELECT * FROM raw_all")
        try:
            self._find_unknown_keys()
        except duckdb.InvalidInputException:
            bad = con.execute("SELECT line, byte_offset, byte_length, text FROM raw_all "
                              "WHERE NOT json_valid(text)").fetchall()
            for line, off, length, text in bad:
                batch.rejected.append(Rejected(line, off, length, "invalid_json",
                                               _json_error(text), text[:200].rstrip("\r\n")))
            valid = "json_valid(text)"
            con.execute(f"CREATE OR REPLACE TEMP VIEW raw AS SELECT * FROM raw_all WHERE {valid}")
            self._find_unknown_keys()
        try:
            con.execute(self._insert_sql(), {"file": self.ctx.display_path}).fetchall()
        except duckdb.Error:
            lines = [r[0] for r in con.execute(
                f"SELECT line FROM raw_all WHERE {valid} ORDER BY line").fetchall()]
            batch.rejected.extend(self._isolate(lines, valid))
        con.unregister("raw_all")
        return batch.rejected

    def _isolate(self, lines: list[int], valid: str) -> list[Rejected]:
        """Map `lines` in halves after a mapping of them all failed, so a line the format
        cannot map (a value no mapping foresaw) costs that line, with the reason, and never
        its neighbours or its file: a few statements per bad line."""
        con, lo, hi = self.con, lines[0], lines[-1]
        con.execute(f"CREATE OR REPLACE TEMP VIEW raw AS SELECT * FROM raw_all "
                    f"WHERE {valid} AND line BETWEEN {int(lo)} AND {int(hi)}")
        try:
            con.execute(self._insert_sql(), {"file": self.ctx.display_path}).fetchall()
            return []
        except duckdb.Error as exc:
            if len(lines) > 1:
                half = len(lines) // 2
                return self._isolate(lines[:half], valid) + self._isolate(lines[half:], valid)
            off, length, text = con.execute(
                f"SELECT byte_offset, byte_length, text FROM raw_all WHERE line = {int(lo)}"
            ).fetchall()[0]
            reason = str(exc).strip().splitlines()[0][:300]
            return [Rejected(lo, off, length, "unmappable",
                             f"the {self.fmt.name} format cannot map a value of this line: "
                             f"{reason}", text[:200].rstrip("\r\n"))]

    def _find_unknown_keys(self, into: Counter | None = None, merge: bool = False) -> None:
        """Every line's keys are checked (no sampling: a key first seen on line 900,000 still
        reaches `extra`), in one vectorised pass: the lines with keys the format does not
        expect, and those keys, go to `unknown`; their counts to `into` (`self.unknown`).
        (Grouping lines by the hash of their key list, and listing the lines of bad shapes in
        a second pass, parsed every line twice when a log had one odd line; a log whose key
        order varies has as many shapes as lines.) With `merge`, each such line's exact
        `extra` too (`merged`), in the same pass: in the mapping the merge cost three times
        as much (0.3 s a chunk of the `req_id` log, whose lines all have unknown keys)."""
        merged = f", {_merge_sql('text', self.mapped)} AS merged" if merge else ""
        keys = "list_filter(json_keys(text), lambda k: NOT list_contains($expected, k))"
        params: dict = {"expected": sorted(self.expected)}
        if self.fmt.line_type:  # a line of a type the format does not know counts as one key
            typ = self.fmt.line_type
            keys = (f"list_concat({keys}, CASE WHEN NOT list_contains($types, {typ}) "
                    f"THEN [{db.sql_literal(UNKNOWN_TYPE)} || {typ}] ELSE [] END)")
            params["types"] = sorted(self.fmt.known_types)
        self.con.execute(
            f"CREATE OR REPLACE TEMP TABLE unknown AS SELECT line, keys{merged} FROM (SELECT "
            f"line, text, {keys} AS keys FROM raw) WHERE len(keys) > 0", params)
        counts = self.unknown if into is None else into
        for key, n in self.con.execute(
            "SELECT k, count(*) FROM (SELECT unnest(keys) AS k FROM unknown) GROUP BY k"
        ).fetchall():
            counts[key] += n

    def _insert_sql(self) -> str:
        if True not in self._sql:
            self._sql[True] = _insert_sql(self.con, self.fmt, self.ctx, self.mapped, self.into)
        return self._sql[True]

    def mapped_sql(self) -> str:
        """The SELECT of the chunk's rows, mapped (what `_insert_sql` adds to `batch`), but
        for what `completed` fills in: the computed keys, the merged `extra`, and the
        columns that are the same on every row."""
        if False not in self._sql:
            self._sql[False] = _mapped_sql(self.con, self.fmt, self.ctx, self.mapped,
                                           keys=False, constants=False)
        return self._sql[False]

    def merges_later(self) -> bool:
        """Whether `mapped_sql` leaves the lines with unknown keys to `completed` (when the
        format makes an `extra` of its own)."""
        return "extra" in _provided(self.con, self.fmt.select_sql(self.ctx))

    def completed(self, table: pa.Table) -> pa.Table:
        """`table` (from `mapped_sql`) with the columns that are the same on every row, its
        computed key columns (`_computed_keys`), and the `extra` of the lines with unknown
        keys (`unknown.merged`): every column of `batch`."""
        if self._schema is None:  # the columns of `batch`, as DuckDB gives them to Arrow
            create_batch_table(self.con, "_events_shape")
            self._schema = self.con.sql("SELECT * FROM _events_shape").to_arrow_table().schema
        table = _with_constants(table, self._schema,
                                {"file": self.ctx.display_path, "format": self.fmt.name})
        computed = _computed_keys(_provided(self.con, self.fmt.select_sql(self.ctx)))
        table = _keys_by_value(self.con, table, computed)
        if self.merges_later():
            table = _merged_by_line(table, db.arrow(self.con, "SELECT line, merged FROM unknown"))
        return table

    def rows(self, batch: LineBatch, mapped: tuple[pa.Table, Counter] | None = None) -> pa.Table:
        """The chunk's rows, mapped: those mapped ahead on another cursor (`_MapAhead`), or,
        when that could not map them (invalid JSON, a value the mapping cannot map) or none
        did, mapped here into `into`, where each line that cannot be is found and
        quarantined (in `batch.rejected`)."""
        if mapped is not None:
            table, unknown = mapped
            self.unknown.update(unknown)
            return table
        create_batch_table(self.con, self.into)
        self.map(batch)
        return self.con.sql(f"SELECT * FROM {self.into}").to_arrow_table()


# a chunk is mapped in this many parts at once, each of at least PART_ROWS lines
MAP_PARTS = 2
PART_ROWS = 8192


class _MapAhead:
    """Maps the next chunk on cursors and threads of their own while the ingesting thread
    finishes and writes the chunk before it (the format's joins, the index, the Arrow table
    for Parquet): DuckDB releases the GIL, so the two cores of a small machine both work,
    where one waited for the other. A chunk's mapping reads only its own lines, so it does
    not wait for the one before to be finished.

    Each line maps alone, so a chunk is mapped in parts (MAP_PARTS), at once, each on a
    cursor and a `_Mapper` of its own, and the parts' rows are put back together in line
    order: mapping is the longest step of the pipeline, and mapped whole the ingesting
    thread and the reader waited for it while a core stood idle. What `finish` sees is
    still the whole chunk. (Two chunks mapped at once instead cost 0.15 GB more at the
    peak: the mapping of a chunk holds about three times its lines.)

    Meanwhile DuckDB runs each query on one thread of its own (`_SINGLE_THREADED`): the
    threads of ingest already keep the cores busy, and DuckDB's parallel operators on top
    of them only added the cost of splitting and merging their work (the reqId log, 3
    alternations at a load average of 10: 9.5 s of CPU and 23.9 s with DuckDB's threads,
    8.2 s and 19.3 s without)."""

    def __init__(self, fmt: Format, ctx: FormatContext, parts: int = MAP_PARTS):
        self.parts = parts
        self.cons: list[duckdb.DuckDBPyConnection] = []
        self.free: queue.SimpleQueue = queue.SimpleQueue()  # (cursor, mapper) not in use
        for _ in range(parts):
            con = db.scratch()
            self.cons.append(con)
            _SINGLE_THREADED.enter(con)
            self.free.put((con, _Mapper(con, fmt, ctx)))
        self.pool = ThreadPoolExecutor(parts, thread_name_prefix="loophound-map")

    def submit(self, batch: LineBatch) -> _Mapping:
        rows = batch.table.num_rows
        n = max(1, min(self.parts, rows // PART_ROWS))
        cuts = [rows * k // n for k in range(n + 1)]
        return _Mapping([self.pool.submit(self._map, batch.table.slice(a, b - a))
                         for a, b in zip(cuts, cuts[1:], strict=False)])

    def _map(self, lines: pa.Table) -> tuple[pa.Table, Counter] | None:
        """The lines mapped, and their unknown keys counted; None when a line is not valid
        JSON or the mapping fails (`_Mapper.rows` maps the chunk again, carefully)."""
        if lines.num_rows == 0:
            return None
        con, mapper = self.free.get()
        unknown: Counter = Counter()
        con.register("raw_all", lines)
        try:
            con.execute("CREATE OR REPLACE TEMP VIEW raw AS SELECT * FROM raw_all")
            mapper._find_unknown_keys(unknown, merge=mapper.merges_later())
            table = db.arrow(con, mapper.mapped_sql())
            table = mapper.completed(table)
        except duckdb.Error:
            return None
        finally:
            con.unregister("raw_all")
            self.free.put((con, mapper))
        return table, unknown

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        try:
            for con in self.cons:
                _SINGLE_THREADED.leave(con)
        finally:
            for con in self.cons:
                con.close()


@dataclass
class _Mapping:
    """A chunk's mapping under way: its parts' (`_MapAhead`)."""

    parts: list[Future]

    def result(self) -> tuple[pa.Table, Counter] | None:
        """The chunk's rows and unknown keys, its parts' together; None when a part could
        not be mapped (the chunk is then mapped again whole, carefully)."""
        done = [part.result() for part in self.parts]
        if any(d is None for d in done) or len({d[0].schema for d in done}) > 1:
            return None
        unknown: Counter = Counter()
        for _, counted in done:
            unknown.update(counted)
        return pa.concat_tables([table for table, _ in done]), unknown


def _one_duckdb_thread(con: duckdb.DuckDBPyConnection) -> int:
    """DuckDB's worker threads (a setting of the process's one database) set to 1; the
    number before."""
    before = con.execute("SELECT current_setting('threads')").fetchall()[0][0]
    con.execute("SET threads = 1")
    return before


def _duckdb_threads(before: int, con: duckdb.DuckDBPyConnection) -> None:
    con.execute(f"SET threads = {int(before)}")


def _arrow_on_jemalloc() -> pa.MemoryPool | None:
    """Arrow's default memory pool set to jemalloc; the pool before (None: a pyarrow without
    jemalloc keeps its pool). Ingest allocates and frees tens of MiB of Arrow buffers a
    chunk; mimalloc (pyarrow's default) gives freed pages back to the system and takes them
    again, zeroed, at a page fault each: a sixth of ingest's CPU went to page faults, and
    with jemalloc their share fell by a quarter (no id log, perf samples). A buffer keeps
    the pool it came from, so one made during an ingest is freed right after it."""
    try:
        pool = pa.jemalloc_memory_pool()
    except NotImplementedError:
        return None
    before = pa.default_memory_pool()
    pa.set_memory_pool(pool)
    return before


# DuckDB on one thread while any read maps ahead (`_MapAhead`)
_SINGLE_THREADED = WhileInUse(_one_duckdb_thread, _duckdb_threads)
# Arrow on jemalloc while any ingest runs
_ARROW_ON_JEMALLOC = WhileInUse(_arrow_on_jemalloc, pa.set_memory_pool)


def _unknown_warning(format_name: str, unknown: Counter) -> list[str]:
    """What the format did not know of a file: line types (counted under UNKNOWN_TYPE), then
    fields, each named with its count."""
    types = Counter({k.removeprefix(UNKNOWN_TYPE): n for k, n in unknown.items()
                     if k.startswith(UNKNOWN_TYPE)})
    fields = Counter({k: n for k, n in unknown.items() if not k.startswith(UNKNOWN_TYPE)})
    said = (("line types", types, "read as `record` events, the fields no column holds kept "
                                  "in `extra`"),
            ("fields", fields, "kept in the `extra` column"))
    return [f"{what} the {format_name} format does not know: {_counted(names)}; {how}"
            for what, names, how in said if names]


def _counted(names: Counter) -> str:
    """`a (3), b (1)`: the first ten names by name, and how many more."""
    listed = ", ".join(f"{k} ({n:,})" for k, n in sorted(names.items())[:10])
    return listed + ("" if len(names) <= 10 else f" and {len(names) - 10} more")


def _damage_warning(damage: str, lines: int) -> str:
    return (f"stopped reading: {damage}; a damaged or cut-short compressed file? "
            f"The {lines:,} complete lines before that point are kept")


def _json_error(text: str) -> str:
    try:
        json.loads(text)
    except ValueError as exc:
        return f"malformed JSON: {exc}"
    except RecursionError:
        return "malformed JSON, nested too deeply to say where"
    return "malformed JSON"


def _insert_sql(con: duckdb.DuckDBPyConnection, fmt: Format, ctx: FormatContext,
                mapped_keys: frozenset[str], into: str = "batch") -> str:
    """Add `raw`, mapped (`_mapped_sql`), to the table `into`.

    It is rebuilt in one statement (the rows before, then the new ones), not appended to:
    DuckDB's UPDATE ... FROM that formats run next is ten times slower on a table made by
    CREATE then INSERT (0.5 s instead of 0.05 s a chunk, measured on the bproxy join)."""
    return (f"CREATE OR REPLACE TEMP TABLE {into} AS SELECT * FROM {into} "
            f"UNION ALL {_mapped_sql(con, fmt, ctx, mapped_keys)}")


def _computed_keys(provided: set[str]) -> dict[str, tuple[str, ...]]:
    """The key columns ingest computes (`key_sql`) for a mapping that provides `provided`,
    each with the output columns it is computed from: the action and its arguments, the
    result."""
    out: dict[str, tuple[str, ...]] = {}
    if "action" in provided and "action_key" not in provided:
        out["action_key"] = ("action", "args")
    if "result" in provided and "result_key" not in provided:
        out["result_key"] = ("result",)
    return out


def _mapped_sql(con: duckdb.DuckDBPyConnection, fmt: Format, ctx: FormatContext,
                mapped_keys: frozenset[str], keys: bool = True, constants: bool = True) -> str:
    """`raw`, mapped: the format's columns, NULL for the rest.

    `extra` is the format's own (its documented keys) except on lines listed in `unknown`,
    where it is every key not turned into a column (a JSON merge: exact, slower). With
    `keys` False the computed key columns (`_computed_keys`) are left NULL, for
    `_keys_by_value` to fill in, and a format's own `extra` is kept on every line, for
    `_merged_by_line` to replace on the lines with unknown keys. With `constants` False the
    columns that are the same on every row (the file, the format, a NULL) are left out, for
    `_with_constants` to add in Arrow: DuckDB's copy of them into Arrow, row by row, was a
    tenth of the mapping of a bproxy chunk (17 ms of 190 on 82,000 lines)."""
    select = fmt.select_sql(ctx)
    provided = _provided(con, select)
    exprs: list[str] = []
    same: set[str] = set()  # the columns whose every row is the same: a file, format or NULL
    for c in COLUMNS:
        if c.name == "event_id":
            # several events of one line (Format.sub_bits): numbered by the format's `sub`
            sub = f" * {1 << fmt.sub_bits} + m.sub" if fmt.sub_bits and "sub" in provided else ""
            exprs.append(f"CAST({ctx.input_id} AS BIGINT) * 4294967296 + m.line{sub}")
        elif c.name == "file":
            exprs.append("$file")
            same.add(c.name)
        elif c.name == "format":
            exprs.append("'" + fmt.name + "'")
            same.add(c.name)
        elif c.name == "extra" and "extra" in provided and not keys:
            exprs.append("m.extra")  # the lines with unknown keys: `_merged_by_line`
        elif c.name == "extra":
            merged = _merge_sql("m.text", mapped_keys)
            own = "m.extra" if "extra" in provided else merged
            exprs.append(f"CASE WHEN m.line IN (SELECT line FROM unknown) THEN {merged} "
                         f"ELSE {own} END")
        elif c.name in provided:
            exprs.append(f"CAST(m.{c.name} AS {c.sql_type})")
        elif c.name == "action_key" and "action" in provided and keys:
            # the same call with other ids in it is the same call (normalise.py)
            exprs.append(key_sql("m.action", "m.args" if "args" in provided else "NULL"))
        elif c.name == "result_key" and "result" in provided and keys:
            exprs.append(key_sql("m.result"))
        else:  # NULL (a computed key column without `keys`: filled in later)
            exprs.append(f"CAST(NULL AS {c.sql_type})")
            same.add(c.name)
    cols = ", ".join(f"{e} AS {c.name}" for e, c in zip(exprs, COLUMNS, strict=True)
                     if constants or c.name not in same)
    return f"SELECT {cols} FROM ({select}) m"


def _merge_sql(text: str, mapped_keys: frozenset[str]) -> str:
    """SQL: the JSON object `text` without the keys turned into columns (NULL when none is
    left): the exact `extra` of a line with keys the format does not know."""
    # keys may come from the data (generic format): JSON-encode them, then quote for SQL
    nulls = db.sql_literal(json.dumps({k: None for k in sorted(mapped_keys)}))
    return f"nullif(CAST(json_merge_patch({text}, {nulls}) AS VARCHAR), '{{}}')"


def _merged_by_line(table: pa.Table, unknown: pa.Table) -> pa.Table:
    """`table` with `extra` replaced by `unknown.merged` on the rows of `unknown.line`."""
    if not unknown.num_rows or not table.num_rows:
        return table
    known_lines = db.arrow_numpy(unknown["line"])
    order = np.argsort(known_lines, kind="stable")
    lines = db.arrow_numpy(table["line"])
    at = np.minimum(np.searchsorted(known_lines, lines, sorter=order), len(order) - 1)
    hit = known_lines[order[at]] == lines
    values = unknown["merged"].take(db.numpy_arrow(order[at[hit]])).combine_chunks()
    column = table.schema.get_field_index("extra")
    extra = pc.replace_with_mask(table["extra"].combine_chunks(), db.numpy_arrow(hit), values)
    return table.set_column(column, table.schema.field(column), extra)


def _with_constants(table: pa.Table, schema: pa.Schema, values: dict[str, str]) -> pa.Table:
    """`table`, the columns of a mapping that differ from row to row (`_mapped_sql` without
    `constants`), with the others in `schema`'s order: `values` on every row (the file, the
    format), NULL in the rest."""
    columns = []
    for f in schema:
        if f.name in table.column_names:
            columns.append(table[f.name])
        elif f.name in values:
            columns.append(pa.repeat(db.strings_arrow([values[f.name]])[0].cast(f.type),
                                     table.num_rows))
        else:
            columns.append(pa.nulls(table.num_rows, f.type))
    return pa.Table.from_arrays(columns, schema=schema)


def _keys_by_value(con: duckdb.DuckDBPyConnection, table: pa.Table,
                   computed: dict[str, tuple[str, ...]]) -> pa.Table:
    """`table` with each computed key column (`key_sql` of its source columns) filled in,
    computed once per distinct value of its sources and spread to the rows in Arrow: a
    chunk of 131,575 bproxy lines holds 2,392 distinct (action, args) pairs, and masking
    every row (five regular expressions, twice) cost a third of its mapping. A row whose
    first source is NULL has no key (`key_sql`), so only the others are sorted for their
    distinct values (a bproxy log's results are NULL on 99 rows in 100)."""
    for name, sources in computed.items():
        codes = np.zeros(table.num_rows, dtype=np.int64)
        for source in sources:  # each row's distinct sources as one integer
            encoded = pc.dictionary_encode(table[source], null_encoding="encode").combine_chunks()
            codes = codes * (len(encoded.dictionary) + 1) + db.arrow_numpy(encoded.indices)
        rows = np.flatnonzero(db.arrow_numpy(table[sources[0]].is_valid()))
        _, first, inverse = np.unique(codes[rows], return_index=True, return_inverse=True)
        distinct = table.select(list(sources)).take(db.numpy_arrow(rows[first]))
        numbered = distinct.append_column("_i", db.numpy_arrow(np.arange(len(first))))
        with db.registered(con, "_distinct", numbered):
            keys = db.arrow(con, f"SELECT {key_sql(*sources)} AS k FROM _distinct ORDER BY _i"
                            )["k"]
        if len(keys) != len(first):
            raise RuntimeError("the keys of distinct values came back in another number")
        at = np.full(table.num_rows, -1, dtype=np.int64)  # each row's key, -1: none (NULL)
        at[rows] = inverse.reshape(-1)
        column = table.schema.get_field_index(name)
        table = table.set_column(column, table.schema.field(column),
                                 keys.take(db.numpy_arrow(at, mask=at < 0)).cast(
                                     table.schema.field(column).type))
    return table


_PROVIDED: dict[str, set[str]] = {}  # the columns of each mapping SELECT (LIMIT 0: 2-4 ms)


def _provided(con: duckdb.DuckDBPyConnection, select: str) -> set[str]:
    if select not in _PROVIDED:
        if len(_PROVIDED) > 256:  # a long-running process that saw many mappings
            _PROVIDED.clear()
        _PROVIDED[select] = set(con.sql(f"SELECT * FROM ({select}) LIMIT 0").columns)
    return _PROVIDED[select]


def _time_warnings(missing_ts: int, back: int, largest_step) -> list[str]:
    out = []
    if missing_ts:
        out.append(f"{missing_ts:,} events have no readable timestamp: kept, but left out of "
                   "rate and timing analysis")
    if back:
        out.append(f"{back:,} events are earlier than the line before them (largest step "
                   f"back {largest_step}): the views sort by time where order matters")
    return out


def _next_id(store: Store, table: str, column: str) -> int:
    return _cache(store).take_id(table)


def _commit(store: Store, con: duckdb.DuckDBPyConnection, path: Path, shown: str, fmt: Format,
            known: Known | None, input_id: int, state: ReadState, rejected: list[Rejected],
            digest: str, head_bytes: bytes, ended_without_newline: bool, first_offset: int,
            range_sha: str, compressed: bool, batch_id: int, events_file: str | None,
            events: int, replace: bool = False, sha_state: bytes | None = None,
            tail: bytes = b"", ts_range: tuple = (None, None)) -> None:
    """Write the quarantine's Parquet file, then make the batch visible in one catalog
    transaction: until it commits, the batch's files are orphans the next run deletes. The
    catalog records each file's SHA-256 as it was written (`verify` re-hashes them), and the
    files become read-only on disk (`Store.seal`)."""
    ev_rel, qu_rel = events_file, None
    if rejected:
        qu_rel = f"quarantine/{input_id:05d}-{batch_id:07d}.parquet"
        store.intend(qu_rel)
        _write_quarantine(con, store, qu_rel, [(shown, r) for r in rejected])
    sealed = store.seal(*(rel for rel in (ev_rel, qu_rel) if rel))
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    with store.catalog_connection() as cat:
        with _transaction(cat):
            first_seen = cat.execute("SELECT first_seen FROM inputs WHERE input_id = ?",
                                     [input_id]).fetchall()
            known_now, row = _input_row(input_id, path.resolve(), shown, fmt, digest, state,
                                        head_bytes, ended_without_newline, sha_state, tail,
                                        first_seen[0][0] if first_seen else now, now)
            cat.execute("DELETE FROM inputs WHERE input_id = ?", [input_id])
            replaced = []
            if replace:  # a rewritten whole document: its earlier rows no longer stand
                replaced = [f for files in cat.execute(
                    "SELECT events_file, quarantine_file FROM batches WHERE input_id = ?",
                    [input_id]).fetchall() for f in files if f]
                cat.execute("DELETE FROM batches WHERE input_id = ?", [input_id])
                cat.execute("DELETE FROM outcomes WHERE event_id >> 32 = ?", [input_id])
                # a file other inputs' batches share stays (a group's: never a companion's)
                replaced = [f for f in replaced if not cat.execute(
                    "SELECT count(*) FROM batches WHERE events_file = $f OR quarantine_file = $f",
                    {"f": f}).fetchall()[0][0]]
            cat.execute(f"INSERT INTO inputs ({', '.join(INPUT_FIELDS)}) "
                        f"VALUES ({', '.join('?' * len(INPUT_FIELDS))})", row)
            if ev_rel or qu_rel:
                cat.execute(f"INSERT INTO batches ({', '.join(BATCH_FIELDS)}) "
                            f"VALUES ({', '.join('?' * len(BATCH_FIELDS))})",
                            [batch_id, input_id, ev_rel, qu_rel, first_offset, state.next_offset,
                             0, state.next_line, events, len(rejected), range_sha, now, *ts_range,
                             sealed.get(ev_rel), sealed.get(qu_rel)])
        cache = _cache(store)
        cache.remember(known_now)
        if replace:
            cache.files_of = _events_files_by_input(cat, store)
    if replace:
        for rel in replaced:  # no longer listed; a kill before this leaves them to the next run
            (store.root / rel).unlink(missing_ok=True)
    elif ev_rel:
        cache.files_of.setdefault(input_id, []).append(str((store.root / ev_rel).resolve()))


# What the catalog records of an input, and of a batch, in the order of `_input_row` and of
# the batch rows: named, so that columns a later version adds to the tables cannot shift them.
INPUT_FIELDS = ("input_id", "path", "display_path", "format", "compression", "sha256", "bytes",
                "lines", "head_sha256", "head_len", "pending_offset", "pending_length",
                "pending_preview", "ended_without_newline", "first_seen", "last_read",
                "sha_state", "tail_sha256", "head_lines_sha256")
BATCH_FIELDS = ("batch_id", "input_id", "events_file", "quarantine_file", "first_offset",
                "end_offset", "first_line", "end_line", "events", "quarantined", "sha256",
                "committed", "min_ts", "max_ts", "events_sha256", "quarantine_sha256")


def _input_row(input_id: int, path: Path, shown: str, fmt: Format, digest: str,
               state: ReadState, head_bytes: bytes, ended_without_newline: bool,
               sha_state: bytes | None, tail: bytes, first_seen: dt.datetime,
               now: dt.datetime) -> tuple[Known, list]:
    """What the catalog will say of an input once this read commits: as the ingest's cache
    keeps it, and as the row of `inputs` (INPUT_FIELDS). `path` is resolved."""
    head_len = min(HEAD_LEN, len(head_bytes))
    pending = state.partial
    known = Known(input_id, str(path), digest, state.next_offset, state.next_line - 1,
                  hashlib.sha256(head_bytes[:head_len]).hexdigest(), head_len,
                  ended_without_newline, fmt.name, sha_state,
                  hashlib.sha256(tail).hexdigest() if tail else None,
                  _lines_sha256(head_bytes[:head_len]))
    return known, [input_id, known.path, shown, fmt.name, compression_of(path), digest,
                   known.bytes, known.lines, known.head_sha256, head_len,
                   pending.byte_offset if pending else None,
                   pending.byte_length if pending else 0, pending.preview if pending else None,
                   ended_without_newline, first_seen, now, sha_state, known.tail_sha256,
                   known.lines_sha256]


@contextlib.contextmanager
def _transaction(cat: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """One catalog transaction, rolled back when anything in it fails: the catalog's cursor
    is shared with the uses that follow (`_CatalogHold`), which must not find it open."""
    cat.execute("BEGIN")
    try:
        yield
    except BaseException:
        cat.execute("ROLLBACK")
        raise
    cat.execute("COMMIT")


def _write_quarantine(con: duckdb.DuckDBPyConnection, store: Store, relative: str,
                      rejected: list[tuple[str, Rejected]]) -> None:
    """The quarantine's Parquet file: (file as shown, line) pairs, each file's lines in order."""
    ordered = sorted(range(len(rejected)), key=lambda i: (rejected[i][0], rejected[i][1].line))
    rows = [rejected[i] for i in ordered]
    table = pa.table({c.name: _quarantine_column(c, [_qvalue(r, c.name, shown) for shown, r in rows])
                      for c in QUARANTINE_COLUMNS})
    target = db.sql_literal(str(store.root / relative))
    cast = ", ".join(f"CAST({c.name} AS {c.sql_type}) AS {c.name}" for c in QUARANTINE_COLUMNS)
    with db.registered(con, "_q", table):
        con.execute(f"COPY (SELECT {cast} FROM _q) TO {target} (FORMAT parquet)")


def _quarantine_column(column: Column, values: list) -> pa.Array:
    """One column of the quarantine's rows as Arrow: numbers or strings."""
    if column.sql_type == "BIGINT":
        return db.numpy_arrow(np.array(values, dtype=np.int64))
    return db.strings_arrow(values)


def _qvalue(r: Rejected, name: str, shown: str):
    if name == "file":
        return shown
    if name == "line":
        return r.line
    return getattr(r, name)


def verify_inputs(store: Store) -> list[tuple[str, int, str, str]]:
    """(path, bytes, recorded SHA-256, verdict) for every input: `same`, `changed` or `gone`."""
    with store.catalog_connection(read_only=True) as con:
        rows = con.execute("SELECT path, bytes, sha256 FROM inputs ORDER BY path").fetchall()
    out = []
    for path, nbytes, sha in rows:
        try:
            with open_binary(Path(path)) as stream:
                h = Sha256()
                left = nbytes
                while left:
                    chunk = stream.read(min(left, 8 * 1024 * 1024))
                    if not chunk:
                        break
                    h.update(chunk)
                    left -= len(chunk)
            verdict = "same" if not left and h.hexdigest() == sha else "changed"
        except (OSError, EOFError):
            verdict = "gone"
        out.append((path, nbytes, sha, verdict))
    return out


def verify_store_files(store: Store) -> list[tuple[str, int, str, str]]:
    """(path, bytes, SHA-256, verdict) for every file the catalog lists as committed (each
    batch's events and quarantine, each saved run's files): re-hashed and compared with the
    SHA-256 recorded when it was committed: `same`, `changed`, `gone`, or `no hash recorded`
    (committed by a version that did not record it: not a failure). The hash shown is the
    recorded one, or the file's own when none was."""
    with store.catalog_connection(read_only=True) as con:
        have = {r[0] for r in con.execute(  # a store written before the hashes were recorded
            "SELECT table_name || '.' || column_name FROM duckdb_columns() "
            "WHERE database_name = current_database()").fetchall()}

        def hashed(column: str) -> str:
            return column if f"batches.{column}" in have else "CAST(NULL AS VARCHAR)"

        rows = con.execute(
            f"SELECT events_file, {hashed('events_sha256')} FROM batches "
            "WHERE events_file IS NOT NULL UNION ALL "
            f"SELECT quarantine_file, {hashed('quarantine_sha256')} FROM batches "
            "WHERE quarantine_file IS NOT NULL").fetchall()
        run_files = sorted(c.split(".", 1)[1] for c in have
                           if c.startswith("findings_runs.") and c.endswith("_file"))
        if run_files:
            sealed = "sealed_files.file" in have
            listed = " UNION ALL ".join(f"SELECT {c} AS file FROM findings_runs" for c in run_files)
            rows += con.execute(
                f"SELECT f.file, {'s.sha256' if sealed else 'CAST(NULL AS VARCHAR)'} "
                f"FROM ({listed}) f "
                f"{'LEFT JOIN sealed_files s USING (file)' if sealed else ''} "
                "WHERE f.file IS NOT NULL").fetchall()
    out = []
    for rel, recorded in sorted(set(rows)):
        path = store.root / rel
        try:
            with open(path, "rb") as fh:
                now = hashlib.file_digest(fh, "sha256").hexdigest()
        except OSError:
            out.append((str(path), 0, recorded or "", "gone"))
            continue
        verdict = ("no hash recorded" if recorded is None
                   else "same" if now == recorded else "changed")
        out.append((str(path), path.stat().st_size, recorded or now, verdict))
    return out


def verify_parquet_files(store: Store) -> list[tuple[str, int, str, str]]:
    """(path, bytes, SHA-256, verdict) for every Parquet file of a store without a catalog:
    `readable` when its footer and every row group decode, else `unreadable: why`."""
    out = []
    for sub in ("events", "quarantine", "findings"):
        for path in sorted((store.root / sub).glob("*.parquet")):
            h = Sha256()
            with open(path, "rb") as fh:
                while chunk := fh.read(8 * 1024 * 1024):
                    h.update(chunk)
            try:
                reader = pq.ParquetFile(path)
                for i in range(reader.num_row_groups):
                    reader.read_row_group(i)
                verdict = "readable"
            except (OSError, ValueError, pa.ArrowException) as exc:
                verdict = f"unreadable: {exc}"
            out.append((f"{sub}/{path.name}", path.stat().st_size, h.hexdigest(), verdict))
    return out

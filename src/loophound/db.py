"""DuckDB connections set up the one way loophound needs them."""

from __future__ import annotations

import atexit
import itertools
import os
import re
import shutil
import tempfile
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from .errors import ConfigError

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa


def sql_literal(value: str) -> str:
    """A string we built (a path, a name), quoted as a SQL literal. Never for log content:
    that is always bound as a parameter."""
    return "'" + value.replace("'", "''") + "'"


def sql_list(values) -> str:
    """[`'a'`, `'b'`] as a DuckDB list literal."""
    return "[" + ", ".join(sql_literal(v) for v in values) + "]"


def one_of(column: str, values: str = "$ids") -> str:
    """SQL: `column` is one of the values of the list `values` (a parameter), for fetching a
    few events by id. Written as a semi-join on the list unnested, which DuckDB evaluates in
    the Parquet scan, so the other columns are read only for the rows that match;
    `list_contains` (or IN with a list) only skips row groups by their statistics, and every
    row of the others is read, then filtered (40 events by id of the incident's 1.27 M: 0.012
    s of CPU against 0.033, the calls' arguments and results among the columns)."""
    return f"{column} IN (SELECT unnest({values}))"


# DuckDB's memory: LOOPHOUND_MEMORY_LIMIT (a DuckDB size: "2GB", "512MiB") overrides the default
MEMORY_ENV = "LOOPHOUND_MEMORY_LIMIT"
MIN_MEMORY, MAX_MEMORY = 256 * 2**20, 2**30
_SIZE = re.compile(r"\s*\d+(\.\d+)?\s*([KMGT]i?B|B|bytes)?\s*", re.IGNORECASE)


def memory_limit(share: float = 1.0) -> str:
    """How much memory DuckDB may use before it writes to its spill folder: an eighth of the
    machine's memory, between 256 MiB and 1 GiB (`share` of that), unless
    LOOPHOUND_MEMORY_LIMIT says otherwise.

    Why not DuckDB's own default (80 % of the machine): loophound is a command run beside
    other work, and what it keeps in DuckDB (a scan's per-event tables, ingest's look-back
    index) grows with the log: at 10× the incident (12.7 M lines) a scan held 3.9 GB, most
    of it tables DuckDB can just as well spill. Why not less: spilling costs time, and at
    512 MiB attribution at 10× spilled most of its tables (its CPU time 18 s → 31 s, and
    three times the wall time), while at 1 GiB it stays about as fast as unbounded."""
    given = _given_limit()
    return given if given else f"{int(_budget() * share) // 2**20}MiB"


def _given_limit() -> str:
    given = os.environ.get(MEMORY_ENV, "").strip()
    if given and not _SIZE.fullmatch(given):
        raise ConfigError(f"{MEMORY_ENV}={given!r} is not a size such as 2GB or 512MiB")
    return given


def _budget() -> int:
    """An eighth of the machine's memory, between MIN_MEMORY and MAX_MEMORY, in bytes."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):  # not on every system: the upper bound
        total = 8 * MAX_MEMORY
    return min(max(total // 8, MIN_MEMORY), MAX_MEMORY)


# DuckDB's share of the budget during a scan; the rest is for what Python holds beside it
SCAN_SHARE = 9 / 16


def leave_room_for_python(con: duckdb.DuckDBPyConnection) -> str:
    """Bound DuckDB (the whole database of `con`) to SCAN_SHARE of `memory_limit()`, unless
    LOOPHOUND_MEMORY_LIMIT sets DuckDB's bound itself; returns the bound.

    Why: the budget is the process's, and during a scan Python holds, beside DuckDB, the
    interpreter and its libraries (about 150 MB) and a detector's arrays (a chunk of the
    stuck detectors' actions, or one storm's: about 300 MB at 10× the incident), while
    attribution's tables fill DuckDB to its bound: at 1 GiB a scan of 10× the incident
    peaked at 1.26-1.38 GB, at 640 MiB 0.91-0.99 GB, at 576 MiB (9/16) 0.91 GB. Attribution
    spills more there: its CPU time at 10×, single runs under load, 19.9-23.0 s at 1 GiB,
    21.0 s at 576 MiB, 38.2 s at 512 MiB (docs/benchmarks.md); a log that fits is not
    slowed."""
    return _bound(con, SCAN_SHARE)


def use_whole_budget(con: duckdb.DuckDBPyConnection) -> str:
    """Give DuckDB (the whole database of `con`) all of `memory_limit()` again; returns it.

    Why: a scan's bound (`leave_room_for_python`) is the whole shared database's, so in a
    process that goes on after a scan (`watch`: ingest, scan, ingest, ...) the next ingest
    would run at the scan's share. Ingest holds little in Python beside DuckDB."""
    return _bound(con, 1.0)


def _bound(con: duckdb.DuckDBPyConnection, share: float) -> str:
    bound = memory_limit(share)
    con.execute(f"SET memory_limit = {sql_literal(bound)}")
    return bound


_SPILL: list[str] = []  # this process's spill folder, made on first use, removed at exit
_SPILL_PREFIX = "loophound-spill-"


def spill_folder() -> str:
    """Where a new database writes what does not fit in `memory_limit()`: a folder of its own
    (two DuckDB databases in one process would write the same temporary file names), in one
    private folder per process under the system's temporary folder (DuckDB's default, `.tmp`
    in the current folder, would litter wherever loophound is run), removed at exit. The
    folders of processes that were killed before they could remove theirs go the first
    time another needs one."""
    if not _SPILL:
        _remove_orphaned_spill_folders()
        _SPILL.append(tempfile.mkdtemp(prefix=f"{_SPILL_PREFIX}{os.getpid()}-"))
        atexit.register(shutil.rmtree, _SPILL[0], True)
    return tempfile.mkdtemp(dir=_SPILL[0])


def _remove_orphaned_spill_folders() -> None:
    for path in Path(tempfile.gettempdir()).glob(f"{_SPILL_PREFIX}*-*"):
        pid = path.name.removeprefix(_SPILL_PREFIX).partition("-")[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:  # its process is gone
            shutil.rmtree(path, ignore_errors=True)
        except OSError:  # alive, or another user's
            continue


def connect(database: str = ":memory:", read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """A connection that works in UTC and never draws DuckDB's own progress bar on stdout
    (it would corrupt `--format csv` output and cron mail); an in-memory database uses at
    most `memory_limit()` and spills the rest to `spill_folder()`."""
    con = duckdb.connect(database, read_only=read_only)
    con.execute("SET enable_progress_bar = false")
    if database == ":memory:":
        con.execute(f"SET memory_limit = {sql_literal(memory_limit())}")
        folder = spill_folder()
        con.execute(f"SET temp_directory = {sql_literal(folder)}")
        weakref.finalize(con, shutil.rmtree, folder, True)  # when the database goes
        con.execute("SET TimeZone = 'UTC'")
        # a store's Parquet files are written once, each under a new name (and DuckDB checks
        # a file's modification time): their footers need not be parsed again for every view
        # and query over them, which costs a scheduled scan 1 ms a statement
        con.execute("SET parquet_metadata_cache = true")
    return con


def temp_table(con: duckdb.DuckDBPyConnection, name: str,
               columns: dict[str, tuple[str, list]]) -> None:
    """The temporary table `name` made from Python lists (column: (SQL type, values)), in one
    statement: inserting row by row costs 0.3 ms a row."""
    cols = ", ".join(f"CAST(unnest(${c}) AS {t}) AS {c}" for c, (t, _) in columns.items())
    con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT {cols}",
                {c: values for c, (_, values) in columns.items()})


@contextmanager
def registered(con: duckdb.DuckDBPyConnection, name: str, rows: pa.Table) -> Iterator[str]:
    """`rows` readable in `con`'s SQL as `name` meanwhile (DuckDB reads the Arrow data in
    place), and no longer after, whatever the statements did."""
    con.register(name, rows)
    try:
        yield name
    finally:
        con.unregister(name)


def arrow(con: duckdb.DuckDBPyConnection, sql: str, params: dict | None = None) -> pa.Table:
    """The rows of one query as an Arrow table, the query parsed, bound and planned once.

    `con.sql(sql).to_arrow_table()` does all that twice: once to make the relation (its
    columns are known before it runs) and again to run it. For ingest's mapping of a part
    of a chunk, a long SELECT run 22 times per 235 MB log, the first pass was 5 ms of the
    part's 29 ms of fixed cost. DuckDB's Python package runs a query once this way itself
    (`DuckDBPyConnection._submit`, what a relation's `to_arrow_table` calls); where a
    release has no such call, the relation does it."""
    if _SUBMIT:
        return con._submit(sql, params, "arrow", ARROW_BATCH_ROWS).arrow_table()
    return con.sql(sql, params=params).to_arrow_table()


# rows per record batch of `arrow`: what `to_arrow_table` gives by default
ARROW_BATCH_ROWS = 131072
_SUBMIT = hasattr(duckdb.DuckDBPyConnection, "_submit")


def insert_arrow(con: duckdb.DuckDBPyConnection, table: str, rows: pa.Table) -> None:
    """`rows` (the columns of `table`, in its order) added to `table`."""
    with registered(con, "_insert_rows", rows):
        con.execute(f"INSERT INTO {table} SELECT * FROM _insert_rows")


@dataclass
class _Attached:
    cursor: duckdb.DuckDBPyConnection  # default database: the file
    alias: str
    read_only: bool
    users: int = 1


class _Host:
    """One in-memory DuckDB that database files are attached to for the moment they are used.

    Why: in DuckDB 2.0 `duckdb.connect(file)` costs about 30 ms, `ATTACH` about 2 ms, and a scan
    looks at the store's catalog a dozen times. Detaching releases the file's lock, so other
    processes see the catalog free between uses exactly as with a connection per use. Uses of
    a file while it is attached share one cursor (a new cursor, its settings and `USE` cost
    several milliseconds). For one thread: loophound's other threads never attach a file
    (reading lines ahead and writing Parquet do not touch DuckDB; a scan's second lane of
    detectors reads through a cursor of its own, `store.sibling`)."""

    def __init__(self) -> None:
        self.con: duckdb.DuckDBPyConnection | None = None
        self.attached: dict[str, _Attached] = {}
        self.names = itertools.count(1)

    def cursor(self) -> duckdb.DuckDBPyConnection:
        if self.con is None:
            self.con = connect()
        return self.con.cursor()

    def acquire(self, path: str, read_only: bool) -> duckdb.DuckDBPyConnection:
        entry = self.attached.get(path)
        if entry is not None:
            if entry.read_only and not read_only:
                raise RuntimeError(f"{path} is open read-only in this process; "
                                   "it cannot be written while that lasts")
            entry.users += 1
            return entry.cursor
        cur = self.cursor()
        alias = f"file_{next(self.names)}"
        mode = "READ_ONLY" if read_only else "READ_WRITE"
        try:
            cur.execute(f"ATTACH {sql_literal(path)} AS {alias} ({mode})")
        except BaseException:
            cur.close()
            raise
        cur.execute("SET enable_progress_bar = false")
        cur.execute(f"USE {alias}")
        self.attached[path] = _Attached(cur, alias, read_only)
        return cur

    def release(self, path: str) -> None:
        entry = self.attached[path]
        entry.users -= 1
        if entry.users == 0:
            del self.attached[path]
            entry.cursor.execute("USE memory")
            entry.cursor.execute(f"DETACH {entry.alias}")
            entry.cursor.close()


_HOST = _Host()


def scratch() -> duckdb.DuckDBPyConnection:
    """An in-memory connection for one job's temporary tables and views (ingest's chunks, a
    scan's views): a cursor on the shared host, whose temporary tables, views and registered
    data are its own, because a new database costs 30 ms. Not for a connection whose
    settings get locked (`sql`): those are the whole database's."""
    return session(_HOST.cursor())


def session(cur: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """`cur` (a new cursor) set up as every loophound connection is: UTC, no progress bar."""
    cur.execute("SET enable_progress_bar = false")
    cur.execute("SET TimeZone = 'UTC'")
    return cur


@contextmanager
def hosting(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """Meanwhile, database files (the catalog) are attached to `con`'s own database when the
    process has no shared one yet: the `sql` sandbox then reads the catalog with the one
    DuckDB database it makes, not two (each costs 30 ms, several times that on a busy
    machine). Every use of a file ends, and detaches it, before `con` is handed on."""
    if _HOST.con is not None:
        yield
        return
    _HOST.con = con
    try:
        yield
    finally:
        _HOST.con = None


def is_attached(path: str) -> bool:
    """Whether the shared database has the DuckDB file at `path` attached at this moment (a
    use of `open_file` is in progress)."""
    return path in _HOST.attached


@contextmanager
def open_file(path: str, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection whose default database is the DuckDB file at `path`. Nested uses of one
    file share its attachment and its cursor; the file is detached (and unlocked) when the
    last one ends. Raises duckdb.IOException when another process holds the file. For one
    thread at a time: the catalog is used by the thread that holds the store's write lock."""
    cur = _HOST.acquire(path, read_only)
    try:
        yield cur
    finally:
        _HOST.release(path)


# Arrow types whose values numpy holds as they are (booleans are unpacked from their bits),
# by name: `loophound sql` imports this module, and no numpy
_NUMPY_OF_ARROW = {"int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64",
                   "uint8": "uint8", "uint16": "uint16", "uint32": "uint32", "uint64": "uint64",
                   "float": "float32", "double": "float64", "bool": "bool"}

# Why the helpers below, not pyarrow's own `pa.array(...)` and `to_numpy()`: those import
# pandas when it is installed (pyarrow asks whether a value is a pandas Series), and the import
# costs 0.3-2 s of CPU on these machines, on the critical path of every ingest and scan. A
# user's program may use pandas beside loophound: loophound never hides it, it only does not
# ask for it.


def one_array(column) -> pa.Array:
    """An Arrow column (Array or ChunkedArray) as one Array, without importing pandas (what
    `combine_chunks` does on a column of no chunks)."""
    import pyarrow as pa

    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks() if column.num_chunks else pa.nulls(0, column.type)
    return column


def arrow_numpy(column, unused_nulls: bool = False, null=None) -> np.ndarray:
    """An Arrow column (Array or ChunkedArray) as numpy, what `to_numpy()` gives, without
    importing pandas. Numbers and booleans are read from Arrow's buffer (numbers without
    NULLs without a copy); anything else (strings, NULLs with neither option below) goes
    through `to_numpy()`.
    `unused_nulls`: the caller reads none of the NULL rows (it picks others), so the column
    is read as if it had none (their slots hold anything).
    `null`: the value of the NULL rows, what `pc.fill_null(column, null)` would give."""
    import numpy as np

    column = one_array(column)
    dtype = _NUMPY_OF_ARROW.get(str(column.type))
    if dtype is None or (column.null_count and not unused_nulls and null is None):
        return column.to_numpy(zero_copy_only=False)
    values = _bits(column.buffers()[1], column) if dtype == "bool" else np.frombuffer(
        column.buffers()[1], dtype, count=len(column),
        offset=column.offset * np.dtype(dtype).itemsize)
    if column.null_count and null is not None:
        values = np.where(_bits(column.buffers()[0], column), values, null).astype(dtype)
    return values


def _bits(buffer, column) -> np.ndarray:
    """The bits of `column` (its offset, its length) in an Arrow bitmap, as numpy booleans."""
    import numpy as np

    if not len(column):
        return np.zeros(0, bool)
    bits = np.unpackbits(np.frombuffer(buffer, np.uint8), bitorder="little")
    return bits[column.offset:column.offset + len(column)].astype(bool)


def numpy_arrow(values, type=None, mask=None) -> pa.Array:
    """A numpy array of numbers or booleans as an Arrow array, what `pa.array(values, type,
    mask=mask)` gives, without importing pandas. `type`: the Arrow type (a number or
    bool type; by default the one of `values`' dtype), to which the values are converted
    (raises OverflowError where one does not fit); `mask`: True where the value is NULL."""
    import numpy as np
    import pyarrow as pa

    values = np.asarray(values)
    type = pa.from_numpy_dtype(values.dtype) if type is None else type
    dtype = _NUMPY_OF_ARROW.get(str(type))
    if dtype is None or values.ndim != 1:
        raise TypeError(f"numpy_arrow reads one-dimensional numbers or booleans, not "
                        f"{values.dtype}[{values.ndim}] as {type}")
    converted = values.astype(dtype, copy=False)
    if np.dtype(dtype).kind in "iu" and converted is not values and not np.array_equal(
            converted, values):
        raise OverflowError(f"values of {values.dtype} do not fit in {type}")
    nulls, validity = 0, None
    if mask is not None and (mask := np.asarray(mask, dtype=bool)).any():
        nulls, validity = int(mask.sum()), pa.py_buffer(np.packbits(~mask, bitorder="little"))
    data = np.packbits(converted, bitorder="little") if dtype == "bool" else converted
    return pa.Array.from_buffers(type, len(values), [validity, pa.py_buffer(
        np.ascontiguousarray(data))], null_count=nulls)


def strings_arrow(values) -> pa.Array:
    """Python strings (None: NULL) as an Arrow large_string array, without importing pandas
    (`pa.array(values)` does)."""
    import numpy as np
    import pyarrow as pa

    encoded = [b"" if v is None else v.encode("utf-8") for v in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, encoded), np.int64, len(encoded)), out=offsets[1:])
    mask = np.fromiter((v is None for v in values), bool, len(encoded))
    validity = pa.py_buffer(np.packbits(~mask, bitorder="little")) if mask.any() else None
    return pa.LargeStringArray.from_buffers(len(encoded), pa.py_buffer(offsets),
                                            pa.py_buffer(b"".join(encoded)), validity,
                                            null_count=int(mask.sum()))

"""Where loophound may write: anywhere but over evidence.

Every file a command writes at a user's word (a report, findings JSON, alerts, a query's
result, a saved run's folder) goes through `check_output` first, and files written whole go
through `atomic_file`. A path named by mistake — the log being investigated, the store's
catalog, one of its Parquet files, a folder inside a store — would otherwise be overwritten,
and `verify` would then fail on the evidence the command was asked to read. Refusing is cheap
(a few `stat` calls and, for a store with a catalog, one read-only query of its inputs);
overwriting evidence cannot be undone.

Writing to a temporary file in the target's folder and renaming it into place means a failure
half way (a full disk, Ctrl-C) leaves the old file or the new one, never half of one, and a
target that is a hard link to some other file replaces the link, not the other file's bytes.
"""

from __future__ import annotations

import contextlib
import glob
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from .errors import OutputRefused, StoreBusy
from .store import Store

_RUN_FILE_PREFIXES = ("run-", "findings-", "finding-events-", "attribution-", "inputs-",
                      "outcomes-", "skipped-")


def _resolved(path: Path) -> Path:
    """`path` made absolute with its symlinks followed, as far as it exists."""
    try:
        return path.expanduser().resolve()
    except (OSError, RuntimeError):  # a symlink loop: compare it as written
        return Path(os.path.abspath(path.expanduser()))


def _store_around(target: Path) -> Path | None:
    """The store folder `target` is (or is inside), if any: a folder holding a catalog, or a
    copy of a store's Parquet folders (`Store.exists`)."""
    for folder in (target, *target.parents):
        with contextlib.suppress(OSError):
            if folder.is_dir() and Store(folder).exists():
                return folder
    return None


def _is_run_file(target: Path) -> bool:
    """One of a saved run's files, in a folder of saved runs (`scan --findings-dir`)."""
    return (target.name.startswith(_RUN_FILE_PREFIXES) and target.exists()
            and any(target.parent.glob("run-*.json")))


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def store_inputs(store: Store) -> list[str]:
    """The logs a store was read from (absolute paths as recorded); a copy without its
    catalog, the paths its saved runs recorded. Empty when the store records none or
    cannot be read (a busy catalog is no reason to refuse an output)."""
    import duckdb

    from . import db

    try:
        if store.catalog.exists():
            with store.catalog_connection(read_only=True) as con:
                return [r[0] for r in con.execute("SELECT path FROM inputs WHERE path IS NOT NULL")
                        .fetchall()]
        files = sorted(str(p) for p in store.root.glob("findings/inputs-*.parquet"))
        if not files:
            return []
        with db.open_file(":memory:") as con:
            return [r[0] for r in con.execute(
                f"SELECT DISTINCT path FROM read_parquet({db.sql_list(files)}, "
                "union_by_name = true) WHERE path IS NOT NULL").fetchall()]
    except (duckdb.Error, OSError, LookupError, StoreBusy):
        return []


def _named_inputs(paths: Iterable[str]) -> tuple[list[Path], list[Path]]:
    """The files and folders a command's PATH arguments name (globs expanded)."""
    files, folders = [], []
    for given in paths:
        matches = glob.glob(os.path.expanduser(given), recursive=True) \
            if glob.has_magic(given) else [given]
        for m in matches:
            p = Path(m)
            (folders if p.is_dir() else files).append(p)
    return files, folders


def check_output(target: str | os.PathLike, option: str, store: Store | None = None,
                 inputs: Iterable[str] = ()) -> Path:
    """Raise `OutputRefused` when writing `target` (named by `option`, e.g. `--out`) could
    change evidence: it is (or is inside) a store folder, `store` itself or anything in it,
    a log `store` was read from, or a log the command reads (`inputs`: its PATH arguments,
    files, folders or globs). Returns `target` as a Path."""
    target = Path(target)
    if str(target) == "-":
        return target
    where = _resolved(target)
    own = _resolved(store.root) if store is not None else None

    def refuse(why: str) -> None:
        raise OutputRefused(f"{option} {target} {why}: loophound never writes over evidence; "
                            "choose a path outside the store and away from the logs it reads "
                            "(e.g. reports/)")

    if own is not None and (where == own or own in where.parents):
        refuse(f"is inside the store {store.root}" if where != own else "is the store folder")
    around = _store_around(where)
    if around is not None:
        refuse(f"is inside the store folder {around}" if around != where else
               "is a store folder")
    if _is_run_file(where):
        refuse(f"is a file of a saved scan in {where.parent}")
    ident = _identity(where)
    files, folders = _named_inputs(inputs)
    for p in files:
        if _resolved(p) == where or (ident is not None and _identity(p) == ident):
            refuse(f"is {p}, a log this command reads")
    if ident is not None:
        for folder in folders:
            if _resolved(folder) in where.parents:
                refuse(f"is a file in {folder}, a folder of logs this command reads")
    if store is not None and ident is not None:  # a file that is not there is no log
        for recorded in store_inputs(store):
            if Path(recorded) == where or _identity(recorded) == ident:
                refuse(f"is {recorded}, a log the store {store.root} was read from")
    return target


@contextlib.contextmanager
def atomic_file(target: str | os.PathLike, binary: bool = False) -> Iterator[IO]:
    """A file to write `target` through: a temporary file in its folder (created), renamed
    into place when the block ends without an error, removed when it does not."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".loophound-tmp",
                               dir=target.parent)
    try:
        with (os.fdopen(fd, "wb") if binary
              else os.fdopen(fd, "w", encoding="utf-8", newline="")) as fh:
            yield fh
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_atomically(target: str | os.PathLike, data: str | bytes) -> int:
    """Write `data` to `target` whole or not at all (see `atomic_file`); returns its size in
    bytes."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with atomic_file(target, binary=True) as fh:
        fh.write(raw)
    return len(raw)


__all__ = ["atomic_file", "check_output", "store_inputs", "write_atomically"]

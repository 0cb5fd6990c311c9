"""One error hierarchy for everything a user can get wrong.

`UserError` and its subclasses are a person's mistake or a condition of their machine (a bad
option, a mapping key that does not exist, a store that is busy, read-only or full): the CLI
prints their message in one sentence and exits 2. Anything else that escapes is a bug in
loophound and is reported as one (exit 3). Library code raises these; only the CLI's edge
turns them into messages, so the API raises the same errors a notebook can catch.
"""

from __future__ import annotations

import errno
import os
import re


class LoophoundError(Exception):
    """The base of every error loophound raises on purpose."""


class UserError(LoophoundError):
    """A mistake the user can fix (exit status 2): the message says what and where."""

    exit_code = 2


class ConfigError(UserError):
    """A detector setting, option value or config file that cannot be used."""


class MappingError(UserError):
    """A mapping file that cannot be read or names something loophound does not know."""


class FormatError(UserError):
    """A log format that does not exist or cannot read the files it was forced on."""


class QueryError(UserError):
    """A named query that does not exist, has a bad header, or was given a bad parameter."""


class ReadOnlyViolation(UserError):
    """A statement that could change something: refused before it runs."""


class NotALog(UserError):
    """Inputs none of which is a log loophound reads (an empty folder, a CSV, a picture)."""


class StoreError(UserError):
    """Something about a store that stops a command (missing, busy, read-only, full)."""


class StoreMissing(StoreError):
    """No store at the path given."""


def no_store(root: object) -> StoreMissing:
    """The one way every command and the library say there is no store at `root`, and what
    makes one."""
    return StoreMissing(f"no loophound store at {root}: make one with `loophound scan PATH "
                        f"--store {root}` (or `loophound ingest PATH --store {root}`), or point "
                        "--store at a store or a folder of its Parquet files")


class StoreBusy(StoreError):
    """Another process holds the store's write lock (and the user asked not to wait)."""


class StoreReadOnly(StoreError):
    """A store that may not be written: a copy without its catalog (evidence), or a folder on
    a read-only file system. Reading commands work on it; writing ones say so."""


class InputError(UserError):
    """A path the user named that cannot be read."""


class OutputRefused(UserError):
    """An output path that is evidence (a log read, a store's file or folder): never written."""


# The machine's conditions an OSError can stand for: not a bug, so said in one sentence (exit 2).
_CONDITIONS = {
    errno.ENOSPC: "cannot write{path}: no space left on device; free some space (or write "
                  "elsewhere) and run again",
    errno.EDQUOT: "cannot write{path}: the disk quota is used up; free some space (or write "
                  "elsewhere) and run again",
    errno.EROFS: "cannot write{path}: the file system is read-only; choose a writable --store "
                 "or output path",
    errno.EACCES: "permission denied{on}; give your user access to it or choose another path",
    errno.EPERM: "operation not permitted{on}; give your user access to it or choose another "
                 "path",
}


def machine_condition(exc: BaseException) -> UserError | None:
    """A full disk, a read-only file system or a permission refused, as a UserError naming the
    path; None for any other exception (which stays a bug). Some libraries raise something
    else with the system's words in the message (pyarrow an OSError without an errno, DuckDB
    its IOException: "Could not write file ...: No space left on device"), or raise their own
    error from the OSError: the exception's causes and their messages count too."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        found = _condition(exc)
        if found is not None:
            return found
        exc = exc.__cause__ or exc.__context__
    return None


def _condition(exc: BaseException) -> UserError | None:
    code = exc.errno if isinstance(exc, OSError) else None
    if code is None:
        code = next((c for c in _CONDITIONS if os.strerror(c) in str(exc)), None)
    if code not in _CONDITIONS:
        return None
    paths = [os.fsdecode(p) for p in (getattr(exc, "filename", None),
                                      getattr(exc, "filename2", None))
             if isinstance(p, (str, bytes))]
    if not paths:  # DuckDB names it in its message: Could not write file "PATH": ...
        paths = re.findall(r'file "([^"]+)"', str(exc))[:1]
    where = f" {' -> '.join(paths)}" if paths else ""
    return UserError(_CONDITIONS[code].format(path=where, on=f" on{where}" if where else ""))

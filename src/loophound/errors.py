"""One error hierarchy for everything a user can get wrong.

`UserError` and its subclasses are a person's mistake or a condition of their machine (a bad
option, a mapping key that does not exist, a store that is busy, read-only or full): the CLI
prints their message in one sentence and exits 2. Anything else that escapes is a bug in
loophound and is reported as one (exit 3). Library code raises these; only the CLI's edge
turns them into messages, so the API raises the same errors a notebook can catch.
"""

from __future__ import annotations


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


class StoreError(UserError):
    """Something about a store that stops a command (missing, busy, read-only, full)."""


class StoreMissing(StoreError):
    """No store at the path given."""


class StoreBusy(StoreError):
    """Another process holds the store's write lock (and the user asked not to wait)."""


class StoreReadOnly(StoreError):
    """A store that may not be written: a copy without its catalog (evidence), or a folder on
    a read-only file system. Reading commands work on it; writing ones say so."""


class InputError(UserError):
    """A path the user named that cannot be read."""

"""Settings of the whole process that loophound changes while it works and puts back after.

A library shares its process with its caller (a notebook, a service), so a setting that
makes one command faster is held only while a command runs, counted so that several at once
(ingests side by side, a read's mapping threads) share one change, and put back when the
last is done.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Callable, Iterator
from typing import Any


class WhileInUse:
    """A setting of the whole process, changed while anything uses it and put back when the
    last user is done: `change(*args)` changes it and returns what to put back (None: it did
    not change), `restore(before, *args)` puts that back. `using()` is a context manager
    and, without arguments, a decorator."""

    def __init__(self, change: Callable[..., Any], restore: Callable[..., Any]):
        self.change, self.restore = change, restore
        self.lock = threading.Lock()
        self.users = 0
        self.before: Any = None

    def enter(self, *args: Any) -> None:
        with self.lock:
            if self.users == 0:
                self.before = self.change(*args)
            self.users += 1

    def leave(self, *args: Any) -> None:
        with self.lock:
            self.users -= 1
            if self.users == 0 and self.before is not None:
                self.restore(self.before, *args)
                self.before = None

    @contextlib.contextmanager
    def using(self, *args: Any) -> Iterator[None]:
        self.enter(*args)
        try:
            yield
        finally:
            self.leave(*args)


def _pause_gc() -> bool | None:
    """Python's cycle collector off; True when it was on (None: it was off already)."""
    if not gc.isenabled():
        return None
    gc.disable()
    return True


def _resume_gc(_before: bool) -> None:
    gc.enable()


# The cycle collector paused while a scan runs. A scan makes few objects that outlive a
# moment but many that die young (query results, rows as tuples, a forest of small lists);
# those allocations set off full collections, each of which walks every object the imports
# made (numpy, pyarrow, DuckDB's Python layer): 30-35 ms a scan of the incident, 2 % of its
# CPU samples, for no garbage. What cycles a scan leaves are collected once it is done.
GC_PAUSED = WhileInUse(_pause_gc, _resume_gc)

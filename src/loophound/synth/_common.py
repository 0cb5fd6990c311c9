"""Helpers every synthetic format shares: seeded randomness, ids, clocks and file writing.

Each scenario draws from its own named random stream, so switching an incident off leaves the
healthy background byte-identical: that is what makes a clean twin a twin.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import random
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

UTC = dt.UTC
H = TypeVar("H")


def stream(seed: int, name: str) -> random.Random:
    """An independent, reproducible random stream for one part of one scenario."""
    return random.Random(f"{seed}:{name}")


@contextmanager
def own_stream(holder: H, rng: random.Random) -> Iterator[H]:
    """`holder` (a writer with an `rng`) drawing from `rng` for a while: what it writes then
    leaves every other line of its log as it was (an addition to a scenario, a decoy in its
    twin, does not reshuffle the ids and times drawn after it)."""
    saved = holder.rng  # type: ignore[attr-defined]
    holder.rng = rng  # type: ignore[attr-defined]
    try:
        yield holder
    finally:
        holder.rng = saved  # type: ignore[attr-defined]


def uuid4(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def hex_id(rng: random.Random, n: int) -> str:
    return f"{rng.getrandbits(4 * n):0{n}x}"


def sha256_hex(*parts: object) -> str:
    return hashlib.sha256(":".join(map(str, parts)).encode()).hexdigest()


def iso_ms(epoch_ms: int) -> str:
    """Epoch milliseconds as ISO-8601 UTC with a `Z`, the way answer keys state times."""
    t = dt.datetime.fromtimestamp(epoch_ms / 1000, UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{epoch_ms % 1000:03d}Z"


def epoch_ms(text: str) -> int:
    """ISO-8601 (with offset or `Z`) to epoch milliseconds."""
    return int(dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def write_lines(path: Path, lines: Iterable[str]) -> int:
    """Write one record per line, newline-terminated; return how many lines were written."""
    lines = list(lines)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        fh.write("".join(line + "\n" for line in lines))
    return len(lines)

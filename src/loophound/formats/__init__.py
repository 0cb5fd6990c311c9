"""The format registry: every log format loophound reads, registered in this one place.

Adding a format is one new module with a ``FORMAT`` object, and one line in ``_MODULES``.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import FormatError
from ..registry import present
from .base import Format, FormatContext

_MODULES = ("bproxy", "sven", "labtrust", "hooks", "claude_code", "codex", "otlp", "trajectory",
            "chat_history",
            "generic")


def _load() -> dict[str, Format]:
    found = {m.FORMAT.name: m.FORMAT for m in present(__name__, _MODULES)}
    return dict(sorted(found.items(), key=lambda kv: (kv[1].priority, kv[0])))


FORMATS: dict[str, Format] = _load()

SNIFF_LINES = 50
BOM = b"\xef\xbb\xbf"  # a UTF-8 byte order mark some editors put before the first line


class UnknownFormat(FormatError):
    """A --format name that is not registered."""


def get(name: str) -> Format:
    try:
        return FORMATS[name]
    except KeyError:
        raise UnknownFormat(
            f"unknown format {name!r}; known formats: {', '.join(FORMATS)}"
        ) from None


def sample_records(head: bytes, limit: int = SNIFF_LINES) -> list[dict]:
    """The first parseable JSON objects of a file: what sniffing looks at."""
    records = []
    for raw in head.removeprefix(BOM).split(b"\n")[:limit]:
        try:
            value = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError):  # deep nesting: not a sample
            continue
        if isinstance(value, dict):
            records.append(value)
    return records


def sniff(head: bytes, path: Path) -> Format | None:
    """The first registered format that recognises the file's first lines, or None."""
    records = sample_records(head)
    for fmt in FORMATS.values():
        try:
            if fmt.sniff(records, path) or (
                    fmt.sniff_head is not None and fmt.sniff_head(head.removeprefix(BOM), path)):
                return fmt
        except (TypeError, ValueError, AttributeError, KeyError):
            # a value of a shape the recogniser did not foresee (an `event` that is an
            # object): not this format's line, and never a crash
            continue
    return None


__all__ = ["FORMATS", "Format", "FormatContext", "UnknownFormat", "get", "sniff"]

"""The outline of a whole-file JSON document, found by a streaming scan of its bytes.

A file that is one JSON document (an agent's trajectory: `{"info": ..., "messages": [...]}`,
or a bare list of events) is not a log of lines: its records are the elements of a list
inside it. Ingest maps records as it maps lines, by their place in the file, so what is
needed is where each element starts and ends, in bytes, never a re-serialisation (which
would move every offset, and the report quotes the file's own bytes at those offsets).

The scan is a tokenizer of strings and the six structural characters (a regular expression,
so Python looks at each string once, not at each byte), with a depth counter: the members of
one container, each with its key (objects) and its byte range. It tolerates a cut-off head
(the first 64 KiB a format is recognised by): members the data ends inside have no end, and
an unterminated string ends the scan.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

# a string (escapes included; one the data ends inside runs to the end), or a structural byte
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*\\?(?:"|\Z)|[\[\]{},:]', re.S)
_SPACE = b" \t\r\n"
BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class Member:
    """One member of a container: its key (None in a list) and where its value is."""

    key: str | None
    start: int  # offset of the value's first byte
    end: int | None  # offset just past its last byte; None when the data ends inside it

    def opens(self, data: bytes) -> bytes:
        """The value's first byte: `{`, `[`, `"`, a digit, `t`, `f`, `n`."""
        return data[self.start:self.start + 1]


def skip_space(data: bytes, pos: int) -> int:
    while pos < len(data) and data[pos] in _SPACE:
        pos += 1
    return pos


def top(data: bytes) -> int | None:
    """Offset of the document's opening `{` or `[` (after a byte order mark and white
    space), or None when the data is not a JSON container."""
    pos = skip_space(data, len(BOM) if data.startswith(BOM) else 0)
    return pos if data[pos:pos + 1] in (b"{", b"[") else None


def members(data: bytes, start: int) -> tuple[list[Member], int | None]:
    """The members of the container opening at `data[start]`, and the offset just past its
    closing byte (None when the data ends first)."""
    is_object = data[start:start + 1] == b"{"
    found: list[Member] = []
    depth = 0
    key: str | None = None
    value_at: int | None = None if is_object else skip_space(data, start + 1)
    pending_key: bytes | None = None  # a string at depth 0 of an object, until its `:`
    for m in _TOKEN.finditer(data, start + 1):
        tok = m.group()
        c = tok[:1]
        if c == b'"':
            if len(tok) < 2 or not tok.endswith(b'"') or (tok.endswith(b'\\"')
                                                         and _escaped_end(tok)):
                break  # the data ends inside a string
            if depth == 0 and is_object and value_at is None:
                pending_key = tok
            continue
        if depth == 0 and c == b":" and is_object:
            key = _key(pending_key)
            pending_key = None
            value_at = skip_space(data, m.end())
            continue
        if c in (b"{", b"["):
            depth += 1
            continue
        if c in (b"}", b"]"):
            if depth:
                depth -= 1
                continue
            _close(data, found, key, value_at, m.start(), is_object)
            return found, m.end()
        if c == b"," and depth == 0:
            _close(data, found, key, value_at, m.start(), is_object)
            key = None
            value_at = None if is_object else skip_space(data, m.end())
    if value_at is not None and value_at < len(data) and (key is not None or not is_object):
        found.append(Member(key, value_at, None))
    return found, None


def _escaped_end(tok: bytes) -> bool:
    """Whether the closing quote of `tok` is escaped (an odd run of backslashes before it):
    then the data ended inside the string."""
    n = len(tok) - 2 - len(tok[1:-1].rstrip(b"\\"))
    return n % 2 == 1


def _key(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, str) else None


def _close(data: bytes, found: list[Member], key: str | None, value_at: int | None, end: int,
           is_object: bool) -> None:
    """Record the member whose value ends before `end` (trailing white space left out)."""
    if value_at is None or (is_object and key is None):
        return
    stop = end
    while stop > value_at and data[stop - 1] in _SPACE:
        stop -= 1
    if stop > value_at:
        found.append(Member(key, value_at, stop))


def element_ranges(data: bytes, start: int) -> list[tuple[int, int]]:
    """The (offset, length) of each element of the list opening at `data[start]`: a
    document's records, at their own bytes. An element the data ends inside runs to the end
    of the data (it is then quarantined as invalid JSON)."""
    elements, _ = members(data, start)
    return [(m.start, (m.end if m.end is not None else len(data)) - m.start) for m in elements]


def value(data: bytes, member: Member, limit: int = 1 << 20):
    """The member's value parsed (None when it has no end, is over `limit` bytes or is not
    valid JSON): for the small facts of a document (its id, its model), not its steps."""
    if member.end is None or member.end - member.start > limit:
        return None
    try:
        return json.loads(data[member.start:member.end])
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None


def keys(data: bytes, member: Member) -> list[str]:
    """The keys of an object member (as far as the data goes), else []."""
    if member.opens(data) != b"{":
        return []
    inner, _ = members(data, member.start)
    return [m.key for m in inner if m.key is not None]


def trailing(data: bytes, end: int) -> bool:
    """True when anything but white space follows the document's end: not one document
    (JSON lines, say)."""
    return skip_space(data, end) < len(data)

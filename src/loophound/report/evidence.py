"""Quote evidence lines verbatim from the files they were read from.

The store keeps where each line is (file, byte offset, byte length in the decompressed
stream), not the line itself, so the report reads those bytes from disk. A file that is gone,
or whose first bytes differ from those hashed at ingest, is said to be so: a report never
quotes a line that may not be the one the finding was made from.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import duckdb

from .. import db
from ..formats import FORMATS
from ..lines import open_binary

MAX_QUOTE_BYTES = 4000


@dataclass
class Evidence:
    file: str
    line: int
    note: str | None = None
    text: str | None = None  # the line as it is in the file (decoded, newline stripped)
    byte_length: int | None = None
    truncated: bool = False
    problem: str | None = None  # why the line is not quoted


@dataclass
class _Input:
    input_id: int
    path: str
    display: str
    bytes: int
    head_sha256: str | None
    head_len: int
    document: bool = False  # one JSON document (a trajectory): its records are not lines


def _inputs(con: duckdb.DuckDBPyConnection) -> dict[int, _Input]:
    rows = con.execute("SELECT input_id, path, display_path, bytes, head_sha256, head_len, "
                       "format FROM _inputs ORDER BY input_id").fetchall()
    documents = {name for name, fmt in FORMATS.items() if fmt.records is not None}
    return {r[0]: _Input(r[0], r[1], r[2], r[3] or 0, r[4], r[5] or 0, r[6] in documents)
            for r in rows}


def _candidates(inp: _Input) -> list[str]:
    out = [inp.path] if inp.path else []
    if inp.display and inp.display not in out:
        out.append(inp.display)
    return out


def quote(con: duckdb.DuckDBPyConnection, wanted: list[tuple[str, int]]) -> dict[tuple[str, int],
                                                                                Evidence]:
    """Evidence for each (file, line) in `wanted`, keyed the same way."""
    out: dict[tuple[str, int], Evidence] = {k: Evidence(k[0], k[1]) for k in wanted}
    if not wanted:
        return out
    keys = sorted(set(wanted))
    db.temp_table(con, "_rep_wanted", {"file": ("VARCHAR", [k[0] for k in keys]),
                                       "line": ("BIGINT", [k[1] for k in keys])})
    # a line may hold several events (the spans of an OTLP export), each with a share of the
    # line's bytes: the line is where the first starts to where the last ends
    rows = con.execute(
        """SELECT e.file, e.line, min(e.byte_offset),
                  max(e.byte_offset + e.byte_length) - min(e.byte_offset),
                  CAST(e.event_id >> 32 AS INTEGER)
           FROM events e SEMI JOIN _rep_wanted w ON w.file = e.file AND w.line = e.line
           GROUP BY e.file, e.line, e.event_id >> 32
           ORDER BY min(e.event_id)""").fetchall()
    con.execute("DROP TABLE _rep_wanted")
    inputs = _inputs(con)
    by_input: dict[int, list[tuple[int, int, tuple[str, int]]]] = {}
    for file, line, offset, length, input_id in rows:
        by_input.setdefault(input_id, []).append((offset, length, (file, line)))
    found = {key for items in by_input.values() for _, _, key in items}
    for k, ev in out.items():
        if k not in found:
            ev.problem = "this line is not in the store"
    for input_id, items in sorted(by_input.items()):
        inp = inputs.get(input_id)
        if inp is None:
            for _, _, key in items:
                out[key].problem = "the store does not know the file this line came from"
            continue
        _read_file(inp, sorted(items), out)
    return out


def _read_file(inp: _Input, items: list[tuple[int, int, tuple[str, int]]],
               out: dict[tuple[str, int], Evidence]) -> None:
    problem = None
    path = next((p for p in _candidates(inp) if os.path.isfile(p)), None)
    if path is None:
        problem = f"{inp.display} is no longer where it was read ({inp.path}); line not quoted"
    else:
        try:
            with open_binary(Path(path)) as stream:
                problem = _read_lines(stream, inp, items, out)
        except OSError as exc:
            problem = f"cannot read {inp.display}: {exc.strerror or exc}"
    if problem:
        for _, _, key in items:
            out[key].problem = problem


def _read_exact(stream, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = stream.read(min(n - got, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _read_lines(stream, inp: _Input, items, out) -> str | None:
    buf = _read_exact(stream, inp.head_len)  # bytes [0, pos) while lines fall inside the head
    if inp.head_sha256 and hashlib.sha256(buf).hexdigest() != inp.head_sha256:
        return (f"{inp.display} has changed since it was read (its first bytes differ); "
                "lines not quoted")
    pos = len(buf)
    for offset, length, key in items:  # sorted by offset; lines never overlap
        take = min(length, MAX_QUOTE_BYTES)
        if offset < pos:
            if offset + take > pos:
                more = _read_exact(stream, offset + take - pos)
                buf += more
                pos += len(more)
            data = buf[offset:offset + take]
        else:
            _skip(stream, offset - pos)
            data = _read_exact(stream, take)
            pos = offset + len(data)
            buf = b""
        ev = out[key]
        ev.byte_length = length
        if len(data) < take:
            ev.problem = f"{inp.display} is shorter than when it was read; line not quoted"
            continue
        ev.truncated = length > take
        if not ev.truncated and not _ends_a_record(data, inp) and offset + length != inp.bytes:
            ev.problem = f"{inp.display} has changed since it was read; line not quoted"
            continue
        ev.text = data.decode("utf-8", errors="backslashreplace").rstrip("\r\n")
    return None


def _ends_a_record(data: bytes, inp: _Input) -> bool:
    """A line ends with its newline; a record of a whole document (a trajectory's step) is a
    JSON object, from its opening brace to its closing one."""
    if inp.document:
        return data[:1] == b"{" and data.endswith(b"}")
    return data.endswith(b"\n")


def _skip(stream, n: int) -> None:
    """Move forward `n` bytes: seek when the stream can, else read and discard."""
    if n <= 0:
        return
    try:
        if stream.seekable():
            stream.seek(n, os.SEEK_CUR)
            return
    except (OSError, AttributeError, ValueError):
        pass
    while n > 0:
        chunk = stream.read(min(n, 1 << 20))
        if not chunk:
            return
        n -= len(chunk)

"""Quote evidence lines verbatim from the files they were read from.

The store keeps where each line is (file, byte offset, byte length in the decompressed
stream), not the line itself, so the report reads those bytes from disk. A file that is gone,
or whose bytes no longer hash to the SHA-256 recorded at ingest, is said to be so: a report
never quotes a line that may not be the one the finding was made from.

The whole stretch read at ingest (bytes [0, `inputs.bytes`), which a log that grew since still
begins with) is hashed, not only its head: a log replaced by another of the same size, with
the same first lines, would otherwise have its new lines quoted as the old ones' evidence. And
the store is not trusted to name what to read: a shared copy's `inputs` may name any file
(a credentials file in the reader's home) and its events any byte range. Only bytes inside
the hashed stretch are quoted, and only when the file's content hashes to what the store
recorded — which the author of a copy cannot forge for a file they have not read.
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
    sha256: str | None  # of bytes [0, bytes): what is quoted must still hash to it
    document: bool = False  # one JSON document (a trajectory): its records are not lines


def _inputs(con: duckdb.DuckDBPyConnection) -> dict[int, _Input]:
    rows = con.execute("SELECT input_id, path, display_path, bytes, sha256, format "
                       "FROM _inputs ORDER BY input_id").fetchall()
    documents = {name for name, fmt in FORMATS.items() if fmt.records is not None}
    return {r[0]: _Input(r[0], r[1], r[2], r[3] or 0, r[4], r[5] in documents) for r in rows}


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


def _read_lines(stream, inp: _Input, items, out) -> str | None:
    """Read the stretch hashed at ingest once, hashing it and keeping the quoted lines' bytes
    as they pass; quote them only if the stretch still hashes to the SHA-256 recorded. Returns
    why nothing of the file is quoted, or None."""
    if not inp.sha256 or inp.bytes <= 0:
        return f"the store records no hash of {inp.display}; lines not quoted"
    wanted = [(offset, min(length, MAX_QUOTE_BYTES), length, key)
              for offset, length, key in items]  # sorted by offset; lines never overlap
    taken = {key: bytearray() for *_, key in wanted}
    digest = hashlib.sha256()
    pos, first = 0, 0  # `first`: the first line not wholly read yet
    while pos < inp.bytes:
        chunk = stream.read(min(inp.bytes - pos, 1 << 20))
        if not chunk:
            break
        digest.update(chunk)
        end = pos + len(chunk)
        i = first
        while i < len(wanted) and wanted[i][0] < end:
            offset, take, _, key = wanted[i]
            lo, hi = max(offset, pos), min(offset + take, end)
            if hi > lo:
                taken[key] += chunk[lo - pos:hi - pos]
            i += 1
        while first < len(wanted) and sum(wanted[first][:2]) <= end:
            first += 1
        pos = end
    if pos < inp.bytes:
        return f"{inp.display} is shorter than when it was read; lines not quoted"
    if digest.hexdigest() != inp.sha256:
        return (f"{inp.display} has changed since it was read (its content no longer hashes to "
                "the SHA-256 recorded); lines not quoted")
    for offset, take, length, key in wanted:
        ev, data = out[key], bytes(taken[key])
        ev.byte_length = length
        if offset < 0 or len(data) < take:
            ev.problem = (f"the store names bytes of {inp.display} beyond those it read; "
                          "line not quoted")
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

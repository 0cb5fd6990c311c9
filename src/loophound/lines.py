"""Split raw log bytes into lines without losing or misattributing a single byte.

Everything downstream relies on two facts this module guarantees: each line carries its exact
line number, byte offset and byte length in the (decompressed) file, and each line either
reaches the mapper as valid UTF-8 text or is reported as a `Rejected` line with a reason.
Splitting is vectorised with numpy; Python only touches lines that are wrong.
"""

from __future__ import annotations

import bz2
import codecs
import gzip
import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from .db import arrow_numpy, numpy_arrow

CHUNK_BYTES = 32 * 1024 * 1024
MAX_LINE_BYTES = 16 * 1024 * 1024
PREVIEW_BYTES = 200

COMPRESSED_SUFFIXES = {".gz": "gzip", ".zst": "zstd", ".bz2": "bzip2"}


# the columns of a batch of lines
LINES_SCHEMA = pa.schema([("line", pa.int64()), ("byte_offset", pa.int64()),
                          ("byte_length", pa.int32()), ("text", pa.large_string())])


@dataclass
class Rejected:
    """A line that cannot become an event, with the reason a person will read."""

    line: int
    byte_offset: int
    byte_length: int
    reason: str
    detail: str
    preview: str


@dataclass
class LineBatch:
    """Consecutive complete lines: an Arrow table ready for SQL, plus the lines rejected."""

    table: pa.Table  # line, byte_offset, byte_length, text
    rejected: list[Rejected] = field(default_factory=list)


@dataclass
class ReadState:
    """Where reading stopped: what the next run resumes from."""

    next_line: int = 1
    next_offset: int = 0
    partial: Rejected | None = None  # a last line with no newline yet (still being written?)
    tail: bytes = b""  # its bytes, when small enough to keep


def preview(raw: bytes) -> str:
    return raw[:PREVIEW_BYTES].decode("utf-8", errors="backslashreplace").rstrip("\r\n")


def compression_of(path: Path) -> str | None:
    return COMPRESSED_SUFFIXES.get(path.suffix.lower())


def open_binary(path: Path) -> io.RawIOBase | io.BufferedIOBase:
    """Open a log for reading, decompressing transparently by suffix."""
    kind = compression_of(path)
    if kind == "gzip":
        return gzip.open(path, "rb")
    if kind == "bzip2":
        return bz2.open(path, "rb")
    if kind == "zstd":
        import zstandard

        return zstandard.ZstdDecompressor().stream_reader(open(path, "rb"), read_across_frames=True)
    return open(path, "rb", buffering=0)


BOM = b"\xef\xbb\xbf"  # UTF-8 byte order mark
HEAD_LINES = 50  # complete lines a head holds, however long they are (up to HEAD_MAX_BYTES)
HEAD_MAX_BYTES = 16 * 1024 * 1024


def read_head(path: Path, n: int, lines: int = HEAD_LINES) -> bytes:
    """The first `n` bytes of a log, decompressed (fewer when it is shorter), and more until
    they hold `lines` complete lines or HEAD_MAX_BYTES: what format sniffing and automatic
    mapping look at, so a first line of 70 KiB (a long prompt) is still a line to look at.
    A damaged compressed file gives what could be read."""
    out = bytearray()
    with open_binary(path) as stream:
        while len(out) < HEAD_MAX_BYTES:
            want = n - len(out) if len(out) < n else max(n, len(out))
            try:
                chunk = stream.read(min(want, HEAD_MAX_BYTES - len(out)))
            except (OSError, EOFError):
                break
            if not chunk:
                break
            out += chunk
            if len(out) >= n and out.count(b"\n") >= lines:
                break
    return bytes(out)


def _utf8_bad_lines(data: memoryview, buf: np.ndarray, ends: np.ndarray) -> set[int]:
    """Indexes of lines that are not valid UTF-8. Fast paths: pure ASCII, or the chunk decodes."""
    bad: set[int] = set()
    if not len(buf) or buf.max() < 0x80:
        return bad
    pos = 0
    while pos < len(data):
        try:
            codecs.utf_8_decode(data[pos:], "strict", True)
            return bad
        except UnicodeDecodeError as exc:
            idx = int(np.searchsorted(ends, pos + exc.start, side="right"))
            bad.add(idx)
            pos = int(ends[idx]) if idx < len(ends) else len(data)
    return bad


def _classify(raw: bytes) -> tuple[str, str] | None:
    """Cheap checks that need no JSON parser; JSON validity is decided later, in SQL."""
    body = raw.strip()
    if not body:
        return ("blank", "empty line")
    if b"\x00" in body:
        return ("binary", "line contains NUL bytes: binary data, not JSON text")
    if not body.startswith(b"{"):
        return ("not_an_object", "line does not start with '{': not a JSON object")
    return None


# newlines are looked for in slices of this many bytes
NEWLINE_SLICE = 1 << 20


def _newlines(buf: np.ndarray) -> np.ndarray:
    """The positions of the newlines in `buf`, a slice at a time: a comparison of the whole
    32 MiB chunk at once is a fresh 32 MiB array every chunk, and its first touch (zeroed
    huge pages) cost more than the comparison; a slice's array is reused from the heap."""
    found = [np.flatnonzero(buf[i:i + NEWLINE_SLICE] == 10) + i
             for i in range(0, len(buf), NEWLINE_SLICE)]
    return np.concatenate(found) if found else np.empty(0, dtype=np.int64)


def split_chunk(
    data: bytes | bytearray, first_line: int, first_offset: int,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> tuple[LineBatch, bytes]:
    """Turn a chunk into a batch of complete lines; return the unterminated tail separately.
    The batch's text is `data` itself (not a copy): a bytearray passed in must not change
    while the batch lives."""
    buf = np.frombuffer(data, dtype=np.uint8)
    newlines = _newlines(buf)
    n = len(newlines)
    ends = newlines + 1  # exclusive end, newline included
    tail = bytes(data[int(ends[-1]) :] if n else data)
    starts = np.empty(n, dtype=np.int64)
    if n:
        # a byte order mark before the first line is not part of it (its bytes are still hashed)
        starts[0] = len(BOM) if first_offset == 0 and data.startswith(BOM) else 0
        starts[1:] = ends[:-1]
    lengths = ends - starts
    rejected: list[Rejected] = []
    keep = np.ones(n, dtype=bool)

    def reject(i: int, reason: str, detail: str) -> None:
        keep[i] = False
        s, e = int(starts[i]), int(ends[i])
        rejected.append(
            Rejected(first_line + i, first_offset + s, e - s, reason, detail, preview(data[s:e]))
        )

    for i in np.flatnonzero(lengths > max_line_bytes):
        reject(int(i), "line_too_long",
               f"line of {int(lengths[i]):,} bytes is over the {max_line_bytes:,}-byte limit "
               "(--max-line-bytes)")
    body = buf[: int(ends[-1])] if n else buf[:0]
    for i in sorted(_utf8_bad_lines(memoryview(data)[: len(body)], body, ends)):
        if keep[i]:
            reject(i, "invalid_utf8", "line is not valid UTF-8 text")
    # Lines not starting with '{' or holding NUL bytes are rare: numpy finds the candidates,
    # Python looks only at those.
    suspects = np.flatnonzero(buf[starts] != ord("{")) if n else np.empty(0, dtype=np.int64)
    if n and body.min() == 0:
        nul_lines = np.searchsorted(ends, np.flatnonzero(body == 0), side="right")
        suspects = np.union1d(suspects, nul_lines)
    for i in suspects:
        i = int(i)
        if not keep[i]:
            continue
        verdict = _classify(data[int(starts[i]) : int(ends[i])])
        if verdict:
            reject(i, *verdict)
    rejected.sort(key=lambda r: r.line)
    table = _arrow_lines(data, starts, ends, keep, first_line, first_offset)
    return LineBatch(table, rejected), tail


def records_batch(data: bytes, ranges: list[tuple[int, int]],
                  max_line_bytes: int = MAX_LINE_BYTES) -> LineBatch:
    """The records of one JSON document (each an (offset, length) in `data`) as a batch of
    lines: record n is line n, its bytes exactly those of the range (no newline of its own).
    A record that is too long, not UTF-8, binary or not an object is rejected as a line would
    be; JSON validity is decided later, in SQL, as for lines."""
    rows: list[tuple[int, int, int, bytes]] = []
    rejected: list[Rejected] = []
    for n, (offset, length) in enumerate(ranges, 1):
        raw = data[offset:offset + length]
        if length > max_line_bytes:
            rejected.append(Rejected(n, offset, length, "line_too_long",
                                     f"record of {length:,} bytes is over the "
                                     f"{max_line_bytes:,}-byte limit (--max-line-bytes)",
                                     preview(raw)))
            continue
        verdict = _classify(raw)
        if verdict is None:
            try:
                raw.decode("utf-8")
                rows.append((n, offset, length, raw))
                continue
            except UnicodeDecodeError:
                verdict = ("invalid_utf8", "record is not valid UTF-8 text")
        rejected.append(Rejected(n, offset, length, *verdict, preview(raw)))
    lengths = np.array([r[2] for r in rows], dtype=np.int64)
    table = pa.table({
        "line": numpy_arrow(np.array([r[0] for r in rows], dtype=np.int64)),
        "byte_offset": numpy_arrow(np.array([r[1] for r in rows], dtype=np.int64)),
        "byte_length": numpy_arrow(lengths, pa.int32()),
        "text": pa.LargeStringArray.from_buffers(
            len(rows), pa.py_buffer(np.concatenate(([0], np.cumsum(lengths)))),
            pa.py_buffer(b"".join(r[3] for r in rows))),
    }, schema=LINES_SCHEMA)
    return LineBatch(table, rejected)


def _arrow_lines(
    data: bytes, starts: np.ndarray, ends: np.ndarray, keep: np.ndarray,
    first_line: int, first_offset: int,
) -> pa.Table:
    """Zero-copy Arrow strings over the chunk: each value is one line, newline included;
    only the kept lines are copied out when some are not (those may not be UTF-8)."""
    idx = np.flatnonzero(keep)
    offsets = np.concatenate([starts[:1], ends]).astype(np.int64)
    text = pa.LargeStringArray.from_buffers(len(starts), pa.py_buffer(offsets),
                                            pa.py_buffer(data))
    if len(idx) != len(starts):
        text = text.filter(numpy_arrow(keep))
    return pa.table({
        "line": numpy_arrow(idx + first_line, pa.int64()),
        "byte_offset": numpy_arrow(starts[idx] + first_offset, pa.int64()),
        "byte_length": numpy_arrow((ends - starts)[idx], pa.int32()),
        "text": text,
    }, schema=LINES_SCHEMA)


class StopAtDamage:
    """A stream that ends where the data can no longer be read (a compressed file cut short
    while being rotated or copied), instead of raising: every complete line before that point
    is read and kept, and `damage` says what stopped it and where."""

    PIECE = 8192  # a decompressor that fails loses the piece it was making: keep them small

    def __init__(self, stream, offset: int = 0, compressed: bool = False):
        self.stream, self.offset, self.compressed = stream, offset, compressed
        self.damage: str | None = None

    def read(self, n: int = -1) -> bytes:
        if self.damage is not None:
            return b""
        if not self.compressed:
            return self._read(n)
        out = bytearray()
        while n < 0 or len(out) < n:
            piece = self._read(self.PIECE if n < 0 else min(self.PIECE, n - len(out)))
            if not piece:
                break
            out += piece
        return bytes(out)

    def readinto(self, buf: memoryview) -> int:
        """Read into `buf`: in place from a plain file, through `read` otherwise."""
        if self.damage is not None:
            return 0
        if self.compressed:
            data = self.read(len(buf))
            buf[: len(data)] = data
            return len(data)
        try:
            got = self.stream.readinto(buf) or 0
        except (OSError, EOFError) as exc:
            self.damage = f"{exc} (at decompressed byte {self.offset:,})"
            return 0
        self.offset += got
        return got

    def _read(self, n: int) -> bytes:
        try:
            data = self.stream.read(n)
        except (OSError, EOFError) as exc:
            self.damage = f"{exc} (at decompressed byte {self.offset:,})"
            return b""
        self.offset += len(data)
        return data

    def close(self) -> None:
        self.stream.close()


def read_lines(
    stream: io.RawIOBase | io.BufferedIOBase,
    state: ReadState,
    chunk_bytes: int = CHUNK_BYTES,
    max_line_bytes: int = MAX_LINE_BYTES,
    on_consumed: Callable[[bytes], None] | None = None,
    on_read: Callable[[int], None] | None = None,
    pipelined: int | None = None,
) -> Iterator[LineBatch]:
    """Yield batches of complete lines from `stream`, which is positioned at `state.next_offset`.

    Updates `state` as it goes and hands every consumed byte, in order, to `on_consumed` (the
    file's SHA-256 covers exactly what was read); a batch's bytes go to it once the batch is
    taken, so the hashing of a chunk runs while the one who took it works. A last line with
    no newline is not consumed: it is left in `state.partial` so that a writer still
    appending loses nothing.

    `pipelined`: the batches feed a pipeline (ingest's), and the stream holds this many bytes
    (0: not known): the chunks are sized for it (`pipeline_chunk_bytes`).
    """
    consumed = on_consumed or (lambda b: None)
    tail = b""
    oversized: Rejected | None = None  # a line longer than max_line_bytes, being skipped
    buffers = ChunkBuffers()
    done = 0  # bytes read so far
    while True:
        n = chunk_bytes if pipelined is None else pipeline_chunk_bytes(done, pipelined, chunk_bytes)
        data = _read_after(stream, tail, n, buffers)  # while skipping, tail is b""
        read = len(data) - len(tail)
        done += read
        if on_read and read:
            on_read(read)
        if not read:  # the end: what is left is the unterminated last line, if any
            break
        if oversized is not None:
            nl = data.find(b"\n")
            if nl < 0:
                oversized.byte_length += len(data)
                consumed(data)
                continue
            oversized.byte_length += nl + 1
            consumed(memoryview(data)[: nl + 1])
            yield LineBatch(_empty_table(), [oversized])
            state.next_line += 1
            state.next_offset += oversized.byte_length
            oversized = None
            data = data[nl + 1 :]
            if not data:  # the line ended with the bytes read: read on
                continue
        batch, tail = split_chunk(data, state.next_line, state.next_offset, max_line_bytes)
        used = len(data) - len(tail)
        state.next_line += batch.table.num_rows + len(batch.rejected)
        state.next_offset += used
        if batch.table.num_rows or batch.rejected:
            yield batch
        consumed(memoryview(data)[:used] if tail else data)
        if len(tail) > max_line_bytes:
            oversized = Rejected(
                state.next_line, state.next_offset, len(tail), "line_too_long",
                f"line longer than the {max_line_bytes:,}-byte limit (--max-line-bytes)",
                preview(tail),
            )
            consumed(tail)
            tail = b""
    if oversized is not None:
        # the oversized line never ended: it is the file's unterminated last line. Its bytes
        # were hashed as they streamed past; it is reported, and the watermark moves past it.
        oversized.reason = "truncated_last_line"
        oversized.detail = (f"last line has no newline and is over {max_line_bytes:,} bytes: "
                            "the file was cut off, or is still being written")
        yield LineBatch(_empty_table(), [oversized])
        state.next_line += 1
        state.next_offset += oversized.byte_length
        state.partial, state.tail = None, b""
    elif tail:
        state.partial = Rejected(
            state.next_line, state.next_offset, len(tail), "truncated_last_line",
            "last line has no newline: the file was cut off, or is still being written; "
            "it is read as soon as its line is complete", preview(tail),
        )
        state.tail = tail
    else:
        state.partial = None
        state.tail = b""


# a pipelined read's first chunk, and the least of its last ones
FIRST_CHUNK_BYTES = 4 * 1024 * 1024
LAST_CHUNK_BYTES = 8 * 1024 * 1024


def pipeline_chunk_bytes(done: int, total: int, chunk_bytes: int = CHUNK_BYTES) -> int:
    """How many bytes a pipelined read (`read_lines`) reads next, `done` of `total` read
    (0: not known). Ingest maps a chunk on two threads while one finishes the chunk before,
    so a core waits while the first chunk is read, split and hashed, and while the last one
    is finished alone. The first chunk is small (FIRST_CHUNK_BYTES), so the mapping starts
    at once; the others are `chunk_bytes`, but for the last ones, each half of what is left,
    so the last is small too (LAST_CHUNK_BYTES or a little more). Halves, because mapping a
    chunk costs about twice the CPU of finishing one of the same size: both cores stay at
    work. No smaller than LAST_CHUNK_BYTES: each part of a chunk costs its mapping about
    24 ms however few its lines (the mapping SELECT is planned again), about what a smaller
    last chunk would save (an estimate: a 4 MiB least was not measured apart from this)."""
    if done == 0:
        return min(FIRST_CHUNK_BYTES, chunk_bytes)
    left = total - done
    if total <= 0 or left <= 0:  # not known, or the file grew since
        return chunk_bytes
    least = min(LAST_CHUNK_BYTES, chunk_bytes)
    if left <= least + least // 2:
        return left
    return max(least, min(chunk_bytes, left // 2))


class ChunkBuffers:
    """The buffers a file's chunks are read into, each read into again once nothing holds it.
    A line batch's text is its chunk's buffer itself (not a copy), so a buffer is in use as
    long as anything exports it (an Arrow buffer, a memoryview, a numpy array over it); a
    resize of a buffer in use raises, which is how `_unused` asks. A fresh 32 MiB buffer a
    chunk was zeroed and then faulted in page by page: a fifth of ingest's page faults."""

    def __init__(self, keep: int = 8):
        self.keep = keep  # at most this many: chunks in flight (read ahead, mapped, split)
        self.buffers: list[bytearray] = []

    def take(self, size: int) -> bytearray:
        """A buffer of `size` bytes that nothing else holds; its bytes are any."""
        for buf in self.buffers:
            if _unused(buf):
                if len(buf) > size:
                    del buf[size:]
                elif len(buf) < size:
                    buf.extend(bytes(size - len(buf)))
                return buf
        buf = bytearray(size)
        if len(self.buffers) < self.keep:
            self.buffers.append(buf)
        return buf


def _unused(buf: bytearray) -> bool:
    try:
        buf.append(0)  # raises BufferError while anything exports `buf`
    except BufferError:
        return False
    del buf[-1]
    return True


def _read_after(stream, tail: bytes, n: int,
                buffers: ChunkBuffers | None = None) -> bytes | bytearray:
    """`tail`, then up to `n` bytes of `stream`, in one buffer: read in place where the
    stream can (a plain file), so no chunk is copied again to put its first line together
    (two 32 MB copies a chunk: one a tenth of the CPU of reading it); into one of
    `buffers` that nothing holds any more when there is one."""
    readinto = getattr(stream, "readinto", None)
    if readinto is None:
        return tail + stream.read(n) if tail else stream.read(n)
    buf = buffers.take(len(tail) + n) if buffers is not None else bytearray(len(tail) + n)
    buf[: len(tail)] = tail
    with memoryview(buf) as view:
        got = readinto(view[len(tail):]) or 0
    if got < n:
        del buf[len(tail) + got:]
    return buf


def complete_partial(raw_tail: bytes, state: ReadState) -> LineBatch | None:
    """Treat an unterminated last line as complete (one-shot ingest of a finished file)."""
    if not raw_tail:
        return None
    batch, _ = split_chunk(raw_tail + b"\n", state.next_line, state.next_offset)
    lengths = numpy_arrow(arrow_numpy(batch.table["byte_length"]) - 1, pa.int32())
    batch.table = batch.table.set_column(2, "byte_length", lengths)
    for r in batch.rejected:
        r.byte_length -= 1
    return batch


def _empty_table() -> pa.Table:
    return LINES_SCHEMA.empty_table()

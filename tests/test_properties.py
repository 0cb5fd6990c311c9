"""Property-based tests (hypothesis) of ingest's invariants on hostile input: random mixes of
valid lines of every format and hostile lines (invalid JSON and UTF-8, NUL, BOM, CRLF, absurd
numbers and times, deep nesting, duplicate keys, odd types in every field).

For every file: events + quarantined lines = lines; nothing crashes; ingesting again adds
nothing; and a planted incident is still found whatever is mixed into its log."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loophound.ingest import ingest
from loophound.store import Store

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_logs"
BPROXY = SAMPLES / "bproxy" / "2026-06-18.log"
STORM = json.loads((SAMPLES / "EXPECTED.json").read_text())["sections"]["bproxy"]["incidents"][0]


def _sample_lines(path: Path, n: int = 40) -> list[bytes]:
    return path.read_bytes().splitlines()[:n]


# A file of each format: where it must sit (sven knows its node by the folder) and real lines.
FORMATS = {
    "bproxy": ("bproxy/2026-06-18.log", _sample_lines(BPROXY)),
    "hooks": ("hooks/hooks.jsonl", _sample_lines(SAMPLES / "hooks" / "hooks.jsonl")),
    "labtrust": ("labtrust/episodes.jsonl", _sample_lines(SAMPLES / "labtrust" / "episodes.jsonl")),
    "sven": ("sven/node-b/peers/peer.jsonl",
             _sample_lines(next((SAMPLES / "sven" / "node-b" / "peers").glob("*.jsonl")))),
    "generic": ("generic/app.jsonl", [json.dumps({"timestamp": 1750000000 + k, "from": "a",
                                                  "to": "b", "error": "E"}).encode()
                                      for k in range(40)]),
}

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=30),
    st.sampled_from(["NaN", "1e400", "-1e400", "99999-12-31T00:00:00Z", "\u202e\x1b[2J",
                     "0000-00-00"]),
)
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=6)

hostile_raw = st.one_of(
    st.just(b"{not json"),
    st.just(b'{"a": "\xff\xfe"}'),  # invalid UTF-8
    st.just(b'{"a": 1}\x00\x00'),  # NUL
    st.just(b""),  # blank
    st.just(b"[1, 2, 3]"),
    st.just(b'"just a string"'),
    st.just(b"[" * 3000 + b"]" * 3000),
    st.just(b'{"a":' * 1500 + b"1" + b"}" * 1500),
    st.just(b'{"time": 1e16, "timestamp": 1e300, "t_s": 1e16, "ts": "NaN", "event": {"x": 1}}'),
    st.just(b'{"event": "received", "event": ["dup"], "time": "soon"}'),  # duplicate keys
    st.just(b'{"k\\ud800ey": 1}'),  # a lone surrogate escape in a key
    st.binary(max_size=40).filter(lambda b: b"\n" not in b and b"\r" not in b),
)


@st.composite
def mutated(draw, line: bytes) -> bytes:
    """A valid line with one field's value replaced by any JSON value."""
    record = json.loads(line)
    if not record:
        return line
    key = draw(st.sampled_from(sorted(record)))
    record[key] = draw(json_values)
    return json.dumps(record).encode()


@st.composite
def hostile_file(draw) -> tuple[str, bytes, int]:
    """(relative path, bytes, number of lines) of one format's file, salted with hostility."""
    name = draw(st.sampled_from(sorted(FORMATS)))
    where, lines = FORMATS[name]
    count = draw(st.integers(min_value=1, max_value=30))
    body = []
    for i in range(count):
        choice = draw(st.integers(min_value=0, max_value=9))
        valid = lines[i % len(lines)]
        if choice < 5:
            body.append(valid)
        elif choice < 8:
            body.append(draw(mutated(valid)))
        else:
            body.append(draw(hostile_raw))
    newline = b"\r\n" if draw(st.booleans()) else b"\n"
    data = newline.join(body)
    if draw(st.booleans()):
        data += newline  # else the last line is still being written
    if draw(st.integers(min_value=0, max_value=9)) == 0:
        data = b"\xef\xbb\xbf" + data
    n_lines = data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
    return where, data, n_lines


def _accounted(store: Store) -> dict[str, int]:
    con = store.connect()
    out: dict[str, int] = {}
    for view in ("events", "quarantine"):
        for file, n in con.execute(f"SELECT file, count(*) FROM {view} GROUP BY 1").fetchall():
            out[file] = out.get(file, 0) + n
    return out


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# one file per format: two files that start alike are one input's copies (see test_hostile)
@given(files=st.lists(hostile_file(), min_size=1, max_size=3, unique_by=lambda f: f[0]))
def test_every_line_is_an_event_or_quarantined_and_ingest_is_idempotent(files):
    with tempfile.TemporaryDirectory() as tmp:
        root, expected = Path(tmp) / "logs", {}
        for i, (where, data, n_lines) in enumerate(files):
            path = root / f"{i}" / where
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            expected[str(path)] = n_lines
        store = Store(Path(tmp) / "store")
        first = ingest([str(root)], store)  # never raises
        got = _accounted(store)
        for path, n_lines in expected.items():
            status = next(f for f in first.files if f.path == path)
            if status.status == "skipped":  # named, with its reason: nothing of it stored
                assert status.skipped_reason and got.get(path, 0) == 0
            else:
                assert got.get(path, 0) == n_lines, (path, status)
        again = ingest([str(root)], store)
        assert again.events == 0 and _accounted(store) == got


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(noise=st.lists(st.tuples(st.integers(min_value=0, max_value=3766), hostile_raw),
                      min_size=1, max_size=8))
def test_a_planted_storm_is_found_whatever_is_mixed_into_its_log(noise):
    from loophound.scan import scan_store

    lines = BPROXY.read_bytes().splitlines(keepends=True)
    for at, raw in sorted(noise, reverse=True):
        lines.insert(at, raw + b"\n")
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "2026-06-18.log"
        log.write_bytes(b"".join(lines))
        store = Store(Path(tmp) / "store")
        ingest([str(log)], store)
        assert sum(_accounted(store).values()) == len(lines)
        found = scan_store(store, save=False).document["findings"]
        storm = [f for f in found if f["detector"] == "repeated_error"]
        assert [f["events"] for f in storm] == [STORM["requests"]]


@settings(max_examples=150, deadline=None)
@given(lengths=st.lists(st.integers(min_value=0, max_value=40), min_size=1, max_size=30),
       last_newline=st.booleans(), chunk_bytes=st.integers(min_value=1, max_value=64),
       max_line_bytes=st.integers(min_value=4, max_value=40),
       pipelined=st.none() | st.integers(min_value=0, max_value=2000))
def test_read_lines_accounts_for_every_byte_at_any_chunk_size(lengths, last_newline,
                                                               chunk_bytes, max_line_bytes,
                                                               pipelined):
    """Whatever the chunk size and the line-length limit, and wherever a long line's end
    falls (the last byte of a read among them), every line is a line of the batch or a
    rejected one, in order, with its exact offset and length; what is handed on as consumed
    is exactly the file's bytes up to the watermark; an unterminated last line is pending.
    So too when the chunks are sized for ingest's pipeline (`pipelined`: the size the file
    was said to have, right or not)."""
    import hashlib
    import io

    from loophound.lines import ReadState, read_lines

    lines = [b"{" + b"x" * max(n - 1, 0) + b"\n" if n else b"\n" for n in lengths]
    if not last_newline:
        lines[-1] = lines[-1].rstrip(b"\n") or b"{"
    data = b"".join(lines)
    state, consumed = ReadState(), hashlib.sha256()
    seen: list[tuple[int, int, int]] = []
    for batch in read_lines(io.BytesIO(data), state, chunk_bytes=chunk_bytes,
                            max_line_bytes=max_line_bytes, on_consumed=consumed.update,
                            pipelined=pipelined):
        t = batch.table
        seen += zip(t["line"].to_pylist(), t["byte_offset"].to_pylist(),
                    t["byte_length"].to_pylist(), strict=True)
        seen += [(r.line, r.byte_offset, r.byte_length) for r in batch.rejected]
    expected, offset = [], 0
    for n, raw in enumerate(lines, 1):
        expected.append((n, offset, len(raw)))
        offset += len(raw)
    pending = state.partial is not None
    if pending:  # the unterminated last line, short enough to wait for its newline
        assert not last_newline and expected[-1][1:] == (state.partial.byte_offset,
                                                        state.partial.byte_length)
        expected = expected[:-1]
    assert sorted(seen) == expected
    assert state.next_line == len(expected) + 1 and state.next_offset == sum(
        e[2] for e in expected)
    assert consumed.digest() == hashlib.sha256(data[:state.next_offset]).digest()


@settings(max_examples=100, deadline=None)
@given(lengths=st.lists(st.integers(min_value=1, max_value=30), min_size=1, max_size=40),
       chunk_bytes=st.integers(min_value=1, max_value=64), held=st.lists(st.booleans()))
def test_a_chunk_buffer_is_read_into_again_only_when_no_batch_holds_it(lengths, chunk_bytes,
                                                                       held):
    """Chunks are read into buffers used again (`ChunkBuffers`), and a batch's text is its
    buffer itself: whichever batches a reader keeps and whichever it drops, every kept
    batch's lines are still the file's bytes when the file has been read to the end."""
    import io

    from loophound.lines import ReadState, read_lines

    data = b"".join(b"{" + bytes([97 + i % 26]) * (n - 1) + b"\n" for i, n in enumerate(lengths))
    kept = []
    for i, batch in enumerate(read_lines(io.BytesIO(data), ReadState(), chunk_bytes=chunk_bytes)):
        if held[i] if i < len(held) else i % 2:
            kept.append(batch)
    for batch in kept:
        t = batch.table
        for offset, length, text in zip(t["byte_offset"].to_pylist(),
                                        t["byte_length"].to_pylist(), t["text"].to_pylist(),
                                        strict=True):
            assert text.encode() == data[offset:offset + length]

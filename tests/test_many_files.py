"""Many small files are read together (one mapping pass, one events file, one catalog
transaction per group), and nothing about each file changes: its events, quarantined lines,
SHA-256, watermark and event ids are what reading it alone gives, appends to it are read
alone later, and a kill inside the group's commit leaves the store as it was."""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import loophound.ingest as ingest_module
from loophound.cli import app
from loophound.ingest import ingest
from loophound.store import Store

SAMPLES = Path(__file__).resolve().parents[1] / "sample_logs"
SOURCES = {  # format: (sample lines, a key the format knows, to make each file its own)
    "bproxy": (SAMPLES / "bproxy" / "2026-06-18.log", "hostname"),
    "hooks": (SAMPLES / "hooks" / "hooks.jsonl", "session_id"),
    "labtrust": (SAMPLES / "labtrust" / "episodes.jsonl", "episode_id"),
    "sven": (next((SAMPLES / "sven" / "node-b" / "peers").glob("*.jsonl")), "seq"),
}
HOSTILE = [b"{not json", b"", b"[1, 2, 3]", b'{"a": "\xff\xfe"}']


def small_logs(root: Path, per_format: int = 6, seed: int = 3) -> dict[Path, int]:
    """Small logs of every groupable format (3 to 20 lines; some gzipped, some with hostile
    lines, a byte order mark, CRLF, a last line without newline, complete or cut); returns
    each file with its number of lines."""
    rng = random.Random(seed)
    out: dict[Path, int] = {}
    for name, (sample, own) in SOURCES.items():
        records = [json.loads(line) for line in sample.read_text().splitlines()]
        for i in range(per_format):
            n = rng.randint(3, 20)
            start = rng.randrange(len(records) - n)
            lines = []
            for r in records[start:start + n]:
                lines.append(json.dumps(r | {own: f"{name}-{i}"} if own != "seq" else r).encode())
            if name == "sven":  # a node's store: the node is named by the folder
                path = root / "sven" / f"node-{i % 2}" / "peers" / f"peer-{i}.jsonl"
                lines[0] = json.dumps(json.loads(lines[0]) | {"seq": 1000 + i}).encode()
            else:
                path = root / name / f"{name}-{i}.{'log' if name == 'bproxy' else 'jsonl'}"
            if i == 1:
                lines.insert(1, rng.choice(HOSTILE))
            newline = b"\r\n" if i == 2 else b"\n"
            data = (b"\xef\xbb\xbf" if i == 3 else b"") + newline.join(lines) + newline
            if i == 4:
                data = data.rstrip(b"\n")  # a complete last line without its newline
            if i == 5:
                data += lines[0][:25]  # a last line still being written
            path.parent.mkdir(parents=True, exist_ok=True)
            if i == 0:
                path = path.with_name(path.name + ".gz")
                path.write_bytes(gzip.compress(data, mtime=0))
            else:
                path.write_bytes(data)
            out[path] = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    generic = root / "generic"
    generic.mkdir()
    for i in range(per_format):
        path = generic / f"app-{i}.jsonl"
        path.write_text("".join(json.dumps({"timestamp": 1750000000 + 60 * i + k, "from": "a",
                                            "to": f"b{k % 3}", "event": "ask",
                                            **({"surprise": k} if i == 1 else {})}) + "\n"
                                for k in range(rng.randint(3, 20))))
        out[path] = path.read_bytes().count(b"\n")
    return out


def contents(store: Store) -> dict[str, list]:
    """Everything the store says of its logs, in a stable order."""
    con = store.connect()
    return {
        "events": con.execute("SELECT * FROM events ORDER BY event_id").fetchall(),
        "quarantine": con.execute("SELECT * FROM quarantine ORDER BY file, line").fetchall(),
        "inputs": con.execute("SELECT * EXCLUDE (first_seen, last_read) FROM inputs "
                              "ORDER BY input_id").fetchall(),
        "requests": con.execute("SELECT * FROM requests ORDER BY event_id").fetchall(),
    }


def reported(report) -> list[tuple]:
    return sorted((f.path, f.format, f.status, f.events, dict(f.quarantined), f.lines,
                   f.sha256, f.new_bytes, sorted(f.warnings), f.pending and f.pending.line)
                  for f in report.files)


def each_alone(monkeypatch) -> None:
    """From now on every file is read on its own, as before files were read together."""
    monkeypatch.setattr(ingest_module, "GROUP_FILE_BYTES", 0)


def test_many_small_files_of_every_format_read_together_are_what_each_is_alone(
        tmp_path, monkeypatch):
    logs = tmp_path / "logs"
    lines = small_logs(logs)
    together, alone = Store(tmp_path / "together"), Store(tmp_path / "alone")
    report = ingest([str(logs)], together)
    assert {f.status for f in report.files} == {"new"}
    # one events file and one quarantine file for the lot, each listed once
    files = together.committed_files()
    assert len(files["events"]) == 1 and len(files["quarantine"]) == 1
    assert sorted(p.name for p in (together.root / "events").iterdir()) == [
        Path(files["events"][0]).name]
    # every line is an event or quarantined, with its file and line
    con = together.connect()
    per_file = dict(con.execute(
        "SELECT file, count(*) FROM (SELECT file FROM events UNION ALL "
        "SELECT file FROM quarantine) GROUP BY file").fetchall())
    assert per_file == {str(p): n for p, n in lines.items()}
    # each file's SHA-256 is that of its (decompressed) bytes up to its watermark
    for path, sha, nbytes in con.execute("SELECT path, sha256, bytes FROM inputs").fetchall():
        data = Path(path).read_bytes()
        data = gzip.decompress(data) if path.endswith(".gz") else data
        assert sha == hashlib.sha256(data[:nbytes]).hexdigest(), path
    # and all of it is what reading each file alone gives, to the event id
    each_alone(monkeypatch)
    assert reported(ingest([str(logs)], alone)) == reported(report)
    assert contents(alone) == contents(together)
    assert len(alone.committed_files()["events"]) == len(lines)


def test_appends_to_files_read_together_are_read_alone_later(tmp_path, monkeypatch):
    logs = tmp_path / "logs"
    small_logs(logs)
    grown = {  # a response to a request stored in the group, a later episode, new messages
        logs / "bproxy" / "bproxy-2.log": None, logs / "labtrust" / "labtrust-3.jsonl": None,
        logs / "generic" / "app-0.jsonl": None}
    pino = {"level": 30, "time": 1781826149999, "pid": 1, "id": "late-1", "ownerHash": "h",
            "hostname": "bproxy-2"}
    with (logs / "bproxy" / "bproxy-2.log").open("ab") as fh:  # a request still unanswered
        fh.write(json.dumps(pino | {"event": "received", "action": "scroll"}).encode() + b"\r\n")
    together, alone = Store(tmp_path / "together"), Store(tmp_path / "alone")
    ingest([str(logs)], together)
    with monkeypatch.context() as m:
        each_alone(m)
        ingest([str(logs)], alone)
    step = together.connect().execute(
        "SELECT line FROM events WHERE kind = 'step' AND file = ? LIMIT 1",
        [str(logs / "labtrust" / "labtrust-3.jsonl")]).fetchall()[0][0]
    for path in grown:
        text = path.read_bytes().splitlines(keepends=True)
        crlf = text[0].endswith(b"\r\n")
        if path.name.startswith("bproxy"):
            more = json.dumps(pino | {"event": "response", "ok": False, "elapsed_ms": 3,
                                      "error_code": "LATE"}).encode()
        elif path.name.startswith("labtrust"):
            more = text[step - 1].rstrip()  # its step again: t_s goes back, a new episode
        else:
            more = json.dumps({"timestamp": 1750009999, "from": "z", "to": "a"}).encode()
        grown[path] = more + (b"\r\n" if crlf else b"\n")
        with path.open("ab") as fh:
            fh.write(grown[path])
    report = ingest([str(logs)], together)
    changed = {f.path: (f.status, f.events, f.new_bytes) for f in report.files
               if f.status != "unchanged"}
    assert changed == {str(p): ("appended", 1, len(added)) for p, added in grown.items()}
    with monkeypatch.context() as m:
        each_alone(m)
        ingest([str(logs)], alone)
    assert contents(alone) == contents(together)
    answered = together.connect().execute(  # the answer found its request in the group's file
        "SELECT error, response_line FROM requests WHERE corr_id = 'late-1'").fetchall()
    assert answered == [("LATE", (logs / "bproxy" / "bproxy-2.log").read_bytes().count(b"\n"))]


def test_a_kill_inside_the_groups_commit_leaves_the_store_as_it_was(tmp_path, monkeypatch):
    logs = tmp_path / "logs"
    small_logs(logs)
    first = tmp_path / "first"
    shutil.move(logs / "hooks", first)  # read in an earlier run
    store = Store(tmp_path / "st")
    ingest([str(first)], store)
    before = contents(store)
    real = ingest_module._insert_rows

    def killed(cat, table, fields, rows):
        real(cat, table, fields, rows)
        if table == "batches":  # the inputs and the batches are in: then the process dies
            raise KeyboardInterrupt

    monkeypatch.setattr(ingest_module, "_insert_rows", killed)
    with pytest.raises(KeyboardInterrupt):
        ingest([str(logs), str(first)], store)
    assert contents(Store(store.root)) == before  # nothing of the group is visible
    orphans = set((store.root / "events").iterdir()) - {
        Path(f) for f in store.committed_files()["events"]}
    assert len(orphans) == 1  # written, journaled, never committed
    monkeypatch.undo()
    report = ingest([str(logs), str(first)], store)
    for kind in ("events", "quarantine"):  # the next writer removed it: what is left is listed
        assert set((store.root / kind).iterdir()) == {Path(f) for f in
                                                      store.committed_files()[kind]}
    assert {f.status for f in report.files if "hooks" in f.path} == {"unchanged"}
    again = Store(tmp_path / "again")
    ingest([str(first)], again)
    ingest([str(logs), str(first)], again)
    assert contents(store) == contents(again)
    assert CliRunner().invoke(app, ["verify", "--store", str(store.root)]).exit_code == 0


def test_copies_renames_and_cut_logs_among_small_files_are_as_when_read_alone(
        tmp_path, monkeypatch):
    """A file that continues one read in the same run, copies, renamed small files and a
    small log cut back to its first lines: what is known is not read again, and every
    verdict is the one reading each file alone gives."""
    hooks = (SAMPLES / "hooks" / "hooks.jsonl").read_text().splitlines(keepends=True)

    def scenario(root: Path, store: Store) -> list:
        logs = root / "logs"
        logs.mkdir(parents=True)
        (logs / "a.jsonl").write_text("".join(hooks[:6]))
        (logs / "b.jsonl").write_text("".join(hooks[:9]))  # a's copy that has grown
        (logs / "c.jsonl").write_text("".join(hooks[:9]))  # b's copy
        for i in range(20):
            (logs / f"s{i:02d}.jsonl").write_text("".join(hooks[10 + i:13 + 2 * i]))
        (logs / "t.jsonl").write_text("".join(hooks[100:160]))  # longer than a head (4 KiB)
        runs = [ingest([str(logs)], store)]
        logs.rename(root / "moved")
        runs.append(ingest([str(root / "moved")], store))
        (root / "moved" / "t.jsonl").write_text("".join(hooks[100:130]))  # cut back
        runs.append(ingest([str(root / "moved")], store))
        return [sorted((Path(f.path).name, f.status, f.events) for f in r.files) for r in runs]

    together = scenario(tmp_path / "together", Store(tmp_path / "together" / "st"))
    first, moved, cut = (dict((name, rest) for name, *rest in run) for run in together)
    assert first["a.jsonl"] == ["new", 6] and first["b.jsonl"] == ["appended", 3]
    assert first["c.jsonl"][1] == 0  # a copy: nothing new
    assert sum(events for _, events in first.values()) == 9 + sum(3 + i for i in range(20)) + 60
    assert {tuple(v) for k, v in moved.items() if k[0] in "st"} == {("renamed", 0)}
    assert cut["t.jsonl"] == ["prefix", 0]
    each_alone(monkeypatch)
    assert scenario(tmp_path / "alone", Store(tmp_path / "alone" / "st")) == together


def test_a_store_of_files_read_together_reads_the_same_without_its_catalog(tmp_path):
    logs = tmp_path / "logs"
    small_logs(logs)
    store = Store(tmp_path / "st")
    ingest([str(logs)], store)
    copy = tmp_path / "copy"
    shutil.copytree(store.root / "events", copy / "events")
    shutil.copytree(store.root / "quarantine", copy / "quarantine")
    bare = Store(copy)
    assert bare.is_bare
    for view in ("events", "quarantine"):
        sql = f"SELECT count(*) FROM {view} WHERE reason IS DISTINCT FROM 'truncated_last_line'" \
            if view == "quarantine" else f"SELECT count(*) FROM {view}"
        assert bare.connect().execute(sql).fetchall() == store.connect().execute(sql).fetchall()


def test_an_ingest_of_many_files_is_shown_by_format_and_status(tmp_path, monkeypatch):
    from loophound.commands import shell

    logs = tmp_path / "logs"
    small_logs(logs, per_format=2)
    monkeypatch.setattr(shell, "LISTED_FILES", 3)
    done = CliRunner().invoke(app, ["ingest", str(logs), "--store", str(tmp_path / "st")])
    assert done.exit_code == 0, done.output
    header, *rows = [line for line in done.output.splitlines() if "┃" in line or "│" in line]
    assert header.split("┃")[0].strip() == "files"
    assert [[cell.strip() for cell in row.split("│")[:3]] for row in rows] == [
        ["2", fmt, "new"] for fmt in ("bproxy", "generic", "hooks", "labtrust", "sven")]
    assert "app-0.jsonl" not in done.output  # a file with nothing to say is not named


def test_settled_small_compressed_files_are_not_read_again(tmp_path, monkeypatch):
    logs = tmp_path / "logs"
    lines = small_logs(logs, per_format=1)  # the first file of each format is gzipped
    store = Store(tmp_path / "st")
    ingest([str(logs)], store)

    def refuse(path, *args, **kwargs):
        raise AssertionError(f"{path.name} is unchanged and was read again")

    monkeypatch.setattr(ingest_module, "_read_into_store", refuse)
    again = ingest([str(logs)], store)
    assert {f.status for f in again.files} == {"unchanged"}
    assert sum(1 for p in lines if p.suffix == ".gz") == len(SOURCES)
    monkeypatch.undo()
    grown = next(p for p in lines if p.name.startswith("hooks") and p.suffix == ".gz")
    line = gzip.decompress(grown.read_bytes()).splitlines(keepends=True)[0]
    grown.write_bytes(gzip.compress(gzip.decompress(grown.read_bytes()) + line))
    (changed,) = [f for f in ingest([str(logs)], store).files if f.status != "unchanged"]
    assert (changed.path, changed.status, changed.events) == (str(grown), "appended", 1)

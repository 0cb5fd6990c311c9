"""Benchmark: `loophound ingest` of a folder of many small logs against DuckDB's own
`COPY (SELECT * FROM read_json([globs], ...)) TO 'x.parquet'` over the same files.

The folder holds N small logs of four formats in turn: generic JSONL, hook dispatcher history,
LabTrust episodes and bproxy daemon logs, 3 to 30 lines each, one in ten gzipped; their lines
are slices of the sample logs, each file made its own (a file that started like another
would be read as its copy). Each command runs in a fresh process, alternating baseline and
ingest, and the medians are compared. A scan of the resulting store (`loophound sql` of a
count over all events, then every detector with `loophound scan`) is timed after each
ingest, since every later read pays for how the events were written.

`--src DIR` runs loophound from another checkout's `src` (the version before a change), so
before and after are measured side by side on the same files.

    python benchmarks/many_files_bench.py [--files 1000 10000] [--repeat 3] [--keep DIR]
                                          [--src OTHER/src] [--no-scan]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_logs"

# DuckDB reads every file whatever its schema (`union_by_name`), compressed ones by suffix.
BASELINE_SQL = ("COPY (SELECT * FROM read_json({globs}, format = 'newline_delimited', "
                "union_by_name = true, sample_size = -1)) TO '{out}/baseline.parquet' "
                "(FORMAT parquet)")

RUNNER = r"""
import json, sys, time
t0 = time.perf_counter()
kind, out = sys.argv[1], sys.argv[2]
if kind == "baseline":
    import duckdb
    t1, c1 = time.perf_counter(), time.process_time()
    duckdb.connect().execute(sys.argv[3])
else:
    from loophound.cli import run
    t1, c1 = time.perf_counter(), time.process_time()
    sys.argv = ["loophound", *sys.argv[3:]]
    try:
        run()
    except SystemExit as exc:
        assert not exc.code, exc.code
t2, c2 = time.perf_counter(), time.process_time()
with open(out, "w") as fh:
    json.dump({"seconds": t2 - t1, "cpu": c2 - c1, "with_imports": t2 - t0}, fh)
"""


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _generic(rng: random.Random, i: int, n: int) -> list[dict]:
    t = 1_750_000_000 + i * 600
    return [{"timestamp": t + k * rng.randint(1, 30), "from": f"agent-{rng.randint(1, 9)}",
             "to": f"agent-{rng.randint(1, 9)}", "event": rng.choice(["ask", "answer", "retry"]),
             "session_id": f"s-{i:06d}", "tokens_in": rng.randint(10, 900),
             "text": "x" * rng.randint(10, 200)} for k in range(n)]


def write_folder(folder: Path, n: int, seed: int = 1) -> tuple[int, int]:
    """N small logs of four formats (3 to 30 lines, one in ten gzipped) below `folder`;
    returns (files, lines)."""
    rng = random.Random(seed)
    hooks = _lines(SAMPLES / "hooks" / "hooks.jsonl")
    labtrust = _lines(SAMPLES / "labtrust" / "episodes.jsonl")
    bproxy = _lines(SAMPLES / "bproxy" / "2026-06-18.log")
    total = 0
    for i in range(n):
        count = rng.randint(3, 30)
        kind = ("generic", "hooks", "labtrust", "bproxy")[i % 4]
        if kind == "generic":
            records = _generic(rng, i, count)
        else:
            source = {"hooks": hooks, "labtrust": labtrust, "bproxy": bproxy}[kind]
            start = rng.randrange(len(source) - count)
            records = [dict(r) for r in source[start:start + count]]
            # each file its own: a key the format knows, with the file's number
            own = {"hooks": "session_id", "labtrust": "episode_id", "bproxy": "hostname"}[kind]
            for r in records:
                r[own] = f"{kind}-{i:06d}"
        data = "".join(json.dumps(r) + "\n" for r in records).encode()
        suffix = ".log" if kind == "bproxy" else ".jsonl"
        path = folder / kind / f"{i // 1000:02d}" / f"{kind}-{i:06d}{suffix}"
        path.parent.mkdir(parents=True, exist_ok=True)
        if i % 10 == 9:
            path.with_name(path.name + ".gz").write_bytes(gzip.compress(data, mtime=0))
        else:
            path.write_bytes(data)
        total += count
    return n, total


def _run(args: list[str], env: dict) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", RUNNER, args[0], out.name, *args[1:]], env=env,
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        result = json.loads(Path(out.name).read_text())
    result["process"] = time.perf_counter() - started
    return result


def measure(folder: Path, workdir: Path, env: dict, scan: bool) -> dict[str, dict]:
    out = Path(tempfile.mkdtemp(dir=workdir))
    globs = [f"{folder}/**/*{s}" for s in (".jsonl", ".log", ".jsonl.gz", ".log.gz")]
    sql = BASELINE_SQL.format(globs="[" + ", ".join(f"'{g}'" for g in globs) + "]", out=out)
    store = str(out / "store")
    runs = {"baseline": _run(["baseline", sql], env),
            "ingest": _run(["loophound", "ingest", str(folder), "--store", store], env)}
    if scan:
        runs["count"] = _run(["loophound", "sql", "SELECT count(*), count(DISTINCT file) "
                              "FROM events", "--store", store], env)
        runs["scan"] = _run(["loophound", "scan", "--store", store, "--fail-on", "never"], env)
    subprocess.run(["chmod", "-R", "u+w", str(out)], check=True)
    subprocess.run(["rm", "-rf", str(out)], check=True)
    return runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--files", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="reuse/keep the generated folders in this folder")
    ap.add_argument("--src", type=Path, help="run loophound from this `src` folder instead")
    ap.add_argument("--no-scan", action="store_true", help="time ingest and the baseline only")
    args = ap.parse_args()
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="loophound-many-"))
    workdir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    if args.src:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(args.src.resolve()),
                                                          env.get("PYTHONPATH")]))
    print(f"loophound from {args.src or 'this checkout'}")
    for n in args.files:
        folder = workdir / f"many-{n}"
        if not folder.exists():
            write_folder(folder, n)
        lines = sum(len(gzip.decompress(p.read_bytes()).splitlines()) if p.suffix == ".gz"
                    else len(p.read_bytes().splitlines()) for p in folder.rglob("*.*"))
        print(f"{n:,} files, {lines:,} lines")
        runs: list[dict[str, dict]] = []
        for i in range(args.repeat):
            r = measure(folder, workdir, env, not args.no_scan)
            runs.append(r)
            print(f"  run {i + 1}: baseline {r['baseline']['seconds']:6.2f} s "
                  f"(CPU {r['baseline']['cpu']:.2f} s), ingest {r['ingest']['seconds']:7.2f} s "
                  f"(CPU {r['ingest']['cpu']:.2f} s; process {r['ingest']['process']:.2f} s)"
                  + (f", count {r['count']['seconds']:.2f} s, scan {r['scan']['seconds']:.2f} s"
                     if "scan" in r else ""), flush=True)
        med = {k: statistics.median(r[k]["seconds"] for r in runs) for k in runs[0]}
        cpu = {k: statistics.median(r[k]["cpu"] for r in runs) for k in runs[0]}
        proc = statistics.median(r["ingest"]["process"] for r in runs)
        print(f"  median: baseline {med['baseline']:.2f} s ({med['baseline'] / n * 1e3:.2f} ms/file,"
              f" CPU {cpu['baseline'] / n * 1e3:.2f}); ingest {med['ingest']:.2f} s "
              f"({med['ingest'] / n * 1e3:.2f} ms/file, CPU {cpu['ingest'] / n * 1e3:.2f}; the "
              f"whole process {proc:.2f} s); ratio {med['ingest'] / med['baseline']:.1f}× "
              f"(CPU {cpu['ingest'] / cpu['baseline']:.1f}×)")
        if "scan" in med:
            print(f"  the store afterwards: count of events {med['count']:.2f} s, "
                  f"scan (every detector) {med['scan']:.2f} s (CPU {cpu['scan']:.2f} s)")
    if not args.keep:
        subprocess.run(["rm", "-rf", str(workdir)], check=True)


if __name__ == "__main__":
    main()

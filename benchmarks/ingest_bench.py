"""Benchmark: `loophound ingest` on the full-size seed-001 incident against DuckDB's own
`COPY (SELECT * FROM read_json(file)) TO 'x.parquet'` on the same file, run side by side.

The baseline reads with `sample_size = -1`: with DuckDB's default schema sample it stops with
"unknown key reason" at line 355,945 (a `ws_disconnect` line), so it could not run at all.

Each command runs in a fresh process (so peak RSS is its own), alternating baseline and
ingest, and the medians are compared: these machines are noisy, ratios are what we report.

    python benchmarks/ingest_bench.py [--repeat 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import BASELINE_SQL, describe, incident_log

RUNNER = r"""
import json, resource, sys, time
kind, log, out = sys.argv[1], sys.argv[2], sys.argv[3]
t0 = time.perf_counter()
if kind == "baseline":
    import duckdb
    t1 = time.perf_counter()
    duckdb.connect().execute(sys.argv[4].format(log=log, out=out))
else:
    from loophound.ingest import ingest
    from loophound.store import Store
    t1 = time.perf_counter()
    report = ingest([log], Store(out + "/store"))
    assert report.events > 0
t2 = time.perf_counter()
print(json.dumps({"seconds": t2 - t1, "with_imports": t2 - t0,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def measure(kind: str, log: Path, workdir: Path) -> dict:
    out = Path(tempfile.mkdtemp(dir=workdir))
    res = subprocess.run([sys.executable, "-c", RUNNER, kind, str(log), str(out), BASELINE_SQL],
                         capture_output=True, text=True, check=True)
    subprocess.run(["rm", "-rf", str(out)], check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="reuse/keep the generated log in this folder")
    args = ap.parse_args()
    workdir, log = incident_log(args.keep, "loophound-bench-")
    size = log.stat().st_size
    lines = sum(1 for _ in log.open("rb"))
    print(describe(log))
    runs: dict[str, list[dict]] = {"baseline": [], "ingest": []}
    for i in range(args.repeat):
        for kind in ("baseline", "ingest"):
            r = measure(kind, log, workdir)
            runs[kind].append(r)
            print(f"  run {i + 1} {kind:8s} {r['seconds']:6.2f} s   peak RSS {r['peak_rss_mb']:6.0f} MB")
    med = {k: statistics.median(r["seconds"] for r in v) for k, v in runs.items()}
    rss = {k: max(r["peak_rss_mb"] for r in v) for k, v in runs.items()}
    print(f"median: DuckDB read_json → Parquet {med['baseline']:.2f} s; "
          f"loophound ingest {med['ingest']:.2f} s")
    print(f"ratio ingest / baseline: {med['ingest'] / med['baseline']:.2f}×  "
          f"(target ≤ 1.0×); peak RSS ingest {rss['ingest']:.0f} MB (target ≤ 1024 MB), "
          f"baseline {rss['baseline']:.0f} MB")
    print(f"throughput: {size / 2**20 / med['ingest']:.0f} MiB/s, {lines / med['ingest']:,.0f} lines/s")
    if not args.keep:
        subprocess.run(["rm", "-rf", str(workdir)], check=True)


if __name__ == "__main__":
    main()

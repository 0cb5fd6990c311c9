"""Benchmark: `loophound investigate` end to end on the full-size seed-001 incident (ingest,
detect, attribute, HTML report) against DuckDB's `COPY (SELECT * FROM read_json(file)) TO
'x.parquet'` on the same file, measured side by side in the same run.

The baseline reads with `sample_size = -1`, as in benchmarks/ingest_bench.py: with DuckDB's
default schema sample it stops with "unknown key reason" at line 355,945.

Each command runs in a fresh process (so its peak RSS is its own), alternating baseline and
investigate; medians are compared, because these machines are noisy. The report's size and
the time of each stage (from investigate's own progress lines) are printed too.

    python benchmarks/investigate_bench.py [--repeat 3] [--keep DIR] [--json FILE]

Target: investigate ≤ 3× the baseline; the report under 10 MB.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import BASELINE_SQL, describe, incident_log

# Runs in a fresh interpreter: does one measured thing, reports time and peak RSS as JSON.
RUNNER = r"""
import contextlib, io, json, resource, sys, time
kind, log, out, result = sys.argv[1:5]
t0 = time.perf_counter()
stderr = io.StringIO()
if kind == "baseline":
    import duckdb
    duckdb.connect().execute(sys.argv[5].format(log=log, out=out))
    code = 0
else:
    from loophound.cli import run
    sys.argv = ["loophound", "investigate", log, "--out", f"{out}/incident.html",
                "--store", f"{out}/store", "--generated-at", "2026-01-01T00:00:00Z"]
    code = 0
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(stderr):
        try:
            run()
        except SystemExit as exc:
            code = exc.code or 0
t1 = time.perf_counter()
with open(result, "w") as fh:
    json.dump({"seconds": t1 - t0, "exit": code, "stderr": stderr.getvalue(),
               "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}, fh)
"""

STAGES = ("reading the logs", "detecting loops and attributing cost", "writing the report")


def measure(kind: str, log: Path, workdir: Path) -> dict:
    out = Path(tempfile.mkdtemp(dir=workdir))
    result = out / "result.json"
    subprocess.run([sys.executable, "-c", RUNNER, kind, str(log), str(out), str(result),
                    BASELINE_SQL],
                   check=True)
    r = json.loads(result.read_text())
    if kind == "investigate":
        if r["exit"] != 0:
            raise SystemExit(f"investigate failed ({r['exit']}):\n{r['stderr']}")
        report = out / "incident.html"
        r["report_bytes"] = report.stat().st_size
        r["stages"] = {s: float(m.group(1)) for s in STAGES
                       if (m := re.search(re.escape(s) + r": ([\d.]+) s", r["stderr"]))}
    subprocess.run(["rm", "-rf", str(out)], check=True)
    r.pop("stderr", None)
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="reuse/keep the generated log in this folder")
    ap.add_argument("--json", type=Path, help="also write the figures to this file")
    args = ap.parse_args()
    workdir, log = incident_log(args.keep, "loophound-bench-")
    print(describe(log))
    runs: dict[str, list[dict]] = {"baseline": [], "investigate": []}
    for i in range(args.repeat):
        for kind in ("baseline", "investigate"):
            r = measure(kind, log, workdir)
            runs[kind].append(r)
            extra = ""
            if kind == "investigate":
                extra = ("   " + ", ".join(f"{k.split()[0]} {v:.1f} s" for k, v in r["stages"].items())
                         + f"; report {r['report_bytes'] / 1e6:.2f} MB")
            print(f"  run {i + 1} {kind:11s} {r['seconds']:7.2f} s   peak RSS "
                  f"{r['peak_rss_mb']:6.0f} MB{extra}", flush=True)
    med = {k: statistics.median(r["seconds"] for r in v) for k, v in runs.items()}
    rss = {k: max(r["peak_rss_mb"] for r in v) for k, v in runs.items()}
    stages = {s: statistics.median(r["stages"].get(s, 0.0) for r in runs["investigate"])
              for s in STAGES}
    report_mb = max(r["report_bytes"] for r in runs["investigate"]) / 1e6
    ratio = med["investigate"] / med["baseline"]
    print(f"median: DuckDB read_json → Parquet {med['baseline']:.2f} s; "
          f"loophound investigate {med['investigate']:.2f} s "
          f"(ingest {stages[STAGES[0]]:.1f} s, detect+attribute {stages[STAGES[1]]:.1f} s, "
          f"report {stages[STAGES[2]]:.1f} s)")
    print(f"ratio investigate / baseline: {ratio:.2f}×  (target ≤ 3.0×); peak RSS investigate "
          f"{rss['investigate']:.0f} MB, baseline {rss['baseline']:.0f} MB")
    print(f"report size: {report_mb:.2f} MB (target < 10 MB)")
    if args.json:
        args.json.write_text(json.dumps({
            "input_bytes": log.stat().st_size, "median_seconds": med, "ratio": ratio,
            "stages_median_seconds": stages, "peak_rss_mb": rss, "report_mb": report_mb,
            "runs": runs}, indent=2) + "\n")
    if not args.keep:
        subprocess.run(["rm", "-rf", str(workdir)], check=True)


if __name__ == "__main__":
    main()

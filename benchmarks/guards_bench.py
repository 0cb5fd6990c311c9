"""Benchmark: six guards replayed over the full-size seed-001 incident, against the scan of that
same store, measured in the same run (target: the replay takes no longer than the scan).

The log is ingested once. Then, alternately, each in a fresh process: the scan of the store
(`api.scan`: detectors, attribution, the run saved) and the replay of six guards over its
newest saved run (`api.guards`: the run opened, the log read, six guards replayed, the
document made). Each process times its own call (wall clock and CPU time, imports
excluded) and the command as a whole is timed from outside; medians are compared.

    python benchmarks/guards_bench.py [--repeat 5] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import describe, incident_log

PRESETS = ["bproxy-fix", "bproxy-had", "pybreaker", "resilience4j"]  # 3 + 1 + 1 + 1 guards

SCAN = r"""
import json, sys, time
from loophound import api
t, c = time.perf_counter(), time.process_time()
api.scan(sys.argv[1])
print(json.dumps({"seconds": time.perf_counter() - t, "cpu": time.process_time() - c}))
"""

GUARDS = r"""
import json, sys, time
from loophound import api
t, c = time.perf_counter(), time.process_time()
doc = api.guards(sys.argv[1], presets=sys.argv[2].split(",")).document
print(json.dumps({"seconds": time.perf_counter() - t, "cpu": time.process_time() - c,
                  "guards": [(g["name"], g["blocked"]["events"], g["blocked_upper"]["cost_usd"],
                              g["false_blocks"]) for g in doc["guards"]]}))
"""


def run(code: str, *args: str) -> tuple[dict, float]:
    t = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                         check=True)
    return json.loads(res.stdout.strip().splitlines()[-1]), time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--keep", type=Path)
    args = ap.parse_args()
    work, log = incident_log(args.keep, "loophound-guards-")
    print(describe(log))
    store = work / "store"
    if not (store / "catalog.duckdb").exists():
        from loophound import api

        api.ingest([str(log)], store)
    scans, replays = [], []
    for i in range(args.repeat):
        scans.append(run(SCAN, str(store)))
        replays.append(run(GUARDS, str(store), ",".join(PRESETS)))
        (s, sp), (r, rp) = scans[-1], replays[-1]
        print(f"  run {i + 1}: scan {s['seconds']:6.2f} s (CPU {s['cpu']:.2f} s; {sp:.2f} s as a "
              f"process)   six guards {r['seconds']:6.2f} s (CPU {r['cpu']:.2f} s; {rp:.2f} s as "
              "a process)")
    scan = statistics.median(s["seconds"] for s, _ in scans)
    replay = statistics.median(r["seconds"] for r, _ in replays)
    scan_p = statistics.median(p for _, p in scans)
    replay_p = statistics.median(p for _, p in replays)
    scan_c = statistics.median(s["cpu"] for s, _ in scans)
    replay_c = statistics.median(r["cpu"] for r, _ in replays)
    print(f"median: scan {scan:.2f} s, six guards {replay:.2f} s ({replay / scan:.0%} of the "
          f"scan, target ≤ 100%); CPU {scan_c:.2f} s and {replay_c:.2f} s "
          f"({replay_c / scan_c:.0%}); as processes {scan_p:.2f} s and {replay_p:.2f} s")
    for name, refused, saved, false in replays[-1][0]["guards"]:
        print(f"  {name}: refused {refused:,}, saved ${saved:,.2f}, false blocks {false}")
    if not args.keep:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()

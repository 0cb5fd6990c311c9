"""Benchmark: the detectors over the store of the full-size seed-001 incident, against the
ingest of that same log, measured in the same run (target: detection ≤ 25 % of ingest).

Ingest and scan each run in a fresh process, alternately, several times; the scan's own time
is split into detection (all detectors) and attribution (claims, sizes, prices).

    python benchmarks/detect_bench.py [--repeat 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from _common import describe, incident_log

INGEST = r"""
import json, sys, time
from loophound.ingest import ingest
from loophound.store import Store
t = time.perf_counter()
ingest([sys.argv[1]], Store(sys.argv[2]))
print(json.dumps({"ingest": time.perf_counter() - t}))
"""

SCAN = r"""
import json, sys, time
from loophound.attribute import attribute
import dataclasses
from loophound import detect
from loophound.store import Store
t_open = time.perf_counter()
con = Store(sys.argv[1]).connect()  # as scan does: the store's views over its Parquet files
t_open = time.perf_counter() - t_open
params = detect.settings()
times = {}
def timed(name, run):
    def wrapper(con, p):
        t = time.perf_counter()
        out = run(con, p)
        times[name] = time.perf_counter() - t
        return out
    return wrapper
for name, det in list(detect.DETECTORS.items()):
    detect.DETECTORS[name] = dataclasses.replace(det, run=timed(name, det.run))
t0 = time.perf_counter()
findings = detect.run_detectors(con, params)  # as scan does
t1 = time.perf_counter()
attribute(con, findings)
t2 = time.perf_counter()
print(json.dumps({"detect": t1 - t0 + t_open, "attribute": t2 - t1,
                  "per_detector": {"open store": t_open, **times},
                  "findings": [f.title for f in findings]}))
"""


def run(code: str, *args: str) -> dict:
    res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                         check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path)
    args = ap.parse_args()
    work, log = incident_log(args.keep, "loophound-detect-")
    print(describe(log))
    ingests, scans = [], []
    for i in range(args.repeat):
        store = work / "store"
        shutil.rmtree(store, ignore_errors=True)
        ingests.append(run(INGEST, str(log), str(store))["ingest"])
        scans.append(run(SCAN, str(store)))
        s = scans[-1]
        print(f"  run {i + 1}: ingest {ingests[-1]:6.2f} s   detect {s['detect']:5.2f} s   "
              f"attribute {s['attribute']:5.2f} s   "
              + " ".join(f"{k}={v:.2f}" for k, v in s["per_detector"].items()))
    ing = statistics.median(ingests)
    det = statistics.median(s["detect"] for s in scans)
    att = statistics.median(s["attribute"] for s in scans)
    print(f"median: ingest {ing:.2f} s; detectors {det:.2f} s ({det / ing:.0%} of ingest, "
          f"target ≤ 25%); attribution {att:.2f} s; detect + attribute "
          f"{(det + att) / ing:.0%} of ingest")
    print("findings:", "; ".join(scans[-1]["findings"]))
    if not args.keep:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()

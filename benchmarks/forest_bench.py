"""Benchmark: unusual_actor's IsolationForest, the port (`loophound.detect.isolation`) against
scikit-learn's (the baseline it replaced: import, fit and score), on matrices of the shape a
scan scores (windows × 7 features), each in a fresh process, alternating; medians and ratios
of wall and CPU time, and whether the scores are the same floats.

    python benchmarks/forest_bench.py [--rows 95,2000] [--repeat 5]

Needs scikit-learn (the `test` extra) for the baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# X: lognormal windows with a few outliers, the same for both sides; the detectors' package
# is imported first on both sides, as a scan has it when it scores
SETUP = """
import hashlib, json, sys, time
import numpy as np
import loophound.detect
X = np.random.default_rng(16).lognormal(size=(int(sys.argv[1]), 7))
X[: max(1, len(X) // 50)] *= 40
"""
PORT = SETUP + """
t = time.process_time()
from loophound.detect.isolation import anomaly_scores
s = anomaly_scores(X, 100, 0)
"""
SKLEARN = SETUP + """
t = time.process_time()
from sklearn.ensemble import IsolationForest
s = -IsolationForest(n_estimators=100, random_state=0, contamination="auto",
                     n_jobs=1).fit(X).score_samples(X)
"""
REPORT = """
print(json.dumps({"cpu_in": time.process_time() - t,
                  "digest": hashlib.sha256(np.ascontiguousarray(s).tobytes()).hexdigest()}))
"""


def run(code: str, rows: int) -> tuple[float, float, dict]:
    """(wall, CPU user+sys of the process, what it printed)."""
    env = dict(os.environ, PYTHONPATH=str(SRC))
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code + REPORT, str(rows)], env=env,
                            stdout=subprocess.PIPE, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"the benchmark's process failed ({status})")
    return time.perf_counter() - start, usage.ru_utime + usage.ru_stime, json.loads(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="95,2000")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}")
    for rows in (int(r) for r in args.rows.split(",")):
        got: dict[str, list] = {"scikit-learn": [], "port": []}
        digests = set()
        for _ in range(args.repeat):
            for name, code in (("scikit-learn", SKLEARN), ("port", PORT)):
                wall, cpu, out = run(code, rows)
                got[name].append((wall, cpu, out["cpu_in"]))
                digests.add(out["digest"])
        med = {k: [statistics.median(x[i] for x in v) for i in range(3)] for k, v in got.items()}
        for name, (wall, cpu, cpu_in) in med.items():
            print(f"{rows:>6} rows  {name:<12} process wall {wall:5.2f} s, CPU {cpu:5.2f} s; "
                  f"import + fit + score {cpu_in * 1000:6.1f} ms of CPU")
        (w0, c0, i0), (w1, c1, i1) = med["scikit-learn"], med["port"]
        print(f"{rows:>6} rows  port / scikit-learn: wall {w1 / w0:.2f}, CPU {c1 / c0:.2f}, "
              f"import + fit + score {i1 / i0:.3f}; the same scores: {len(digests) == 1}")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

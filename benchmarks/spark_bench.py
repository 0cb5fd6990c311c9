"""The Spark engine's scaling curve on this machine: `ingest` and `scan` of 1×, 4× and 10× the
seed-001 incident, by the default engine (DuckDB, this process) and by `--engine spark` on
`local[1]` and `local[2]`, each command a fresh `loophound` process (a Spark one starts its
session, ~20 s, inside the time). N× is the incident written with seeds 1..N (one 236 MiB
log each: the same storm, other actors and ids). The scans run every detector, and each
engine's findings document is compared with DuckDB's (the time of the run removed): `same`
says whether they are equal. Beside the default engine's wall times, its CPU time (user +
sys), which the load of other work on the machine disturbs less; a Spark process's is not
shown: its JVM and the JVM's Python workers are not children it waits for, so their CPU
time is not in its own.

    python benchmarks/spark_bench.py --scales 1,4,10 --keep /tmp/spark-bench
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from loophound.synth import write_full_incident

ENGINES = (("duckdb", []), ("local[1]", ["--engine", "spark", "--spark-master", "local[1]"]),
           ("local[2]", ["--engine", "spark", "--spark-master", "local[2]"]))
CLI = [sys.executable, "-m", "loophound.cli"]


def incidents(workdir: Path, scale: int) -> list[str]:
    """The logs of N× the incident (seeds 1..N), written unless already there."""
    out = []
    for seed in range(1, scale + 1):
        log = workdir / f"seed{seed}" / "2026-06-18.log"
        if not log.exists():
            log.parent.mkdir(parents=True, exist_ok=True)
            write_full_incident(log, seed)
        out.append(str(log))
    return out


def timed(args: list[str]) -> tuple[float, float]:
    """Wall and CPU (user + sys, children included) seconds of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True)
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):  # 1: an incident at or above --fail-on
        raise SystemExit(f"{' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return took, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def cpu(seconds: float, engine: list[str]) -> str:
    """` (7.8 s)`: CPU time, for the default engine (a Spark process's misses its JVM's)."""
    return "" if engine else f" ({seconds:.1f} s)"


def document(path: Path) -> dict:
    doc = json.loads(path.read_text())
    doc.pop("generated_at", None)
    return doc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scales", default="1,4,10")
    ap.add_argument("--keep", type=Path, help="work folder (the logs are kept and reused)")
    ap.add_argument("--engines", default=",".join(n for n, _ in ENGINES),
                    help="which of duckdb, local[1], local[2] (DuckDB first: the reference)")
    a = ap.parse_args()
    engines = [(n, e) for n, e in ENGINES if n in a.engines.split(",")]
    work = a.keep or Path(tempfile.mkdtemp(prefix="loophound-spark-"))
    start, _cpu = timed([sys.executable, "-c", "from loophound.spark import session; "
                         "session('local[2]').range(1).count()"])
    print(f"Spark session start and one trivial job (local[2]), a process: {start:.1f} s")
    print(f"every detector scanned; load average {os.getloadavg()[0]:.1f} at the start\n")
    print("| scale | MiB | engine | ingest (CPU) | scan (CPU) | ingest + scan | findings "
          "| same as DuckDB |")  # CPU: the default engine's only (see the docstring)
    print("|---|---|---|---|---|---|---|---|")
    for scale in (int(s) for s in a.scales.split(",")):
        logs = incidents(work, scale)
        mib = sum(Path(p).stat().st_size for p in logs) / 2**20
        expected = None
        for name, engine in engines:
            store = work / f"store-{scale}-{name}"
            shutil.rmtree(store, ignore_errors=True)
            found = work / f"findings-{scale}-{name}.json"
            ingest, ingest_cpu = timed([*CLI, "ingest", *logs, "--store", str(store), *engine])
            scan, scan_cpu = timed([*CLI, "scan", "--store", str(store), "--fail-on", "never",
                                    "--json", str(found), *engine])
            doc = document(found)
            expected = expected or doc
            print(f"| {scale}× | {mib:,.0f} | {name} | {ingest:.1f} s{cpu(ingest_cpu, engine)} | "
                  f"{scan:.1f} s{cpu(scan_cpu, engine)} | {ingest + scan:.1f} s | "
                  f"{len(doc['findings'])} | {'yes' if doc == expected else 'NO'} |", flush=True)
            shutil.rmtree(store, ignore_errors=True)
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()

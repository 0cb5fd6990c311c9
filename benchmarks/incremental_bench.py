"""Benchmark: a scheduled `scan --incremental` after 1 MB was appended to a big log.

Builds two stores, one from half of the full-size seed-001 incident and one from all of it,
appends the same 1 MB of new storm lines to each log, and times the incremental scan of each
(ingest of the new bytes, detection, saving), each in a fresh process, several times. If the
scan reads only what is new, the two times are close although one store is twice the other.

    python benchmarks/incremental_bench.py [--repeat 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

SCAN = [sys.executable, "-c", "from loophound.cli import run; run()", "scan"]


def storm_lines(after_ms: int, nbytes: int) -> bytes:
    """About `nbytes` of further failed scrolls, 100 ms apart, after `after_ms`."""
    out, t, size = [], after_ms, 0
    while size < nbytes:
        rid = str(uuid.uuid4())
        t += 100
        pair = (
            f'{{"level":30,"time":{t},"pid":1320,"hostname":"h","id":"{rid}","action":"scroll",'
            '"session":"6afr3v","destructive":false,"event":"received","ownerHash":"d20a5976"}\n'
            f'{{"level":30,"time":{t},"pid":1320,"hostname":"h","id":"{rid}","event":"response",'
            '"ok":false,"elapsed_ms":0,"error_code":"SESSION_NOT_FOUND","ownerHash":"d20a5976"}\n'
        )
        out.append(pair)
        size += len(pair)
    return "".join(out).encode()


def last_time(log: Path) -> int:
    with log.open("rb") as fh:
        fh.seek(-4096, 2)
        return json.loads(fh.read().splitlines()[-1])["time"]


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path)
    args = ap.parse_args()
    from loophound.synth import bproxy_full_incident

    work = args.keep or Path(tempfile.mkdtemp(prefix="loophound-incr-"))
    work.mkdir(parents=True, exist_ok=True)
    full = work / "full.log"
    if not full.exists():
        bproxy_full_incident(full)
    data = full.read_bytes()
    half = data[: data.rindex(b"\n", 0, len(data) // 2) + 1]
    results = {}
    for name, content in (("half", half), ("full", data)):
        d = work / name
        shutil.rmtree(d, ignore_errors=True)
        (d / "logs").mkdir(parents=True)
        log = d / "logs" / "2026-06-18.log"
        log.write_bytes(content)
        store = d / "store"
        t_first = timed([*SCAN, str(d / "logs"), "--store", str(store), "--incremental"])
        times = []
        for _ in range(args.repeat):
            with log.open("ab") as fh:
                fh.write(storm_lines(last_time(log), 1 << 20))
            times.append(timed([*SCAN, str(d / "logs"), "--store", str(store), "--incremental"]))
        quiet = timed([*SCAN, str(d / "logs"), "--store", str(store), "--incremental"])
        results[name] = (len(content), t_first, statistics.median(times), quiet)
        print(f"{name:4s} store of {len(content) / 2**20:6.1f} MiB: first scan {t_first:6.2f} s; "
              f"+1 MiB appended: incremental scan median {statistics.median(times):5.2f} s "
              f"(runs {', '.join(f'{t:.2f}' for t in times)}); nothing new: {quiet:.2f} s")
    h, f = results["half"], results["full"]
    print(f"growth: store ×{f[0] / h[0]:.2f} → incremental scan time ×{f[2] / h[2]:.2f}")
    startup = statistics.median(
        timed([sys.executable, "-c", "from loophound.cli import run; run()", "--version"])
        for _ in range(args.repeat))
    print(f"of which starting Python and importing loophound (`loophound --version`): "
          f"{startup:.2f} s; the scan itself: half {h[2] - startup:.2f} s, "
          f"full {f[2] - startup:.2f} s")
    if not args.keep:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()

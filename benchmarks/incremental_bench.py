"""Benchmark: a scheduled `scan --incremental` after 1 MB was appended to a big log.

Builds four stores: from half of the full-size seed-001 incident, from all of it, from all of
it with 300 settled older logs in the same folder (a directory that cron has scanned for
months), and from all of it followed by a day of five-minute appends, each ingested alone
(288 batches of the one log, as a day of scheduled scans leaves them). Appends the same 1 MB
of new storm lines to the incident log of each, and times the incremental scan of each
(ingest of the new bytes, detection, saving) several times. If the scan reads only what is
new, the times are close although the stores differ twice in size, 300-fold in files and
288-fold in batches.

Each scan is timed two ways. As cron runs it: a fresh process per scan, which reports
starting Python and importing loophound (paid on every run, whatever the store) apart from
the scan itself; the process's wall time is printed too. As `loophound watch` runs it: one
process that appends 1 MB and scans, again and again, calling what each cycle of `watch`
calls (`cli.incremental_scan` through the command line, with the look-back window kept in
memory as `watch` keeps it), so start-up, imports and DuckDB's own set-up are paid once.

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

from _common import compile_bytecode

# One scheduled scan in a fresh interpreter, timing its imports and its run apart.
RUNNER = r"""
import json, sys, time
t0 = time.perf_counter()
from loophound.cli import run
t1 = time.perf_counter()
out, sys.argv = sys.argv[1], ["loophound", "scan", *sys.argv[2:]]
try:
    run()
except SystemExit:
    pass
t2 = time.perf_counter()
with open(out, "w") as fh:
    json.dump({"imports": t1 - t0, "scan": t2 - t1}, fh)
"""


# `--repeat` scheduled scans in one process, each after 1 MB more: the cycles of `watch`.
WATCH_RUNNER = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from incremental_bench import last_time, storm_lines
from pathlib import Path
from loophound.cli import run
from loophound.store import keep_windows
keep_windows()  # as `loophound watch` does before its first cycle
out, log, repeat, scan_args = sys.argv[2], Path(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]
times = []
for _ in range(repeat):
    with log.open("ab") as fh:
        fh.write(storm_lines(last_time(log), 1 << 20))
    sys.argv = ["loophound", "scan", *scan_args]
    t0 = time.perf_counter()
    try:
        run()
    except SystemExit:
        pass
    times.append(time.perf_counter() - t0)
with open(out, "w") as fh:
    json.dump(times, fh)
"""


# A day of five-minute appends to the log, each ingested on its own: 288 batches.
DAY_RUNNER = r"""
import sys
sys.path.insert(0, sys.argv[1])
from incremental_bench import last_time, storm_lines
from pathlib import Path
from loophound.ingest import ingest
from loophound.store import Store
log, store = Path(sys.argv[2]), Store(sys.argv[3])
for _ in range(int(sys.argv[4])):
    with log.open("ab") as fh:
        fh.write(storm_lines(last_time(log) + 300_000, 4096))
    ingest([str(log)], store)
"""


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


def scan(logs: Path, store: Path, work: Path) -> dict[str, float]:
    """Wall time of one `scan --incremental` process, and its imports and scan as it saw them."""
    result = work / "timing.json"
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", RUNNER, str(result), str(logs), "--store", str(store),
                    "--incremental", "--fail-on", "never"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    return json.loads(result.read_text()) | {"wall": wall}


def watch_cycles(log: Path, logs: Path, store: Path, work: Path, repeat: int) -> list[float]:
    """The scan time of each of `repeat` cycles in one process, each after 1 MB more."""
    result = work / "watch.json"
    subprocess.run([sys.executable, "-c", WATCH_RUNNER, str(Path(__file__).parent), str(result),
                    str(log), str(repeat), str(logs), "--store", str(store), "--incremental",
                    "--fail-on", "never"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return json.loads(result.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", type=Path)
    args = ap.parse_args()
    from loophound.synth import bproxy_full_incident

    compile_bytecode(None)

    work = args.keep or Path(tempfile.mkdtemp(prefix="loophound-incr-"))
    work.mkdir(parents=True, exist_ok=True)
    full = work / "full.log"
    if not full.exists():
        bproxy_full_incident(full)
    data = full.read_bytes()
    half = data[: data.rindex(b"\n", 0, len(data) // 2) + 1]
    first_ms = json.loads(data[: data.index(b"\n")])["time"]
    results = {}
    # (name, the incident log's bytes, how many settled older logs share its folder)
    # (name, the incident log's bytes, settled older logs beside it, five-minute appends after)
    for name, content, older, appends in (("half", half, 0, 0), ("full", data, 0, 0),
                                          ("full+300", data, 300, 0), ("full+day", data, 0, 288)):
        d = work / name
        shutil.rmtree(d, ignore_errors=True)
        (d / "logs").mkdir(parents=True)
        log = d / "logs" / "2026-06-18.log"
        log.write_bytes(content)
        for i in range(older):  # earlier days' logs, a few dozen lines each, long settled
            (d / "logs" / f"older-{i:03d}.log").write_bytes(
                storm_lines(first_ms - (older - i) * 3_600_000, 2000))
        store = d / "store"
        first = scan(d / "logs", store, work)
        if appends:
            subprocess.run([sys.executable, "-c", DAY_RUNNER, str(Path(__file__).parent), str(log),
                            str(store), str(appends)], check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            scan(d / "logs", store, work)  # the findings of the day
        runs = []
        for _ in range(args.repeat):
            with log.open("ab") as fh:
                fh.write(storm_lines(last_time(log), 1 << 20))
            runs.append(scan(d / "logs", store, work))
        quiet = scan(d / "logs", store, work)
        cycles = watch_cycles(log, d / "logs", store, work, args.repeat + 1)[1:]
        med = {k: statistics.median(r[k] for r in runs) for k in ("wall", "imports", "scan")}
        med["watch"] = statistics.median(cycles)
        results[name] = (len(content), med)
        each = ", ".join(f"{r['scan']:.2f}" for r in runs)
        files = (f" + {older} older logs" if older else "") + \
            (f" + {appends} five-minute batches" if appends else "")
        print(f"{name:8s} store of {len(content) / 2**20:6.1f} MiB{files} (first scan "
              f"{first['wall']:.2f} s), +1 MiB appended, medians:\n"
              f"  watch cycle: the scan {med['watch']:.2f} s "
              f"(cycles {', '.join(f'{c:.2f}' for c in cycles)}; the process's first is left out)\n"
              f"  cron, a process per scan: the scan itself {med['scan']:.2f} s (runs {each}); "
              f"as a command {med['wall']:.2f} s, of which Python start-up and imports "
              f"{med['imports']:.2f} s\n"
              f"  nothing new: the scan itself {quiet['scan']:.2f} s")
    (h, hm), (f, fm), (_, many) = results["half"], results["full"], results["full+300"]
    day = results["full+day"][1]
    print(f"growth: store ×{f / h:.2f} → watch cycle ×{fm['watch'] / hm['watch']:.2f}, "
          f"the scan itself ×{fm['scan'] / hm['scan']:.2f}, as a command "
          f"×{fm['wall'] / hm['wall']:.2f}; 300 more files in the folder and the store → "
          f"watch cycle ×{many['watch'] / fm['watch']:.2f}, the scan itself "
          f"×{many['scan'] / fm['scan']:.2f}; a day of batches after it → watch cycle "
          f"×{day['watch'] / fm['watch']:.2f}, the scan itself ×{day['scan'] / fm['scan']:.2f}")
    if not args.keep:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()

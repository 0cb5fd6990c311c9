"""Benchmark: `loophound scan` of a store of 220 small agent transcripts, this checkout against
another (`--against OTHER/src`: the version before a change), side by side on the same store.

The transcripts are real and synthetic ones of the formats both versions read: the real
mini-swe-agent, Claude Code and Codex logs of the development set (`--real DIR`, default
`../shared/realbench/dev/data`) and the sample logs' Claude Code, Codex and trajectory files.
Each of the 220 is its own file: a JSON-lines transcript cut after a different number of lines,
a whole-file trajectory written with a member naming its copy (its steps unchanged), so no two
are the same bytes (a copy would be read as the same input). The store is made once, by this
checkout; then each version scans it in a fresh process, alternately, `--repeat` times, and
the medians of wall and CPU time are compared.

    python benchmarks/agent_transcripts_bench.py --against /tmp/base/src [--files 220]
                                                 [--repeat 5] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_logs"

SCAN = r"""
import resource, sys, time
from loophound import api
t, c = time.perf_counter(), time.process_time()
api.scan(sys.argv[1], save=False)
u = resource.getrusage(resource.RUSAGE_SELF)
print(time.perf_counter() - t, time.process_time() - c, u.ru_maxrss)
"""


def sources(real: Path) -> list[Path]:
    found = sorted(p for p in real.glob("*/*") if p.suffix in (".jsonl", ".json")
                   and p.parent.name in ("msa", "cc", "codex"))
    for sub in ("claude-code", "codex", "trajectory"):
        found += sorted(p for p in (SAMPLES / sub).rglob("*") if p.is_file()
                        and p.suffix in (".jsonl", ".json", ".traj"))
    return found


def write_copies(srcs: list[Path], n: int, into: Path) -> list[Path]:
    out = []
    for i in range(n):
        src = srcs[i % len(srcs)]
        round_ = i // len(srcs)
        dest = into / f"{i:03d}-{src.name}"
        text = src.read_text(encoding="utf-8")
        if src.suffix == ".jsonl":
            lines = text.splitlines(keepends=True)
            keep = max(1, len(lines) - round_ * max(1, len(lines) // 20))
            dest.write_text("".join(lines[:keep]), encoding="utf-8")
        else:
            doc = json.loads(text)
            if isinstance(doc, dict):
                doc["bench_copy"] = i
                dest.write_text(json.dumps(doc), encoding="utf-8")
            else:
                dest.write_text(json.dumps(doc, indent=round_ or None), encoding="utf-8")
        out.append(dest)
    return out


def timed_scan(src: Path, store: Path) -> tuple[float, float, int]:
    env = dict(os.environ, PYTHONPATH=str(src))
    run = subprocess.run([sys.executable, "-c", SCAN, str(store)], env=env, check=True,
                         capture_output=True, text=True)
    wall, cpu, rss = run.stdout.split()[-3:]
    return float(wall), float(cpu), int(rss)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--against", type=Path, required=True, help="the other checkout's src/")
    ap.add_argument("--real", type=Path, default=ROOT.parent / "shared" / "realbench" / "dev" / "data")
    ap.add_argument("--files", type=int, default=220)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--keep", type=Path)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lh-agents-"))
    try:
        logs = work / "logs"
        logs.mkdir()
        files = write_copies(sources(a.real), a.files, logs)
        store = work / "store"
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "loophound", "ingest", str(logs), "--store", str(store)],
                       check=True, capture_output=True, env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
        print(f"{len(files)} transcripts, {sum(f.stat().st_size for f in files) / 1e6:.1f} MB, "
              f"ingested in {time.perf_counter() - t:.1f} s")
        runs: dict[str, list[tuple[float, float, int]]] = {"this": [], "other": []}
        for _ in range(a.repeat):
            runs["other"].append(timed_scan(a.against, store))
            runs["this"].append(timed_scan(ROOT / "src", store))
        med = {k: tuple(statistics.median(r[i] for r in v) for i in range(3)) for k, v in runs.items()}
        for k in ("other", "this"):
            w, c, rss = med[k]
            print(f"{k:>5}: scan wall {w:.2f} s, CPU {c:.2f} s, peak RSS {rss / 1024:.0f} MB "
                  f"(medians of {a.repeat})")
        print(f"ratio this/other: wall {med['this'][0] / med['other'][0]:.2f}x, "
              f"CPU {med['this'][1] / med['other'][1]:.2f}x")
        if a.keep:
            shutil.copytree(work, a.keep, dirs_exist_ok=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

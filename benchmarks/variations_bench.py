"""Benchmark: ingest, scan, investigate and a one-line query on bproxy-shaped logs of many
shapes (synth/bproxy_variants.py: the request id under `id`, `req_id`, `reqId`,
`request_id` or absent; nested objects 1–3 deep; pino's or a shuffled key order; undocumented
top-level keys; `stats` lines; a second storm), each at the seed-001 storm's full size, and
one of them at 2× and 10×: no single file shape is what gets tuned.

Per log, each measured command runs in a fresh process, and in each round the baseline, then
loophound (ingest into a new store, then a scan of it: detect + attribute, as `loophound scan`
does, not saved), then optionally `investigate` end to end (as the quick start runs it, with
a temporary store, and with `--store DIR`, which saves the run); the medians are compared, because
these machines are noisy. The baseline is DuckDB's own default
`COPY (SELECT * FROM read_json(file)) TO 'x.parquet'`; where DuckDB's default schema sample
cannot read a file (a key first seen after the sample), it reads the whole file for its schema
(`sample_size = -1`), and the table says so. Last, a one-line query end to end
(`loophound sql` on the store, a new process each time) against DuckDB on the raw file.

    python benchmarks/variations_bench.py [--repeat 3] [--variants id,no_id] [--big req_id]
        [--scales 2,10] [--investigate id,no_id|all] [--keep DIR] [--json FILE] [--size 0.02]

With --query-only, only the query is timed (ingesting each log once into a store beside it):

    python benchmarks/variations_bench.py --query-only --repeat 7 --variants req_id,reqId,no_id
        --scales 10 --keep DIR

`--investigate-only` times `investigate` end to end (ingest, scan, report; as the quick start
runs it, with a temporary store; `--kept-store`: with `--store DIR`, which also saves the run)
against DuckDB's default COPY, and with `--against SRC` the investigate of another source
tree too, in the same rounds; `--ingest-only` the same for `ingest` alone:

    python benchmarks/variations_bench.py --ingest-only --keep DIR --variants no_id
        --scales "" --against /tmp/main-before/src [--repeat 5]

`--scan-only --keep DIR` times the scan alone, on stores kept in DIR (`<log>.store`, ingested
once, as with --query-only), and with `--against SRC` alternates it with the scan of another
source tree (`SRC`: a `src` folder, e.g. of a checkout of main before a change), each in a
fresh process:

    python benchmarks/variations_bench.py --scan-only --keep DIR --variants id --scales 10
        --against /tmp/main-before/src [--repeat 3]

The logs take 0.3–0.4 GB each at 1×, 3–4 GB at 10× (with its store): check `df -h` first.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import compile_bytecode

ROOT = Path(__file__).resolve().parents[1]
LOOPHOUND = Path(sys.executable).with_name("loophound")

BASELINE = ("COPY (SELECT * FROM read_json('{log}'{opts})) TO '{out}/baseline.parquet' "
            "(FORMAT parquet)")
QUERY = "SELECT count(*) FROM requests WHERE error = 'SESSION_NOT_FOUND'"
RAW_QUERY = ("SELECT count(*) FROM read_json('{log}'{opts}) "
             "WHERE event = 'response' AND error_code = 'SESSION_NOT_FOUND'")

RUNNER = r"""
import json, resource, sys, time
kind, log, out, arg = sys.argv[1:5]
t0 = time.perf_counter()
result = {}
if kind == "baseline":
    import duckdb
    t1 = time.perf_counter()
    try:
        duckdb.connect().execute(arg.format(log=log, out=out, opts=""))
        result["sample_size"] = "default"
    except duckdb.Error:  # the default schema sample cannot read the file: read it all
        t1 = time.perf_counter()
        duckdb.connect().execute(arg.format(log=log, out=out, opts=", sample_size = -1"))
        result["sample_size"] = "whole file"
elif kind == "ingest":
    from loophound.ingest import ingest
    from loophound.store import Store
    t1 = time.perf_counter()
    report = ingest([log], Store(out))
    result["events"] = report.events
elif kind == "scan":
    import inspect
    from loophound.scan import scan_store
    from loophound.store import Store
    # as `loophound scan` attributes (no report; a source tree older than that option scans
    # as it did)
    lean = {"for_report": False} if "for_report" in inspect.signature(scan_store).parameters else {}
    t1 = time.perf_counter()
    doc = scan_store(Store(out), save=False, **lean).document
    runs = [f for f in doc["findings"] if f["detector"] == "repeated_error"]
    result |= {"findings": len(doc["findings"]), "incidents": len(doc.get("incidents", [])),
               "repeated_error": [[f["events"], f["sessions"]] for f in runs[:20]],
               "repeated_error_count": len(runs)}
t2 = time.perf_counter()
own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
result["loophound"] = sys.modules["loophound"].__file__ if "loophound" in sys.modules else None
print(json.dumps(result | {"seconds": t2 - t1, "with_imports": t2 - t0,
      "cpu_seconds": own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime,
      "peak_rss_mb": own.ru_maxrss / 1024}))
"""

# `investigate` as the quick start runs it (a temporary store, removed at the end), or with
# `kept` as `--store DIR` runs it (the store kept, the scan's run saved in it)
INVESTIGATE = r"""
import contextlib, io, json, resource, sys, time
log, out, where = sys.argv[1:4]
t0 = time.perf_counter()
from loophound.cli import run
sys.argv = ["loophound", "investigate", log, "--out", f"{out}/incident.html",
            "--generated-at", "2026-01-01T00:00:00Z"]
if where == "kept":
    sys.argv += ["--store", f"{out}/store"]
code = 0
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        run()
    except SystemExit as exc:
        code = exc.code or 0
own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"seconds": time.perf_counter() - t0, "exit": code,
                  "loophound": sys.modules["loophound"].__file__,
                  "cpu_seconds": own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime,
                  "peak_rss_mb": own.ru_maxrss / 1024}))
"""


def child(code: str, *args: str, src: Path | None = None) -> dict:
    # each row runs as its command does: `loophound` sets OPENBLAS_NUM_THREADS=1 for its own
    # process (cli.run: numpy's idle BLAS threads spin for a while after numpy loads, 3 % of
    # a scan's CPU samples), and the ingest and scan rows call the library it calls
    env = dict(os.environ)
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    if src is not None:  # another source tree's loophound, and its named queries if beside it
        env["PYTHONPATH"] = str(src)
        if (src.parent / "queries").is_dir():
            env["LOOPHOUND_QUERIES"] = str(src.parent / "queries")
    res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                         env=env)
    if res.returncode != 0:
        return {"error": (res.stderr.strip().splitlines() or ["?"])[-1]}
    out = json.loads(res.stdout.strip().splitlines()[-1])
    if src is not None and out.get("loophound") and not Path(out["loophound"]).resolve(
            ).is_relative_to(src.resolve()):
        # a PYTHONPATH without loophound in it (a wrong or missing path) falls back to the
        # installed code, which would be compared with itself
        sys.exit(f"--against {src}: the child imported loophound from {out['loophound']}, "
                 f"not from {src}; point --against at the src folder of a checkout")
    return out


def wall(cmd: list[str]) -> tuple[float, float, str]:
    """Run `cmd`: its wall-clock seconds, its CPU seconds (user + system, every thread: less
    swayed than the wall clock by other work on a busy machine) and its standard output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    took = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return took, cpu, res.stdout.strip()


def bench_log(name: str, log: Path, key: dict, work: Path, repeat: int,
              investigate: bool) -> dict:
    print(f"{name}: {log.stat().st_size / 2**20:,.0f} MiB, {key['lines']:,} lines, storms "
          f"{[s['requests'] for s in key['storms']]}", flush=True)
    runs: dict[str, list[dict]] = {"baseline": [], "ingest": [], "scan": [], "investigate": [],
                                   "investigate_kept": []}
    store = work / "store"
    for i in range(repeat):
        out = Path(tempfile.mkdtemp(dir=work))
        runs["baseline"].append(child(RUNNER, "baseline", str(log), str(out), BASELINE))
        shutil.rmtree(out)
        shutil.rmtree(store, ignore_errors=True)
        runs["ingest"].append(child(RUNNER, "ingest", str(log), str(store), ""))
        runs["scan"].append(child(RUNNER, "scan", str(log), str(store), ""))
        for side, where in (("investigate", "temporary"), ("investigate_kept", "kept")
                            ) if investigate else ():
            out = Path(tempfile.mkdtemp(dir=work))
            runs[side].append(child(INVESTIGATE, str(log), str(out), where))
            shutil.rmtree(out)
        print(f"  run {i + 1}: " + "   ".join(
            f"{k} {v[-1].get('seconds', float('nan')):6.2f} s ({v[-1].get('peak_rss_mb', 0):,.0f} MB)"
            + ("*" if v[-1].get("sample_size") == "whole file" else "")
            for k, v in runs.items() if v), flush=True)
        for k, v in runs.items():
            if v and "error" in v[-1]:
                print(f"  {k} failed: {v[-1]['error']}", flush=True)
    # a one-line query end to end, alternating with DuckDB on the raw file (read as the
    # baseline could read it)
    whole = any(r.get("sample_size") == "whole file" for r in runs["baseline"])
    query = query_rounds(log, store, max(repeat, 3), whole)
    shutil.rmtree(store, ignore_errors=True)
    med = {k: statistics.median(r["seconds"] for r in v if "seconds" in r)
           for k, v in runs.items() if v and any("seconds" in r for r in v)}
    rss = {k: max(r.get("peak_rss_mb", 0) for r in v) for k, v in runs.items() if v}
    last = runs["scan"][-1]
    out = {"variant": name, "bytes": log.stat().st_size, "lines": key["lines"],
           "storms": [s["requests"] for s in key["storms"]],
           "baseline_sample_size": "whole file" if whole else "default",
           "median_seconds": med, "peak_rss_mb": rss,
           "ingest_ratio": med["ingest"] / med["baseline"],
           "scan_over_ingest": med["scan"] / med["ingest"],
           "investigate_ratio": med["investigate"] / med["baseline"] if "investigate" in med
           else None,
           "investigate_kept_ratio": med["investigate_kept"] / med["baseline"]
           if "investigate_kept" in med else None,
           "findings": last.get("findings"), "incidents": last.get("incidents"),
           "repeated_error": last.get("repeated_error"),
           "repeated_error_count": last.get("repeated_error_count"),
           **query, "runs": runs}
    print(f"  median: baseline {med['baseline']:.2f} s, ingest {med['ingest']:.2f} s "
          f"({out['ingest_ratio']:.2f}×), scan {med['scan']:.2f} s "
          f"({out['scan_over_ingest']:.2f}× ingest)"
          + (f", investigate {med['investigate']:.2f} s ({out['investigate_ratio']:.2f}×), "
             f"with --store {med['investigate_kept']:.2f} s "
             f"({out['investigate_kept_ratio']:.2f}×)" if out["investigate_ratio"] else "")
          + f"; repeated_error findings {out['repeated_error_count']} "
            f"({(out['repeated_error'] or [[None]])[0][0]} events), findings {out['findings']},"
            f" incidents {out['incidents']}; sql {out['sql_seconds']:.2f} s vs raw "
            f"{out['raw_query_seconds']:.2f} s", flush=True)
    return out


def raw_query_code(log: Path, whole: bool) -> str:
    opts = ", sample_size = -1" if whole else ""
    return ("import duckdb; duckdb.sql('SET enable_progress_bar = false'); "
            f"print(duckdb.sql({RAW_QUERY.format(log=log, opts=opts)!r}).fetchall())")


def query_rounds(log: Path, store: Path, repeat: int, whole: bool) -> dict:
    """`loophound sql QUERY` on the store, then DuckDB counting the same in the raw file,
    alternating, each a new process, `repeat` times: their medians and answers."""
    sql, raw, sql_cpu, raw_cpu = [], [], [], []
    for _ in range(repeat):
        t, cpu, raw_out = wall([sys.executable, "-c", raw_query_code(log, whole)])
        raw.append(t)
        raw_cpu.append(cpu)
        t, cpu, sql_out = wall([str(LOOPHOUND), "sql", QUERY, "--store", str(store), "--format",
                                "csv"])
        sql.append(t)
        sql_cpu.append(cpu)
    return {"sql_seconds": statistics.median(sql), "raw_query_seconds": statistics.median(raw),
            "sql_cpu_seconds": statistics.median(sql_cpu),
            "raw_query_cpu_seconds": statistics.median(raw_cpu),
            "sql_all": sql, "raw_all": raw, "sql_cpu_all": sql_cpu, "raw_cpu_all": raw_cpu,
            "raw_sample_size": "whole file" if whole else "default",
            "sql_answer": sql_out.splitlines()[-1], "raw_answer": raw_out}


def query_only(name: str, log: Path, key: dict, repeat: int) -> dict:
    """The query alone, on a store ingested once beside the log (kept, and reused)."""
    store = log.with_suffix(".store")
    if not (store / "catalog.duckdb").exists():
        shutil.rmtree(store, ignore_errors=True)
        done = child(RUNNER, "ingest", str(log), str(store), "")
        if "error" in done:
            raise SystemExit(f"{name}: ingest failed: {done['error']}")
    # DuckDB's default schema sample, unless it cannot read the file (as for the baseline)
    probe = subprocess.run([sys.executable, "-c", raw_query_code(log, False)],
                           capture_output=True, text=True)
    out = {"variant": name, "bytes": log.stat().st_size, "lines": key["lines"],
           **query_rounds(log, store, repeat, probe.returncode != 0)}
    print(f"{name}: sql {out['sql_seconds']:.2f} s (CPU {out['sql_cpu_seconds']:.2f} s) vs "
          f"DuckDB on the raw file {out['raw_query_seconds']:.2f} s (CPU "
          f"{out['raw_query_cpu_seconds']:.2f} s){'*' if probe.returncode else ''} "
          f"({out['sql_seconds'] / out['raw_query_seconds']:.2f}×); answers "
          f"{out['sql_answer']} / {out['raw_answer']}", flush=True)
    return out


def query_table(results: list[dict]) -> str:
    rows = ["| log | MiB | lines | `loophound sql` | DuckDB on the raw file | ratio | CPU: sql "
            "/ DuckDB | answer |", "|" + "---|" * 8]
    for r in results:
        star = "*" if r["raw_sample_size"] != "default" else ""
        rows.append(f"| {r['variant']} | {r['bytes'] / 2**20:,.0f} | {r['lines']:,} | "
                    f"{r['sql_seconds']:.2f} s | {r['raw_query_seconds']:.2f} s{star} | "
                    f"{r['sql_seconds'] / r['raw_query_seconds']:.2f}× | "
                    f"{r['sql_cpu_seconds']:.2f} / {r['raw_query_cpu_seconds']:.2f} s | "
                    f"{r['sql_answer']} |")
    return "\n".join(rows)


def bench_scan(name: str, log: Path, work: Path, repeat: int, against: Path | None) -> dict:
    """The scan alone, on a store kept beside the log (ingested once), alternating with the
    scan of the source tree `against` when given."""
    store = log.with_suffix(".store")  # as --query-only keeps it
    if not (store / "catalog.duckdb").exists():
        shutil.rmtree(store, ignore_errors=True)
        made = child(RUNNER, "ingest", str(log), str(store), "")
        print(f"{name}: ingested into {store} ({made.get('seconds', float('nan')):.1f} s)",
              flush=True)
    sides = {"scan": None} | ({"against": against} if against else {})
    runs: dict[str, list[dict]] = {k: [] for k in sides}
    for i in range(repeat):
        for side, src in sides.items():
            runs[side].append(child(RUNNER, "scan", str(log), str(store), "", src=src))
        print(f"  {name} run {i + 1}: " + "   ".join(
            f"{k} {v[-1].get('seconds', float('nan')):6.2f} s "
            f"(CPU {v[-1].get('cpu_seconds', float('nan')):.1f} s with imports and child "
            f"processes; {v[-1].get('peak_rss_mb', 0):,.0f} MB; {v[-1].get('findings')} findings)"
            + (f" failed: {v[-1]['error']}" if "error" in v[-1] else "")
            for k, v in runs.items()), flush=True)
    med, cpu = medians(runs, "seconds"), medians(runs, "cpu_seconds")
    rss = {k: max(r.get("peak_rss_mb", 0) for r in v) for k, v in runs.items()}
    same = len({json.dumps({k: r.get(k) for k in ("findings", "repeated_error")})
                for v in runs.values() for r in v}) == 1
    print(f"  {name} median: " + ", ".join(f"{k} {m:.2f} s (CPU {cpu.get(k, float('nan')):.1f} s;"
                                          f" peak {rss[k]:,.0f} MB)" for k, m in med.items())
          + (f"; ratio {med['scan'] / med['against']:.2f}" if len(med) == 2 else "")
          + f"; same findings: {same}", flush=True)
    return {"variant": name, "median_seconds": med, "median_cpu_seconds": cpu,
            "peak_rss_mb": rss, "same_findings": same,
            "runs": runs}


def medians(runs: dict[str, list[dict]], figure: str) -> dict[str, float]:
    """Per side, the median of `figure` over the rounds that measured it."""
    return {k: statistics.median(r[figure] for r in v if figure in r)
            for k, v in runs.items() if any(figure in r for r in v)}


def bench_against_baseline(name: str, log: Path, work: Path, repeat: int,
                           against: Path | None, command: str = "investigate",
                           where: str = "temporary") -> dict:
    """`command` (`investigate` end to end: ingest, scan, report; or `ingest` alone; imports
    included) against DuckDB's default COPY of the same file, alternating in each round, each
    in a fresh process; with `against`, that command of that source tree too. `where`: the
    store investigate uses, `temporary` (its default) or `kept` (`--store`)."""
    sides = {"baseline": None, command: None} | ({"against": against} if against else {})
    runs: dict[str, list[dict]] = {k: [] for k in sides}
    for i in range(repeat):
        for side, src in sides.items():
            out = Path(tempfile.mkdtemp(dir=work))
            if side == "baseline":
                runs[side].append(child(RUNNER, "baseline", str(log), str(out), BASELINE))
            elif command == "ingest":
                runs[side].append(child(RUNNER, "ingest", str(log), str(out / "store"), "",
                                        src=src))
            else:
                runs[side].append(child(INVESTIGATE, str(log), str(out), where, src=src))
            shutil.rmtree(out)
        print(f"  {name} run {i + 1}: " + "   ".join(
            f"{k} {v[-1].get('seconds', float('nan')):6.2f} s (CPU "
            f"{v[-1].get('cpu_seconds', float('nan')):.1f} s)"
            + ("*" if v[-1].get("sample_size") == "whole file" else "")
            + (f" failed: {v[-1]['error']}" if "error" in v[-1] else "")
            for k, v in runs.items()), flush=True)
    med, cpu = medians(runs, "seconds"), medians(runs, "cpu_seconds")
    print(f"  {name} median: " + ", ".join(
        f"{k} {m:.2f} s (CPU {cpu.get(k, float('nan')):.1f} s"
        + (f"; {m / med['baseline']:.2f}× DuckDB" if k != "baseline" else "") + ")"
        for k, m in med.items()), flush=True)
    return {"variant": name, "median_seconds": med, "median_cpu_seconds": cpu, "runs": runs}


def table(results: list[dict]) -> str:
    rows = ["| log | MiB | lines | baseline | ingest | ratio | scan | scan / ingest | "
            "investigate (ratio) / with --store | peak RSS ingest / scan | repeated_error findings (storm "
            "events) | sql / raw |", "|" + "---|" * 12]
    for r in results:
        m, rss = r["median_seconds"], r["peak_rss_mb"]
        inv = (f"{m['investigate']:.1f} s ({r['investigate_ratio']:.2f}×) / "
               f"{m['investigate_kept']:.1f} s ({r['investigate_kept_ratio']:.2f}×)"
               if r["investigate_ratio"] else "")
        storm = ", ".join(str(x[0]) for x in (r["repeated_error"] or []))
        base = f"{m['baseline']:.2f} s" + ("*" if r["baseline_sample_size"] != "default" else "")
        rows.append(
            f"| {r['variant']} | {r['bytes'] / 2**20:,.0f} | {r['lines']:,} | {base} | "
            f"{m['ingest']:.2f} s | {r['ingest_ratio']:.2f}× | {m['scan']:.2f} s | "
            f"{r['scan_over_ingest']:.2f} | {inv} | {rss['ingest']:,.0f} / {rss['scan']:,.0f} MB"
            f" | {r['repeated_error_count']} ({storm}) | {r['sql_seconds']:.2f} / "
            f"{r['raw_query_seconds']:.2f} s |")
    return "\n".join(rows)


def main() -> None:
    sys.path.insert(0, str(ROOT / "src"))
    from loophound.synth.bproxy_variants import VARIANTS, variant, write_bproxy_variant

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--variants", default=",".join(v.name for v in VARIANTS))
    ap.add_argument("--big", default="req_id", help="the variant also written at --scales")
    ap.add_argument("--scales", default="2,10")
    ap.add_argument("--investigate", default="",
                    help="the variants whose investigate is timed too (at 1×): id,no_id or all")
    ap.add_argument("--keep", type=Path, help="keep (and reuse) the logs in this folder")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--size", type=float, default=1.0,
                    help="a fraction of the full size, to try the benchmark out (0.02)")
    ap.add_argument("--query-only", action="store_true",
                    help="time only the one-line query (--repeat rounds, 5 or more advised) "
                         "against DuckDB on the raw file, on a store ingested once beside "
                         "each log (with --keep: kept and reused)")
    ap.add_argument("--scan-only", action="store_true",
                    help="time the scan alone, on stores kept in --keep (ingested once)")
    ap.add_argument("--kept-store", action="store_true",
                    help="with --investigate-only: time `investigate --store DIR` (the run "
                         "saved in a store that is kept), not the default temporary store")
    ap.add_argument("--investigate-only", action="store_true",
                    help="time only `investigate` end to end against DuckDB's default COPY "
                         "(and the --against tree's investigate)")
    ap.add_argument("--ingest-only", action="store_true",
                    help="time only `loophound ingest` against DuckDB's default COPY (and the "
                         "--against tree's ingest)")
    ap.add_argument("--against", type=Path,
                    help="with --scan-only, --investigate-only or --ingest-only: a source tree "
                         "(src folder) whose scan, investigate or ingest alternates")
    args = ap.parse_args()
    if args.scan_only and not args.keep:
        ap.error("--scan-only needs --keep DIR (where the stores are kept)")
    # the big one first, then its scales, then the other shapes
    names = [n for n in args.variants.split(",") if n]
    names.sort(key=lambda n: n != args.big)
    try:
        scales = [float(s) for s in args.scales.split(",") if s]
    except ValueError:
        ap.error(f"--scales takes numbers separated by commas (2,10); got {args.scales!r}")
    try:
        plan = [(variant(n), 1.0) for n in names[:1]]
        plan += [(variant(args.big), scale) for scale in scales]
        plan += [(variant(n), 1.0) for n in names[1:]]
    except ValueError as exc:  # a name no variant has
        ap.error(str(exc))
    compile_bytecode(args.against)
    work = args.keep or Path(tempfile.mkdtemp(prefix="loophound-variations-"))
    work.mkdir(parents=True, exist_ok=True)
    results = []
    try:
        for v, scale in plan:
            name = v.name if scale == 1 else f"{v.name} ×{scale:g}"
            log = work / f"{v.name}-x{scale * args.size:g}.log"
            key_file = log.with_suffix(".json")
            if not (log.exists() and key_file.exists()):
                t = time.perf_counter()
                key = write_bproxy_variant(log, v, scale=scale * args.size)
                key_file.write_text(json.dumps(key))
                print(f"wrote {log.name} in {time.perf_counter() - t:.1f} s", flush=True)
            key = json.loads(key_file.read_text())
            if args.scan_only:
                results.append(bench_scan(name, log, work, args.repeat, args.against))
                continue
            if args.investigate_only or args.ingest_only:
                results.append(bench_against_baseline(
                    name, log, work, args.repeat, args.against,
                    "ingest" if args.ingest_only else "investigate",
                    "kept" if args.kept_store else "temporary"))
                continue
            timed = args.investigate == "all" or v.name in args.investigate.split(",")
            if args.query_only:
                results.append(query_only(name, log, key, args.repeat))
            else:
                results.append(bench_log(name, log, key, work, args.repeat, timed and scale == 1))
            if not args.keep:
                log.unlink()
                shutil.rmtree(log.with_suffix(".store"), ignore_errors=True)
            if args.json:
                args.json.write_text(json.dumps(results, indent=2) + "\n")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if args.scan_only or args.investigate_only or args.ingest_only:
        return
    print()
    print(query_table(results) if args.query_only else table(results))
    print("* DuckDB's default schema sample could not read this file: sample_size = -1")


if __name__ == "__main__":
    main()

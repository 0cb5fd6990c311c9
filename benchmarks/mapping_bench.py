"""Benchmark: what a part's mapping costs beside the JSON parse it cannot do without.

Ingest's mapping (a part of a chunk, on a DuckDB cursor of its own) is about 60 % of its CPU
(docs/benchmarks.md, "The late afternoon"). This takes a part of bproxy-shaped logs of every
shape `variations_bench.py` writes, from the middle of the storm, where healthy sessions
interleave with it, and times on one DuckDB thread, in rounds that alternate the steps:

- `parse`: `from_json(text, <the format's struct>)` into Arrow: the parse, and the fields
  read, that any mapping of these lines needs (the baseline);
- `keys`: the key check (every line's keys against those the format maps or knows);
- `select`: the mapping SELECT into Arrow (`mapped_sql`);
- `complete`: the key columns and the exact `extra` (`completed`);

and prints each step's median thread CPU and the three steps' sum against `parse`:

    python benchmarks/mapping_bench.py [--variants id,no_id] [--lines 65536] [--rounds 11]

Thread CPU, not wall time: one thread does all of it, and the rounds alternate, so a machine
that slows down slows every step alike.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import pyarrow as pa  # noqa: E402

from loophound import db  # noqa: E402
from loophound.formats import bproxy  # noqa: E402
from loophound.formats.base import FormatContext  # noqa: E402
from loophound.ingest import _Mapper  # noqa: E402
from loophound.synth.bproxy_variants import VARIANTS, variant, write_bproxy_variant  # noqa: E402


def part_of(log: Path, lines: int) -> pa.Table:
    """`lines` lines from the middle of `log`, as ingest hands a part to its mapper."""
    every = log.read_bytes().splitlines(keepends=True)
    start = max(0, len(every) // 2 - lines // 2)
    offsets = list(itertools.accumulate((len(t) for t in every[:start + lines]), initial=0))
    texts = [t.rstrip(b"\n").decode() for t in every[start:start + lines]]
    offsets = offsets[start:start + len(texts)]
    return pa.table({"line": pa.array(range(start + 1, start + 1 + len(texts)), pa.int64()),
                     "byte_offset": pa.array(offsets, pa.int64()),
                     "byte_length": pa.array([len(t) for t in texts], pa.int32()),
                     "text": pa.array(texts)})


def steps(part: pa.Table, log: Path) -> dict[str, Callable[[], object]]:
    """The steps of the part's mapping, each callable again and again."""
    con = db.scratch()
    con.execute("SET threads = 1")
    con.register("raw", part)
    mapper = _Mapper(con, bproxy.FORMAT, FormatContext(log, log.name, 1))
    merge = mapper.merges_later()
    mapper._find_unknown_keys(Counter(), merge=merge)
    mapped = con.sql(mapper.mapped_sql(), params={"file": log.name}).to_arrow_table()
    return {
        "parse": lambda: con.sql(f"SELECT from_json(text, {bproxy.STRUCT}) AS r FROM raw").to_arrow_table(),
        "keys": lambda: mapper._find_unknown_keys(Counter(), merge=merge),
        "select": lambda: con.sql(mapper.mapped_sql(), params={"file": log.name}).to_arrow_table(),
        "complete": lambda: mapper.completed(mapped),
    }


def measure(work: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Median thread CPU of each step (seconds), the steps alternating round by round."""
    took: dict[str, list[float]] = {name: [] for name in work}
    for _ in range(rounds):
        for name, step in work.items():
            start = time.thread_time()
            step()
            took[name].append(time.thread_time() - start)
    return {name: statistics.median(t) for name, t in took.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", default=",".join(v.name for v in VARIANTS))
    ap.add_argument("--lines", type=int, default=65_536, help="lines in the part")
    ap.add_argument("--rounds", type=int, default=11)
    args = ap.parse_args()
    try:
        chosen = [variant(name) for name in args.variants.split(",")]
    except ValueError as exc:
        ap.error(str(exc))
    print("| log | parse | keys | select | complete | mapping | mapping / parse |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="loophound-mapping-") as tmp:
        for shape in chosen:
            name = shape.name
            log = Path(tmp) / f"{name}.log"
            # a tenth of the incident's storm and time: the same shape, ~170,000 lines
            write_bproxy_variant(log, shape, scale=0.1)
            got = measure(steps(part_of(log, args.lines), log), args.rounds)
            mapping = got["keys"] + got["select"] + got["complete"]
            ms = {k: f"{v * 1000:.0f} ms" for k, v in got.items()}
            print(f"| {name} | {ms['parse']} | {ms['keys']} | {ms['select']} | "
                  f"{ms['complete']} | {mapping * 1000:.0f} ms | {mapping / got['parse']:.2f}× |",
                  flush=True)


if __name__ == "__main__":
    main()

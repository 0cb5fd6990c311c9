"""What the benchmarks share: the full-size incident log, and the DuckDB baseline they are
measured against (`read_json` → Parquet on the same file), and loophound's bytecode compiled before timing."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

# With DuckDB's default schema sample, read_json stops on this log ("unknown key reason" at
# line 355,945), so the baseline reads the whole file for its schema.
BASELINE_SQL = ("COPY (SELECT * FROM read_json('{log}', sample_size = -1)) "
                "TO '{out}/baseline.parquet' (FORMAT parquet)")


def incident_log(keep: Path | None, prefix: str) -> tuple[Path, Path]:
    """(work folder, the seed-001 incident at full size in it), written unless already there."""
    from loophound.synth import bproxy_full_incident

    workdir = keep or Path(tempfile.mkdtemp(prefix=prefix))
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "2026-06-18.log"
    if not log.exists():
        bproxy_full_incident(log)
    return workdir, log


def describe(log: Path) -> str:
    lines = sum(1 for _ in log.open("rb"))
    return f"input: {log} — {log.stat().st_size / 2**20:.1f} MiB, {lines:,} lines"


def compile_bytecode(against: Path | None) -> None:
    """Compile loophound's modules to bytecode (`__pycache__`) before anything is timed, as
    `pip install` does for an installed package: with an editable install in an environment
    that sets PYTHONDONTWRITEBYTECODE (these machines do), every command would otherwise
    compile every module it imports from source, each time (0.05-0.1 s of a one-line query),
    which DuckDB, installed with its bytecode, never pays."""
    found = subprocess.run([sys.executable, "-c", "import loophound, os; "
                            "print(os.path.dirname(loophound.__file__))"],
                           capture_output=True, text=True, check=True).stdout.strip()
    trees = [Path(found)] + ([against / "loophound"] if against else [])
    for tree in trees:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree)], check=True)
    print("bytecode compiled beforehand, as an installed package has it: "
          + ", ".join(str(t) for t in trees), flush=True)

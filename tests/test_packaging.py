"""An installed loophound is complete: the wheel holds every module and every named query, and
the named queries work from it (not from the checkout's `queries/` folder)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STEP_TIMEOUT = 60  # seconds a step may take; the whole test takes about 10 s


def _run(args: list[str], check: bool = True, **kw) -> subprocess.CompletedProcess:
    got = subprocess.run(args, capture_output=True, text=True, timeout=STEP_TIMEOUT, **kw)
    assert got.returncode == 0 or not check, f"{' '.join(args)}\n{got.stdout}\n{got.stderr}"
    return got


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built from a copy of the sources (an in-tree build would reuse `build/`)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info")
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in ("src", "queries"):
        shutil.copytree(ROOT / name, src / name, ignore=skip)
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp / "dist"),
             str(src)]
    # pip installs the build backend from its configured indexes; where it cannot, the
    # venv's own setuptools builds the wheel
    if _run(build, check=False, cwd=tmp).returncode != 0:
        _run([*build, "--no-build-isolation"], cwd=tmp)
    (found,) = (tmp / "dist").glob("loophound-*.whl")
    return found


def test_the_wheel_holds_every_module_and_named_query(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {f"loophound/{p.relative_to(ROOT / 'src' / 'loophound').as_posix()}"
               for p in (ROOT / "src" / "loophound").rglob("*.py")}
    assert modules - names == set()
    sql = sorted((ROOT / "queries").glob("*.sql"))
    assert sql
    assert {f"loophound/named_queries/{p.name}" for p in sql} - names == set()


def test_named_queries_work_from_the_installed_wheel(wheel, tmp_path):
    target = tmp_path / "site"
    _run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q",
          "--target", str(target), str(wheel)])
    env = {k: v for k, v in os.environ.items() if k != "LOOPHOUND_QUERIES"}
    env |= {"PYTHONPATH": str(target), "COLUMNS": "250", "NO_COLOR": "1"}

    def loophound(*args: str) -> str:
        return _run([sys.executable, "-c", "from loophound.cli import run; run()", *args],
                    cwd=tmp_path, env=env).stdout

    where = _run([sys.executable, "-c", "import loophound, loophound.queries as q; "
                  "print(loophound.__file__); print(*q.query_dirs(), sep='\\n')"],
                 cwd=tmp_path, env=env).stdout.split()
    assert all(Path(p).is_relative_to(target) for p in where), where
    listed = loophound("query", "--list")
    for p in (ROOT / "queries").glob("*.sql"):
        assert p.stem in listed, p.stem
    store = tmp_path / "store"
    loophound("ingest", str(ROOT / "sample_logs" / "hooks"), "--store", str(store))
    rows = json.loads(loophound("query", "top_talkers", "--store", str(store), "--format",
                                "json"))
    assert rows and rows[0]["events"] > 0 and rows[0]["cost_usd"] > 0

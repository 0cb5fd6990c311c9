"""DuckDB as loophound opens it: a bounded memory, a private spill folder per database, and a
bad LOOPHOUND_MEMORY_LIMIT said in one sentence (exit 2)."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loophound import db
from loophound.errors import ConfigError

LOOPHOUND = [sys.executable, "-c", "from loophound.cli import run; run()"]


def setting(con, name: str) -> str:
    return con.execute(f"SELECT current_setting('{name}')").fetchall()[0][0]


def test_duckdb_gets_an_eighth_of_the_machine_between_256_mib_and_1_gib(monkeypatch):
    monkeypatch.delenv(db.MEMORY_ENV, raising=False)
    mib = int(db.memory_limit().removesuffix("MiB"))
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    assert mib == min(max(total // 8, 256), 1024)
    shown = f"{mib / 1024:.1f} GiB" if mib >= 1024 else f"{mib:.1f} MiB"
    assert setting(db.connect(), "memory_limit") == shown


def test_the_limit_can_be_set_and_a_bad_one_is_refused(monkeypatch):
    monkeypatch.setenv(db.MEMORY_ENV, "300MiB")
    assert setting(db.connect(), "memory_limit") == "300.0 MiB"
    monkeypatch.setenv(db.MEMORY_ENV, "lots")
    with pytest.raises(ConfigError, match="LOOPHOUND_MEMORY_LIMIT='lots' is not a size"):
        db.connect()


def test_each_database_spills_into_a_private_folder_of_its_own(monkeypatch):
    monkeypatch.setenv(db.MEMORY_ENV, "64MiB")
    a, b = db.connect(), db.connect()
    folders = [Path(setting(c, "temp_directory")) for c in (a, b)]
    assert folders[0] != folders[1] and all(f.parent == Path(db._SPILL[0]) for f in folders)
    # more than the limit to sort: DuckDB writes it out there, and the answer is whole
    n = a.execute("SELECT count(*), min(x), max(x) FROM (SELECT hash(range) AS x, "
                  "repeat('x', 40) AS pad FROM range(3000000) ORDER BY x)").fetchall()[0]
    assert n[0] == 3_000_000


def test_a_bad_memory_limit_is_one_line_and_exit_2(tmp_path):
    log = tmp_path / "agent.jsonl"
    log.write_text(json.dumps({"ts": 1767600000, "from": "a", "to": "b"}) + "\n")
    env = {k: v for k, v in os.environ.items() if k != "LOOPHOUND_DEBUG"}
    res = subprocess.run([*LOOPHOUND, "ingest", str(log), "--store", str(tmp_path / "st")],
                         capture_output=True, text=True, timeout=120,
                         env=env | {db.MEMORY_ENV: "half"})
    out = (res.stdout + res.stderr).strip()
    assert res.returncode == 2 and "Traceback" not in out, out
    assert out.startswith("error: ") and "LOOPHOUND_MEMORY_LIMIT='half'" in out, out


def test_spill_folders_go_with_their_database_and_their_process(monkeypatch, tmp_path):
    monkeypatch.setattr(db.tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(db, "_SPILL", [])
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    orphan = tmp_path / f"loophound-spill-{dead}-abc"  # a killed process's, with a spill
    (orphan / "tmpx").mkdir(parents=True)
    (orphan / "tmpx" / "duckdb_temp_storage.tmp").write_bytes(b"x" * 10)
    alive = tmp_path / f"loophound-spill-{os.getppid()}-def"  # a running process's
    alive.mkdir()
    con = db.connect()
    folder = Path(setting(con, "temp_directory"))
    assert not orphan.exists() and alive.exists()
    assert folder.parent.name.startswith(f"loophound-spill-{os.getpid()}-")
    del con
    gc.collect()
    assert not folder.exists() and folder.parent.exists()


def test_a_scan_leaves_room_for_what_python_holds(monkeypatch, tmp_path):
    """The budget is the process's: a scan gives DuckDB SCAN_SHARE of it, unless
    LOOPHOUND_MEMORY_LIMIT names DuckDB's bound."""
    from loophound.ingest import ingest
    from loophound.scan import scan_store
    from loophound.store import Store

    monkeypatch.delenv(db.MEMORY_ENV, raising=False)
    budget = int(db.memory_limit().removesuffix("MiB"))
    mib = int(budget * db.SCAN_SHARE)
    assert db.leave_room_for_python(db.connect()) == f"{mib}MiB" and mib < budget
    log = tmp_path / "agent.jsonl"
    log.write_text(json.dumps({"ts": 1767600000, "from": "a", "to": "b"}) + "\n")
    ingest([str(log)], Store(tmp_path / "st"))
    con = scan_store(Store(tmp_path / "st"), save=False).con
    assert setting(con, "memory_limit") == f"{mib:.1f} MiB"
    monkeypatch.setenv(db.MEMORY_ENV, "300MiB")
    con = scan_store(Store(tmp_path / "st"), save=False).con
    assert setting(con, "memory_limit") == "300.0 MiB"
    con.execute(f"SET memory_limit = '{mib}MiB'")  # the process's shared database, as it was


def test_an_ingest_after_a_scan_in_one_process_has_the_whole_budget(monkeypatch, tmp_path):
    """`watch` ingests and scans in one process: the scan's share is not the next ingest's."""
    from loophound.ingest import ingest
    from loophound.scan import scan_store
    from loophound.store import Store

    monkeypatch.delenv(db.MEMORY_ENV, raising=False)
    budget = int(db.memory_limit().removesuffix("MiB"))
    log = tmp_path / "agent.jsonl"
    log.write_text(json.dumps({"ts": 1767600000, "from": "a", "to": "b"}) + "\n")
    ingest([str(log)], Store(tmp_path / "st"))
    con = scan_store(Store(tmp_path / "st"), save=False).con
    assert setting(con, "memory_limit") == f"{int(budget * db.SCAN_SHARE):.1f} MiB"
    with log.open("a") as fh:
        fh.write(json.dumps({"ts": 1767600001, "from": "b", "to": "a"}) + "\n")
    ingest([str(log)], Store(tmp_path / "st"))
    shown, unit = setting(db.scratch(), "memory_limit").split()
    assert float(shown) * {"MiB": 1, "GiB": 1024}[unit] == budget


# --- numpy ↔ Arrow without pandas ---------------------------------------------------------------
# pyarrow's own conversions (`pa.array`, `to_numpy`) are the reference: the helpers must give
# exactly what they give, on slices (an Arrow offset), empty arrays, NULLs and booleans.

NUMBERS = ["int64", "int32", "uint8", "float64", "float32", "bool"]


def _values(dtype: str, n: int = 37):
    import numpy as np

    rng = np.random.default_rng(7)
    if dtype == "bool":
        return rng.random(n) < 0.4
    return rng.integers(0, 200, n).astype(dtype) if dtype[0] in "iu" else rng.random(n).astype(dtype)


@pytest.mark.parametrize("dtype", NUMBERS)
@pytest.mark.parametrize("start,stop", [(0, 37), (3, 29), (9, 9), (0, 0), (36, 37)])
def test_numpy_arrow_gives_what_pa_array_gives(dtype, start, stop):
    import numpy as np
    import pyarrow as pa

    values = _values(dtype)[start:stop]
    mask = (np.arange(37) % 5 == 2)[start:stop]
    got = db.numpy_arrow(values)
    assert got.type == pa.from_numpy_dtype(values.dtype) and got.equals(pa.array(values))
    nullable = db.numpy_arrow(values, pa.from_numpy_dtype(values.dtype), mask=mask)
    assert nullable.equals(pa.array(values, mask=mask)) and nullable.null_count == mask.sum()
    nullable.validate(full=True)


def test_numpy_arrow_converts_to_the_type_asked_and_refuses_what_does_not_fit():
    import numpy as np
    import pyarrow as pa

    assert db.numpy_arrow(np.array([1, 2**31 - 1]), pa.int32()).equals(
        pa.array([1, 2**31 - 1], pa.int32()))
    with pytest.raises(OverflowError):
        db.numpy_arrow(np.array([2**31]), pa.int32())
    with pytest.raises(TypeError):
        db.numpy_arrow(np.array(["a"]))


@pytest.mark.parametrize("dtype", NUMBERS)
@pytest.mark.parametrize("start,stop", [(0, 37), (3, 29), (9, 9), (0, 0), (11, 12)])
def test_arrow_numpy_gives_what_to_numpy_gives(dtype, start, stop):
    import numpy as np
    import pyarrow as pa

    whole = pa.array(_values(dtype), mask=np.arange(37) % 5 == 2)
    column = whole.slice(start, stop - start)
    filled = {"bool": False, "float64": np.nan, "float32": np.nan}.get(dtype, 7)
    assert np.array_equal(db.arrow_numpy(column, null=filled),
                          column.fill_null(filled).to_numpy(zero_copy_only=False), equal_nan=True)
    plain = pa.array(_values(dtype)).slice(start, stop - start)
    got = db.arrow_numpy(plain)
    assert got.dtype == plain.to_numpy(zero_copy_only=False).dtype
    assert np.array_equal(got, plain.to_numpy(zero_copy_only=False))
    kept = ~np.asarray(column.is_null().to_pylist(), dtype=bool)
    assert np.array_equal(db.arrow_numpy(column, unused_nulls=True)[kept],
                          column.to_numpy(zero_copy_only=False)[kept])


def test_arrow_numpy_reads_each_chunk_of_a_chunked_array_and_none():
    import numpy as np
    import pyarrow as pa

    chunked = pa.chunked_array([pa.array([1, 2, 3]).slice(1), pa.array([], pa.int64()),
                                pa.array([4, None])])
    assert db.arrow_numpy(chunked, null=0).tolist() == [2, 3, 4, 0]
    empty = db.arrow_numpy(pa.chunked_array([], pa.int64()))
    assert empty.dtype == np.int64 and len(empty) == 0


def test_strings_arrow_gives_the_strings_and_nulls_pa_array_gives():
    import pyarrow as pa

    values = ["a", None, "", "caf\u00e9 \u202e", "x" * 300, None]
    got = db.strings_arrow(values)
    got.validate(full=True)
    assert got.equals(pa.array(values, pa.large_string()))
    assert db.strings_arrow([]).equals(pa.array([], pa.large_string()))


@pytest.mark.parametrize("once", [True, False], ids=["submitted once", "relation"])
def test_arrow_gives_the_rows_of_a_relation_with_its_values_bound(monkeypatch, once):
    """`db.arrow` runs a query through the engine's one-shot call where the pinned duckdb has
    it (it does: the fast path is what ingest runs), else through a relation: the same rows,
    types and chunks both ways, and a value is bound, never read as SQL."""
    assert db._SUBMIT
    monkeypatch.setattr(db, "_SUBMIT", once)
    con = db.scratch()
    query = ("SELECT i, $tag || i AS s, CASE WHEN i % 3 = 0 THEN NULL ELSE i * 1.5 END AS d "
             "FROM range($n) t(i)")
    values = {"tag": "'); DROP TABLE x; --", "n": 300_000}
    got = db.arrow(con, query, values)
    assert got.equals(con.sql(query, params=values).to_arrow_table())
    assert got.num_rows == 300_000 and got["s"][1].as_py() == "'); DROP TABLE x; --1"
    assert db.arrow(con, "SELECT 1 AS one WHERE false").num_rows == 0


CONVERSIONS = """
import sys
import numpy as np
import pyarrow as pa
from loophound import db
chunked = pa.chunked_array([db.numpy_arrow(np.arange(5), mask=np.arange(5) == 2)])
db.arrow_numpy(chunked, null=-1), db.arrow_numpy(db.numpy_arrow(np.arange(3) > 0))
db.strings_arrow(["a", None]), db.arrow_numpy(pa.chunked_array([], pa.int64()))
print("pandas" in sys.modules)
"""


def test_the_conversions_do_not_import_pandas():
    """What they are for: pyarrow's own import pandas when it is installed (0.3-2 s)."""
    pytest.importorskip("pandas")
    done = subprocess.run([sys.executable, "-c", CONVERSIONS], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONPATH=str(
                              Path(db.__file__).parents[1])))
    assert done.stdout.split() == ["False"], done.stderr

"""`--engine spark` for `ingest` and `scan`: the options, and the commands' Spark path.

PySpark is imported only here, inside the functions, and only when the engine is asked for:
the default engine (DuckDB in this process) never loads it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import ConfigError, no_store
from ..store import Store
from .shell import err, load_mapping_file, print_ingest_report, user_errors

if TYPE_CHECKING:
    from ..ingest import IngestReport

ENGINES = ("duckdb", "spark")

EngineOpt = Annotated[str, typer.Option(
    "--engine", help="duckdb (this process, the default) or spark: a Spark cluster's executors "
                     "read the files and run the detectors (pip install 'loophound\\[spark]'; "
                     "docs/scale-out.md).")]
SparkMasterOpt = Annotated[str | None, typer.Option(
    "--spark-master", help="With --engine spark: local[2], spark://host:7077, yarn, or "
                           "sc://host:15002 (Spark Connect). Default: SPARK_REMOTE, else Spark's "
                           "own configuration (SPARK_CONF_DIR), else local[*].")]
OnlyOpt = Annotated[str | None, typer.Option(
    "--only", help="Run only these detectors (comma-separated names).")]


def engine_of(engine: str, incremental: bool = False) -> str:
    """The engine asked for, checked: a scheduled scan runs in this process."""
    with user_errors():
        if engine not in ENGINES:
            raise ConfigError(f"--engine must be one of {', '.join(ENGINES)}; got {engine!r}")
        if engine == "spark" and incremental:
            raise ConfigError("--incremental runs in this process (a scheduled scan reads what "
                              "is new, seconds of work); drop --engine spark")
    return engine


def only_list(only: str | None) -> list[str] | None:
    return [n.strip() for n in only.split(",") if n.strip()] if only else None


def spark_ingest(paths: list[str], store: Path, fmt: str | None, mapping: Path | None,
                 max_line_bytes: int, wait: bool, master: str | None) -> IngestReport:
    """`ingest --engine spark`: new files read on the executors (loophound.spark.ingest)."""
    with user_errors():
        from ..ingest import IngestOptions
        from ..spark import session
        from ..spark.ingest import ingest_on_spark

        options = IngestOptions(format=fmt, mapping=load_mapping_file(mapping),
                                max_line_bytes=max_line_bytes, wait=wait)
        return ingest_on_spark(session(master), paths, Store(store), options)
    raise AssertionError("unreachable")


def spark_scan(paths: list[str], store: Path, config: Path | None, set_: list[str],
               prices: Path | None, cost_per_call: float | None, only: list[str] | None,
               save_to: Path | None, wait: bool, fmt: str | None, mapping: Path | None,
               master: str | None, quiet: bool = False):
    """`scan --engine spark`: PATHs ingested on Spark first, then the detectors on Spark."""
    from .. import api

    with user_errors():
        from ..spark import session
        from ..spark.scan import on_spark, scan_on_spark

        on_spark(only)  # a name that is no detector's is said before Spark starts
        api.check_settings(config, set_ or [])
        costs = api.cost_model(prices, cost_per_call)
        spark = session(master)
        if paths:
            report = spark_ingest(paths, store, fmt, mapping, 16 * 1024 * 1024, wait, master)
            if not quiet:
                print_ingest_report(report, store)
        evidence = Store(store)
        if not evidence.exists():
            raise no_store(store)
        result = scan_on_spark(spark, evidence, config, set_ or [], costs, only, save_to)
    if result.saved_in is not None and not quiet:
        err.print(f"findings saved in {result.saved_in}", highlight=False)
    return result

"""The Spark engine (`--engine spark`, `pip install 'loophound[spark]'`): the same ingest and
the same detectors, run on a Spark cluster over the same store.

Nothing here is imported unless the engine is asked for: the default path (DuckDB in one
process) neither imports PySpark nor pays for it. What runs where:

- `ingest.py`: the files new to the store are read on the executors, a contiguous slice of
  them per task, each task running loophound's own ingest into a staging store beside the
  store, numbering its inputs as the whole run would; the driver moves the Parquet files
  into the store and commits their catalog rows in one transaction.
- `scan.py`: each detector that declares how its events divide (`Detector.partition_by`)
  runs, unchanged, on the executors over each group of events (`groupBy().applyInArrow`,
  one DuckDB connection per group); the driver gathers the findings, attributes them and
  saves the run as the default engine does.

The session: `--spark-master` (`local[2]`, `spark://host:7077`, `yarn`, or `sc://host:15002`
for Spark Connect), else `SPARK_REMOTE` (Spark Connect), else Spark's own configuration
(`spark-defaults.conf` in `SPARK_CONF_DIR`, or what `spark-submit` was given), else
`local[*]`. Session time is UTC, as the store's is.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any

from ..errors import UserError


class EngineUnavailable(UserError):
    """The Spark engine was asked for but cannot run here (no PySpark, no Java), or cannot
    do what was asked yet: the message says which and what to do instead."""


def session(master: str | None = None, app_name: str = "loophound") -> Any:
    """A SparkSession (`pyspark.sql.SparkSession`, or its Spark Connect twin)."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise EngineUnavailable("--engine spark needs PySpark: pip install 'loophound[spark]'") from None
    remote = master if master and master.startswith("sc://") else (
        None if master else os.environ.get("SPARK_REMOTE"))
    builder = SparkSession.builder.appName(app_name).config("spark.sql.session.timeZone", "UTC")
    if remote:
        builder = builder.remote(remote)
    else:
        if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
            raise EngineUnavailable("--engine spark needs Java 17 or later (Debian: apt-get install "
                                    "openjdk-17-jre-headless), or a Spark Connect server "
                                    "(SPARK_REMOTE=sc://host:15002)")
        if master:
            builder = builder.master(master)
        if _local(master):
            # local executors run this interpreter, which has loophound and its libraries
            # (PySpark reads the variable, not `spark.pyspark.python`, for its workers)
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    try:
        return builder.getOrCreate()
    except Exception as exc:  # noqa: BLE001 — the JVM's failure, said as the user's condition
        raise EngineUnavailable(f"Spark did not start ({type(exc).__name__}: "
                                f"{str(exc).splitlines()[0] if str(exc) else ''}); check "
                                "--spark-master, SPARK_REMOTE and Java") from None


def _local(master: str | None) -> bool:
    """Whether the executors run on this machine (a master given as local, or none given:
    Spark's default unless its configuration names a cluster, or `spark-submit` started
    this process, which then says which Python the executors run)."""
    if master is not None:
        return master.startswith("local")
    if os.environ.get("PYSPARK_GATEWAY_PORT"):
        return False
    conf = os.path.join(os.environ.get("SPARK_CONF_DIR", ""), "spark-defaults.conf")
    if os.environ.get("SPARK_CONF_DIR") and os.path.exists(conf):
        with open(conf, encoding="utf-8") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) >= 2 and parts[0] == "spark.master":
                    return parts[1].startswith("local")
    return True


def parallelism(spark: Any) -> int:
    """How many tasks the session runs at once (Spark Connect does not say: 8)."""
    try:
        return max(1, int(spark.sparkContext.defaultParallelism))
    except Exception:  # noqa: BLE001 — Spark Connect has no SparkContext
        return 8

"""When a query's workers start: in local mode while the query is planned, ahead of its first
stateful tasks (`PyRocksStateStoreProvider.startWorkersAhead`), and those tasks use them."""

from __future__ import annotations

import collections
import json
from pathlib import Path

from pyspark.sql import SparkSession

from pyrocks_support import wait_until, wrapper_python
from state_store.options import PREFIX
from state_store.spark import spark_conf


def gated_python(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A `pythonExec` that leaves a file named by its pid in `started`, then waits until
    `gate` exists before it becomes this Python: a worker's start held open at will."""
    started, gate = tmp_path / "started", tmp_path / "gate"
    started.mkdir()
    python = wrapper_python(tmp_path / "gated-python", f'touch "{started}/$$"',
                            f'while [ ! -e "{gate}" ]; do sleep 0.05; done')
    return python, started, gate


def starter_threads(spark: SparkSession) -> list[str]:
    """The names of the driver JVM's threads that start workers ahead of the tasks."""
    threads = spark.sparkContext._jvm.java.lang.Thread.getAllStackTraces().keySet().toArray()
    return sorted(t.getName() for t in threads if t.getName().startswith("pyrocks-start-ahead"))


def test_a_local_query_starts_its_workers_before_its_stateful_tasks(
        pyrocks_spark: SparkSession, tmp_path: Path) -> None:
    python, started, gate = gated_python(tmp_path)
    rows = [{"k": i % 5} for i in range(50)]
    source = tmp_path / "in"
    source.mkdir()
    (source / "0.json").write_text("\n".join(json.dumps(r) for r in rows))
    pyrocks_spark.conf.set(PREFIX + "pythonExec", str(python))  # a new pool: no worker yet
    try:
        query = (pyrocks_spark.readStream.schema("k int").json(str(source)).groupBy("k").count()
                 .writeStream.outputMode("update").format("memory").queryName("started_ahead")
                 .option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .trigger(availableNow=True).start())
        assert wait_until(lambda: len(list(started.iterdir())) == 2), list(started.iterdir())
        # Both starts wait for the gate in the planner's threads, one per slot (local[2]):
        # a task starting its worker would wait in its own thread.
        assert starter_threads(pyrocks_spark) == ["pyrocks-start-ahead-w0",
                                                  "pyrocks-start-ahead-w1"]
        gate.touch()
        query.awaitTermination(300)
        assert query.exception() is None, query.exception()
        counts = {r["k"]: r["count"] for r in pyrocks_spark.table("started_ahead").collect()}
        assert counts == dict(collections.Counter(r["k"] for r in rows))
        assert len(list(started.iterdir())) == 2  # the tasks connected to those two
    finally:
        gate.touch()
        pyrocks_spark.conf.set(PREFIX + "pythonExec", spark_conf()[PREFIX + "pythonExec"])

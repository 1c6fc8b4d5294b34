"""A worker frozen with SIGSTOP mid-batch (hung, not dead): the request waiting on it fails
at requestTimeoutSeconds, the worker is killed, Spark's retry of the task runs on a fresh
worker, and the output stays identical, batch by batch, to Spark's HDFS provider. The task
failure names the worker, the request and the store."""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from pyrocks_support import (
    MAINTENANCE_INTERVAL,
    MAINTENANCE_INTERVAL_KEY,
    pyrocks_conf,
    worker_pids,
)
from state_store.spark import PROVIDER_CLASS, PROVIDER_KEY

HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
FREEZE_IN_BATCH = 3
BATCHES = 6
TIMEOUT_SECONDS = 10


@pytest.fixture(scope="module")
def retrying_spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """local[2,4]: two task slots, and a failed task is retried (up to 4 attempts)."""
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    pool = tmp_path_factory.mktemp("pool")
    builder = (SparkSession.builder.master("local[2,4]")
               .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config(MAINTENANCE_INTERVAL_KEY, MAINTENANCE_INTERVAL))
    for key, value in pyrocks_conf(pool, requestTimeoutSeconds=TIMEOUT_SECONDS).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.conf.set("pyrocks.test.pool", str(pool))
    yield spark
    spark.stop()


def running_totals(pool_dir: str, marker: str):
    """A stateful function that, once, freezes every state store worker holding state."""

    def update(key: tuple, frames: Iterator[pd.DataFrame], state: GroupState):
        total = state.get[0] if state.exists else 0
        batch = 0
        for frame in frames:
            total += int(frame["v"].sum())
            batch = int(frame["batch"].max())
        if batch == FREEZE_IN_BATCH and key[0] == 0:
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                fd = -1  # frozen once already: this is Spark's retry of the task
            if fd >= 0:
                victims = worker_pids(Path(pool_dir))
                os.write(fd, " ".join(map(str, victims)).encode())
                os.close(fd)
                for pid in victims:
                    os.kill(pid, signal.SIGSTOP)
        state.update((total,))
        yield pd.DataFrame({"k": [key[0]], "total": [total]})

    return update


def run(spark: SparkSession, provider: str, work: Path) -> tuple[dict[int, list[tuple]], str]:
    """The query's output per batch, and its run id."""
    spark.conf.set(PROVIDER_KEY, provider)
    source = work / "in"
    source.mkdir(parents=True)
    outputs: dict[int, list[tuple]] = {}

    def collect(frame: DataFrame, batch_id: int) -> None:
        outputs[batch_id] = sorted(tuple(r) for r in frame.collect())

    update = running_totals(spark.conf.get("pyrocks.test.pool"), str(work / "frozen"))
    stream = (spark.readStream.schema("k int, v int, batch int").option("maxFilesPerTrigger", 1)
              .json(str(source)))
    totals = stream.groupBy("k").applyInPandasWithState(
        update, "k int, total long", "total long", "Update", GroupStateTimeout.NoTimeout)
    query: StreamingQuery = (totals.writeStream.outputMode("update").foreachBatch(collect)
                             .option("checkpointLocation", str(work / "ckpt")).start())
    try:
        for batch in range(BATCHES):
            rows = [{"k": i % 4, "v": i * (batch + 1), "batch": batch} for i in range(40)]
            (source / f"{batch:03d}.json").write_text("\n".join(map(json.dumps, rows)) + "\n")
            query.processAllAvailable()
    finally:
        query.stop()
    return outputs, str(query.runId)


def task_failures(spark: SparkSession, run_id: str) -> list[str]:
    """The error of every failed task attempt of the query's jobs, from Spark's status store
    (a streaming query runs its jobs in a job group named by its run id)."""
    def items(scala_seq: Any) -> Iterator[Any]:  # a py4j proxy of a Scala Seq
        return (scala_seq.apply(i) for i in range(scala_seq.size()))

    sc = spark.sparkContext
    store = sc._jsc.sc().statusStore()  # type: ignore[union-attr]
    errors = []
    for job_id in sc.statusTracker().getJobIdsForGroup(run_id):
        for stage_id in items(store.job(job_id).stageIds()):
            for attempt in range(store.lastStageAttempt(stage_id).attemptId() + 1):
                for task in items(store.taskList(stage_id, attempt, 10_000)):
                    if task.errorMessage().isDefined():
                        errors.append(task.errorMessage().get())
    return errors


def test_hung_worker_is_replaced_and_output_unchanged(retrying_spark: SparkSession,
                                                      tmp_path: Path) -> None:
    pool = Path(retrying_spark.conf.get("pyrocks.test.pool"))
    reference, _ = run(retrying_spark, HDFS, tmp_path / "hdfs")
    ours, run_id = run(retrying_spark, PROVIDER_CLASS, tmp_path / "ours")
    frozen = {int(p) for p in (tmp_path / "ours" / "frozen").read_text().split()}
    assert frozen, "no worker was frozen"
    assert ours == reference
    assert len(reference) == BATCHES
    assert not set(worker_pids(pool)) & frozen, "a frozen worker is still in the pool"
    errors = task_failures(retrying_spark, run_id)
    deadline = re.compile(
        r"pyrocks worker \d+ \(pid (\d+)\) did not answer [A-Z_]+ for \S+ operator \d+ "
        rf"partition \d+ store \S+ within {TIMEOUT_SECONDS} s")
    named = [m for m in map(deadline.search, errors) if m]
    assert named, f"no task failed on the deadline; task errors: {errors}"
    assert {int(m.group(1)) for m in named} <= frozen, named

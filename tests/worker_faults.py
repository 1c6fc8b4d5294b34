"""What the worker-fault tests share: a session whose failed tasks are retried, and a query
whose stateful function, once in batch FAULT_IN_BATCH, signals the state store worker that
serves its own partition (so exactly one task attempt fails, and Spark's retry succeeds)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pytest
from pyspark import TaskContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from pyrocks_support import (
    MAINTENANCE_INTERVAL,
    MAINTENANCE_INTERVAL_KEY,
    pyrocks_conf,
    worker_pids,
    worker_sockets,
)
from state_store.spark import PROVIDER_KEY

HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
FAULT_IN_BATCH = 3
BATCHES = 6
POOL_KEY = "pyrocks.test.pool"


def retrying_spark_fixture(**options: object) -> Callable[..., Iterator[SparkSession]]:
    """A module fixture `retrying_spark`: a retrying session with these pyrocks options."""

    @pytest.fixture(scope="module")
    def retrying_spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
        spark = retrying_session(tmp_path_factory.mktemp("pool"), **options)
        yield spark
        spark.stop()

    return retrying_spark


def retrying_session(pool: Path, **options: object) -> SparkSession:
    """local[2,4]: two task slots, and a failed task is retried (up to 4 attempts)."""
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    builder = (SparkSession.builder.master("local[2,4]")
               .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config(MAINTENANCE_INTERVAL_KEY, MAINTENANCE_INTERVAL))
    for key, value in pyrocks_conf(pool, **options).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.conf.set(POOL_KEY, str(pool))
    return spark


def running_totals(pool_dir: str, marker: str, signum: int):
    """A stateful function that, once, sends `signum` to the state store worker serving its
    task's partition (the shim gives partition p to worker p % workers, socket w<index>.sock)
    while it holds state; the pid goes to `marker` (whose creation also makes it happen only
    once)."""

    def update(key: tuple, frames: Iterator[pd.DataFrame], state: GroupState):
        total = state.get[0] if state.exists else 0
        batch = 0
        for frame in frames:
            total += int(frame["v"].sum())
            batch = int(frame["batch"].max())
        if batch == FAULT_IN_BATCH and key[0] == 0:
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                fd = -1  # done once already: this is Spark's retry of the task
            if fd >= 0:
                pids = worker_pids(Path(pool_dir))
                index = TaskContext.get().partitionId() % len(pids)
                victims = [pid for pid, sock in zip(pids, worker_sockets(pids), strict=True)
                           if sock.name == f"w{index}.sock"]
                os.write(fd, " ".join(map(str, victims)).encode())
                os.close(fd)
                for pid in victims:
                    os.kill(pid, signum)
        state.update((total,))
        yield pd.DataFrame({"k": [key[0]], "total": [total]})

    return update


def run_totals(spark: SparkSession, provider: str, work: Path,
               signum: int) -> tuple[dict[int, list[tuple]], str]:
    """The query's output per batch, and its run id; the signalled pids are in
    `work / "victims"`."""
    spark.conf.set(PROVIDER_KEY, provider)
    source = work / "in"
    source.mkdir(parents=True)
    outputs: dict[int, list[tuple]] = {}

    def collect(frame: DataFrame, batch_id: int) -> None:
        outputs[batch_id] = sorted(tuple(r) for r in frame.collect())

    update = running_totals(spark.conf.get(POOL_KEY), str(work / "victims"), signum)
    stream = (spark.readStream.schema("k int, v int, batch int").option("maxFilesPerTrigger", 1)
              .json(str(source)))
    totals = stream.groupBy("k").applyInPandasWithState(
        update, "k int, total long", "total long", "Update", GroupStateTimeout.NoTimeout)
    query = (totals.writeStream.outputMode("update").foreachBatch(collect)
             .option("checkpointLocation", str(work / "ckpt")).start())
    try:
        for batch in range(BATCHES):
            rows = [{"k": i % 4, "v": i * (batch + 1), "batch": batch} for i in range(40)]
            (source / f"{batch:03d}.json").write_text("\n".join(map(json.dumps, rows)) + "\n")
            query.processAllAvailable()
    finally:
        query.stop()
    return outputs, str(query.runId)


def victims(work: Path) -> set[int]:
    return {int(p) for p in (work / "victims").read_text().split()}

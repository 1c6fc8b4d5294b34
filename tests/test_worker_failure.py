"""A worker killed with SIGKILL mid-batch: Spark retries the task on a fresh worker and the
output stays identical, batch by batch, to Spark's HDFS provider on the same query."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from pyrocks_support import (
    pyrocks_conf,
    worker_pids,
)
from state_store.spark import PROVIDER_KEY

HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
KILL_IN_BATCH = 3
BATCHES = 6


@pytest.fixture(scope="module")
def retrying_spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """local[2,4]: two task slots, and a failed task is retried (up to 4 attempts)."""
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    pool = tmp_path_factory.mktemp("pool")
    builder = (SparkSession.builder.master("local[2,4]")
               .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false"))
    for key, value in pyrocks_conf(pool).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.conf.set("pyrocks.test.pool", str(pool))
    yield spark
    spark.stop()


def running_totals(pool_dir: str, marker: str):
    """A stateful function that, once, kills a state store worker while holding state."""

    def update(key: tuple, frames: Iterator[pd.DataFrame], state: GroupState):
        total = state.get[0] if state.exists else 0
        batch = 0
        for frame in frames:
            total += int(frame["v"].sum())
            batch = int(frame["batch"].max())
        if batch == KILL_IN_BATCH and key[0] == 0:
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                fd = -1  # killed once already: this is Spark's retry of the task
            if fd >= 0:
                victims = worker_pids(Path(pool_dir))
                os.write(fd, " ".join(map(str, victims)).encode())
                os.close(fd)
                for pid in victims:
                    os.kill(pid, signal.SIGKILL)
        state.update((total,))
        yield pd.DataFrame({"k": [key[0]], "total": [total]})

    return update


def run(spark: SparkSession, provider: str, work: Path) -> dict[int, list[tuple]]:
    spark.conf.set(PROVIDER_KEY, provider)
    source = work / "in"
    source.mkdir(parents=True)
    outputs: dict[int, list[tuple]] = {}

    def collect(frame: DataFrame, batch_id: int) -> None:
        outputs[batch_id] = sorted(tuple(r) for r in frame.collect())

    update = running_totals(spark.conf.get("pyrocks.test.pool"), str(work / "killed"))
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
    return outputs


def test_killed_worker_is_replaced_and_output_unchanged(
    retrying_spark: SparkSession, tmp_path: Path
) -> None:
    from state_store.spark import PROVIDER_CLASS

    pool = Path(retrying_spark.conf.get("pyrocks.test.pool"))
    reference = run(retrying_spark, HDFS, tmp_path / "hdfs")
    ours = run(retrying_spark, PROVIDER_CLASS, tmp_path / "ours")
    killed = {int(p) for p in (tmp_path / "ours" / "killed").read_text().split()}
    assert killed, "no worker was killed"
    assert ours == reference
    assert len(reference) == BATCHES
    replacements = set(worker_pids(pool))
    assert replacements and not replacements & killed, "the pool did not replace its workers"

"""A worker frozen with SIGSTOP mid-batch (hung, not dead): the request waiting on it fails
at requestTimeoutSeconds, the worker is killed, Spark's retry of the task runs on a fresh
worker, and the output stays identical, batch by batch, to Spark's HDFS provider. The task
failure names the worker, the request and the store."""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from pyrocks_support import worker_pids
from state_store.spark import PROVIDER_CLASS
from worker_faults import BATCHES, HDFS, POOL_KEY, retrying_spark_fixture, run_totals, victims

TIMEOUT_SECONDS = 10


retrying_spark = retrying_spark_fixture(requestTimeoutSeconds=TIMEOUT_SECONDS)


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
    pool = Path(retrying_spark.conf.get(POOL_KEY))
    reference, _ = run_totals(retrying_spark, HDFS, tmp_path / "hdfs", signal.SIGSTOP)
    ours, run_id = run_totals(retrying_spark, PROVIDER_CLASS, tmp_path / "ours", signal.SIGSTOP)
    frozen = victims(tmp_path / "ours")
    assert len(frozen) == 1, "not exactly one worker was frozen"
    assert ours == reference
    assert len(reference) == BATCHES
    assert not set(worker_pids(pool)) & frozen, "a frozen worker is still in the pool"
    errors = task_failures(retrying_spark, run_id)
    deadline = re.compile(
        r"pyrocks worker \d+ \(pid (\d+)\) did not answer [A-Z_]+ for \S+ operator \d+ "
        rf"partition \d+ store \S+ within {TIMEOUT_SECONDS} s")
    named = [m for m in map(deadline.search, errors) if m]
    # The one task on the frozen worker failed on its deadline; no other attempt failed.
    assert len(named) == len(errors) == 1, f"task errors: {errors}"
    assert {int(m.group(1)) for m in named} <= frozen, named

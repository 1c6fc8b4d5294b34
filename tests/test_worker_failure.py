"""A worker killed with SIGKILL mid-batch: Spark retries the task on a fresh worker and the
output stays identical, batch by batch, to Spark's HDFS provider on the same query."""

from __future__ import annotations

import signal
from pathlib import Path

from pyspark.sql import SparkSession

from pyrocks_support import failed_tasks, worker_pids
from state_store.spark import PROVIDER_CLASS
from worker_faults import BATCHES, HDFS, POOL_KEY, retrying_spark_fixture, run_totals, victims

retrying_spark = retrying_spark_fixture()


def test_killed_worker_is_replaced_and_output_unchanged(
    retrying_spark: SparkSession, tmp_path: Path
) -> None:
    pool = Path(retrying_spark.conf.get(POOL_KEY))
    reference, _ = run_totals(retrying_spark, HDFS, tmp_path / "hdfs", signal.SIGKILL)
    ours, run_id = run_totals(retrying_spark, PROVIDER_CLASS, tmp_path / "ours",
                              signal.SIGKILL)
    killed = victims(tmp_path / "ours")
    assert len(killed) == 1, "not exactly one worker was killed"
    assert ours == reference
    # The task whose worker died failed once, and its retry succeeded; nothing else failed.
    assert failed_tasks(retrying_spark, run_id)[1] == 1
    assert len(reference) == BATCHES
    replacements = set(worker_pids(pool))
    assert replacements and not replacements & killed, "the pool did not replace its workers"

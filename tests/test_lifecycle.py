"""No worker process or socket outlives its JVM: after SparkSession.stop(), or a killed JVM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pyrocks_support import (
    MAINTENANCE_INTERVAL,
    MAINTENANCE_INTERVAL_KEY,
    java_children,
    leftover_files,
    pyrocks_conf,
    readline_within,
    start_session,
    wait_until,
    worker_pids,
    worker_sockets,
)


def test_session_stop_ends_workers_and_removes_sockets(tmp_path: Path) -> None:
    pool_dir = tmp_path / "pool"
    builder = (SparkSession.builder.master("local[2]")
               .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
               .config(MAINTENANCE_INTERVAL_KEY, MAINTENANCE_INTERVAL))
    for key, value in pyrocks_conf(pool_dir).items():
        builder = builder.config(key, value)
    spark = start_session(builder)
    try:
        rates = spark.readStream.format("rate").option("rowsPerSecond", 100).load()
        query = (rates.groupBy((F.col("value") % 10).alias("k")).count().writeStream
                 .outputMode("update").format("noop")
                 .option("checkpointLocation", str(tmp_path / "ckpt")).start())
        assert wait_until(lambda: (query.lastProgress or {}).get("batchId", -1) >= 1)
        workers = worker_pids(pool_dir)
        assert len(workers) == 2  # local[2]: one worker per task slot
        sockets = worker_sockets(workers)
        assert all(s.exists() for s in sockets)
        query.stop()
    finally:
        spark.stop()
    assert wait_until(lambda: not worker_pids(pool_dir)), worker_pids(pool_dir)
    assert leftover_files(pool_dir) == []
    assert not any(s.exists() or s.parent.exists() for s in sockets)


DRIVER = textwrap.dedent("""
    import sys, time
    from pyspark.sql import SparkSession, functions as F
    from state_store.spark import spark_conf
    builder = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
    builder = builder.config("spark.sql.shuffle.partitions", "2")
    for k, v in spark_conf(localDir=sys.argv[1]).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    rates = spark.readStream.format("rate").option("rowsPerSecond", 100).load()
    q = (rates.groupBy((F.col("value") % 10).alias("k")).count().writeStream
         .outputMode("update").format("noop").option("checkpointLocation", sys.argv[2]).start())
    deadline = time.monotonic() + 300  # a hang guard: the test fails rather than waits
    while (q.lastProgress or {}).get("batchId", -1) < 1:
        if time.monotonic() > deadline:
            sys.exit("no batch within 300 s")
        time.sleep(0.2)
    print("RUNNING", flush=True)
    time.sleep(600)
""")


def test_killed_jvm_takes_its_workers_and_sockets(tmp_path: Path) -> None:
    pool_dir = tmp_path / "pool"
    pool_dir.mkdir()
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(pool_dir), str(tmp_path / "ckpt")],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        assert driver.stdout is not None
        assert readline_within(driver.stdout, 300).strip() == "RUNNING"
        sockets = worker_sockets(worker_pids(pool_dir))
        assert sockets and all(s.exists() for s in sockets)
        jvms = java_children(driver.pid)
        assert len(jvms) == 1
        os.kill(jvms[0], signal.SIGKILL)
        assert wait_until(lambda: not worker_pids(pool_dir)), worker_pids(pool_dir)
        assert not any(s.exists() for s in sockets)
    finally:
        driver.kill()
        driver.wait(60)

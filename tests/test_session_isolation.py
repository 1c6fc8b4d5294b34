"""A test's sessions do not depend on the tests that ran before it in its process."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from harness import (
    HDFS,
    MAINTENANCE_INTERVAL,
    MAINTENANCE_INTERVAL_KEY,
    PROVIDER_KEY,
    make_spark,
    start_session,
)
from pyrocks_support import wait_until
from state_store.options import PREFIX
from streaming_queries import read, write_batch


def test_a_session_does_not_inherit_an_earlier_sessions_settings() -> None:
    """The tests' sessions share one driver JVM per process (conftest's `bare_driver_jvm`):
    a setting of one session must not become a default of the next, or a test's outcome
    would depend on the tests that ran before it in its process."""
    key = PREFIX + "finishWhenQueryEnds"
    first = start_session(SparkSession.builder.master("local[1]")
                          .config("spark.ui.enabled", "false").config(key, "false"))
    first.stop()
    second = start_session(SparkSession.builder.master("local[1]")
                           .config("spark.ui.enabled", "false"))
    try:
        assert second.sparkContext.getConf().get(key, None) is None
        # whichever session started the JVM: every test session sets this one
        assert second._jvm.java.lang.System.getProperty("spark.ui.enabled") is None
    finally:
        second.stop()


def _counts_per_key(spark: SparkSession, work: Path) -> StreamingQuery:
    return (read(spark, work / "input").groupBy("k").count().writeStream
            .outputMode("update").format("noop")
            .option("checkpointLocation", str(work / "checkpoint")).start())


def test_a_sessions_maintenance_interval_applies_whatever_ran_before(tmp_path: Path) -> None:
    """Spark's maintenance task is one per JVM and outlives the session whose store load
    started it: a session of interval 1h must not leave the next session, of interval 1s,
    without maintenance. Seen here through Spark's HDFS provider, whose maintenance alone
    writes snapshot files."""
    def session(interval: str) -> SparkSession:
        return make_spark({PROVIDER_KEY: HDFS, MAINTENANCE_INTERVAL_KEY: interval,
                           "spark.sql.streaming.stateStore.minDeltasForSnapshot": "1"},
                          master="local[1]")

    first = session("1h")
    write_batch(tmp_path / "hour" / "input", 0)
    query = _counts_per_key(first, tmp_path / "hour")
    query.processAllAvailable()  # a store load: the maintenance task starts, every hour
    query.stop()
    second = session(MAINTENANCE_INTERVAL)
    try:
        write_batch(tmp_path / "second" / "input", 0)
        query = _counts_per_key(second, tmp_path / "second")
        query.processAllAvailable()
        write_batch(tmp_path / "second" / "input", 1)
        query.processAllAvailable()
        store = tmp_path / "second" / "checkpoint" / "state" / "0" / "0"
        assert wait_until(lambda: any(store.glob("*.snapshot")), timeout=60), \
            f"no maintenance snapshot in {store}: {sorted(p.name for p in store.iterdir())}"
        query.stop()
    finally:
        second.stop()

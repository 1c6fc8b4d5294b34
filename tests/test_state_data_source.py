"""Spark's state data source (`format("statestore")`) reads our state like the built-in one's."""

from __future__ import annotations

import json
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from state_store.spark import PROVIDER_CLASS, PROVIDER_KEY

HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"


def run_queries(spark: SparkSession, provider: str, work: Path) -> None:
    """An aggregation and a stream-stream join, three micro-batches each."""
    spark.conf.set(PROVIDER_KEY, provider)
    source = work / "in"
    source.mkdir(parents=True)
    stream = (spark.readStream.schema("k int, v int, ts long").option("maxFilesPerTrigger", 1)
              .json(str(source)).withColumn("t", F.timestamp_seconds("ts")))
    agg = stream.groupBy("k").agg(F.sum("v"), F.max("v"), F.count("*"))
    left = stream.select(F.col("k").alias("lk"), F.col("t").alias("lt"), "v")
    right = stream.select(F.col("k").alias("rk"), F.col("t").alias("rt"))
    joined = left.withWatermark("lt", "1 hour").join(
        right.withWatermark("rt", "1 hour"),
        F.expr("lk = rk AND rt BETWEEN lt - INTERVAL 10 SECONDS AND lt"),
    )
    queries = [
        frame.writeStream.outputMode(mode).format("noop")
        .option("checkpointLocation", str(work / name)).start()
        for name, frame, mode in (("agg", agg, "update"), ("join", joined, "append"))
    ]
    # One file per micro-batch, written only when the previous one is processed: the file
    # source orders files by modification time, which ties when written together.
    for batch in range(3):
        rows = [{"k": i % 6, "v": i + batch, "ts": 1_000 * batch + i} for i in range(30)]
        (source / f"{batch}.json").write_text("\n".join(map(json.dumps, rows)) + "\n")
        for query in queries:
            query.processAllAvailable()
    for query in queries:
        query.stop()


def state_rows(spark: SparkSession, checkpoint: Path, **options: str) -> list[str]:
    reader = spark.read.format("statestore")
    for key, value in options.items():
        reader = reader.option(key, value)
    return sorted(map(repr, reader.load(str(checkpoint)).collect()))


def test_state_data_source_reads_our_state(pyrocks_spark: SparkSession, tmp_path: Path) -> None:
    run_queries(pyrocks_spark, HDFS, tmp_path / "hdfs")
    run_queries(pyrocks_spark, PROVIDER_CLASS, tmp_path / "ours")
    cases = [("agg", {}), ("join", {"joinSide": "left"}), ("join", {"joinSide": "right"}),
             ("agg", {"batchId": "1"})]
    for name, options in cases:
        reference = state_rows(pyrocks_spark, tmp_path / "hdfs" / name, **options)
        ours = state_rows(pyrocks_spark, tmp_path / "ours" / name, **options)
        assert reference, f"{name} {options}: the reference has no state rows"
        assert ours == reference, f"{name} {options}"

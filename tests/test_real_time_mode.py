"""Real-Time Mode beside our provider in one application.

Spark 4.3 refuses every real-time query, stateless ones included, in a session whose
provider is set to anything but its RocksDB provider. `spark_default_provider(spark)`
starts a query on Spark's default instead; queries started outside it stay on ours.
The real-time source is Spark's own `LowLatencyMemoryStream` (Kafka, the other source
Real-Time Mode accepts, needs a connector jar pyspark does not ship); the sink is
`foreach`, which Real-Time Mode accepts.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, Row, SparkSession

from state_store.spark import PROVIDER_CLASS, PROVIDER_KEY, spark_default_provider


class FileWriter:
    """A `foreach` writer: each epoch's rows of a partition go to a file of their own."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def open(self, partition_id: int, epoch_id: int) -> bool:
        name = f"{partition_id}-{epoch_id}-{time.time_ns()}.jsonl"
        self.file = open(os.path.join(self.directory, name), "w")  # noqa: SIM115
        return True

    def process(self, row: Row) -> None:
        self.file.write(json.dumps(row.asDict()) + "\n")
        self.file.flush()

    def close(self, error: Any) -> None:
        self.file.close()


def low_latency_stream(spark: SparkSession) -> tuple[Any, DataFrame]:
    jvm = spark.sparkContext._jvm
    stream = jvm.org.apache.spark.sql.execution.streaming.sources.LowLatencyMemoryStream \
        .apply(spark._jsparkSession, 1, jvm.org.apache.spark.sql.Encoders.INT())
    return stream, DataFrame(stream.toDF(), spark)


def add_data(spark: SparkSession, stream: Any, values: list[int]) -> None:
    jvm = spark.sparkContext._jvm
    items = jvm.java.util.ArrayList()
    for value in values:
        items.add(value)
    stream.addData(jvm.scala.jdk.javaapi.CollectionConverters.asScala(items))


def written_rows(directory: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(directory.glob("*.jsonl"))
            for line in f.read_text().splitlines() if line]


def start_real_time(frame: DataFrame, out: Path, checkpoint: Path) -> Any:
    return (frame.selectExpr("value", "value * 2 AS doubled").writeStream
            .foreach(FileWriter(str(out))).outputMode("update")
            .option("checkpointLocation", str(checkpoint))
            .trigger(realTime="5 seconds").start())


def test_a_real_time_query_runs_beside_a_stateful_query_on_ours(
        pyrocks_spark: SparkSession, tmp_path: Path) -> None:
    spark = pyrocks_spark
    stream, frame = low_latency_stream(spark)
    out = tmp_path / "rtm-out"
    out.mkdir()
    # Without the block Spark refuses it (tests/test_spark_refusals.py).
    with spark_default_provider(spark):
        real_time = start_real_time(frame, out, tmp_path / "rtm-ckpt")
    assert spark.conf.get(PROVIDER_KEY) == PROVIDER_CLASS  # restored for what follows
    try:
        add_data(spark, stream, [1, 2, 3])
        deadline = time.monotonic() + 180  # a bound on liveness, not a timing assertion
        while len(written_rows(out)) < 3 and real_time.isActive:
            assert time.monotonic() < deadline, "the real-time query wrote nothing"
            time.sleep(0.2)
        assert real_time.exception() is None
        assert sorted(r["doubled"] for r in written_rows(out)) == [2, 4, 6]

        # A stateful micro-batch query started now, while the real-time one runs: ours.
        source = tmp_path / "in"
        source.mkdir()
        (source / "0.json").write_text("\n".join(json.dumps({"k": i % 4}) for i in range(40)))
        counts = (spark.readStream.schema("k int").json(str(source)).groupBy("k").count()
                  .writeStream.outputMode("complete").format("memory").queryName("rtm_counts")
                  .option("checkpointLocation", str(tmp_path / "ckpt"))
                  .trigger(availableNow=True).start())
        assert counts.awaitTermination(300), "the AvailableNow query never ended"
        assert real_time.isActive
        assert {r["k"]: r["count"] for r in spark.table("rtm_counts").collect()} == \
            {k: 10 for k in range(4)}
        recorded = (tmp_path / "ckpt" / "offsets" / "0").read_text()
        assert PROVIDER_CLASS in recorded
        assert list((tmp_path / "ckpt" / "state").glob("0/*/query-*/manifests"))
        rtm_recorded = (tmp_path / "rtm-ckpt" / "offsets" / "0").read_text()
        assert PROVIDER_CLASS not in rtm_recorded
    finally:
        real_time.stop()

"""Where Spark accepts only its own RocksDB provider and this one cannot serve the query,
it fails fast and says so (transformWithState is served: test_transform_with_state)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

SPARK_ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def test_real_time_mode_fails_at_start(pyrocks_spark: SparkSession, tmp_path: Path) -> None:
    counts = (pyrocks_spark.readStream.format("rate").load()
              .selectExpr("value % 3 AS k").groupBy("k").count())
    writer = (counts.writeStream.format("console").outputMode("update")
              .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(realTime="5 seconds"))
    with pytest.raises(Exception, match=rf"providerClass must be {SPARK_ROCKSDB}"):
        writer.start().awaitTermination(30)

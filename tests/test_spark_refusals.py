"""Where Spark accepts only its own RocksDB provider, queries fail fast and say so."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

SPARK_ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


class CountingProcessor(StatefulProcessor):
    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.getValueState("count", "n long")

    def handleInputRows(self, key, rows: Iterator[pd.DataFrame], timerValues):
        yield pd.DataFrame({"k": [key[0]]})

    def close(self) -> None:
        pass


def test_transform_with_state_fails_at_definition(pyrocks_spark: SparkSession) -> None:
    keys = pyrocks_spark.readStream.format("rate").load().selectExpr("value % 3 AS k")
    with pytest.raises(Exception, match=rf"TransformWithState.*only its own {SPARK_ROCKSDB}"):
        keys.groupBy("k").transformWithStateInPandas(
            CountingProcessor(), "k long", "Update", "None")


def test_real_time_mode_fails_at_start(pyrocks_spark: SparkSession, tmp_path: Path) -> None:
    counts = (pyrocks_spark.readStream.format("rate").load()
              .selectExpr("value % 3 AS k").groupBy("k").count())
    writer = (counts.writeStream.format("console").outputMode("update")
              .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(realTime="5 seconds"))
    with pytest.raises(Exception, match=rf"providerClass must be {SPARK_ROCKSDB}"):
        writer.start().awaitTermination(30)

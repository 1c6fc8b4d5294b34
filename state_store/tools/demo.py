"""`state-store demo`: a streaming aggregation on this provider, printing progress per batch."""

from __future__ import annotations

import tempfile
import time

from ..spark import configure


def run_demo(batches: int, rows_per_second: int, checkpoint: str | None, master: str) -> int:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    builder = (SparkSession.builder.master(master).appName("pyrocks-state-store-demo")
               .config("spark.sql.shuffle.partitions", "4").config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false"))
    spark = configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    with tempfile.TemporaryDirectory(prefix="pyrocks-demo-") as tmp:
        location = checkpoint or f"{tmp}/checkpoint"
        events = (spark.readStream.format("rate").option("rowsPerSecond", rows_per_second).load()
                  .withColumn("sensor", F.col("value") % 1000))
        counts = events.groupBy("sensor").agg(F.count("*").alias("n"), F.max("value").alias("last"))
        query = (counts.writeStream.outputMode("update").format("noop")
                 .option("checkpointLocation", location).trigger(processingTime="1 second")
                 .start())
        print(f"provider: {spark.conf.get('spark.sql.streaming.stateStore.providerClass')}")
        print(f"checkpoint: {location}")
        try:
            _follow(query, batches)
        finally:
            # Stopping interrupts the batch in flight, which Spark logs as an error: expected.
            spark.sparkContext.setLogLevel("OFF")
            query.stop()
            spark.stop()
    return 0


def _follow(query, batches: int) -> None:
    seen = -1
    print(f"{'batch':>5} {'input':>8} {'state rows':>10} {'commit ms':>9} "
          f"{'changelog B':>11} {'snapshots':>9}")
    while seen < batches - 1:
        if query.exception() is not None:
            raise query.exception()
        progress = query.lastProgress
        if progress and progress["batchId"] > seen:
            seen = progress["batchId"]
            op = progress["stateOperators"][0] if progress["stateOperators"] else {}
            custom = op.get("customMetrics", {})
            print(f"{seen:>5} {progress['numInputRows']:>8} {op.get('numRowsTotal', 0):>10} "
                  f"{op.get('commitTimeMs', 0):>9} {custom.get('pyrocks.changelog_bytes', 0):>11} "
                  f"{custom.get('pyrocks.snapshots', 0):>9}", flush=True)
        time.sleep(0.2)

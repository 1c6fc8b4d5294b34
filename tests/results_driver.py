"""A driver program as a scheduler would run it, for the result store's crash tests:

    python results_driver.py WORK RUN_KEY

It counts the JSON files under WORK/in with `Trigger.AvailableNow`, writing each batch's
updated counts to WORK/out/<batch id>-<unique>/ (so a batch processed twice shows twice),
through `run_once(spark, RUN_KEY, start)` with the result store WORK/results.
It prints `STARTING` when `start()` is called and `RESULT <json>` with what `run_once`
returned; then it waits until the run is clean (prints `CLEAN`) or its JVM is gone (prints
`JVM GONE`, exit 3: the recorder's crash hook killed the driver).
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from dataclasses import asdict
from pathlib import Path

from pyspark.sql import SparkSession

from pyrocks_support import pyrocks_conf
from state_store.results import FileSystemResultStore, run_once


def main(work: Path, run_key: str) -> int:
    builder = (SparkSession.builder.master("local[2]").appName("pyrocks-results-driver")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false"))
    results = str(work / "results")
    for key, value in pyrocks_conf(work / "pool", resultStore=results,
                                   cleanupBackoffInitialSeconds=0.2).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()

    def start():  # type: ignore[no-untyped-def]
        print("STARTING", flush=True)
        rows = spark.readStream.schema("k int, v int").option("maxFilesPerTrigger", 1)
        counts = rows.json(str(work / "in")).groupBy("k").count()
        return (counts.writeStream.outputMode("update").foreachBatch(write_batch)
                .option("checkpointLocation", str(work / "ckpt"))
                .trigger(availableNow=True).start())

    def write_batch(batch, batch_id: int) -> None:  # type: ignore[no-untyped-def]
        batch.write.json(str(work / "out" / f"{batch_id}-{uuid.uuid4().hex}"))

    result = run_once(spark, run_key, start)
    print("RESULT", json.dumps(asdict(result)), flush=True)
    store = FileSystemResultStore(results)
    deadline = time.monotonic() + 300  # a hang guard only
    while time.monotonic() < deadline:
        if store.has_clean(run_key):
            print("CLEAN", flush=True)
            spark.stop()
            return 0
        try:
            spark.sparkContext._jvm.java.lang.System.currentTimeMillis()
        except Exception:  # noqa: BLE001 - py4j: the JVM is gone
            print("JVM GONE", flush=True)
            return 3
        time.sleep(0.1)
    return 4


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), sys.argv[2]))

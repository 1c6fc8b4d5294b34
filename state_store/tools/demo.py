"""`state-store demo`: a streaming aggregation on this provider, printing progress per batch.

Its checkpoint is kept (default `./pyrocks-demo`), so the rest of the tour runs on it:
inspect it, savepoint it, restore the savepoint, run the demo again on either (a run on an
existing checkpoint resumes it).
"""

from __future__ import annotations

import os
import shlex
import time
from typing import Any

from ..spark import configure


def run_demo(batches: int, rows_per_second: int, checkpoint: str, master: str,
             quiet: bool = False) -> dict[str, Any]:
    """Runs `batches` micro-batches; returns what ran and the next steps to try."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    location = os.path.abspath(checkpoint)
    resumed = os.path.exists(os.path.join(location, "offsets"))
    builder = (SparkSession.builder.master(master).appName("pyrocks-state-store-demo")
               .config("spark.sql.shuffle.partitions", "4").config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false"))
    spark = configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    events = (spark.readStream.format("rate").option("rowsPerSecond", rows_per_second).load()
              .withColumn("sensor", F.col("value") % 1000))
    counts = events.groupBy("sensor").agg(F.count("*").alias("n"), F.max("value").alias("last"))
    query = (counts.writeStream.outputMode("update").format("noop")
             .option("checkpointLocation", location).trigger(processingTime="1 second")
             .start())
    say = (lambda line: None) if quiet else (lambda line: print(line, flush=True))
    say(f"provider: {spark.conf.get('spark.sql.streaming.stateStore.providerClass')}")
    say(f"checkpoint: {location}" + (" (resumed)" if resumed else ""))
    try:
        first, last, rows = _follow(query, batches, say)
    finally:
        # Stopping interrupts the batch in flight, which Spark logs as an error: expected.
        spark.sparkContext.setLogLevel("OFF")
        query.stop()
        spark.stop()
    return {"checkpoint": location, "resumed": resumed, "first_batch": first,
            "last_batch": last, "state_rows": rows, "next_steps": _next_steps(checkpoint, last)}


def _follow(query: Any, batches: int, say: Any) -> tuple[int, int, int]:
    """Prints each new batch's progress until `batches` ran; (first, last, state rows)."""
    seen: list[int] = []
    rows = 0
    say(f"{'batch':>5} {'input':>8} {'state rows':>10} {'commit ms':>9} "
        f"{'changelog B':>11} {'snapshots':>9}")
    while len(seen) < batches:
        if query.exception() is not None:
            raise query.exception()
        progress = query.lastProgress
        if progress and (not seen or progress["batchId"] > seen[-1]):
            seen.append(progress["batchId"])
            op = progress["stateOperators"][0] if progress["stateOperators"] else {}
            custom = op.get("customMetrics", {})
            rows = op.get("numRowsTotal", 0)
            say(f"{seen[-1]:>5} {progress['numInputRows']:>8} {rows:>10} "
                f"{op.get('commitTimeMs', 0):>9} {custom.get('pyrocks.changelog_bytes', 0):>11} "
                f"{custom.get('pyrocks.snapshots', 0):>9}")
        time.sleep(0.2)
    return seen[0], seen[-1], rows


def _next_steps(checkpoint: str, last: int) -> str:
    here = shlex.quote(checkpoint.rstrip("/"))
    savepoint, restored = f"{here}-savepoint", f"{here}-restored"
    return "\n".join([
        f"batches up to {last} committed; the checkpoint is kept: {here}. Next:",
        f"  state-store inspect {here}                   # versions, snapshots, files",
        f"  state-store savepoint {here} {savepoint}     # a savepoint of the last batch",
        f"  state-store restore {savepoint} {restored}   # a new checkpoint from it",
        f"  state-store demo --checkpoint {restored}     # resumes after batch {last}",
    ])

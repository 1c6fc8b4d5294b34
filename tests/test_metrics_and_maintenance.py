"""Custom metrics reach StreamingQueryProgress; maintenance deletes versions out of retention."""

from __future__ import annotations

import json
import time
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from state_store.format.storage import open_storage
from state_store.format.store_root import StoreRoot

RETAIN = 3


def test_metrics_and_retention(pyrocks_spark: SparkSession, tmp_path: Path) -> None:
    pyrocks_spark.conf.set("spark.sql.streaming.minBatchesToRetain", str(RETAIN))
    source, checkpoint = tmp_path / "in", tmp_path / "ckpt"
    source.mkdir()
    stream = pyrocks_spark.readStream.schema("k int").option("maxFilesPerTrigger", 1)
    counts = stream.json(str(source)).groupBy("k").agg(F.count("*"))
    query = (counts.writeStream.outputMode("update").format("noop")
             .option("checkpointLocation", str(checkpoint)).start())
    try:
        for batch in range(8):
            rows = [json.dumps({"k": i + batch}) for i in range(20)]
            (source / f"{batch:03d}.json").write_text("\n".join(rows) + "\n")
            query.processAllAvailable()
        operator = query.lastProgress["stateOperators"][0]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _oldest_versions(checkpoint) != {8 - RETAIN + 1}:
            time.sleep(0.5)
    finally:
        query.stop()
        pyrocks_spark.conf.unset("spark.sql.streaming.minBatchesToRetain")

    assert operator["numRowsTotal"] == 27  # keys 0..26
    custom = operator["customMetrics"]
    assert custom["pyrocks.changelog_bytes"] > 0
    assert custom["pyrocks.round_trips"] > 0
    assert "pyrocks.commit_ms" in custom and "pyrocks.gc_files_deleted" in custom
    assert _oldest_versions(checkpoint) == {8 - RETAIN + 1}
    for store in _stores(checkpoint):
        versions = StoreRoot(open_storage(str(store)), str(store)).versions()
        assert versions == list(range(8 - RETAIN + 1, 9))


def _stores(checkpoint: Path) -> list[Path]:
    return sorted(p.parent for p in (checkpoint / "state" / "0").glob("*/query-*/manifests"))


def _oldest_versions(checkpoint: Path) -> set[int]:
    return {min(StoreRoot(open_storage(str(s)), str(s)).versions()) for s in _stores(checkpoint)}

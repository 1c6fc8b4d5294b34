"""FLIP-147 in micro-batch form: when a query ends, its last committed version is left
fully published — snapshot uploaded, nothing in flight — so it loads with no replay."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pyrocks_support import MAINTENANCE_INTERVAL, MAINTENANCE_INTERVAL_KEY, pyrocks_conf
from state_store.checkpoint import Checkpoint
from state_store.engine import VersionedStore
from state_store.options import StoreOptions
from state_store.storage import open_storage


def store_roots(checkpoint: Path) -> list[Path]:
    return sorted(p.parent for p in (checkpoint / "state").glob("*/*/query-*/manifests"))


def replay_at_latest(root: Path, scratch: Path) -> int:
    checkpoint = Checkpoint(open_storage(str(root)), str(root))
    store = VersionedStore(str(root), checkpoint, scratch, StoreOptions(), ThreadPoolExecutor(1))
    store.load(checkpoint.versions()[-1])
    store.close()
    return store.metrics.replayed_versions


def test_available_now_query_ends_with_a_snapshot_of_its_last_version(
    pyrocks_spark: SparkSession, tmp_path: Path
) -> None:
    source, checkpoint = tmp_path / "in", tmp_path / "ckpt"
    source.mkdir()
    for batch in range(4):
        rows = [json.dumps({"k": i % 13, "v": i}) for i in range(50)]
        (source / f"{batch:03d}.json").write_text("\n".join(rows) + "\n")
    stream = pyrocks_spark.readStream.schema("k int, v int").option("maxFilesPerTrigger", 1)
    counts = stream.json(str(source)).groupBy("k").agg(F.sum("v"))
    query = (counts.writeStream.outputMode("update").format("noop")
             .option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.lastProgress["batchId"] == 3
    roots = store_roots(checkpoint)
    assert roots
    # Spark unloads the providers of a terminated query at its next maintenance round.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(_snapshotted(r) for r in roots):
        time.sleep(0.5)
    for i, root in enumerate(roots):
        assert _snapshotted(root), f"{root}: the last version has no snapshot"
        assert replay_at_latest(root, tmp_path / f"reader-{i}") == 0


def _snapshotted(root: Path) -> bool:
    checkpoint = Checkpoint(open_storage(str(root)), str(root))
    versions = checkpoint.versions()
    return bool(versions) and versions[-1] in checkpoint.snapshot_versions()


def test_stopping_the_session_finishes_every_store(tmp_path: Path) -> None:
    """Session stop shuts the workers down; each first finishes its stores."""
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    builder = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config(MAINTENANCE_INTERVAL_KEY, MAINTENANCE_INTERVAL))
    for key, value in pyrocks_conf(tmp_path / "pool", snapshotInterval=1000).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    checkpoint = tmp_path / "ckpt"
    try:
        rates = spark.readStream.format("rate").option("rowsPerSecond", 200).load()
        query = (rates.groupBy((F.col("value") % 17).alias("k")).count().writeStream
                 .outputMode("update").format("noop")
                 .option("checkpointLocation", str(checkpoint)).start())
        while (query.lastProgress or {}).get("batchId", -1) < 3:
            time.sleep(0.2)
        query.stop()
    finally:
        spark.stop()
    roots = store_roots(checkpoint)
    assert roots
    for i, root in enumerate(roots):
        assert _snapshotted(root), f"{root}: the last version has no snapshot"
        assert replay_at_latest(root, tmp_path / f"reader-{i}") == 0

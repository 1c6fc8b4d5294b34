"""Durable state on s3:// against a real S3 API on loopback (moto's server mode)."""

from __future__ import annotations

import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pyrocks_support import S3Endpoint
from state_store.errors import CorruptFileError
from state_store.format.storage import open_storage
from state_store.format.store_root import StoreRoot
from state_store.options import PREFIX, StoreOptions
from state_store.runtime.engine import VersionedStore
from state_store.spark import PROVIDER_CLASS, PROVIDER_KEY
from test_engine import commit_versions
from test_snapshots import bulk

HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"


def s3_store(s3: S3Endpoint, root: str, local: Path, **options: object) -> VersionedStore:
    storage = open_storage(root, s3.options)
    opts = StoreOptions(**{"snapshot_interval": 2, **options})  # type: ignore[arg-type]
    return VersionedStore("s3-store", StoreRoot(storage, "s3-store"), local, opts,
                          ThreadPoolExecutor(1))


def test_corrupt_object_is_refused(s3: S3Endpoint, tmp_path: Path) -> None:
    root = s3.url(f"corrupt-{uuid.uuid4().hex}")
    store = s3_store(s3, root, tmp_path / "a", snapshot_interval=100)
    commit_versions(store, 3)
    changelog = store.checkpoint.read_manifest(3).changelogs[-1].file
    store.checkpoint.storage.fs.pipe_file(f"{root[5:]}/files/{changelog.name}", b"garbage")
    with pytest.raises(CorruptFileError, match=rf"version 3 .*{changelog.name}"):
        s3_store(s3, root, tmp_path / "b").load(3)


def test_incremental_snapshot_on_s3_copies_nothing_it_has(s3: S3Endpoint, tmp_path: Path) -> None:
    root = s3.url(f"incremental-{uuid.uuid4().hex}")
    store = s3_store(s3, root, tmp_path / "a", snapshot_interval=1)
    store.load(0)
    store.write(bulk(30_000, seed=1))
    store.commit(1)
    store.snapshots.drain()
    store.metrics = type(store.metrics)()
    store.load(1)
    store.write(bulk(10, seed=2))
    store.commit(2)
    store.snapshots.drain()
    first, second = (store.checkpoint.read_snapshot(v) for v in (1, 2))
    shared = {f.name for f in first.files} & {f.name for f in second.files}
    assert shared and store.metrics.snapshot_files_reused == len(shared)
    assert store.metrics.snapshot_bytes_uploaded < store.metrics.snapshot_bytes_reused / 10


def counts_by_batch(spark: SparkSession, work: Path, batches: range) -> dict[int, list[tuple]]:
    """A groupBy aggregation over one new file per batch; restarts resume the checkpoint."""
    out: dict[int, list[tuple]] = {}
    source = work / "in"
    source.mkdir(parents=True, exist_ok=True)

    def collect(frame: DataFrame, batch_id: int) -> None:
        out[batch_id] = sorted(tuple(r) for r in frame.collect())

    stream = spark.readStream.schema("k int, v int").option("maxFilesPerTrigger", 1)
    agg = stream.json(str(source)).groupBy("k").agg(F.count("*"), F.sum("v"), F.max("v"))
    query = (agg.writeStream.outputMode("update").foreachBatch(collect)
             .option("checkpointLocation", str(work / "ckpt")).start())
    try:
        for batch in batches:
            rows = [json.dumps({"k": (i * 7 + batch) % 23, "v": i * batch}) for i in range(60)]
            (source / f"{batch:03d}.json").write_text("\n".join(rows) + "\n")
            query.processAllAvailable()
    finally:
        query.stop()
    return out


def test_spark_query_with_state_on_s3_matches_hdfs(
    pyrocks_spark: SparkSession, s3: S3Endpoint, tmp_path: Path
) -> None:
    root = s3.url(f"spark-{uuid.uuid4().hex}")
    settings = {PREFIX + "rootUrl": root, PREFIX + "rootOptions": json.dumps(s3.options),
                PREFIX + "snapshotInterval": "2"}
    pyrocks_spark.conf.set(PROVIDER_KEY, HDFS)
    reference = counts_by_batch(pyrocks_spark, tmp_path / "hdfs", range(0, 5))
    reference |= counts_by_batch(pyrocks_spark, tmp_path / "hdfs", range(5, 9))
    pyrocks_spark.conf.set(PROVIDER_KEY, PROVIDER_CLASS)
    for key, value in settings.items():
        pyrocks_spark.conf.set(key, value)
    try:
        ours = counts_by_batch(pyrocks_spark, tmp_path / "ours", range(0, 5))
        ours |= counts_by_batch(pyrocks_spark, tmp_path / "ours", range(5, 9))  # a restart
    finally:
        for key in settings:
            pyrocks_spark.conf.unset(key)
    assert ours == reference and len(ours) == 9
    storage = open_storage(root, s3.options)
    assert storage.fs.glob(f"{storage.root}/*/0/*/default/query-*/manifests/*.json")
    assert not list((tmp_path / "ours" / "ckpt" / "state").glob("**/manifests"))

"""Finishing a stopped query's stores at once, through py4j: what stop-with-savepoint needs.

`PyRocksStateStoreProvider.finishQueryEverywhere(session, checkpoint)` gives every store of
the query its final snapshot now, rather than when Spark's maintenance unloads the
providers. The session's maintenance interval is an hour and `finishWhenQueryEnds` is off,
so that nothing but the call finishes a store here (see the `spark` fixture). The last test
runs the query on an executor JVM of its own (local-cluster mode), where the call reaches
its stores through a job."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from pyrocks_support import MAINTENANCE_INTERVAL_KEY, pyrocks_session
from state_store.format.storage import open_storage
from state_store.format.store_root import StoreRoot

PARTITIONS = 2  # spark.sql.shuffle.partitions: one store per partition of the aggregation


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """A local session whose maintenance never runs during a test (interval: an hour), whose
    stores take no snapshot on their own (snapshotInterval: 1000 versions), and whose query
    runs end without finishing their stores (finishWhenQueryEnds: false)."""
    session = pyrocks_session("pyrocks-finish-query", tmp_path_factory.mktemp("pool"),
                              {MAINTENANCE_INTERVAL_KEY: "1h",
                               "spark.sql.shuffle.partitions": str(PARTITIONS)},
                              snapshotInterval=1000, snapshotWhenIdleSeconds=0,
                              finishWhenQueryEnds=False)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def cluster_spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """Spark's local-cluster mode: one executor JVM beside the driver, so the stores live
    where only the job of finishQueryEverywhere reaches them (and, with one executor, every
    task of that job lands on it)."""
    session = pyrocks_session("pyrocks-finish-query-cluster",
                              tmp_path_factory.mktemp("cluster-pool"),
                              {MAINTENANCE_INTERVAL_KEY: "1h",
                               "spark.sql.shuffle.partitions": str(PARTITIONS)},
                              master="local-cluster[1,1,1024]", snapshotInterval=1000,
                              snapshotWhenIdleSeconds=0, finishWhenQueryEnds=False)
    yield session
    session.stop()


def finish_everywhere(spark: SparkSession, checkpoint: Path | str) -> int:
    provider = spark._jvm.io.pyrocks.statestore.PyRocksStateStoreProvider
    return int(provider.finishQueryEverywhere(spark._jsparkSession, str(checkpoint)))


def store_roots(checkpoint: Path) -> list[Path]:
    return sorted(p.parent for p in (checkpoint / "state").glob("*/*/query-*/manifests"))


def snapshotted(root: Path) -> bool:
    """Whether the store's latest committed version has a published snapshot."""
    checkpoint = StoreRoot(open_storage(str(root)), str(root))
    versions = checkpoint.versions()
    return bool(versions) and versions[-1] in checkpoint.snapshot_versions()


def add_batch(source: Path, batch: int) -> None:
    rows = [json.dumps({"k": i % 7, "v": i}) for i in range(40)]
    (source / f"{batch:03d}.json").write_text("\n".join(rows) + "\n")


def start_counting(spark: SparkSession, source: Path, checkpoint: Path,
                   name: str | None = None) -> StreamingQuery:
    """A streaming count per key over the JSON files in `source`, one file per batch; to a
    memory table `name` (complete mode) if given, else to nowhere."""
    source.mkdir(parents=True, exist_ok=True)
    stream = spark.readStream.schema("k int, v int").option("maxFilesPerTrigger", 1)
    counts = stream.json(str(source)).groupBy("k").count()
    writer = counts.writeStream.option("checkpointLocation", str(checkpoint))
    if name is None:
        writer = writer.outputMode("update").format("noop")
    else:
        writer = writer.outputMode("complete").format("memory").queryName(name)
    return writer.start()


def last_batch(query: StreamingQuery) -> int:
    """The id of the query's last batch that read data (idle progress reports excluded)."""
    return max(p["batchId"] for p in query.recentProgress if p["numInputRows"] > 0)


def stopped_query(spark: SparkSession, tmp_path: Path, batches: int) -> Path:
    """Runs a count for `batches` batches, then stops it while it is idle (every batch
    committed, no task running: no store is being updated). Returns its checkpoint."""
    source, checkpoint = tmp_path / "in", tmp_path / "ckpt"
    source.mkdir(parents=True)
    for batch in range(batches):
        add_batch(source, batch)
    query = start_counting(spark, source, checkpoint)
    query.processAllAvailable()
    assert last_batch(query) == batches - 1
    query.stop()
    return checkpoint


def test_every_store_of_a_stopped_query_is_finished_at_once(
    spark: SparkSession, tmp_path: Path
) -> None:
    checkpoint = stopped_query(spark, tmp_path, batches=3)
    roots = store_roots(checkpoint)
    assert len(roots) == PARTITIONS
    # The providers are still loaded and nothing finished them: no snapshot yet.
    assert not any(snapshotted(r) for r in roots)

    assert finish_everywhere(spark, checkpoint) == len(roots)
    for root in roots:
        assert snapshotted(root), f"{root}: the last committed version has no snapshot"

    # Still loaded, so found again (any spelling of the checkpoint); finishing twice is a
    # no-op in the workers.
    assert finish_everywhere(spark, (checkpoint / "state").as_uri()) == len(roots)
    assert all(snapshotted(r) for r in roots)


def test_a_checkpoint_with_no_live_store_finishes_nothing(
    spark: SparkSession, tmp_path: Path
) -> None:
    nowhere = tmp_path / "no-such-checkpoint"
    provider = spark._jvm.io.pyrocks.statestore.PyRocksStateStoreProvider
    assert provider.finishQuery(str(nowhere)) == 0
    assert finish_everywhere(spark, nowhere) == 0


def test_the_stores_of_a_running_query_are_left_alone(
    spark: SparkSession, tmp_path: Path
) -> None:
    running_source, running_checkpoint = tmp_path / "running-in", tmp_path / "running-ckpt"
    running_source.mkdir()
    add_batch(running_source, 0)
    running = start_counting(spark, running_source, running_checkpoint, name="running_counts")
    try:
        running.processAllAvailable()
        stopped_checkpoint = stopped_query(spark, tmp_path / "stopped", batches=2)
        stopped_roots = store_roots(stopped_checkpoint)
        running_roots = store_roots(running_checkpoint)
        assert len(stopped_roots) == len(running_roots) == PARTITIONS

        assert finish_everywhere(spark, stopped_checkpoint) == len(stopped_roots)
        assert all(snapshotted(r) for r in stopped_roots)
        assert not any(snapshotted(r) for r in running_roots)

        # The running query goes on from its state.
        add_batch(running_source, 1)
        running.processAllAvailable()
        assert last_batch(running) == 1
        counts = {r["k"]: r["count"] for r in spark.table("running_counts").collect()}
        assert counts == {k: 2 * len(range(k, 40, 7)) for k in range(7)}
        assert not any(snapshotted(r) for r in running_roots)
    finally:
        running.stop()


def test_the_stores_on_executors_are_finished_by_a_job(
    cluster_spark: SparkSession, tmp_path: Path
) -> None:
    checkpoint = stopped_query(cluster_spark, tmp_path, batches=2)
    roots = store_roots(checkpoint)
    assert len(roots) == PARTITIONS
    assert not any(snapshotted(r) for r in roots)
    provider = cluster_spark._jvm.io.pyrocks.statestore.PyRocksStateStoreProvider
    assert provider.finishQuery(str(checkpoint)) == 0  # the driver JVM serves no store

    assert finish_everywhere(cluster_spark, checkpoint) == len(roots)
    for root in roots:
        assert snapshotted(root), f"{root}: the last committed version has no snapshot"

"""FLIP-147 in micro-batch form: when a query ends, its last committed version is left
fully published — snapshot uploaded, nothing in flight — so it loads with no replay."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter

from pyrocks_support import (
    MAINTENANCE_INTERVAL,
    MAINTENANCE_INTERVAL_KEY,
    pyrocks_session,
    wait_until,
    worker_pids,
)
from state_store.format.storage import open_storage
from state_store.format.store_root import StoreRoot
from state_store.options import PREFIX, StoreOptions
from state_store.runtime.engine import VersionedStore


def store_roots(checkpoint: Path) -> list[Path]:
    return sorted(p.parent for p in (checkpoint / "state").glob("*/*/query-*/manifests"))


def replay_at_latest(root: Path, scratch: Path) -> int:
    checkpoint = StoreRoot(open_storage(str(root)), str(root))
    store = VersionedStore(str(root), checkpoint, scratch, StoreOptions(), ThreadPoolExecutor(1))
    store.load(checkpoint.versions()[-1])
    store.close()
    return store.metrics.replayed_versions


def _write_batches(source: Path, batches: int) -> None:
    source.mkdir(parents=True, exist_ok=True)
    for batch in range(batches):
        rows = [json.dumps({"k": i % 13, "v": i}) for i in range(50)]
        (source / f"{batch:03d}.json").write_text("\n".join(rows) + "\n")


def _sums(spark: SparkSession, source: Path, checkpoint: Path) -> DataStreamWriter:
    stream = spark.readStream.schema("k int, v int").option("maxFilesPerTrigger", 1)
    counts = stream.json(str(source)).groupBy("k").agg(F.sum("v"))
    return (counts.writeStream.outputMode("update").format("noop")
            .option("checkpointLocation", str(checkpoint)))


def _assert_finished(spark: SparkSession, checkpoint: Path, scratch: Path) -> None:
    """Every store's last version has a snapshot and loads with no replay: checked at once,
    with no waiting (the stores take no snapshot of their own: snapshotInterval is 1000,
    and none when idle). Then the workers release the working copies behind the answer
    (runtime/teardown.py): none is left in their directories under `pool` once they have."""
    roots = store_roots(checkpoint)
    assert roots
    for i, root in enumerate(roots):
        assert _snapshotted(root), f"{root}: the last version has no snapshot"
        assert replay_at_latest(root, scratch / f"reader-{i}") == 0
    pool = Path(spark.conf.get(PREFIX + "localDir"))
    assert wait_until(lambda: not working_copies(pool)), working_copies(pool)


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """A session whose maintenance never runs during a test (interval: an hour): only the
    end of a query run can finish its stores."""
    session = _session("local[2]", tmp_path_factory.mktemp("pool"), maintenance="1h")
    yield session
    session.stop()


def test_available_now_query_ends_with_a_snapshot_of_its_last_version(
    spark: SparkSession, tmp_path: Path
) -> None:
    source, checkpoint = tmp_path / "in", tmp_path / "ckpt"
    _write_batches(source, 4)
    query = _sums(spark, source, checkpoint).trigger(availableNow=True).start()
    assert query.awaitTermination(300), "the AvailableNow query never ended"
    assert query.lastProgress["batchId"] == 3
    _assert_finished(spark, checkpoint, tmp_path)


def _stop_after(spark: SparkSession, batches: int, tmp_path: Path) -> None:
    """Runs `batches` batches, stops the idle query, and checks its stores at once."""
    source, checkpoint = tmp_path / "in", tmp_path / "ckpt"
    _write_batches(source, batches)
    query = _sums(spark, source, checkpoint).start()
    query.processAllAvailable()
    query.stop()
    _assert_finished(spark, checkpoint, tmp_path)


def test_stop_returns_once_every_store_is_finished(spark: SparkSession, tmp_path: Path) -> None:
    _stop_after(spark, 3, tmp_path)


def test_an_idle_query_snapshots_its_last_version_before_it_is_stopped(
        spark: SparkSession, tmp_path: Path) -> None:
    """snapshotWhenIdleSeconds: the workers snapshot a store idle since its commit on their
    own, so the stop's finish has nothing left to write (waited for, with a hang guard)."""
    key = PREFIX + "snapshotWhenIdleSeconds"
    source, checkpoint = tmp_path / "in", tmp_path / "ckpt"
    _write_batches(source, 3)
    spark.conf.set(key, "200ms")
    try:
        query = _sums(spark, source, checkpoint).start()
        query.processAllAvailable()
        assert wait_until(lambda: all(_snapshotted(r) for r in store_roots(checkpoint))), \
            "an idle query's stores were never snapshotted"
        query.stop()
    finally:
        spark.conf.set(key, "0")
    _assert_finished(spark, checkpoint, tmp_path)


def test_stop_finishes_the_stores_on_executors(tmp_path: Path) -> None:
    """local-cluster: the stores live in an executor JVM, reached by a job at the run's end."""
    spark = _session("local-cluster[1,1,1024]", tmp_path / "pool", maintenance="1h")
    try:
        _stop_after(spark, 2, tmp_path)
    finally:
        spark.stop()


def working_copies(pool: Path) -> list[Path]:
    """The stores' local RocksDB copies: <pool>/<worker pool>/<worker>/<store>-<session>."""
    return [p for p in pool.glob("*/*/*") if p.is_dir()]


def _snapshotted(root: Path) -> bool:
    checkpoint = StoreRoot(open_storage(str(root)), str(root))
    versions = checkpoint.versions()
    return bool(versions) and versions[-1] in checkpoint.snapshot_versions()


def test_stopping_the_session_finishes_every_store(tmp_path: Path) -> None:
    """Session stop shuts the workers down; each first finishes its stores."""
    spark = _session("local[2]", tmp_path / "pool")
    checkpoint = tmp_path / "ckpt"
    try:
        rates = spark.readStream.format("rate").option("rowsPerSecond", 200).load()
        query = (rates.groupBy((F.col("value") % 17).alias("k")).count().writeStream
                 .outputMode("update").format("noop")
                 .option("checkpointLocation", str(checkpoint)).start())
        assert wait_until(lambda: (query.lastProgress or {}).get("batchId", -1) >= 3, 300)
        query.stop()
    finally:
        spark.stop()
    roots = store_roots(checkpoint)
    assert roots
    for i, root in enumerate(roots):
        assert _snapshotted(root), f"{root}: the last version has no snapshot"
        assert replay_at_latest(root, tmp_path / f"reader-{i}") == 0


def _session(master: str, pool: Path, maintenance: str = MAINTENANCE_INTERVAL) -> SparkSession:
    """A session of its own whose stores take no snapshot unless finished (neither every
    few versions nor when idle)."""
    return pyrocks_session("pyrocks-final-snapshot", pool, {MAINTENANCE_INTERVAL_KEY: maintenance},
                           master=master, snapshotInterval=1000, snapshotWhenIdleSeconds=0)


def test_a_run_whose_stores_cannot_finish_still_ends_normally(tmp_path: Path) -> None:
    """The end of a run waits for its stores at most half of Spark's ask timeout: with every
    worker frozen (SIGSTOP) past that, the run still ends as a plain stop (no error, and
    Spark's termination event reaches the listeners: the run is recorded), and the finish
    completes in the background once the workers thaw. Without that bound, Spark's ask
    would time out inside the query's termination and its end would never be reported."""
    from state_store.results import FileSystemResultStore

    pool, results = tmp_path / "pool", tmp_path / "results"
    spark = pyrocks_session("pyrocks-unfinished-stores", pool,
                            {"spark.rpc.askTimeout": "6s", MAINTENANCE_INTERVAL_KEY: "1h"},
                            snapshotInterval=1000, snapshotWhenIdleSeconds=0,
                            requestTimeoutSeconds=3600, resultStore=str(results))
    frozen: list[int] = []
    try:
        source, checkpoint = tmp_path / "in", tmp_path / "ckpt"
        _write_batches(source, 2)
        query = _sums(spark, source, checkpoint).start()
        query.processAllAvailable()
        frozen = worker_pids(pool)
        assert frozen
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        query.stop()  # returns although no store could finish
        assert query.exception() is None
        store = FileSystemResultStore(str(results))
        deadline = time.monotonic() + 120  # hang guards, not timing assumptions
        while not store.has_clean(str(query.runId)):
            assert time.monotonic() < deadline, "the stopped run was never recorded"
            time.sleep(0.1)
        assert store.get(str(query.runId)).outcome == "stopped"
        assert not any(_snapshotted(r) for r in store_roots(checkpoint))
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
        frozen = []
        while not all(_snapshotted(r) for r in store_roots(checkpoint)):
            assert time.monotonic() < deadline, "the background finish never completed"
            time.sleep(0.1)
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
        spark.stop()

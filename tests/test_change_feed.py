"""The state data source's change feed (`readChangeFeed`) and `snapshotStartBatchId` on our
provider (SupportsFineGrainedReplay), against Spark's RocksDB provider with changelog
checkpointing on the same queries and input: the same rows, batch range by batch range."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from harness import (
    PROVIDER_KEY,
    FinishedRun,
    assert_same_outputs,
    checkpoint_of,
    last_commit,
    make_spark,
    run_queries,
)
from pyrocks_support import pyrocks_conf
from state_store.format.manifest import parse_snapshot_name
from streaming_queries import BY_NAME

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
CHANGELOG_KEY = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
NAMES = ("agg_update", "dedup_watermark", "join_inner", "session_window",
         "apply_in_pandas_with_state")
BATCHES = 6


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, FinishedRun]:
    """The same queries on Spark RocksDB (changelog checkpointing on) and on ours, each
    stopped after batch 2 and again at the end (ours snapshots every store at each stop)."""
    specs = [BY_NAME[n] for n in NAMES]
    theirs = tmp_path_factory.mktemp("rocksdb")
    their_outputs = run_queries(specs, theirs, {PROVIDER_KEY: ROCKSDB, CHANGELOG_KEY: "true"},
                                batches=BATCHES, restart_after=3)
    ours = tmp_path_factory.mktemp("pyrocks")
    our_outputs = run_queries(specs, ours, pyrocks_conf(ours / "pool"), batches=BATCHES,
                              restart_after=3)
    return {"rocksdb": FinishedRun(their_outputs, theirs),
            "pyrocks": FinishedRun(our_outputs, ours)}


def test_outputs_equal_spark_rocksdb_across_the_stops(runs: dict[str, FinishedRun]) -> None:
    """The runs' answers, batch by batch. Each run's end goes through Spark's state store
    coordinator and ours, and the next run loads every store anew: .ci/spark-matrix runs this
    on a release whose coordinator differs from the main release's."""
    theirs = runs["rocksdb"].outputs
    assert sorted(theirs) == sorted(NAMES)
    assert all(len(batches) >= BATCHES and any(batches.values())
               for batches in theirs.values()), theirs
    assert_same_outputs(theirs, runs["pyrocks"].outputs)


def stores(spark: SparkSession, checkpoint: Path) -> list[tuple[int, str]]:
    rows = spark.read.format("state-metadata").load(str(checkpoint)).collect()
    return sorted((r.operatorId, r.stateStoreName) for r in rows)


def change_feed(spark: SparkSession, checkpoint: Path, op: int, store: str, start: int,
                end: int) -> list[str]:
    frame = (spark.read.format("statestore").option("readChangeFeed", True)
             .option("changeStartBatchId", start).option("changeEndBatchId", end)
             .option("operatorId", op).option("storeName", store).load(str(checkpoint)))
    return sorted(map(repr, frame.collect()))


def state_at(frame: DataFrame) -> list[str]:
    return sorted(map(repr, frame.collect()))


def common_snapshots(checkpoint: Path, op: int, store: str) -> set[int]:
    """The versions every partition of the store has a snapshot of."""
    below = "" if store == "default" else f"{store}/"
    pattern = f"{op}/*/{below}query-*/snapshots"
    found = [{parsed[0] for f in d.glob("*.json") if (parsed := parse_snapshot_name(f.name))}
             for d in (checkpoint / "state").glob(pattern)]
    assert found, f"no snapshots of {op}/{store} in {checkpoint}"
    return set.intersection(*found)


@pytest.mark.parametrize("name", NAMES)
def test_change_feed_equals_spark_rocksdb(runs: dict[str, FinishedRun], name: str,
                                          tmp_path: Path) -> None:
    spark = make_spark(pyrocks_conf(tmp_path / "pool"))
    try:
        theirs, ours = (checkpoint_of(runs[p].work, BY_NAME[name]) for p in ("rocksdb", "pyrocks"))
        assert last_commit(theirs) == last_commit(ours)
        end = last_commit(ours)
        found = stores(spark, ours)
        assert found == stores(spark, theirs)
        compared = 0
        for op, store in found:
            for start, stop in ((0, end), (2, end - 1), (end, end)):
                want = change_feed(spark, theirs, op, store, start, stop)
                have = change_feed(spark, ours, op, store, start, stop)
                assert have == want, f"{name} {op}/{store} batches {start}..{stop}"
                compared += len(want)
        assert compared > 0, f"{name}: no change at all to compare"
    finally:
        spark.stop()


def test_snapshot_start_batch_replays_to_the_same_state(runs: dict[str, FinishedRun],
                                                        tmp_path: Path) -> None:
    """Each stop snapshots every store (the final snapshot), so batch 2's version has a
    snapshot: rebuilding the last batch from it must give the state a normal read gives."""
    spark = make_spark(pyrocks_conf(tmp_path / "pool"))
    try:
        for name in NAMES:
            checkpoint = checkpoint_of(runs["pyrocks"].work, BY_NAME[name])
            end = last_commit(checkpoint)
            for op, store in stores(spark, checkpoint):
                # Spark's state version of batch b is b + 1
                snapshot_batch = max(v for v in common_snapshots(checkpoint, op, store)
                                     if v <= end) - 1
                reader = (spark.read.format("statestore").option("batchId", end)
                          .option("operatorId", op).option("storeName", store))
                normal = reader.load(str(checkpoint))
                for partition in range(3):  # Spark replays one partition at a time
                    replayed = (reader.option("snapshotStartBatchId", snapshot_batch)
                                .option("snapshotPartitionId", partition).load(str(checkpoint)))
                    want = state_at(normal.where(f"partition_id = {partition}"))
                    assert state_at(replayed) == want, f"{name} {op}/{store} {partition}"
    finally:
        spark.stop()

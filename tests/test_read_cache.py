"""The shim's read cache answers gets in the JVM — and stays exact through the query
lifecycle (restart, rollback to an older version, abort)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from harness import on_spark_hdfs
from pyrocks_support import pyrocks_session
from state_store.options import PREFIX


def write_ids(source: Path, batch: int, ids: range) -> None:
    hidden = source / f".{batch:03d}.tmp"
    hidden.write_text("\n".join(json.dumps({"id": i}) for i in ids) + "\n")
    hidden.rename(source / f"{batch:03d}.json")


def run_dedup(spark: SparkSession, work: Path, batches: list[range],
              checkpoint: Path | None = None) -> list[dict]:
    source = work / "in"
    source.mkdir(parents=True, exist_ok=True)
    stream = spark.readStream.schema("id long").option("maxFilesPerTrigger", 1)
    query = (stream.json(str(source)).dropDuplicates(["id"]).writeStream.format("noop")
             .option("checkpointLocation", str(checkpoint or work / "ckpt")).start())
    progress = []
    try:
        start = len(list(source.glob("*.json")))
        for offset, ids in enumerate(batches):
            write_ids(source, start + offset, ids)
            query.processAllAvailable()
            progress.append(query.lastProgress)
    finally:
        query.stop()
    return progress


def operator(progress: dict) -> dict:
    return progress["stateOperators"][0]


def test_gets_are_answered_in_the_jvm(pyrocks_spark: SparkSession, tmp_path: Path) -> None:
    batches = [range(b * 2000, b * 2000 + 3000) for b in range(3)]  # overlapping ids
    progress = run_dedup(pyrocks_spark, tmp_path / "cached", batches)
    pyrocks_spark.conf.set(PREFIX + "readCacheMB", "0")
    try:
        uncached = run_dedup(pyrocks_spark, tmp_path / "uncached", batches)
    finally:
        pyrocks_spark.conf.unset(PREFIX + "readCacheMB")
    for cached_batch, uncached_batch in zip(progress, uncached, strict=True):
        cached, plain = operator(cached_batch), operator(uncached_batch)
        assert cached["numRowsUpdated"] == plain["numRowsUpdated"]
        assert cached["numRowsTotal"] == plain["numRowsTotal"]
        # without the cache every input row costs a get; with it, none after the first load
        assert plain["customMetrics"]["pyrocks.round_trips"] >= 3000
        assert cached["customMetrics"]["pyrocks.round_trips"] < 100
        assert cached["customMetrics"]["pyrocks.read_cache_evictions"] == 0  # it all fits
    assert operator(progress[-1])["numRowsTotal"] == 7000


def counts(progress: list[dict]) -> list[tuple[int, int]]:
    return [(operator(p)["numRowsUpdated"], operator(p)["numRowsTotal"]) for p in progress]


def stop_and_restart(spark: SparkSession, work: Path) -> list[dict]:
    """A dedup query run, stopped, and started again with one batch. (The second run's ids
    come in descending order: ascending, a cold cache would read ahead, a window per round
    trip, and could not be told from a warm one.)"""
    return run_dedup(spark, work, [range(0, 1000)]) + \
        run_dedup(spark, work, [range(1499, 499, -1)])


def assert_restarted_warm(spark: SparkSession, work: Path) -> None:
    ours = stop_and_restart(spark, work / "ours")
    assert counts(ours) == on_spark_hdfs(spark, lambda: counts(stop_and_restart(spark, work / "h")))
    assert counts(ours)[-1] == (500, 1500)
    # cold, each of the 1,000 gets of ids the first run stored is a round trip
    assert operator(ours[-1])["customMetrics"]["pyrocks.round_trips"] < 100


def test_a_restart_in_the_same_jvm_starts_with_the_cache_warm(pyrocks_spark: SparkSession,
                                                              tmp_path: Path) -> None:
    """A query stopped and started again in the same JVM: each closed provider left its
    cache, equal to the last commit, to the next provider of its store, so the first batch
    after the restart finds its gets answered in the JVM as before the stop."""
    assert_restarted_warm(pyrocks_spark, tmp_path)


def test_a_restart_on_a_cluster_runs_where_its_caches_are(tmp_path: Path) -> None:
    """Two executor JVMs, 8 partitions: the restarted run's tasks go to the executors that
    hold their stores' parked caches, as Spark's coordinator gives a new run no location
    and ours answers with the executor that last ran the store; so its first batch is
    answered in the JVMs as in local mode. The locality wait is long, so that each task
    surely waits for the executor it is sent to."""
    spark = pyrocks_session("pyrocks-cluster-restart", tmp_path / "pool",
                            {"spark.locality.wait": "30s", "spark.sql.shuffle.partitions": "8"},
                            master="local-cluster[2,1,1024]")
    try:
        assert_restarted_warm(spark, tmp_path)
    finally:
        spark.stop()


def test_a_checkpoint_replaced_at_its_path_is_read_afresh(pyrocks_spark: SparkSession,
                                                          tmp_path: Path) -> None:
    """The cache a stopped query left answers only its own commit: a checkpoint replaced by
    another query's, at the same path and the same version, is read from what it holds."""
    def replaced(work: Path) -> list[dict]:
        checkpoint = work / "first" / "ckpt"
        run_dedup(pyrocks_spark, work / "first", [range(0, 1000)])
        run_dedup(pyrocks_spark, work / "other", [range(5000, 6000)])
        shutil.rmtree(checkpoint)
        shutil.copytree(work / "other" / "ckpt", checkpoint)
        # the copy's file source knows the other query's input directory, and only that
        return run_dedup(pyrocks_spark, work / "other", [range(0, 1500)], checkpoint)
    ours = replaced(tmp_path / "ours")
    assert counts(ours) == on_spark_hdfs(pyrocks_spark, lambda: counts(replaced(tmp_path / "h")))
    assert counts(ours) == [(1500, 2500)]  # the first query's ids 0-999 are not in it


def test_grouped_counts_with_cache_match_spark(pyrocks_spark: SparkSession,
                                               tmp_path: Path) -> None:
    source = tmp_path / "in"
    source.mkdir()
    collected: dict[int, list] = {}
    stream = pyrocks_spark.readStream.schema("id long").option("maxFilesPerTrigger", 1)
    counts = stream.json(str(source)).groupBy((F.col("id") % 97).alias("k")).count()
    query = (counts.writeStream.outputMode("complete")
             .foreachBatch(lambda df, b: collected.__setitem__(b, sorted(df.collect())))
             .option("checkpointLocation", str(tmp_path / "ckpt")).start())
    try:
        for batch in range(4):
            write_ids(source, batch, range(batch * 300, batch * 300 + 500))
            query.processAllAvailable()
    finally:
        query.stop()
    ids = [i for b in range(4) for i in range(b * 300, b * 300 + 500)]
    expected = sorted((k, sum(1 for i in ids if i % 97 == k)) for k in range(97))
    assert [tuple(r) for r in collected[3]] == expected


def test_filter_answers_new_keys_when_the_cache_overflows(pyrocks_spark: SparkSession,
                                                          tmp_path: Path) -> None:
    """With a 1 MiB cache the oldest entries keep being evicted (and each batch's metrics
    say so), but the key filter still proves new ids absent: most gets never reach the
    worker, and the answers stay exact."""
    pyrocks_spark.conf.set(PREFIX + "readCacheMB", "1")
    try:
        batches = [range(b * 20_000, b * 20_000 + 25_000) for b in range(3)]
        progress = run_dedup(pyrocks_spark, tmp_path, batches)
    finally:
        pyrocks_spark.conf.unset(PREFIX + "readCacheMB")
    assert [operator(p)["numRowsUpdated"] for p in progress] == [25_000, 20_000, 20_000]
    for batch in progress:
        # the overlap (5,000 known ids per batch) may ask; the 20,000 new ids mostly not
        assert operator(batch)["customMetrics"]["pyrocks.round_trips"] < 8_000
        assert operator(batch)["customMetrics"]["pyrocks.read_cache_evictions"] > 0


def run_sessions(spark: SparkSession, work: Path, batches: int) -> tuple[list, list[dict]]:
    """Session windows over 200 users: even users' sessions stay open across batches, odd
    users come every other batch, so their sessions close and are evicted. Every batch scans
    each user's prefix and updates, merges and removes sessions."""
    source = work / "in"
    source.mkdir(parents=True, exist_ok=True)
    collected: list = []
    events = (spark.readStream.schema("user long, ts long").option("maxFilesPerTrigger", 1)
              .json(str(source)).withColumn("t", F.timestamp_seconds("ts"))
              .withWatermark("t", "5 seconds"))
    sessions = events.groupBy(F.session_window("t", "4 seconds"), "user").count()
    query = (sessions.writeStream.outputMode("append")
             .foreachBatch(lambda df, _: collected.extend(sorted(map(tuple, df.collect()))))
             .option("checkpointLocation", str(work / "ckpt")).start())
    try:
        for batch in range(batches):
            users = range(0, 200, 1 if batch % 2 == 0 else 2)
            rows = [{"user": u, "ts": batch * 3 + u % 3} for u in users]
            hidden = source / f".{batch:03d}.tmp"
            hidden.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
            hidden.rename(source / f"{batch:03d}.json")
            query.processAllAvailable()
        progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    finally:
        query.stop()
    return collected, progress


def test_prefix_scans_are_answered_in_the_jvm(pyrocks_spark: SparkSession,
                                              tmp_path: Path) -> None:
    """Listings learned in one batch answer the next batch's scans, and stay exact through
    its session updates and evictions: the output equals the uncached run's."""
    cached_rows, cached = run_sessions(pyrocks_spark, tmp_path / "cached", 6)
    pyrocks_spark.conf.set(PREFIX + "readCacheMB", "0")
    try:
        plain_rows, plain = run_sessions(pyrocks_spark, tmp_path / "uncached", 6)
    finally:
        pyrocks_spark.conf.unset(PREFIX + "readCacheMB")
    assert cached_rows == plain_rows
    assert len(cached_rows) >= 100  # closed sessions of odd users were emitted
    for cached_batch, plain_batch in zip(cached[1:], plain[1:], strict=True):
        assert operator(cached_batch)["numRowsTotal"] == operator(plain_batch)["numRowsTotal"]
        # uncached, every user costs two prefix scans a batch; cached, none after batch 0
        assert operator(plain_batch)["customMetrics"]["pyrocks.round_trips"] >= 200
        assert operator(cached_batch)["customMetrics"]["pyrocks.round_trips"] < 100


def test_an_idle_query_does_not_starve_a_running_one(pyrocks_spark: SparkSession,
                                                     tmp_path: Path) -> None:
    """Two queries share a 1 MiB budget. The first fills most of it and then idles; the
    second must take that memory back (least recently used first) rather than start its
    own cache over and over: its repeated ids are then answered in the JVM."""
    pyrocks_spark.conf.set(PREFIX + "readCacheMB", "1")
    idle_source, busy_source = tmp_path / "idle-in", tmp_path / "busy-in"
    idle_source.mkdir()
    busy_source.mkdir()
    stream = pyrocks_spark.readStream.schema("id long").option("maxFilesPerTrigger", 1)
    queries = [(stream.json(str(src)).dropDuplicates(["id"]).writeStream.format("noop")
                .option("checkpointLocation", str(tmp_path / f"ckpt-{src.name}")).start())
               for src in (idle_source, busy_source)]
    idle, busy = queries
    try:
        write_ids(idle_source, 0, range(0, 6000))
        idle.processAllAvailable()
        # Half the idle query's ids: they fit beside nothing else only once the idle
        # query's memory is taken back, and with room to spare, so that the busy query's
        # two partitions never need to evict each other (which would depend on timing).
        busy_batches = [range(100_000, 103_000), range(100_000, 103_000)]
        progress = []
        for batch, ids in enumerate(busy_batches):
            write_ids(busy_source, batch, ids)
            busy.processAllAvailable()
            progress.append(busy.lastProgress)
    finally:
        for query in queries:
            query.stop()
        pyrocks_spark.conf.unset(PREFIX + "readCacheMB")
    repeat = operator(progress[1])
    assert repeat["numRowsUpdated"] == 0  # every id of the second batch is a duplicate
    assert repeat["customMetrics"]["pyrocks.round_trips"] < 300  # not one per id (3,000)


def run_outer_join(spark: SparkSession, work: Path) -> tuple[list, list[dict]]:
    """A left outer stream-stream join whose first batch buffers 24,000 rows a side and whose
    watermark then evicts them all: unmatched left rows come out with nulls. The eviction
    scans each side's keyToNumValues and gets every buffered value from keyWithIndexToValue
    in that scan's order."""
    source = work / "in"
    source.mkdir(parents=True, exist_ok=True)
    batches = [[{"k": k, "side": s, "ts": k % 600} for k in range(24_000)
                for s in ((0, 1) if k % 3 == 0 else (0,))],
               [{"k": 30_000 + k, "side": s, "ts": 2_000} for k in range(50) for s in (0, 1)],
               [{"k": 40_000, "side": 0, "ts": 2_001}]]
    stream = (spark.readStream.schema("k long, side long, ts long")
              .option("maxFilesPerTrigger", 1).json(str(source))
              .withColumn("t", F.timestamp_seconds("ts")))
    left = stream.where("side = 0").select(F.col("k").alias("lk"), F.col("t").alias("lt"))
    right = stream.where("side = 1").select(F.col("k").alias("rk"), F.col("t").alias("rt"))
    joined = left.withWatermark("lt", "10 seconds").join(
        right.withWatermark("rt", "10 seconds"),
        F.expr("lk = rk AND rt BETWEEN lt - INTERVAL 30 SECONDS AND lt + INTERVAL 30 SECONDS"),
        "leftOuter")
    collected: list = []
    query = (joined.writeStream.outputMode("append")
             .foreachBatch(lambda df, _: collected.extend(map(tuple, df.collect())))
             .option("checkpointLocation", str(work / "ckpt")).start())
    try:
        for batch, rows in enumerate(batches):
            hidden = source / f".{batch:03d}.tmp"
            hidden.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
            hidden.rename(source / f"{batch:03d}.json")
            query.processAllAvailable()
        progress = [p for p in query.recentProgress if p["stateOperators"]]
    finally:
        query.stop()
    return sorted(collected, key=repr), progress


def test_a_join_evicting_past_its_cache_reads_ahead(pyrocks_spark: SparkSession,
                                                     tmp_path: Path) -> None:
    """With a 1 MiB cache the join's state (about 5 MiB) lives mostly in the workers. Its
    eviction gets every buffered value in key order: read ahead, a window per round trip
    rather than a round trip per value, with the same output as Spark's HDFS provider."""
    pyrocks_spark.conf.set(PREFIX + "readCacheMB", "1")
    try:
        ours, progress = run_outer_join(pyrocks_spark, tmp_path / "ours")
    finally:
        pyrocks_spark.conf.unset(PREFIX + "readCacheMB")
    theirs, reference = on_spark_hdfs(pyrocks_spark,
                                      lambda: run_outer_join(pyrocks_spark, tmp_path / "hdfs"))
    assert ours == theirs
    assert sum(1 for _, _, rk, _ in ours if rk is None) >= 15_000  # evicted unmatched rows
    removed = [operator(p)["numRowsRemoved"] for p in progress]
    assert removed == [operator(p)["numRowsRemoved"] for p in reference]
    assert sum(removed) >= 30_000
    # A round trip per evicted value would be 30,000; a window each is a few dozen.
    trips = sum(operator(p)["customMetrics"]["pyrocks.round_trips"] for p in progress
                if operator(p)["numRowsRemoved"])
    assert trips < sum(removed) / 20

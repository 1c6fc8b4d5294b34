"""A query tuned for Spark's RocksDB provider keeps its tuning on ours: each
`spark.sql.streaming.stateStore.rocksdb.*` setting with a meaning here (and
`minDeltasForSnapshot`) becomes our option, ours win when both are set, and the others are
named, never silently ignored. Option values are Python values where a user passes them."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from pyrocks_support import pyrocks_session, worker_pids
from state_store.errors import OptionError
from state_store.options import PREFIX, ignored_spark_settings, store_options
from state_store.spark import cluster_conf, configure

ROCKSDB = "spark.sql.streaming.stateStore.rocksdb."
TUNED = {ROCKSDB + "compression": "zstd", ROCKSDB + "blockSizeKB": "16",
         ROCKSDB + "blockCacheSizeMB": "24", ROCKSDB + "writeBufferSizeMB": "8",
         ROCKSDB + "maxOpenFiles": "300", ROCKSDB + "compactOnCommit": "true",
         ROCKSDB + "trackTotalNumberOfRows": "false",
         "spark.sql.streaming.stateStore.minDeltasForSnapshot": "3"}


def test_each_spark_setting_becomes_ours() -> None:
    opts = store_options(TUNED)
    assert (opts.compression, opts.block_size_kb, opts.block_cache_mb, opts.write_buffer_mb,
            opts.max_open_files, opts.compact_on_commit, opts.track_num_keys,
            opts.snapshot_interval) == ("zstd", 16, 24, 8, 300, True, False, 3)


def test_our_own_setting_wins_and_sparks_default_markers_mean_ours() -> None:
    opts = store_options({**TUNED, PREFIX + "compression": "lz4", "blockSizeKB": "8",
                          ROCKSDB + "writeBufferSizeMB": "-1"})
    assert (opts.compression, opts.block_size_kb) == ("lz4", 8)
    assert opts.write_buffer_mb == store_options({}).write_buffer_mb  # -1: RocksDB's default


def test_a_bad_spark_value_is_refused_naming_sparks_key() -> None:
    with pytest.raises(OptionError, match=rf"'brotli' for {re.escape(ROCKSDB)}compression "
                                          r"\(Spark's setting, read as .*compression\)"):
        store_options({ROCKSDB + "compression": "brotli"})


def test_settings_without_a_meaning_here_are_named() -> None:
    raw = {**TUNED, ROCKSDB + "formatVersion": "5", ROCKSDB + "lockAcquireTimeoutMs": "1",
           ROCKSDB + "boundedMemoryUsage": "true"}
    assert ignored_spark_settings(raw) == [ROCKSDB + "formatVersion",
                                           ROCKSDB + "lockAcquireTimeoutMs"]
    builder = SparkSession.builder.config(ROCKSDB + "formatVersion", "5")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        configure(builder)
    assert [str(w.message) for w in caught if "formatVersion" in str(w.message)], \
        [str(w.message) for w in caught]


def test_python_values_are_accepted_where_users_pass_them() -> None:
    conf = cluster_conf(rootOptions={"endpoint_url": "http://127.0.0.1:9"},
                        trackTotalNumberOfRows=False, writeBatchBytes="256k",
                        requestTimeoutSeconds="10min", orphanMarginSeconds="2h",
                        memoryBoundMB="1g")
    assert json.loads(conf[PREFIX + "rootOptions"]) == {"endpoint_url": "http://127.0.0.1:9"}
    assert [conf[PREFIX + k] for k in ("trackTotalNumberOfRows", "writeBatchBytes",
                                      "requestTimeoutSeconds", "orphanMarginSeconds",
                                      "memoryBoundMB")] == ["false", "262144", "600", "7200",
                                                            "1024"]
    with pytest.raises(OptionError, match=rf"'12x' for {PREFIX}writeBatchBytes"):
        cluster_conf(writeBatchBytes="12x")
    with pytest.raises(OptionError, match=rf"'1500k' for {PREFIX}memoryBoundMB.*whole"):
        cluster_conf(memoryBoundMB="1500k")


def _rocksdb_option(text: str, name: str) -> str:
    found = re.search(rf"^\s*{name}=(.*)$", text, re.MULTILINE)
    assert found, f"{name} not in the OPTIONS file"
    return found.group(1).strip()


def test_a_query_tuned_for_sparks_rocksdb_runs_with_that_tuning(tmp_path: Path) -> None:
    """Only Spark's keys are set; the RocksDB options file the worker's RocksDB wrote (it
    travels in every snapshot) and the worker's memory bound show them in effect, and the
    state's files on disk are zstd-compressed."""
    source = tmp_path / "in"
    source.mkdir()
    rows = [{"sensor": f"sensor-{i % 2000:05d}", "reading": "steady " * 8} for i in range(20000)]
    (source / "part-0.json").write_text("\n".join(map(json.dumps, rows)))
    memory = {ROCKSDB + "boundedMemoryUsage": "true", ROCKSDB + "maxMemoryUsageMB": "96"}
    pool = tmp_path / "pool"
    spark = pyrocks_session("spark-rocksdb-settings", pool, {**TUNED, **memory})
    try:
        frame = spark.readStream.schema("sensor string, reading string").json(str(source))
        counts = frame.groupBy("sensor").agg({"reading": "max"})
        query = (counts.writeStream.outputMode("update").format("noop")
                 .option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        bounds = {_argument(pid, "--memory-bound-mb") for pid in worker_pids(pool)}
    finally:
        spark.stop()
    assert bounds == {"48"}, bounds  # maxMemoryUsageMB over the executor's two workers
    state = tmp_path / "checkpoint" / "state"
    options_files = [p for p in state.rglob("*OPTIONS-*")]
    assert options_files, "no snapshot carries RocksDB's options file"
    for path in options_files:
        text = path.read_text()
        assert _rocksdb_option(text, "compression") == "kZSTD"
        assert _rocksdb_option(text, "block_size") == str(16 << 10)
        assert _rocksdb_option(text, "write_buffer_size") == str(8 << 20)
        assert _rocksdb_option(text, "max_open_files") == "300"
    tables = [p.read_bytes() for p in state.rglob("*.sst")]
    # each table names its compression in its properties block ("rocksdb.compression")
    assert tables and all(b"ZSTD" in t and b"NoCompression" not in t for t in tables)
    raw = sum(len(json.dumps(r)) for r in rows[:2000])  # the distinct keys' rows
    assert sum(map(len, tables)) < raw / 4


def _argument(pid: int, name: str) -> str:
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    return argv[argv.index(name) + 1]

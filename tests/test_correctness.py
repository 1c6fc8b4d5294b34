"""Every stateful operator gives, batch by batch, the answers of Spark's HDFS provider —
across a stop and restart of the query on a new SparkSession, in local mode, on two
executor JVMs (local-cluster), with the shim's read cache on (default) and off, and with
Spark's checkpoint ids (checkpointFormatVersion 2). (State on the object stores, with an
overflowing read cache: test_object_store_queries.py.)"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from harness import (
    Outputs,
    SavedRun,
    assert_same_outputs,
    checkpoint_of,
    last_commit,
    run_queries,
)
from pyrocks_support import children_of, java_children, pyrocks_conf
from state_store.format.storage import open_storage
from state_store.format.store_root import StoreRoot
from streaming_queries import BY_NAME, QUERIES

WATERMARKED = {"window_append", "dedup_watermark", "dedup_within_watermark", "join_inner",
               "join_left_outer", "session_window", "apply_in_pandas_event_timeout"}
CHECKPOINT_FORMAT_KEY = "spark.sql.streaming.stateStore.checkpointFormatVersion"
CLUSTER_SUBSET = ("agg_update", "join_left_outer", "session_window", "dedup_within_watermark")


def select(outputs: Outputs, names: tuple[str, ...]) -> Outputs:
    return {name: outputs[name] for name in names}


def test_reference_exercises_every_operator(hdfs_reference: Outputs) -> None:
    for name, batches in hdfs_reference.items():
        assert len(batches) >= 8, f"{name}: only {len(batches)} micro-batches ran"
        assert any(batches.values()), f"{name}: no output at all"
        if name in WATERMARKED:  # state must be emitted or evicted by watermark mid-run
            assert any(rows for b, rows in batches.items() if b >= 2), name


def test_local_mode_matches_hdfs(hdfs_reference: Outputs, ours_run: SavedRun) -> None:
    assert_same_outputs(hdfs_reference, ours_run.outputs)


def test_without_read_cache_and_with_checkpoint_ids_matches_hdfs(
        hdfs_reference: Outputs, tmp_path: Path) -> None:
    """Every get goes to the worker: the cache must never be what makes outputs right. And
    Spark keeps state store checkpoint ids in its commit log (checkpointFormatVersion 2):
    every commit's id is recorded, and every load after the restart is given one."""
    conf = {**pyrocks_conf(tmp_path / "pool", readCacheMB=0), CHECKPOINT_FORMAT_KEY: "2"}
    ours = run_queries(QUERIES, tmp_path, conf)
    assert_same_outputs(hdfs_reference, ours)
    for spec in QUERIES:
        checkpoint = checkpoint_of(tmp_path, spec)
        last = (checkpoint / "commits" / str(last_commit(checkpoint))).read_text()
        ids = json.loads(last.splitlines()[1])["stateUniqueIds"]
        assert ids and all(i.endswith(".changelog") for op in ids.values()
                           for partition in op for i in partition), spec.name


def test_partitions_moving_between_executors_match_hdfs(hdfs_reference: Outputs,
                                                        tmp_path: Path) -> None:
    """Two executor JVMs (each with its own workers) with no locality wait (a partition's
    task runs wherever a slot is free: A, then C, then A), snapshots every 2 versions, and
    one executor killed after batch 1, so its partitions surely move to another JVM mid-run;
    after the restart, batches 4-7 run on two JVMs undisturbed. (This is also the suite's
    plain two-JVM run: a separate one with default options proved nothing more.)"""
    specs = [BY_NAME[name] for name in CLUSTER_SUBSET]
    conf = {**pyrocks_conf(tmp_path / "pool", snapshotInterval=2),
            "spark.locality.wait": "0s"}
    killed: list[int] = []

    def kill_an_executor(batch: int) -> None:
        if batch == 1:
            (driver,) = java_children()
            executors = [pid for pid in children_of(driver)
                         if b"CoarseGrainedExecutorBackend" in _cmdline(pid)]
            assert len(executors) == 2, executors
            os.kill(executors[0], signal.SIGKILL)
            killed.append(executors[0])

    ours = run_queries(specs, tmp_path, conf, master="local-cluster[2,1,1024]",
                       after_batch=kill_an_executor)
    assert_same_outputs(select(hdfs_reference, CLUSTER_SUBSET), ours)
    assert killed
    moved = used_snapshot = 0
    for spec in specs:
        for root in (tmp_path / spec.name / "checkpoint" / "state").rglob("query-*"):
            checkpoint = StoreRoot(open_storage(str(root)), str(root))
            manifests = [checkpoint.read_manifest(v) for v in checkpoint.versions()]
            first_run = [m for m in manifests if m.version <= 4]  # batches 0-3: one session
            moved += len({m.writer.split(" worker")[0] for m in first_run}) > 1
            used_snapshot += any(m.snapshot_version is not None for m in first_run)
    assert moved, "no store was written from two executor JVMs"
    assert used_snapshot, "no version was built on a background snapshot"


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""

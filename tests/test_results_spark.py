"""The result store with real Spark: every run of a session configured with
`resultStore=URL` is recorded when it ends, `run_once` never runs a run key twice, a
driver killed while recording is completed by the next one, and a new session resumes
what an earlier driver left dirty."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from pyrocks_support import pyrocks_session
from state_store.results import FileSystemResultStore, QueryResult, run_once
from state_store.results.__main__ import CRASH_AT_ENV, CRASH_POINTS

TESTS = Path(__file__).resolve().parent


def session(pool: Path, results: Path) -> SparkSession:
    return pyrocks_session("pyrocks-results", pool, resultStore=str(results),
                           cleanupBackoffInitialSeconds=0.2)


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("results")


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory, results: Path) -> Iterator[SparkSession]:
    spark = session(tmp_path_factory.mktemp("pool"), results)
    yield spark
    spark.stop()


def write_input(source: Path, files: range) -> None:
    source.mkdir(parents=True, exist_ok=True)
    for i in files:
        rows = [json.dumps({"k": j % 5, "v": j}) for j in range(20)]
        (source / f"{i:03d}.json").write_text("\n".join(rows) + "\n")


def counting(spark: SparkSession, source: Path, checkpoint: Path, available_now: bool = True,
             fail: bool = False) -> StreamingQuery:
    rows = spark.readStream.schema("k int, v int").option("maxFilesPerTrigger", 1)
    counts = rows.json(str(source)).groupBy("k").count()
    writer = counts.writeStream.outputMode("update").option("checkpointLocation", str(checkpoint))
    if fail:
        def explode(batch, batch_id: int) -> None:  # type: ignore[no-untyped-def]
            raise ValueError(f"the sink refuses batch {batch_id}")
        writer = writer.foreachBatch(explode)
    else:
        writer = writer.format("noop")
    return (writer.trigger(availableNow=True) if available_now else writer).start()


def wait_clean(store: FileSystemResultStore, run_key: str) -> QueryResult:
    """The recorder runs in its own process: a hang guard, not a timing assumption."""
    deadline = time.monotonic() + 120
    while not store.has_clean(run_key):
        assert time.monotonic() < deadline, f"run {run_key} never turned clean: " \
            f"{store.entry(run_key)}"
        time.sleep(0.1)
    return store.get(run_key)


def query_id_of(checkpoint: Path) -> str:
    return json.loads((checkpoint / "metadata").read_text().splitlines()[0])["id"]


def test_run_once_runs_a_run_key_once(spark: SparkSession, results: Path,
                                      tmp_path: Path) -> None:
    source, checkpoint = tmp_path / "in", tmp_path / "ckpt"
    write_input(source, range(3))
    starts: list[StreamingQuery] = []

    def start() -> StreamingQuery:
        starts.append(counting(spark, source, checkpoint))
        return starts[-1]

    first = run_once(spark, "daily-2026-11-23", start)
    assert len(starts) == 1
    assert first.outcome == "finished" and first.error is None
    assert first.last_batch_id == 2
    assert first.query_id == query_id_of(checkpoint) == str(starts[0].id)
    assert first.run_id == str(starts[0].runId)
    assert first.checkpoint.endswith(str(checkpoint))
    assert first.metrics["batchId"] == 2 and first.ended_at_ms >= first.started_at_ms > 0

    write_input(source, range(3, 5))  # new data: a second run would process it
    again = run_once(spark, "daily-2026-11-23", start)
    assert len(starts) == 1 and again == first
    store = FileSystemResultStore(str(results))
    assert wait_clean(store, "daily-2026-11-23") == first

    following = run_once(spark, "daily-2026-11-24", start)  # a new key runs
    assert len(starts) == 2 and following.last_batch_id == 4


def test_every_run_is_recorded_with_its_outcome(spark: SparkSession, results: Path,
                                                tmp_path: Path) -> None:
    store = FileSystemResultStore(str(results))
    source = tmp_path / "in"
    write_input(source, range(2))
    stopped = counting(spark, source, tmp_path / "c1", available_now=False)
    stopped.processAllAvailable()
    stopped.stop()
    failed = counting(spark, source, tmp_path / "c2", fail=True)
    with pytest.raises(Exception, match="the sink refuses batch 0"):
        failed.awaitTermination(300)

    was_stopped = wait_clean(store, str(stopped.runId))
    assert (was_stopped.outcome, was_stopped.last_batch_id) == ("stopped", 1)
    assert was_stopped.query_id == str(stopped.id)
    was_failed = wait_clean(store, str(failed.runId))
    assert was_failed.outcome == "failed" and was_failed.last_batch_id == -1
    assert "the sink refuses batch 0" in (was_failed.error or "")


def driver(work: Path, run_key: str, crash_at: str | None = None) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k != CRASH_AT_ENV}
    if crash_at:
        env[CRASH_AT_ENV] = crash_at
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(TESTS.parent), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, str(TESTS / "results_driver.py"), str(work), run_key],
                          env=env, capture_output=True, text=True, timeout=600)
    return done.returncode, done.stdout


def batches_written(out: Path) -> list[int]:
    return sorted(int(d.name.split("-")[0]) for d in out.iterdir() if d.is_dir())


@pytest.mark.parametrize("crash_at", CRASH_POINTS)
def test_a_driver_killed_while_recording_never_runs_twice(tmp_path: Path, crash_at: str) -> None:
    write_input(tmp_path / "in", range(3))
    code, out = driver(tmp_path, "nightly", crash_at)
    assert "STARTING" in out and "JVM GONE" in out, (code, out)
    store = FileSystemResultStore(str(tmp_path / "results"))
    assert store.has_dirty("nightly")
    recorded = store.get("nightly")
    assert recorded.outcome == "finished" and recorded.last_batch_id == 2
    assert batches_written(tmp_path / "out") == [0, 1, 2]

    write_input(tmp_path / "in", range(3, 4))  # what a second run would process
    code, out = driver(tmp_path, "nightly")
    assert code == 0 and "STARTING" not in out and "CLEAN" in out, (code, out)
    result_line = next(line for line in out.splitlines() if line.startswith("RESULT "))
    assert QueryResult.from_dict(json.loads(result_line[len("RESULT "):])) == recorded
    assert store.has_clean("nightly") and not store.has_dirty("nightly")
    assert batches_written(tmp_path / "out") == [0, 1, 2]  # each batch exactly once


def manifests(checkpoint: Path) -> int:
    return len(list(checkpoint.glob("state/*/*/query-*/manifests/*")))


def test_cleanup_trims_to_retention_and_releases_a_claim(
    spark: SparkSession, results: Path, tmp_path: Path
) -> None:
    """A run's cleanup collects its stores' garbage down to minBatchesToRetain (nothing
    else runs GC here: the run's providers are closed when it ends), and, for a query
    restored with CLAIM, releases the source once no retained version needs it."""
    from state_store.savepoint import restore

    store = FileSystemResultStore(str(results))
    source = tmp_path / "in"
    write_input(source, range(4))
    retain, interval = "spark.sql.streaming.minBatchesToRetain", \
        "spark.sql.streaming.stateStore.pyrocks.snapshotInterval"
    spark.conf.set(retain, "2")
    spark.conf.set(interval, "2")
    try:
        first = run_once(spark, "claimed-source", lambda: counting(spark, source, tmp_path / "a"))
        assert first.retain == 2
        wait_clean(store, "claimed-source")
        assert manifests(tmp_path / "a") == 2 * 2  # two stores, two versions each

        restore(str(tmp_path / "a"), str(tmp_path / "b"), mode="claim")
        assert not (tmp_path / "a" / "_claim_released.json").exists()
        write_input(source, range(4, 12))
        run_once(spark, "claimer", lambda: counting(spark, source, tmp_path / "b"))
        wait_clean(store, "claimer")
    finally:
        spark.conf.unset(retain)
        spark.conf.unset(interval)
    assert manifests(tmp_path / "b") == 2 * 2
    released = json.loads((tmp_path / "a" / "_claim_released.json").read_text())
    assert released["query_id"] == query_id_of(tmp_path / "b")
    done = subprocess.run([sys.executable, "-m", "state_store.cli", "inspect",
                           str(tmp_path / "a"), "--json"], capture_output=True, text=True)
    assert json.loads(done.stdout)["claimed_by"]["released_at"] == released["released_at"]


def test_a_new_session_resumes_dirty_runs(tmp_path: Path) -> None:
    """Last in this module: it replaces the module's session with a new one."""
    results = tmp_path / "results"
    store = FileSystemResultStore(str(results))
    left = QueryResult(run_key="left-dirty", query_id="q", run_id="r", outcome="stopped",
                       checkpoint=str(tmp_path / "gone"))
    store.create_dirty(left)  # as a driver that died before its cleanup leaves it
    spark = session(tmp_path / "pool", results)
    try:
        assert spark.streams.active == []  # streaming starts: the session's recorder resumes
        assert wait_clean(store, "left-dirty") == left
    finally:
        spark.stop()

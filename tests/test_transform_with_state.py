"""transformWithState (PySpark's pandas and rows APIs, Scala's) on our provider answers as
on Spark's RocksDB provider, the only one Spark itself accepts for it: batch by batch,
across killed workers and a restart from a native savepoint, with checkpoint ids
(checkpointFormatVersion 2). A canonical savepoint of its state is refused, naming why."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pyspark
import pytest
from pyspark.sql import SparkSession

from harness import (
    PROVIDER_KEY,
    FinishedRun,
    assert_same_outputs,
    checkpoint_of,
    last_commit,
    make_spark,
    run_queries,
)
from pyrocks_support import pyrocks_conf, worker_pids
from state_store.cli import main as state_store
from state_store.driver import releases
from streaming_queries import read, write_batch
from tws_queries import TWS_QUERIES, Evolving, tws_query_conf, with_processors

SPARK_ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
BATCHES, RESTART_AFTER = 5, 3
CHECKPOINT_FORMAT_KEY = "spark.sql.streaming.stateStore.checkpointFormatVersion"
ENCODING_KEY = "spark.sql.streaming.stateStore.encodingFormat"
CHANGELOG_KEY = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
BY_TWS_NAME = {spec.name: spec for spec in TWS_QUERIES}


@pytest.fixture(scope="module")
def spark_rocksdb(tmp_path_factory: pytest.TempPathFactory) -> FinishedRun:
    work = tmp_path_factory.mktemp("spark-rocksdb")
    conf = {PROVIDER_KEY: SPARK_ROCKSDB, CHANGELOG_KEY: "true"}  # its change feed needs them
    return FinishedRun(run_queries(TWS_QUERIES, work, with_processors(conf), batches=BATCHES,
                                   restart_after=RESTART_AFTER, query_conf=tws_query_conf),
                       work)


def state_rows(spark: SparkSession, work: Path, name: str, variable: str,
               **options: object) -> list[str]:
    """What Spark's state data source reads of one state variable of query `name`."""
    reader = spark.read.format("statestore").option("stateVarName", variable)
    for key, value in options.items():
        reader = reader.option(key, value)
    frame = reader.load(str(checkpoint_of(work, BY_TWS_NAME[name])))
    return sorted(repr(r) for r in frame.drop("partition_id").collect())


def assert_state_reads_as_spark_rocksdb(spark_rocksdb: FinishedRun, ours: Path,
                                        conf: dict[str, str]) -> None:
    """Each state kind of the event-time query, and the change feed of its value state
    (the batches the restored query ran), as the state data source reads them."""
    name = "tws_event_time_pandas"
    checkpoint = checkpoint_of(ours, BY_TWS_NAME[name])
    batch = last_commit(checkpoint)
    assert batch == last_commit(checkpoint_of(spark_rocksdb.work, BY_TWS_NAME[name]))
    restored = min(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    feed = {"readChangeFeed": True, "changeStartBatchId": restored + 1,
            "changeEndBatchId": batch}
    spark = make_spark(conf)
    try:
        for variable in ("count", "recent", "buckets"):
            theirs = state_rows(spark, spark_rocksdb.work, name, variable, batchId=batch)
            assert theirs, variable
            assert state_rows(spark, ours, name, variable, batchId=batch) == theirs, variable
        theirs = state_rows(spark, spark_rocksdb.work, name, "count", **feed)
        assert theirs and state_rows(spark, ours, name, "count", **feed) == theirs
    finally:
        spark.stop()


def test_every_state_kind_timer_and_api_matches_spark_rocksdb(
        spark_rocksdb: FinishedRun, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """One run that meets what users meet: every state store worker SIGKILLed after batch 1
    and after the restart's first batch (the next batch's stores reopen on new workers,
    from the durable versions); at the restart each query resumes from a native savepoint
    of its checkpoint, restored NO_CLAIM where the checkpoint was (the canonical format is
    refused); and Spark keeps checkpoint ids in its commit log (checkpointFormatVersion 2),
    so every load after the first is of the commit Spark recorded."""
    pool = tmp_path / "pool"

    def kill_workers(batch: int) -> None:
        if batch in (1, RESTART_AFTER):
            pids = worker_pids(pool)
            assert pids, "no worker to kill"
            for pid in pids:
                os.kill(pid, signal.SIGKILL)

    def resume_from_savepoints(_: int) -> None:
        for spec in TWS_QUERIES:
            checkpoint = checkpoint_of(tmp_path, spec)
            savepoint, refused = tmp_path / "savepoints" / spec.name, tmp_path / "canonical"
            assert state_store(["savepoint", str(checkpoint), str(refused),
                                "--format", "canonical"]) == 1
            assert "take a native savepoint" in capsys.readouterr().err
            assert not refused.exists()
            assert state_store(["savepoint", str(checkpoint), str(savepoint), "--json"]) == 0
            assert json.loads(capsys.readouterr().out)["batch"] == last_commit(checkpoint)
            shutil.move(checkpoint, tmp_path / "retired" / spec.name)
            assert state_store(["restore", str(savepoint), str(checkpoint)]) == 0

    conf = with_processors({**pyrocks_conf(pool), CHECKPOINT_FORMAT_KEY: "2"})
    ours = run_queries(TWS_QUERIES, tmp_path, conf, master="local[2,4]", batches=BATCHES,
                       restart_after=RESTART_AFTER, after_batch=kill_workers,
                       between_phases=resume_from_savepoints, query_conf=tws_query_conf)
    assert_same_outputs(spark_rocksdb.outputs, ours)
    for name, batches in ours.items():  # every query's rows and timers answered
        rows = [row for batch in batches.values() for row in batch]
        assert len(batches) >= BATCHES and "kind='rows'" in str(rows), name
        assert "kind='timer'" in str(rows), name
    for spec in TWS_QUERIES:
        checkpoint = checkpoint_of(tmp_path, spec)
        state = checkpoint / "state" / "0"  # the state is in our stores, one per partition
        partitions = [p for p in state.iterdir() if p.name.isdigit()]
        assert partitions and all(list(p.glob("query-*/manifests")) for p in partitions)
        last = (checkpoint / "commits" / str(last_commit(checkpoint))).read_text()
        assert json.loads(last.splitlines()[1])["stateUniqueIds"], spec.name
    if releases.release_of(pyspark.__version__) >= (4, 2):
        # Before 4.2 Spark's state data source reads only format-1 commit logs (it fails
        # with INVALID_LOG_VERSION on any provider's checkpoint of format 2)
        assert_state_reads_as_spark_rocksdb(spark_rocksdb, tmp_path, conf)



def run_evolving(work: Path, conf: dict[str, str]) -> list[list[str]]:
    """Two runs of one query on one checkpoint, each on a new session with its own version
    of the processor and one new input file; each run's rows."""
    answers: list[list[str]] = []
    for index, processor in enumerate((Evolving("n int, name string, gone string"),
                                       Evolving("name string, n long, extra string"))):
        spark = make_spark({**conf, ENCODING_KEY: "avro"})
        rows: list[str] = []
        write_batch(work / "input", index)
        frame = read(spark, work / "input").groupBy("k").transformWithStateInPandas(
            processor, "k int, held string", "Update", "None")
        query = (frame.writeStream.outputMode("update")
                 .foreachBatch(lambda batch, _, rows=rows: rows.extend(
                     map(repr, batch.collect())))
                 .option("checkpointLocation", str(work / "checkpoint")).start())
        try:
            query.processAllAvailable()
        finally:
            query.stop()
            spark.stop()
        answers.append(sorted(rows))
    return answers


def test_value_schema_evolution_reads_as_spark_does(tmp_path: Path) -> None:
    """A later run of the query adds a field, drops one, reorders them and widens one
    (encodingFormat=avro, Spark's condition for evolution): rows written with the old
    schema read, by field name, into the new one, as on Spark's RocksDB provider."""
    spark_rocksdb = run_evolving(tmp_path / "spark", {PROVIDER_KEY: SPARK_ROCKSDB})
    ours = run_evolving(tmp_path / "ours", pyrocks_conf(tmp_path / "pool"))
    assert ours == spark_rocksdb
    assert all("('extra', None), ('n', " in row and "gone" not in row
               for row in ours[1]), ours[1]

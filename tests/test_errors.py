"""Clear errors, each naming the problem: options, foreign checkpoints, versions, the shim."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from harness import on_spark_hdfs
from state_store.driver import bridge
from state_store.errors import OptionError
from state_store.options import PREFIX, StoreOptions, store_options
from state_store.spark import spark_conf


def write_batch(input_dir: Path, index: int) -> None:
    input_dir.mkdir(parents=True, exist_ok=True)
    rows = [json.dumps({"k": i % 5, "v": i + index}) for i in range(50)]
    (input_dir / f"batch-{index:03d}.json").write_text("\n".join(rows) + "\n")


def run_counts(spark: SparkSession, input_dir: Path, checkpoint: Path) -> None:
    """Runs a groupBy count over everything in `input_dir`, one file per micro-batch."""
    stream = spark.readStream.schema("k int, v int").option("maxFilesPerTrigger", 1)
    counts = stream.json(str(input_dir)).groupBy("k").agg(F.count("*").alias("n"))
    query = (counts.writeStream.outputMode("update").format("noop")
             .option("checkpointLocation", str(checkpoint)).start())
    try:
        query.processAllAvailable()
    finally:
        query.stop()


def test_spark_conf_rejects_unknown_option() -> None:
    with pytest.raises(OptionError, match=rf"unknown option {PREFIX}snapshotIntervall"):
        spark_conf(snapshotIntervall=5)


def test_short_option_keys_are_honoured_or_refused_never_ignored() -> None:
    assert store_options({"snapshotInterval": "7"}).snapshot_interval == 7
    assert store_options({f"{PREFIX}snapshotInterval": "8"}).snapshot_interval == 8
    with pytest.raises(OptionError, match=rf"unknown option {PREFIX}snapshotIntervall"):
        store_options({"snapshotIntervall": "7"})
    with pytest.raises(OptionError, match=rf"{PREFIX}maxReplayVersions.*an integer >= 1"):
        store_options({"maxReplayVersions": "0"})
    assert store_options({"spark.sql.shuffle.partitions": "3"}) == StoreOptions()  # not ours


def test_spark_conf_rejects_invalid_value() -> None:
    with pytest.raises(OptionError, match=rf"{PREFIX}snapshotInterval.*accepted: an integer >= 1"):
        spark_conf(snapshotInterval=0)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("noSuchOption", "1", f"unknown option {PREFIX}noSuchOption"),
        ("trackTotalNumberOfRows", "maybe", f"{PREFIX}trackTotalNumberOfRows.*true or false"),
        ("workers", "-2", f"{PREFIX}workers.*accepted: an integer >= 1"),
    ],
)
def test_query_fails_on_bad_option_set_directly(
    pyrocks_spark: SparkSession, tmp_path: Path, key: str, value: str, message: str
) -> None:
    write_batch(tmp_path / "in", 0)
    pyrocks_spark.conf.set(PREFIX + key, value)
    try:
        with pytest.raises(Exception, match=message):
            run_counts(pyrocks_spark, tmp_path / "in", tmp_path / "ckpt")
    finally:
        pyrocks_spark.conf.unset(PREFIX + key)


def test_checkpoint_written_by_another_provider(pyrocks_spark: SparkSession,
                                                tmp_path: Path) -> None:
    """State files of Spark's HDFS provider under our checkpoint are refused, not misread."""
    write_batch(tmp_path / "in", 0)
    run_counts(pyrocks_spark, tmp_path / "in", tmp_path / "ours")
    on_spark_hdfs(pyrocks_spark, lambda: run_counts(pyrocks_spark, tmp_path / "in",
                                                    tmp_path / "theirs"))
    shutil.rmtree(tmp_path / "ours" / "state" / "0")
    shutil.copytree(tmp_path / "theirs" / "state" / "0", tmp_path / "ours" / "state" / "0")
    write_batch(tmp_path / "in", 1)
    with pytest.raises(Exception, match=r"written by another state store provider.*\.delta"):
        run_counts(pyrocks_spark, tmp_path / "in", tmp_path / "ours")


def test_missing_version_is_named(pyrocks_spark: SparkSession, tmp_path: Path) -> None:
    for i in range(3):
        write_batch(tmp_path / "in", i)
    run_counts(pyrocks_spark, tmp_path / "in", tmp_path / "ckpt")
    for manifest in (tmp_path / "ckpt" / "state" / "0").glob(f"*/query-*/manifests/{3:020d}*"):
        manifest.unlink()
    write_batch(tmp_path / "in", 3)
    with pytest.raises(Exception, match=r"version 3 of .* does not exist .*retained: 1\.\.2"):
        run_counts(pyrocks_spark, tmp_path / "in", tmp_path / "ckpt")


def test_worker_that_cannot_start_is_reported(pyrocks_spark: SparkSession,
                                              tmp_path: Path) -> None:
    write_batch(tmp_path / "in", 0)
    pyrocks_spark.conf.set(PREFIX + "pythonExec", str(tmp_path / "no-such-python"))
    try:
        with pytest.raises(Exception, match=r"cannot start the pyrocks worker .*no-such-python"):
            run_counts(pyrocks_spark, tmp_path / "in", tmp_path / "ckpt")
    finally:
        pyrocks_spark.conf.set(PREFIX + "pythonExec", spark_conf()[PREFIX + "pythonExec"])


def failed_start(spark: SparkSession, tmp_path: Path, stderr: str, code: int) -> str:
    """The error of a query whose workers print `stderr` and exit with `code` at start."""
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\necho '{stderr}' >&2\nexit {code}\n")
    fake.chmod(0o755)
    write_batch(tmp_path / "in", 0)
    spark.conf.set(PREFIX + "pythonExec", str(fake))
    try:
        with pytest.raises(Exception) as failed:
            run_counts(spark, tmp_path / "in", tmp_path / "ckpt")
        return str(failed.value)
    finally:
        spark.conf.set(PREFIX + "pythonExec", spark_conf()[PREFIX + "pythonExec"])


def test_worker_without_the_package_is_reported(pyrocks_spark: SparkSession,
                                                tmp_path: Path) -> None:
    message = failed_start(pyrocks_spark, tmp_path, "No module named state_store", 3)
    assert re.search(r"did not start \(exit code 3\).*No module named"
                     r".*importable by that Python.*pythonExec", message), message


def test_worker_failing_to_start_for_another_reason_is_not_sent_to_the_settings(
        pyrocks_spark: SparkSession, tmp_path: Path) -> None:
    """A worker that imported fine and failed after (here: its socket) says only what
    failed: pointing at pythonExec would send the user the wrong way."""
    message = failed_start(pyrocks_spark, tmp_path, "OSError: [Errno 98] Address already in use", 1)
    assert re.search(r"did not start \(exit code 1\).*Address already", message)
    assert "importable" not in message


def test_missing_shim_sources_are_reported(tmp_path: Path) -> None:
    with pytest.raises(bridge.ShimBuildError, match="no Scala sources under"):
        bridge.jar_path(tmp_path)


def test_unbuildable_shim_reports_compiler_output(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYROCKS_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "Broken.scala").write_text("object Broken { def f: Int = \"not an int\" }\n")
    expected = r"(?s)compiling the shim failed.*type mismatch"
    with pytest.raises(bridge.ShimBuildError, match=expected):
        bridge.jar_path(tmp_path)
    assert not list((tmp_path / "cache").glob("*.jar"))  # no partial jar is ever cached

"""Shared fixtures."""

from __future__ import annotations

import os
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pyspark
import pytest
from pyspark.sql import SparkSession

import local_file_system
from benchmarks.emulators import Azurite, FakeGcs, LoopbackServer
from class_archive import driver_options
from harness import HDFS, PROVIDER_KEY, Outputs, SavedRun, saved_run, saved_run_once
from jvm_options import TEST_JVM_OPTIONS
from pyrocks_support import (
    MAINTENANCE_INTERVAL,
    MAINTENANCE_INTERVAL_KEY,
    OBJECT_STORES,
    S3Endpoint,
    pyrocks_conf,
    pyrocks_session,
)
from streaming_queries import QUERIES
from work_units import deal, keep_dealt_order, recorded_durations, xdist_processes

# Spark's Python workers (UDFs, applyInPandasWithState) import test helpers by name too.
_TESTS = str(Path(__file__).resolve().parent)
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (_TESTS, os.environ.get("PYTHONPATH")) if p
)
# Spark writes its checkpoint logs (offsets, commits, sources) and its own providers' state
# files through a CheckpointFileManager. On local files the default one (FileContext) forks
# `readlink` for both sides of every rename and `chmod` for every directory, as Hadoop's
# native library is absent from pip's pyspark: 14,786 processes in one run of
# test_local_mode_matches_hdfs, and the HDFS reference's 4 batches took 42 s against 29 s
# with the FileSystem-based manager, which renames in-process. The files Spark writes are
# the same; our provider writes its own without either.
# Two more settings change how often Spark repeats work, never what a query computes. Measured
# on one run of the catalogue on our provider (10 queries, 8 batches, a restart):
# - An idle query lists its input directory again every `pollingDelay` (10 ms by default).
#   Each listing builds a Hadoop JobConf, which searches every jar of the classpath. With
#   ten queries in a session, nine wait while one works, and their listings took a quarter
#   of the driver JVM's CPU. At 50 ms: 60 s of JVM CPU became 47 s. At 250 ms, against 50
#   ms in turns in one warm JVM: 82 s of the machine's CPU for the run against 87 (three
#   runs each), in the same wall time; at 1 s the run took 10 s longer. A query sees a new
#   batch at most 250 ms later: the others have processed theirs meanwhile.
# - Spark compiles generated code through a cache of 100 classes per JVM (its default).
#   The catalogue needs more than that, so every batch compiled its classes again: 898
#   compiles (16.5 s). With 1,000 entries: 264 compiles (5.0 s). The cache also lasts
#   across the sessions of one process, so later tests reuse what earlier ones compiled.
_TEST_SQL = {"spark.sql.streaming.pollingDelay": "250ms",
             "spark.sql.codegen.cache.maxEntries": "1000"}


def _checkpoint_manager_class() -> str:
    """Where this release keeps the FileSystem-based manager (4.1 moved it to a package of
    its own): read off the spark-sql jar, so no release is guessed."""
    name = "FileSystemBasedCheckpointFileManager.class"
    jar = next((Path(pyspark.__file__).parent / "jars").glob("spark-sql_*.jar"))
    with zipfile.ZipFile(jar) as classes:
        entry = next(n for n in classes.namelist()
                     if n.endswith("/" + name) and "/streaming/" in n)
    return entry.removesuffix(".class").replace("/", ".")


_CHECKPOINT_MANAGER = _checkpoint_manager_class()
if "PYSPARK_SUBMIT_ARGS" not in os.environ:  # pytest-xdist's processes inherit it
    # Drivers start from a class archive (class_archive.py); executors, whose classpath
    # differs, start without one.
    _LOCAL_FILES = local_file_system.submit_args()
    os.environ["PYSPARK_SUBMIT_ARGS"] = " ".join(
        [f'--conf "spark.driver.extraJavaOptions={driver_options(TEST_JVM_OPTIONS, _LOCAL_FILES)}"',
         f'--conf "spark.executor.extraJavaOptions={TEST_JVM_OPTIONS}"',
         f"--conf spark.sql.streaming.checkpointFileManagerClass={_CHECKPOINT_MANAGER}",
         *_LOCAL_FILES]
        + [f"--conf {key}={value}" for key, value in _TEST_SQL.items()]
    ) + " pyspark-shell"


def pytest_configure(config: pytest.Config) -> None:
    keep_dealt_order(config)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the units off the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    deal(items, recorded_durations(), shared_runs=frozenset({"hdfs_run", "ours_run"}),
         processes=xdist_processes())


@pytest.fixture(scope="session", autouse=True)
def bare_driver_jvm() -> None:
    """Starts this process's driver JVM before any test builds a session. PySpark starts it
    with the first session's settings as JVM system properties, which every later SparkConf
    in that JVM reads as defaults: one test's settings leaked into the sessions of all the
    tests after it in its process (finishWhenQueryEnds=false left later sessions' stores
    unfinished at stop). Started bare, a session has its builder's settings and those of
    PYSPARK_SUBMIT_ARGS above only, whatever ran before it."""
    from pyspark import SparkContext

    SparkContext._ensure_initialized()


@pytest.fixture(scope="module")
def pyrocks_spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """One local session per module on our provider; tests may set runtime SQL confs."""
    spark = pyrocks_session("pyrocks-tests", Path(tmp_path_factory.mktemp("pool")),
                            {MAINTENANCE_INTERVAL_KEY: MAINTENANCE_INTERVAL})
    yield spark
    spark.stop()


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Endpoint]:
    endpoint = S3Endpoint()
    yield endpoint
    endpoint.stop()


@pytest.fixture(scope="session")
def azurite() -> Iterator[Azurite]:
    server = Azurite()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def fake_gcs() -> Iterator[FakeGcs]:
    server = FakeGcs()
    yield server
    server.stop()


@pytest.fixture(params=sorted(OBJECT_STORES))
def object_store(request: pytest.FixtureRequest) -> LoopbackServer:
    """Each object store on loopback in turn (S3, Azure, GCS): the same interface
    (`url`, `options`, `options_at`, `hadoop_url`, `hadoop`, `filesystem`)."""
    return request.getfixturevalue(OBJECT_STORES[request.param])


def catalogue_run_once(factory: pytest.TempPathFactory, name: str,
                       conf: Callable[[Path], dict[str, str]]) -> SavedRun:
    """Every catalogue query, 8 batches under `conf(work)`, restarted after batch 3 (saved
    there): computed once per session, under pytest-xdist once for all workers (in the
    session's shared temporary directory)."""
    base = factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    return saved_run_once(shared / name, lambda work: saved_run(QUERIES, work, conf(work)))


@pytest.fixture(scope="session")
def hdfs_run(tmp_path_factory: pytest.TempPathFactory) -> SavedRun:
    """The catalogue on Spark's HDFS provider: the reference that correctness, savepoint and
    migration tests compare with, and the source run a migration from HDFS resumes."""
    return catalogue_run_once(tmp_path_factory, "hdfs-reference",
                              lambda work: {PROVIDER_KEY: HDFS})


@pytest.fixture(scope="session")
def hdfs_reference(hdfs_run: SavedRun) -> Outputs:
    return hdfs_run.outputs


@pytest.fixture(scope="session")
def ours_run(tmp_path_factory: pytest.TempPathFactory) -> SavedRun:
    """The same run on our provider (its defaults, local[2]): the local-mode correctness
    test judges it whole, and the tests whose queries start as it does resume it at its
    restart (savepoints, restores and migrations off ours) instead of running its first
    batches again."""
    return catalogue_run_once(tmp_path_factory, "ours-run",
                              lambda work: pyrocks_conf(work / "pool"))

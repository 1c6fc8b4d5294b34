"""Two streaming queries at once in one session, each started with its own pyrocks options
(spark.conf.set before each start): each gets the workers its options call for, neither
tears down the other's, and both answer like Spark's HDFS provider with no task failing."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from harness import HDFS, PROVIDER_KEY, Outputs, assert_same_outputs, make_spark, start_query
from pyrocks_support import failed_tasks, pyrocks_conf, worker_pids
from state_store.options import PREFIX
from state_store.spark import PROVIDER_CLASS
from streaming_queries import BY_NAME, write_batch

SPECS = (BY_NAME["agg_update"], BY_NAME["join_left_outer"])
# memoryBoundMB is a worker option (a different value needs other workers); readCacheMB is not.
OPTIONS = ({"memoryBoundMB": "64", "readCacheMB": "8"},
           {"memoryBoundMB": "128", "readCacheMB": "0"})
BATCHES = 6


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """local[2]: a failed task is not retried, so it fails its query."""
    pool = tmp_path_factory.mktemp("pool")
    session = make_spark(pyrocks_conf(pool))
    session.conf.set("pyrocks.test.pool", str(pool))
    yield session
    session.stop()


def memory_bounds(pool: Path) -> set[int]:
    """The --memory-bound-mb of each live worker: one value per pool."""
    bounds = set()
    for pid in worker_pids(pool):
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        bounds.add(int(argv[argv.index("--memory-bound-mb") + 1]))
    return bounds


def run_together(spark: SparkSession, provider: str, work: Path,
                 options: Sequence[dict[str, str]]) -> tuple[Outputs, set[int]]:
    """Starts every query (each after setting its options), then feeds all of them each
    batch at once: their micro-batches run concurrently on their own stream threads.
    Returns the outputs and the memory bounds of the live workers while both ran."""
    spark.conf.set(PROVIDER_KEY, provider)
    outputs: Outputs = {spec.name: {} for spec in SPECS}
    queries: list[StreamingQuery] = []
    try:
        for spec, opts in zip(SPECS, options, strict=True):
            for key, value in opts.items():
                spark.conf.set(PREFIX + key, value)
            queries.append(start_query(spark, spec, work, outputs[spec.name]))
        for batch in range(BATCHES):
            for spec in SPECS:
                write_batch(work / spec.name / "input", batch)
            for query in queries:
                query.processAllAvailable()
        bounds = memory_bounds(Path(spark.conf.get("pyrocks.test.pool")))
        for query in queries:
            jobs, failed = failed_tasks(spark, str(query.runId))
            assert jobs >= BATCHES, f"{query.name or query.id}: only {jobs} jobs were seen"
            assert failed == 0, f"{failed} tasks of query {query.id} failed"
    finally:
        for query in queries:
            query.stop()
        for key in {k for opts in options for k in opts}:
            spark.conf.unset(PREFIX + key)
    return outputs, bounds


def test_queries_with_different_options_run_side_by_side(spark: SparkSession,
                                                         tmp_path: Path) -> None:
    reference, _ = run_together(spark, HDFS, tmp_path / "hdfs", OPTIONS)
    ours, bounds = run_together(spark, PROVIDER_CLASS, tmp_path / "ours", OPTIONS)
    assert_same_outputs(reference, ours)
    assert all(len(batches) >= BATCHES for batches in ours.values()), ours.keys()
    # each pool splits its query's memoryBoundMB over the two workers of local[2]
    assert bounds == {32, 64}, f"live workers' memory bounds: {bounds}"

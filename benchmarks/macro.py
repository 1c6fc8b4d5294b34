"""Macro benchmark: the same streaming queries on the same input under four state stores.

    python -m benchmarks.macro            # default sizes (see --help)
    python -m benchmarks.macro --quick    # a small smoke run, about a minute

Two workloads (by default), each run `--rounds` times per provider (3), each run in a
SparkSession, JVM and worker pool of its own (`benchmarks/child.py`: local[2], 8 shuffle
partitions, noop sink), reading the same pre-generated Parquet files, one file per
micro-batch (`maxFilesPerTrigger=1`, `availableNow` trigger):

- aggregation: `groupBy(key)` count and sum, update mode, over a fixed key space;
- strings: the same aggregation keyed by names ("user-" and the key), whose keys in the
  state are of many lengths, as string keys are;
- dedup: `dropDuplicates(["id"])`, append mode, every id new (state grows every batch);
- join: a stream-stream inner join with watermarks (rows/4 per batch, one partner per key);
- sessions: session windows per user, 10 s gap (rows/4 per batch, keys/10 users).

Per batch the query's progress gives the batch time (`durationMs.triggerExecution`) and,
from `stateOperators[0]`, `commitTimeMs`, `numRowsTotal` and `memoryUsedBytes`. The first
`--warmup` batches of every run are discarded; a run's figure is the median of the rest, a
provider's the median of its rounds' figures, compared as the ratio ours / each Spark
provider. A round runs every provider once, each round starting with the next
(`in_turn`), and its own ratios (ours / each provider, in the same round) show how far
the ratio moves between rounds: a machine's pace drifts by more than some distances
between providers, which one round each cannot tell apart. Results: a table on stdout and
`benchmarks/results/macro.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks import report
from benchmarks.child import answered, from_json, run_module_child
from state_store.spark import PROVIDER_CLASS, configure

PROVIDER_KEY = "spark.sql.streaming.stateStore.providerClass"
CHANGELOG_KEY = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
SPARK_ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
SPARK_HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
OURS = "pyrocks"
RESULTS_JSON = Path(__file__).resolve().parent / "results" / "macro.json"


@dataclass(frozen=True)
class Provider:
    name: str
    class_name: str
    changelog: bool = False


PROVIDERS: tuple[Provider, ...] = (
    Provider(OURS, PROVIDER_CLASS),
    Provider("spark-rocksdb", SPARK_ROCKSDB),
    Provider("spark-rocksdb-changelog", SPARK_ROCKSDB, changelog=True),
    Provider("spark-hdfs", SPARK_HDFS),
)


def in_turn(providers: Sequence[Provider], index: int) -> list[Provider]:
    """The providers, starting with the `index`-th (round `index` of `tws` and `query_end`):
    each takes every place in turn, so none always runs first on a machine that has just
    been idle (a cold page cache, CPUs at rest)."""
    first = index % len(providers)
    return [*providers[first:], *providers[:first]]


@dataclass(frozen=True)
class Config:
    rows: int
    keys: int
    batches: int
    warmup: int
    seed: int
    timeout_s: float
    driver_memory: str
    workloads: tuple[str, ...]
    providers: tuple[str, ...]
    rounds: int = 1  # runs of each (workload, provider), in turn (`in_turn`)
    # Options of ours for every run (--store-option), as `configure` takes them.
    store_options: dict[str, str] = field(default_factory=dict)


@dataclass
class BatchMetrics:
    batch_id: int
    input_rows: int
    duration_ms: int
    commit_ms: int
    state_rows: int
    memory_bytes: int
    custom_metrics: dict[str, int] = field(default_factory=dict)


@dataclass
class RunResult:
    workload: str
    provider: str
    provider_class: str
    changelog: bool
    wall_s: float = 0.0
    error: str | None = None
    batches: list[BatchMetrics] = field(default_factory=list)
    measured_batches: int = 0
    median_batch_ms: float | None = None
    median_commit_ms: float | None = None
    max_batch_ms: int | None = None
    max_commit_ms: int | None = None
    peak_memory_bytes: int | None = None
    final_state_rows: int | None = None
    round: int = 0


@dataclass
class Ratio:
    workload: str
    baseline: str
    batch_ratio: float | None  # of the medians over rounds
    commit_ratio: float | None
    batch_ratio_by_round: list[float | None] = field(default_factory=list)


@dataclass
class ProviderSummary:
    """A provider's figures on a workload: medians over its rounds (a failed round counts
    in `errors`, not in the medians)."""

    workload: str
    provider: str
    median_batch_ms: float | None
    median_commit_ms: float | None
    batch_ms_by_round: list[float | None]
    errors: list[str]


# (spark, input dir, checkpoint) -> the started StreamingQuery
StartQuery = Callable[[Any, Path, str], Any]


@dataclass
class Workload:
    name: str
    input_dir: Path
    expected_state_rows: int | None  # None: every provider must end with the same count
    start: StartQuery


# ---------------------------------------------------------------------------------- input


def write_batches(out_dir: Path, tables: Sequence[pa.Table]) -> None:
    """One Parquet file per micro-batch, with strictly increasing modification times."""
    out_dir.mkdir(parents=True, exist_ok=True)
    base = time.time() - len(tables) - 10
    for index, table in enumerate(tables):
        path = out_dir / f"batch-{index:05d}.parquet"
        pq.write_table(table, path)
        os.utime(path, (base + index, base + index))  # the file source orders by mtime


def insert_then_update(keys: int, insert_batches: int, update_batches: int,
                       updates_per_batch: int, seed: int) -> list[pa.Table]:
    """Batches (key, value=1) that insert every key in [0, keys) over `insert_batches`,
    then update `updates_per_batch` random keys in each of `update_batches` more."""
    rng = np.random.default_rng(seed)
    per_batch = -(-keys // insert_batches)
    tables = [pa.table({"key": np.arange(start, min(start + per_batch, keys), dtype=np.int64),
                        "value": np.ones(min(per_batch, keys - start), dtype=np.int64)})
              for start in range(0, keys, per_batch)]
    for _ in range(update_batches):
        picked = rng.integers(0, keys, size=updates_per_batch, dtype=np.int64)
        tables.append(pa.table({"key": picked, "value": np.ones(len(picked), dtype=np.int64)}))
    return tables


def aggregation_input(out_dir: Path, cfg: Config) -> int:
    """Random keys in [0, keys) per batch; returns the number of distinct keys written."""
    seen = np.zeros(cfg.keys, dtype=bool)
    tables = []
    for batch in range(cfg.batches):
        rng = np.random.default_rng([cfg.seed, batch])
        keys = rng.integers(0, cfg.keys, size=cfg.rows, dtype=np.int64)
        values = rng.integers(0, 1000, size=cfg.rows, dtype=np.int64)
        seen[keys] = True
        tables.append(pa.table({"key": keys, "value": values}))
    write_batches(out_dir, tables)
    return int(seen.sum())


def dedup_input(out_dir: Path, cfg: Config) -> int:
    """Ids batch*rows .. (batch+1)*rows-1, shuffled: every id is new; returns the id count."""
    tables = []
    for batch in range(cfg.batches):
        rng = np.random.default_rng([cfg.seed, 1_000_000 + batch])
        ids = rng.permutation(np.arange(batch * cfg.rows, (batch + 1) * cfg.rows, dtype=np.int64))
        payload = rng.integers(0, 1 << 30, size=cfg.rows, dtype=np.int64)
        tables.append(pa.table({"id": ids, "payload": payload}))
    write_batches(out_dir, tables)
    return cfg.rows * cfg.batches


# -------------------------------------------------------------------------------- queries


def join_input(out_dir: Path, cfg: Config) -> None:
    """Pairs of rows (left, right) per key, event time advancing 60 s per batch."""
    rows = max(cfg.rows // 4, 2)
    tables = []
    for batch in range(cfg.batches):
        rng = np.random.default_rng([cfg.seed, 2_000_000 + batch])
        ids = np.arange(batch * rows, (batch + 1) * rows, dtype=np.int64)
        seconds = batch * 60 + rng.integers(0, 60, size=rows, dtype=np.int64)
        tables.append(pa.table({"key": ids // 2, "side": ids % 2, "ts": seconds}))
    write_batches(out_dir, tables)


def session_input(out_dir: Path, cfg: Config) -> None:
    """Events of cfg.keys // 10 users with gaps, event time advancing 60 s per batch."""
    rows, users = max(cfg.rows // 4, 1), max(cfg.keys // 10, 1)
    tables = []
    for batch in range(cfg.batches):
        rng = np.random.default_rng([cfg.seed, 3_000_000 + batch])
        tables.append(pa.table({
            "user": rng.integers(0, users, size=rows, dtype=np.int64),
            "ts": batch * 60 + rng.integers(0, 60, size=rows, dtype=np.int64)}))
    write_batches(out_dir, tables)


def file_stream(spark: Any, input_dir: Path, schema: str) -> Any:
    return (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1)
            .parquet(str(input_dir)))


def start_aggregation(spark: Any, input_dir: Path, checkpoint: str) -> Any:
    return _start_counts(spark, input_dir, checkpoint, lambda F: F.col("key"))


def start_strings(spark: Any, input_dir: Path, checkpoint: str) -> Any:
    """`start_aggregation` keyed by names ("user-" and the key: 6 to 11 characters), as
    queries keyed by strings are: their state's keys are of many lengths."""
    return _start_counts(spark, input_dir, checkpoint, lambda F: F.concat(
        F.lit("user-"), F.col("key").cast("string")).alias("name"))


def _start_counts(spark: Any, input_dir: Path, checkpoint: str,
                  group_key: Callable[[Any], Any]) -> Any:
    """Count and sum of `value` per `group_key(functions)`, update mode."""
    from pyspark.sql import functions as F

    counts = (file_stream(spark, input_dir, "key LONG, value LONG").groupBy(group_key(F))
              .agg(F.count("*").alias("n"), F.sum("value").alias("total")))
    return (counts.writeStream.outputMode("update").format("noop")
            .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())


def start_dedup(spark: Any, input_dir: Path, checkpoint: str) -> Any:
    unique = file_stream(spark, input_dir, "id LONG, payload LONG").dropDuplicates(["id"])
    return (unique.writeStream.outputMode("append").format("noop")
            .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())


def start_join(spark: Any, input_dir: Path, checkpoint: str) -> Any:
    """Stream-stream inner join with watermarks; both sides from one source (one file each
    batch), so every provider sees the same pairs in the same batch."""
    from pyspark.sql import functions as F

    events = (file_stream(spark, input_dir, "key LONG, side LONG, ts LONG")
              .withColumn("t", F.timestamp_seconds("ts")))
    left = events.where("side = 0").select(F.col("key").alias("lk"), F.col("t").alias("lt"))
    right = events.where("side = 1").select(F.col("key").alias("rk"), F.col("t").alias("rt"))
    joined = left.withWatermark("lt", "30 seconds").join(
        right.withWatermark("rt", "30 seconds"),
        F.expr("lk = rk AND rt BETWEEN lt - INTERVAL 60 SECONDS AND lt + INTERVAL 60 SECONDS"))
    return (joined.writeStream.outputMode("append").format("noop")
            .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())


def start_sessions(spark: Any, input_dir: Path, checkpoint: str) -> Any:
    """Session windows (prefix-scan heavy), 10 s gap, append mode."""
    from pyspark.sql import functions as F

    events = (file_stream(spark, input_dir, "user LONG, ts LONG")
              .withColumn("t", F.timestamp_seconds("ts")).withWatermark("t", "30 seconds"))
    sessions = events.groupBy(F.session_window("t", "10 seconds"), "user").count()
    return (sessions.writeStream.outputMode("append").format("noop")
            .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())


# Per workload, in run order: what writes its input (returning the final state rows every
# provider must reach, or None: they must agree) and what starts its query.
WORKLOADS: dict[str, tuple[Callable[[Path, Config], int | None], StartQuery]] = {
    "aggregation": (aggregation_input, start_aggregation),
    "strings": (aggregation_input, start_strings),
    "dedup": (dedup_input, start_dedup),
    "join": (join_input, start_join),
    "sessions": (session_input, start_sessions),
}


def prepare_workloads(work_dir: Path, cfg: Config) -> list[Workload]:
    made = []
    for name, (write_input, start) in WORKLOADS.items():
        if name in cfg.workloads:
            path = work_dir / "input" / name
            made.append(Workload(name, path, write_input(path, cfg), start))
    return made


# ------------------------------------------------------------------------------------ run


def build_session(cfg: Config, work_dir: Path) -> Any:
    from pyspark.sql import SparkSession

    pool_dir = work_dir / "pyrocks-local"
    pool_dir.mkdir(parents=True, exist_ok=True)
    builder = (SparkSession.builder.master("local[2]").appName("pyrocks-macro-benchmark")
               .config("spark.sql.shuffle.partitions", "8")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.memory", cfg.driver_memory))
    spark = configure(builder, localDir=str(pool_dir), **cfg.store_options).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def select_provider(spark: Any, provider: Provider) -> None:
    spark.conf.set(PROVIDER_KEY, provider.class_name)
    spark.conf.set(CHANGELOG_KEY, "true" if provider.changelog else "false")


def batch_metrics(progress: Sequence[Any]) -> list[BatchMetrics]:
    """One entry per batch that read input, in batch order (idle progress is skipped)."""
    by_id: dict[int, BatchMetrics] = {}
    for p in progress:
        if p.numInputRows <= 0 or not p.stateOperators:
            continue
        op = p.stateOperators[0]
        by_id[p.batchId] = BatchMetrics(
            batch_id=p.batchId, input_rows=p.numInputRows,
            duration_ms=int(p.durationMs.get("triggerExecution", 0)),
            commit_ms=int(op.commitTimeMs), state_rows=int(op.numRowsTotal),
            memory_bytes=int(op.memoryUsedBytes),
            custom_metrics={k: int(v) for k, v in (op.customMetrics or {}).items()})
    return [by_id[k] for k in sorted(by_id)]


def summarize(result: RunResult, warmup: int) -> None:
    measured = result.batches[warmup:]
    result.measured_batches = len(measured)
    if measured:
        result.median_batch_ms = statistics.median(b.duration_ms for b in measured)
        result.median_commit_ms = statistics.median(b.commit_ms for b in measured)
        result.max_batch_ms = max(b.duration_ms for b in measured)
        result.max_commit_ms = max(b.commit_ms for b in measured)
        result.peak_memory_bytes = max(b.memory_bytes for b in measured)
    if result.batches:
        result.final_state_rows = result.batches[-1].state_rows


def run_isolated(workload: Workload, provider: Provider, cfg: Config, work_dir: Path,
                 index: int = 0, module: str = "benchmarks.macro"
                 ) -> tuple[RunResult, str | None]:
    """`run_one` in a process and JVM of its own (`benchmarks/child.py`), by `module`'s
    `--child`, which knows the workload's query (`run_child`), as round `index`; with the
    Spark version it ran on."""
    spec = {"config": asdict(cfg), "workload": workload.name,
            "input": str(workload.input_dir), "provider": provider.name,
            "work": str(work_dir / f"{workload.name}-{provider.name}")}
    answer, error = run_module_child(module, spec, cfg.timeout_s + 300)
    if answer is None:
        result = RunResult(workload.name, provider.name, provider.class_name,
                           provider.changelog, error=error, round=index)
        print(f"[{workload.name}] {provider.name}: ERROR {first_line(error)}", flush=True)
        return result, None
    batches = [BatchMetrics(**b) for b in answer["result"].pop("batches")]
    answer["result"]["round"] = index
    return RunResult(**answer["result"], batches=batches), answer["spark"]


def run_child(spec: dict[str, Any], start: StartQuery | None = None) -> dict[str, Any]:
    """The child's side of `run_isolated`: the query `start` starts, by default the one
    `WORKLOADS` names."""
    cfg = from_json(Config, spec["config"])
    work_dir = Path(spec["work"])
    work_dir.mkdir(parents=True)
    start = start or WORKLOADS[spec["workload"]][1]
    workload = Workload(spec["workload"], Path(spec["input"]), None, start)
    provider = next(p for p in PROVIDERS if p.name == spec["provider"])
    spark = build_session(cfg, work_dir)
    try:
        result = run_one(spark, workload, provider, cfg, work_dir)
        return {"result": asdict(result), "spark": spark.version}
    finally:
        spark.stop()


def run_one(spark: Any, workload: Workload, provider: Provider, cfg: Config,
            work_dir: Path) -> RunResult:
    result = RunResult(workload.name, provider.name, provider.class_name, provider.changelog)
    checkpoint = work_dir / "checkpoints" / f"{workload.name}-{provider.name}"
    select_provider(spark, provider)
    print(f"[{workload.name}] {provider.name}: running {cfg.batches} batches ...", flush=True)
    started = time.monotonic()
    query = None
    try:
        query = workload.start(spark, workload.input_dir, str(checkpoint))
        if not query.awaitTermination(cfg.timeout_s):
            result.error = f"timed out after {cfg.timeout_s:.0f} s"
    except Exception as exc:  # a failing provider is a result, not a crash of the benchmark
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        if query is not None:
            result.batches = batch_metrics(query.recentProgress)
            if query.isActive:
                query.stop()
        result.wall_s = round(time.monotonic() - started, 1)
        shutil.rmtree(checkpoint, ignore_errors=True)
    if result.error is None and len(result.batches) != cfg.batches:
        result.error = f"expected {cfg.batches} batches with input, saw {len(result.batches)}"
    summarize(result, cfg.warmup)
    print(f"[{workload.name}] {provider.name}: done in {result.wall_s} s"
          + (f" -- ERROR {first_line(result.error)}" if result.error else ""), flush=True)
    return result


def ratio(ours: float | None, theirs: float | None) -> float | None:
    if ours is None or theirs is None or theirs <= 0:
        return None
    return round(ours / theirs, 3)


def median_of(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def summaries(results: Sequence[RunResult]) -> list[ProviderSummary]:
    """Per (workload, provider), in the order they first ran."""
    found = []
    for workload, provider in dict.fromkeys((r.workload, r.provider) for r in results):
        runs = sorted((r for r in results if (r.workload, r.provider) == (workload, provider)),
                      key=lambda r: r.round)
        ok = [r for r in runs if r.error is None]
        found.append(ProviderSummary(
            workload, provider, median_of(r.median_batch_ms for r in ok),
            median_of(r.median_commit_ms for r in ok),
            [None if r.error else r.median_batch_ms for r in runs],
            [r.error for r in runs if r.error]))
    return found


def ratios(results: Sequence[RunResult]) -> list[Ratio]:
    """Ours over each other provider: of the medians over rounds, and round by round."""
    found = []
    table = summaries(results)
    for workload in dict.fromkeys(s.workload for s in table):
        rows = {s.provider: s for s in table if s.workload == workload}
        ours = rows.get(OURS)
        if ours is None:
            continue
        for name, other in rows.items():
            if name != OURS:
                found.append(Ratio(
                    workload, name, ratio(ours.median_batch_ms, other.median_batch_ms),
                    ratio(ours.median_commit_ms, other.median_commit_ms),
                    [ratio(a, b) for a, b in zip(ours.batch_ms_by_round,
                                                 other.batch_ms_by_round, strict=True)]))
    return found


# --------------------------------------------------------------------------------- report


def first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0][:200] if text and text.strip() else ""


def fmt(value: float | None, digits: int = 0) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def render_table(results: Sequence[RunResult], found: Sequence[Ratio], cfg: Config,
                 expected: dict[str, int]) -> str:
    lines = []
    header = (f"{'provider':<24} {'batch p50':>9} {'rounds p50':>20} {'batch max':>9} "
              f"{'commit p50':>10} {'state rows':>10} {'peak MiB':>8} {'wall s':>6} "
              f"{'ours/x batch (rounds)':>22} {'ours/x commit':>13}")
    for workload in dict.fromkeys(r.workload for r in results):
        lines.append("")
        keyed = WORKLOADS[workload][0] is aggregation_input  # a fixed key space
        rows = cfg.rows if keyed or workload == "dedup" else max(cfg.rows // 4, 1)
        lines.append(f"== {workload}: {rows:,} rows/batch"
                     + (f", {cfg.keys:,} keys" if keyed else "")
                     + f", {cfg.batches} batches, first {cfg.warmup} discarded, "
                     + f"{cfg.rounds} round(s); " + _expected_text(expected.get(workload)))
        lines.append("times in ms over the measured batches, medians over the rounds; "
                     "peak MiB = max memoryUsedBytes")
        lines.append(header)
        lines.append("-" * len(header))
        by_baseline = {r.baseline: r for r in found if r.workload == workload}
        for summary in (s for s in summaries(results) if s.workload == workload):
            runs = [r for r in results if (r.workload, r.provider) == (workload, summary.provider)]
            lines.append(_summary_line(summary, runs, by_baseline.get(summary.provider)))
            lines.extend(f"    ERROR: {first_line(error)}" for error in summary.errors)
    return "\n".join(lines)


def _summary_line(summary: ProviderSummary, runs: Sequence[RunResult],
                  against: Ratio | None) -> str:
    memory = [r.peak_memory_bytes for r in runs if r.peak_memory_bytes is not None]
    peaks = [r.max_batch_ms for r in runs if r.max_batch_ms is not None]
    rounds = "/".join(fmt(ms) for ms in summary.batch_ms_by_round)
    batch_ratio = commit_ratio = "-"
    if against is not None:
        known = [r for r in against.batch_ratio_by_round if r is not None]
        spread = f" ({min(known):.2f}-{max(known):.2f})" if len(known) > 1 else ""
        batch_ratio = fmt(against.batch_ratio, 2) + spread
        commit_ratio = fmt(against.commit_ratio, 2)
    return (f"{summary.provider:<24} {fmt(summary.median_batch_ms):>9} {rounds:>20} "
            f"{fmt(max(peaks) if peaks else None):>9} {fmt(summary.median_commit_ms):>10} "
            f"{fmt(runs[-1].final_state_rows):>10} "
            f"{fmt(max(memory) / 2**20 if memory else None, 1):>8} "
            f"{fmt(sum(r.wall_s for r in runs), 1):>6} {batch_ratio:>22} {commit_ratio:>13}")


def _expected_text(rows: int | None) -> str:
    if rows is None:
        return "final state rows must agree across providers"
    return f"expected final state rows {rows:,}"


def warnings_for(results: Sequence[RunResult], expected: dict[str, int]) -> list[str]:
    notes = []
    for r in results:
        want = expected.get(r.workload)
        if want is None:  # no closed form: all providers must agree with the first
            want = next(o.final_state_rows for o in results if o.workload == r.workload)
        if r.error is None and r.final_state_rows != want:
            notes.append(f"{r.workload}/{r.provider}: final state rows {r.final_state_rows}, "
                         f"expected {want}")
    return notes


def write_json(path: Path, cfg: Config, results: Sequence[RunResult], found: Sequence[Ratio],
               expected: dict[str, int], spark_version: str) -> None:
    import pyspark

    payload = {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "environment": {"spark": spark_version, "pyspark": pyspark.__version__,
                        "python": platform.python_version(), "cpus": os.cpu_count(),
                        "master": "local[2]", "shuffle_partitions": 8},
        "config": asdict(cfg),
        "expected_final_state_rows": expected,
        "results": [asdict(r) for r in results],
        "summaries": [asdict(s) for s in summaries(results)],
        "ratios_ours_over": [asdict(r) for r in found],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2) + "\n")


# ----------------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> Config:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.macro", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000, help="rows per batch (200000)")
    parser.add_argument("--keys", type=int, default=200_000,
                        help="aggregation key space (200000)")
    parser.add_argument("--batches", type=int, default=20, help="batches per run (20)")
    parser.add_argument("--warmup", type=int, default=2, help="batches discarded per run (2)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="runs of each workload and provider, in turn (3)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 20000 rows, 20000 keys, 5 batches, 1 round")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per run (1800)")
    parser.add_argument("--driver-memory", default="8g", help="spark.driver.memory (8g)")
    parser.add_argument("--workloads", default="aggregation,dedup",
                        help="comma-separated subset of: aggregation,dedup,join,sessions")
    parser.add_argument("--providers", default=",".join(p.name for p in PROVIDERS),
                        help="comma-separated subset of: "
                        + ",".join(p.name for p in PROVIDERS))
    add_store_option(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.keys, args.batches, args.rounds = 20_000, 20_000, 5, 1
    cfg = Config(rows=args.rows, keys=args.keys, batches=args.batches, warmup=args.warmup,
                 seed=args.seed, timeout_s=args.timeout, driver_memory=args.driver_memory,
                 workloads=split(args.workloads), providers=split(args.providers),
                 rounds=args.rounds, store_options=store_options(parser, args.store_option))
    check(parser, cfg)
    return cfg


def add_store_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store-option", action="append", default=[], metavar="NAME=VALUE",
                        help="an option of ours (state_store.options, e.g. "
                             "snapshotWhenIdleSeconds=0.25) for every run; repeatable")


def store_options(parser: argparse.ArgumentParser, given: Sequence[str]) -> dict[str, str]:
    """--store-option's NAME=VALUE strings as `configure`'s keyword arguments."""
    malformed = [option for option in given if "=" not in option]
    if malformed:
        parser.error(f"--store-option wants NAME=VALUE, not {', '.join(malformed)}")
    return dict(option.partition("=")[::2] for option in given)


def split(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def check(parser: argparse.ArgumentParser, cfg: Config) -> None:
    if min(cfg.rows, cfg.keys, cfg.batches, cfg.rounds) < 1 or cfg.warmup < 0:
        parser.error("--rows, --keys, --batches and --rounds must be >= 1, --warmup >= 0")
    if cfg.batches <= cfg.warmup:
        parser.error("--batches must be larger than --warmup")
    unknown = set(cfg.workloads) - set(WORKLOADS)
    unknown |= set(cfg.providers) - {p.name for p in PROVIDERS}
    if unknown or not cfg.workloads or not cfg.providers:
        parser.error(f"unknown or empty workloads/providers: {sorted(unknown)}")


def main(argv: Sequence[str] | None = None) -> int:
    if answered(argv, run_child):
        return 0
    cfg = parse_args(argv)
    providers = [p for p in PROVIDERS if p.name in cfg.providers]
    with tempfile.TemporaryDirectory(prefix="pyrocks-macro-") as tmp:
        work_dir = Path(tmp)
        print(f"generating input under {work_dir} ...", flush=True)
        workloads = prepare_workloads(work_dir, cfg)
        expected = {w.name: w.expected_state_rows for w in workloads}
        runs = [run_isolated(w, p, cfg, work_dir / f"round-{index}", index)
                for index in range(cfg.rounds) for w in workloads
                for p in in_turn(providers, index)]
    results = [result for result, _ in runs]
    spark_version = next((version for _, version in runs if version), "unknown")
    found = ratios(results)
    print(render_table(results, found, cfg, expected))
    for note in warnings_for(results, expected):
        print(f"WARNING: {note}")
    write_json(RESULTS_JSON, cfg, results, found, expected, spark_version)
    print(f"\nwrote {RESULTS_JSON}")
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())


# -------------------------------------------------------------------------------- targets


def targets(payload: dict[str, Any]) -> list[report.Target]:
    """Per workload: median batch time vs Spark RocksDB (<= 1.0); and median commit time vs
    Spark RocksDB with changelog checkpointing (<= 1.0); medians over the rounds."""
    found = []
    runs = [RunResult(**{**r, "batches": []}) for r in payload["results"]]
    table = summaries(runs)
    for workload in dict.fromkeys(s.workload for s in table):
        rows = {s.provider: asdict(s) for s in table
                if s.workload == workload and s.median_batch_ms is not None}
        ours = rows.get(OURS)
        if ours is None:
            continue
        for metric, what, baseline in (
                ("median_batch_ms", "median batch time", report.SPARK_ROCKSDB),
                ("median_commit_ms", "median commit time", report.SPARK_ROCKSDB_CHANGELOG)):
            theirs = rows.get(baseline, {}).get(metric)
            value = report.ratio(ours[metric], theirs)
            found.append(report.Target(
                benchmark="macro", name=f"{workload}: {what}",
                unit="ms", ours=ours[metric], compared_to=baseline, ratio=value,
                goal=1.0,
                baselines={name: r[metric] for name, r in rows.items() if name != OURS}))
    return found

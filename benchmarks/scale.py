"""Batch time against state size, per provider, beside the floor: the same query with no
state at all.

    python -m benchmarks.scale                                  # 100k, 1M, 5M, 20M keys
    python -m benchmarks.scale --sizes 100k,1m --workloads aggregation
    python -m benchmarks.scale --quick                          # 20k and 100k keys, 2 rounds
    python -m benchmarks.scale --sizes 5m --workloads sessions --jfr /tmp/jfr   # profiles

For each workload and state size: fill batches (up to --fill-rows rows each) bring the state
to that many keys, then --warmup + --rounds measured batches of --rows rows each touch it:
  aggregation  groupBy(key) count/sum; measured rows update random existing keys
  dedup        dropDuplicates(id); measured rows are new ids (the state grows by --rows)
  join         stream-stream inner join, watermarks an hour wide: the fill rows (one side)
               stay buffered; measured rows are new matching pairs
  sessions     session windows per user (10 min gap, watermark an hour): the fill opens a
               session per user; measured rows extend random existing ones
Providers: ours, Spark's RocksDB provider (its defaults), Spark's HDFS provider (state in
the executor's heap, the in-memory floor of state stores), and two floors: `noop`, the same
stateful query on a state store that keeps nothing (benchmarks/jvm/: every get misses, a
commit costs nothing), which is what the batch costs with a free store; and `stateless`: the
measured files alone through the same shuffle (repartition by the key) to the same noop
sink, with no state operator at all. Each (workload, size, provider)
runs in a fresh interpreter and JVM (local[2], 8 shuffle partitions, 8g driver), which
reports its peak RSS (JVM, and our workers) and Spark's state operator metrics (task time in
updates, removals, i.e. the eviction scan, and commits); a run that fails (e.g. out of
heap) is a result. `--repeats N` runs each provider N times, the providers taking turns at
going first, and takes the median of their medians (ours over each Spark provider is also
shown repeat by repeat). `--jfr DIR` records each run's JVM (driver and executor in local
mode) with Java Flight Recorder, a file a run (`aggregation-1000000-pyrocks.jfr`; `-2` after
the provider for its second repeat): `jfr print --events jdk.ExecutionSample F.jfr`.
`--java-option=-Xms4g` gives every run's JVM that option: G1 then no longer falls, in some
runs and not others, into concurrent marking back to back, so a comparison needs fewer
repeats (docs/benchmarks.md, Dec 6, stop 86); without it the runs are as Spark starts a
local driver.

With two measured batches a quarter or more (`--rounds 8` and up), the table also sets
ours beside Spark's RocksDB provider quarter by quarter of the measured batches (the JIT
still compiles Spark's code in the first: `--rounds 24` shows how far that goes), and gives
each provider's CPU seconds a batch by thread group, quarter by quarter: Spark's tasks, the
JIT's compilers, the garbage collector, the stream's driver thread, the JVM's other
threads, and our workers (/proc, every 0.2 s: `procfs.CpuTimeline`).

Results: a table on stdout, `benchmarks/results/scale.json`, and the chart
`benchmarks/results/scale.png` (median batch time against state size, one panel per
workload, one line per provider).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from benchmarks import report
from benchmarks.bench_jar import NOOP_PROVIDER, bench_jar
from benchmarks.child import answered, from_json, run_module_child
from benchmarks.macro import (
    PROVIDER_KEY,
    PROVIDERS,
    batch_metrics,
    file_stream,
    in_turn,
    median_of,
    select_provider,
    write_batches,
)
from benchmarks.memory import RssSampler
from benchmarks.procfs import CpuTimeline

WORKLOADS = ("aggregation", "dedup", "join", "sessions")
PROVIDER_NAMES = ("pyrocks", "spark-rocksdb", "spark-hdfs", "noop", "stateless")
KEY_COLUMN = {"aggregation": "key", "dedup": "id", "join": "key", "sessions": "user"}
SCHEMA = {"aggregation": "key LONG, value LONG", "dedup": "id LONG, payload LONG",
          "join": "key LONG, side LONG, ts LONG", "sessions": "user LONG, ts LONG"}
RESULTS_JSON = report.RESULTS_DIR / "scale.json"  # its chart: scale.png beside it
MEMORY_BOUND_MB = 512  # ours: memoryBoundMB's default, shared by the executor's stores
QUARTERS = 4  # the measured batches in order, in parts: the JIT's warm-up against the rest
T = TypeVar("T")


@dataclass(frozen=True)
class Config:
    sizes: tuple[int, ...]
    workloads: tuple[str, ...]
    providers: tuple[str, ...]
    rows: int
    fill_rows: int
    warmup: int
    rounds: int
    timeout_s: float
    options: dict[str, str] = field(default_factory=dict)  # ours: configure(**options)
    jfr_dir: str = ""  # a JFR recording of each run's JVM there (its executor: local mode)
    repeats: int = 1  # runs of each provider per (workload, size), the providers in turn
    # The JVM's own options for every run (e.g. -Xms4g: G1 then keeps out of back-to-back
    # marking, which otherwise swings a 1M-key batch by a fifth; docs/benchmarks.md, Dec 6)
    java_options: tuple[str, ...] = ()


@dataclass
class Run:
    workload: str
    keys: int
    provider: str
    batch_ms: list[int] = field(default_factory=list)  # the measured batches, in order
    median_batch_ms: float | None = None
    fill_s: float | None = None
    peak_jvm_mb: float | None = None
    peak_workers_mb: float | None = None
    # Spark's state operator metrics, task-ms summed over a batch's tasks, median over the
    # measured batches: where a batch's state time goes (removals = the eviction scan)
    state_task_ms: dict[str, float] | None = None
    error: str | None = None
    repeat: int = 0  # which of the (workload, size)'s `repeats` this run was
    # CPU seconds a batch of the JVM's thread groups and of our workers (procfs.CpuTimeline)
    # in each quarter of the measured batches, in order: where the early batches' extra goes
    cpu_s_by_quarter: list[dict[str, float]] | None = None


# ---------------------------------------------------------------------------------- input


def fill_tables(workload: str, keys: int, chunk: int) -> list[pa.Table]:
    """Batches that bring the state to `keys` keys."""
    tables = []
    for start in range(0, keys, chunk):
        ids = np.arange(start, min(start + chunk, keys), dtype=np.int64)
        tables.append(_rows(workload, ids, fill=True, rng=np.random.default_rng(start)))
    return tables


def measured_tables(workload: str, keys: int, rows: int, count: int) -> list[pa.Table]:
    tables = []
    for batch in range(count):
        rng = np.random.default_rng([keys, batch])
        if workload in ("aggregation", "sessions"):  # existing keys
            ids = rng.integers(0, keys, size=rows, dtype=np.int64)
        else:  # new ids past the filled ones
            ids = np.arange(keys + batch * rows, keys + (batch + 1) * rows, dtype=np.int64)
        tables.append(_rows(workload, ids, fill=False, rng=rng))
    return tables


def _rows(workload: str, ids: np.ndarray, fill: bool, rng: np.random.Generator) -> pa.Table:
    n = len(ids)
    if workload == "aggregation":
        return pa.table({"key": ids, "value": np.ones(n, dtype=np.int64)})
    if workload == "dedup":
        return pa.table({"id": ids, "payload": rng.integers(0, 1 << 30, size=n)})
    if workload == "join":  # fill: left rows only; measured: a left and a right row per key
        if fill:
            return pa.table({"key": ids, "side": np.zeros(n, dtype=np.int64),
                             "ts": rng.integers(0, 60, size=n)})
        pairs = np.repeat(ids[: n // 2], 2)
        return pa.table({"key": pairs, "side": np.tile(np.array([0, 1]), n // 2),
                         "ts": rng.integers(60, 120, size=len(pairs))})
    return pa.table({"user": ids, "ts": rng.integers(0 if fill else 60, 60 if fill else 120,
                                                      size=n)})


def write_input(base: Path, cfg: Config, workload: str, keys: int) -> None:
    write_batches(base / "fill", fill_tables(workload, keys, cfg.fill_rows))
    later = time.time() + 5  # the measured files come after every fill file
    measured = measured_tables(workload, keys, cfg.rows, cfg.warmup + cfg.rounds)
    write_batches(base / "measured", measured)
    for index, path in enumerate(sorted((base / "measured").iterdir())):
        os.utime(path, (later + index, later + index))


# -------------------------------------------------------------------------------- queries


def start(spark: Any, workload: str, provider: str, base: Path, checkpoint: Path) -> Any:
    from pyspark.sql import functions as F

    if provider == "stateless":
        frame = (file_stream(spark, base / "measured", SCHEMA[workload])
                 .repartition(8, KEY_COLUMN[workload]))
        mode = "append"
    else:
        frame = file_stream(spark, base / "*" / "*.parquet", SCHEMA[workload])
        frame, mode = _stateful(frame, workload, F)
    return (frame.writeStream.outputMode(mode).format("noop")
            .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())


def _stateful(frame: Any, workload: str, F: Any) -> tuple[Any, str]:
    if workload == "aggregation":
        return (frame.groupBy("key").agg(F.count("*").alias("n"), F.sum("value").alias("t")),
                "update")
    if workload == "dedup":
        return frame.dropDuplicates(["id"]), "append"
    timed = frame.withColumn("t", F.timestamp_seconds("ts"))
    if workload == "join":
        left = timed.where("side = 0").select(F.col("key").alias("lk"), F.col("t").alias("lt"))
        right = timed.where("side = 1").select(F.col("key").alias("rk"), F.col("t").alias("rt"))
        joined = left.withWatermark("lt", "1 hour").join(
            right.withWatermark("rt", "1 hour"),
            F.expr("lk = rk AND rt BETWEEN lt - INTERVAL 1 HOUR AND lt + INTERVAL 1 HOUR"))
        return joined, "append"
    sessions = (timed.withWatermark("t", "1 hour")
                .groupBy(F.session_window("t", "10 minutes"), "user").count())
    return sessions, "append"


# ------------------------------------------------------------------------------------ run


def driver_java_options(cfg: Config, run: Run) -> str:
    """The options of `run`'s JVM (the driver's: in local mode, the executor's too): the
    configured ones, then the recording's if runs are recorded."""
    options = list(cfg.java_options)
    if cfg.jfr_dir:  # each repeat its own file: a later one must not overwrite an earlier
        repeat = f"-{run.repeat + 1}" if cfg.repeats > 1 else ""
        options.append(jfr_at_launch(
            Path(cfg.jfr_dir) / f"{run.workload}-{run.keys}-{run.provider}{repeat}.jfr"))
    return " ".join(options)


def run_child(spec: dict[str, Any]) -> Run:
    """One (workload, size, provider) in this process: its own SparkSession and JVM."""
    from pyspark.sql import SparkSession

    from state_store.spark import configure, spark_conf

    cfg = from_json(Config, spec["config"])
    run = Run(spec["workload"], spec["keys"], spec["provider"], repeat=spec["repeat"])
    base, work = Path(spec["input"]), Path(spec["work"])
    builder = (SparkSession.builder.master("local[2]").appName("pyrocks-scale")
               .config("spark.sql.shuffle.partitions", "8")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.memory", "8g"))
    java_options = driver_java_options(cfg, run)
    if java_options:
        builder = builder.config("spark.driver.extraJavaOptions", java_options)
    options = {"localDir": str(work / "pool"), **cfg.options}
    jars = f"{spark_conf(**options)['spark.jars']},{bench_jar()}"  # the no-op provider's too
    spark = configure(builder, **options).config("spark.jars", jars).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if run.provider == "noop":
        spark.conf.set(PROVIDER_KEY, NOOP_PROVIDER)
    elif run.provider != "stateless":
        select_provider(spark, next(p for p in PROVIDERS if p.name == run.provider))
    jvm = int(spark.sparkContext._jvm.ProcessHandle.current().pid())
    started = time.monotonic()
    with RssSampler(jvm) as sampler, CpuTimeline(jvm) as cpu:
        query = start(spark, run.workload, run.provider, base, work / "checkpoint")
        try:
            if not query.awaitTermination(cfg.timeout_s):
                run.error = f"timed out after {cfg.timeout_s:.0f} s"
                query.stop()
        except Exception as e:  # out of heap, a lost executor: a result of this size
            run.error = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300]}"
        batches = [b.duration_ms for b in batch_metrics(query.recentProgress)] \
            if run.provider != "stateless" else \
            [int(p.durationMs.get("triggerExecution", 0)) for p in query.recentProgress
             if p.numInputRows > 0]
    measured = batches[-cfg.rounds:] if len(batches) >= cfg.warmup + cfg.rounds else []
    with_input = [p for p in query.recentProgress if p.numInputRows > 0
                  and (p.stateOperators or run.provider == "stateless")]  # as batch_metrics
    if measured and run.provider != "stateless":
        run.state_task_ms = state_task_ms(with_input[-cfg.rounds:])
    if len(measured) >= 2 * QUARTERS:
        run.cpu_s_by_quarter = cpu_by_quarter(cpu, with_input[-cfg.rounds:])
    if run.error is None and not measured:
        run.error = f"saw {len(batches)} batches with input"
    run.batch_ms = measured
    run.median_batch_ms = statistics.median(measured) if measured else None
    run.fill_s = round(time.monotonic() - started - sum(batches[-cfg.rounds - cfg.warmup:])
                       / 1000, 1)
    run.peak_jvm_mb, run.peak_workers_mb = round(sampler.peak_jvm), round(sampler.peak_workers)
    spark.stop()
    return run


def jfr_at_launch(recording: Path) -> str:
    """The JVM option that records with Java Flight Recorder from the JVM's launch into
    `recording`, under the name `profile` (which `benchmarks.profile` stops it by). Never
    later: a recording started in a running JVM (`jcmd JFR.start`) makes it drop its
    compiled code, and the batches after it recompile it (benchmarks/profile.py).

    Java threads are sampled every millisecond, not every 10 ms as the `profile` settings
    have it: at 1M keys of aggregation, 8 measured batches gave 1,635 samples against 282,
    enough to tell a 1% frame from noise, for 0.04 s of the sampler's CPU a batch of ~0.9 s
    (docs/benchmarks.md, Dec 6). The compiled code keeps its debug information between
    safepoints too (`DebugNonSafepoints`): without it a sample inside inlined code names the
    nearest safepoint's method, and at 1M keys of aggregation a tenth of the task samples
    named an index insert that no measured batch ran (docs/benchmarks.md, Dec 7, stop 95)."""
    return ("-XX:+UnlockDiagnosticVMOptions -XX:+DebugNonSafepoints "
            "-XX:StartFlightRecording=name=profile,settings=profile,"
            f"jdk.ExecutionSample#period=1ms,filename={recording}")


def quarters(values: Sequence[T]) -> list[Sequence[T]]:
    """`values` in QUARTERS consecutive parts, as equal as they divide."""
    n = len(values)
    return [values[n * q // QUARTERS:n * (q + 1) // QUARTERS] for q in range(QUARTERS)]


def cpu_by_quarter(cpu: CpuTimeline, progress: Sequence[Any]) -> list[dict[str, float]]:
    """Per quarter of the batches of `progress`, the CPU seconds a batch of each group."""
    found = []
    for part in quarters(progress):
        spent: dict[str, float] = {}
        for p in part:
            begun = datetime.fromisoformat(p.timestamp.replace("Z", "+00:00")).timestamp()
            ended = begun + p.durationMs.get("triggerExecution", 0) / 1000
            for group, seconds in cpu.between(begun, ended).items():
                spent[group] = spent.get(group, 0.0) + seconds / len(part)
        found.append({group: round(seconds, 3) for group, seconds in sorted(spent.items())})
    return found


def state_task_ms(progress: Sequence[Any]) -> dict[str, float]:
    """Median over `progress` (the measured batches) of each state metric, summed over the
    batch's state operators."""
    keys = ("allUpdatesTimeMs", "allRemovalsTimeMs", "commitTimeMs")
    per_batch = [[json.loads(op.json) for op in p.stateOperators] for p in progress]
    return {k: statistics.median(sum(op.get(k, 0) for op in ops) for ops in per_batch)
            for k in keys}


def spawn(cfg: Config, workload: str, keys: int, provider: str, base: Path,
          work: Path, repeat: int) -> Run:
    spec = {"config": asdict(cfg), "workload": workload, "keys": keys, "provider": provider,
            "repeat": repeat, "input": str(base), "work": str(work)}
    answer, error = run_module_child("benchmarks.scale", spec, cfg.timeout_s + 300)
    if answer is None:
        return Run(workload, keys, provider, error=error, repeat=repeat)
    return Run(**{**answer, "repeat": repeat})


def sweep(cfg: Config, scratch: Path, results: Path) -> list[Run]:
    """Every planned run, added to what `results` holds of other sizes and workloads (a
    sweep done in parts; a (workload, size, provider) run again replaces its old runs).
    Each provider runs `repeats` times, repeat `r` in the order `in_turn(providers, r)`, so
    that none always runs first on a machine just idle."""
    runs = previous_runs(results)
    for workload in cfg.workloads:
        for keys in cfg.sizes:
            base = scratch / f"{workload}-{keys}"
            write_input(base, cfg, workload, keys)
            for repeat in range(cfg.repeats):
                for provider in in_turn(cfg.providers, repeat):
                    with tempfile.TemporaryDirectory(dir=scratch) as work:
                        run = spawn(cfg, workload, keys, provider, base, Path(work), repeat)
                    if repeat == 0:  # this sweep's runs replace the results' older ones
                        runs = [r for r in runs
                                if (r.workload, r.keys, r.provider) != (workload, keys, provider)]
                    runs.append(run)
                    print(f"[{workload} {keys:,}] {provider}"
                          + (f", repeat {repeat + 1}/{cfg.repeats}" if cfg.repeats > 1 else "")
                          + ": " + (f"ERROR {run.error}" if run.error else
                                    f"batch p50 {run.median_batch_ms:,.0f} ms {run.batch_ms}, "
                                    f"JVM {run.peak_jvm_mb} MiB, workers "
                                    f"{run.peak_workers_mb} MiB"), flush=True)
                    save(cfg, runs, results)
            _remove(base)
    return runs


def _remove(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


# --------------------------------------------------------------------------------- report


def previous_runs(results: Path) -> list[Run]:
    if not results.exists():
        return []
    return [Run(**r) for r in json.loads(results.read_text())["runs"]]


def save(cfg: Config, runs: Sequence[Run], results: Path) -> None:
    """The runs, under the config they were made with, its sizes and workloads those of
    every run kept."""
    cfg = Config(**{**asdict(cfg),
                    "sizes": tuple(sorted({r.keys for r in runs})),
                    "workloads": tuple(w for w in WORKLOADS if any(r.workload == w
                                                                   for r in runs))})
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps({"benchmark": "scale", "config": asdict(cfg),
                                        "memory_bound_mb": MEMORY_BOUND_MB,
                                        "runs": [asdict(r) for r in runs]}, indent=1))


def _by(payload: dict[str, Any]) -> dict[tuple[str, int, str], dict[str, Any]]:
    """Per (workload, size, provider), its runs combined (`_combined`)."""
    grouped: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for r in payload["runs"]:
        grouped.setdefault((r["workload"], r["keys"], r["provider"]), []).append(r)
    return {key: _combined(runs) for key, runs in grouped.items()}


def _combined(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The batch time is the median of the repeats' medians, a failed repeat counting in
    `error` only; the peak RSS is the largest; `batch_ms_by_repeat` pairs repeats across
    providers (repeat r of each ran in the same turn)."""
    runs = sorted(runs, key=lambda r: r.get("repeat", 0))
    ok = [r for r in runs if r.get("error") is None]

    def peak(name: str) -> float | None:
        return max((r[name] for r in ok if r.get(name) is not None), default=None)

    return {"median_batch_ms": median_of(r.get("median_batch_ms") for r in ok),
            "batch_ms_by_repeat": [None if r.get("error") else r.get("median_batch_ms")
                                   for r in runs],
            "peak_jvm_mb": peak("peak_jvm_mb"), "peak_workers_mb": peak("peak_workers_mb"),
            "batches_by_repeat": [r.get("batch_ms") or [] for r in ok],
            "cpu_by_repeat": [r["cpu_s_by_quarter"] for r in ok if r.get("cpu_s_by_quarter")],
            "error": "; ".join(r["error"] for r in runs if r.get("error")) or None}


def by_quarter_ms(combined: dict[str, Any]) -> list[float] | None:
    """The median batch of each quarter of the measured batches, the repeats' batches at
    those places pooled; None unless every repeat measured two batches a quarter."""
    repeats = combined.get("batches_by_repeat") or []
    if not repeats or any(len(batches) < 2 * QUARTERS for batches in repeats):
        return None
    parts = [quarters(batches) for batches in repeats]
    return [statistics.median(b for part in parts for b in part[q]) for q in range(QUARTERS)]


def cpu_lines(provider: str, combined: dict[str, Any]) -> list[str]:
    """The CPU seconds a batch of each thread group, quarter by quarter, the repeats'
    averaged."""
    repeats = combined.get("cpu_by_repeat") or []
    if not repeats:
        return []
    groups = sorted({group for run in repeats for part in run for group in part})
    per_group = []
    for group in groups:
        spent = [statistics.fmean(r[q].get(group, 0.0) for r in repeats)
                 for q in range(QUARTERS)]
        per_group.append(f"{group} {' '.join(f'{x:.2f}' for x in spent)}")
    return [f"    {provider} CPU s a batch by quarter: " + "; ".join(per_group)]


def render(payload: dict[str, Any]) -> str:
    runs = _by(payload)
    lines = ["median batch ms (measured batches of "
             f"{payload['config']['rows']:,} rows); ours/x; store share = the part of our "
             "batch above the no-op store's: (ours - noop) / ours"]
    header = (f"{'workload':<12}{'keys':>12}{'ours':>9}{'rocksdb':>9}{'hdfs':>9}{'noop':>8}"
              f"{'stateless':>10}{'/rocksdb':>9}{'/hdfs':>7}{'share':>7}{'ours RSS MiB':>16}")
    lines += [header, "-" * len(header)]
    for workload in payload["config"]["workloads"]:
        for keys in payload["config"]["sizes"]:
            if not any((workload, keys, p) in runs for p in PROVIDER_NAMES):
                continue  # not run at this size
            got = {p: runs.get((workload, keys, p), {}) for p in PROVIDER_NAMES}
            med = {p: r.get("median_batch_ms") for p, r in got.items()}
            ours = med["pyrocks"]
            share = (None if ours is None or med["noop"] is None
                     else (ours - med["noop"]) / ours)
            ours_runs = got["pyrocks"]
            rss = f"{ours_runs.get('peak_jvm_mb')}+{ours_runs.get('peak_workers_mb')}"
            lines.append(
                f"{workload:<12}{keys:>12,}{_ms(ours):>9}{_ms(med['spark-rocksdb']):>9}"
                f"{_ms(med['spark-hdfs']):>9}{_ms(med['noop']):>8}{_ms(med['stateless']):>10}"
                f"{_x(report.ratio(ours, med['spark-rocksdb'])):>9}"
                f"{_x(report.ratio(ours, med['spark-hdfs'])):>7}"
                f"{('-' if share is None else f'{share:.0%}'):>7}"
                f"{rss:>16}")
            for baseline in ("spark-rocksdb", "spark-hdfs"):
                paired = [report.ratio(o, t) for o, t in zip(
                    ours_runs.get("batch_ms_by_repeat", []),
                    got[baseline].get("batch_ms_by_repeat", []), strict=False)]
                if len(paired) > 1:
                    lines.append(f"    ours/{baseline.removeprefix('spark-')} by repeat: "
                                 + " ".join(_x(x) for x in paired))
            ours_q, theirs_q = by_quarter_ms(ours_runs), by_quarter_ms(got["spark-rocksdb"])
            if ours_q and theirs_q:
                lines.append("    ours/rocksdb by quarter of the measured batches: " + " ".join(
                    _x(report.ratio(o, t)) for o, t in zip(ours_q, theirs_q, strict=True)))
            for p, r in got.items():
                lines += cpu_lines(p, r)
                if r.get("error"):
                    lines.append(f"    {p}: {r['error'][:160]}")
    return "\n".join(lines)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def chart(payload: dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = _by(payload)
    workloads = payload["config"]["workloads"]
    fig, axes = plt.subplots(1, len(workloads), figsize=(4.2 * len(workloads), 3.8),
                             squeeze=False)
    for ax, workload in zip(axes[0], workloads, strict=True):
        for provider in PROVIDER_NAMES:
            points = [(k, runs[(workload, k, provider)]["median_batch_ms"])
                      for k in payload["config"]["sizes"]
                      if (workload, k, provider) in runs
                      and runs[(workload, k, provider)]["median_batch_ms"] is not None]
            if points:
                ax.plot(*zip(*points, strict=True), marker="o", label=provider,
                        linestyle="--" if provider in ("noop", "stateless") else "-")
        ax.set_xscale("log")
        ax.set_title(workload)
        ax.set_xlabel("state size (keys)")
        ax.set_ylabel("median batch time (ms)")
        ax.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"batch time vs state size ({payload['config']['rows']:,} rows/batch, "
                 "local[2], 8 partitions)")
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def targets(payload: dict[str, Any]) -> list[report.Target]:
    """Per workload and size: ours vs Spark HDFS (<= 1), and from 1M keys up vs Spark
    RocksDB (<= 0.5)."""
    found = []
    runs = _by(payload)
    for workload in payload["config"]["workloads"]:
        for keys in payload["config"]["sizes"]:
            ours = runs.get((workload, keys, "pyrocks"), {}).get("median_batch_ms")
            goals = [(report.SPARK_HDFS, 1.0)]
            if keys >= 1_000_000:
                goals.append((report.SPARK_ROCKSDB, 0.5))
            if ours is None and (workload, keys, "pyrocks") not in runs:
                continue  # not run at this size
            for baseline, goal in goals:
                theirs = runs.get((workload, keys, baseline), {}).get("median_batch_ms")
                found.append(report.Target(
                    benchmark="scale", name=f"{workload} at {keys:,} keys: batch", unit="ms",
                    ours=ours, compared_to=baseline, ratio=report.ratio(ours, theirs),
                    goal=goal, baselines={baseline: theirs},
                    note="" if theirs is not None else f"{baseline} failed at this size"))
    return found


# ----------------------------------------------------------------------------------- main


def parse_size(text: str) -> int:
    text = text.strip().lower()
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:], 1)
    return int(float(text.rstrip("km")) * scale)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100k,1m,5m,20m")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--providers", default=",".join(PROVIDER_NAMES))
    parser.add_argument("--rows", type=int, default=100_000, help="rows per measured batch")
    parser.add_argument("--fill-rows", type=int, default=2_000_000, help="rows per fill batch")
    parser.add_argument("--warmup", type=int, default=2, help="batches before the measured "
                        "ones (the JIT compiles each batch's new code: early batches swing)")
    parser.add_argument("--rounds", type=int, default=3, help="measured batches (median)")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each provider, "
                        "each in a fresh JVM, the providers in turn (median of their medians)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--report", action="store_true", help="re-render results/scale.json")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="one of our options for every run (e.g. readCacheMB=2g)")
    parser.add_argument("--jfr", default="", metavar="DIR",
                        help="record each run's JVM with Java Flight Recorder into DIR")
    parser.add_argument("--java-option", action="append", default=[], metavar="OPTION",
                        help="an option of every run's JVM, repeatable (with '=': "
                             "--java-option=-Xms4g)")
    parser.add_argument("--results", default=str(RESULTS_JSON), metavar="JSON",
                        help="where runs are kept (merged with what it holds), the chart "
                             "beside it as .png")
    if answered(argv, lambda spec: asdict(run_child(spec))):
        return 0
    args = parser.parse_args(argv)
    results = Path(args.results)
    if args.report:
        payload = json.loads(results.read_text())
    else:
        if args.quick:
            args.sizes, args.rows, args.rounds = "20k,100k", 20_000, 2
        cfg = Config(tuple(parse_size(s) for s in args.sizes.split(",")),
                     tuple(args.workloads.split(",")), tuple(args.providers.split(",")),
                     args.rows, args.fill_rows, args.warmup, args.rounds, args.timeout,
                     dict(o.split("=", 1) for o in args.option),
                     str(Path(args.jfr).resolve()) if args.jfr else "", args.repeats,
                     tuple(args.java_option))
        if args.jfr:
            Path(args.jfr).mkdir(parents=True, exist_ok=True)
        unknown = (set(cfg.workloads) - set(WORKLOADS)) | (set(cfg.providers)
                                                            - set(PROVIDER_NAMES))
        if unknown:
            parser.error(f"unknown workloads or providers: {sorted(unknown)}")
        if cfg.repeats < 1:
            parser.error(f"--repeats must be at least 1, not {cfg.repeats}")
        with tempfile.TemporaryDirectory(prefix="pyrocks-scale-") as scratch:
            sweep(cfg, Path(scratch), results)
        payload = json.loads(results.read_text())
    print(render(payload))
    chart(payload, results.with_suffix(".png"))
    print(f"wrote {results} and {results.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

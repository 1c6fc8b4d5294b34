"""Memory with 200 stores on one executor, side by side, as resident set size (RSS).

    python -m benchmarks.memory            # 200 partitions, 2M keys, 10 batches of 200k rows
    python -m benchmarks.memory --quick    # 200 partitions, 200k keys, 4 batches

A streaming `groupBy(key)` count/sum over 200 shuffle partitions (200 stores in one local[2]
executor) runs once per variant, each in a fresh process so no run inherits another's heap:
ours with its default executor-wide `memoryBoundMB` and with the bound off (0), Spark's
RocksDB provider with its defaults and with `boundedMemoryUsage` at the same bound, and
Spark's HDFS provider. A sampler reads /proc every 0.2 s: the JVM's RSS (the executor: heap
plus Spark RocksDB's native memory) and, for ours, the workers' RSS.

The bound covers RocksDB memory only, so the target compares the workers' peak RSS above
what idle workers use (a worker started and measured with no store open) with the bound.
Results: a table on stdout and `benchmarks/results/memory.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import report
from benchmarks.macro import (
    CHANGELOG_KEY,
    PROVIDER_KEY,
    SPARK_HDFS,
    SPARK_ROCKSDB,
    Config,
    aggregation_input,
    batch_metrics,
    start_aggregation,
)
from benchmarks.procfs import WORKER_MODULE, Sampler, rss_mb, workers_of
from state_store.spark import PROVIDER_CLASS, configure

RESULTS_JSON = report.RESULTS_DIR / "memory.json"
ROCKSDB_CONF = "spark.sql.streaming.stateStore.rocksdb."
POOL_CONF = "spark.sql.streaming.stateStore.pyrocks."
BOUND_MB = 512


@dataclass(frozen=True)
class Variant:
    name: str
    provider_class: str
    confs: dict[str, str] = field(default_factory=dict)


VARIANTS: tuple[Variant, ...] = (
    Variant("pyrocks", PROVIDER_CLASS, {POOL_CONF + "memoryBoundMB": str(BOUND_MB)}),
    Variant("pyrocks-unbounded", PROVIDER_CLASS, {POOL_CONF + "memoryBoundMB": "0"}),
    Variant(report.SPARK_ROCKSDB, SPARK_ROCKSDB),
    Variant("spark-rocksdb-bounded", SPARK_ROCKSDB, {
        ROCKSDB_CONF + "boundedMemoryUsage": "true",
        ROCKSDB_CONF + "maxMemoryUsageMB": str(BOUND_MB)}),
    Variant(report.SPARK_HDFS, SPARK_HDFS),
)


@dataclass
class RunResult:
    variant: str
    partitions: int
    wall_s: float = 0.0
    error: str | None = None
    peak_jvm_rss_mb: float = 0.0
    peak_workers_rss_mb: float = 0.0
    peak_total_rss_mb: float = 0.0
    final_total_rss_mb: float = 0.0
    workers: int = 0
    median_batch_ms: float | None = None
    final_state_rows: int | None = None
    peak_memory_used_mb: float | None = None  # what the provider reports to Spark


# ------------------------------------------------------------------------------- /proc


class RssSampler(Sampler):
    """Samples the JVM's RSS and its workers' total RSS until stopped; keeps the peaks."""

    def __init__(self, jvm_pid: int) -> None:
        super().__init__(every_s=0.2)
        self.jvm_pid = jvm_pid
        self.peak_jvm = self.peak_workers = self.peak_total = self.last_total = 0.0
        self.workers = 0

    def sample(self) -> None:
        jvm = rss_mb(self.jvm_pid)
        workers = workers_of(self.jvm_pid)
        in_workers = sum(rss_mb(p) for p in workers)
        self.workers = max(self.workers, len(workers))
        self.last_total = jvm + in_workers
        self.peak_jvm = max(self.peak_jvm, jvm)
        self.peak_workers = max(self.peak_workers, in_workers)
        self.peak_total = max(self.peak_total, self.last_total)


def idle_worker_rss_mb() -> float:
    """RSS of a worker with no store open: the interpreter and its imports, not RocksDB."""
    with tempfile.TemporaryDirectory(prefix="pyrocks-idle-") as tmp:
        worker = subprocess.Popen(
            [sys.executable, "-m", WORKER_MODULE, "--socket", f"{tmp}/w.sock",
             "--data-dir", f"{tmp}/data"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            assert worker.stdout is not None
            worker.stdout.readline()  # READY
            time.sleep(0.5)
            return rss_mb(worker.pid)
        finally:
            assert worker.stdin is not None
            worker.stdin.close()
            worker.wait(30)


# ------------------------------------------------------------------------------ one run


def run_variant(variant: Variant, cfg: Config, partitions: int, input_dir: Path) -> RunResult:
    """In this (fresh) process: one Spark session, one query, RSS sampled throughout."""
    from pyspark.sql import SparkSession

    result = RunResult(variant.name, partitions)
    with tempfile.TemporaryDirectory(prefix="pyrocks-memory-") as tmp:
        builder = configure(SparkSession.builder, localDir=f"{tmp}/pool")
        builder = (builder.master("local[2]").appName("pyrocks-memory")
                   .config("spark.sql.shuffle.partitions", str(partitions))
                   .config("spark.ui.enabled", "false")
                   .config("spark.ui.showConsoleProgress", "false")
                   .config("spark.driver.memory", cfg.driver_memory)
                   .config(PROVIDER_KEY, variant.provider_class)  # after configure(): wins
                   .config(CHANGELOG_KEY, "false"))
        for key, value in variant.confs.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        jvm_pid = int(spark.sparkContext._jvm.ProcessHandle.current().pid())
        started = time.monotonic()
        try:
            with RssSampler(jvm_pid) as sampler:
                query = start_aggregation(spark, input_dir, f"{tmp}/ckpt")
                query.awaitTermination(cfg.timeout_s)
                batches = batch_metrics(query.recentProgress)
            record(result, sampler, batches, cfg.warmup)
        except Exception as exc:  # a failing variant is a result
            result.error = f"{type(exc).__name__}: {exc}"
        finally:
            result.wall_s = round(time.monotonic() - started, 1)
            spark.stop()
    return result


def record(result: RunResult, sampler: RssSampler, batches: Sequence[Any], warmup: int) -> None:
    import statistics

    result.peak_jvm_rss_mb = round(sampler.peak_jvm, 1)
    result.peak_workers_rss_mb = round(sampler.peak_workers, 1)
    result.peak_total_rss_mb = round(sampler.peak_total, 1)
    result.final_total_rss_mb = round(sampler.last_total, 1)
    result.workers = sampler.workers
    measured = batches[warmup:] or batches
    if measured:
        result.median_batch_ms = statistics.median(b.duration_ms for b in measured)
        result.final_state_rows = batches[-1].state_rows
        result.peak_memory_used_mb = round(max(b.memory_bytes for b in batches) / 2**20, 1)


# ----------------------------------------------------------------------------- targets


def targets(payload: dict[str, Any]) -> list[report.Target]:
    runs = {r["variant"]: r for r in payload["results"] if r["error"] is None}
    ours = runs.get("pyrocks")
    if ours is None:
        return []
    bound = payload["config"]["bound_mb"]
    above_idle = ours["peak_workers_rss_mb"] - ours["workers"] * payload["idle_worker_rss_mb"]
    return [report.Target(
        benchmark="memory",
        name=f"{ours['partitions']} stores: workers' peak RSS above idle vs memoryBoundMB",
        unit="MiB", ours=round(above_idle, 1), compared_to=f"memoryBoundMB={bound}",
        ratio=round(above_idle / bound, 3), goal=1.25,  # RocksDB enforces the bound softly
        baselines={name: r["peak_total_rss_mb"] for name, r in runs.items()},
        note="baselines: peak total RSS (JVM + workers), MiB")]


# ------------------------------------------------------------------------------- report


def render(results: Sequence[RunResult], idle_mb: float) -> str:
    lines = [f"idle worker RSS: {idle_mb:.0f} MiB",
             f"{'variant':<24}{'JVM peak':>10}{'workers peak':>14}{'total peak':>12}"
             f"{'total end':>11}{'batch p50':>11}{'state rows':>12}{'memoryUsed':>12}"]
    for r in results:
        lines.append(
            f"{r.variant:<24}{r.peak_jvm_rss_mb:>10,.0f}{r.peak_workers_rss_mb:>14,.0f}"
            f"{r.peak_total_rss_mb:>12,.0f}{r.final_total_rss_mb:>11,.0f}"
            f"{r.median_batch_ms or 0:>11,.0f}{r.final_state_rows or 0:>12,}"
            f"{r.peak_memory_used_mb or 0:>12,.0f}"
            + (f"  ERROR {r.error.splitlines()[0][:160]}" if r.error else ""))
    lines.append("RSS in MiB (peak over the run); memoryUsed = peak memoryUsedBytes, MiB")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.memory", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=200)
    parser.add_argument("--keys", type=int, default=2_000_000)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--variants", default=",".join(v.name for v in VARIANTS))
    # a modest heap, so the JVM's RSS reflects what the providers keep rather than garbage
    parser.add_argument("--driver-memory", default="3g")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # internal: one variant, as JSON
    args = parser.parse_args(argv)
    if args.child:
        return child(json.loads(args.child))
    if args.quick:
        args.keys, args.batches = 200_000, 4
    cfg = Config(rows=args.rows, keys=args.keys, batches=args.batches, warmup=2, seed=42,
                 timeout_s=1800.0, driver_memory=args.driver_memory,
                 workloads=("aggregation",), providers=())
    chosen = [v for v in VARIANTS if v.name in args.variants.split(",")]
    idle = idle_worker_rss_mb()
    with tempfile.TemporaryDirectory(prefix="pyrocks-memory-input-") as tmp:
        aggregation_input(Path(tmp), cfg)
        results = [spawn(v, cfg, args.partitions, Path(tmp)) for v in chosen]
    print(render(results, idle))
    write(cfg, args.partitions, idle, results)
    return 0 if all(r.error is None for r in results) else 1


def spawn(variant: Variant, cfg: Config, partitions: int, input_dir: Path) -> RunResult:
    """Each variant in a fresh interpreter and JVM: RSS never carries over between runs."""
    print(f"[memory] {variant.name}: running ...", flush=True)
    spec = {"variant": variant.name, "config": asdict(cfg), "partitions": partitions,
            "input": str(input_dir)}
    done = subprocess.run([sys.executable, "-m", "benchmarks.memory", "--child", json.dumps(spec)],
                          capture_output=True, text=True)
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    if done.returncode != 0 or not last.startswith("{"):
        return RunResult(variant.name, partitions,
                         error=f"exit {done.returncode}: {done.stderr.strip()[-1000:]}")
    return RunResult(**json.loads(last))


def child(spec: dict[str, Any]) -> int:
    variant = next(v for v in VARIANTS if v.name == spec["variant"])
    cfg = Config(**{**spec["config"], "workloads": (), "providers": ()})
    result = run_variant(variant, cfg, spec["partitions"], Path(spec["input"]))
    print(json.dumps(asdict(result)))
    return 0


def write(cfg: Config, partitions: int, idle: float, results: Sequence[RunResult]) -> None:
    import pyspark

    payload = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "environment": {"pyspark": pyspark.__version__, "python": platform.python_version(),
                        "cpus": os.cpu_count(), "master": "local[2]"},
        "config": {"partitions": partitions, "keys": cfg.keys, "rows": cfg.rows,
                   "batches": cfg.batches, "bound_mb": BOUND_MB},
        "idle_worker_rss_mb": round(idle, 1),
        "results": [asdict(r) for r in results],
    }
    RESULTS_JSON.parent.mkdir(parents=True, exist_ok=True)
    RESULTS_JSON.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"wrote {RESULTS_JSON}")


if __name__ == "__main__":
    sys.exit(main())

"""Commit time as state grows, with the same change per batch, side by side in one run.

    python -m benchmarks.commit_scaling            # 50k, 500k and 2M keys, 20k changes/batch
    python -m benchmarks.commit_scaling --quick    # 20k and 100k keys, a short smoke run

For each state size: a first micro-batch inserts every key, then `--batches` micro-batches
each update `--changes` random existing keys (a streaming groupBy count/sum, update mode).
A commit should cost what the batch changed, not what the state holds: the key figure is
the ratio of median commit time at the largest state to that at the smallest, per provider.
Ours also reports bytes uploaded vs reused per snapshot (incremental snapshots).
Results: a table on stdout and `benchmarks/results/commit_scaling.json`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from benchmarks import report
from benchmarks.macro import (
    OURS,
    PROVIDERS,
    BatchMetrics,
    Provider,
    batch_metrics,
    file_stream,
    select_provider,
    write_batches,
)
from state_store.spark import configure

RESULTS_JSON = Path(__file__).resolve().parent / "results" / "commit_scaling.json"
SNAPSHOT_METRICS = ("pyrocks.snapshot_bytes_uploaded", "pyrocks.snapshot_bytes_reused",
                    "pyrocks.snapshot_files_uploaded", "pyrocks.snapshot_files_reused")


@dataclass
class SizeResult:
    provider: str
    keys: int
    median_commit_ms: float | None = None
    median_batch_ms: float | None = None
    median_worker_commit_ms: float | None = None  # ours: pyrocks.commit_ms
    snapshots: int = 0
    bytes_uploaded_per_snapshot: float | None = None
    bytes_reused_per_snapshot: float | None = None
    spark_copy_metrics: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    batches: list[BatchMetrics] = field(default_factory=list)


def scaling_input(out_dir: Path, keys: int, changes: int, batches: int, seed: int) -> None:
    """Batch 0 inserts keys 0..keys-1; every later batch updates `changes` random keys."""
    rng = np.random.default_rng([seed, keys])
    tables = [pa.table({"key": np.arange(keys, dtype=np.int64),
                        "value": np.ones(keys, dtype=np.int64)})]
    for _ in range(batches):
        picked = rng.choice(keys, size=min(changes, keys), replace=False).astype(np.int64)
        tables.append(pa.table({"key": picked, "value": np.ones(len(picked), dtype=np.int64)}))
    write_batches(out_dir, tables)


def run_size(spark: Any, provider: Provider, input_dir: Path, keys: int,
             checkpoint: Path, timeout_s: float) -> SizeResult:
    from pyspark.sql import functions as F

    result = SizeResult(provider.name, keys)
    select_provider(spark, provider)
    counts = (file_stream(spark, input_dir, "key LONG, value LONG").groupBy("key")
              .agg(F.count("*"), F.sum("value")))
    query = (counts.writeStream.outputMode("update").format("noop")
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    try:
        if not query.awaitTermination(timeout_s):
            result.error = f"timed out after {timeout_s:.0f} s"
    except Exception as exc:  # a failing provider is a result
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        result.batches = batch_metrics(query.recentProgress)
        if query.isActive:
            query.stop()
    summarize(result)
    return result


def summarize(result: SizeResult) -> None:
    measured = result.batches[2:]  # skip the loading batch and one warm-up batch
    if not measured:
        return
    result.median_commit_ms = statistics.median(b.commit_ms for b in measured)
    result.median_batch_ms = statistics.median(b.duration_ms for b in measured)
    custom = [b.custom_metrics for b in measured]
    if "pyrocks.commit_ms" in custom[0]:
        result.median_worker_commit_ms = statistics.median(c["pyrocks.commit_ms"] for c in custom)
        snapshots = [c for c in custom if c.get("pyrocks.snapshots", 0) > 0]
        result.snapshots = sum(c["pyrocks.snapshots"] for c in snapshots)
        if result.snapshots:
            result.bytes_uploaded_per_snapshot = sum(
                c["pyrocks.snapshot_bytes_uploaded"] for c in snapshots) / result.snapshots
            result.bytes_reused_per_snapshot = sum(
                c["pyrocks.snapshot_bytes_reused"] for c in snapshots) / result.snapshots
    result.spark_copy_metrics = {  # Spark's RocksDB provider: what its snapshots copied
        name: sum(c.get(name, 0) for c in custom) for name in custom[0]
        if name.startswith("rocksdb") and ("Copied" in name or "Reused" in name)
    }


def build_session(work_dir: Path, driver_memory: str) -> Any:
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master("local[2]").appName("pyrocks-commit-scaling")
               .config("spark.sql.shuffle.partitions", "8")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.memory", driver_memory))
    spark = configure(builder, localDir=str(work_dir / "pyrocks-local"),
                      snapshotInterval=3).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def render(results: Sequence[SizeResult]) -> str:
    lines = [f"{'provider':<24}{'keys':>10}{'commit p50':>12}{'batch p50':>11}"
             f"{'worker commit':>15}{'snapshots':>10}{'B up/snap':>12}{'B reused/snap':>15}"]
    for r in results:
        lines.append(
            f"{r.provider:<24}{r.keys:>10,}{_f(r.median_commit_ms):>12}{_f(r.median_batch_ms):>11}"
            f"{_f(r.median_worker_commit_ms):>15}{r.snapshots:>10}"
            f"{_f(r.bytes_uploaded_per_snapshot):>12}{_f(r.bytes_reused_per_snapshot):>15}"
            + (f"  ERROR {r.error.splitlines()[0]}" if r.error else ""))
    lines.append("")
    for provider in dict.fromkeys(r.provider for r in results):
        rows = [r for r in results if r.provider == provider and r.median_commit_ms]
        if len(rows) >= 2 and rows[0].median_commit_ms:
            growth = rows[-1].median_commit_ms / rows[0].median_commit_ms
            lines.append(f"{provider}: commit p50 at {rows[-1].keys:,} keys / at "
                         f"{rows[0].keys:,} keys = {growth:.2f}")
    return "\n".join(lines)


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.commit_scaling")
    parser.add_argument("--sizes", default="50000,500000,2000000")
    parser.add_argument("--changes", type=int, default=20_000)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--providers", default="pyrocks,spark-rocksdb,spark-rocksdb-changelog")
    parser.add_argument("--timeout", type=float, default=1200.0)
    parser.add_argument("--driver-memory", default="8g")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    sizes = [20_000, 100_000] if args.quick else [int(s) for s in args.sizes.split(",")]
    batches = 5 if args.quick else args.batches
    chosen = [p for p in PROVIDERS if p.name in args.providers.split(",")]
    results: list[SizeResult] = []
    with tempfile.TemporaryDirectory(prefix="pyrocks-scaling-") as tmp:
        work = Path(tmp)
        spark = build_session(work, args.driver_memory)
        try:
            for keys in sizes:
                input_dir = work / "input" / str(keys)
                scaling_input(input_dir, keys, args.changes, batches, seed=7)
                for provider in chosen:
                    started = time.monotonic()
                    result = run_size(spark, provider, input_dir, keys,
                                      work / "ckpt" / f"{provider.name}-{keys}", args.timeout)
                    print(f"{provider.name} {keys:,} keys: {time.monotonic() - started:.1f} s",
                          flush=True)
                    results.append(result)
        finally:
            spark.stop()
    results.sort(key=lambda r: ([p.name for p in chosen].index(r.provider), r.keys))
    print(render(results))
    RESULTS_JSON.parent.mkdir(parents=True, exist_ok=True)
    RESULTS_JSON.write_text(json.dumps({"ours": OURS, "changes": args.changes,
                                        "results": [asdict(r) for r in results]}, indent=1))
    print(f"wrote {RESULTS_JSON}")
    return 0 if all(r.error is None for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())


def targets(payload: dict[str, Any]) -> list[report.Target]:
    """At the largest state: our median commit time vs Spark RocksDB with changelog (<= 1.0);
    the note gives each provider's growth from the smallest state to the largest."""
    results = [r for r in payload["results"] if r["error"] is None and r["median_commit_ms"]]
    if not results:
        return []
    largest = max(r["keys"] for r in results)
    at_largest = {r["provider"]: r["median_commit_ms"] for r in results if r["keys"] == largest}
    ours = at_largest.get(OURS)
    value = report.ratio(ours, at_largest.get(report.SPARK_ROCKSDB_CHANGELOG))
    growth = []
    for provider in dict.fromkeys(r["provider"] for r in results):
        rows = sorted((r for r in results if r["provider"] == provider), key=lambda r: r["keys"])
        if len(rows) >= 2:
            growth.append(f"{provider} "
                          f"{rows[-1]['median_commit_ms'] / rows[0]['median_commit_ms']:.2f}")
    return [report.Target(
        benchmark="commit_scaling",
        name=f"commit time at {largest:,} keys ({payload['changes']:,} changes/batch)",
        unit="ms", ours=ours, compared_to=report.SPARK_ROCKSDB_CHANGELOG, ratio=value,
        goal=1.0,
        baselines={k: v for k, v in at_largest.items() if k != OURS},
        note="commit growth largest/smallest state: " + ", ".join(growth))]

"""Restore: the first batch after a restart on a fresh executor, with 1M keys of state.

    python -m benchmarks.restore            # 1,000,000 keys, 3 restores per provider
    python -m benchmarks.restore --quick    # 100,000 keys, 2 restores

Per provider, a build process runs a streaming `groupBy(key)` count/sum (update mode,
local[2], 8 shuffle partitions) that inserts every key over 4 batches and then updates
random keys over 6 more, so each provider ends in its own steady state (snapshots and
changelogs as it makes them), and stops. Then each restore is a FRESH process (new JVM, new
executor, for ours new workers and an empty localDir) that restarts the query on a copy of
that checkpoint with one small new input file: its single batch must load the whole state
before it can answer. The figure is that batch's duration (`durationMs.triggerExecution`),
median over the restores; the state operator's custom metrics (load times where the
provider reports them) are kept in `benchmarks/results/restore.json`.
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
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks import report
from benchmarks.child import run_module_child
from benchmarks.macro import (
    OURS,
    PROVIDERS,
    BatchMetrics,
    Provider,
    batch_metrics,
    insert_then_update,
    select_provider,
    start_aggregation,
    write_batches,
)
from state_store.spark import configure

RESULTS_JSON = report.RESULTS_DIR / "restore.json"
INSERT_BATCHES, UPDATE_BATCHES, UPDATES_PER_BATCH, PROBE_ROWS = 4, 6, 20_000, 1_000


@dataclass
class ProviderResult:
    provider: str
    build_s: float = 0.0
    restores: list[BatchMetrics] = field(default_factory=list)
    median_restore_ms: float | None = None
    state_rows: int | None = None
    error: str | None = None


# -------------------------------------------------------------------------------- input


def write_input(input_dir: Path, keys: int, seed: int) -> Path:
    """The build's batches into `input_dir`; returns the probe file, written later."""
    write_batches(input_dir, insert_then_update(keys, INSERT_BATCHES, UPDATE_BATCHES,
                                                UPDATES_PER_BATCH, seed))
    rng = np.random.default_rng(seed + 1)
    probe = input_dir.parent / "probe.parquet"  # its own name: a file source keys on names
    pq.write_table(pa.table({"key": rng.integers(0, keys, size=PROBE_ROWS, dtype=np.int64),
                             "value": np.ones(PROBE_ROWS, dtype=np.int64)}), probe)
    return probe


# ----------------------------------------------------------------- one process, one query


def run_query(provider: Provider, input_dir: Path, checkpoint: Path, local_dir: Path,
              timeout_s: float) -> list[BatchMetrics]:
    """One SparkSession in this process: the aggregation until its input is consumed."""
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master("local[2]").appName("pyrocks-restore")
               .config("spark.sql.shuffle.partitions", "8")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.memory", "4g"))
    spark = configure(builder, localDir=str(local_dir)).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        select_provider(spark, provider)
        query = start_aggregation(spark, input_dir, str(checkpoint))
        if not query.awaitTermination(timeout_s):
            query.stop()
            raise TimeoutError(f"{provider.name}: query not done after {timeout_s:.0f} s")
        return batch_metrics(query.recentProgress)
    finally:
        spark.stop()


def child(spec: dict[str, Any]) -> int:
    provider = next(p for p in PROVIDERS if p.name == spec["provider"])
    batches = run_query(provider, Path(spec["input"]), Path(spec["checkpoint"]),
                        Path(spec["local_dir"]), spec["timeout_s"])
    print(json.dumps({"batches": [asdict(b) for b in batches]}))
    return 0


def in_fresh_process(provider: Provider, input_dir: Path, checkpoint: Path,
                     timeout_s: float) -> list[BatchMetrics]:
    """Runs the query in a new interpreter and JVM, with a local dir nothing else has used."""
    with tempfile.TemporaryDirectory(prefix="pyrocks-restore-local-") as local:
        spec = {"provider": provider.name, "input": str(input_dir),
                "checkpoint": str(checkpoint), "local_dir": local, "timeout_s": timeout_s}
        answer, why = run_module_child("benchmarks.restore", spec, timeout_s + 300)
    if answer is None:
        raise RuntimeError(why)
    return [BatchMetrics(**b) for b in answer["batches"]]


# -------------------------------------------------------------------------------- runs


def measure(provider: Provider, input_dir: Path, probe: Path, work: Path, repeats: int,
            timeout_s: float) -> ProviderResult:
    import time

    result = ProviderResult(provider.name)
    pristine = work / f"{provider.name}-built"
    try:
        started = time.monotonic()
        built = in_fresh_process(provider, input_dir, pristine, timeout_s)
        result.build_s = round(time.monotonic() - started, 1)
        if len(built) != INSERT_BATCHES + UPDATE_BATCHES:
            raise RuntimeError(f"build ran {len(built)} batches")
        shutil.copy(probe, input_dir / probe.name)  # newest mtime: each restore's one new file
        for r in range(repeats):
            restored = work / f"{provider.name}-restore-{r}"
            shutil.copytree(pristine, restored)
            batches = in_fresh_process(provider, input_dir, restored, timeout_s)
            if len(batches) != 1:
                raise RuntimeError(f"restore {r} ran {len(batches)} batches, expected 1")
            result.restores.append(batches[0])
            shutil.rmtree(restored)
        result.median_restore_ms = statistics.median(b.duration_ms for b in result.restores)
        result.state_rows = result.restores[-1].state_rows
    except Exception as exc:  # a failing provider is a result, not a crash of the benchmark
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        (input_dir / probe.name).unlink(missing_ok=True)
        shutil.rmtree(pristine, ignore_errors=True)
    return result


def targets(payload: dict[str, Any]) -> list[report.Target]:
    runs = {r["provider"]: r for r in payload["results"] if r["error"] is None}
    ours = runs.get(OURS)
    if ours is None:
        return []
    theirs = runs.get(report.SPARK_ROCKSDB, {}).get("median_restore_ms")
    return [report.Target(
        benchmark="restore",
        name=f"restore {payload['config']['keys']:,} keys on a fresh executor: first batch",
        unit="ms", ours=ours["median_restore_ms"], compared_to=report.SPARK_ROCKSDB,
        ratio=report.ratio(ours["median_restore_ms"], theirs), goal=1.0,
        baselines={k: r["median_restore_ms"] for k, r in runs.items() if k != OURS})]


def render(results: Sequence[ProviderResult]) -> str:
    ours = next((r for r in results if r.provider == OURS and not r.error), None)
    lines = [f"{'provider':<24}{'build s':>9}{'restore ms (each)':>24}{'median':>9}"
             f"{'state rows':>12}{'ours/x':>8}"]
    for r in results:
        if r.error:
            lines.append(f"{r.provider:<24}ERROR {r.error.splitlines()[0][:160]}")
            continue
        each = ", ".join(str(b.duration_ms) for b in r.restores)
        vs = (f"{ours.median_restore_ms / r.median_restore_ms:.2f}"
              if ours and r is not ours and r.median_restore_ms else "-")
        lines.append(f"{r.provider:<24}{r.build_s:>9,.1f}{each:>24}{r.median_restore_ms:>9,.0f}"
                     f"{r.state_rows:>12,}{vs:>8}")
    rows = {r.state_rows for r in results if not r.error}
    if len(rows) > 1:
        lines.append(f"WARNING: providers disagree on restored state rows: {sorted(rows)}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.restore", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="100000 keys, 2 restores")
    parser.add_argument("--providers", default=",".join(p.name for p in PROVIDERS))
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--child", help=argparse.SUPPRESS)  # internal: one query, as JSON
    args = parser.parse_args(argv)
    if args.child:
        return child(json.loads(args.child))
    if args.quick:
        args.keys, args.repeats = 100_000, 2
    chosen = [p for p in PROVIDERS if p.name in args.providers.split(",")]
    with tempfile.TemporaryDirectory(prefix="pyrocks-restore-") as tmp:
        work = Path(tmp)
        probe = write_input(work / "input", args.keys, seed=11)
        results = []
        for provider in chosen:
            print(f"[restore] {provider.name} ...", flush=True)
            results.append(measure(provider, work / "input", probe, work, args.repeats,
                                   args.timeout))
    print(render(results))
    write(args, results)
    return 0 if all(r.error is None for r in results) else 1


def write(args: argparse.Namespace, results: Sequence[ProviderResult]) -> None:
    import pyspark

    payload = {"environment": {"pyspark": pyspark.__version__,
                               "python": platform.python_version(), "cpus": os.cpu_count(),
                               "master": "local[2]", "shuffle_partitions": 8},
               "config": {"keys": args.keys, "repeats": args.repeats,
                          "insert_batches": INSERT_BATCHES, "update_batches": UPDATE_BATCHES,
                          "updates_per_batch": UPDATES_PER_BATCH, "probe_rows": PROBE_ROWS},
               "results": [asdict(r) for r in results]}
    RESULTS_JSON.parent.mkdir(parents=True, exist_ok=True)
    RESULTS_JSON.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"wrote {RESULTS_JSON}")


if __name__ == "__main__":
    sys.exit(main())

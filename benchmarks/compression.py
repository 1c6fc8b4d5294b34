"""Compression of our RocksDB files: batch time and state size on disk, side by side.

    python -m benchmarks.compression            # 1M keys of state, 5 rounds (~5 min on 2 cores)
    python -m benchmarks.compression --quick    # 100k keys (~2 min)

The aggregation of macro.py (its input, session and run helpers: local[2], 8 shuffle
partitions, noop sink, one Parquet file per batch) with a value shaped like an aggregation's
state: `groupBy(key)` count, sum and max of an amount, and the max of a page path (a string
of ~25 bytes). `--insert-batches` batches insert every key, then `--update-batches` batches
update `--updates` random keys each. Variants: ours with `pyrocks.compression` = none,
snappy, lz4 (the default) and zstd, and Spark's RocksDBStateStoreProvider (its default,
lz4). After one discarded warm-up run, a round runs every variant once, in turn (each round
starting with the next), on a fresh checkpoint; rounds repeat (`--rounds`) because one run's
batch times swing by +-25% here.

Per run: median batch time and commit time of the update batches after the first (the
state at full size), median time of the insert batches after the first (`load`); after the
run, the bytes of the checkpoint's `state/` directory, and the bytes of the SST files of
each store's latest snapshot (ours: its snapshot record; Spark's: its latest `<v>.zip`).
Each figure is the median over the rounds; ratios vs our `none` and vs Spark RocksDB.
Results: a table on stdout and `benchmarks/results/compression.json`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from benchmarks import report
from benchmarks.macro import (
    OURS,
    SPARK_ROCKSDB,
    Config,
    Provider,
    RunResult,
    Workload,
    build_session,
    file_stream,
    insert_then_update,
    run_one,
    write_batches,
)
from state_store.format.manifest import SNAPSHOT_DIR, SnapshotDescriptor, parse_snapshot_name
from state_store.options import DEFAULT_COMPRESSION, PREFIX
from state_store.spark import PROVIDER_CLASS

RESULTS_JSON = report.RESULTS_DIR / "compression.json"
COMPRESSION_KEY = PREFIX + "compression"
NONE = f"{OURS}-none"
SECTIONS = ("books", "garden", "kitchen", "toys", "music", "sports", "tools", "shoes")
METRICS = ("batch_ms", "commit_ms", "load_ms", "state_bytes", "snapshot_sst_bytes")


@dataclass(frozen=True)
class Variant:
    provider: Provider  # named after the variant: run_one prints and files runs by name
    compression: str | None  # ours: the option's value; None: Spark's provider as it comes


@dataclass
class Round:
    batch_ms: float | None
    commit_ms: float | None
    load_ms: float | None
    state_bytes: int | None
    snapshot_sst_bytes: int | None
    state_rows: int | None
    wall_s: float
    error: str | None


@dataclass
class VariantResult:
    name: str
    compression: str
    rounds: list[Round] = field(default_factory=list)
    medians: dict[str, float | None] = field(default_factory=dict)
    ratios: dict[str, dict[str, float | None]] = field(default_factory=dict)  # vs -> metric


# ---------------------------------------------------------------------------------- input


def state_input(out_dir: Path, keys: int, insert_batches: int, update_batches: int,
                updates: int, seed: int) -> None:
    """macro's insert-then-update batches, with an amount and a page path per row."""
    rng = np.random.default_rng([seed, keys])
    tables = []
    for table in insert_then_update(keys, insert_batches, update_batches, updates, seed):
        n = table.num_rows
        section = pa.array(np.array([f"/shop/{s}/item-" for s in SECTIONS])
                           [rng.integers(0, len(SECTIONS), n)])
        item = pc.cast(pa.array(rng.integers(0, 1_000_000, n)), pa.string())
        tables.append(pa.table({"key": table["key"], "value": rng.integers(1, 100_000, n),
                                "page": pc.binary_join_element_wise(section, item, "")}))
    write_batches(out_dir, tables)


def start_state_aggregation(spark: Any, input_dir: Path, checkpoint: str) -> Any:
    from pyspark.sql import functions as F

    stats = (file_stream(spark, input_dir, "key LONG, value LONG, page STRING").groupBy("key")
             .agg(F.count("*").alias("n"), F.sum("value").alias("total"),
                  F.max("value").alias("largest"), F.max("page").alias("page")))
    return (stats.writeStream.outputMode("update").format("noop")
            .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())


# ---------------------------------------------------------------------------- disk sizes


def tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def ours_snapshot_sst_bytes(state: Path) -> int:
    """SST bytes of each store's latest snapshot, from its snapshot record."""
    total = 0
    for records in state.rglob(SNAPSHOT_DIR):
        named = [(parse_snapshot_name(p.name), p) for p in records.glob("*.json")]
        versions = [(name[0], path) for name, path in named if name is not None]
        if versions:
            path = max(versions)[1]
            snapshot = SnapshotDescriptor.from_json(path.read_bytes(), str(path))
            total += sum(f.size for f in snapshot.files if f.local_name.endswith(".sst"))
    return total


def spark_snapshot_sst_bytes(state: Path) -> int:
    """SST bytes of each store's latest version, from the `metadata` in its `<v>.zip`."""
    total = 0
    for store in {z.parent for z in state.rglob("*.zip")}:
        latest = max(store.glob("*.zip"), key=lambda z: int(z.stem.split("_")[0]))
        with zipfile.ZipFile(latest) as zipped:
            metadata = json.loads(zipped.read("metadata").decode().split("\n", 1)[1])
        total += sum(f["sizeBytes"] for f in metadata["sstFiles"])
    return total


# ------------------------------------------------------------------------------------ run


def run_round(spark: Any, variant: Variant, input_dir: Path, cfg: Config, inserts: int,
              kept: Path) -> Round:
    """One run through macro.run_one, which deletes its own checkpoint: the query checkpoints
    at `kept` instead, measured here and then deleted."""
    if variant.compression is None:
        spark.conf.unset(COMPRESSION_KEY)
    else:
        spark.conf.set(COMPRESSION_KEY, variant.compression)
    workload = Workload("aggregation", input_dir, cfg.keys,
                        lambda s, src, _: start_state_aggregation(s, src, str(kept)))
    result: RunResult = run_one(spark, workload, variant.provider, cfg, kept.parent)
    loads = [b.duration_ms for b in result.batches[1:inserts]]  # the first also starts up
    state, ok = kept / "state", result.error is None
    sst = spark_snapshot_sst_bytes if variant.compression is None else ours_snapshot_sst_bytes
    measured = Round(result.median_batch_ms, result.median_commit_ms,
                     statistics.median(loads) if loads else None,
                     tree_bytes(state) if ok else None, sst(state) if ok else None,
                     result.final_state_rows, result.wall_s, result.error)
    shutil.rmtree(kept, ignore_errors=True)
    return measured


def summarize(results: Sequence[VariantResult]) -> None:
    for r in results:
        good = [asdict(x) for x in r.rounds if x.error is None]
        values = {m: [g[m] for g in good if g[m] is not None] for m in METRICS}
        r.medians = {m: statistics.median(v) if v else None for m, v in values.items()}
    by_name = {r.name: r for r in results}
    for r in results:
        for baseline in (NONE, report.SPARK_ROCKSDB):
            if baseline in by_name and baseline != r.name:
                r.ratios[baseline] = {m: report.ratio(r.medians[m], by_name[baseline].medians[m])
                                      for m in METRICS}


def render(results: Sequence[VariantResult]) -> str:
    header = (f"{'variant':<16}{'batch p50':>10}{'commit p50':>11}{'load p50':>9}"
              f"{'state/ MiB':>11}{'snap SST MiB':>13}{'/none: batch':>13}{'state':>6}{'SST':>6}"
              f"{'/spark: batch':>14}{'state':>6}{'SST':>6}")
    lines = [header, "-" * len(header)]
    for r in results:
        m = r.medians
        vs = [_r(r.ratios.get(b, {}).get(k)) for b in (NONE, report.SPARK_ROCKSDB)
              for k in ("batch_ms", "state_bytes", "snapshot_sst_bytes")]
        lines.append(f"{r.name:<16}{_f(m['batch_ms']):>10}{_f(m['commit_ms']):>11}"
                     f"{_f(m['load_ms']):>9}{_mib(m['state_bytes']):>11}"
                     f"{_mib(m['snapshot_sst_bytes']):>13}{vs[0]:>13}{vs[1]:>6}{vs[2]:>6}"
                     f"{vs[3]:>14}{vs[4]:>6}{vs[5]:>6}")
        lines.append(f"    rounds, batch ms: {[x.batch_ms for x in r.rounds]}")
        lines.extend(f"    ERROR: {x.error.strip().splitlines()[0][:160]}"
                     for x in r.rounds if x.error)
    return "\n".join(lines)


def _f(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def _mib(value: float | None) -> str:
    return "n/a" if value is None else f"{value / 2**20:,.1f}"


def _r(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compression", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--updates", type=int, default=100_000, help="keys per update batch")
    parser.add_argument("--insert-batches", type=int, default=4)
    parser.add_argument("--update-batches", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--compressions", default="none,snappy,lz4,zstd")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds per run")
    parser.add_argument("--driver-memory", default="8g")
    parser.add_argument("--quick", action="store_true", help="100k keys, 10k updates/batch")
    args = parser.parse_args(argv)
    if args.quick:
        args.keys, args.updates = 100_000, 10_000
    # run_one's warmup: every insert batch and the first update batch
    cfg = Config(rows=args.updates, keys=args.keys,
                 batches=args.insert_batches + args.update_batches,
                 warmup=args.insert_batches + 1, seed=26, timeout_s=args.timeout,
                 driver_memory=args.driver_memory, workloads=("aggregation",), providers=())
    variants = [Variant(Provider(f"{OURS}-{c}", PROVIDER_CLASS), c)
                for c in args.compressions.split(",")]
    variants.append(Variant(Provider(report.SPARK_ROCKSDB, SPARK_ROCKSDB), None))
    results = [VariantResult(v.provider.name, v.compression or "lz4 (Spark's default)")
               for v in variants]
    with tempfile.TemporaryDirectory(prefix="pyrocks-compression-") as tmp:
        work = Path(tmp)
        state_input(work / "input", args.keys, args.insert_batches, args.update_batches,
                    args.updates, cfg.seed)
        spark = build_session(cfg, work)
        try:
            spark_version = spark.version
            print("warm-up run (discarded)", flush=True)
            run_round(spark, variants[-1], work / "input", cfg, args.insert_batches,
                      work / "kept" / "warm-up")
            for index in range(args.rounds):  # each round starts with the next variant
                print(f"round {index + 1}/{args.rounds}", flush=True)
                turn = index % len(variants)
                for variant, result in zip(variants[turn:] + variants[:turn],
                                           results[turn:] + results[:turn], strict=True):
                    result.rounds.append(run_round(spark, variant, work / "input", cfg,
                                                   args.insert_batches,
                                                   work / "kept" / result.name))
        finally:
            spark.stop()
    summarize(results)
    print(f"\n{args.keys:,} keys, {args.updates:,} updates/batch, {args.rounds} rounds; "
          "times in ms (median of the rounds' medians)\n" + render(results))
    RESULTS_JSON.parent.mkdir(parents=True, exist_ok=True)
    RESULTS_JSON.write_text(json.dumps({
        "spark": spark_version, "config": {**vars(args), "seed": cfg.seed},
        "default_compression": DEFAULT_COMPRESSION,
        "results": [asdict(r) for r in results]}, indent=1) + "\n")
    print(f"wrote {RESULTS_JSON}")
    for r in results:
        for x in r.rounds:
            if x.error is None and x.state_rows != args.keys:
                print(f"WARNING: {r.name}: final state rows {x.state_rows}, expected {args.keys}")
    return 1 if any(x.error for r in results for x in r.rounds) else 0


if __name__ == "__main__":
    sys.exit(main())


def targets(payload: dict[str, Any]) -> list[report.Target]:
    """Our default compression vs Spark RocksDB (same lz4) at the same state: median batch
    time, bytes of state/ and of the latest snapshot's SSTs (<= 1.0 each); the other
    compressions of ours as baselines."""
    runs = {r["name"]: r["medians"] for r in payload["results"]}
    ours = runs.get(f"pyrocks-{payload['default_compression']}")
    if not ours:
        return []
    keys = payload["config"]["keys"]
    found = []
    for metric, what, unit in (("batch_ms", "median batch time", "ms"),
                               ("state_bytes", "bytes of state/", "MiB"),
                               ("snapshot_sst_bytes", "latest snapshot SST bytes", "MiB")):
        scale = 1 if unit == "ms" else 2**20
        shown = {name: None if m[metric] is None else round(m[metric] / scale, 1)
                 for name, m in runs.items() if m is not ours}
        found.append(report.Target(
            benchmark="compression",
            name=f"{keys:,} keys, compression {payload['default_compression']}: {what}",
            unit=unit, ours=None if ours[metric] is None else round(ours[metric] / scale, 1),
            compared_to=report.SPARK_ROCKSDB,
            ratio=report.ratio(ours[metric], runs.get(report.SPARK_ROCKSDB, {}).get(metric)),
            goal=1.0, baselines=shown))
    return found

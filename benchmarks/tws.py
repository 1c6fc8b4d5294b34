"""transformWithState: batch time on our provider beside Spark's RocksDB provider, the only
one Spark itself accepts for it (its HDFS provider cannot serve it).

    python -m benchmarks.tws            # 50k keys, 10k updates a batch, 10 batches, 3 rounds
    python -m benchmarks.tws --quick    # 20k keys, 5 batches, 1 round

The query is what a PySpark user writes: `transformWithStateInPandas` keeping, per key, a
running count (value state) and the last value per v % 8 bucket (map state), emitting the
count. Input: macro.py's insert-then-update batches (every key inserted over the first
batches, then random keys updated), read one Parquet file per batch, noop sink, local[2],
8 shuffle partitions. Each round runs both providers in turn (each round starting with the
next), each run in a process and JVM of its own (`benchmarks/child.py`: a JVM another
provider used first skews the next one's batches) on a fresh checkpoint; per run the median
batch and commit time of the measured batches (the first `--warmup` discarded); figures
are medians over rounds, as one run swings by +-25% here. Every state operation crosses
from the Python worker to the JVM's state server and then into the provider, so Python's
share of a batch is large and the same for both: the ratio is of whole batches, as a user
meets them.
Results: a table on stdout and `benchmarks/results/tws.json`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd

from benchmarks import report
from benchmarks.child import answered
from benchmarks.macro import (
    OURS,
    PROVIDERS,
    Config,
    RunResult,
    Workload,
    file_stream,
    in_turn,
    insert_then_update,
    median_of,
    run_child,
    run_isolated,
    write_batches,
)

RESULTS_JSON = report.RESULTS_DIR / "tws.json"
BASELINE = report.SPARK_ROCKSDB


def tws_input(out_dir: Path, cfg: Config) -> int:
    inserts = max(cfg.batches // 3, 1)
    tables = insert_then_update(cfg.keys, inserts, cfg.batches - inserts, cfg.rows, cfg.seed)
    write_batches(out_dir, tables)
    return cfg.keys


def start_tws(spark: Any, input_dir: Path, checkpoint: str) -> Any:
    from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

    class CountAndLast(StatefulProcessor):
        def init(self, handle: StatefulProcessorHandle) -> None:
            self.count = handle.getValueState("count", "n long")
            self.last = handle.getMapState("last", "bucket int", "value long")

        def handleInputRows(self, key, rows: Iterator[pd.DataFrame],
                            timerValues) -> Iterator[pd.DataFrame]:
            count = self.count.get()[0] if self.count.exists() else 0
            for frame in rows:
                count += len(frame)
                self.last.updateValue((int(key[0] % 8),), (int(frame["value"].iloc[-1]),))
            self.count.update((count,))
            yield pd.DataFrame({"key": [key[0]], "n": [count]})

        def close(self) -> None:
            pass

    counts = file_stream(spark, input_dir, "key LONG, value LONG").groupBy("key") \
        .transformWithStateInPandas(CountAndLast(), "key long, n long", "Update", "None")
    return (counts.writeStream.outputMode("update").format("noop")
            .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())


def parse_args(argv: Sequence[str] | None) -> Config:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tws", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=50_000)
    parser.add_argument("--rows", type=int, default=10_000, help="updates per batch")
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=4,
                        help="batches discarded per run (the inserts and one more)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.keys, args.rows, args.batches, args.warmup, args.rounds = 20_000, 5_000, 5, 2, 1
    return Config(rows=args.rows, keys=args.keys, batches=args.batches, warmup=args.warmup,
                  seed=42, timeout_s=1800.0, driver_memory="4g", workloads=("tws",),
                  providers=(OURS, BASELINE), rounds=args.rounds)


def main(argv: Sequence[str] | None = None) -> int:
    if answered(argv, lambda spec: run_child(spec, start_tws)):
        return 0
    cfg = parse_args(argv)
    providers = [p for p in PROVIDERS if p.name in cfg.providers]
    runs: dict[str, list[RunResult]] = {p.name: [] for p in providers}
    with tempfile.TemporaryDirectory(prefix="pyrocks-tws-") as tmp:
        work = Path(tmp)
        workload = Workload("tws", work / "input", tws_input(work / "input", cfg), start_tws)
        for index in range(cfg.rounds):
            for provider in in_turn(providers, index):
                result, _ = run_isolated(workload, provider, cfg, work / f"round-{index}",
                                         index, module="benchmarks.tws")
                runs[provider.name].append(result)
    summary = {name: {"median_batch_ms": median_of([r.median_batch_ms for r in found]),
                      "median_commit_ms": median_of([r.median_commit_ms for r in found]),
                      "errors": [r.error for r in found if r.error]}
               for name, found in runs.items()}
    ours, theirs = summary[OURS], summary[BASELINE]
    batch_ratio = report.ratio(ours["median_batch_ms"], theirs["median_batch_ms"])
    print(f"\n== transformWithStateInPandas: {cfg.keys:,} keys, {cfg.rows:,} updates a batch, "
          f"{cfg.batches} batches (first {cfg.warmup} discarded), {cfg.rounds} round(s)")
    for name, row in summary.items():
        print(f"{name:<16} batch p50 {row['median_batch_ms']} ms, commit p50 "
              f"{row['median_commit_ms']} ms" + (f", ERRORS {row['errors']}" if row["errors"]
                                                  else ""))
    print(f"ours / {BASELINE} batch: {batch_ratio}")
    RESULTS_JSON.parent.mkdir(parents=True, exist_ok=True)
    RESULTS_JSON.write_text(json.dumps({
        "config": asdict(cfg), "rounds": cfg.rounds, "summary": summary,
        "runs": {name: [asdict(r) for r in found] for name, found in runs.items()},
        "batch_ratio": batch_ratio}, indent=2) + "\n")
    print(f"wrote {RESULTS_JSON}")
    return 1 if any(row["errors"] for row in summary.values()) else 0


def targets(payload: dict[str, Any]) -> list[report.Target]:
    """transformWithState batch time vs Spark RocksDB (<= 1.0)."""
    ours, theirs = payload["summary"][OURS], payload["summary"][BASELINE]
    return [report.Target(
        "tws", "transformWithStateInPandas median batch time", "ms",
        ours["median_batch_ms"], BASELINE, payload["batch_ratio"], 1.0,
        baselines={BASELINE: theirs["median_batch_ms"]})]


if __name__ == "__main__":
    sys.exit(main())

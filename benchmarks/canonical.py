"""Canonical savepoints: taking one, restoring it, rescaling it, beside the native format.

    python -m benchmarks.canonical            # 1M keys
    python -m benchmarks.canonical --quick    # 100k keys

One Spark session (local[2], 8 shuffle partitions, this store configured) builds the same
streaming aggregation (`groupBy(key)` count/sum over 4 batches that insert every key) twice:
on this provider and on Spark's RocksDBStateStoreProvider. Then, timed on the built
checkpoints (medians of `--rounds`, default 3):

  native savepoint       `savepoint(ours)`: duplicated files, no Spark job
  canonical of ours      `savepoint(ours, format="canonical")`: state data source -> Parquet
  canonical of RocksDB   the same of Spark's RocksDB provider's checkpoint
  native restore         `restore(native savepoint)`: Spark's files and one seed per store
  canonical restore      `restore(canonical)`: every row written into our stores, 8 partitions
  rescale 8 -> 5         `restore(canonical, partitions=5)`
  exit to RocksDB        `restore(canonical, provider="rocksdb")`

Reported as seconds per million rows and as ratios canonical / native. A native restore
writes no state (each store's first open copies it), so its ratio is not a like-for-like
cost; it is what a user saves by staying native.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks import report
from benchmarks.macro import insert_then_update, start_aggregation, write_batches
from state_store.savepoint import restore, savepoint
from state_store.spark import configure

RESULTS = report.RESULTS_DIR / "canonical.json"
PROVIDER_KEY = "spark.sql.streaming.stateStore.providerClass"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def build(spark: Any, work: Path, keys: int, provider: str | None) -> Path:
    """A checkpoint of the aggregation over `keys` keys, run on `provider` (None: ours)."""
    name = "rocksdb" if provider else "pyrocks"
    source = work / f"input-{name}"
    write_batches(source, insert_then_update(keys, 4, 0, 0, seed=7))
    checkpoint = work / f"checkpoint-{name}"
    previous = spark.conf.get(PROVIDER_KEY)
    if provider:
        spark.conf.set(PROVIDER_KEY, provider)
    try:
        start_aggregation(spark, source, str(checkpoint)).awaitTermination()
    finally:
        spark.conf.set(PROVIDER_KEY, previous)
    return checkpoint


def timed(step: Callable[[], Any]) -> float:
    started = time.perf_counter()
    step()
    return time.perf_counter() - started


def steps(spark: Any, ours: Path, theirs: Path, at: Path) -> dict[str, Callable[[], Any]]:
    """One round's steps, writing their targets under `at`."""
    return {
        "native savepoint": lambda: savepoint(str(ours), str(at / "native")),
        "canonical of ours": lambda: savepoint(str(ours), str(at / "canonical"),
                                               format="canonical", spark=spark),
        "canonical of RocksDB": lambda: savepoint(
            str(theirs), str(at / "canonical-rocksdb"), format="canonical", spark=spark),
        "native restore": lambda: restore(str(at / "native"), str(at / "r1")),
        "canonical restore": lambda: restore(str(at / "canonical"), str(at / "r2"),
                                             spark=spark),
        "rescale 8 -> 5": lambda: restore(str(at / "canonical"), str(at / "r3"),
                                          partitions=5, spark=spark),
        "exit to RocksDB": lambda: restore(str(at / "canonical"), str(at / "r4"),
                                           provider="rocksdb", spark=spark),
    }


def measure(spark: Any, work: Path, keys: int, rounds: int) -> dict[str, list[float]]:
    """Each step's seconds in each of `rounds` rounds (each round writes new targets of the
    same checkpoints; single rounds swing by a quarter on a 2-core machine)."""
    ours = build(spark, work, keys, None)
    theirs = build(spark, work, keys, ROCKSDB)
    samples: dict[str, list[float]] = {}
    for r in range(rounds):
        at = work / f"round-{r}"
        for step, run in steps(spark, ours, theirs, at).items():
            samples.setdefault(step, []).append(timed(run))
        shutil.rmtree(at, ignore_errors=True)
    return samples


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100k keys instead of 1M")
    parser.add_argument("--keys", type=int, help="the number of keys (overrides --quick)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per step (median)")
    args = parser.parse_args(argv)
    keys = args.keys or (100_000 if args.quick else 1_000_000)
    from pyspark.sql import SparkSession

    work = Path(tempfile.mkdtemp(prefix="pyrocks-canonical-"))
    builder = (SparkSession.builder.master("local[2]").appName("pyrocks-canonical-benchmark")
               .config("spark.sql.shuffle.partitions", "8")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.memory", "4g"))
    spark = configure(builder, localDir=str(work / "pool")).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        samples = measure(spark, work, keys, args.rounds)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    seconds = {step: statistics.median(values) for step, values in samples.items()}
    payload = {"keys": keys, "rounds": samples, "seconds": seconds,
               "seconds_per_million_rows": {k: v * 1e6 / keys for k, v in seconds.items()}}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(payload, indent=1))
    print(f"canonical savepoints, {keys:,} keys (8 partitions), s per million rows:")
    for step, value in payload["seconds_per_million_rows"].items():
        print(f"  {step:<22} {value:8.2f}")
    print("\n" + report.render(targets(payload)))
    return 0


def targets(payload: dict[str, Any]) -> list[report.Target]:
    """Ours against Spark's RocksDB provider through the same steps: reading each through
    the state data source, writing each through its provider API. (Canonical against
    native is printed beside, not a target: canonical rewrites every row by design.)"""
    per = payload["seconds_per_million_rows"]
    rows = [("canonical savepoint: of ours vs of Spark RocksDB", "canonical of ours",
             "canonical of RocksDB"),
            ("canonical restore: onto ours vs onto Spark RocksDB", "canonical restore",
             "exit to RocksDB")]
    return [report.Target(
        benchmark="canonical", name=f"{label}, {payload['keys']:,} keys", unit="s/M",
        ours=round(per[step], 2), compared_to="Spark RocksDB",
        ratio=report.ratio(per[step], per[base]), goal=1.0,
        baselines={"Spark RocksDB": round(per[base], 2)})
        for label, step, base in rows]


if __name__ == "__main__":
    raise SystemExit(main())

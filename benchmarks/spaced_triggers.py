"""A query whose trigger leaves its stores idle between batches, as a processing-time
trigger of a few seconds does: what each provider writes to the checkpoint and what it
spends, batch by batch.

    python -m benchmarks.spaced_triggers             # 1M keys, 3 repeats
    python -m benchmarks.spaced_triggers --quick     # 100k keys, 1 repeat
    python -m benchmarks.spaced_triggers --trigger-seconds 1.5 \
        --store-option snapshotWhenIdleSeconds=0.25  # another trigger; an option of ours

Ours takes a store's snapshot once it has been idle `snapshotWhenIdleSeconds` (1 s) after a
commit (runtime/idle_snapshots.py), so that `stop()` has no final snapshot left to take.
Under a trigger spaced wider than that, every batch's version of every store is
snapshotted, where `snapshotInterval` (10) alone would snapshot one in ten. This measures
that trade beside ours with idle snapshots off (`pyrocks-idle-off`) and Spark's providers,
and what compressing our changelogs saves and costs (`pyrocks-uncompressed`: none).

Per provider and repeat (the providers take turns at going first), in a process, JVM and
worker pool of its own (`benchmarks/child.py`; local[2], 4 shuffle partitions): a
`groupBy(key)` sum over Parquet input, one file per batch (the first inserts every key,
each later one updates UPDATES_PER_BATCH random keys), trigger every TRIGGER_SECONDS (or
--trigger-seconds); --store-option NAME=VALUE sets an option of ours for each of our runs,
under the options a variant sets. After
the last batch and one more trigger interval, before `stop()`: the files and bytes under
the checkpoint's `state/` (nothing is old enough for any provider to delete yet), and the
CPU the driver JVM and its workers used for the whole run. Batch times are medians of the
update batches. Results: a table on stdout and `benchmarks/results/spaced_triggers.json`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks import procfs
from benchmarks.child import answered, run_module_child
from benchmarks.macro import (
    OURS,
    PROVIDERS,
    add_store_option,
    file_stream,
    in_turn,
    insert_then_update,
    select_provider,
    split,
    store_options,
    write_batches,
)
from state_store.spark import configure

TRIGGER_SECONDS = 3
UPDATES_PER_BATCH = 100_000
IDLE_OFF = f"{OURS}-idle-off"
UNCOMPRESSED = f"{OURS}-uncompressed"
NAMES = (OURS, IDLE_OFF, UNCOMPRESSED, "spark-rocksdb", "spark-rocksdb-changelog", "spark-hdfs")
# A name that is not a provider's: the provider it runs and the options it runs it with.
VARIANTS = {IDLE_OFF: (OURS, {"snapshotWhenIdleSeconds": "0"}),
            UNCOMPRESSED: (OURS, {"changelogCompression": "none"})}
RESULTS = Path(__file__).resolve().parent / "results" / "spaced_triggers.json"


@dataclass
class Footprint:
    """What one run left under the checkpoint's `state/` and spent."""

    provider: str
    files: int
    bytes: int
    cpu_s: float  # the driver JVM's and its workers' whole run
    batch_ms: float  # median of the update batches


def state_footprint(state_dir: Path) -> tuple[int, int]:
    """Files under `state_dir` and their bytes, Hadoop's `.crc` side files included."""
    sizes = [p.stat().st_size for p in state_dir.rglob("*") if p.is_file()]
    return len(sizes), sum(sizes)


def run_child(spec: dict[str, Any]) -> dict[str, Any]:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    name, work, batches = spec["provider"], Path(spec["work"]), spec["batches"]
    provider, extra = VARIANTS.get(name, (name, {}))
    ours = spec["store_options"] if provider == OURS else {}
    options = {"localDir": str(work / "pool"), **ours, **extra}
    trigger_seconds = spec["trigger_seconds"]
    builder = (SparkSession.builder.master("local[2]").appName("pyrocks-spaced-triggers")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.ui.enabled", "false")
               .config("spark.driver.memory", "4g"))
    spark = configure(builder, **options).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    select_provider(spark, next(p for p in PROVIDERS if p.name == provider))
    checkpoint = work / "checkpoint"
    query = (file_stream(spark, Path(spec["input"]), "key long, value long")
             .groupBy("key").agg(F.sum("value").alias("t"))
             .writeStream.outputMode("update").format("noop")
             .option("checkpointLocation", str(checkpoint))
             .trigger(processingTime=f"{trigger_seconds} seconds").start())
    with_input: list[Any] = []
    while len(with_input) < batches:
        if query.exception() is not None:
            raise RuntimeError(f"{name}: {query.exception()}")
        time.sleep(0.2)
        with_input = [p for p in query.recentProgress if p.numInputRows > 0]
    time.sleep(trigger_seconds)  # the last batch's idle interval, as the others had
    jvm = int(spark.sparkContext._jvm.ProcessHandle.current().pid())
    cpu = procfs.cpu_seconds(jvm) + sum(map(procfs.cpu_seconds, procfs.workers_of(jvm)))
    files, size = state_footprint(checkpoint / "state")
    query.stop()
    spark.stop()
    return asdict(Footprint(name, files, size, round(cpu, 1),
                            statistics.median(p.batchDuration for p in with_input[1:])))


@dataclass(frozen=True)
class Run:
    """What every provider's run shares."""

    keys: int
    batches: int
    trigger_seconds: float
    store_options: dict[str, str]  # ours only: `configure`'s keyword arguments


def measure(names: Sequence[str], run: Run, repeats: int,
            scratch: Path) -> dict[str, list[Footprint]]:
    input_dir = scratch / "input"
    write_batches(input_dir, insert_then_update(run.keys, 1, run.batches - 1,
                                                UPDATES_PER_BATCH, 7))
    runs: dict[str, list[Footprint]] = {name: [] for name in names}
    for repeat in range(repeats):
        for name in in_turn(list(names), repeat):
            work = scratch / f"{name}-{repeat}"
            answer, error = run_module_child(
                "benchmarks.spaced_triggers",
                {"provider": name, "work": str(work), "input": str(input_dir),
                 "batches": run.batches, "trigger_seconds": run.trigger_seconds,
                 "store_options": run.store_options}, 900.0)
            shutil.rmtree(work, ignore_errors=True)
            if answer is None:
                raise RuntimeError(f"{name}, repeat {repeat}: {error}")
            runs[name].append(Footprint(**answer))
            print(f"{name} repeat {repeat}: {answer}", flush=True)
    return runs


def summary(runs: dict[str, list[Footprint]]) -> dict[str, dict[str, float]]:
    """Per provider: the median of each figure over its repeats."""
    return {name: {figure: statistics.median(getattr(run, figure) for run in found)
                   for figure in ("files", "bytes", "cpu_s", "batch_ms")}
            for name, found in runs.items() if found}


def render(medians: dict[str, dict[str, float]], run: Run) -> str:
    lines = [f"{'provider':<26}{'files':>8}{'MB':>9}{'CPU s':>8}{'batch ms':>10}",
             *(f"{name:<26}{m['files']:>8.0f}{m['bytes'] / 2**20:>9.1f}{m['cpu_s']:>8.1f}"
               f"{m['batch_ms']:>10.0f}" for name, m in medians.items())]
    options = "".join(f", {k}={v}" for k, v in run.store_options.items())
    return "\n".join([f"{run.batches} batches, a trigger every {run.trigger_seconds} s{options}:",
                      *lines])


def main(argv: Sequence[str] | None = None) -> int:
    if answered(argv, run_child):
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100k keys, 1 repeat")
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--batches", type=int, default=9, help="the first inserts every key")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--providers", default=",".join(NAMES))
    parser.add_argument("--trigger-seconds", type=float, default=TRIGGER_SECONDS)
    add_store_option(parser)
    args = parser.parse_args(argv)
    keys, repeats = (100_000, 1) if args.quick else (args.keys, args.repeats)
    names = split(args.providers)
    if unknown := [n for n in names if n not in NAMES]:
        parser.error(f"unknown provider {', '.join(unknown)}; known: {', '.join(NAMES)}")
    if args.batches < 2 or repeats < 1 or args.trigger_seconds <= 0:
        parser.error("--batches must be at least 2, --repeats at least 1 and "
                     "--trigger-seconds above 0")
    run = Run(keys, args.batches, args.trigger_seconds,
              store_options(parser, args.store_option))
    with tempfile.TemporaryDirectory(prefix="pyrocks-spaced-") as scratch:
        runs = measure(names, run, repeats, Path(scratch))
    medians = summary(runs)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({**asdict(run), "medians": medians,
                                   "runs": {n: [asdict(r) for r in rs] for n, rs in runs.items()}},
                                  indent=2) + "\n")
    print(render(medians, run))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The end of a query run: what `stop()` costs, what it leaves for the next run, and what
recording the run in the result store adds.

    python -m benchmarks.query_end            # 1M keys, 3 repeats
    python -m benchmarks.query_end --quick    # 100k keys, 1 repeat
    python -m benchmarks.query_end --master "local-cluster[2,1,2048]"  # two executor JVMs
    python -m benchmarks.query_end --partitions 200   # Spark's default: 200 stores to end
    python -m benchmarks.query_end --providers pyrocks \
        --store-option snapshotWhenIdleSeconds=0.25  # ours alone, with an option of ours

Per provider (ours, Spark's RocksDB provider, Spark's HDFS provider; they take turns at
running first) and repeat, in a process and SparkSession of its own (`benchmarks/child.py`:
a JVM another provider used first skews the next one's figures; local[2] unless --master
says otherwise, 8 shuffle partitions unless --partitions does), on a fresh checkpoint:
  run       a `groupBy(key)` count/sum over Parquet input, one file per batch: 4 batches
            insert every key, 2 update 20k random keys each; processing-time trigger,
            `processAllAvailable()`.
  stop      `query.stop()` on the idle query, IDLE_SECONDS after its last batch (a query
            waiting for data). Ours finishes every store before it returns (final
            snapshot of the last committed version; the workers remove the working
            copies behind the answer: runtime/teardown.py), and a store
            idle for snapshotWhenIdleSeconds (1 s; 0.25 s but for the four of a worker that
            committed last) took that snapshot already; Spark's
            providers leave theirs to their next maintenance round.
  restart   one more file (20k updates), then the query again on the same checkpoint with
            `Trigger.AvailableNow`: `start()` to `awaitTermination()` returning, and its
            batch's time (which includes loading the state). Ours also reports how many
            changelogs that load replayed (0 after a finished stop).
  stop after its batch   one more file, the processing-time query again, and `stop()` the
            moment `processAllAvailable()` returns: ours has its final snapshot to take
            then (one memtable flush per store, the stores in parallel). Where the CPU
            went meanwhile, by thread kind of the JVMs and workers (procfs.thread_run_ns),
            and by whole process (threads that ended in it too).
Then, for ours only and in a session of its own: the same run through `run_once` with a
result store (AvailableNow over all files) against the same run started directly: what
waiting for the run's record adds, and when its cleanup is done (the recorder is a process
of its own).

Times are medians over the repeats; ratios are ours / each Spark provider. Results: a table
on stdout and `benchmarks/results/query_end.json`.
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
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from benchmarks import procfs, report
from benchmarks.child import answered, run_module_child
from benchmarks.macro import (
    PROVIDERS,
    Provider,
    add_store_option,
    file_stream,
    in_turn,
    insert_then_update,
    split,
    store_options,
    write_batches,
)
from state_store.results import FileSystemResultStore, run_once
from state_store.spark import configure

NAMES = ("pyrocks", "spark-rocksdb", "spark-hdfs")
UPDATES_PER_BATCH = 20_000
IDLE_SECONDS = 2.0
CHILD_DEADLINE_S = 1800.0
PARTITIONS = 8


@dataclass
class Measure:
    provider: str
    stop_ms: list[float] = field(default_factory=list)
    restart_ms: list[float] = field(default_factory=list)
    restart_batch_ms: list[float] = field(default_factory=list)
    replayed_versions: list[int] = field(default_factory=list)
    stop_after_batch_ms: list[float] = field(default_factory=list)
    # CPU ms per thread kind (JVMs, workers) during the stops right after a batch, summed
    stop_after_batch_cpu_ms: dict[str, float] = field(default_factory=dict)
    # CPU ms of whole processes ("jvm", "workers") during each such stop: threads that end
    # in it counted too (a worker's session thread ends with its store), in /proc's ticks
    stop_after_batch_process_cpu_ms: dict[str, list[float]] = field(default_factory=dict)

    def add_stop_cpu(self, spent: dict[str, float]) -> None:
        for kind, ms in spent.items():
            self.stop_after_batch_cpu_ms[kind] = self.stop_after_batch_cpu_ms.get(kind, 0.0) + ms

    def add_process_cpu(self, before: dict[int, float], after: dict[int, float]) -> None:
        for kind in ("jvm", "workers"):
            pids = [pid for pid in after if procfs.is_worker(pid) == (kind == "workers")]
            spent = sum(after[pid] - before.get(pid, 0.0) for pid in pids) * 1000
            self.stop_after_batch_process_cpu_ms.setdefault(kind, []).append(spent)

    def absorb(self, other: dict[str, Any]) -> None:
        """Adds the figures of another run of the same provider (a `Measure` as a dict)."""
        for name in (f.name for f in fields(self)):
            mine = getattr(self, name)
            if isinstance(mine, list):
                mine.extend(other[name])
        self.add_stop_cpu(other["stop_after_batch_cpu_ms"])
        for kind, spent in other["stop_after_batch_process_cpu_ms"].items():
            self.stop_after_batch_process_cpu_ms.setdefault(kind, []).extend(spent)

    def medians(self) -> dict[str, float | None]:
        return {name: (statistics.median(values) if values else None)
                for name, values in (("stop_ms", self.stop_ms), ("restart_ms", self.restart_ms),
                                     ("restart_batch_ms", self.restart_batch_ms),
                                     ("stop_after_batch_ms", self.stop_after_batch_ms))}


def start_query(spark: Any, input_dir: Path, checkpoint: Path, available_now: bool) -> Any:
    from pyspark.sql import functions as F

    counts = (file_stream(spark, input_dir, "key LONG, value LONG").groupBy("key")
              .agg(F.count("*").alias("n"), F.sum("value").alias("total")))
    writer = (counts.writeStream.outputMode("update").format("noop")
              .option("checkpointLocation", str(checkpoint)))
    return (writer.trigger(availableNow=True) if available_now else writer).start()


def select(spark: Any, provider: Provider) -> None:
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", provider.class_name)


def measure_end(spark: Any, provider: Provider, tables: Sequence[Any], work: Path,
                into: Measure) -> None:
    select(spark, provider)
    input_dir = work / "in"
    shutil.rmtree(input_dir, ignore_errors=True)
    write_batches(input_dir, tables[:-1])
    checkpoint = work / "ckpt"
    query = start_query(spark, input_dir, checkpoint, available_now=False)
    query.processAllAvailable()
    time.sleep(IDLE_SECONDS)
    began = time.perf_counter()
    query.stop()
    into.stop_ms.append((time.perf_counter() - began) * 1000)

    write_batches(input_dir, tables)  # the same files again, plus the last one
    began = time.perf_counter()
    again = start_query(spark, input_dir, checkpoint, available_now=True)
    again.awaitTermination()
    into.restart_ms.append((time.perf_counter() - began) * 1000)
    batch = next(p for p in again.recentProgress if p["numInputRows"] > 0)
    into.restart_batch_ms.append(float(batch["durationMs"]["triggerExecution"]))
    custom = batch["stateOperators"][0].get("customMetrics", {})
    if "pyrocks.replayed_versions" in custom:
        into.replayed_versions.append(int(custom["pyrocks.replayed_versions"]))

    write_batches(input_dir, [*tables, tables[-1]])  # one more file: the same updates again
    query = start_query(spark, input_dir, checkpoint, available_now=False)
    query.processAllAvailable()
    processes = procfs.descendants(os.getpid())
    threads_before = procfs.thread_run_ns(processes)
    processes_before = {pid: procfs.cpu_seconds(pid) for pid in processes}
    began = time.perf_counter()
    query.stop()
    into.stop_after_batch_ms.append((time.perf_counter() - began) * 1000)
    into.add_process_cpu(processes_before, {pid: procfs.cpu_seconds(pid) for pid in processes})
    into.add_stop_cpu(procfs.run_ms_by_kind(threads_before, procfs.thread_run_ns(processes)))


def measure_recording(spark: Any, tables: Sequence[Any], work: Path, repeats: int,
                      results_url: str) -> dict[str, float]:
    """Ours: a run through run_once against the same run started directly, after one
    untimed run (the session's first query compiles its code)."""
    select(spark, PROVIDERS[0])
    input_dir = work / "rec-in"
    write_batches(input_dir, tables)
    direct, recorded, clean = [], [], []
    store = FileSystemResultStore(results_url)
    start_query(spark, input_dir, work / "warm-up", True).awaitTermination()
    for i in range(repeats):
        began = time.perf_counter()
        start_query(spark, input_dir, work / f"direct-{i}", True).awaitTermination()
        direct.append((time.perf_counter() - began) * 1000)
        key = f"bench-{i}"
        began = time.perf_counter()
        run_once(spark, key, lambda i=i: start_query(spark, input_dir, work / f"once-{i}", True))
        recorded.append((time.perf_counter() - began) * 1000)
        while not store.has_clean(key):
            time.sleep(0.02)
        clean.append((time.perf_counter() - began) * 1000)
    return {"direct_ms": statistics.median(direct), "run_once_ms": statistics.median(recorded),
            "until_clean_ms": statistics.median(clean)}


def tables_for(keys: int) -> list[Any]:
    """Every run's input, the same in every process: 4 batches inserting the keys, 3 of
    UPDATES_PER_BATCH updates."""
    return insert_then_update(keys, 4, 3, UPDATES_PER_BATCH, seed=7)


def child_session(master: str, work: Path, partitions: int, options: dict[str, str]) -> Any:
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(master).appName("pyrocks-query-end")
               .config("spark.sql.shuffle.partitions", str(partitions))
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.memory", "6g"))
    spark = configure(builder, localDir=str(work / "pool"), resultStore=str(work / "results"),
                      **options).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run_child(spec: dict[str, Any]) -> dict[str, Any]:
    """One provider's `measure_end`, or ours' `measure_recording` (provider None), in this
    process's own session; its figures as a dict."""
    work = Path(spec["work"])
    work.mkdir(parents=True)
    tables = tables_for(spec["keys"])
    spark = child_session(spec["master"], work, spec["partitions"], spec["store_options"])
    try:
        if spec["provider"] is None:
            return measure_recording(spark, tables, work, spec["repeats"], str(work / "results"))
        provider = next(p for p in PROVIDERS if p.name == spec["provider"] and not p.changelog)
        into = Measure(provider.name)
        measure_end(spark, provider, tables, work, into)
        return asdict(into)
    finally:
        spark.stop()


def in_child(spec: dict[str, Any]) -> dict[str, Any]:
    """`run_child` in a process of its own (`benchmarks/child.py`)."""
    answer, error = run_module_child("benchmarks.query_end", spec, CHILD_DEADLINE_S)
    shutil.rmtree(spec["work"], ignore_errors=True)
    if answer is None:
        raise RuntimeError(f"query_end run {spec['provider'] or 'recording'}: {error}")
    return answer


def main(argv: Sequence[str] | None = None) -> int:
    if answered(argv, run_child):
        return 0
    parser = argparse.ArgumentParser(prog="python -m benchmarks.query_end")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--keys", type=int)
    parser.add_argument("--repeats", type=int)
    parser.add_argument("--master", default="local[2]",
                        help="e.g. local-cluster[2,1,2048]: a restart must find its executors")
    parser.add_argument("--partitions", type=int, default=PARTITIONS,
                        help="shuffle partitions: the stores each stop ends (Spark's default: 200)")
    parser.add_argument("--providers", default=",".join(NAMES),
                        help=f"comma-separated subset of {','.join(NAMES)}")
    add_store_option(parser)
    args = parser.parse_args(argv)
    names = split(args.providers)
    unknown = set(names) - set(NAMES)
    if unknown:
        parser.error(f"--providers: unknown {', '.join(sorted(unknown))}")
    options = store_options(parser, args.store_option)
    keys = args.keys or (100_000 if args.quick else 1_000_000)
    repeats = args.repeats or (1 if args.quick else 3)
    work = Path(tempfile.mkdtemp(prefix="pyrocks-query-end-"))
    try:
        spec = {"keys": keys, "repeats": repeats, "master": args.master,
                "partitions": args.partitions, "store_options": options}
        providers = [p for p in PROVIDERS if p.name in names and not p.changelog]
        measures = {p.name: Measure(p.name) for p in providers}
        for repeat in range(repeats):
            for provider in in_turn(providers, repeat):
                measures[provider.name].absorb(in_child(
                    {**spec, "provider": provider.name,
                     "work": str(work / f"{provider.name}-{repeat}")}))
        recording = in_child({**spec, "provider": None, "work": str(work / "recording")})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    payload = {"benchmark": "query_end", "keys": keys, "repeats": repeats, "master": args.master,
               "partitions": args.partitions, "store_options": options,
               "machine": platform.platform(),
               "measures": {name: {**asdict(m), "median": m.medians()}
                            for name, m in measures.items()},
               "recording": recording}
    report.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (report.RESULTS_DIR / result_name(args.master, args.partitions)).write_text(
        json.dumps(payload, indent=1))
    print(render(payload))
    print(report.render(targets(payload)))
    return 0


def result_name(master: str, partitions: int) -> str:
    """query_end.json for the issue's run (local[2], 8 partitions); other runs beside it."""
    name = "query_end" if master == "local[2]" else "query_end_cluster"
    return f"{name}.json" if partitions == PARTITIONS else f"{name}_{partitions}p.json"


def render(payload: dict[str, Any]) -> str:
    lines = [f"query end, {payload['keys']:,} keys, {payload['repeats']} repeat(s) (medians), "
             f"{payload.get('master', 'local[2]')}, "
             f"{payload.get('partitions', PARTITIONS)} shuffle partitions",
             f"{'provider':<16}{'stop ms':>10}{'restart ms':>12}{'its batch ms':>14}"
             f"{'replayed':>10}{'stop after batch ms':>21}"]
    for name, m in payload["measures"].items():
        med = m["median"]
        replayed = m["replayed_versions"]
        lines.append(f"{name:<16}{med['stop_ms']:>10.0f}{med['restart_ms']:>12.0f}"
                     f"{med['restart_batch_ms']:>14.0f}"
                     f"{(str(max(replayed)) if replayed else '-'):>10}"
                     f"{med['stop_after_batch_ms']:>21.0f}")
    lines.append("CPU during a stop right after a batch, ms per stop, by thread kind (the "
                 "five busiest; threads that ended during it not counted):")
    for name, m in payload["measures"].items():
        spent = sorted(m["stop_after_batch_cpu_ms"].items(), key=lambda kv: -kv[1])[:5]
        lines.append(f"  {name:<14}" + ", ".join(f"{kind} {ms / payload['repeats']:.0f}"
                                                  for kind, ms in spent))
    lines.append("CPU of whole processes during that stop (threads that ended in it too; "
                 "10 ms ticks), ms per stop, median:")
    for name, m in payload["measures"].items():
        spent = m.get("stop_after_batch_process_cpu_ms", {})
        lines.append(f"  {name:<14}" + ", ".join(f"{kind} {statistics.median(ms):.0f}"
                                                  for kind, ms in spent.items() if ms))
    rec = payload["recording"]
    lines.append(f"ours, AvailableNow over all input: direct {rec['direct_ms']:.0f} ms, "
                 f"run_once {rec['run_once_ms']:.0f} ms, "
                 f"clean after {rec['until_clean_ms']:.0f} ms")
    return "\n".join(lines)


def targets(payload: dict[str, Any]) -> list[report.Target]:
    """Restart after a stop, ours vs each Spark provider (<= 1.0: the final snapshot pays
    for itself), and stop + restart together (<= 1.0)."""
    found = []
    meds = {name: m["median"] for name, m in payload["measures"].items()}
    ours = meds.get("pyrocks")
    if ours is None:
        return found
    for baseline in (report.SPARK_ROCKSDB, report.SPARK_HDFS):
        theirs = meds.get(baseline)
        if theirs is None:
            continue
        for name, value, other in (
                ("restart after stop", ours["restart_ms"], theirs["restart_ms"]),
                ("stop + restart", ours["stop_ms"] + ours["restart_ms"],
                 theirs["stop_ms"] + theirs["restart_ms"])):
            found.append(report.Target(
                benchmark="query_end", name=name, unit="ms", ours=round(value),
                compared_to=baseline, ratio=report.ratio(value, other), goal=1.0,
                baselines={baseline: round(other)}))
    return found


if __name__ == "__main__":
    sys.exit(main())

"""Where a batch's time goes, on both sides of the socket: profiles of the measured batches
of one `scale` workload, for one provider.

    python -m benchmarks.profile --workload sessions --keys 1m
    python -m benchmarks.profile --workload dedup --keys 5m --provider spark-rocksdb

The state is filled first (as `benchmarks.scale` fills it), then --warmup batches of the
measured shape run, so that its code is compiled; then the profilers attach and --batches
measured batches run, one file each, in the same query: py-spy samples every
worker process (ours), and so does `perf` where the machine has it, Java Flight Recorder
samples the JVM (driver and executor: local mode). The JVM records from its launch and only
the measured batches' samples are read: a recording started later (`jcmd JFR.start`) makes
the JVM drop its compiled code, so the batches measured after it recompiled all of it (on
Dec 6, aggregation at 1M keys: batches of 1.0-2.0 s with the C2 compiler at 0.8 s of CPU a
batch, against 0.57-0.73 s and 0.27 s recorded from the launch).

Printed: each batch's time; Spark's state operator metrics (task-ms in updates, removals
and commits, medians); the CPU seconds the JVM and the workers spent per batch (from /proc:
on 2 cores CPU, not wall time, is what two tasks compete for); the hottest frames of the
workers (self and inclusive) and of the JVM (top frame, and the frames of this project and
of Spark's state code, inclusive), and the JVM heap's classes by size. The raw profiles
stay in --out.

py-spy's Python frames say which line a worker is in, but a thread blocked in a socket call
(waiting for the next request, or for the JVM to take a chunk) still counts there: read
them as wall time. `perf` counts CPU only, by library and native function (the RocksDB
binding, the interpreter, the kernel): where the workers' CPU seconds go.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks import procfs
from benchmarks.bench_jar import NOOP_PROVIDER, bench_jar
from benchmarks.macro import PROVIDER_KEY, PROVIDERS, select_provider, write_batches
from benchmarks.scale import (
    SCHEMA,
    WORKLOADS,
    _stateful,
    fill_tables,
    jfr_at_launch,
    measured_tables,
    parse_size,
    state_task_ms,
)

WORKERS_PERF = "workers.perf"
PROVIDER_NAMES = ("pyrocks", "spark-rocksdb", "spark-hdfs", "noop")
# JVM frames worth listing inclusive: ours, and Spark's state store and stateful operators.
JVM_PACKAGES = ("io.pyrocks.", "org.apache.spark.sql.execution.streaming.state.",
                "org.apache.spark.sql.execution.streaming.")


def stage_input(staging: Path, workload: str, keys: int, rows: int, batches: int,
                fill_rows: int) -> tuple[list[Path], list[Path]]:
    """The fill's files, then the measured shape's: warm-up batches first, then `batches`."""
    write_batches(staging / "fill", fill_tables(workload, keys, fill_rows))
    write_batches(staging / "measured", measured_tables(workload, keys, rows, batches))
    return (sorted((staging / "fill").iterdir()), sorted((staging / "measured").iterdir()))


def feed(query: Any, files: Iterable[Path], input_dir: Path) -> None:
    """Moves each file into the query's input and waits until its batch is done. A file
    keeps its staging directory in its name: the fill's and the measured batches' files
    are numbered alike, and the file source skips a name it has seen."""
    for path in files:
        os.replace(path, input_dir / f"{path.parent.name}-{path.name}")
        query.processAllAvailable()


class Profilers:
    """py-spy (and `perf`, if installed) on the workers and a JFR recording of the JVM,
    from start() to stop()."""

    def __init__(self, jvm: int, out: Path, rate: int) -> None:
        self.jvm, self.out, self.rate = jvm, out, rate
        self.samplers: list[subprocess.Popen[bytes]] = []
        self.workers = procfs.workers_of(jvm)
        self.cpu_before: dict[int, float] = {}
        self.threads_before: dict[str, float] = {}
        self.window = (0.0, 0.0)  # wall-clock seconds, start() to stop(): the samples read

    def start(self) -> None:
        for pid in self.workers:
            self.samplers.append(subprocess.Popen(
                ["py-spy", "record", "--pid", str(pid), "--rate", str(self.rate),
                 "--nonblocking", "--format", "raw", "--output",
                 str(self.out / f"worker-{pid}.txt")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        if self.workers and shutil.which("perf"):
            self.samplers.append(subprocess.Popen(
                ["perf", "record", "--freq", str(self.rate), "--output",
                 str(self.out / WORKERS_PERF), "--pid", ",".join(map(str, self.workers))],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(1)  # the samplers attach
        self.cpu_before = self.cpu()
        self.threads_before = procfs.thread_cpu_seconds(self.jvm)
        self.window = (time.time(), 0.0)

    def cpu(self) -> dict[int, float]:
        return {pid: procfs.cpu_seconds(pid) for pid in [self.jvm, *self.workers]}

    def stop(self) -> tuple[dict[str, float], dict[str, float]]:
        """CPU seconds spent since start(): JVM and workers; the JVM's by thread kind."""
        after = self.cpu()
        self.window = (self.window[0], time.time())
        histogram = subprocess.run(["jcmd", str(self.jvm), "GC.class_histogram"],
                                   capture_output=True, text=True, check=True).stdout
        (self.out / "histogram.txt").write_text(histogram)
        threads = {kind: spent - self.threads_before.get(kind, 0.0)
                   for kind, spent in procfs.thread_cpu_seconds(self.jvm).items()}
        subprocess.run(["jcmd", str(self.jvm), "JFR.stop", "name=profile"], check=True,
                       capture_output=True)
        for sampler in self.samplers:
            sampler.send_signal(signal.SIGINT)
        for sampler in self.samplers:
            sampler.wait(timeout=60)
        spent = {pid: after[pid] - self.cpu_before.get(pid, 0.0) for pid in after}
        return ({"jvm": spent[self.jvm],
                 "workers": sum(v for pid, v in spent.items() if pid != self.jvm)}, threads)


def worker_hotspots(files: Sequence[Path], top: int) -> tuple[list[tuple[int, str]],
                                                               list[tuple[int, str]], int]:
    """(self, inclusive, total samples) over every worker's raw py-spy output."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for path in files:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            frames = [f for f in stack.split(";") if not f.startswith(("process ", "thread "))]
            if not frames or not count.isdigit():
                continue
            n = int(count)
            total += n
            own[frames[-1]] += n
            for frame in set(frames):
                inclusive[frame] += n
    return ([(n, f) for f, n in own.most_common(top)],
            [(n, f) for f, n in inclusive.most_common(top) if "state_store" in f], total)


def native_hotspots(recording: Path, top: int) -> list[tuple[float, str]]:
    """(share of CPU samples, "library function") of a `perf` recording of the workers, by
    library first, then the hottest functions."""
    def shares(sort: str) -> list[tuple[float, str]]:
        printed = subprocess.run(["perf", "report", "--input", str(recording), "--stdio",
                                  "--quiet", "--sort", sort], capture_output=True, text=True)
        rows = []
        for line in printed.stdout.splitlines():
            share, _, rest = line.strip().partition("%")
            try:
                rows.append((float(share) / 100, " ".join(rest.replace("[.]", "").replace(
                    "[k]", "").split())))
            except ValueError:
                continue
        return rows[:top]

    return [*shares("dso"), *shares("dso,sym")] if recording.exists() else []


def within(events: Iterable[dict[str, Any]], window: tuple[float, float]) \
        -> list[dict[str, Any]]:
    """The JFR events (as `jfr print --json` gives them) that started within `window`, in
    wall-clock seconds."""
    start, end = window
    return [e for e in events
            if start <= datetime.fromisoformat(e["values"]["startTime"]).timestamp() <= end]


def jvm_hotspots(recording: Path, top: int, window: tuple[float, float]) \
        -> tuple[list[tuple[int, str]], list[tuple[int, str]], int]:
    """(top frames, inclusive frames of JVM_PACKAGES, total samples) of the samples a JFR
    recording took within `window`."""
    printed = subprocess.run(["jfr", "print", "--json", "--events", "jdk.ExecutionSample",
                              str(recording)], capture_output=True, text=True, check=True)
    events = within(json.loads(printed.stdout)["recording"]["events"], window)
    leaf: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    for event in events:
        frames = [f"{f['method']['type']['name'].replace('/', '.')}.{f['method']['name']}"
                  for f in event["values"]["stackTrace"]["frames"]]
        if not frames:
            continue
        leaf[frames[0]] += 1
        for frame in set(frames):
            if frame.startswith(JVM_PACKAGES):
                inclusive[frame] += 1
    return ([(n, f) for f, n in leaf.most_common(top)],
            [(n, f) for f, n in inclusive.most_common(top)], len(events))


def run(args: argparse.Namespace) -> None:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from state_store.spark import configure, spark_conf

    out = Path(args.out).resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="pyrocks-profile-") as scratch:
        work = Path(scratch)
        fill, measured = stage_input(work / "staging", args.workload, args.keys, args.rows,
                                     args.warmup + args.batches, args.fill_rows)
        input_dir = work / "input"
        input_dir.mkdir()
        options = {"localDir": str(work / "pool")}
        spark = configure(
            SparkSession.builder.master("local[2]").appName("pyrocks-profile")
            .config("spark.sql.shuffle.partitions", "8").config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.memory", args.driver_memory)
            .config("spark.driver.extraJavaOptions", jfr_at_launch(out / "jvm.jfr")),
            **options).config(
            "spark.jars", f"{spark_conf(**options)['spark.jars']},{bench_jar()}").getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        if args.provider == "noop":
            spark.conf.set(PROVIDER_KEY, NOOP_PROVIDER)
        else:
            select_provider(spark, next(p for p in PROVIDERS if p.name == args.provider))
        frame = (spark.readStream.schema(SCHEMA[args.workload])
                 .option("maxFilesPerTrigger", 1).parquet(str(input_dir)))
        frame, mode = _stateful(frame, args.workload, F)
        query = (frame.writeStream.outputMode(mode).format("noop")
                 .option("checkpointLocation", str(work / "checkpoint")).start())
        started = time.monotonic()
        # A fill batch writes new keys only: the measured shape's own code (updates,
        # compaction, Spark's save operator) is first compiled in the warm-up batches.
        feed(query, fill + measured[:args.warmup], input_dir)
        print(f"filled {args.keys:,} keys and ran {args.warmup} warm-up batches in "
              f"{time.monotonic() - started:.1f} s", flush=True)
        jvm = int(spark.sparkContext._jvm.ProcessHandle.current().pid())
        profilers = Profilers(jvm, out, args.rate)
        profilers.start()
        first = query.lastProgress["batchId"] + 1
        feed(query, measured[args.warmup:], input_dir)
        cpu, threads = profilers.stop()
        progress = [p for p in query.recentProgress
                    if p.batchId >= first and p.numInputRows > 0]
        query.stop()
        spark.stop()
    report(args, progress, cpu, threads, out, profilers.window)


def report(args: argparse.Namespace, progress: Sequence[Any], cpu: dict[str, float],
           threads: dict[str, float], out: Path, window: tuple[float, float]) -> None:
    batches = [int(p.durationMs.get("triggerExecution", 0)) for p in progress]
    n = max(len(batches), 1)
    print(f"{args.workload} at {args.keys:,} keys, {args.provider}: batches {batches} ms "
          f"(median {statistics.median(batches) if batches else '-'})")
    if progress and progress[0].stateOperators:
        print(f"state operator task-ms (median): {state_task_ms(progress)}")
        custom = [{k: v for op in p.stateOperators for k, v in (op.customMetrics or {}).items()}
                  for p in progress]
        if custom and custom[0]:
            print("custom metrics (median over batches, summed over stores): " + ", ".join(
                f"{k} {statistics.median(c.get(k, 0) for c in custom):g}"
                for k in sorted(custom[0])))
    print(f"CPU per batch: JVM {cpu['jvm'] / n:.2f} s, workers {cpu['workers'] / n:.2f} s")
    busiest = sorted(threads.items(), key=lambda kv: -kv[1])[:8]
    print("JVM CPU per batch by thread: " + ", ".join(f"{kind} {spent / n:.2f} s"
                                                       for kind, spent in busiest if spent > 0))
    if args.provider == "pyrocks":
        own, inclusive, total = worker_hotspots(sorted(out.glob("worker-*.txt")), args.top)
        print(f"\nworkers: {total} samples; self")
        for count, frame in own:
            print(f"  {count / max(total, 1):6.1%}  {frame}")
        print("workers: inclusive (state_store)")
        for count, frame in inclusive:
            print(f"  {count / max(total, 1):6.1%}  {frame}")
        native = native_hotspots(out / WORKERS_PERF, args.top)
        if native:
            print("workers: CPU samples (perf) by library, then by function")
            for share, frame in native:
                print(f"  {share:6.1%}  {frame}")
    print("\nJVM heap by class (live objects after the batches):")
    for line in (out / "histogram.txt").read_text().splitlines()[1:14]:
        print("  " + line.strip())
    leaf, inclusive, total = jvm_hotspots(out / "jvm.jfr", args.top, window)
    print(f"\nJVM: {total} samples; top frame")
    for count, frame in leaf:
        print(f"  {count / max(total, 1):6.1%}  {frame}")
    print("JVM: inclusive (this project, Spark's state code)")
    for count, frame in inclusive:
        print(f"  {count / max(total, 1):6.1%}  {frame}")
    print(f"\nraw profiles in {out}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=WORKLOADS, default="sessions")
    parser.add_argument("--keys", type=parse_size, default=parse_size("1m"))
    parser.add_argument("--provider", choices=PROVIDER_NAMES, default="pyrocks")
    parser.add_argument("--rows", type=int, default=100_000, help="rows per measured batch")
    parser.add_argument("--fill-rows", type=int, default=2_000_000, help="rows per fill batch")
    parser.add_argument("--batches", type=int, default=5, help="measured batches")
    parser.add_argument("--warmup", type=int, default=4,
                        help="batches of the measured shape run before the profilers attach")
    parser.add_argument("--rate", type=int, default=200,
                        help="samples per second (py-spy and perf)")
    parser.add_argument("--top", type=int, default=25, help="frames listed per table")
    parser.add_argument("--driver-memory", default="8g")
    parser.add_argument("--out", default="profile-out", help="where the raw profiles go")
    args = parser.parse_args(argv)
    missing = missing_profilers(args.provider)
    if missing:  # found before the fill, not after minutes of it
        parser.error(f"{' and '.join(missing)} not found on PATH: the JVM's recording needs "
                     "a JDK's jcmd, the workers' sampling `pip install py-spy`")
    run(args)
    return 0


def missing_profilers(provider: str) -> list[str]:
    """The profilers a run of `provider` needs that this machine lacks (`perf` is optional:
    without it the workers' CPU is not broken down by library)."""
    needed = ["jcmd"] + (["py-spy"] if provider == "pyrocks" else [])
    return [tool for tool in needed if shutil.which(tool) is None]


if __name__ == "__main__":
    sys.exit(main())

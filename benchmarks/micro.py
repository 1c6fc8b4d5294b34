"""State operations through the StateStore API, beside Spark's providers in one JVM.

    python -m benchmarks.micro            # 200,000 keys per phase, 3 repeats
    python -m benchmarks.micro --quick    # 20,000 keys, 2 repeats

A Scala driver (`benchmarks/jvm/`, compiled like the shim, put on the driver classpath)
creates each provider as Spark would, in the driver JVM of a local[2] session, and times
per phase: put of new keys, get (hits, then misses), put of updates, a full iteration,
remove, and each commit. Ours runs twice: as configured by default (its read cache on) and
with `readCacheMB=0`, so the cost of a round trip per get is visible too.

Concurrency: the same put + get + update mix on 1 store by 1 thread, then on 2 stores by 2
threads (as 2 task slots would), as throughput; the ratio 2 threads / 1 thread.

Times are medians over `--repeats` (each repeat a fresh store) in ns per row. Results: a
table on stdout and `benchmarks/results/micro.json`. Nothing asserts on timing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import procfs, report
from benchmarks.macro import SPARK_HDFS, SPARK_ROCKSDB
from state_store import bridge
from state_store.options import PREFIX
from state_store.spark import PROVIDER_CLASS, configure, spark_conf

RESULTS_JSON = report.RESULTS_DIR / "micro.json"
BENCH_SOURCES = Path(__file__).resolve().parent / "jvm"
STATE_STORE_CONF = "spark.sql.streaming.stateStore."
PHASES = ("put_insert", "get_hit", "get_miss", "put_update", "iterate", "remove")
COMMITS = ("commit_insert", "commit_update", "commit_remove")


@dataclass(frozen=True)
class Variant:
    name: str
    class_name: str
    confs: dict[str, str] = field(default_factory=dict)


def variants(local_dir: Path) -> tuple[Variant, ...]:
    ours = {k: v for k, v in spark_conf(localDir=str(local_dir)).items() if k.startswith(PREFIX)}
    return (
        Variant("pyrocks", PROVIDER_CLASS, ours),
        Variant("pyrocks-nocache", PROVIDER_CLASS, {**ours, PREFIX + "readCacheMB": "0"}),
        Variant(report.SPARK_ROCKSDB, SPARK_ROCKSDB),
        Variant(report.SPARK_ROCKSDB_CHANGELOG, SPARK_ROCKSDB,
                {STATE_STORE_CONF + "rocksdb.changelogCheckpointing.enabled": "true"}),
        Variant(report.SPARK_HDFS, SPARK_HDFS),
    )


@dataclass
class VariantResult:
    variant: str
    ns_per_row: dict[str, float] = field(default_factory=dict)  # median over repeats
    get_put_ns: float | None = None  # get (hit) + put (update), per row
    one_thread_rows_per_s: float | None = None
    two_threads_rows_per_s: float | None = None
    scaling: float | None = None  # two threads / one thread
    one_thread_cores: float | None = None  # CPU used (JVM + workers) / wall time
    two_threads_cores: float | None = None
    error: str | None = None


# --------------------------------------------------------------------------------- runs


def build_session(local_dir: Path) -> Any:
    from pyspark.sql import SparkSession

    bench_jar = bridge.jar_path(BENCH_SOURCES, name="pyrocks-bench")
    builder = configure(SparkSession.builder, localDir=str(local_dir))
    shim_jar = str(bridge.jar_path())
    builder = (builder.master("local[2]").appName("pyrocks-micro")
               .config("spark.ui.enabled", "false")
               .config("spark.driver.memory", "4g")
               .config("spark.driver.extraClassPath", f"{shim_jar}{os.pathsep}{bench_jar}"))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def measure(driver: Any, jvm_pid: int, variant: Variant, keys: int, repeats: int,
            work: Path) -> VariantResult:
    result = VariantResult(variant.name)
    confs = {STATE_STORE_CONF + "commitValidation.enabled": "false", **variant.confs}
    try:
        runs = [json.loads(driver.phases(variant.class_name, str(work / f"{variant.name}-{r}"),
                                         keys, confs)) for r in range(repeats)]
        for phase in (*PHASES, *COMMITS):
            rows = keys // 2 if phase == "remove" else keys
            per_row = statistics.median(run[phase] for run in runs) / rows
            result.ns_per_row[phase] = round(per_row if phase in PHASES else per_row * rows, 1)
        result.get_put_ns = round(result.ns_per_row["get_hit"] + result.ns_per_row["put_update"],
                                  1)
        result.one_thread_rows_per_s, result.one_thread_cores = throughput(
            driver, jvm_pid, variant, confs, keys, 1, repeats, work)
        result.two_threads_rows_per_s, result.two_threads_cores = throughput(
            driver, jvm_pid, variant, confs, keys, 2, repeats, work)
        result.scaling = round(result.two_threads_rows_per_s / result.one_thread_rows_per_s, 3)
    except Exception as exc:  # a failing provider is a result, not a crash of the benchmark
        result.error = f"{type(exc).__name__}: {exc}"
    return result


def throughput(driver: Any, jvm_pid: int, variant: Variant, confs: dict[str, str], keys: int,
               threads: int, repeats: int, work: Path) -> tuple[float, float]:
    """Rows through the mix per second, all threads together (each row: put, get, put), and
    the cores busy meanwhile (CPU seconds of the JVM and our workers over wall seconds): on
    2 cores, a slot that already keeps more than one core busy cannot double."""
    elapsed, cores = [], []
    for r in range(repeats):
        cpu_before, wall_before = busy_cpu_seconds(jvm_pid), time.monotonic()
        nanos = driver.throughput(variant.class_name, str(work / f"{variant.name}-x{threads}-{r}"),
                                  keys, threads, confs)
        elapsed.append(nanos)  # the timed mix only; CPU is over the whole call, set-up included
        cores.append((busy_cpu_seconds(jvm_pid) - cpu_before) / (time.monotonic() - wall_before))
    return (round(threads * keys / (statistics.median(elapsed) / 1e9)),
            round(statistics.median(cores), 2))


def busy_cpu_seconds(jvm_pid: int) -> float:
    """The JVM's CPU time plus its live workers' (workers persist across runs in one pool)."""
    return procfs.cpu_seconds(jvm_pid) + sum(procfs.cpu_seconds(w)
                                             for w in procfs.workers_of(jvm_pid))


# ------------------------------------------------------------------------------- report


def targets(payload: dict[str, Any]) -> list[report.Target]:
    runs = {r["variant"]: r for r in payload["results"] if r["error"] is None}
    ours = runs.get("pyrocks")
    if ours is None:
        return []
    theirs = runs.get(report.SPARK_ROCKSDB, {})
    return [
        report.Target(
            benchmark="micro", name="state ops through the shim: get + put per row",
            unit="ns", ours=ours["get_put_ns"], compared_to=report.SPARK_ROCKSDB,
            ratio=report.ratio(ours["get_put_ns"], theirs.get("get_put_ns")), goal=2.0,
            baselines={k: r["get_put_ns"] for k, r in runs.items() if k != "pyrocks"}),
        report.Target(
            benchmark="micro", name="2 task slots vs 1: state-op throughput",
            unit="x", ours=ours["scaling"], compared_to="1 slot (ours)",
            ratio=ours["scaling"], goal=1.7, higher_is_better=True,
            baselines={k: r["scaling"] for k, r in runs.items() if k != "pyrocks"},
            note=f"goal ~2x; cores busy with 1 / 2 slots: {ours['one_thread_cores']} / "
                 f"{ours['two_threads_cores']} of {payload['environment']['cpus']}; "
                 "baselines: the other providers' own 2-vs-1 ratios"),
    ]


def render(results: Sequence[VariantResult]) -> str:
    ours = next((r for r in results if r.variant == "pyrocks" and not r.error), None)
    head = f"{'provider':<24}" + "".join(f"{p:>11}" for p in (*PHASES, "get+put"))
    lines = ["ns per row (median over repeats)", head]
    for r in results:
        if r.error:
            lines.append(f"{r.variant:<24}ERROR {r.error.splitlines()[0][:160]}")
            continue
        lines.append(f"{r.variant:<24}" + "".join(f"{r.ns_per_row[p]:>11,.0f}" for p in PHASES)
                     + f"{r.get_put_ns:>11,.0f}")
    lines += ["", f"{'provider':<24}{'commits ms (ins/upd/rem)':>26}{'1 thread rows/s':>17}"
              f"{'2 threads rows/s':>18}{'2/1':>6}{'cores 1/2':>11}{'ours/x get+put':>16}"]
    for r in (r for r in results if not r.error):
        commits = "/".join(f"{r.ns_per_row[c] / 1e6:,.0f}" for c in COMMITS)
        vs = f"{ours.get_put_ns / r.get_put_ns:.2f}" if ours and r is not ours else "-"
        cores = f"{r.one_thread_cores:.1f}/{r.two_threads_cores:.1f}"
        lines.append(f"{r.variant:<24}{commits:>26}{r.one_thread_rows_per_s:>17,.0f}"
                     f"{r.two_threads_rows_per_s:>18,.0f}{r.scaling:>6.2f}{cores:>11}{vs:>16}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.micro", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=200_000, help="rows per phase (200000)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="20000 keys, 2 repeats")
    parser.add_argument("--variants", default="", help="comma-separated subset (default all)")
    args = parser.parse_args(argv)
    if args.quick:
        args.keys, args.repeats = 20_000, 2
    with tempfile.TemporaryDirectory(prefix="pyrocks-micro-") as tmp:
        work = Path(tmp)
        chosen = [v for v in variants(work / "pool")
                  if not args.variants or v.name in args.variants.split(",")]
        spark = build_session(work / "pool")
        try:
            jvm = spark.sparkContext._jvm
            driver = jvm.io.pyrocks.bench.StateOpsBenchmark
            jvm_pid = int(jvm.ProcessHandle.current().pid())
            results = []
            for v in chosen:
                print(f"[micro] {v.name} ...", flush=True)
                results.append(measure(driver, jvm_pid, v, args.keys, args.repeats, work / "ckpt"))
        finally:
            spark.stop()
    print(render(results))
    write(args, results)
    return 0 if all(r.error is None for r in results) else 1


def write(args: argparse.Namespace, results: Sequence[VariantResult]) -> None:
    import pyspark

    payload = {"environment": {"pyspark": pyspark.__version__,
                               "python": platform.python_version(), "cpus": os.cpu_count(),
                               "master": "local[2]"},
               "config": {"keys": args.keys, "repeats": args.repeats},
               "results": [asdict(r) for r in results]}
    RESULTS_JSON.parent.mkdir(parents=True, exist_ok=True)
    RESULTS_JSON.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"wrote {RESULTS_JSON}")


if __name__ == "__main__":
    sys.exit(main())

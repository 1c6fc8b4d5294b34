"""The first batch of a new query in a fresh JVM: what a query pays before anything is warm
(for ours: a worker process to start per task slot, a store to open per partition).

    python -m benchmarks.first_batch                       # local[2], 8 partitions, 3 repeats
    python -m benchmarks.first_batch --slots 4 --partitions 200
    python -m benchmarks.first_batch --providers pyrocks --python-start-delay 1

Per provider and repeat, a process and JVM of their own (`benchmarks/child.py`), the
providers taking turns, run `macro`'s aggregation (`groupBy(key)` count and sum, update mode,
`Trigger.AvailableNow`) over one Parquet file of ROWS keys on a new checkpoint, local[--slots]
(ours: as many workers) and --partitions shuffle partitions. The figure is that batch's time
(`durationMs.triggerExecution`), median over the repeats.

`--python-start-delay S` gives our workers a Python that waits S seconds before it starts, as
a cold interpreter does on a busy node or from a network filesystem; Spark's providers start
no process, so it changes only ours.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from benchmarks import report
from benchmarks.child import answered, run_module_child
from benchmarks.macro import (
    OURS,
    PROVIDERS,
    Provider,
    batch_metrics,
    in_turn,
    select_provider,
    start_aggregation,
    write_batches,
)
from state_store.spark import configure

ROWS = 10_000
RESULTS_JSON = report.RESULTS_DIR / "first_batch.json"


def first_batch_ms(spec: dict[str, Any]) -> dict[str, Any]:
    """The child's run: one new query, its one batch."""
    from pyspark.sql import SparkSession

    provider = next(p for p in PROVIDERS if p.name == spec["provider"])
    builder = (SparkSession.builder.master(f"local[{spec['slots']}]")
               .appName("pyrocks-first-batch")
               .config("spark.sql.shuffle.partitions", str(spec["partitions"]))
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false"))
    options = {"localDir": spec["local_dir"]}
    if spec["python_exec"]:
        options["pythonExec"] = spec["python_exec"]
    spark = configure(builder, **options).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        select_provider(spark, provider)
        query = start_aggregation(spark, Path(spec["input"]), spec["checkpoint"])
        query.awaitTermination()
        batches = batch_metrics(query.recentProgress)
        return {"batch_ms": batches[0].duration_ms, "state_rows": batches[0].state_rows}
    finally:
        spark.stop()


def slow_python(directory: Path, delay_s: float) -> Path:
    """A `pythonExec` that waits `delay_s` seconds, then becomes this Python."""
    script = directory / "slow-python"
    script.write_text(f"#!/bin/sh\nsleep {delay_s}\nexec {sys.executable} \"$@\"\n")
    script.chmod(0o755)
    return script


def measure(providers: Sequence[Provider], args: argparse.Namespace, work: Path,
            python_exec: Path | None) -> dict[str, dict[str, Any]]:
    runs: dict[str, dict[str, Any]] = {p.name: {"batch_ms": [], "error": None}
                                       for p in providers}
    for repeat in range(args.repeats):
        for name in (p.name for p in in_turn(providers, repeat)):
            if runs[name]["error"]:
                continue
            with tempfile.TemporaryDirectory(prefix="pyrocks-first-local-") as local:
                spec = {"provider": name, "slots": args.slots, "partitions": args.partitions,
                        "input": str(work / "input"), "local_dir": local,
                        "checkpoint": str(work / f"{name}-{repeat}"),
                        "python_exec": str(python_exec) if python_exec else None}
                answer, why = run_module_child("benchmarks.first_batch", spec, args.timeout)
            if answer is None:
                runs[name]["error"] = why
                continue
            if answer["state_rows"] != ROWS:
                runs[name]["error"] = f"{answer['state_rows']} state rows, expected {ROWS}"
            runs[name]["batch_ms"].append(answer["batch_ms"])
            print(f"[first_batch] {name} repeat {repeat}: {answer['batch_ms']} ms", flush=True)
    for run in runs.values():
        run["median_ms"] = statistics.median(run["batch_ms"]) if run["batch_ms"] else None
    return runs


def render(runs: dict[str, dict[str, Any]]) -> str:
    ours = runs.get(OURS, {}).get("median_ms")
    lines = [f"{'provider':<26}{'first batch ms (each)':>30}{'median':>9}{'ours/x':>8}"]
    for name, run in runs.items():
        if run["error"]:
            lines.append(f"{name:<26}ERROR {run['error'][:160]}")
            continue
        each = " / ".join(f"{ms:,}" for ms in run["batch_ms"])
        vs = report.ratio(ours, run["median_ms"]) if name != OURS else None
        lines.append(f"{name:<26}{each:>30}{run['median_ms']:>9,.0f}"
                     f"{'-' if vs is None else f'{vs:.2f}':>8}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    if answered(argv, first_batch_ms):
        return 0
    parser = argparse.ArgumentParser(prog="python -m benchmarks.first_batch",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--slots", type=int, default=2, help="local[N]; ours: N workers")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--providers", default=",".join(p.name for p in PROVIDERS))
    parser.add_argument("--python-start-delay", type=float, default=0.0, metavar="S")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds a run")
    parser.add_argument("--quick", action="store_true", help="1 repeat")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats = 1
    chosen = [p for p in PROVIDERS if p.name in args.providers.split(",")]
    with tempfile.TemporaryDirectory(prefix="pyrocks-first-batch-") as tmp:
        work = Path(tmp)
        write_batches(work / "input", [pa.table({"key": list(range(ROWS)), "value": [1] * ROWS})])
        python_exec = slow_python(work, args.python_start_delay) \
            if args.python_start_delay > 0 else None
        runs = measure(chosen, args, work, python_exec)
    print(render(runs))
    RESULTS_JSON.parent.mkdir(parents=True, exist_ok=True)
    RESULTS_JSON.write_text(json.dumps({"config": vars(args), "results": runs}, indent=1) + "\n")
    print(f"wrote {RESULTS_JSON}")
    return 0 if all(run["error"] is None for run in runs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Runs catalogue queries batch by batch under a provider, with a restart in the middle.

All queries of one run advance in lockstep: batch i's input files are written, then every
query processes them (`processAllAvailable` also runs the no-data batch a watermark move
calls for, so trailing batches are deterministic). After `restart_after` batches every
query and the SparkSession stop; a NEW session resumes every query from its checkpoint.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from streaming_queries import QuerySpec, write_batch

Outputs = dict[str, dict[int, list[str]]]  # query name -> batch id -> sorted row reprs
# Test sessions run Spark's maintenance every second (`start_session` makes a session's own
# interval the one that applies), so providers of stopped queries are unloaded within one.
MAINTENANCE_INTERVAL_KEY = "spark.sql.streaming.stateStore.maintenanceInterval"
MAINTENANCE_INTERVAL = "1s"
PROVIDER_KEY = "spark.sql.streaming.stateStore.providerClass"
HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
T = TypeVar("T")


def start_session(builder: SparkSession.Builder) -> SparkSession:
    """Starts `builder`'s session in place of the active one. Spark's maintenance thread is
    one per JVM and keeps, across SparkContexts, the interval of the session whose store load
    started it; ending it makes this session's first store load start it again with this
    session's interval, whatever ran before in this process."""
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    session = builder.getOrCreate()
    end_maintenance_schedule(session)
    return session


def end_maintenance_schedule(session: SparkSession) -> None:
    """Cancels Spark's periodic maintenance task without waiting for the maintenance work in
    flight, which finishes on its own. Not `StateStore.stop()`: through Spark 4.2 it waits for
    the maintenance pool while holding the lock a pool task takes when its work is done, so a
    task in flight (a RocksDB snapshot upload, common right after a query stops) deadlocks it
    until the pool's shutdown timeouts give up, 300 s and then 60 s (Spark 4.3 stops the pool
    outside the lock). The task is a private field of Spark's `StateStore` object; its
    `stop()` only cancels the schedule, and a task no longer running is replaced by the next
    store load (as Spark itself replaces one that died when its SparkContext stopped)."""
    jvm = session._jvm
    module = jvm.java.lang.Class.forName(
        "org.apache.spark.sql.execution.streaming.state.StateStore$")
    field = module.getDeclaredField("maintenanceTask")
    field.setAccessible(True)
    task = field.get(module.getField("MODULE$").get(None))
    if task is not None:
        task.stop()


def on_spark_hdfs(spark: SparkSession, run: Callable[[], T]) -> T:
    """`run` with Spark's HDFS provider in place of the session's, for the reference answer."""
    ours = spark.conf.get(PROVIDER_KEY)
    spark.conf.set(PROVIDER_KEY, HDFS)
    try:
        return run()
    finally:
        spark.conf.set(PROVIDER_KEY, ours)


def make_spark(conf: dict[str, str], master: str = "local[2]") -> SparkSession:
    builder = (SparkSession.builder.master(master).appName("pyrocks-correctness")
               .config("spark.sql.shuffle.partitions", "3")
               .config("spark.default.parallelism", "2")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config(MAINTENANCE_INTERVAL_KEY, MAINTENANCE_INTERVAL))
    for key, value in conf.items():
        builder = builder.config(key, value)
    return start_session(builder)


def run_queries(specs: Sequence[QuerySpec], work: Path, conf: dict[str, str],
                master: str = "local[2]", batches: int = 8,
                restart_after: int | Sequence[int] = 4,
                after_batch: Callable[[int], None] | None = None,
                between_phases: Callable[[int], None] | None = None,
                first_batch: int = 0,
                query_conf: Callable[[QuerySpec], dict[str, str]] | None = None) -> Outputs:
    """`after_batch(i)` runs once every query has processed batch i (e.g. to kill an
    executor between batches); `between_phases(i)` runs before phase i > 0 starts, with
    every query and its session stopped (e.g. to move or restore checkpoints).
    `first_batch` > 0 resumes queries whose work (inputs and checkpoints) ran the batches
    before it already (see `SavedRun`). `query_conf(spec)` gives SQL confs of one query's
    own (a query keeps the session conf it started with)."""
    outputs: Outputs = {spec.name: {} for spec in specs}
    cuts = [restart_after] if isinstance(restart_after, int) else list(restart_after)
    bounds = [first_batch, *(c for c in cuts if c > first_batch), batches]
    for index, (first, end) in enumerate(itertools.pairwise(bounds)):
        if index > 0 and between_phases is not None:
            between_phases(index)
        spark = make_spark(conf, master)
        try:
            queries = []
            for spec in specs:
                for key, value in (query_conf(spec) if query_conf else {}).items():
                    spark.conf.set(key, value)
                queries.append(start_query(spark, spec, work, outputs[spec.name]))
            try:
                for batch in range(first, end):
                    for spec in specs:
                        write_batch(work / spec.name / "input", batch)
                    for query in queries:
                        query.processAllAvailable()
                    if after_batch is not None:
                        after_batch(batch)
            finally:
                for query in queries:
                    query.stop()
        finally:
            spark.stop()
    return outputs


def checkpoint_of(work: Path, spec: QuerySpec) -> Path:
    return work / spec.name / "checkpoint"


def last_commit(checkpoint: Path) -> int:
    return max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())


@dataclass(frozen=True)
class FinishedRun:
    """What `run_queries` gave, beside where it ran: each query's input and checkpoint are
    under `work` (`checkpoint_of(work, spec)`), for tests that read the state it left."""

    outputs: Outputs
    work: Path


@dataclass(frozen=True)
class SavedRun:
    """Queries run batch by batch on one provider and restarted after `cut` batches, with
    each query's work (its input and checkpoint) saved as it was at the restart: a run that
    would repeat those first batches (a migration's source run is a reference's first half)
    resumes from a copy instead."""

    outputs: Outputs
    ran_in: Path
    saved: Path
    cut: int

    def resume_in(self, work: Path, specs: Sequence[QuerySpec]) -> None:
        """Copies the saved work of `specs` under `work`, moved as a user moves a query with
        its input: the file source's log is made to name the input files where they are
        now (it knows files by path; Hadoop's checksum files of what changed go)."""
        for spec in specs:
            shutil.copytree(self.saved / spec.name, work / spec.name)
            old, new = (str(w / spec.name / "input") for w in (self.ran_in, work))
            for log in (checkpoint_of(work, spec) / "sources").rglob("*"):
                if log.is_file() and not log.name.startswith("."):
                    log.write_text(log.read_text().replace(old, new))
                    log.with_name(f".{log.name}.crc").unlink(missing_ok=True)

    def before_cut(self, name: str) -> int:
        """The last batch the saved checkpoint of query `name` committed."""
        return last_commit(self.saved / name / "checkpoint")

    def up_to_cut(self, names: Sequence[str]) -> Outputs:
        """The outputs of the batches that ran before the cut."""
        return {n: {b: rows for b, rows in self.outputs[n].items() if b <= self.before_cut(n)}
                for n in names}

    def followed_by(self, rest: Outputs) -> Outputs:
        """The outputs of the queries `rest` has: up to the cut this run's, then `rest`'s (a
        run that resumed this one's saved work)."""
        first = self.up_to_cut(list(rest))
        return {n: {**first[n], **rest[n]} for n in rest}


def saved_run_once(where: Path, compute: Callable[[Path], SavedRun]) -> SavedRun:
    """`compute(where / "work")` once for every process that asks with the same `where`
    (pytest-xdist's workers of one session): the first computes it under a lock, the others
    wait and read what it saved. Only for runs that tests read: they copy what they resume."""
    where.mkdir(parents=True, exist_ok=True)
    done = where / "saved-run.json"
    with (where / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            record = json.loads(done.read_text())
            outputs = {name: {int(b): rows for b, rows in batches.items()}
                       for name, batches in record["outputs"].items()}
            return SavedRun(outputs, Path(record["ran_in"]), Path(record["saved"]),
                            record["cut"])
        (where / "work").mkdir(exist_ok=True)
        run = compute(where / "work")
        done.write_text(json.dumps({"outputs": run.outputs, "ran_in": str(run.ran_in),
                                    "saved": str(run.saved), "cut": run.cut}))
        return run


def saved_run(specs: Sequence[QuerySpec], work: Path, conf: dict[str, str], cut: int = 4,
              batches: int = 8) -> SavedRun:
    """`batches` batches restarted after `cut`; with `batches == cut`, only the run up to
    the cut (a source run whose later answers the reference gives), saved as it ended."""
    ran_in, saved = work / "run", work / "saved"
    if batches == cut:
        outputs = run_queries(specs, ran_in, conf, batches=cut, restart_after=[])
        return SavedRun(outputs, ran_in, ran_in, cut)

    def save(_: int) -> None:
        for spec in specs:
            shutil.copytree(ran_in / spec.name, saved / spec.name)

    outputs = run_queries(specs, ran_in, conf, batches=batches, restart_after=cut,
                          between_phases=save)
    return SavedRun(outputs, ran_in, saved, cut)


def start_query(spark: SparkSession, spec: QuerySpec, work: Path, sink: dict[int, list[str]],
                checkpoint: Path | None = None) -> StreamingQuery:
    """Starts `spec` on its input under `work`, collecting each batch's rows into `sink`."""
    def collect(frame: DataFrame, batch_id: int) -> None:
        sink[batch_id] = sorted(map(repr, frame.collect()))

    source = work / spec.name / "input"
    source.mkdir(parents=True, exist_ok=True)
    frame = spec.build(spark, source)
    return (frame.writeStream.outputMode(spec.mode).foreachBatch(collect)
            .option("checkpointLocation", str(checkpoint or checkpoint_of(work, spec)))
            .start())


def assert_same_outputs(reference: Outputs, actual: Outputs) -> None:
    """Identical batch by batch; the message names the query, the batch and the rows."""
    problems = []
    for name, batches in reference.items():
        got = actual.get(name, {})
        for batch_id in sorted(set(batches) | set(got)):
            want, have = batches.get(batch_id), got.get(batch_id)
            if want != have:
                missing = sorted(set(want or []) - set(have or []))[:5]
                extra = sorted(set(have or []) - set(want or []))[:5]
                problems.append(f"{name} batch {batch_id}: missing {missing}, extra {extra}"
                                if want is not None and have is not None
                                else f"{name} batch {batch_id}: only in "
                                     f"{'reference' if have is None else 'actual'}")
    assert not problems, "outputs differ:\n" + "\n".join(problems)

"""Driver programs the deployment tests run in a process of their own, often in another
Python: an installed wheel's virtualenv, or a notebook-like process whose JVM started
without the shim. Each prints one JSON document on its last stdout line.

    python deploy_driver.py notebook WORK
    python deploy_driver.py active WORK
    python deploy_driver.py compose WORK --conf spark.jars=USER_JAR
    python deploy_driver.py correctness WORK --settings local|cluster [--master M]
        [--conf KEY=VALUE ...] [--queries NAME ...]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from harness import PROVIDER_KEY, run_queries
from streaming_queries import BY_NAME

WORKER_MODULE = b"state_store.runtime.worker"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["notebook", "active", "compose", "correctness"])
    parser.add_argument("work", type=Path)
    parser.add_argument("--settings", choices=["local", "cluster"], default="local")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--conf", nargs="*", default=[], metavar="KEY=VALUE")
    parser.add_argument("--queries", nargs="*", default=["agg_update", "join_inner"])
    args = parser.parse_args()
    commands = {"notebook": notebook, "active": active_session, "compose": compose,
                "correctness": correctness}
    print(json.dumps(commands[args.command](args)))


def notebook(args: argparse.Namespace) -> dict:
    """A plain session runs a query on Spark's default provider and stops; then, in the same
    process (the same JVM), a `configure()`d session runs it on ours."""
    from state_store.spark import configure

    plain = SparkSession.builder.master("local[2]").getOrCreate()
    expected = _count_by_key(plain, args.work / "plain")
    plain.stop()
    builder = SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "2")
    spark = configure(builder, localDir=str(args.work / "pool")).getOrCreate()
    try:
        got = _count_by_key(spark, args.work / "configured")
        provider = spark.conf.get(PROVIDER_KEY)
    finally:
        spark.stop()
    ours = sorted(str(p) for p in (args.work / "configured").glob("ckpt/state/0/*/query-*"))
    return {"expected": expected, "got": got, "provider": provider, "our_stores": ours}


def active_session(args: argparse.Namespace) -> dict:
    """`configure()` while a plain session still runs in this process."""
    from state_store.spark import configure

    plain = SparkSession.builder.master("local[1]").getOrCreate()
    try:
        configure(SparkSession.builder, localDir=str(args.work / "pool"))
    except Exception as e:  # what the user sees is the point
        return {"error": type(e).__name__, "message": str(e)}
    finally:
        plain.stop()
    return {"error": None}


def compose(args: argparse.Namespace) -> dict:
    """A builder that has a user's extension and listener (in a jar of theirs, `--conf`),
    `configure()`d: what became of theirs, and whether the query ran on ours."""
    from state_store.spark import configure

    builder = (SparkSession.builder.master("local[2]")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.extensions", "com.example.user.UserExtension")
               .config("spark.extraListeners", "com.example.user.JobCounter"))
    for pair in args.conf:
        builder = builder.config(*pair.split("=", 1))
    spark = configure(builder, localDir=str(args.work / "pool")).getOrCreate()
    try:
        jvm = spark.sparkContext._jvm
        jobs_before = jvm.com.example.user.JobCounter.jobs()
        got = _count_by_key(spark, args.work / "query")
        spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
        listeners = spark.sparkContext._jsc.sc().listenerBus().listeners()
        return {"got": got,
                "jobs_seen_by_theirs": jvm.com.example.user.JobCounter.jobs() - jobs_before,
                "their_extension_applied": jvm.com.example.user.UserExtension.applied(),
                "listeners": [listeners.get(i).getClass().getName()
                              for i in range(listeners.size())],
                "extensions": spark.conf.get("spark.sql.extensions"),
                "our_stores": len(list(args.work.glob("query/ckpt/state/0/*/query-*")))}
    finally:
        spark.stop()


def correctness(args: argparse.Namespace) -> dict:
    """Catalogue queries on ours (`--master`), with our settings as a local session gets
    them or as `spark-defaults.conf` gives them; their outputs, for the test to judge
    against the session's HDFS reference (the same queries, batches and restart)."""
    import state_store
    from state_store.spark import cluster_conf, spark_conf

    specs = [BY_NAME[name] for name in args.queries]
    settings = spark_conf if args.settings == "local" else cluster_conf
    conf = {**settings(localDir=str(args.work / "pool")),
            **dict(pair.split("=", 1) for pair in args.conf)}
    seen: dict[int, dict] = {}
    # Ours first: its settings must reach the JVM's start, as spark-defaults.conf does.
    ours = run_queries(specs, args.work / "ours", conf, master=args.master,
                       after_batch=lambda _: seen.update(_workers(args.work)))
    return {"outputs": ours, "package": state_store.__file__, "workers": list(seen.values())}


def _count_by_key(spark: SparkSession, work: Path) -> list[list[int]]:
    source = work / "in"
    source.mkdir(parents=True)
    (source / "0.json").write_text("\n".join(json.dumps({"k": i % 3}) for i in range(30)))
    query = (spark.readStream.schema("k int").json(str(source)).groupBy("k").count()
             .writeStream.outputMode("complete").format("memory").queryName("counts")
             .option("checkpointLocation", str(work / "ckpt")).trigger(availableNow=True)
             .start())
    query.awaitTermination()
    return sorted([row["k"], row["count"]] for row in spark.table("counts").collect())


def _workers(work: Path) -> dict[int, dict]:
    """The live worker processes with sockets under `work`: how they were started, where,
    and the files they mapped (a compiled module's path shows whose site-packages)."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if WORKER_MODULE not in argv or not any(str(work).encode() in a for a in argv):
                continue
            maps = (entry / "maps").read_text()
            found[int(entry.name)] = {
                "argv0": argv[0].decode(), "cwd": os.readlink(entry / "cwd"),
                "rocksdict": sorted({line.split()[-1] for line in maps.splitlines()
                                     if "rocksdict" in line and "/" in line}),
            }
        except (OSError, ValueError):
            continue
    return found


if __name__ == "__main__":
    sys.exit(main())

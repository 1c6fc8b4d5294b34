"""A class-data-sharing archive of what a Spark driver loads, for the tests' driver JVMs.

A driver JVM starting cold spends most of its first seconds loading and verifying Spark's
classes: a bare session and one job took 11.7 s of CPU here, 6.5 s with this archive (Java
17's dynamic CDS). The suite starts a driver in each pytest process and in every test that
runs one in a subprocess (about thirty), so the archive pays for itself many times over.

It is made once per machine, pyspark and Java (cached beside the shim's jars), by a driver
that runs a small stateful streaming query and then exits with `-XX:ArchiveClassesAtExit`.
The JVM uses it only while the classpath is the one it was made with (the JVM checks the
jars' sizes and times; so does the archive's name), and falls back silently otherwise: the
archive can make a driver start sooner, never change what it runs. If making it fails, the
tests run without it.

Making it costs about 40 s of CPU, what seven driver starts save (test_results_spark.py: 122
s of CPU without it, 80 s with it). A run that starts fewer drivers does without it by
setting PYROCKS_TESTS_CLASS_ARCHIVE=0 (.ci/spark-matrix, whose runs start a few each).
Run as a script, this module is that archive-making driver."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pyspark

from state_store.driver import bridge

# The JVM's own notes on the archive (unusable after an upgrade, say) stay off stdout,
# where a test may read a driver's output.
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
SWITCH = "PYROCKS_TESTS_CLASS_ARCHIVE"


def driver_options(jvm_options: str, launch: Sequence[str] = ()) -> str:
    """`jvm_options` with the archive for drivers that run with them and with `launch`, the
    other spark-submit arguments they start with (a class path entry of its own decides
    whether the archive applies), made if missing."""
    archive = _ensured(jvm_options, launch) if os.environ.get(SWITCH, "1") != "0" else None
    return f"{jvm_options} -XX:SharedArchiveFile={archive} {QUIET}" if archive else jvm_options


def _ensured(jvm_options: str, launch: Sequence[str]) -> Path | None:
    try:  # no Java: the tests that need it say so, the others run
        java = subprocess.run([bridge.java_executable(), "-version"], capture_output=True,
                              text=True).stderr
    except (bridge.ShimBuildError, OSError):
        return None
    jars = sorted((jar.name, jar.stat().st_size, jar.stat().st_mtime_ns)
                  for jar in bridge.pyspark_jars().iterdir())
    key = hashlib.sha256(f"{java}\n{jvm_options}\n{launch}\n{jars}".encode()).hexdigest()[:12]
    archive = bridge.cache_dir() / f"spark-driver-{pyspark.__version__}-{key}.jsa"
    try:  # the processes of one test session start together: the first makes it
        return bridge.made_once(archive, lambda staged: _make(staged, jvm_options, launch))
    except ArchiveNotMade as reason:
        print(f"tests: no class archive, drivers start without it: {reason}",
              file=sys.stderr, flush=True)
        return None


class ArchiveNotMade(Exception):
    """Why the archive could not be made: drivers then start without one."""


def _make(staged: Path, jvm_options: str, launch: Sequence[str]) -> None:
    print(f"tests: making {staged.name}, the class archive of the tests' Spark drivers "
          "(once per machine and pyspark)...", file=sys.stderr, flush=True)
    options = f"{jvm_options} -XX:ArchiveClassesAtExit={staged} {QUIET}"
    env = {**os.environ, "PYSPARK_SUBMIT_ARGS":
           " ".join([f'--conf "spark.driver.extraJavaOptions={options}"', *launch,
                     "pyspark-shell"])}
    try:
        done = subprocess.run([sys.executable, __file__, str(staged.parent)], env=env,
                              capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired as hung:
        raise ArchiveNotMade("its driver ran past 600 s") from hung
    if done.returncode != 0 or not staged.exists():  # the JVM writes it as it exits
        raise ArchiveNotMade(f"exit {done.returncode}\n{done.stderr[-2000:]}")


def _run_a_stateful_query(work: Path) -> None:
    """What most tests' drivers load: a session, a stateful streaming query over files with
    a watermark, a foreachBatch callback into Python, Spark's state store provider."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (SparkSession.builder.master("local[2]").appName("class-archive")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    source = work / "input"
    source.mkdir()
    (source / "0.json").write_text('{"k": "a", "t": "2026-01-01 00:00:00"}\n')
    counts = (spark.readStream.schema("k STRING, t TIMESTAMP").json(str(source))
              .withWatermark("t", "10 seconds").groupBy("k", F.window("t", "5 seconds"))
              .count())
    query = (counts.writeStream.outputMode("update")
             .foreachBatch(lambda frame, _: frame.collect())
             .option("checkpointLocation", str(work / "checkpoint")).start())
    query.processAllAvailable()
    query.stop()
    spark.stop()


if __name__ == "__main__":
    from pyspark import SparkContext

    _run_a_stateful_query(Path(sys.argv[1]))
    driver = SparkContext._gateway.proc  # the JVM: it writes the archive as it exits
    driver.stdin.close()  # the JVM exits when its parent's pipe closes
    driver.wait(timeout=300)

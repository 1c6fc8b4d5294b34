"""The Hadoop local file system the tests' Spark JVMs run with: `FILE_SYSTEM_CLASS`
(tests/jvm-fs/, which says why), on the drivers' and executors' class path.

Measured on tests/test_canonical_savepoints.py run alone, against Hadoop's stock one:
22,312 processes started against 3,682 (Spark's `rm -rf`s and the workers remain), 411 s
of the machine's CPU against 385, 306 s against 291."""

from __future__ import annotations

import sys
from pathlib import Path

from state_store.driver import bridge

FILE_SYSTEM_CLASS = "io.pyrocks.tests.InProcessLocalFileSystem"
SOURCES = Path(__file__).resolve().parent / "jvm-fs"


def submit_args() -> list[str]:
    """The spark-submit arguments that put it in place (none without Java: the tests that
    need Java say so)."""
    try:
        jar = bridge.jar_path(SOURCES, name="pyrocks-tests-fs")
    except bridge.ShimBuildError as reason:
        print(f"tests: Hadoop's stock local file system: {reason}", file=sys.stderr)
        return []
    return [f"--conf spark.driver.extraClassPath={jar}",
            f"--conf spark.executor.extraClassPath={jar}",
            f"--conf spark.hadoop.fs.file.impl={FILE_SYSTEM_CLASS}"]

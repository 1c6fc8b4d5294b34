"""The benchmarks' own JVM code (`benchmarks/jvm/`): the micro benchmark's driver and the
no-op provider of the floor, compiled like the shim, against the pyspark jars and the shim
jar, and cached the same way."""

from __future__ import annotations

from pathlib import Path

from state_store.driver import bridge

SOURCES = Path(__file__).resolve().parent / "jvm"
# A state store that keeps nothing: the floor of a stateful query's batches.
NOOP_PROVIDER = "io.pyrocks.statestore.bench.NoOpStateStoreProvider"


def bench_jar() -> Path:
    return bridge.jar_path(SOURCES, name="pyrocks-bench", classpath=[bridge.jar_path()])

"""The shim in a driver JVM that already runs (a notebook kernel, a test process).

PySpark starts one JVM per Python process and keeps it after `spark.stop()`, so a session
configured after a plain one gets a JVM that started without the shim: `spark.jars`, which
Spark adds to the driver's class loader when the JVM starts, comes too late. Spark resolves
every class it loads by name (providers, listeners, extensions) through the context class
loader of the calling thread, which in a PySpark driver is Spark's `MutableURLClassLoader`:
adding the jar to it makes the shim loadable before the next SparkContext starts. Executors
get it through `spark.jars`, as always.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import StateStoreError

# The class whose presence means the shim is loadable (spark.PROVIDER_CLASS; spark.py imports
# this module, so the name is repeated rather than imported).
PROBE_CLASS = "io.pyrocks.statestore.PyRocksStateStoreProvider"


class ShimNotLoadableError(StateStoreError):
    """The driver JVM runs without the shim and it cannot be added to it."""


def ensure_shim_loadable(jar: str | Path) -> None:
    """Makes the shim loadable in this process's driver JVM if one already runs."""
    from pyspark import SparkContext

    jvm = SparkContext._jvm
    if jvm is None or _loadable(jvm):
        return  # no JVM yet: it will start with spark.jars on its class loader
    if SparkContext._active_spark_context is not None:
        raise ShimNotLoadableError(
            "a SparkSession without the pyrocks state store is still running in this "
            "process, and a running SparkContext cannot take the store's extensions and "
            "listeners. Stop it first (spark.stop()), then build the session with "
            "state_store.spark.configure(SparkSession.builder, ...).getOrCreate().")
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    if loader.getClass().getName() != "org.apache.spark.util.MutableURLClassLoader":
        raise ShimNotLoadableError(
            f"this process's driver JVM was started without the pyrocks shim ({jar}) and "
            f"its class loader ({loader.getClass().getName()}) cannot take it. Start "
            "Python afresh, or start the JVM with --driver-class-path " + str(jar))
    loader.addURL(jvm.java.io.File(str(jar)).toURI().toURL())
    if not _loadable(jvm):
        raise ShimNotLoadableError(f"added {jar} to the running driver JVM, but "
                                   f"{PROBE_CLASS} is still not loadable from it")


def _loadable(jvm: Any) -> bool:
    from py4j.protocol import Py4JJavaError

    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    try:
        jvm.java.lang.Class.forName(PROBE_CLASS, False, loader)
    except Py4JJavaError:
        return False
    return True

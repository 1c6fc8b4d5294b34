"""Driver-side API (contract): the Spark configuration that selects this state store.

    from state_store.spark import configure
    spark = configure(SparkSession.builder.master("local[2]")).getOrCreate()

`spark_conf(**options)` returns every entry needed; `options` use the short names of
`state_store.options` (e.g. `snapshotInterval=20`) and Python values (a dict for
`rootOptions`, `True`, sizes such as `"256k"`, durations such as `"10min"`); they are
validated here, before a query runs, with the same errors the workers would give, and
written as the text the shim and the workers read. `resultStore=URL` also registers the
query result store's recorder (see `state_store.results`).
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .driver import bridge
from .driver.classes import (
    EXTENSIONS_CLASS,
    LISTENER_CLASS,
    PROVIDER_CLASS,
    PROVIDER_KEY,
    QUERY_LISTENERS_KEY,
    RESULT_RECORDER_CLASS,
    RUN_EPOCH_LISTENER_CLASS,
)
from .driver.jvm import ensure_shim_loadable
from .options import PREFIX, canonical, ignored_spark_settings, ignored_warning, validate

PYTHON_EXEC_KEY = PREFIX + "pythonExec"
# Where a user names the Python of the executors (PySpark's own workers use it; so do ours).
EXECUTOR_PYTHON_KEYS = ("spark.pyspark.python", "spark.executorEnv.PYSPARK_PYTHON")
# Settings that hold a list, and their separators: configure() adds ours to a user's (Delta
# Lake's or Iceberg's extension, their own listeners and jars), never replaces them.
LIST_SEPARATORS = {
    "spark.jars": ",",
    "spark.sql.extensions": ",",
    "spark.extraListeners": ",",
    QUERY_LISTENERS_KEY: ",",
}


def spark_conf(**options: Any) -> dict[str, str]:
    """Every Spark conf entry a session started from this Python process needs to run its
    stateful operators on this provider: `cluster_conf`, plus this interpreter as the
    workers' Python (unless `options` or PYSPARK_PYTHON name one). If this process's driver
    JVM already runs without the shim (a notebook that had a plain session), the shim is
    loaded into it."""
    conf = {PYTHON_EXEC_KEY: os.environ.get("PYSPARK_PYTHON") or sys.executable,
            **cluster_conf(**options)}
    ensure_shim_loadable(conf["spark.jars"])
    return conf


def cluster_conf(**options: Any) -> dict[str, str]:
    """The entries for `spark-defaults.conf` or `spark-submit --conf`: nothing that names
    this machine's Python. Executors run the workers with `pythonExec` if set, else the
    Python PySpark's own workers use (`spark.pyspark.python`, PYSPARK_PYTHON, python3),
    and import the `state_store` package installed there (or shipped in `spark.archives`)."""
    conf = {
        PROVIDER_KEY: PROVIDER_CLASS,
        # Spark adds `spark.jars` to the driver's class loader and ships it to every
        # executor: no class path entry naming this machine's files is needed.
        "spark.jars": str(bridge.jar_path()),
        "spark.extraListeners": LISTENER_CLASS,
        "spark.sql.extensions": EXTENSIONS_CLASS,
        # Each query run gets its run epoch as it starts (a rewound batch supersedes).
        QUERY_LISTENERS_KEY: RUN_EPOCH_LISTENER_CLASS,
    }
    conf.update({PREFIX + key: canonical(key, value) for key, value in options.items()})
    if "resultStore" in options:  # every query run of the session is recorded there
        conf[QUERY_LISTENERS_KEY] += "," + RESULT_RECORDER_CLASS
    validate(conf)
    return conf


def configure(builder: Any, **options: Any) -> Any:
    """Applies `spark_conf(**options)` to a `SparkSession.Builder` and returns the builder.
    List-valued settings the builder already has (`LIST_SEPARATORS`) keep their entries,
    ours are appended. A builder that names the executors' Python (`EXECUTOR_PYTHON_KEYS`)
    keeps it for our workers too."""
    existing = getattr(builder, "_options", {})
    ignored = ignored_spark_settings(existing)
    if ignored:  # the shim says it again in the executors' logs
        warnings.warn(ignored_warning(ignored), stacklevel=2)
    conf = spark_conf(**options)
    if "pythonExec" not in options and any(existing.get(k) for k in EXECUTOR_PYTHON_KEYS):
        del conf[PYTHON_EXEC_KEY]  # the shim finds the one the builder names
    for key, value in conf.items():
        builder = builder.config(key, merge_setting(key, existing.get(key), value))
    return builder


def offline_session(spark: Any = None) -> Any:
    """The session an offline job runs in (a canonical savepoint, a canonical restore):
    `spark`, else the active session, else a new local one with this store configured."""
    if spark is not None:
        return spark
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.master("local[*]").appName("state-store offline job")
    return configure(builder.config("spark.ui.showConsoleProgress", "false")).getOrCreate()


@contextmanager
def spark_default_provider(spark: Any) -> Iterator[None]:
    """Queries started inside this block keep their state on Spark's default provider, not
    ours. Real-Time Mode needs it: it refuses to start any query, even a stateless one, in
    a session whose provider is set to anything but Spark's RocksDB provider (and picks that
    one itself when none is set). A query's provider is fixed when it starts (Spark records
    it in the checkpoint), so queries started after the block run on ours as before; start a
    real-time query inside the block every time, restarts included. The session conf is
    shared: other threads should not start queries meanwhile.

        with spark_default_provider(spark):
            rtm = frame.writeStream.trigger(realTime="5 seconds")...start()
    """
    saved = spark.conf.get(PROVIDER_KEY, None)
    spark.conf.unset(PROVIDER_KEY)
    try:
        yield
    finally:
        if saved is not None:
            spark.conf.set(PROVIDER_KEY, saved)


def merge_setting(key: str, theirs: Any, ours: str) -> str:
    """`ours` for `key`, after the entries of `theirs` if `key` holds a list."""
    separator = LIST_SEPARATORS.get(key)
    if separator is None or theirs is None or not str(theirs).strip():
        return ours
    entries = [e.strip() for e in str(theirs).split(separator) if e.strip()]
    return separator.join(entries + [e for e in ours.split(separator) if e not in entries])


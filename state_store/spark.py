"""Driver-side API (contract): the Spark configuration that selects this state store.

    from state_store.spark import configure
    spark = configure(SparkSession.builder.master("local[2]")).getOrCreate()

`spark_conf(**options)` returns every entry needed; `options` use the short names of
`state_store.options` (e.g. `snapshotInterval=20`) and are validated here, before a query
runs, with the same errors the workers would give. `resultStore=URL` also registers the
query result store's recorder (see `state_store.results`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from . import bridge
from .options import PREFIX, validate

PROVIDER_CLASS = "io.pyrocks.statestore.PyRocksStateStoreProvider"
LISTENER_CLASS = "io.pyrocks.statestore.PyRocksLifecycleListener"
EXTENSIONS_CLASS = "io.pyrocks.statestore.PyRocksExtensions"
RESULT_RECORDER_CLASS = "io.pyrocks.statestore.ResultRecorder"
PROVIDER_KEY = "spark.sql.streaming.stateStore.providerClass"
QUERY_LISTENERS_KEY = "spark.sql.streaming.streamingQueryListeners"
# Settings that hold a list, and their separators: configure() adds ours to a user's (Delta
# Lake's or Iceberg's extension, their own listeners and jars), never replaces them.
LIST_SEPARATORS = {
    "spark.jars": ",",
    "spark.sql.extensions": ",",
    "spark.extraListeners": ",",
    QUERY_LISTENERS_KEY: ",",
    "spark.driver.extraClassPath": os.pathsep,
    "spark.executor.extraClassPath": os.pathsep,
}


def spark_conf(**options: Any) -> dict[str, str]:
    """Every Spark conf entry needed to run stateful operators on this provider."""
    jar = str(bridge.jar_path())
    conf = {
        PROVIDER_KEY: PROVIDER_CLASS,
        "spark.jars": jar,
        "spark.driver.extraClassPath": jar,
        "spark.executor.extraClassPath": jar,
        "spark.extraListeners": LISTENER_CLASS,
        "spark.sql.extensions": EXTENSIONS_CLASS,
        PREFIX + "pythonExec": sys.executable,
        PREFIX + "pythonPath": str(Path(__file__).resolve().parent.parent),
    }
    conf.update({PREFIX + key: _text(value) for key, value in options.items()})
    if "resultStore" in options:  # every query run of the session is recorded there
        conf[QUERY_LISTENERS_KEY] = RESULT_RECORDER_CLASS
    validate(conf)
    return conf


def configure(builder: Any, **options: Any) -> Any:
    """Applies `spark_conf(**options)` to a `SparkSession.Builder` and returns the builder.
    List-valued settings the builder already has (`LIST_SEPARATORS`) keep their entries,
    ours are appended."""
    existing = getattr(builder, "_options", {})
    for key, value in spark_conf(**options).items():
        builder = builder.config(key, merge_setting(key, existing.get(key), value))
    return builder


def merge_setting(key: str, theirs: Any, ours: str) -> str:
    """`ours` for `key`, after the entries of `theirs` if `key` holds a list."""
    separator = LIST_SEPARATORS.get(key)
    if separator is None or theirs is None or not str(theirs).strip():
        return ours
    entries = [e.strip() for e in str(theirs).split(separator) if e.strip()]
    return separator.join(entries + [e for e in ours.split(separator) if e not in entries])


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)

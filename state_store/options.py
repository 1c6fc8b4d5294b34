"""Every `spark.sql.streaming.stateStore.pyrocks.*` option: name, default, accepted values.

This table is the single definition: the worker validates every key it is handed against
it (unknown keys included), `spark.spark_conf()` validates on the driver before a query
starts, and the README's configuration table is printed from it (`state-store options`).
The shim reads the launch options (which Python, how many workers) itself, because it
needs them before any worker exists; it checks their values with the same words.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from .errors import OptionError

PREFIX = "spark.sql.streaming.stateStore.pyrocks."


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError("must be >= 1")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError("must be >= 0")
    return value


def _boolean(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError("must be true or false")
    return lowered == "true"


# Longer than any snapshot upload we expect to see (see orphanMarginSeconds).
ORPHAN_MARGIN_MIN_S = 600


def _at_least(minimum: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = float(text)
        if not value >= minimum:  # also refuses NaN
            raise ValueError(f"must be >= {minimum}")
        return value
    return parse


def _json_object(text: str) -> dict[str, Any]:
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError("must be a JSON object")
    return value


def _text(text: str) -> str:
    if not text.strip():
        raise ValueError("must not be empty")
    return text.strip()


@dataclass(frozen=True)
class OptionSpec:
    key: str  # the part after PREFIX
    field: str  # the StoreOptions attribute (or "" for launch options read by the shim)
    parse: Callable[[str], Any]
    default: str  # "" = computed at run time, described in `doc`
    accepted: str
    doc: str


SPECS: tuple[OptionSpec, ...] = (
    OptionSpec("pythonExec", "", _text, "", "a Python executable",
               "Python that runs the workers (it must have this package installed); "
               "default: the Python PySpark's own workers use (spark.pyspark.python, "
               "PYSPARK_PYTHON, python3). spark_conf() and configure() set the driver's "
               "interpreter unless the builder names one."),
    OptionSpec("pythonPath", "", _text, "", "a directory",
               "Prepended to the workers' PYTHONPATH, for a package not installed in that "
               "Python (unset by default)."),
    OptionSpec("workers", "", _positive_int, "", "an integer >= 1",
               "Worker processes per executor JVM; default: the executor's task slots."),
    OptionSpec("writeBatchBytes", "", _positive_int, "262144", "an integer >= 1",
               "Bytes of buffered writes the shim ships in one frame."),
    OptionSpec("readCacheMB", "", _non_negative_int, "256", "an integer >= 0",
               "Executor-wide budget of the shim's exact read cache, in MiB (0 disables)."),
    OptionSpec("memoryBoundMB", "", _non_negative_int, "512", "an integer >= 0",
               "Executor-wide bound on RocksDB memory (block cache, index/filter blocks and "
               "memtables of all stores), split across the workers; 0 = per-store defaults."),
    OptionSpec("requestTimeoutSeconds", "", _positive_int, "600", "an integer >= 1",
               "Deadline of one request to a worker: past it the task fails naming the worker, "
               "the request and the store, and the worker is killed and replaced."),
    OptionSpec("localDir", "", _text, "", "a local directory",
               "Where workers keep sockets and working RocksDB copies; default: java.io.tmpdir."),
    OptionSpec("finishWhenQueryEnds", "", _boolean, "true", "true or false",
               "Read from the application's conf by the driver: when a query run ends "
               "(stop(), an AvailableNow run's end, a failure), its stores are finished "
               "(uploads drained, final snapshot) before stop()/awaitTermination() return; "
               "false: at Spark's next maintenance round."),
    OptionSpec("resultStore", "", _text, "", "an fsspec URL or local path",
               "The query result store: every query run that ends is recorded there (dirty, "
               "cleaned up, clean); see state_store.results. Read by the driver."),
    OptionSpec("resultStoreOptions", "", _json_object, "{}", "a JSON object",
               "fsspec storage options for resultStore."),
    OptionSpec("cleanupBackoffInitialSeconds", "", _at_least(0.0), "1", "a number >= 0",
               "First delay before a failed cleanup step of an ended run is retried; it "
               "doubles with each failure."),
    OptionSpec("cleanupBackoffMaxSeconds", "", _at_least(0.0), "3600", "a number >= 0",
               "Longest delay between two attempts of a cleanup step."),
    OptionSpec("cleanupMaxAttempts", "", _non_negative_int, "0", "an integer >= 0",
               "Attempts of a cleanup step before the run is left dirty (0: no limit)."),
    OptionSpec("runKey", "", _text, "", "a run key",
               "Set by state_store.results.run_once while it starts a query: the run is "
               "recorded under this key. Not for users to set."),
    OptionSpec("rootUrl", "root_url", _text, "", "an fsspec URL or local path",
               "Durable root for state; default: each store's own checkpoint location."),
    OptionSpec("rootOptions", "root_options", _json_object, "{}", "a JSON object",
               "fsspec storage options for rootUrl, e.g. {\"endpoint_url\": \"http://...\"}."),
    OptionSpec("snapshotInterval", "snapshot_interval", _positive_int, "10", "an integer >= 1",
               "A snapshot upload starts in the background once this many changelogs "
               "follow the newest snapshot."),
    OptionSpec("maxReplayVersions", "max_replay_versions", _positive_int, "50",
               "an integer >= 1", "Bound on changelogs replayed at load: a commit that would "
               "exceed it waits for (or takes) a snapshot."),
    OptionSpec("maxReplayBytes", "max_replay_bytes", _positive_int, "268435456",
               "an integer >= 1", "Bound on changelog bytes replayed at load, likewise."),
    OptionSpec("orphanMarginSeconds", "orphan_margin_seconds", _at_least(ORPHAN_MARGIN_MIN_S),
               "3600", f"a number >= {ORPHAN_MARGIN_MIN_S}",
               "Files no record references are deleted once they entered durable storage this "
               "long ago (leftovers of crashed or losing attempts; also the idle time after "
               "which an earlier query's state at a reset checkpoint path is deleted). It must "
               "exceed the longest snapshot upload, whose files no record names until it is "
               "published: hence the minimum."),
    OptionSpec("trackTotalNumberOfRows", "track_num_keys", _boolean, "true", "true or false",
               "Count keys exactly for numRowsTotal (a lookup per put/remove unless the shim "
               "knows the key); false: no counting, numRowsTotal is 0, as with Spark's "
               "RocksDB provider."),
    OptionSpec("iteratorChunkBytes", "iterator_chunk_bytes", _positive_int, "1048576",
               "an integer >= 1", "Bytes of key/value pairs per iterator chunk."),
    OptionSpec("writeBufferMB", "write_buffer_mb", _positive_int, "16", "an integer >= 1",
               "RocksDB memtable size per store, in MiB."),
)
BY_KEY = {spec.key: spec for spec in SPECS}


@dataclass(frozen=True)
class StoreOptions:
    """The options a worker's engine uses; launch options never reach it."""

    root_url: str | None = None
    root_options: dict[str, Any] = field(default_factory=dict)
    snapshot_interval: int = 10
    max_replay_versions: int = 50
    max_replay_bytes: int = 256 << 20
    orphan_margin_seconds: float = 3600.0
    track_num_keys: bool = True
    iterator_chunk_bytes: int = 1 << 20
    write_buffer_mb: int = 16


def validate(raw: Mapping[str, str]) -> dict[str, Any]:
    """Checks every pyrocks key in `raw` (full Spark keys, or short ones such as
    `snapshotInterval`); returns parsed values by short key.

    Keys with a dot outside the pyrocks prefix are ignored: Spark hands the provider every
    `spark.sql.streaming.stateStore.*` key. A key without a dot is a short key: an unknown
    one is refused like an unknown full key, never ignored.
    """
    parsed: dict[str, Any] = {}
    for key, text in raw.items():
        if key.startswith(PREFIX):
            short = key[len(PREFIX):]
        elif "." not in key:
            short = key
        else:
            continue
        full_key = PREFIX + short
        spec = BY_KEY.get(short)
        if spec is None:
            known = ", ".join(s.key for s in SPECS)
            raise OptionError(f"unknown option {full_key}; known options under {PREFIX}: {known}")
        try:
            parsed[short] = spec.parse(str(text))
        except ValueError as e:
            raise OptionError(
                f"invalid value {text!r} for {full_key}: {e}; accepted: {spec.accepted}"
            ) from e
    return parsed


def store_options(raw: Mapping[str, str]) -> StoreOptions:
    parsed = validate(raw)
    names = {f.name for f in fields(StoreOptions)}
    values = {BY_KEY[k].field: v for k, v in parsed.items() if BY_KEY[k].field in names}
    return StoreOptions(**values)

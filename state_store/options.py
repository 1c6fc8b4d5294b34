"""Every `spark.sql.streaming.stateStore.pyrocks.*` option: name, default, accepted values.

This table is the single definition: the worker validates every key it is handed against
it (unknown keys included), `spark.spark_conf()` validates on the driver before a query
starts, and the README's configuration table is printed from it (`state-store options`).
The shim reads the launch options (which Python, how many workers) itself, because it
needs them before any worker exists; it checks their values with the same words.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from .errors import OptionError

PREFIX = "spark.sql.streaming.stateStore.pyrocks."


def _integer(text: str, minimum: int) -> int:
    value = int(text)
    if value < minimum:
        raise ValueError(f"must be >= {minimum}")
    return value


def _positive_int(text: str) -> int:
    return _integer(text, 1)


def _non_negative_int(text: str) -> int:
    return _integer(text, 0)


def _open_files(text: str) -> int:
    value = int(text)
    if value < -1 or value == 0:
        raise ValueError("must be -1 (no limit) or >= 1")
    return value


def _boolean(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError("must be true or false")
    return lowered == "true"


# Binary multiples, as Spark reads `spark.executor.memory`: 256k = 256 KiB.
_SIZE = re.compile(r"\s*(\d+)\s*([kmgt]?)(?:i?b)?\s*", re.IGNORECASE)
_SHIFT = {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}


def _bytes(text: str) -> int:
    match = _SIZE.fullmatch(text)
    if match is None:
        raise ValueError("must be a size: bytes, or a number with k, m or g (e.g. 256k)")
    return int(match.group(1)) << _SHIFT[match.group(2).lower()]


def _in_units(shift: int, minimum: int) -> Callable[[str], int]:
    """A size in bytes (`shift` 0), KiB (10) or MiB (20): a plain number is in that unit, a
    suffixed one (`1g`) must be a whole number of it."""
    unit = {0: "bytes", 10: "KiB", 20: "MiB"}[shift]

    def parse(text: str) -> int:
        if text.strip().isdigit():
            return _integer(text, minimum)
        size = _bytes(text)
        if size % (1 << shift):
            raise ValueError(f"must be a whole number of {unit}")
        return _integer(str(size >> shift), minimum)
    return parse


_DURATION = re.compile(r"\s*(\d+(?:\.\d*)?)\s*(ms|s|sec|secs|m|min|mins|h|d)?\s*",
                       re.IGNORECASE)
_SECONDS = {None: 1.0, "ms": 0.001, "s": 1.0, "sec": 1.0, "secs": 1.0, "m": 60.0,
            "min": 60.0, "mins": 60.0, "h": 3600.0, "d": 86400.0}


def _duration(text: str) -> float:
    match = _DURATION.fullmatch(text)
    if match is None:
        raise ValueError("must be a duration: seconds, or a number with ms, s, min, h or d")
    unit = match.group(2).lower() if match.group(2) else None
    return float(match.group(1)) * _SECONDS[unit]


# Longer than any snapshot upload we expect to see (see orphanMarginSeconds).
ORPHAN_MARGIN_MIN_S = 600


def _at_least(minimum: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = _duration(text)
        if not value >= minimum:  # also refuses NaN
            raise ValueError(f"must be >= {minimum}")
        return value
    return parse


def _whole_seconds(text: str) -> int:
    value = _duration(text)
    if value != int(value) or value < 1:
        raise ValueError("must be a whole number of seconds >= 1")
    return int(value)


def _json_object(text: str) -> dict[str, Any]:
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError("must be a JSON object")
    return value


def _text(text: str) -> str:
    if not text.strip():
        raise ValueError("must not be empty")
    return text.strip()


DEFAULT_COMPRESSION = "lz4"
# Spark's names for RocksDB's compression types (rocksdict calls bzip2 `bz2`).
COMPRESSIONS = ("none", "snappy", "zlib", "bzip2", "lz4", "lz4hc", "zstd")


# The codecs of changelog files (format/changelog_file.py), by Spark's names for its state
# store codecs. Spark's lzf is read as lz4 (a codec of the same kind, which cramjam has), and
# Spark's codec class names as their short names.
CHANGELOG_CODECS = ("lz4", "zstd", "snappy", "none")
DEFAULT_CHANGELOG_COMPRESSION = "lz4"
_SPARK_CODEC_NAMES = {"lzf": "lz4", "org.apache.spark.io.lz4compressioncodec": "lz4",
                      "org.apache.spark.io.lzfcompressioncodec": "lz4",
                      "org.apache.spark.io.snappycompressioncodec": "snappy",
                      "org.apache.spark.io.zstdcompressioncodec": "zstd"}


def _changelog_codec(text: str) -> str:
    lowered = text.strip().lower()
    if lowered not in CHANGELOG_CODECS:
        raise ValueError("unknown changelog compression")
    return lowered


def _from_spark_codec(text: str) -> str:
    lowered = text.strip().lower()
    return _SPARK_CODEC_NAMES.get(lowered, lowered)


def _compression(text: str) -> str:
    lowered = text.strip().lower()
    if lowered not in COMPRESSIONS:
        raise ValueError("unknown compression")
    return lowered


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
    OptionSpec("writeBatchBytes", "", _in_units(0, 1), "262144", "a size >= 1 byte (256k)",
               "Bytes of buffered writes the shim ships in one frame."),
    OptionSpec("readCacheMB", "", _in_units(20, 0), "", "MiB >= 0 (or a size: 1g)",
               "Executor-wide budget of the shim's exact read cache, in MiB (0 disables); "
               "default: a quarter of the executor's heap, at least 256. A state that fits "
               "it is read without round trips to the workers."),
    OptionSpec("memoryBoundMB", "", _in_units(20, 0), "512", "MiB >= 0 (or a size: 1g)",
               "Executor-wide bound on RocksDB memory (block cache, index/filter blocks and "
               "memtables of all stores, and the allocator's overhead around them), split "
               "across the workers; 0 = per-store defaults."),
    OptionSpec("requestTimeoutSeconds", "", _whole_seconds, "600",
               "whole seconds >= 1 (or a duration: 10min)",
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
    OptionSpec("cleanupBackoffInitialSeconds", "", _at_least(0.0), "1",
               "seconds >= 0 (or a duration: 500ms)",
               "First delay before a failed cleanup step of an ended run is retried; it "
               "doubles with each failure."),
    OptionSpec("cleanupBackoffMaxSeconds", "", _at_least(0.0), "3600",
               "seconds >= 0 (or a duration: 1h)",
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
    OptionSpec("snapshotWhenIdleSeconds", "snapshot_when_idle_seconds", _at_least(0.0), "1",
               "seconds >= 0 (or a duration: 500ms)",
               "A store that stays this long without a request after a commit snapshots that "
               "version in the background: the final snapshot, taken before stop() asks for "
               "it (0: never; finishing the store takes it). Only the four stores of a worker "
               "that committed last wait this long; older ones wait 0.25 s at most."),
    OptionSpec("maxReplayVersions", "max_replay_versions", _positive_int, "50",
               "an integer >= 1", "Bound on changelogs replayed at load: a commit that would "
               "exceed it waits for (or takes) a snapshot."),
    OptionSpec("maxReplayBytes", "max_replay_bytes", _in_units(0, 1), "268435456",
               "a size >= 1 byte (256m)",
               "Bound on changelog bytes (as stored: compressed) replayed at load, likewise."),
    OptionSpec("orphanMarginSeconds", "orphan_margin_seconds", _at_least(ORPHAN_MARGIN_MIN_S),
               "3600", f"seconds >= {ORPHAN_MARGIN_MIN_S} (or a duration: 1h)",
               "Files no record references are deleted once they entered durable storage this "
               "long ago (leftovers of crashed or losing attempts; also the idle time after "
               "which an earlier query's state at a reset checkpoint path is deleted). It must "
               "exceed the longest snapshot upload, whose files no record names until it is "
               "published: hence the minimum."),
    OptionSpec("trackTotalNumberOfRows", "track_num_keys", _boolean, "true", "true or false",
               "Count keys exactly for numRowsTotal (a lookup per put/remove unless the shim "
               "knows the key); false: no counting, numRowsTotal is 0, as with Spark's "
               "RocksDB provider."),
    OptionSpec("iteratorChunkBytes", "iterator_chunk_bytes", _in_units(0, 1), "1048576",
               "a size >= 1 byte (1m)", "Bytes of key/value pairs per iterator chunk."),
    OptionSpec("writeBufferMB", "write_buffer_mb", _in_units(20, 1), "16",
               "MiB >= 1 (or a size: 64m)", "RocksDB memtable size per store, in MiB."),
    OptionSpec("compression", "compression", _compression, DEFAULT_COMPRESSION,
               ", ".join(COMPRESSIONS),
               "Compression of the data blocks of RocksDB's files (local and uploaded); "
               "Spark's RocksDB provider uses lz4 too. See docs/benchmarks.md for size and "
               "speed of each."),
    OptionSpec("changelogCompression", "changelog_compression", _changelog_codec,
               DEFAULT_CHANGELOG_COMPRESSION,
               ", ".join(CHANGELOG_CODECS),
               "Compression of the changelog files, the bytes every commit writes (1 MiB "
               "chunks); as Spark's own providers do with Spark's state store codec (lz4 by "
               "default). none writes the records as they are."),
    OptionSpec("blockSizeKB", "block_size_kb", _in_units(10, 1), "4", "KiB >= 1 (or 16k)",
               "RocksDB data block size, in KiB: larger blocks compress better and index "
               "smaller, smaller ones read less per lookup."),
    OptionSpec("blockCacheMB", "block_cache_mb", _in_units(20, 0), "8",
               "MiB >= 0 (or a size: 64m)",
               "Each store's own block cache, in MiB, used only when memoryBoundMB is 0 "
               "(otherwise the stores of a worker share the bounded cache)."),
    OptionSpec("maxOpenFiles", "max_open_files", _open_files, "-1", "-1 or an integer >= 1",
               "Files each store's RocksDB keeps open (-1: no limit)."),
    OptionSpec("compactOnCommit", "compact_on_commit", _boolean, "false", "true or false",
               "Compact the whole store at every commit (smaller snapshots, slower commits), "
               "as Spark's rocksdb.compactOnCommit. Such stores get workers of their own, "
               "whose compactions keep their CPU priority (others run them at nice 19)."),
)
BY_KEY = {spec.key: spec for spec in SPECS}


@dataclass(frozen=True)
class StoreOptions:
    """The options a worker's engine uses; launch options never reach it."""

    root_url: str | None = None
    root_options: dict[str, Any] = field(default_factory=dict)
    snapshot_interval: int = 10
    snapshot_when_idle_seconds: float = 1.0
    max_replay_versions: int = 50
    max_replay_bytes: int = 256 << 20
    orphan_margin_seconds: float = 3600.0
    track_num_keys: bool = True
    iterator_chunk_bytes: int = 1 << 20
    write_buffer_mb: int = 16
    compression: str = DEFAULT_COMPRESSION
    changelog_compression: str = DEFAULT_CHANGELOG_COMPRESSION
    block_size_kb: int = 4
    block_cache_mb: int = 8
    max_open_files: int = -1
    compact_on_commit: bool = False
    min_versions_to_retain: int = 100  # Spark's, recorded in manifests for inspect's GC plan
    # Not an option: the smallest write frame applied behind an idle session's queue
    # (deferred_writes.py). The shim sends a smaller one only before a request: a read,
    # which would wait for it at once, or the commit.
    defer_min_bytes: int = 64 << 10


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


# ---- Spark's RocksDB provider's settings ---------------------------------------------------

SPARK_STATE_PREFIX = "spark.sql.streaming.stateStore."
SPARK_ROCKSDB_PREFIX = SPARK_STATE_PREFIX + "rocksdb."


@dataclass(frozen=True)
class SparkSetting:
    """A setting of Spark's own providers that means the same here: a query tuned for
    Spark's RocksDB provider keeps its tuning when it moves onto ours. Our own key, when
    set, wins."""

    key: str  # the full Spark key
    ours: str  # the short key of ours it sets
    convert: Callable[[str], str | None] = str.strip  # None: Spark's "use RocksDB's default"


def _rocksdb_default_if_negative(text: str) -> str | None:
    return None if text.strip().startswith("-") else text.strip()


SPARK_SETTINGS: tuple[SparkSetting, ...] = (
    SparkSetting(SPARK_ROCKSDB_PREFIX + "compression", "compression"),
    SparkSetting(SPARK_ROCKSDB_PREFIX + "blockSizeKB", "blockSizeKB"),
    SparkSetting(SPARK_ROCKSDB_PREFIX + "blockCacheSizeMB", "blockCacheMB"),
    SparkSetting(SPARK_ROCKSDB_PREFIX + "writeBufferSizeMB", "writeBufferMB",
                 _rocksdb_default_if_negative),
    SparkSetting(SPARK_ROCKSDB_PREFIX + "maxOpenFiles", "maxOpenFiles"),
    SparkSetting(SPARK_ROCKSDB_PREFIX + "compactOnCommit", "compactOnCommit"),
    SparkSetting(SPARK_ROCKSDB_PREFIX + "trackTotalNumberOfRows", "trackTotalNumberOfRows"),
    SparkSetting(SPARK_STATE_PREFIX + "minDeltasForSnapshot", "snapshotInterval"),
    SparkSetting(SPARK_STATE_PREFIX + "compression.codec", "changelogCompression",
                 _from_spark_codec),
)
# Read by the shim before any worker starts (LaunchOptions.scala maps them the same way,
# checked by a test): boundedMemoryUsage=true bounds all stores of an executor by
# maxMemoryUsageMB (Spark's default 500), as our memoryBoundMB does; false means Spark's
# per-store caches, our memoryBoundMB=0 with blockCacheMB per store.
SPARK_MEMORY_KEYS = (SPARK_ROCKSDB_PREFIX + "boundedMemoryUsage",
                     SPARK_ROCKSDB_PREFIX + "maxMemoryUsageMB")
SPARK_MAX_MEMORY_DEFAULT_MB = 500


def spark_memory_bound(raw: Mapping[str, str]) -> str | None:
    """memoryBoundMB as Spark's memory settings in `raw` give it; None if they are unset."""
    bounded = raw.get(SPARK_MEMORY_KEYS[0])
    if bounded is None:
        return None
    if not _boolean(str(bounded)):
        return "0"
    return str(raw.get(SPARK_MEMORY_KEYS[1], SPARK_MAX_MEMORY_DEFAULT_MB)).strip()


def from_spark_settings(raw: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """Our options (short key -> (the Spark key, its value)) that Spark's settings in `raw`
    set, where ours are not set."""
    def ours_set(short: str) -> bool:
        return PREFIX + short in raw or short in raw

    mapped: dict[str, tuple[str, str]] = {}
    for setting in SPARK_SETTINGS:
        if setting.key in raw and not ours_set(setting.ours):
            value = setting.convert(str(raw[setting.key]))
            if value is not None:
                mapped[setting.ours] = (setting.key, value)
    bound = spark_memory_bound(raw)
    if bound is not None and not ours_set("memoryBoundMB"):
        mapped["memoryBoundMB"] = (" and ".join(k for k in SPARK_MEMORY_KEYS if k in raw), bound)
    return mapped


def ignored_spark_settings(raw: Mapping[str, str]) -> list[str]:
    """The keys of Spark's RocksDB provider set in `raw` that have no meaning here."""
    honoured = {s.key for s in SPARK_SETTINGS} | set(SPARK_MEMORY_KEYS)
    return sorted(k for k in raw if k.startswith(SPARK_ROCKSDB_PREFIX) and k not in honoured)


def ignored_warning(keys: list[str]) -> str:
    return (f"settings of Spark's RocksDB provider that the pyrocks state store ignores "
            f"(no meaning here): {', '.join(keys)}. Honoured: "
            + ", ".join(f"{s.key.removeprefix(SPARK_STATE_PREFIX)} as {s.ours}"
                        for s in SPARK_SETTINGS)
            + ", rocksdb.boundedMemoryUsage/maxMemoryUsageMB as memoryBoundMB.")


def effective(raw: Mapping[str, str]) -> dict[str, Any]:
    """Every option `raw` sets, ours and those Spark's settings map to, parsed (short keys)."""
    parsed = validate(raw)
    for short, (source, text) in from_spark_settings(raw).items():
        spec = BY_KEY[short]
        try:
            parsed[short] = spec.parse(text)
        except ValueError as e:
            raise OptionError(f"invalid value {text!r} for {source} (Spark's setting, read as "
                              f"{PREFIX}{short}): {e}; accepted: {spec.accepted}") from e
    return parsed


# Not a state store setting: the shim adds the value Spark's StateStoreConf holds.
RETAIN_KEY = "spark.sql.streaming.minBatchesToRetain"


def store_options(raw: Mapping[str, str]) -> StoreOptions:
    parsed = effective(raw)
    names = {f.name for f in fields(StoreOptions)}
    values = {BY_KEY[k].field: v for k, v in parsed.items() if BY_KEY[k].field in names}
    if RETAIN_KEY in raw:
        try:
            values["min_versions_to_retain"] = _non_negative_int(str(raw[RETAIN_KEY]))
        except ValueError as e:
            raise OptionError(f"invalid value {raw[RETAIN_KEY]!r} for {RETAIN_KEY}: {e}") from e
    return StoreOptions(**values)


def canonical(key: str, value: Any) -> str:
    """The conf text of a Python value given for our option `key` (short): dicts as JSON,
    booleans as Spark writes them, sizes and durations as the number the shim reads."""
    spec = BY_KEY.get(key)
    if isinstance(value, bool):
        text = str(value).lower()
    elif isinstance(value, (dict, list)):
        text = json.dumps(value)
    else:
        text = str(value)
    if spec is None:
        return text
    parsed = validate({key: text})[key]
    if isinstance(parsed, bool):
        return str(parsed).lower()
    if isinstance(parsed, dict):
        return json.dumps(parsed)
    if isinstance(parsed, float) and parsed.is_integer():
        return str(int(parsed))
    return str(parsed)

"""Restoring a canonical savepoint: a new checkpoint whose stores are written from its rows,
onto this provider (the migration path) or Spark's RocksDB provider (the exit path), at the
savepoint's partition count or another one (rescaling).

Semantics are those of Spark's own offline repartition (4.3), so users find what they know:
the new checkpoint holds batch N as the source had it, plus a new batch N + 1 whose offsets
equal N's with only the provider and `spark.sql.shuffle.partitions` changed (Spark reuses
both from the latest offset log entry on every restart), committed with N's commit. Every
store holds the savepoint's rows at version N + 2 (Spark's state version of batch N + 1),
each row in the partition Spark's hash partitioning routes its key to. The restored query's
first batch is N + 2, and it runs under a new query id (see restore.py for why).

Order (what a crash at any point leaves): the restore record, Spark's files of batch N,
`metadata` (the new query id, which our stores are kept under), offsets N + 1, the stores,
and commit N + 1 last. Without that commit the checkpoint is incomplete: a query started on
it reruns batch N + 1, finds no state at version N + 1 and fails naming it; a rerun of the
same restore completes it.
"""

from __future__ import annotations

import json

from py4j.java_gateway import JavaClass
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from ..driver.classes import PROVIDER_CLASS, PROVIDER_KEY, SPARK_ROCKSDB
from ..format.spark_checkpoint import COMMITS, METADATA, OFFSETS, STATE, SparkCheckpoint
from ..format.storage import Storage, absolute_url, open_storage
from .canonical_take import PARTITIONS_CONF
from .layout import CHECKPOINT_DIR, CanonicalStore, RestoreInfo, SavepointDescriptor
from .target import RestoreError, interrupted_restore, put, start_restore


def target_providers() -> dict[str, str]:
    """What a canonical savepoint restores onto, by the name users pass."""
    return {"pyrocks": PROVIDER_CLASS, "rocksdb": SPARK_ROCKSDB}


def restore_canonical(spark: SparkSession, savepoint: Storage, descriptor: SavepointDescriptor,
                      new_checkpoint: str, partitions: int | None = None,
                      provider: str = "pyrocks",
                      target_options: dict | None = None) -> RestoreInfo:
    """Makes `new_checkpoint` resume the canonical savepoint in `savepoint`."""
    providers = target_providers()
    if provider not in providers:
        raise RestoreError(f"unknown target provider {provider!r}; choose one of "
                           f"{', '.join(providers)}")
    spark_root = savepoint.child(CHECKPOINT_DIR)
    batch = descriptor.batch
    written = descriptor.written()
    for saved in descriptor.files:  # every file as the savepoint recorded it, or nothing
        if not saved.path.startswith(f"{CHECKPOINT_DIR}/"):
            savepoint.verify(saved.path, saved.written, f"canonical savepoint {savepoint.url}")

    def read(rel: str) -> bytes:
        path = f"{CHECKPOINT_DIR}/{rel}"
        if path not in written:
            raise RestoreError(f"canonical savepoint {savepoint.url} lacks {path}")
        return savepoint.read_verified(path, written[path], f"canonical savepoint "
                                                            f"{savepoint.url}")

    offsets = read(f"{OFFSETS}/{batch}")
    recorded = SparkCheckpoint(spark_root).batch_conf(batch)
    current = int(recorded[PARTITIONS_CONF])
    count = _partition_count(current, partitions)
    # Refused before anything is written; each store's Parquet schema, read once, is then
    # given to the job that writes it (read again, Spark would infer it in a job of its own).
    schemas = [_checked_schema(spark, savepoint, store) for store in descriptor.canonical_stores]
    spark_files = {saved.path.removeprefix(f"{CHECKPOINT_DIR}/"): read(
        saved.path.removeprefix(f"{CHECKPOINT_DIR}/")) for saved in descriptor.files
        if saved.path.startswith(f"{CHECKPOINT_DIR}/")}
    target = absolute_url(new_checkpoint)
    out = open_storage(target, target_options)
    mode = f"canonical:{provider}:{count}"
    written_last = f"{COMMITS}/{batch + 1}"
    record = interrupted_restore(out, savepoint.url, batch, mode, written_last) \
        or start_restore(out, savepoint.url, batch, mode)
    for rel, data in spark_files.items():
        if rel == METADATA:
            continue  # the query id: a new one
        put(out, rel, _rescaled_operator_metadata(data, count) if _is_operator_metadata(rel)
            else data)
    put(out, METADATA, json.dumps({"id": record.query_id}).encode() + b"\n")
    put(out, f"{OFFSETS}/{batch + 1}", _next_offsets(offsets, recorded, providers[provider],
                                                     count))
    for store, schema in zip(descriptor.canonical_stores, schemas, strict=True):
        _write_store(spark, savepoint, store, schema, target, batch + 2, count,
                     providers[provider])
    put(out, written_last, spark_files[f"{COMMITS}/{batch}"])
    return RestoreInfo(target, record.query_id, savepoint.url, batch, mode,
                       len(descriptor.canonical_stores) * count)


def _partition_count(current: int, requested: int | None) -> int:
    """Spark's rules for offline repartition: a positive count that changes something."""
    if requested is None:
        return current
    if requested < 1:
        raise RestoreError(f"--partitions must be greater than zero, not {requested}")
    if requested == current:
        raise RestoreError(f"the savepoint already has {current} partitions "
                           f"({PARTITIONS_CONF}); omit --partitions to keep them")
    return requested


def _next_offsets(offsets: bytes, recorded: dict[str, str], provider_class: str,
                  partitions: int) -> bytes:
    """Offsets N + 1: N's, with the provider and the partition count Spark will reuse."""
    lines = offsets.decode().split("\n")
    metadata = json.loads(lines[1])
    metadata["conf"] = {**recorded, PROVIDER_KEY: provider_class,
                        PARTITIONS_CONF: str(partitions)}
    lines[1] = json.dumps(metadata, separators=(",", ":"))
    return "\n".join(lines).encode()


def _is_operator_metadata(rel: str) -> bool:
    parts = rel.split("/")
    return len(parts) == 4 and parts[0] == STATE and parts[2] == "_metadata" \
        and parts[3] == "metadata"


def _rescaled_operator_metadata(data: bytes, partitions: int) -> bytes:
    """Spark's operator metadata (v1) with every store's `numPartitions` set to the new count
    (what Spark's own repartition updates)."""
    version, _, body = data.decode().partition("\n")
    if version != "v1":
        return data  # v2 belongs to transformWithState, which routing.py refuses
    metadata = json.loads(body)
    for info in metadata.get("stateStoreInfo", []):
        info["numPartitions"] = partitions
    return f"{version}\n{json.dumps(metadata, separators=(',', ':'))}".encode()


def _write_store(spark: SparkSession, savepoint: Storage, store: CanonicalStore,
                 schema: StructType, target: str, version: int, partitions: int,
                 provider_class: str) -> None:
    """One Spark job: the store's rows (Parquet of `schema`), routed by Spark's hash
    partitioning of the operator's key columns, written partition by partition through the
    provider's API."""
    where = _describe(savepoint, store)
    rows = (spark.read.schema(schema).parquet(f"{savepoint.url}/{store.path}")
            .select("key", "value"))
    routed = rows.repartition(partitions, *[F.col("key")[c] for c in store.route_columns])
    writer = _writer(spark)
    written = writer.write(routed._jdf, f"{target}/{STATE}", store.operator, store.store_name,
                           store.key_schema, store.value_schema, store.prefix_key_columns,
                           partitions, version - 1, provider_class)
    if sum(written) != store.rows:
        raise RestoreError(f"{where}: wrote {sum(written)} rows, the savepoint holds "
                           f"{store.rows}")


def _writer(spark: SparkSession) -> JavaClass:
    writer = spark._jvm.org.apache.spark.sql.execution.streaming.state.PyRocksStateWriter
    if not isinstance(writer, JavaClass):  # py4j's answer for a class it cannot load
        raise RestoreError("this SparkSession runs without the pyrocks shim, which writes the "
                           "stores: build it with state_store.spark.configure(builder)")
    return writer


def _describe(savepoint: Storage, store: CanonicalStore) -> str:
    return (f"operator {store.operator} ({store.operator_name}) store {store.store_name} of "
            f"{savepoint.url}")


def _checked_schema(spark: SparkSession, savepoint: Storage,
                    store: CanonicalStore) -> StructType:
    """The store's Parquet schema, once the store is known routable and its columns still
    have the store's types (nullability aside): a file replaced by hand must not become
    wrong state."""
    where = _describe(savepoint, store)
    if not store.route_columns:
        raise RestoreError(f"{where} has no key columns to route by (a global aggregation "
                           "keeps its state in one partition): it cannot be restored")
    schema = spark.read.parquet(f"{savepoint.url}/{store.path}").schema
    missing = {"key", "value"} - set(schema.names)
    if missing:
        raise RestoreError(f"{where}: its Parquet files lack the column(s) "
                           f"{', '.join(sorted(missing))}")
    for column, recorded in (("key", store.key_schema), ("value", store.value_schema)):
        want = StructType.fromJson(json.loads(recorded))
        have = schema[column].dataType
        if have.simpleString() != want.simpleString():  # nullability aside
            raise RestoreError(f"{where}: its {column} column is {have.simpleString()}, but "
                               f"the store's {column} schema is {want.simpleString()}")
    return schema


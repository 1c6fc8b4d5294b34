"""Taking a canonical savepoint: every store's rows at batch N as typed Parquet.

The rows are read through Spark's own state data source (`format("statestore")`), which
reads every provider: Spark's RocksDB and HDFS providers as well as ours. So a query that
ran on any of them can move onto this provider, or change its partition count, through a
canonical savepoint. Which operators and stores exist, their partition counts and key
layouts come from Spark's operator metadata (`format("state-metadata")`).

Order (what a crash at any point leaves): Spark's files, then each store's Parquet, then
the descriptor, published put-if-absent: without it the directory is an incomplete
savepoint that nothing uses. The source is only read.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pyarrow.parquet as pq
import pyspark
from pyspark.sql import DataFrame, SparkSession

from ..driver import releases
from ..driver.classes import PROVIDER_KEY, SPARK_HDFS
from ..format.spark_checkpoint import METADATA, SourceError, SparkCheckpoint
from ..format.storage import Storage, absolute_url, checksum, format_checksum, open_storage
from .layout import (
    CANONICAL,
    DESCRIPTOR,
    CanonicalStore,
    SavedFile,
    SavepointDescriptor,
    SavepointInfo,
)
from .routing import check_routable, route_columns
from .target import copy_spark_files, open_savepoint_target, publish_descriptor

PARTITIONS_CONF = "spark.sql.shuffle.partitions"


def canonical_savepoint(spark: SparkSession, checkpoint: str, target: str,
                        batch: int | None = None, *, storage_options: dict | None = None,
                        target_options: dict | None = None) -> SavepointInfo:
    """Writes a canonical savepoint of `checkpoint` (a checkpoint of any provider) at its
    committed `batch` (default: the latest) to `target`, a new directory."""
    url = absolute_url(checkpoint)
    storage = open_storage(url, storage_options)
    if storage.read_if_exists(DESCRIPTOR) is not None:
        raise SourceError(f"{url} is a savepoint; a canonical savepoint is taken of a query's "
                          "checkpoint (restore the savepoint first, then take it of that)")
    if storage.read_if_exists(METADATA) is None:
        raise SourceError(f"{url} is not a Spark checkpoint (no {METADATA})")
    logs = SparkCheckpoint(storage)
    # The last committed batch, as a native savepoint takes: a query stopped while a trigger
    # ran has offsets of a batch it never committed, which its restart (not this) redoes.
    batch = logs.committed_batch(batch)
    spark_files = [METADATA, *logs.batch_logs(batch), *logs.spark_state_metadata()]
    _refuse_unreadable_commit_log(logs, batch)
    operators = _operators(spark, url, batch)
    for op in operators:  # refused before the target exists
        check_routable(op["operatorName"], op["stateStoreName"])
    out = open_savepoint_target(target, target_options if target_options is not None
                                else storage_options)
    files = copy_spark_files(lambda rel: storage.read(rel, f"Spark file {rel} of {url}"),
                             spark_files, out)
    stores = []
    for op in operators:  # Spark's own console progress shows each store's job
        store, written = _write_store(spark, url, batch, op, out)
        stores.append(store)
        files += written
    descriptor = SavepointDescriptor(
        source_query_id=logs.query_id(), source=url, batch=batch,
        operators=sorted({s.operator for s in stores}),
        partitions={str(s.operator): s.partitions for s in stores},
        stores=[f"{s.operator}/{s.store_name}" for s in stores],
        provider=logs.batch_conf(batch).get(PROVIDER_KEY, SPARK_HDFS), files=files,
        format=CANONICAL, canonical_stores=stores)
    return publish_descriptor(out, descriptor)


def _refuse_unreadable_commit_log(logs: SparkCheckpoint, batch: int) -> None:
    """Spark's state data sources read commit logs of format 2 (checkpoint ids) from Spark
    4.2 on; before, they fail on such a checkpoint whichever provider wrote it."""
    release = releases.release_of(pyspark.__version__)
    if logs.commit_format(batch) >= 2 and release is not None and release < (4, 2):
        raise SourceError(
            f"batch {batch} of {logs.storage.url} was committed with state store checkpoint "
            f"ids (checkpointFormatVersion 2), which Spark {pyspark.__version__}'s state data "
            "source cannot read: a canonical savepoint of it needs Spark 4.2 or later; take "
            "a native savepoint (--format native) instead")


def _operators(spark: SparkSession, url: str, batch: int) -> list[dict]:
    """Spark's operator metadata: one row per store that holds state at `batch`."""
    metadata = spark.read.format("state-metadata").load(url)
    rows = metadata.select("operatorId", "operatorName", "stateStoreName", "numPartitions",
                           "minBatchId", "maxBatchId", "_numColsPrefixKey").collect()
    if not rows:
        raise SourceError(f"checkpoint {url} has no stateful operator (Spark's operator "
                          "metadata under state/ is empty): nothing to savepoint")
    found = []
    for row in sorted(rows, key=lambda r: (r.operatorId, r.stateStoreName)):
        if not row.minBatchId <= batch <= row.maxBatchId:
            raise SourceError(f"operator {row.operatorId} ({row.operatorName}) store "
                              f"{row.stateStoreName} of {url} has no state for batch {batch} "
                              f"(batches {row.minBatchId}..{row.maxBatchId} are retained)")
        found.append(row.asDict())
    return found


def _write_store(spark: SparkSession, url: str, batch: int, op: dict,
                 out: Storage) -> tuple[CanonicalStore, list[SavedFile]]:
    state = _read_state(spark, url, batch, op["operatorId"], op["stateStoreName"])
    key_type = state.schema["key"].dataType
    value_type = state.schema["value"].dataType
    routed = route_columns(op["operatorName"], op["stateStoreName"], key_type.names,
                           op["_numColsPrefixKey"])
    store = CanonicalStore(
        operator=op["operatorId"], operator_name=op["operatorName"],
        store_name=op["stateStoreName"], partitions=op["numPartitions"],
        prefix_key_columns=op["_numColsPrefixKey"], key_schema=key_type.json(),
        value_schema=value_type.json(), route_columns=routed, rows=0)
    location = f"{out.url}/{store.path}"
    state.select("partition_id", "key", "value").write.parquet(location)
    written = [rel for rel in out.find(store.path) if rel.endswith(".parquet")]
    rows, saved = 0, []
    for rel in written:
        data = out.read(rel, f"Parquet file {rel} of canonical savepoint {out.url}")
        saved.append(SavedFile(rel, len(data), format_checksum(checksum(data))))
        rows += _rows_in(data)
    for rel in out.find(store.path):
        if not rel.endswith(".parquet"):
            out.delete(rel)  # Spark's _SUCCESS and checksum side files: not the savepoint's
    return dataclasses.replace(store, rows=rows), saved


def _rows_in(parquet: bytes) -> int:
    """The rows of one Parquet file, off its footer: the count is of exactly the bytes the
    descriptor checksums, and reading it back through Spark would cost two jobs a store."""
    return pq.ParquetFile(pa.BufferReader(parquet)).metadata.num_rows


def _read_state(spark: SparkSession, url: str, batch: int, operator: int,
                store_name: str) -> DataFrame:
    return (spark.read.format("statestore").option("batchId", batch)
            .option("operatorId", operator).option("storeName", store_name).load(url))


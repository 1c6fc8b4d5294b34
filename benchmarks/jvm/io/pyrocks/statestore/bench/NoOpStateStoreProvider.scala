package io.pyrocks.statestore.bench

import org.apache.hadoop.conf.Configuration

import io.pyrocks.statestore.{StateStoreApi, StateStoreProviderApi}

import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.types.StructType

/**
 * A state store that keeps nothing: every get misses, every scan is empty, a commit costs
 * nothing. A stateful query run on it shows the floor of its batches, what they cost with a
 * free state store, so `benchmarks.scale` can tell which part of a batch a real store costs.
 * Its answers are wrong by design (every key is new every batch): a benchmark's floor only.
 */
class NoOpStateStoreProvider extends StateStoreProviderApi {
  private var storeId: StateStoreId = _

  override def init(
      stateStoreId: StateStoreId,
      keySchema: StructType,
      valueSchema: StructType,
      keyStateEncoderSpec: KeyStateEncoderSpec,
      useColumnFamilies: Boolean,
      storeConfs: StateStoreConf,
      hadoopConf: Configuration,
      useMultipleValuesPerKey: Boolean,
      stateSchemaProvider: Option[StateSchemaProvider]): Unit = storeId = stateStoreId

  override def stateStoreId: StateStoreId = storeId

  override def getStore(version: Long, uniqueId: Option[String], forceSnapshotOnCommit: Boolean,
      loadEmpty: Boolean): StateStore = new NoOpStateStore(storeId, version)

  override def doMaintenance(): Unit = {}
  override def doSnapshotMaintenance(): Unit = {}
  override def doCleanupMaintenance(): Unit = {}
  override def close(): Unit = {}
}

final class NoOpStateStore(override val id: StateStoreId, override val version: Long)
    extends StateStoreApi {
  @volatile private var committed = false

  private def nothing: StateStoreIterator[UnsafeRowPair] =
    new StateStoreIterator(Iterator.empty, () => ())

  override def get(key: UnsafeRow, colFamilyName: String): UnsafeRow = null
  override def valuesIterator(key: UnsafeRow, colFamilyName: String): Iterator[UnsafeRow] =
    Iterator.empty
  override def iterator(colFamilyName: String): StateStoreIterator[UnsafeRowPair] = nothing
  override def iteratorWithMultiValues(cf: String): StateStoreIterator[UnsafeRowPair] = nothing
  override def prefixScan(prefixKey: UnsafeRow, cf: String): StateStoreIterator[UnsafeRowPair] =
    nothing
  override def prefixScanWithMultiValues(prefixKey: UnsafeRow,
      cf: String): StateStoreIterator[UnsafeRowPair] = nothing
  override def rangeScan(startKey: Option[UnsafeRow], endKey: Option[UnsafeRow],
      cf: String): StateStoreIterator[UnsafeRowPair] = nothing
  override def allColumnFamilyNames: Set[String] = Set(StateStore.DEFAULT_COL_FAMILY_NAME)

  override def put(key: UnsafeRow, value: UnsafeRow, colFamilyName: String): Unit = {}
  override def remove(key: UnsafeRow, colFamilyName: String): Unit = {}
  override def merge(key: UnsafeRow, value: UnsafeRow, colFamilyName: String): Unit = {}
  override def putList(key: UnsafeRow, values: Array[UnsafeRow], colFamilyName: String): Unit = {}
  override def mergeList(key: UnsafeRow, values: Array[UnsafeRow], colFamilyName: String)
      : Unit = {}
  override def deleteRange(beginKey: UnsafeRow, endKey: UnsafeRow, colFamilyName: String)
      : Unit = {}
  override def createColFamilyIfAbsent(colFamilyName: String, keySchema: StructType,
      valueSchema: StructType, keyStateEncoderSpec: KeyStateEncoderSpec,
      useMultipleValuesPerKey: Boolean, isInternal: Boolean): Unit = {}
  override def registerColFamily(colFamilyName: String, keySchema: StructType,
      valueSchema: StructType, keyStateEncoderSpec: KeyStateEncoderSpec,
      useMultipleValuesPerKey: Boolean, isInternal: Boolean): Unit = {}
  override def removeColFamilyIfExists(colFamilyName: String): Boolean = false

  override def commit(): Long = { committed = true; version + 1 }
  override def abort(): Unit = {}
  override def release(): Unit = {}
  override def hasCommitted: Boolean = committed
  override def metrics: StateStoreMetrics = StateStoreMetrics(0, 0, Map.empty)
  override def getStateStoreCheckpointInfo(): StateStoreCheckpointInfo =
    StateStoreCheckpointInfo(id.partitionId, version + 1, None, None)
}

package io.pyrocks.statestore

import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.types.StructType

/**
 * The members of Spark's `StateStore` the shim implements, declared here as abstract so the
 * shim's `override`s compile against every Spark 4.x release: older releases lack some of
 * them (an `override` of nothing is an error) and newer ones give some a default body (which
 * then requires `override`). An abstract redeclaration never hides Spark's own default; the
 * shim's definitions override both. Where each is Spark's: putList, mergeList, release
 * (default in StateStore) since 4.1; iteratorWithMultiValues, prefixScanWithMultiValues,
 * allColumnFamilyNames, rangeScan and deleteRange (defaults) since 4.2; registerColFamily
 * (a reader's, default) since 4.3.
 */
private[statestore] trait StateStoreApi extends StateStore {
  def iteratorWithMultiValues(colFamilyName: String): StateStoreIterator[UnsafeRowPair]
  def prefixScanWithMultiValues(
      prefixKey: UnsafeRow, colFamilyName: String): StateStoreIterator[UnsafeRowPair]
  def rangeScan(startKey: Option[UnsafeRow], endKey: Option[UnsafeRow],
      colFamilyName: String): StateStoreIterator[UnsafeRowPair]
  def allColumnFamilyNames: Set[String]
  def putList(key: UnsafeRow, values: Array[UnsafeRow], colFamilyName: String): Unit
  def mergeList(key: UnsafeRow, values: Array[UnsafeRow], colFamilyName: String): Unit
  def deleteRange(beginKey: UnsafeRow, endKey: UnsafeRow, colFamilyName: String): Unit
  def release(): Unit
  def registerColFamily(colFamilyName: String, keySchema: StructType, valueSchema: StructType,
      keyStateEncoderSpec: KeyStateEncoderSpec, useMultipleValuesPerKey: Boolean,
      isInternal: Boolean): Unit
}

/**
 * The same for `StateStoreProvider`: getStore with forceSnapshotOnCommit and loadEmpty is
 * Spark's since 4.2, the split maintenance calls (defaults) since 4.3; before that Spark calls
 * only `doMaintenance`, which the shim implements with both.
 */
private[statestore] trait StateStoreProviderApi extends StateStoreProvider {
  def getStore(version: Long, uniqueId: Option[String], forceSnapshotOnCommit: Boolean,
      loadEmpty: Boolean): StateStore

  /** What Spark 4.0 and 4.1 call (abstract there); from 4.2 on, an overload Spark never calls. */
  def getStore(version: Long, uniqueId: Option[String]): StateStore =
    getStore(version, uniqueId, forceSnapshotOnCommit = false, loadEmpty = false)

  def doSnapshotMaintenance(): Unit
  def doCleanupMaintenance(): Unit
}

package io.pyrocks.statestore

import org.apache.spark.TaskContext
import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.types.StructType

/**
 * A read-only or writable view of one version of a store. All state lives in the worker;
 * this class turns Spark's rows into wire records and back.
 *
 * Contract points (from Spark's `StateStore` trait):
 *  - `get` returns null for a missing key and sees this store's own uncommitted writes;
 *  - rows passed to `put` may be reused by the caller after it returns (we copy at once);
 *  - iterators may be used while the store is being updated;
 *  - `abort` may follow `commit` and then does nothing; a store left UPDATING when its task
 *    completes is aborted.
 */
class PyRocksStateStore(
    provider: PyRocksStateStoreProvider,
    val version: Long,
    readOnly: Boolean) extends StateStoreApi {
  import Wire._

  private sealed trait Phase
  private case object Updating extends Phase
  private case object Committed extends Phase
  private case object Aborted extends Phase
  @volatile private var phase: Phase = Updating

  Option(TaskContext.get()).foreach(_.addTaskCompletionListener[Unit] { _ =>
    if (phase == Updating && !readOnly) abort()
  })

  override def id: StateStoreId = provider.stateStoreId

  override def toString: String = s"PyRocksStateStore[${provider.describe}, version=$version]"

  // ---- reads --------------------------------------------------------------------------------

  override def get(key: UnsafeRow, colFamilyName: String): UnsafeRow = {
    val codec = provider.codec(colFamilyName)
    val value =
      provider.get(colFamilyName, codec.key(key), codec.multipleValues, codec.prefixOf(key))
    if (value.isEmpty) null else codec.decodeValue(value.get) // per get: no closure
  }

  override def valuesIterator(key: UnsafeRow, colFamilyName: String): Iterator[UnsafeRow] = {
    val codec = provider.codec(colFamilyName)
    provider.get(colFamilyName, codec.key(key), codec.multipleValues, codec.prefixOf(key))
      .map(codec.decodeValues).getOrElse(Nil).iterator
  }

  override def iterator(colFamilyName: String): StateStoreIterator[UnsafeRowPair] =
    scan(colFamilyName, ScanAll, Array.emptyByteArray, Array.emptyByteArray, multi = false)

  override def iteratorWithMultiValues(cf: String): StateStoreIterator[UnsafeRowPair] =
    scan(cf, ScanAll, Array.emptyByteArray, Array.emptyByteArray, multi = true)

  override def prefixScan(prefixKey: UnsafeRow, cf: String): StateStoreIterator[UnsafeRowPair] =
    scan(cf, ScanPrefix, provider.codec(cf).prefix(prefixKey), Array.emptyByteArray, multi = false)

  override def prefixScanWithMultiValues(
      prefixKey: UnsafeRow, cf: String): StateStoreIterator[UnsafeRowPair] =
    scan(cf, ScanPrefix, provider.codec(cf).prefix(prefixKey), Array.emptyByteArray, multi = true)

  override def rangeScan(
      startKey: Option[UnsafeRow],
      endKey: Option[UnsafeRow],
      cf: String): StateStoreIterator[UnsafeRowPair] = {
    val codec = provider.codec(cf)
    if (!codec.supportsRangeScan) {
      throw new UnsupportedOperationException(
        s"range scan needs a RangeKeyScanStateEncoderSpec for column family $cf")
    }
    def bound(row: Option[UnsafeRow]) = row.map(codec.key).getOrElse(Array.emptyByteArray)
    scan(cf, ScanRange, bound(startKey), bound(endKey), multi = false)
  }

  /** Rows decoded from the scan's bytes in place: a value row points into the chunk or
   * cache page the pair is in, or into the array a packed value was unpacked to (none ever
   * changes), so a pair costs its key's decoding (and an unpacking). */
  private def scan(cf: String, mode: Byte, a: Array[Byte], b: Array[Byte],
      multi: Boolean): StateStoreIterator[UnsafeRowPair] = {
    val codec = provider.codec(cf)
    val scan = provider.scan(cf, mode, a, b)
    def keyOf(at: KeyValueScan): UnsafeRow = codec.decodeKey(at)
    // A single value maps a pair to a pair: no iterator per pair (a tenth of a full scan).
    val pairs = if (multi) {
      scan.iterator.flatMap { at =>
        val key = keyOf(at)
        codec.decodeValues(at.valueBytes, at.valueAt, at.valueLength).iterator
          .map(new UnsafeRowPair(key, _))
      }
    } else {
      scan.iterator.map { at =>
        new UnsafeRowPair(keyOf(at), codec.decodeValue(at.valueBytes, at.valueAt, at.valueLength))
      }
    }
    new StateStoreIterator(pairs, () => scan.close())
  }

  override def allColumnFamilyNames: Set[String] = provider.columnFamilies()

  // ---- writes -------------------------------------------------------------------------------

  override def put(key: UnsafeRow, value: UnsafeRow, colFamilyName: String): Unit = {
    require(value != null, "Cannot put a null value")
    val codec = writable(colFamilyName)
    provider.put(colFamilyName, codec.key(key), codec.value(value), codec.multipleValues,
      codec.prefixOf(key))
  }

  override def remove(key: UnsafeRow, colFamilyName: String): Unit = {
    val codec = writable(colFamilyName)
    provider.remove(colFamilyName, codec.key(key), codec.prefixOf(key))
  }

  override def merge(key: UnsafeRow, value: UnsafeRow, colFamilyName: String): Unit =
    mergeList(key, Array(value), colFamilyName)

  override def putList(key: UnsafeRow, values: Array[UnsafeRow], colFamilyName: String): Unit = {
    val codec = multiValued(colFamilyName, "putList")
    provider.put(colFamilyName, codec.key(key), codec.valueList(values), multipleValues = true,
      codec.prefixOf(key))
  }

  override def mergeList(key: UnsafeRow, values: Array[UnsafeRow], colFamilyName: String): Unit = {
    val codec = multiValued(colFamilyName, "merge")
    provider.merge(colFamilyName, codec.key(key), codec.valueList(values), codec.prefixOf(key))
  }

  override def deleteRange(beginKey: UnsafeRow, endKey: UnsafeRow, colFamilyName: String): Unit = {
    val codec = writable(colFamilyName)
    provider.deleteRange(colFamilyName, codec.key(beginKey), codec.key(endKey))
  }

  override def createColFamilyIfAbsent(
      colFamilyName: String,
      keySchema: StructType,
      valueSchema: StructType,
      keyStateEncoderSpec: KeyStateEncoderSpec,
      useMultipleValuesPerKey: Boolean,
      isInternal: Boolean): Unit = {
    requireUpdating("create a column family")
    provider.registerColumnFamily(colFamilyName, keySchema, valueSchema, keyStateEncoderSpec,
      useMultipleValuesPerKey)
    provider.createColumnFamily(colFamilyName)
  }

  /** A reader's way to name a column family's schemas (Spark 4.3's state data source reads
   * transformWithState state through it): only how its rows decode, nothing is created. */
  override def registerColFamily(
      colFamilyName: String,
      keySchema: StructType,
      valueSchema: StructType,
      keyStateEncoderSpec: KeyStateEncoderSpec,
      useMultipleValuesPerKey: Boolean,
      isInternal: Boolean): Unit =
    provider.registerColumnFamily(colFamilyName, keySchema, valueSchema, keyStateEncoderSpec,
      useMultipleValuesPerKey)

  override def removeColFamilyIfExists(colFamilyName: String): Boolean = {
    requireUpdating("remove a column family")
    provider.dropColumnFamily(colFamilyName)
  }

  private def writable(cf: String): ColumnFamilyCodec = {
    requireUpdating("write")
    provider.codec(cf)
  }

  private def multiValued(cf: String, what: String): ColumnFamilyCodec = {
    val codec = writable(cf)
    if (!codec.multipleValues) {
      throw new UnsupportedOperationException(
        s"$what needs a column family created with useMultipleValuesPerKey; $cf is not")
    }
    codec
  }

  private def requireUpdating(what: String): Unit = {
    if (readOnly) throw new IllegalStateException(s"cannot $what: $this is read-only")
    if (phase != Updating) throw new IllegalStateException(s"cannot $what: $this is $phase")
  }

  // ---- lifecycle ----------------------------------------------------------------------------

  override def commit(): Long = {
    requireUpdating("commit")
    val newVersion = version + 1
    provider.commit(this, newVersion)
    phase = Committed
    newVersion
  }

  /** Leaves the store ABORTED (unless it committed) whatever happens on the way. */
  override def abort(): Unit = {
    try {
      if (phase == Updating && !readOnly) provider.abort(this)
    } finally {
      if (phase != Committed) phase = Aborted
    }
  }

  override def release(): Unit = {}

  override def hasCommitted: Boolean = phase == Committed

  override def metrics: StateStoreMetrics = provider.metrics()

  /** checkpointFormatVersion 2: the commit's id (the worker's lineage of the version it
   * published, or of the attempt that won the race to publish it) and the id of the version
   * it was built on; Spark writes them to its commit log and passes them back to loads. */
  @volatile private var checkpointIds: (Option[String], Option[String]) = (None, None)

  private[statestore] def committedAs(id: Option[String], base: Option[String]): Unit =
    checkpointIds = (id, base)

  override def getStateStoreCheckpointInfo(): StateStoreCheckpointInfo = {
    val (committed, base) = if (provider.checkpointIdsEnabled) checkpointIds else (None, None)
    StateStoreCheckpointInfo(id.partitionId, version + 1, committed, base)
  }
}

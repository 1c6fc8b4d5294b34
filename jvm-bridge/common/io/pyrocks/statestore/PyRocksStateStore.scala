package io.pyrocks.statestore

import java.nio.ByteBuffer

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
    provider.get(colFamilyName, codec.key(key), codec.multipleValues, codec.prefixOf(key))
      .map(codec.decodeValue).orNull
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
   * cache page the pair is in (neither ever changes), so a pair costs its key's decoding. */
  private def scan(cf: String, mode: Byte, a: Array[Byte], b: Array[Byte],
      multi: Boolean): StateStoreIterator[UnsafeRowPair] = {
    val codec = provider.codec(cf)
    val scan = provider.scan(cf, mode, a, b)
    val pairs = scan.iterator.flatMap { at =>
      val key = codec.decodeKey(at.keyBytes, at.keyAt, at.keyLength)
      if (multi) {
        codec.decodeValues(at.valueBytes, at.valueAt, at.valueLength).iterator
          .map(new UnsafeRowPair(key, _))
      } else {
        Iterator.single(new UnsafeRowPair(key,
          codec.decodeValue(at.valueBytes, at.valueAt, at.valueLength)))
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

/**
 * A scan's (key, value) pairs, one at a time (`advance`), each a slice of arrays that never
 * change once the scan hands them out (a chunk from the worker, a page of the read cache), so
 * a row may point into them with no copy; in the worker's key order unless the scan says
 * otherwise. `close` ends it early.
 */
trait KeyValueScan {
  /** Moves to the next pair; false when there is none. */
  def advance(): Boolean
  def keyBytes: Array[Byte]
  def keyAt: Int
  def keyLength: Int
  def valueBytes: Array[Byte]
  def valueAt: Int
  def valueLength: Int
  def close(): Unit

  def key(): Array[Byte] = java.util.Arrays.copyOfRange(keyBytes, keyAt, keyAt + keyLength)
  def value(): Array[Byte] =
    java.util.Arrays.copyOfRange(valueBytes, valueAt, valueAt + valueLength)

  /** The scan as an iterator of itself, one step per pair. */
  def iterator: Iterator[KeyValueScan] = new Iterator[KeyValueScan] {
    private var ready = false
    private var more = true
    override def hasNext: Boolean = {
      if (!ready && more) { more = advance(); ready = true }
      more
    }
    override def next(): KeyValueScan = {
      if (!hasNext) throw new NoSuchElementException("end of state store scan")
      ready = false
      KeyValueScan.this
    }
  }

  /** The pairs in arrays of their own. */
  def pairs: Iterator[(Array[Byte], Array[Byte])] = iterator.map(at => (at.key(), at.value()))
}

object KeyValueScan {
  /** A scan with no pair: a prefix under which nothing was ever written. */
  object Empty extends KeyValueScan {
    override def advance(): Boolean = false
    private def none = throw new NoSuchElementException("an empty scan has no pair")
    override def keyBytes: Array[Byte] = none
    override def keyAt: Int = none
    override def keyLength: Int = none
    override def valueBytes: Array[Byte] = none
    override def valueAt: Int = none
    override def valueLength: Int = none
    override def close(): Unit = {}
  }
}

/** A scan that starts (`start`) when its first pair is asked for: one never read costs
 * nothing. */
final class DeferredScan(start: () => KeyValueScan) extends KeyValueScan {
  private var started: KeyValueScan = null
  private var closed = false

  override def advance(): Boolean = !closed && {
    if (started == null) started = start()
    started.advance()
  }
  override def keyBytes: Array[Byte] = started.keyBytes
  override def keyAt: Int = started.keyAt
  override def keyLength: Int = started.keyLength
  override def valueBytes: Array[Byte] = started.valueBytes
  override def valueAt: Int = started.valueAt
  override def valueLength: Int = started.valueLength
  override def close(): Unit = {
    closed = true
    if (started != null) started.close()
  }
}

/**
 * Streams a scan from the worker in chunks; the worker holds the RocksDB iterator. With
 * `onEnd`, it keeps what it returns (up to `ChunkedScan.MaxKeptBytes`) and hands it over if
 * the scan runs to its end: that is how the read cache learns a prefix listing.
 */
final class ChunkedScan(
    provider: PyRocksStateStoreProvider,
    iteratorId: Int,
    mode: Byte,
    cf: Array[Byte],
    a: Array[Byte],
    b: Array[Byte],
    onEnd: Option[Seq[(Array[Byte], Array[Byte])] => Unit] = None) extends KeyValueScan {

  private var chunk: Array[Byte] = open()
  private var more: Boolean = chunk(0) == 1
  private var position = 1 // of the next pair in `chunk`
  private var closed = false
  var keyAt = 0
  var keyLength = 0
  var valueAt = 0
  var valueLength = 0
  override def keyBytes: Array[Byte] = chunk
  override def valueBytes: Array[Byte] = chunk

  private def open(): Array[Byte] = {
    val body = ByteBuffer.allocate(4 + 1 + 2 + cf.length + 4 + a.length + 4 + b.length)
      .putInt(iteratorId).put(mode).putShort(cf.length.toShort).put(cf)
      .putInt(a.length).put(a).putInt(b.length).put(b).array()
    provider.request(Wire.IterOpen, body)
  }

  private var kept = onEnd.map(_ => scala.collection.mutable.ArrayBuffer.empty[
    (Array[Byte], Array[Byte])])
  private var keptBytes = 0L

  override def advance(): Boolean = {
    if (position >= chunk.length && more && !closed) {
      chunk = provider.request(Wire.IterNext, ByteBuffer.allocate(4).putInt(iteratorId).array())
      more = chunk(0) == 1
      position = 1
    }
    if (position >= chunk.length) {
      handOver()
      false
    } else {
      keyAt = position + ChunkedScan.PairHead
      keyLength = ChunkedScan.keyLength(chunk, keyAt)
      valueLength = ChunkedScan.valueLength(chunk, keyAt)
      valueAt = keyAt + keyLength
      position = valueAt + valueLength
      kept.foreach { buf =>
        keptBytes += keyLength + valueLength
        if (keptBytes <= ChunkedScan.MaxKeptBytes) buf += ((key(), value())) else kept = None
      }
      true
    }
  }

  private def handOver(): Unit = if (!more) for (f <- onEnd; pairs <- kept) {
    kept = None
    f(pairs.toSeq)
  }

  /** Lets the worker drop its iterator early when the caller stops before the end. */
  def close(): Unit = if (!closed) {
    closed = true
    if (more) provider.tell(Wire.IterClose, ByteBuffer.allocate(4).putInt(iteratorId).array())
  }
}

object ChunkedScan {
  /** Larger listings are not kept by the read cache (PrefixRecord): such a scan just streams. */
  val MaxKeptBytes: Long = PrefixRecord.MaxBytes

  /** A worker's chunk is [more u8], then per pair [key length u32][value length u32][key]
   * [value], big-endian, as the worker packs it (protocol.py): the lengths sit `PairHead`
   * bytes before the key. */
  val PairHead = 8

  def keyLength(chunk: Array[Byte], keyAt: Int): Int = lengthAt(chunk, keyAt - PairHead)
  def valueLength(chunk: Array[Byte], keyAt: Int): Int = lengthAt(chunk, keyAt - 4)

  private def lengthAt(chunk: Array[Byte], at: Int): Int =
    (chunk(at) & 0xff) << 24 | (chunk(at + 1) & 0xff) << 16 | (chunk(at + 2) & 0xff) << 8 |
      (chunk(at + 3) & 0xff)
}

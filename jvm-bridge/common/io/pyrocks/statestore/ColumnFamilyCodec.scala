package io.pyrocks.statestore

import java.lang.invoke.{MethodHandles, VarHandle}
import java.nio.ByteOrder

import scala.collection.mutable.ArrayBuffer

import org.apache.spark.sql.catalyst.expressions.{BoundReference, UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.execution.streaming.state.{KeyStateEncoderSpec, NoPrefixKeyStateEncoderSpec, PrefixKeyScanStateEncoderSpec, RocksDBStateEncoder, UnsafeRowDataEncoder}
import org.apache.spark.sql.types.StructType
import org.apache.spark.unsafe.Platform

/**
 * How one column family's rows become bytes. Keys must sort so that prefix and range scans
 * are plain seeks: for those specs we use Spark's own key encoders rather than re-deriving
 * their layouts. A key spec without scans (NoPrefix) only needs point lookups and full
 * iteration, so its rows travel as they are, with no encoding step on the hot path.
 *
 * Values are UnsafeRow bytes, each after the 2-byte id of its schema where the family's values
 * may evolve (`evolution`, ValueEvolution); with multiple values per key, a value is a
 * sequence of `[length u32][row]` entries, so a merge is a plain byte append in the worker.
 */
final class ColumnFamilyCodec(
    family: String, // for errors: the column family and its store
    keySchema: StructType,
    valueSchema: StructType,
    spec: KeyStateEncoderSpec,
    val multipleValues: Boolean,
    evolution: Option[ValueEvolution] = None) {

  private val keyFields = keySchema.length
  private val valueFields = valueSchema.length
  private val sparkEncoder = spec match {
    case _: NoPrefixKeyStateEncoderSpec => None
    case _ => Some(RocksDBStateEncoder.getKeyEncoder(
      new UnsafeRowDataEncoder(spec, valueSchema), spec, false))
  }

  /** Projects a full key row onto its prefix columns (prefix-scan specs only). */
  private val prefixColumns: Option[UnsafeProjection] = spec match {
    case PrefixKeyScanStateEncoderSpec(schema, n) => Some(UnsafeProjection.create(
      schema.fields.take(n).zipWithIndex.map { case (f, i) =>
        BoundReference(i, f.dataType, f.nullable)
      }.toSeq))
    case _ => None
  }

  /** Prefix-scan keys: Spark's layout, written field by field once it is shown to match. */
  private val prefixKeys = (spec, sparkEncoder) match {
    case (PrefixKeyScanStateEncoderSpec(schema, n), Some(enc)) =>
      Some(new PrefixScanKeys(enc, schema, n))
    case _ => None
  }

  def supportsPrefixScan: Boolean = sparkEncoder.exists(_.supportPrefixKeyScan)
  def supportsRangeScan: Boolean = sparkEncoder.exists(RangeScanCompat.supported(_, spec))

  def key(row: UnsafeRow): Array[Byte] = (prefixKeys, sparkEncoder) match {
    case (Some(keys), _) => keys.key(row)
    case (None, Some(enc)) => enc.encodeKey(row)
    case (None, None) => ColumnFamilyCodec.copyOf(row)
  }

  def prefix(row: UnsafeRow): Array[Byte] = prefixKeys match {
    case Some(keys) => keys.prefix(row)
    case None => throw new UnsupportedOperationException(
      s"prefix scan needs a PrefixKeyScanStateEncoderSpec; this column family uses $spec")
  }

  /** The encoded prefix a key row is found under by `prefixScan`, for prefix-scan specs: the
   * very bytes `prefix` gives for the key's prefix columns, so the two can never disagree. */
  def prefixOf(key: UnsafeRow): Option[Array[Byte]] =
    if (prefixKeys.isEmpty) None // every get and put asks: no closure for the common case
    else for (keys <- prefixKeys; project <- prefixColumns) yield keys.prefixOfKey(key, project(_))

  /** A row never reused by a later decode. */
  def decodeKey(bytes: Array[Byte]): UnsafeRow = decodeKey(bytes, 0, bytes.length)

  /** The key `bytes(at until at + length)`, which never change (a row may point into them). */
  def decodeKey(bytes: Array[Byte], at: Int, length: Int): UnsafeRow =
    (prefixKeys, sparkEncoder) match {
      case (Some(keys), _) => keys.decode(bytes, at, length)
      case (None, Some(enc)) => // the encoder reuses its result row
        enc.decodeKey(java.util.Arrays.copyOfRange(bytes, at, at + length)).copy()
      case (None, None) => row(bytes, at, length, keyFields)
    }

  /** The key a scan is at, in one slice or two (`KeyValueScan`), as `decodeKey` gives it. */
  def decodeKey(at: KeyValueScan): UnsafeRow =
    if (at.keyHeadLength == 0) decodeKey(at.keyBytes, at.keyAt, at.keyLength)
    else {
      // Per key of a full scan: a match, not an Option's map and its closure.
      val split = prefixKeys match {
        case Some(keys) => keys.decode(at.keyHeadBytes, at.keyHeadAt, at.keyHeadLength,
          at.keyBytes, at.keyAt, at.keyLength)
        case None => null
      }
      if (split != null) split else decodeKey(at.key())
    }

  private val idBytes = if (evolution.isDefined) 2 else 0

  /** Every put of a single-value family comes here, once per row: it allocates the value's
   * array and nothing else. A list of one (its sizes, a buffer view and closures per entry)
   * was most of the garbage a put made (docs/benchmarks.md, Dec 6, stop 86). */
  def value(row: UnsafeRow): Array[Byte] = {
    val buf = new Array[Byte](entryBytes(row, multipleValues))
    writeEntry(row, buf, 0, multipleValues)
    buf
  }

  def valueList(rows: Array[UnsafeRow]): Array[Byte] = {
    var total = 0
    for (r <- rows) total += entryBytes(r, framed = true)
    val buf = new Array[Byte](total)
    var pos = 0
    for (r <- rows) pos = writeEntry(r, buf, pos, framed = true)
    buf
  }

  private def entryBytes(row: UnsafeRow, framed: Boolean): Int =
    (if (framed) 4 else 0) + idBytes + row.getSizeInBytes

  /** `row` at `pos`, after its length if `framed` and its schema id if the values evolve
   * (both big-endian, as `decodeValues` and the worker read them); returns where the next
   * entry starts. */
  private def writeEntry(row: UnsafeRow, buf: Array[Byte], pos: Int, framed: Boolean): Int = {
    import ColumnFamilyCodec.{BigEndianInts, BigEndianShorts}
    var at = pos
    if (framed) {
      BigEndianInts.set(buf, at, idBytes + row.getSizeInBytes): Unit
      at += 4
    }
    evolution match {
      case Some(e) => BigEndianShorts.set(buf, at, e.currentId): Unit; at += 2
      case None =>
    }
    row.writeToMemory(buf, Platform.BYTE_ARRAY_OFFSET + at)
    at + row.getSizeInBytes
  }

  def decodeValue(bytes: Array[Byte]): UnsafeRow = decodeValue(bytes, 0, bytes.length)

  /** The value `bytes(at until at + length)`, which never change (the row points into them). */
  def decodeValue(bytes: Array[Byte], at: Int, length: Int): UnsafeRow =
    if (multipleValues) decodeValues(bytes, at, length).headOption.orNull
    else valueRow(bytes, at, length)

  def decodeValues(bytes: Array[Byte]): Seq[UnsafeRow] = decodeValues(bytes, 0, bytes.length)

  /** The entries of a list value, each read in place. An entry's length is checked before
   * its row points into `bytes`: a damaged one (negative, or past the value's end) would
   * otherwise loop forever or read past the entry. */
  def decodeValues(bytes: Array[Byte], at: Int, length: Int): Seq[UnsafeRow] = {
    if (!multipleValues) return Seq(valueRow(bytes, at, length))
    import ColumnFamilyCodec.BigEndianInts
    val rows = ArrayBuffer.empty[UnsafeRow]
    val end = at + length
    var pos = at
    while (pos < end) {
      if (end - pos < 4) damaged(s"${end - pos} bytes after its last entry, less than a length")
      val entry = BigEndianInts.get(bytes, pos): Int
      if (entry < 0 || entry > end - pos - 4) {
        damaged(s"an entry at byte ${pos - at} of $length claims $entry bytes")
      }
      rows += valueRow(bytes, pos + 4, entry)
      pos += 4 + entry
    }
    rows.toSeq
  }

  /** One stored value row, as a row of the current value schema. */
  private def valueRow(bytes: Array[Byte], offset: Int, length: Int): UnsafeRow =
    evolution match {
      case None => row(bytes, offset, length, valueFields)
      case Some(e) =>
        if (length < 2) damaged(s"a value of $length bytes has no schema id")
        import ColumnFamilyCodec.BigEndianShorts
        val id = BigEndianShorts.get(bytes, offset): Short
        if (id == e.currentId) row(bytes, offset + 2, length - 2, valueFields)
        else {
          val (fields, toCurrent) = e.reader(id)
          toCurrent(row(bytes, offset + 2, length - 2, fields)).copy()
        }
    }

  private def damaged(what: String): Nothing =
    throw new IllegalStateException(s"a stored value of column family $family is damaged: $what")

  private def row(bytes: Array[Byte], offset: Int, length: Int, fields: Int): UnsafeRow = {
    val r = new UnsafeRow(fields)
    r.pointTo(bytes, Platform.BYTE_ARRAY_OFFSET + offset, length)
    r
  }
}

object ColumnFamilyCodec {
  // (The ascriptions at the calls give them exact signatures, as in `Int32`.)
  private val BigEndianInts: VarHandle =
    MethodHandles.byteArrayViewVarHandle(classOf[Array[Int]], ByteOrder.BIG_ENDIAN)
  private val BigEndianShorts: VarHandle =
    MethodHandles.byteArrayViewVarHandle(classOf[Array[Short]], ByteOrder.BIG_ENDIAN)

  /**
   * A row's bytes in a new array. Never `UnsafeRow.getBytes`: it returns the row's own
   * backing array when the row fills it exactly, and callers reuse rows, so those bytes
   * would change under us (in the write buffer's wake, and in the read cache's keys).
   */
  def copyOf(row: UnsafeRow): Array[Byte] = {
    val bytes = new Array[Byte](row.getSizeInBytes)
    row.writeToMemory(bytes, Platform.BYTE_ARRAY_OFFSET)
    bytes
  }
}

package io.pyrocks.statestore

import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.execution.streaming.state.RocksDBKeyStateEncoder
import org.apache.spark.sql.types._
import org.apache.spark.unsafe.Platform

/**
 * Spark's prefix-scan key layout, written and read field by field when every key field has
 * a fixed width. Spark's `PrefixKeyScanStateEncoder` lays a key out as
 * `[length of the next part: i32, native order][version byte][prefix columns as an UnsafeRow]
 * [version byte][the other columns as an UnsafeRow]`, and gets there through projections:
 * a decode is two array copies, two rows and a projection of their join, and the eviction
 * scan of session windows decodes every key of the state every batch. A fixed-width field
 * lives in its row's 8-byte slot alone (no offset into a variable-length region to shift),
 * so here a field moves from row to row as Spark's projections move it — read as its type,
 * written as its type into a zeroed slot, its null bit carried — and the bytes are Spark's.
 * Exactness is checked, not assumed: `ColumnFamilyCodec` compares each codec's first keys
 * with Spark's own encoder and keeps to Spark's if one differs (and tests cover every type).
 *
 * `version` is the byte Spark's encoder puts before each row (learned from its output).
 */
final class FixedWidthKeys private (widths: Array[Int], prefixFields: Int, version: Byte) {
  import FixedWidthKeys._

  private val fields = widths.length
  private val prefixRow = rowBytes(prefixFields)
  private val restFields = fields - prefixFields // the key's columns after the prefix's
  private val restRow = rowBytes(restFields)
  private val restStart = HeadBytes + prefixRow // where the second row's version byte is

  /** The key of a full key row. */
  def key(row: UnsafeRow): Array[Byte] = {
    val out = new Array[Byte](restStart + 1 + restRow)
    head(out, prefixRow)
    out(restStart) = version
    copyFields(row, 0, 0, prefixFields, out, HeadBytes, prefixFields, 0)
    copyFields(row, prefixFields, prefixFields, restFields, out, restStart + 1, restFields, 0)
    out
  }

  /** The scan prefix of a full key row: the bytes every key under it starts with. */
  def prefixOf(row: UnsafeRow): Array[Byte] = prefixBytes(row)

  /** The scan prefix of a row of the prefix columns alone (`prefixScan`'s argument). */
  def prefix(prefixColumns: UnsafeRow): Array[Byte] = prefixBytes(prefixColumns)

  private def prefixBytes(row: UnsafeRow): Array[Byte] = {
    val out = new Array[Byte](HeadBytes + prefixRow)
    head(out, prefixRow)
    copyFields(row, 0, 0, prefixFields, out, HeadBytes, prefixFields, 0)
    out
  }

  /** The full key row of the key `bytes(at until at + length)`, in an array of its own;
   * null if those bytes are not this layout. */
  def decode(bytes: Array[Byte], at: Int, length: Int): UnsafeRow =
    if (length != restStart + 1 + restRow) null else decodeParts(bytes, at, bytes, at + restStart)

  /** `decode` of a key in two slices (`KeyValueScan`'s head and rest): its scan prefix,
   * `head(headAt until headAt + headLength)`, then `rest(restAt until restAt + restLength)`. */
  def decode(head: Array[Byte], headAt: Int, headLength: Int, rest: Array[Byte], restAt: Int,
      restLength: Int): UnsafeRow =
    if (headLength != restStart || restLength != 1 + restRow) null
    else decodeParts(head, headAt, rest, restAt)

  /** The key whose scan prefix starts at `headAt` of `head` and whose other row's version
   * byte is at `restAt` of `rest`. */
  private def decodeParts(head: Array[Byte], headAt: Int, rest: Array[Byte],
      restAt: Int): UnsafeRow = {
    val out = new Array[Byte](rowBytes(fields))
    if (fields <= 64) moveSlots(head, headAt, rest, restAt, out)
    else {
      copyFields(pointTo(head, headAt + HeadBytes, prefixFields, prefixRow), 0, 0, prefixFields,
        out, 0, fields, 0)
      copyFields(pointTo(rest, restAt + 1, restFields, restRow), 0, prefixFields,
        restFields, out, 0, fields, prefixFields)
    }
    pointTo(out, 0, fields, out.length)
  }

  /** `decodeParts` of a key of at most 64 fields (a null word a row). A stored key's slots
   * hold what a projection writes (this layout's bytes or Spark's encoder's: zeroed, then the
   * field as its type), so they move whole, and the full row's null word is the prefix row's
   * bits followed by the other row's: the eviction scan of session windows decodes every key
   * of the state every batch, and moving field by field was a third of its time (JFR, 20M
   * keys). */
  private def moveSlots(head: Array[Byte], headAt: Int, rest: Array[Byte], restAt: Int,
      out: Array[Byte]): Unit = {
    val prefixRowAt = Platform.BYTE_ARRAY_OFFSET + headAt + HeadBytes
    val restRowAt = Platform.BYTE_ARRAY_OFFSET + restAt + 1
    val restNulls = if (restFields == 0) 0L else Platform.getLong(rest, restRowAt) << prefixFields
    val outAt = Platform.BYTE_ARRAY_OFFSET
    Platform.putLong(out, outAt, Platform.getLong(head, prefixRowAt) | restNulls)
    def moveLongs(from: Array[Byte], fromAt: Long, to: Long, count: Int): Unit = {
      var i = 0
      while (i < count) {
        Platform.putLong(out, to + 8L * i, Platform.getLong(from, fromAt + 8L * i))
        i += 1
      }
    }
    moveLongs(head, prefixRowAt + 8, outAt + 8, prefixFields)
    moveLongs(rest, restRowAt + 8, outAt + 8L * (1 + prefixFields), restFields)
  }

  private def head(out: Array[Byte], rowLength: Int): Unit = {
    Platform.putInt(out, Platform.BYTE_ARRAY_OFFSET, 1 + rowLength)
    out(4) = version
  }

  /** Copies `count` fields of `src` from its field `srcFirst` (key field `keyFirst` on: what
   * sets their widths) into the row of `dstFields` fields at `dstAt` of `dst`, a zeroed
   * array, as its fields from `dstFirst` on. */
  private def copyFields(src: UnsafeRow, srcFirst: Int, keyFirst: Int, count: Int,
      dst: Array[Byte], dstAt: Int, dstFields: Int, dstFirst: Int): Unit = {
    val base = Platform.BYTE_ARRAY_OFFSET + dstAt
    val slots = base + bitsetBytes(dstFields)
    var i = 0
    while (i < count) {
      val field = dstFirst + i
      if (src.isNullAt(srcFirst + i)) {
        val word = base + (field >> 6) * 8L
        Platform.putLong(dst, word, Platform.getLong(dst, word) | (1L << (field & 63)))
      } else {
        copySlot(src, srcFirst + i, dst, slots + field * 8L, widths(keyFirst + i))
      }
      i += 1
    }
  }

  private def copySlot(src: UnsafeRow, field: Int, dst: Array[Byte], at: Long, width: Int): Unit =
    width match {
      case 8 => Platform.putLong(dst, at, src.getLong(field))
      case Float32 => Platform.putFloat(dst, at, src.getFloat(field))
      case Double64 => Platform.putDouble(dst, at, src.getDouble(field))
      case 4 => Platform.putInt(dst, at, src.getInt(field))
      case 2 => Platform.putShort(dst, at, src.getShort(field))
      case 1 => Platform.putByte(dst, at, src.getByte(field))
      case _ => // NullType: no value, only the null bit
    }
}

object FixedWidthKeys {
  private val HeadBytes = 5 // the i32 length and the version byte before the prefix row
  // Floats and doubles move as their type (as a projection moves them), not as raw bits.
  private val Float32 = -4
  private val Double64 = -8

  private def bitsetBytes(fields: Int): Int = ((fields + 63) / 64) * 8
  private def rowBytes(fields: Int): Int = bitsetBytes(fields) + 8 * fields

  private def pointTo(bytes: Array[Byte], at: Int, fields: Int, length: Int): UnsafeRow = {
    val row = new UnsafeRow(fields)
    row.pointTo(bytes, Platform.BYTE_ARRAY_OFFSET + at, length)
    row
  }

  /** How a field of `dt` sits in its slot, if it has a fixed width here. */
  private def width(dt: DataType): Option[Int] = dt match {
    case LongType | TimestampType | TimestampNTZType | _: DayTimeIntervalType => Some(8)
    case d: DecimalType if d.precision <= Decimal.MAX_LONG_DIGITS => Some(8)
    case DoubleType => Some(Double64)
    case FloatType => Some(Float32)
    case IntegerType | DateType | _: YearMonthIntervalType => Some(4)
    case ShortType => Some(2)
    case ByteType | BooleanType => Some(1)
    case NullType => Some(0)
    case _ => None
  }

  /** Whether keys of `schema` scanned by their first `prefixFields` columns have this
   * layout: every field of a fixed width. */
  def eligible(schema: StructType, prefixFields: Int): Boolean =
    prefixFields > 0 && prefixFields <= schema.length &&
      schema.fields.forall(f => width(f.dataType).isDefined)

  /** The layout for such keys; `version` is Spark's encoding version byte. */
  def of(schema: StructType, prefixFields: Int, version: Byte): Option[FixedWidthKeys] =
    if (!eligible(schema, prefixFields)) None
    else Some(new FixedWidthKeys(schema.fields.map(f => width(f.dataType).get), prefixFields,
      version))
}

/**
 * A prefix-scan family's keys: Spark's encoder until `FixedWidthKeys` has given the very
 * bytes Spark's encoder gave for the first `Checks` keys, prefixes and decodes, then
 * `FixedWidthKeys` alone; Spark's for good if it ever differed, or if the key has a field of
 * variable width. Rows it decodes are the caller's own (a fresh array each).
 */
final class PrefixScanKeys(spark: RocksDBKeyStateEncoder, schema: StructType,
    prefixFields: Int) {
  @volatile private var trusted: FixedWidthKeys = null
  private var candidate: Option[FixedWidthKeys] = null // learned from Spark's first key
  private var matched = 0
  private var refused = !FixedWidthKeys.eligible(schema, prefixFields)

  /** Whether the keys are now built field by field (for checks and diagnostics). */
  def ownLayout: Boolean = trusted != null

  def key(row: UnsafeRow): Array[Byte] = {
    val fast = trusted
    if (fast != null) fast.key(row)
    else {
      val theirs = spark.encodeKey(row)
      check(theirs(4), theirs, _.key(row))
      theirs
    }
  }

  /** The scan prefix of a row of the prefix columns. */
  def prefix(prefixColumns: UnsafeRow): Array[Byte] = {
    val fast = trusted
    if (fast != null) fast.prefix(prefixColumns)
    else {
      val theirs = spark.encodePrefixKey(prefixColumns)
      check(theirs(4), theirs, _.prefix(prefixColumns))
      theirs
    }
  }

  /** The scan prefix of a full key row; `project` makes the row of its prefix columns. */
  def prefixOfKey(key: UnsafeRow, project: UnsafeRow => UnsafeRow): Array[Byte] = {
    val fast = trusted
    if (fast != null) fast.prefixOf(key) else prefix(project(key))
  }

  /** A key in two slices (`FixedWidthKeys.decode`) as a row of its own, once the layout is
   * trusted; null before, or if the slices are not its layout: the caller joins them. */
  def decode(head: Array[Byte], headAt: Int, headLength: Int, rest: Array[Byte], restAt: Int,
      restLength: Int): UnsafeRow = {
    val fast = trusted
    if (fast == null) null else fast.decode(head, headAt, headLength, rest, restAt, restLength)
  }

  /** The key `bytes(at until at + length)` as a row of its own. */
  def decode(bytes: Array[Byte], at: Int, length: Int): UnsafeRow = {
    val fast = trusted
    val ours = if (fast != null) fast.decode(bytes, at, length) else null
    if (ours != null) ours
    else {
      val key = java.util.Arrays.copyOfRange(bytes, at, at + length)
      val theirs = spark.decodeKey(key).copy() // Spark's encoder reuses its result row
      if (fast == null && length > 4) {
        check(key(4), theirs.getBytes, l => Option(l.decode(key, 0, length)).map(_.getBytes).orNull)
      }
      theirs
    }
  }

  private def check(version: Byte, theirs: Array[Byte], ours: FixedWidthKeys => Array[Byte])
      : Unit = synchronized {
    if (!refused && trusted == null) {
      if (candidate == null) candidate = FixedWidthKeys.of(schema, prefixFields, version)
      candidate match {
        case Some(fast) if java.util.Arrays.equals(ours(fast), theirs) =>
          matched += 1
          if (matched >= PrefixScanKeys.Checks) trusted = fast
        case _ => refused = true
      }
    }
  }
}

object PrefixScanKeys {
  /** Results compared with Spark's encoder before its own layout is trusted. */
  val Checks = 32
}

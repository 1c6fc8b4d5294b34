package io.pyrocks.statestore

import scala.util.Random

import org.apache.spark.sql.catalyst.expressions.{BoundReference, GenericInternalRow, UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.execution.streaming.state.{NoPrefixKeyStateEncoderSpec, PrefixKeyScanStateEncoderSpec, RocksDBStateEncoder, StateSchemaMetadataKey, StateSchemaMetadataValue, StateSchemaProvider, UnsafeRowDataEncoder}
import org.apache.spark.sql.types._

/** Prefix-scan keys built field by field (FixedWidthKeys) are Spark's bytes: keys, prefixes
 * and decoded rows equal what Spark's own encoder gives, on every fixed-width type, with
 * nulls, odd floats and slots whose unused bytes hold garbage; a key of variable width never
 * leaves Spark's encoder. Values are the layout the worker reads (`ColumnFamilyCodec`): a
 * single value is its row's bytes, a list is `[length: u32 big-endian][row]` entries, which
 * a merge appends; a list whose lengths do not add up, or a value of an evolving family too
 * short for its schema id, is an error naming its family. */
object KeyLayoutChecks {
  val all: Map[String, Fixture => Unit] = Map(
    "fixed-width-prefix-keys-are-sparks-bytes" -> fixedWidthKeysAreSparksBytes,
    "prefix-scan-keys-trust-their-layout-only-once-it-matched" -> trustOnlyOnceMatched,
    "values-are-row-bytes-and-lists-are-length-framed" -> valuesAreRowBytes,
    "a-list-value-whose-lengths-do-not-add-up-is-refused" -> damagedListsAreRefused,
    "a-value-too-short-for-its-schema-id-is-refused" -> shortEvolvingValuesAreRefused)

  private val types: Seq[DataType] = Seq(LongType, IntegerType, BooleanType, DoubleType,
    ShortType, FloatType, ByteType, DateType, TimestampType, TimestampNTZType,
    DecimalType(18, 3), DecimalType(9, 0), DayTimeIntervalType(), YearMonthIntervalType())

  private def schemaOf(fields: Seq[DataType]): StructType =
    StructType(fields.zipWithIndex.map { case (t, i) => StructField(s"f$i", t) })

  private def sparkEncoder(schema: StructType, prefix: Int) = {
    val spec = PrefixKeyScanStateEncoderSpec(schema, prefix)
    RocksDBStateEncoder.getKeyEncoder(
      new UnsafeRowDataEncoder(spec, new StructType().add("v", LongType)), spec, false)
  }

  private def value(t: DataType, rnd: Random): Any = t match {
    case LongType | TimestampType | TimestampNTZType | _: DayTimeIntervalType =>
      Seq(Long.MinValue, Long.MaxValue, 0L, -1L, rnd.nextLong())(rnd.nextInt(5))
    case IntegerType | DateType | _: YearMonthIntervalType =>
      Seq(Int.MinValue, -1, 0, rnd.nextInt())(rnd.nextInt(4))
    case BooleanType => rnd.nextBoolean()
    case DoubleType => Seq(Double.NaN, -0.0, 0.0, Double.NegativeInfinity, rnd.nextGaussian())(
      rnd.nextInt(5))
    case FloatType => Seq(Float.NaN, -0.0f, Float.MinPositiveValue, rnd.nextFloat())(
      rnd.nextInt(4))
    case ShortType => rnd.nextInt().toShort
    case ByteType => rnd.nextInt().toByte
    case d: DecimalType =>
      Decimal(BigDecimal(rnd.nextLong() % math.pow(10, d.precision - 1).toLong, d.scale),
        d.precision, d.scale)
  }

  /** A key row of `schema` (`toUnsafe` its projection: generating one per row cost most of
   * this check's time), a field in five null; narrow fields first hold -1 in their whole slot
   * (UnsafeRow's setters of narrow types leave the rest of the slot as it was). */
  private def keyRow(schema: StructType, toUnsafe: UnsafeProjection, rnd: Random): UnsafeRow = {
    val in = new GenericInternalRow(schema.length)
    schema.fields.zipWithIndex.foreach { case (f, i) =>
      if (rnd.nextInt(5) != 0) in.update(i, value(f.dataType, rnd))
    }
    val row = toUnsafe(in).copy()
    schema.fields.zipWithIndex.foreach { case (f, i) =>
      if (!row.isNullAt(i)) f.dataType match {
        case IntegerType | DateType | _: YearMonthIntervalType =>
          val v = row.getInt(i); row.setLong(i, -1L); row.setInt(i, v)
        case ShortType => val v = row.getShort(i); row.setLong(i, -1L); row.setShort(i, v)
        case ByteType => val v = row.getByte(i); row.setLong(i, -1L); row.setByte(i, v)
        case _ =>
      }
    }
    row
  }

  private def hex(bytes: Array[Byte]): String = bytes.map("%02x".format(_)).mkString

  def fixedWidthKeysAreSparksBytes(f: Fixture): Unit = {
    import f._
    val rnd = new Random(20261125)
    val schemas = Seq(schemaOf(types), schemaOf(Seq(LongType, TimestampType)),
      schemaOf(Seq.fill(70)(LongType)) /* two bitset words */) ++
      Seq.fill(20)(schemaOf(Seq.fill(1 + rnd.nextInt(8))(types(rnd.nextInt(types.length)))))
    for (schema <- schemas; toUnsafe = UnsafeProjection.create(schema);
         prefix <- 1 until schema.length) {
      val spark = sparkEncoder(schema, prefix)
      val project = UnsafeProjection.create(schema.fields.take(prefix).zipWithIndex.map {
        case (field, i) => BoundReference(i, field.dataType, field.nullable)
      }.toSeq)
      val sample = spark.encodeKey(keyRow(schema, toUnsafe, rnd))
      val ours = FixedWidthKeys.of(schema, prefix, sample(4)).getOrElse(
        throw new AssertionError(s"no fixed-width layout for $schema"))
      for (_ <- 1 to 200) {
        val row = keyRow(schema, toUnsafe, rnd)
        val theirs = spark.encodeKey(row)
        expect(java.util.Arrays.equals(ours.key(row), theirs),
          s"key of $row ($schema, prefix $prefix): ${hex(ours.key(row))} != ${hex(theirs)}")
        val theirPrefix = spark.encodePrefixKey(project(row))
        expect(java.util.Arrays.equals(ours.prefixOf(row), theirPrefix),
          s"prefix of $row: ${hex(ours.prefixOf(row))} != ${hex(theirPrefix)}")
        expect(java.util.Arrays.equals(ours.prefix(project(row)), theirPrefix),
          s"prefix of ${project(row)}: ${hex(ours.prefix(project(row)))}")
        val decoded = spark.decodeKey(theirs)
        val padded = Array[Byte](7, 7) ++ theirs ++ Array[Byte](9)
        expect(ours.decode(padded, 2, theirs.length) == decoded,
          s"decode of ${hex(theirs)}: ${ours.decode(padded, 2, theirs.length)} != $decoded")
        // In two slices, as the read cache holds it: the prefix in one array, the rest in
        // another. A split anywhere else is not the layout.
        val head = Array[Byte](3) ++ theirPrefix
        val rest = Array[Byte](5, 5, 5) ++ theirs.drop(theirPrefix.length)
        val split = ours.decode(head, 1, theirPrefix.length, rest, 3, rest.length - 3)
        expect(split == decoded, s"decode of ${hex(theirs)} in two slices: $split != $decoded")
        expect(ours.decode(head, 1, theirPrefix.length - 1, rest, 3, rest.length - 3) == null,
          s"a slice that is not the scan prefix decoded")
      }
    }
    val strings = new StructType().add("s", StringType).add("t", LongType)
    expect(!FixedWidthKeys.eligible(strings, 1), "a string key took the fixed-width layout")
  }

  def trustOnlyOnceMatched(f: Fixture): Unit = {
    import f._
    val schema = schemaOf(Seq(LongType, TimestampType))
    val keys = new PrefixScanKeys(sparkEncoder(schema, 1), schema, 1)
    val rnd = new Random(7)
    val toUnsafe = UnsafeProjection.create(schema)
    (1 to PrefixScanKeys.Checks - 1).foreach(_ => keys.key(keyRow(schema, toUnsafe, rnd)))
    expect(!keys.ownLayout, s"trusted after ${PrefixScanKeys.Checks - 1} matches")
    keys.key(keyRow(schema, toUnsafe, rnd))
    expect(keys.ownLayout, s"not trusted after ${PrefixScanKeys.Checks} matches")
    val row = keyRow(schema, toUnsafe, rnd)
    expect(keys.decode(keys.key(row), 0, keys.key(row).length) ==
      sparkEncoder(schema, 1).decodeKey(keys.key(row)),
      s"the trusted layout decodes $row otherwise than Spark")
    val strings = new StructType().add("s", StringType).add("t", LongType)
    val stringKeys = new PrefixScanKeys(sparkEncoder(strings, 1), strings, 1)
    val in = new GenericInternalRow(2)
    (1 to 2 * PrefixScanKeys.Checks).foreach { i =>
      in.update(0, org.apache.spark.unsafe.types.UTF8String.fromString(s"user$i"))
      in.update(1, i.toLong)
      stringKeys.key(UnsafeProjection.create(strings)(in))
    }
    expect(!stringKeys.ownLayout, "a string key left Spark's encoder")
  }

  private val valueRowSchema =
    new StructType().add("n", LongType).add("s", StringType).add("d", DoubleType)

  private def valueCodec(f: Fixture, multi: Boolean,
      evolution: Option[ValueEvolution] = None) = new ColumnFamilyCodec("values", f.keySchema,
    valueRowSchema, NoPrefixKeyStateEncoderSpec(f.keySchema), multipleValues = multi, evolution)

  /** Rows of `valueRowSchema`, a string in every other one: values of several lengths. */
  private def valueRows: Seq[UnsafeRow] = {
    val toUnsafe = UnsafeProjection.create(valueRowSchema)
    (0 until 5).map { i =>
      val in = new GenericInternalRow(3)
      in.update(0, i.toLong * 1000003L)
      if (i % 2 == 0) in.update(1, org.apache.spark.unsafe.types.UTF8String.fromString("x" * i))
      in.update(2, i / 3.0)
      toUnsafe(in).copy()
    }
  }

  def valuesAreRowBytes(f: Fixture): Unit = {
    import f._
    val rows = valueRows
    def framed(row: UnsafeRow): Array[Byte] =
      java.nio.ByteBuffer.allocate(4).putInt(row.getSizeInBytes).array() ++ row.getBytes
    val single = valueCodec(f, multi = false)
    for (row <- rows) {
      val bytes = single.value(row)
      expect(java.util.Arrays.equals(bytes, row.getBytes), s"single value of $row: ${hex(bytes)}")
      expect(single.decodeValue(bytes) == row, s"single value of $row decodes otherwise")
    }
    val multi = valueCodec(f, multi = true)
    val list = multi.valueList(rows.toArray)
    expect(java.util.Arrays.equals(list, rows.flatMap(framed).toArray),
      s"a list of ${rows.length}: ${hex(list)}")
    expect(multi.decodeValues(list) == rows, s"a list decodes as ${multi.decodeValues(list)}")
    // A put of one value of a list family, then merges: the worker appends their bytes.
    val merged = multi.value(rows.head) ++ multi.valueList(rows.tail.toArray)
    expect(java.util.Arrays.equals(merged, list), s"a value and a merge: ${hex(merged)}")
    expect(multi.valueList(Array.empty).isEmpty, "an empty list has bytes")
  }

  /** A list value whose lengths do not add up (a damaged or crafted file that its checksum
   * let through) is an error naming its family and the entry: never rows pointing past the
   * value, nor a negative length stepping back (which looped, growing the rows). */
  def damagedListsAreRefused(f: Fixture): Unit = {
    import f._
    val multi = valueCodec(f, multi = true)
    val list = multi.valueList(valueRows.toArray)
    val negative = list.clone()
    java.nio.ByteBuffer.wrap(negative).putInt(-4)
    val overrun = list.dropRight(1) // the last entry claims one byte more than is left
    val trailing = list ++ Array[Byte](0, 0) // less than a length after the last entry
    for ((bad, what) <- Seq(negative -> "at byte 0 of", overrun -> "claims",
        trailing -> "2 bytes after its last entry")) {
      val e = expectThrows[IllegalStateException](multi.decodeValues(bad))
      expect(e.getMessage.contains("column family values") && e.getMessage.contains(what),
        s"a damaged list (${hex(bad)}) reads as: ${e.getMessage}")
    }
  }

  /** In a family whose values evolve, every value starts with the 2-byte id of its schema:
   * one shorter than that (alone, or as a list's entry) is refused, never read as a row of
   * a negative length. A value of the current schema still reads as itself. */
  def shortEvolvingValuesAreRefused(f: Fixture): Unit = {
    import f._
    val schemas = new StateSchemaProvider {
      def getSchemaMetadataValue(key: StateSchemaMetadataKey): StateSchemaMetadataValue =
        StateSchemaMetadataValue(valueRowSchema,
          org.apache.avro.Schema.create(org.apache.avro.Schema.Type.NULL))
      def getCurrentStateSchemaId(cf: String, isKey: Boolean): Short = 3
    }
    val evolution = ValueEvolution.of("values", Some(schemas), "avro")
    val (single, multi) = (valueCodec(f, multi = false, evolution),
      valueCodec(f, multi = true, evolution))
    val row = valueRows.head
    expect(single.decodeValue(single.value(row)) == row, "an evolving value reads otherwise")
    for ((bad, read) <- Seq[(Array[Byte], Array[Byte] => Any)](
        Array[Byte](0) -> single.decodeValue, Array[Byte](0, 0, 0, 1, 0) -> multi.decodeValues)) {
      val e = expectThrows[IllegalStateException](read(bad))
      expect(e.getMessage.contains("column family values") &&
        e.getMessage.contains("a value of 1 bytes has no schema id"),
        s"a value of ${hex(bad)} reads as: ${e.getMessage}")
    }
  }
}

package io.pyrocks.statestore

import java.io.{ByteArrayOutputStream, DataOutputStream}

import org.apache.spark.sql.catalyst.expressions.{SpecificInternalRow, UnsafeProjection}
import org.apache.spark.sql.execution.streaming.state.{NoPrefixKeyStateEncoderSpec,
  RangeKeyScanStateEncoderSpec, StateStore, UnsafeRowPair}
import org.apache.spark.sql.types.{StringType, StructType}
import org.apache.spark.unsafe.types.UTF8String

/** Scans: range scans (the range-scan compat concern: which key specs have them differs by
 * release): keys in the order of their values, negative ones first, bounds as Spark's
 * RocksDB provider sets them (start inclusive, end exclusive); and the chunks full scans
 * stream in, of both shapes (`Chunk`). */
object ScanChecks {
  val all: Map[String, Fixture => Unit] = Map(
    "range-scan-lists-keys-in-value-order" -> rangeScanListsKeysInValueOrder,
    "a-chunk-reads-in-both-shapes-and-a-malformed-one-is-refused" -> chunkShapes,
    "full-scans-stream-families-of-one-length-and-of-many-whole" -> fullScansStreamWhole)

  /** A chunk as the worker packs it (`chunks.py`): `uniform` gives the lengths once. */
  def chunk(flags: Int, pairs: Seq[(Array[Byte], Array[Byte])]): Array[Byte] = {
    val out = new ByteArrayOutputStream()
    val data = new DataOutputStream(out)
    data.writeByte(flags)
    val uniform = (flags & Chunk.Uniform) != 0
    if (uniform) { data.writeInt(pairs.head._1.length); data.writeInt(pairs.head._2.length) }
    pairs.foreach { case (k, v) =>
      if (!uniform) { data.writeInt(k.length); data.writeInt(v.length) }
      data.write(k)
      data.write(v)
    }
    out.toByteArray
  }

  private def read(bytes: Array[Byte]): Seq[(Seq[Byte], Seq[Byte])] = {
    val at = new Chunk.Cursor(bytes)
    val found = Seq.newBuilder[(Seq[Byte], Seq[Byte])]
    while (at.advance()) found += ((bytes.slice(at.keyAt, at.keyAt + at.keyLength).toSeq,
      bytes.slice(at.valueAt, at.valueAt + at.valueLength).toSeq))
    found.result()
  }

  def chunkShapes(f: Fixture): Unit = {
    import f._
    val rnd = new scala.util.Random(5)
    def bytes(n: Int): Array[Byte] = Array.fill(n)(rnd.nextInt().toByte)
    val same = (1 to 50).map(_ => (bytes(12), bytes(30)))
    val mixed = (1 to 50).map(i => (bytes(i % 7), bytes(i % 5)))
    for ((flags, pairs) <- Seq((Chunk.Uniform, same), (Chunk.Uniform | Chunk.More, same),
        (0, mixed), (Chunk.More, mixed), (0, same), (Chunk.Uniform, same.take(1)))) {
      val back = read(chunk(flags, pairs))
      expect(back == pairs.map { case (k, v) => (k.toSeq, v.toSeq) },
        s"flags $flags: ${back.size} pairs read back of ${pairs.size}, or not the same")
      expect(Chunk.more(chunk(flags, pairs)) == ((flags & Chunk.More) != 0), s"flags $flags")
    }
    expect(read(Array[Byte](0)).isEmpty, "an empty chunk read as pairs")
    val whole = chunk(Chunk.Uniform, same)
    val headed = chunk(0, mixed)
    for ((broken, why) <- Seq(
        (whole.dropRight(1), "short by a byte"),
        (chunk(Chunk.Uniform, Seq((Array.emptyByteArray, Array.emptyByteArray))), "pairs of 0"),
        (whole.take(6), "cut inside its lengths"),
        (headed.dropRight(1), "its last pair cut short"),
        (headed.take(headed.length - 3), "cut inside its last pair"))) {
      val e = expectThrows[IllegalStateException](read(broken))
      expect(e.getMessage.contains("malformed"), s"$why: ${e.getMessage}")
    }
  }

  /** Every pair of a family whose keys are all one length (the default family, longs) and
   * of one whose keys are not (strings of 1 to 40 bytes), over many small chunks. */
  def fullScansStreamWhole(f: Fixture): Unit = {
    import f._
    val p = provider(checkpoint("chunks"), "readCacheMB" -> "0", "iteratorChunkBytes" -> "2000")
    val store = p.getStore(0)
    val names = new StructType().add("name", StringType)
    store.createColFamilyIfAbsent("names", names, valueSchema, NoPrefixKeyStateEncoderSpec(names),
      useMultipleValuesPerKey = false, isInternal = false)
    val named = UnsafeProjection.create(names)
    def name(i: Long) = {
      val in = new SpecificInternalRow(names)
      in.update(0, UTF8String.fromString("n" * (1 + (i % 40).toInt) + i))
      named(in).copy()
    }
    (0L until 3000L).foreach { i =>
      store.put(key(i), value(i * 3))
      store.put(name(i), value(i), "names")
    }
    expect(store.commit() == 1, "the commit is not version 1")
    val read = p.getReadStore(1)
    def scan(cf: String)(pick: UnsafeRowPair => (String, Long)): Map[String, Long] = {
      val it = read.iterator(cf)
      try it.map(pick).toMap finally it.close()
    }
    val longs = scan(StateStore.DEFAULT_COL_FAMILY_NAME)(r =>
      (r.key.getLong(0).toString, r.value.getLong(0)))
    expect(longs == (0L until 3000L).map(i => (i.toString, i * 3)).toMap,
      s"the longs' scan found ${longs.size} of 3000 pairs, or wrong values")
    val strings = scan("names")(r => (r.key.getUTF8String(0).toString, r.value.getLong(0)))
    expect(strings == (0L until 3000L).map(i => (name(i).getUTF8String(0).toString, i)).toMap,
      s"the strings' scan found ${strings.size} of 3000 pairs, or wrong values")
    read.abort()
    p.close()
  }

  def rangeScanListsKeysInValueOrder(f: Fixture): Unit = {
    import f._
    val p = provider(checkpoint("range"))
    val store = p.getStore(0).asInstanceOf[PyRocksStateStore] // rangeScan: Spark's API from 4.2
    store.createColFamilyIfAbsent("ordered", keySchema, valueSchema,
      RangeKeyScanStateEncoderSpec(keySchema, Seq(0)), useMultipleValuesPerKey = false,
      isInternal = false)
    Seq(40L, -7L, 3L, 0L, -100L, 12L).foreach(k => store.put(key(k), value(k * 2), "ordered"))
    def keys(from: Option[Long], to: Option[Long]): Seq[Long] = {
      val it = store.rangeScan(from.map(key), to.map(key), "ordered")
      try it.map(_.key.getLong(0)).toList finally it.close()
    }
    expect(keys(None, None) == Seq(-100L, -7L, 0L, 3L, 12L, 40L), s"all: ${keys(None, None)}")
    expect(keys(Some(-7L), Some(12L)) == Seq(-7L, 0L, 3L), s"[-7, 12): ${keys(Some(-7), Some(12))}")
    expect(keys(Some(13L), None) == Seq(40L), s"[13, ..): ${keys(Some(13L), None)}")
    val refused = expectThrows[UnsupportedOperationException](
      store.rangeScan(None, None, StateStore.DEFAULT_COL_FAMILY_NAME))
    expect(messages(refused).contains("RangeKeyScanStateEncoderSpec"),
      s"unclear refusal: ${messages(refused)}")
    expect(store.commit() == 1, "the commit is not version 1")
    val read = p.getReadStore(1)
    val it = read.iterator("ordered")
    try expect(it.map(_.value.getLong(0)).toList.sorted == Seq(-200L, -14L, 0L, 6L, 24L, 80L),
      "version 1 lost a row") finally it.close()
    read.abort()
    p.close()
  }
}

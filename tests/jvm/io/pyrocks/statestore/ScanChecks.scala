package io.pyrocks.statestore

import org.apache.spark.sql.execution.streaming.state.{RangeKeyScanStateEncoderSpec, StateStore}

/** Range scans (the range-scan compat concern: which key specs have them differs by
 * release): keys in the order of their values, negative ones first, bounds as Spark's
 * RocksDB provider sets them (start inclusive, end exclusive). */
object ScanChecks {
  val all: Map[String, Fixture => Unit] = Map(
    "range-scan-lists-keys-in-value-order" -> rangeScanListsKeysInValueOrder)

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

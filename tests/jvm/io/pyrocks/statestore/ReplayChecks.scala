package io.pyrocks.statestore

import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.Files

import org.apache.spark.sql.execution.streaming.state.RecordType

/** Versions written from nothing (Spark's loadEmpty, what a canonical restore uses), the
 * change feed and replay from a chosen snapshot (SupportsFineGrainedReplay). */
object ReplayChecks {
  val all: Map[String, Fixture => Unit] = Map(
    "load-empty-publishes-a-first-version" -> loadEmptyPublishesAFirstVersion,
    "change-feed-lists-each-version-in-order" -> changeFeedListsEachVersionInOrder,
    "replay-from-a-snapshot-equals-a-load" -> replayFromASnapshotEqualsALoad)

  /** An empty store standing at version 7 commits version 8 with nothing before it; a
   * second provider loads 8 (and only 8: there is no 7). */
  def loadEmptyPublishesAFirstVersion(f: Fixture): Unit = {
    import f._
    val root = checkpoint("empty")
    val writer = provider(root)
    val store = writer.getStore(7, None, forceSnapshotOnCommit = false, loadEmpty = true)
    expect(store.get(key(1)) == null, "an empty store has a key")
    (1 to 3).foreach(k => store.put(key(k), value(10L * k)))
    expect(store.commit() == 8, "the commit after an empty load is not version 8")
    writer.close()
    val reader = provider(root)
    val read = reader.getReadStore(8)
    expect((1 to 3).forall(k => valueOf(read.get(key(k))).contains(10L * k)),
      "version 8 lost rows")
    read.abort()
    val missing = expectThrows[IllegalStateException](reader.getReadStore(7))
    expect(messages(missing).contains("7"), s"unclear error: ${messages(missing)}")
    reader.close()
  }

  /** Each version's puts and deletes, in the order made, keys decoded through the family's
   * encoder (a prefix-scan family here), batch id = version - 1. */
  def changeFeedListsEachVersionInOrder(f: Fixture): Unit = {
    import f._
    val p = prefixProvider(checkpoint("feed"))
    val v1 = p.getStore(0)
    v1.put(pair(1, 1), value(11)); v1.put(pair(2, 1), value(21)); v1.commit()
    val v2 = p.getStore(1)
    v2.put(pair(1, 1), value(12)); v2.remove(pair(2, 1)); v2.commit()
    val v3 = p.getStore(2)
    v3.put(pair(3, 5), value(35)); v3.commit()
    def feed(start: Long, end: Long): Seq[String] = {
      val (changes, stop) = p.changesBetween(start, end, None)
      try changes.map { case (kind, k, v, batch) =>
        s"$batch $kind ${k.getLong(0)},${k.getLong(1)} ${valueOf(v).getOrElse("-")}"
      }.toList finally stop()
    }
    val put = RecordType.PUT_RECORD
    val delete = RecordType.DELETE_RECORD
    val all = Seq(s"0 $put 1,1 11", s"0 $put 2,1 21", s"1 $put 1,1 12", s"1 $delete 2,1 -",
      s"2 $put 3,5 35")
    expect(feed(1, 3) == all, s"feed 1..3 was ${feed(1, 3)}")
    expect(feed(2, 2) == all.slice(2, 4), s"feed 2..2 was ${feed(2, 2)}")
    val beyond = expectThrows[Throwable](feed(2, 9))
    expect(messages(beyond).contains("4..9"), s"unclear error: ${messages(beyond)}")
    p.close()
  }

  /** Version 4 rebuilt from the snapshot of version 2 (ignoring newer ones) equals version
   * 4 loaded; a missing snapshot is named; replaying for an update is refused. */
  def replayFromASnapshotEqualsALoad(f: Fixture): Unit = {
    import f._
    val root = checkpoint("replay")
    def commit(p: PyRocksStateStoreProvider, v: Int): Unit = {
      val store = p.getStore(v)
      store.put(key(v), value(v)); store.remove(key(v - 1)); store.put(key(100), value(v))
      store.commit()
    }
    // closing finishes: the last committed version gets a snapshot (2, then 4)
    val first = provider(root)
    (0 until 2).foreach(commit(first, _))
    first.close()
    val second = provider(root)
    (2 until 4).foreach(commit(second, _))
    second.close()
    val snapshots = Files.walk(root).toArray.map(_.asInstanceOf[java.nio.file.Path])
      .filter(_.getParent.getFileName.toString == "snapshots").map(_.getFileName.toString)
    expect(snapshots.exists(_.startsWith("%020d".format(2))), s"no snapshot of version 2: " +
      snapshots.mkString(", "))
    val q = provider(root)
    val replayed = q.replayFrom(2, 4, readOnly = true)
    val rows = (-1 to 100).flatMap(k => valueOf(replayed.get(key(k))).map(k -> _))
    expect(rows == Seq(3 -> 3L, 100 -> 3L), s"replayed version 4 holds $rows")
    replayed.abort()
    // Without version 3's changes only a load from the newer snapshot (of 4) still works:
    // so the replay above really went through the snapshot of 2 and versions 3 and 4.
    val store = root.resolve("0").resolve("0")
    val manifest = new String(Files.readAllBytes(
      store.resolve("manifests").resolve("%020d.json".format(3))), UTF_8)
    val changelog = """"name": "([0-9a-f]+\.changelog)"""".r.findFirstMatchIn(manifest)
      .getOrElse(throw new AssertionError(s"no changelog in $manifest")).group(1)
    Files.delete(store.resolve("files").resolve(changelog))
    val loaded = q.getReadStore(4)
    expect(valueOf(loaded.get(key(3))).contains(3L), "version 4 no longer loads")
    loaded.abort()
    val broken = expectThrows[IllegalStateException](q.replayFrom(2, 4, readOnly = true))
    expect(messages(broken).contains("version 3"), s"unclear error: ${messages(broken)}")
    val missing = expectThrows[IllegalStateException](q.replayFrom(9, 9, readOnly = true))
    expect(messages(missing).contains("snapshot"), s"unclear error: ${messages(missing)}")
    expectThrows[UnsupportedOperationException](q.replayFrom(2, 4, readOnly = false))
    q.close()
  }
}

package io.pyrocks.statestore

import scala.collection.mutable
import scala.util.Random

/** The read cache's packed storage against a plain map: every answer equal through puts,
 * updates, removals (the index's backward shifts), index growth, compaction, memory refused
 * mid-way and snapshots that must not see later writes; and every byte charged. */
object PackedChecks {
  val all: Map[String, Fixture => Unit] = Map(
    "packed-entries-answer-as-a-map-does" -> answerAsAMapDoes,
    "packed-entries-snapshots-ignore-later-writes" -> snapshotsIgnoreLaterWrites,
    "prefix-records-keep-their-keys-in-order" -> prefixRecordsKeepOrder,
    "packed-entries-evict-those-written-longest-ago" -> evictThoseWrittenLongestAgo,
    "packed-entries-page-table-follows-the-pages-kept" -> pageTableFollowsThePagesKept,
    "packed-entries-hold-no-more-pages-than-a-slot-names" -> holdNoMorePagesThanASlotNames,
    "packed-entries-rewrite-in-place-only-what-no-reader-holds" -> rewriteInPlaceOnlyUnshared,
    "int32-reads-back-what-it-wrote-and-refuses-a-bad-offset" -> int32RoundTrips,
    "word-packing-keeps-every-value-and-only-shortens" -> wordPackingRoundTrips)

  /** A budget that counts, and refuses past `limit`. */
  private final class Counting(var limit: Long) extends PackedEntries.Memory {
    var used = 0L
    def reserve(bytes: Long): Boolean =
      if (used + bytes <= limit) { used += bytes; true } else false
    def release(bytes: Long): Unit = used -= bytes
  }

  private def bytes(rnd: Random, max: Int): Array[Byte] = {
    val out = new Array[Byte](rnd.nextInt(max + 1))
    rnd.nextBytes(out)
    out
  }

  /** A row-like value: `words` 8-byte words, each with a random number of high zero bytes. */
  private def words(rnd: Random, words: Int): Array[Byte] = {
    val out = new Array[Byte](8 * words)
    for (w <- 0 until words; b <- 0 until rnd.nextInt(9)) out(8 * w + b) = rnd.nextInt().toByte
    out
  }

  private type Key = (Int, Seq[Byte])

  /** The bytes of the records that hold these entries: a 16-byte head, the key, the value. */
  private def recordBytes(entries: collection.Map[Key, Option[Seq[Byte]]]): Long =
    entries.map { case ((_, k), v) => PackedEntries.Head + k.size + v.map(_.size).getOrElse(0) }
      .sum

  def answerAsAMapDoes(f: Fixture): Unit = {
    import f._
    for (seed <- 1 to 9) {
      val rnd = new Random(seed)
      // Unbounded; too small to ever compact; or room for less than a page at times, more
      // at others: compactions start and run out of memory part-way.
      val wobbles = seed % 3 == 2
      val memory = new Counting(if (seed % 3 == 1) 256L << 10 else Long.MaxValue)
      // Few distinct keys (so updates and removals hit), hashes forced to collide at times.
      val hashFn: (Array[Byte], Int) => Int =
        if (seed % 2 == 0) (k, space) => CacheKey.hash(k, space) & 0x3f else CacheKey.hash
      val packed = new PackedEntries(memory, hashFn)
      val model = mutable.Map.empty[Key, Option[Seq[Byte]]]
      val keys = Vector.fill(3000)((rnd.nextInt(3), bytes(rnd, 24)))
      def hashOf(k: (Int, Array[Byte])): Int = hashFn(k._2, k._1)
      for (step <- 1 to 60000) {
        if (wobbles) memory.limit = memory.used + rnd.nextInt(300 << 10)
        // The first thousand keys are written first and never again: the oldest pages stay
        // full of live records, which a compaction must move before it can drop a page.
        val cold = step <= 1000
        val k = if (cold) keys(step - 1) else keys(1000 + rnd.nextInt(keys.size - 1000))
        val id = (k._1, k._2.toSeq)
        (if (cold) 9 else rnd.nextInt(10)) match {
          case 0 | 1 =>
            packed.remove(k._1, k._2, hashOf(k))
            model.remove(id)
          case 2 =>
            if (packed.put(k._1, k._2, hashOf(k), null)) model(id) = None
          case _ =>
            val v = bytes(rnd, 300)
            if (packed.put(k._1, k._2, hashOf(k), v)) model(id) = Some(v.toSeq)
        }
        if (step % 997 == 0 || step == 60000) {
          for (key <- keys) {
            val at = packed.find(key._1, key._2, hashOf(key))
            val got = if (at < 0) None else Some(Option(packed.value(at)).map(_.toSeq))
            val want = model.get((key._1, key._2.toSeq))
            expect(got == want, s"seed $seed step $step: ${key._2.toSeq} in space ${key._1} " +
              s"is $got, the map says $want")
          }
          expect(packed.size == model.size, s"seed $seed: ${packed.size} entries, the map has " +
            s"${model.size}")
          // Dead bytes are what the kept pages hold beyond the live records: the count that
          // decides when to compact must not drift, least of all after a refused compaction.
          val dead = packed.keptRecordBytes - recordBytes(model)
          expect(packed.deadRecordBytes == dead, s"seed $seed step $step: " +
            s"${packed.deadRecordBytes} dead bytes counted, $dead kept beyond the live records " +
            s"($packed)")
          expect(memory.used == packed.allocatedBytes, s"seed $seed: charged ${memory.used}, " +
            s"allocated ${packed.allocatedBytes}")
          expect(memory.used <= memory.limit, s"seed $seed: ${memory.used} over ${memory.limit}")
        }
      }
      // With room, live bytes stay within a few times the entries': compaction ran.
      val live = recordBytes(model)
      if (seed % 3 == 0) {
        expect(packed.allocatedBytes < 4 * live + (4L << 20), s"seed $seed: " +
          s"${packed.allocatedBytes} bytes allocated for $live live: no compaction ($packed)")
      }
      packed.clear()
      expect(memory.used == 0 && packed.size == 0, s"seed $seed: clear left ${memory.used}")
    }
  }

  def snapshotsIgnoreLaterWrites(f: Fixture): Unit = {
    import f._
    val memory = new Counting(Long.MaxValue)
    val packed = new PackedEntries(memory, CacheKey.hash)
    def put(k: Int, v: String): Unit =
      expect(packed.put(0, BigInt(k).toByteArray, CacheKey.hash(BigInt(k).toByteArray, 0),
        v.getBytes("UTF-8")), "refused")
    def remove(k: Int): Unit =
      packed.remove(0, BigInt(k).toByteArray, CacheKey.hash(BigInt(k).toByteArray, 0))
    (0 until 20100).foreach(k => put(k, s"old $k"))
    (0 until 20000).foreach(k => put(k, s"v$k")) // the old records die before the snapshot
    (20000 until 20100).foreach(remove)
    packed.put(1, Array[Byte](1), CacheKey.hash(Array[Byte](1), 1), Array[Byte](9)) // other space
    val snapshot = packed.snapshot()
    // Rewrite everything many times over (compaction drops the old pages) and remove half.
    for (round <- 1 to 5; k <- 0 until 20000) put(k, s"round $round, $k")
    (0 until 20000 by 2).foreach(remove)
    val later = packed.snapshot() // taken between the first snapshot's reads
    (1 until 20000 by 4).foreach(remove)
    def read(snap: PackedEntries.Snapshot): Map[Int, String] = {
      val out = mutable.Map.empty[Int, String]
      while (snap.advance()) if (snap.space == 0) {
        val key = java.util.Arrays.copyOfRange(snap.page, snap.keyAt, snap.keyAt + snap.keyLength)
        out(BigInt(key).toInt) = new String(snap.page, snap.valueAt, snap.valueLength, "UTF-8")
      }
      out.toMap
    }
    val seen = read(snapshot)
    expect(seen == (0 until 20000).map(k => k -> s"v$k").toMap, s"the snapshot saw later " +
      s"writes or missed entries: ${seen.size} entries, e.g. ${seen.find(e => e._2 != s"v${e._1}")}")
    val between = read(later)
    expect(between == (1 until 20000 by 2).map(k => k -> s"round 5, $k").toMap,
      s"a snapshot taken after the rewrites lists ${between.size} keys")
    val now = read(packed.snapshot()).keySet
    expect(now == (3 until 20000 by 4).toSet, s"a new snapshot lists ${now.size} keys")
  }

  def evictThoseWrittenLongestAgo(f: Fixture): Unit = {
    import f._
    val memory = new Counting(Long.MaxValue)
    val packed = new PackedEntries(memory, CacheKey.hash)
    def key(k: Int): Array[Byte] = java.nio.ByteBuffer.allocate(4).putInt(k).array()
    def put(k: Int, v: String): Unit =
      expect(packed.put(0, key(k), CacheKey.hash(key(k), 0), v.getBytes("UTF-8")), "refused")
    def known(k: Int): Option[String] = {
      val at = packed.find(0, key(k), CacheKey.hash(key(k), 0))
      if (at < 0) None else Some(new String(packed.value(at), "UTF-8"))
    }
    (0 until 50000).foreach(k => put(k, s"v$k"))
    (0 until 1000).foreach(k => put(k, s"again $k")) // rewritten: now among the newest
    val before = packed.allocatedBytes
    (1 to 3).foreach(_ => expect(packed.evictOldest(), "nothing to evict"))
    expect(packed.allocatedBytes < before && memory.used == packed.allocatedBytes,
      s"eviction gave back ${before - packed.allocatedBytes} bytes; charged ${memory.used}")
    val gone = (1000 until 50000).filter(known(_).isEmpty)
    expect(gone.nonEmpty && gone == (1000 until 1000 + gone.size),
      s"evicted other than the oldest: ${gone.take(5)}..${gone.takeRight(5)} (${gone.size})")
    expect((0 until 1000).forall(k => known(k).contains(s"again $k")),
      "a key rewritten since was evicted with its old page")
    expect((1000 + gone.size until 50000).forall(k => known(k).contains(s"v$k")),
      "a kept key lost its value")
    expect(packed.size == 50000 - gone.size, s"${packed.size} entries, ${50000 - gone.size} kept")
    // the dead records of the rewritten keys went with their pages, uncounted
    expect(packed.evicted == gone.size, s"${packed.evicted} evictions counted, ${gone.size} gone")
    while (packed.evictOldest()) {}
    expect(packed.size < 50000, "every page but the newest evicted, yet all entries are left")
  }

  /** A long run through a small budget: ~300 pages given back (evicted, or emptied by
   * compaction), 6 kept at a time. The page table stays the size of what is kept, and every
   * entry, found or walked in a snapshot, keeps its latest value across the shifts. */
  def pageTableFollowsThePagesKept(f: Fixture): Unit = {
    import f._
    val memory = new Counting(1L << 20)
    val packed = new PackedEntries(memory, CacheKey.hash)
    val latest = longRun(f, packed, steps = 600000)()
    expect(packed.pageTableSlots <= 256, s"a page table of ${packed.pageTableSlots} slots " +
      s"for $packed")
    expect(memory.used == packed.allocatedBytes && memory.used <= memory.limit,
      s"charged ${memory.used}, allocated ${packed.allocatedBytes}")
    expectExact(f, packed, latest, steps = 600000)
  }

  /** With memory to spare, the slots' bound on pages is what evicts: the table never holds
   * more pages than a slot can name (here 12), and every entry keeps its latest value. */
  def holdNoMorePagesThanASlotNames(f: Fixture): Unit = {
    import f._
    val memory = new Counting(Long.MaxValue)
    val packed = new PackedEntries(memory, CacheKey.hash, maxPages = 12)
    var most = 0
    val latest = longRun(f, packed, steps = 200000) { () =>
      most = math.max(most, packed.pagesInTable)
    }
    expect(most <= 12, s"$most pages in the table of $packed")
    expectExact(f, packed, latest, steps = 200000)
  }

  /** Updates that keep a value's length rewrite its record in place (no dead bytes, nothing
   * to compact), unless a reader may hold the record: one given the pages by a snapshot or
   * by `sharedPage` keeps reading what it was given. */
  def rewriteInPlaceOnlyUnshared(f: Fixture): Unit = {
    import f._
    val packed = new PackedEntries(new Counting(Long.MaxValue), CacheKey.hash)
    val keys = 0 until 10000 // dead records of one round stay below what compaction waits for
    def put(k: Int, v: String): Unit =
      expect(packed.put(0, intKey(k), CacheKey.hash(intKey(k), 0), v.getBytes("UTF-8")),
        "refused")
    def value(k: Int): String =
      new String(packed.value(findIntKey(packed, k)), "UTF-8")
    def round(r: Int): Unit = keys.foreach(k => put(k, f"round $r%02d of $k%05d"))
    round(0)
    val written = packed.keptRecordBytes
    (1 to 3).foreach(round)
    expect(packed.keptRecordBytes == written && packed.deadRecordBytes == 0,
      s"three rounds of updates of the same length grew the pages from $written to " +
        s"${packed.keptRecordBytes} bytes (${packed.deadRecordBytes} dead): not in place")
    expect(keys.forall(k => value(k) == f"round 03 of $k%05d"), "an update in place was lost")

    val snapshot = packed.snapshot()
    round(4) // the snapshot holds every record: each update is a new record
    expect(packed.deadRecordBytes > 0, "records a snapshot holds were rewritten in place")
    val afterFirst = packed.keptRecordBytes
    round(5) // records written since the snapshot: in place again
    expect(packed.keptRecordBytes == afterFirst, s"updates of records no reader holds grew " +
      s"the pages from $afterFirst to ${packed.keptRecordBytes} bytes")
    val seen = walkIntKeys(snapshot)
    expect(seen == keys.map(k => k -> f"round 03 of $k%05d").toMap, s"the snapshot saw later " +
      s"updates: ${seen.find(e => e._2 != f"round 03 of ${e._1}%05d")}")

    val at = findIntKey(packed, 7)
    val (page, start) = (packed.sharedPage(at), packed.valueAt(at))
    round(6)
    val held = new String(page, start, packed.valueLength(at), "UTF-8")
    expect(held == "round 05 of 00007", s"a page shared with a reader changed under it: $held")
    expect(keys.forall(k => value(k) == f"round 06 of $k%05d"), "an update was lost")
    put(7, "a longer value than before") // another length: a new record whatever the sharing
    expect(value(7) == "a longer value than before", s"key 7 reads ${value(7)}")
    expect(walkIntKeys(packed.snapshot()).size == keys.size,
      "a snapshot walks another number of keys")
  }

  private def intKey(k: Int): Array[Byte] = java.nio.ByteBuffer.allocate(4).putInt(k).array()

  /** Where the record of `intKey(k)` is (space 0), or -1. */
  private def findIntKey(packed: PackedEntries, k: Int): Long =
    packed.find(0, intKey(k), CacheKey.hash(intKey(k), 0))

  /** What a snapshot of `intKey` keys and UTF-8 values walks, key by key. */
  private def walkIntKeys(snapshot: PackedEntries.Snapshot): Map[Int, String] = {
    val out = mutable.Map.empty[Int, String]
    while (snapshot.advance()) out(java.nio.ByteBuffer.wrap(snapshot.page, snapshot.keyAt,
      4).getInt) = new String(snapshot.page, snapshot.valueAt, snapshot.valueLength, "UTF-8")
    out.toMap
  }

  /** Puts `steps` keys, new ones mostly and a recent one rewritten at times (dead records:
   * compaction), evicting the oldest pages whenever a put is refused; each key's latest value.
   * `afterEach` runs after every put. */
  private def longRun(f: Fixture, packed: PackedEntries, steps: Int)(
      afterEach: () => Unit = () => ()): Map[Int, String] = {
    import f._
    val latest = mutable.Map.empty[Int, String]
    val rnd = new Random(5)
    for (step <- 0 until steps) {
      val k = if (step > 1000 && rnd.nextInt(4) == 0) step - 1 - rnd.nextInt(1000) else step
      val v = s"v$step " + "x" * rnd.nextInt(200)
      val hash = CacheKey.hash(intKey(k), 0)
      var stored = packed.put(0, intKey(k), hash, v.getBytes("UTF-8"))
      while (!stored && packed.evictOldest()) {
        stored = packed.put(0, intKey(k), hash, v.getBytes("UTF-8"))
      }
      expect(stored, s"step $step: nothing left to evict, yet no room")
      latest(k) = v
      afterEach()
    }
    expect(packed.evicted > 10000, s"only ${packed.evicted} entries evicted: no long run")
    latest.toMap
  }

  /** Every entry found holds its key's latest value, and a snapshot walks the same ones. */
  private def expectExact(f: Fixture, packed: PackedEntries, latest: Map[Int, String],
      steps: Int): Unit = {
    import f._
    val found = (0 until steps).flatMap { k =>
      val at = findIntKey(packed, k)
      if (at < 0) None else Some(k -> new String(packed.value(at), "UTF-8"))
    }.toMap
    expect(found.size == packed.size && found.forall { case (k, v) => latest(k) == v },
      s"${found.size} found of ${packed.size}; stale: ${found.find(e => latest(e._1) != e._2)}")
    val walked = walkIntKeys(packed.snapshot())
    expect(walked == found, s"a snapshot walks ${walked.size} entries, ${found.size} are found")
  }

  /** The records' int fields: little-endian at any offset, aligned or not, each write
   * touching its four bytes alone; an offset past the array's end (a wrong location) fails
   * with the exception that names it, never reads or writes out of bounds. */
  def int32RoundTrips(f: Fixture): Unit = {
    import f._
    val rnd = new Random(7)
    for (_ <- 1 to 2000) {
      val page = bytes(rnd, 64) ++ new Array[Byte](4)
      val before = page.clone()
      val (at, value) = (rnd.nextInt(page.length - 3), rnd.nextInt())
      Int32.put(page, at, value)
      val layout = (0 until 4).map(i => ((value >>> (8 * i)) & 0xff).toByte)
      expect(page.slice(at, at + 4).toSeq == layout, s"$value at $at: ${page.toSeq}")
      expect(page.take(at).sameElements(before.take(at)) &&
        page.drop(at + 4).sameElements(before.drop(at + 4)), s"$value at $at spilled over")
      expect(Int32.get(page, at) == value, s"read back ${Int32.get(page, at)}, wrote $value")
    }
    val page = new Array[Byte](16)
    for (at <- Seq(13, 16, -1, Int.MaxValue)) {
      val e = expectThrows[IndexOutOfBoundsException](Int32.get(page, at))
      expect(e.getMessage.contains("out of bounds"), s"get at $at: ${e.getMessage}")
      expectThrows[IndexOutOfBoundsException](Int32.put(page, at, 1))
    }
    expect(page.forall(_ == 0), "a refused put wrote")
  }

  /** A prefix record against a sorted map of the keys under its prefix: the same pairs, in
   * order, through puts, updates and absent keys, listed or not; lookups of each key, of one
   * never written, and of keys not under the prefix (never known: neither found nor absent);
   * a key not under the prefix, or whose value a u16 cannot measure, is refused, not kept.
   * The scan's keys are the prefix (the key head, before the record in its page) then the
   * suffix the record holds. */
  def prefixRecordsKeepOrder(f: Fixture): Unit = {
    import f._
    val rnd = new Random(3)
    for (listed <- Seq(true, false); _ <- 1 to 200) {
      val prefix = bytes(rnd, 4)
      def under(suffix: Array[Byte]): Array[Byte] = prefix ++ suffix
      var record: Array[Byte] = null
      val model = mutable.TreeMap.empty[Seq[Byte], Option[Seq[Byte]]](
        Ordering.fromLessThan[Seq[Byte]]((a, b) =>
          java.util.Arrays.compareUnsigned(a.toArray, b.toArray) < 0))
      def update(key: Array[Byte], value: Array[Byte]): Option[Array[Byte]] =
        PrefixRecord.updated(record, 0, if (record == null) 0 else record.length, prefix, key,
          value, listed)
      for (_ <- 1 to 40) {
        val key = under(bytes(rnd, 3))
        val value = rnd.nextInt(8) match {
          case 0 | 1 => null
          case 2 | 3 | 4 => bytes(rnd, 5)
          case _ => words(rnd, rnd.nextInt(9)) // packed when that is shorter
        }
        record = update(key, value).getOrElse(throw new AssertionError("a key under the prefix was refused"))
        if (value == null && listed) model.remove(key.toSeq) else model(key.toSeq) = Option(value).map(_.toSeq)
      }
      val page = Array[Byte](9) ++ prefix ++ record ++ Array[Byte](1, 2)
      val (start, end) = (1 + prefix.length, 1 + prefix.length + record.length)
      val pairs = new PrefixRecord.Scan(page, start, end, 1, prefix.length).pairs
        .map { case (k, v) => (k.toSeq, v.toSeq) }.toSeq
      val want = model.toSeq.collect { case (k, Some(v)) => (k, v) }
      expect(pairs == want, s"listed=$listed: pairs $pairs, want $want")
      for ((k, v) <- model) {
        val got = PrefixRecord.lookup(page, start, end, k.toArray, prefix)
        expect(got.map(_.map(_.toSeq)) == Some(v), s"lookup of $k: $got")
        val knows = PrefixRecord.knows(page, start, end, k.toArray, prefix)
        expect(knows == (if (v.isDefined) ReadCache.Present else ReadCache.Absent),
          s"what the record knows of $k: $knows")
      }
      val unknown = under(Array[Byte](1, 2, 3, 4)) // longer than any suffix written
      val answer = PrefixRecord.lookup(page, start, end, unknown, prefix)
      expect(answer == (if (listed) Some(None) else None),
        s"listed=$listed: an unknown key answered $answer")
      // A key whose suffix matches one held, but with another head: not under the prefix.
      for (k <- model.keys.headOption if prefix.nonEmpty) {
        val elsewhere = k.toArray.clone()
        elsewhere(0) = (elsewhere(0) + 1).toByte
        expect(PrefixRecord.lookup(page, start, end, elsewhere, prefix).isEmpty,
          s"a key not under the prefix was answered")
        expect(PrefixRecord.knows(page, start, end, elsewhere, prefix) == ReadCache.Unknown,
          s"a key not under the prefix was known")
        expect(update(elsewhere, Array[Byte](1)).isEmpty, "a key not under the prefix was kept")
      }
    }
    // The u16 lengths: the longest value a record can measure is kept, one byte more is not.
    val prefix = Array[Byte](4, 2)
    val key = prefix ++ Array[Byte](7)
    for (length <- Seq(0xfffe, 0xffff)) {
      val value = Array.fill[Byte](length)(5)
      val kept = PrefixRecord.updated(null, 0, 0, prefix, key, value, listed = true)
      if (length == 0xfffe) {
        val record = kept.getOrElse(throw new AssertionError("a value of 65534 bytes was refused"))
        val got = PrefixRecord.lookup(record, 0, record.length, key, prefix)
        expect(got.flatten.exists(java.util.Arrays.equals(_, value)),
          "a value of 65534 bytes did not read back")
      } else {
        expect(kept.isEmpty, "a value of 65535 bytes was kept")
      }
    }
    // A suffix's length leaves the high bit to say the value is packed.
    for (length <- Seq(0x7fff, 0x8000)) {
      val long = prefix ++ Array.fill[Byte](length)(3)
      val kept = PrefixRecord.updated(null, 0, 0, prefix, long, Array[Byte](1), listed = true)
      if (length == 0x7fff) {
        val record = kept.getOrElse(throw new AssertionError("a suffix of 32767 bytes was refused"))
        val got = PrefixRecord.lookup(record, 0, record.length, long, prefix)
        expect(got.flatten.exists(_.toSeq == Seq[Byte](1)), "a suffix of 32767 bytes lost its value")
      } else {
        expect(kept.isEmpty, "a suffix of 32768 bytes was kept")
      }
    }
    expect(PrefixRecord.of(Seq((key, Array[Byte](1)), (Array[Byte](4, 3, 1), Array[Byte](2))),
      prefix).isEmpty, "a listing with a key not under its prefix was kept")
    // A session window's value (user, window offset and size, count; the window's null
    // bitset, start and end in microseconds) is kept in half its bytes.
    val session = new Array[Byte](56)
    val longs = java.nio.ByteBuffer.wrap(session).order(java.nio.ByteOrder.nativeOrder())
    Seq(0L, 1234567L, (32L << 32) | 24L, 3L, 0L, 1733360000000000L, 1733360600000000L)
      .zipWithIndex.foreach { case (v, i) => longs.putLong(8 * i, v) }
    val record = PrefixRecord.updated(null, 0, 0, prefix, key, session, listed = true).get
    expect(record.length == 1 + 4 + 1 + 28, s"a session window's record is ${record.length} bytes")
    val scanned = new PrefixRecord.Scan(record, 0, record.length, 0, 0).pairs.toSeq
    expect(scanned.map(_._2.toSeq) == Seq(session.toSeq), "the session window's value changed")
    // A scan unpacks into chunks it shares between values: every slice it handed out still
    // holds its value at the end (rows point into them), across chunks of every size.
    val many = (0 until 3000).map(i => (prefix ++ BigInt(100000 + i).toByteArray,
      words(rnd, 1 + rnd.nextInt(40))))
    val listing = PrefixRecord.of(many, prefix).get
    val scan = new PrefixRecord.Scan(listing, 0, listing.length, 0, 0)
    val slices = Iterator.continually(scan.advance()).takeWhile(identity)
      .map(_ => (scan.valueBytes, scan.valueAt, scan.valueLength)).toVector
    val read = slices.map { case (bytes, at, length) => bytes.slice(at, at + length).toSeq }
    expect(read == many.map(_._2.toSeq), "a slice a scan handed out changed later")
    expect(slices.map(_._1).distinct.size < many.size / 10, "each value got an array of its own")
  }

  def wordPackingRoundTrips(f: Fixture): Unit = {
    import f._
    val rnd = new Random(11)
    for (step <- 1 to 20000) {
      val value = step % 10 match {
        case 0 => bytes(rnd, 40)
        case 5 => // every byte random: most words keep all 8, so most such values stay as is
          val out = new Array[Byte](8 * rnd.nextInt(20))
          rnd.nextBytes(out)
          out
        case _ => words(rnd, rnd.nextInt(300))
      }
      val packed = WordPacking.packedLength(value)
      // The model: a head byte, a nibble a word, and each word (a long in the machine's
      // order, as UnsafeRow reads it) without its high zero bytes.
      val n = value.length / 8
      val longs = java.nio.ByteBuffer.wrap(value).order(java.nio.ByteOrder.nativeOrder())
      val model = 1 + (n + 1) / 2 + (0 until n).map { w =>
        8 - java.lang.Long.numberOfLeadingZeros(longs.getLong(8 * w)) / 8
      }.sum
      val packs = value.length % 8 == 0 && n > 0 && n <= 255 && model < value.length
      expect(packed == (if (packs) model else -1), s"step $step: ${value.length} bytes " +
        s"packed into $packed, the model says ${if (packs) model else -1}")
      if (packs) {
        // Packed at the very end of an array too, where its last words cannot be read 8 bytes
        // at once, or with room after it, where every word is.
        val pad = rnd.nextInt(3) * 7
        val room = if (rnd.nextBoolean()) 0 else value.length + 8
        val out = new Array[Byte](pad + packed + room)
        rnd.nextBytes(out) // whatever the array held before
        WordPacking.pack(value, out, pad)
        expect(WordPacking.unpackedLength(out, pad) == value.length, s"step $step: length")
        expect(java.util.Arrays.equals(WordPacking.unpack(out, pad), value),
          s"step $step: ${value.toSeq} unpacked as ${WordPacking.unpack(out, pad).toSeq}")
      }
    }
    expect(WordPacking.packedLength(new Array[Byte](8 * 256)) == -1, "256 words were packed")
    expect(WordPacking.packedLength(new Array[Byte](8 * 255)) == 1 + 128,
      "255 zero words did not pack into their head")
  }
}

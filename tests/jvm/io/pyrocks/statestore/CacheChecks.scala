package io.pyrocks.statestore

import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.Path

/** The read cache and its key filter: exact answers whatever happens to their memory. */
object CacheChecks {
  val all: Map[String, Fixture => Unit] = Map(
    "lost-race-invalidates-cache" -> lostRaceInvalidatesCache,
    "reconnect-invalidates-cache" -> reconnectInvalidatesCache,
    "family-and-key-never-collide" -> familyAndKeyNeverCollide,
    "reclaim-during-scan-keeps-listings-exact" -> reclaimDuringScan,
    "key-filter-charged-to-budget" -> keyFilterChargedToBudget,
    "key-filter-dropped-under-pressure" -> keyFilterDroppedUnderPressure,
    "key-filter-growth-never-overflows" -> keyFilterGrowthNeverOverflows,
    "a-key-written-again-does-not-grow-the-filter" -> keyWrittenAgainDoesNotGrowTheFilter,
    "a-write-that-clears-the-cache-for-its-filter-stays-exact" -> writeClearingForTheFilter,
    "a-store-loaded-empty-knows-every-key-absent" -> loadedEmptyKnowsEveryKeyAbsent,
    "a-prefix-listing-answers-for-its-keys" -> prefixListingAnswersForItsKeys,
    "a-complete-cache-answers-full-scans-of-the-default-family" -> completeCacheAnswersFullScans,
    "a-complete-cache-answers-full-scans-of-a-prefix-family" -> completeCacheScansPrefixFamily,
    "a-cache-over-its-budget-keeps-what-it-wrote-last" -> overBudgetKeepsTheNewest,
    "evictions-count-what-a-cache-pushed-out" -> evictionsCountWhatWasPushedOut,
    "an-outgrown-budget-is-said-once-naming-its-setting" -> outgrownBudgetSaidOnce,
    "reclaim-orders-caches-that-tasks-go-on-using" -> reclaimWhileCachesAreUsed,
    "a-walk-in-key-order-reads-ahead-and-stays-exact" -> walkInKeyOrderReadsAhead,
    "a-read-ahead-window-is-charged-and-kept-exact" -> readAheadWindowChargedAndExact,
    "a-closed-providers-cache-serves-the-next-provider" -> parkedCacheServesTheNextProvider,
    "a-parked-cache-answers-only-for-its-own-commit" -> parkedCacheAnswersOnlyItsCommit,
    "only-a-committed-cache-is-parked-and-it-goes-whole" -> parkedCachesEqualACommitAndGoWhole,
    "caches-stay-exact-across-the-providers-of-one-store" -> cachesExactAcrossProviders,
    "grouped-writes-leave-a-cache-as-single-writes-do" -> groupsWriteAsKeysOneByOne,
    "held-puts-are-seen-by-whatever-follows-them" -> heldPutsAreSeenByWhateverFollows)

  import Wire.DefaultCf

  private def bytes(s: String): Array[Byte] = s.getBytes(UTF_8)

  /** Two attempts of one batch on two working copies: the one that loses the race to
   * publish must forget what it wrote, or it would answer from a version that lost. */
  def lostRaceInvalidatesCache(f: Fixture): Unit = {
    import f._
    val root = checkpoint("race")
    val (winner, loser) = (provider(root), provider(root))
    val losing = loser.getStore(0)
    losing.put(key(1), value(20))
    losing.put(key(2), value(2))
    val winning = winner.getStore(0)
    winning.put(key(1), value(10))
    winning.commit()
    losing.commit() // loses: version 1 is the winner's now
    for (k <- Seq(1L, 2L)) {
      expect(loser.readCache.lookup(DefaultCf, keyBytes(k)).isEmpty,
        s"after a lost race the cache still answers key $k: " +
          loser.readCache.lookup(DefaultCf, keyBytes(k)).map(_.map(_.toSeq)))
    }
    val next = loser.getStore(1)
    expect(valueOf(next.get(key(1))).contains(10L) && next.get(key(2)) == null,
      s"version 1 seen by the loser: key 1 = ${valueOf(next.get(key(1)))}, " +
        s"key 2 = ${valueOf(next.get(key(2)))}; the winner wrote only key 1 = 10")
    next.abort()
    winner.close()
    loser.close()
  }

  /** A store loaded empty (Spark's loadEmpty, at any version: an offline writer such as a
   * canonical restore) holds no key, so the cache answers every key absent and tells the
   * worker so with each put, which then looks nothing up. */
  def loadedEmptyKnowsEveryKeyAbsent(f: Fixture): Unit = {
    import f._
    val p = provider(checkpoint("load-empty"))
    val first = p.getStore(0)
    first.put(key(1), value(1))
    first.commit()
    val empty = p.getStore(1, None, forceSnapshotOnCommit = false, loadEmpty = true)
    expect(p.readCache.lookup(DefaultCf, keyBytes(1)).contains(None) &&
      p.readCache.lookup(DefaultCf, keyBytes(7)).contains(None),
      "a store loaded empty at version 1 does not know its keys absent: key 1 " +
        p.readCache.lookup(DefaultCf, keyBytes(1)).map(_.map(_.toSeq)))
    expect(empty.get(key(1)) == null, s"the empty store has key 1 = ${valueOf(empty.get(key(1)))}")
    empty.put(key(2), value(2))
    empty.put(key(3), value(3))
    empty.remove(key(3))
    empty.commit()
    val next = p.getStore(2)
    expect(next.get(key(1)) == null && valueOf(next.get(key(2))).contains(2L) &&
      next.get(key(3)) == null, s"version 2 (written from empty: key 2 = 2): key 1 = " +
      s"${valueOf(next.get(key(1)))}, key 2 = ${valueOf(next.get(key(2)))}, key 3 = " +
      s"${valueOf(next.get(key(3)))}")
    val keys = next.metrics.numKeys
    expect(keys == 1, s"version 2 counts $keys keys, not 1")
    next.abort()
    p.close()
  }

  /** A prefix scan that ran to its end lists every key under its prefix, so it answers for
   * each of them (a session window's update after its scan), present or absent, and the
   * worker is told whether each written key existed: its key count stays exact. */
  def prefixListingAnswersForItsKeys(f: Fixture): Unit = {
    import f._
    val root = checkpoint("listing-answers")
    val writer = prefixProvider(root)
    val first = writer.getStore(0)
    (0L until 10L).foreach(i => first.put(pair(7, i), value(i)))
    first.put(pair(8, 0), value(80))
    first.commit()
    writer.close()
    ParkedCaches.discardAll() // so the next provider's cache starts afresh, knowing nothing
    val p = prefixProvider(root)
    val store = p.getStore(1)
    val codec = p.codec(DefaultCf)
    val prefix = Some(codec.prefix(group(7)))
    def known(item: Long): Option[Option[Long]] =
      p.readCache.lookup(DefaultCf, codec.key(pair(7, item)), prefix)
        .map(_.map(v => codec.decodeValue(v).getLong(0)))
    expect(known(3).isEmpty, s"before any scan the cache answers key (7, 3): ${known(3)}")
    val it = store.prefixScan(group(7))
    val listed = try it.map(_.key.getLong(1)).toList finally it.close()
    expect(listed == (0L until 10L).toList, s"group 7 listed $listed")
    expect(known(3).contains(Some(3L)) && known(42).contains(None),
      s"after the scan: key (7, 3) = ${known(3)}, key (7, 42) = ${known(42)}")
    // A listing read while its keys are written lists them as they were when it started,
    // though the write keeps the value's length (which a record no reader holds takes in
    // place).
    val held = store.prefixScan(group(7))
    store.put(pair(7, 3), value(33)) // existed
    val heldPairs = try held.map(p => p.key.getLong(1) -> p.value.getLong(0)).toMap
      finally held.close()
    expect(heldPairs == (0L until 10L).map(i => i -> i).toMap,
      s"a listing started before the write of (7, 3) read $heldPairs")
    store.put(pair(7, 42), value(42)) // new
    store.remove(pair(7, 5)) // existed
    store.remove(pair(7, 77)) // never did
    store.commit()
    val next = p.getStore(2)
    val keys = next.metrics.numKeys
    expect(keys == 11, s"version 2 counts $keys keys, not 11 (10 + 1 - 1 in group 7, 1 in 8)")
    expect(valueOf(next.get(pair(7, 3))).contains(33L) && next.get(pair(7, 5)) == null &&
      valueOf(next.get(pair(7, 42))).contains(42L), "version 2: (7, 3) = " +
      s"${valueOf(next.get(pair(7, 3)))}, (7, 5) = ${valueOf(next.get(pair(7, 5)))}, " +
      s"(7, 42) = ${valueOf(next.get(pair(7, 42)))}")
    next.abort()
    p.close()
  }

  /**
   * A cache that knows every key (the store written from empty through it) answers a full
   * scan of the default family without asking the worker, with exactly the worker's rows,
   * as of its first pair though the caller writes while it iterates (Spark's session
   * windows remove what they scan). A range-scan family's full scan still comes from the
   * worker, in key order (transformWithState's timers stop at the first key not yet due).
   * A full scan never read costs nothing, cached or not (Spark's dedup opens one each batch).
   */
  def completeCacheAnswersFullScans(f: Fixture): Unit = {
    import f._
    val root = checkpoint("full-scan")
    val p = provider(root)
    val store = p.getStore(0)
    (0L until 100L).foreach(k => store.put(key(k), value(k)))
    (10L until 20L).foreach(k => store.remove(key(k)))
    store.put(key(5), value(500))
    store.createColFamilyIfAbsent("ordered", keySchema, valueSchema,
      org.apache.spark.sql.execution.streaming.state.RangeKeyScanStateEncoderSpec(keySchema,
        Seq(0)), useMultipleValuesPerKey = false, isInternal = false)
    val timestamps = new scala.util.Random(7).shuffle((-20L until 20L).toList)
    timestamps.foreach(k => store.put(key(k), value(k), "ordered"))
    val expected = ((0L until 10L) ++ (20L until 100L)).map(k => k -> (if (k == 5) 500L else k))
      .toMap
    def roundTrips(): Long = Fixture.customMetric(p, "pyrocks.round_trips")
    val before = roundTrips()
    val it = store.iterator()
    val seen = scala.collection.mutable.Map.empty[Long, Long]
    while (it.hasNext) {
      val pair = it.next()
      seen(pair.key.getLong(0)) = pair.value.getLong(0)
      store.remove(pair.key) // as session windows and joins evict while they scan
    }
    expect(roundTrips() - before == 1, s"the full scan asked the worker " +
      s"${roundTrips() - before - 1} times (the cache knows every key)")
    expect(seen.toMap == expected, s"the full scan missed ${(expected.keySet -- seen.keySet)
      .toSeq.sorted}, added ${(seen.keySet -- expected.keySet).toSeq.sorted}, changed " +
      s"${expected.filter { case (k, v) => seen.get(k).exists(_ != v) }.keys}")
    val after = store.iterator()
    expect(!after.hasNext, s"removed while scanning, yet listed: ${after.next().key.getLong(0)}")
    val ordered = store.iterator("ordered").map(_.key.getLong(0)).toList
    expect(ordered == timestamps.sorted, s"the range-scan family listed $ordered")
    store.commit()
    p.close()
    ParkedCaches.discardAll() // so the next provider's cache starts afresh, knowing nothing
    val fresh = provider(root)
    val unread = fresh.getStore(1)
    def freshTrips(): Long = Fixture.customMetric(fresh, "pyrocks.round_trips")
    val opened = freshTrips()
    unread.iterator().close()
    expect(freshTrips() - opened == 1, s"a full scan never read asked the worker " +
      s"${freshTrips() - opened - 1} times")
    val listed = unread.iterator().map(_.key.getLong(0)).toSet
    expect(listed.isEmpty, s"version 1 (every key removed while scanning) lists $listed")
    unread.abort()
    fresh.close()
  }

  /** The same for a prefix-scan default family (session windows), whose keys the cache keeps
   * in their prefixes' records: every group's keys, each once, as of the scan's first pair;
   * prefix scans and lookups of the same keys answered too, without the worker. */
  def completeCacheScansPrefixFamily(f: Fixture): Unit = {
    import f._
    val p = prefixProvider(checkpoint("prefix-full-scan"))
    val store = p.getStore(0)
    for (g <- 0L until 50L; i <- 0L until (g % 4)) store.put(pair(g, i), value(g * 10 + i))
    (0L until 50L by 5).foreach(g => store.remove(pair(g, 0)))
    store.put(pair(7, 1), value(700))
    val expected = (for (g <- 0L until 50L; i <- 0L until (g % 4)
      if !(g % 5 == 0 && i == 0)) yield (g, i) -> (if ((g, i) == (7L, 1L)) 700L else g * 10 + i))
      .toMap
    def roundTrips(): Long = Fixture.customMetric(p, "pyrocks.round_trips")
    val before = roundTrips()
    val grouped = store.prefixScan(group(7)).map(r => (r.key.getLong(1), r.value.getLong(0)))
      .toList
    expect(grouped == List(0L -> 70L, 1L -> 700L, 2L -> 72L), s"group 7 listed $grouped")
    expect(store.get(pair(7, 1)).getLong(0) == 700L && store.get(pair(7, 3)) == null,
      "lookups in group 7 disagree with its writes")
    val it = store.iterator()
    val seen = scala.collection.mutable.Map.empty[(Long, Long), Long]
    while (it.hasNext) {
      val row = it.next()
      val k = (row.key.getLong(0), row.key.getLong(1))
      expect(!seen.contains(k), s"the full scan listed $k twice")
      seen(k) = row.value.getLong(0)
      store.remove(row.key)
    }
    expect(roundTrips() - before == 1, s"prefix scan, lookups and full scan asked the worker " +
      s"${roundTrips() - before - 1} times (the cache knows every key)")
    expect(seen.toMap == expected, s"the full scan missed ${(expected.keySet -- seen.keySet)
      .toSeq.sorted}, added ${(seen.keySet -- expected.keySet).toSeq.sorted}")
    expect(!store.iterator().hasNext, "removed while scanning, yet listed")
    store.commit()
    p.close()
  }

  /** A new connection is a new working copy: nothing learned from the old one answers. */
  def reconnectInvalidatesCache(f: Fixture): Unit = {
    import f._
    val p = provider(checkpoint("reconnect"))
    val store = p.getStore(0)
    store.put(key(1), value(1))
    store.commit()
    expect(p.readCache.lookup(DefaultCf, keyBytes(1)).exists(_.isDefined), "key 1 not cached")
    val pid = workerPid(p)
    signal(pid, "KILL")
    eventually(s"worker $pid exits")(!isAlive(pid))
    val lost = expectThrows[WorkerFailedException](p.getStore(1))
    expect(messages(lost).contains("lost the connection"), messages(lost))
    p.metrics() // the first request after the loss opens a new connection
    expect(workerPid(p) != pid, "the dead worker was not replaced")
    expect(p.readCache.lookup(DefaultCf, keyBytes(1)).isEmpty,
      "the cache kept answers learned from the lost working copy")
    val again = p.getStore(1)
    expect(valueOf(again.get(key(1))).contains(1L), "version 1 lost key 1")
    again.abort()
    p.close()
  }

  /** The default family's key "cf\0k" and family "cf"'s key "k" are different keys, and so
   * are their scan prefixes: one must never answer for the other. */
  def familyAndKeyNeverCollide(f: Fixture): Unit = {
    import f._
    val p = provider(checkpoint("collide"))
    val store = p.getStore(0)
    store.createColFamilyIfAbsent("cf", keySchema, valueSchema,
      org.apache.spark.sql.execution.streaming.state.NoPrefixKeyStateEncoderSpec(keySchema),
      useMultipleValuesPerKey = false, isInternal = false)
    p.put(DefaultCf, bytes("cf\u0000k"), bytes("default"), multipleValues = false, None)
    val got = p.get("cf", bytes("k"), multipleValues = false, prefix = None)
    expect(got.isEmpty, s"family cf's key k answered with ${got.map(new String(_, UTF_8))}")

    p.put(DefaultCf, bytes("cf\u0000p1"), bytes("in default"), multipleValues = false,
      Some(bytes("cf\u0000p")))
    p.put("cf", bytes("p1"), bytes("in cf"), multipleValues = false, Some(bytes("p")))
    def listing(cf: String, prefix: String): List[(String, String)] =
      p.scan(cf, Wire.ScanPrefix, bytes(prefix), Array.emptyByteArray).pairs
        .map { case (k, v) => (new String(k, UTF_8), new String(v, UTF_8)) }.toList
    for (_ <- 1 to 2) { // the second round is answered from the listings the first learned
      val default = listing(DefaultCf, "cf\u0000p")
      val cf = listing("cf", "p")
      expect(default == List(("cf\u0000p1", "in default")), s"default family listed $default")
      expect(cf == List(("p1", "in cf")), s"family cf listed $cf")
    }
    store.abort()
    p.close()
  }

  /**
   * Another store's entries take this cache's memory back while this store is half-way
   * through a prefix scan, and a key the scan has already returned is removed before it
   * ends: the listing the scan would teach is stale, and must not be learned.
   */
  def reclaimDuringScan(f: Fixture): Unit = {
    import f._
    val options = Seq("readCacheMB" -> "1", "iteratorChunkBytes" -> "128")
    val scanning = prefixProvider(checkpoint("scanning"), options: _*)
    val filling = provider(checkpoint("filling"), options: _*)
    val first = scanning.getStore(0)
    (0L until 100L).foreach(i => first.put(pair(7, i), value(i)))
    first.commit()
    val store = scanning.getStore(1)
    def listed(): Map[Long, Long] = {
      val it = store.prefixScan(group(7))
      try it.map(p => p.key.getLong(1) -> p.value.getLong(0)).toMap finally it.close()
    }
    val scan = store.prefixScan(group(7))
    val seen = (1 to 30).map(_ => scan.next().key.copy())

    val other = filling.getStore(0) // fills the shared 1 MiB budget, reclaiming it all
    (0L until 20000L).foreach(i => other.put(key(i), value(i)))
    val codec = scanning.codec(DefaultCf)
    val probe = codec.key(pair(7, 50))
    expect(scanning.readCache.lookup(DefaultCf, probe, Some(codec.prefix(group(7)))).isEmpty,
      "the scanning store's cache was not reclaimed: the check did not happen")
    val removed = seen.head.getLong(1)
    store.remove(seen.head)
    val rest = scan.toList // runs to the end: the scan hands over what it saw
    expect(rest.size == 70, s"the scan returned ${30 + rest.size} rows, not 100")
    val expected = (0L until 100L).filter(_ != removed).map(i => i -> i).toMap
    for (round <- 1 to 2) {
      val now = listed()
      expect(now == expected, s"prefix scan $round after the reclaim: missing " +
        s"${(expected.keySet -- now.keySet).toSeq.sorted}, extra ${(now.keySet -- expected.keySet)}")
    }
    store.put(pair(7, 1000), value(1000)) // a listing, if learned, must follow writes
    expect(listed() == expected + (1000L -> 1000L), s"after a put: ${listed().keySet}")
    store.abort()
    other.abort()
    scanning.close()
    filling.close()
  }

  private def absentAnswers(cache: ReadCache, keys: Seq[Long], f: Fixture): Seq[Long] =
    keys.filter(k => cache.lookup(DefaultCf, f.rawKey(k)).contains(None))

  /** A state larger than the budget: the cache never answers wrong, stays within its
   * budget, and still knows the keys written last (it evicts the oldest, not everything). */
  def overBudgetKeepsTheNewest(f: Fixture): Unit = {
    import f._
    val limit = 2L << 20
    val budget = new CacheBudget(limit)
    val cache = new ReadCache(budget)
    cache.loaded(0, unchanged = false)
    val keys = 200000L
    var k = 0L
    while (k < keys) {
      cache.write(DefaultCf, rawKey(k), rawKey(k * 7))
      if (k % 5000 == 0) expect(budget.usedBytes <= limit && budget.usedBytes == cache.memoryBytes,
        s"after $k keys the budget counts ${budget.usedBytes} of $limit, the cache ${cache.memoryBytes}")
      k += 1
    }
    val answers = (0L until keys).map(k => k -> cache.lookup(DefaultCf, rawKey(k)))
    val wrong = answers.collect { case (k, Some(v)) if !v.exists(_.sameElements(rawKey(k * 7))) => k }
    expect(wrong.isEmpty, s"${wrong.size} keys answered wrong, e.g. ${wrong.take(5)}")
    val newest = (keys - 1000 until keys).count(k => cache.lookup(DefaultCf, rawKey(k)).isDefined)
    expect(newest == 1000, s"of the last 1000 keys written, the cache knows $newest")
    // ~40 bytes an entry in 2 MiB less the filter: a cache that evicts keeps thousands.
    val known = answers.count(_._2.isDefined)
    expect(known > 5000, s"the cache knows $known keys: it started over instead of evicting")
  }

  /** `pushedOutSinceLoad` (the metric `pyrocks.read_cache_evictions`) counts the entries a
   * cache's writes pushed out since its load: those of an idle cache it emptied, then its
   * own oldest; nothing while everything fits, and nothing of an earlier batch. */
  def evictionsCountWhatWasPushedOut(f: Fixture): Unit = {
    import f._
    val budget = new CacheBudget(2L << 20)
    val (idle, busy) = (new ReadCache(budget), new ReadCache(budget))
    Seq(idle, busy).foreach(_.loaded(0, unchanged = false))
    (0L until 10000L).foreach(k => idle.write(DefaultCf, rawKey(k), rawKey(k)))
    expect(idle.pushedOutSinceLoad == 0 && busy.pushedOutSinceLoad == 0,
      s"evictions counted while all fits: ${idle.pushedOutSinceLoad}, ${busy.pushedOutSinceLoad}")
    var k = 0L
    while (idle.lookup(DefaultCf, rawKey(0)).isDefined) {
      busy.write(DefaultCf, rawKey(k), rawKey(k))
      k += 1
    }
    expect(busy.pushedOutSinceLoad == 10000, s"emptying the idle cache's 10000 entries " +
      s"counted ${busy.pushedOutSinceLoad}")
    while (busy.lookup(DefaultCf, rawKey(0)).isDefined) {
      busy.write(DefaultCf, rawKey(k), rawKey(k))
      k += 1
    }
    expect(busy.pushedOutSinceLoad > 10000, "evicting its own oldest entries counted nothing")
    busy.committed(1, None)
    busy.loaded(1, unchanged = true)
    expect(busy.pushedOutSinceLoad == 0, s"a new load starts at ${busy.pushedOutSinceLoad}")
  }

  /** The first entries of running stores pushed out for want of room (an idle cache
   * emptied, or a cache's own oldest) are said once per budget, naming the setting that
   * gives more; nothing is said while everything fits, nor again. */
  def outgrownBudgetSaidOnce(f: Fixture): Unit = {
    import f._
    val said = new java.util.concurrent.ConcurrentLinkedQueue[String]()
    val budget = new CacheBudget(2L << 20, message => said.add(message))
    val (idle, busy) = (new ReadCache(budget), new ReadCache(budget))
    Seq(idle, busy).foreach(_.loaded(0, unchanged = false))
    (0L until 10000L).foreach(k => idle.write(DefaultCf, rawKey(k), rawKey(k)))
    expect(said.isEmpty, s"said while everything fits: $said")
    var k = 0L
    while (idle.lookup(DefaultCf, rawKey(0)).isDefined) {
      busy.write(DefaultCf, rawKey(k), rawKey(k))
      k += 1
    }
    expect(said.size == 1 &&
      said.peek.contains(s"${LaunchOptions.Prefix}readCacheMB = 2 MiB"),
      s"emptying an idle cache said ${said.size} time(s): $said")
    while (busy.lookup(DefaultCf, rawKey(0)).isDefined) {
      busy.write(DefaultCf, rawKey(k), rawKey(k))
      k += 1
    }
    expect(said.size == 1, s"said again when a cache evicted its own: $said")
    val alone = new java.util.concurrent.ConcurrentLinkedQueue[String]()
    val one = new ReadCache(new CacheBudget(1L << 20, message => alone.add(message)))
    one.loaded(5, unchanged = false) // a version written elsewhere: no key filter to grow
    (0L until 100000L).foreach(k => one.write(DefaultCf, rawKey(k), rawKey(k)))
    expect(alone.size == 1 && one.lookup(DefaultCf, rawKey(0)).isEmpty,
      s"a lone cache evicting its oldest said ${alone.size} time(s)")
  }

  /** `reclaim` orders the idle caches by when each was last used while their tasks go on
   * using them (Spark's default of 200 partitions: 200 caches). It must order them by one
   * reading of each time: sorting by times that move under the sort may find its
   * comparisons inconsistent and throw, failing the task that needed room. */
  def reclaimWhileCachesAreUsed(f: Fixture): Unit = {
    import f._
    val budget = new CacheBudget(8L << 20)
    val caches = Vector.fill(200)(new ReadCache(budget))
    caches.foreach(_.loaded(0, unchanged = false))
    val done = new java.util.concurrent.atomic.AtomicBoolean(false)
    val toucher = new Thread(() => {
      val rnd = new scala.util.Random(20261128)
      while (!done.get) caches(rnd.nextInt(caches.size)).lookup(DefaultCf, rawKey(0))
    })
    toucher.start()
    val failed = try {
      (1 to 20000).iterator.map { _ =>
        try { budget.reclaim(budget.limitBytes, caches(0)); None }
        catch { case e: IllegalArgumentException => Some(e) }
      }.collectFirst { case Some(e) => e }
    } finally {
      done.set(true)
      toucher.join()
    }
    expect(failed.isEmpty, s"reclaim failed while caches were in use: ${failed.orNull}")
  }

  /** The filter's memory counts against the budget, and grows within it. */
  def keyFilterChargedToBudget(f: Fixture): Unit = {
    import f._
    val limit = 4L << 20
    val budget = new CacheBudget(limit)
    val cache = new ReadCache(budget)
    cache.loaded(0, unchanged = false)
    expect(cache.memoryBytes >= new KeyFilter().bytes &&
      budget.usedBytes == cache.memoryBytes,
      s"the empty store's filter is not charged: the cache holds ${cache.memoryBytes} bytes, " +
        s"the budget counts ${budget.usedBytes}")
    val keys = 300000L
    var k = 0L
    while (k < keys) {
      cache.remember(DefaultCf, rawKey(k), rawKey(k))
      if (k % 1000 == 0) {
        expect(budget.usedBytes == cache.memoryBytes && cache.memoryBytes <= limit,
          s"after $k keys the cache holds ${cache.memoryBytes} bytes, the budget counts " +
            s"${budget.usedBytes} of $limit")
      }
      k += 1
    }
    expect(cache.memoryBytes >= KeyFilter.bytesFor(keys), s"the filter did not grow to " +
      s"$keys keys within the budget: the cache holds ${cache.memoryBytes} bytes")
    val wrong = absentAnswers(cache, 0L until keys, f)
    expect(wrong.isEmpty, s"${wrong.size} written keys answered absent, e.g. ${wrong.take(5)}")
    val fresh = keys until keys + 10000
    val proven = absentAnswers(cache, fresh, f).size
    expect(proven > 9000, s"the filter proved only $proven of 10000 new keys absent")
  }

  /** A growth the budget cannot hold drops the filter: lookups then ask the worker. */
  def keyFilterDroppedUnderPressure(f: Fixture): Unit = {
    import f._
    val limit = 200L << 10 // filters of 16K and 64K keys (100 KiB) fit, the next (320 KiB) not
    val budget = new CacheBudget(limit)
    val cache = new ReadCache(budget)
    cache.loaded(0, unchanged = false)
    val keys = 100000L
    var k = 0L
    while (k < keys) {
      cache.remember(DefaultCf, rawKey(k), rawKey(k))
      expect(cache.memoryBytes <= limit && budget.usedBytes == cache.memoryBytes,
        s"after $k keys the cache holds ${cache.memoryBytes} bytes, the budget counts " +
          s"${budget.usedBytes} of $limit")
      k += 1
    }
    val wrong = absentAnswers(cache, 0L until keys, f)
    expect(wrong.isEmpty, s"${wrong.size} written keys answered absent, e.g. ${wrong.take(5)}")
    val proven = absentAnswers(cache, keys until keys + 1000, f)
    expect(proven.isEmpty, s"without a filter, ${proven.size} unknown keys answered absent")
  }

  /** A write whose key the filter must grow for, the budget full: the entries make room
   * (`growFilter` clears them), and the write still lands whole, never through where it
   * found the key before the clear (it used to: an ArrayIndexOutOfBoundsException, or a
   * record of the cleared pages marked dead, in a task's put). In both kinds of family. The
   * clear is said (once) as the budget outgrown. */
  def writeClearingForTheFilter(f: Fixture): Unit = {
    import f._
    val prefix = Some(rawKey(7))
    for (scanPrefix <- Seq(None, prefix)) {
      // 16 hashes fill a 16-key filter: each key's, and in a prefix family its prefix's.
      // Key 3 is written absent first (its entry is found, no hash is added), so the write
      // of its value must grow the filter, by 80 bytes. (An update of a present key adds
      // nothing: the filter has it.)
      val keys = if (scanPrefix.isEmpty) 0L until 17L else 0L until 16L
      def keyOf(k: Long): Array[Byte] = scanPrefix.getOrElse(Array.emptyByteArray) ++ rawKey(k)
      val said = new java.util.concurrent.ConcurrentLinkedQueue[String]()
      def filled(limit: Long): (ReadCache, CacheBudget) = {
        val budget = new CacheBudget(limit, message => said.add(message))
        val cache = new ReadCache(budget, () => new KeyFilter(16))
        cache.loaded(0, unchanged = false)
        keys.foreach(k => cache.write(DefaultCf, keyOf(k),
          if (k == 3) null else new Array[Byte](900), scanPrefix))
        (cache, budget)
      }
      val full = filled(64L << 20)._2.usedBytes
      val (cache, budget) = filled(full + 40) // room for less than the growth
      expect(said.isEmpty, s"prefix $scanPrefix: an outgrown budget was said before the clear")
      val value = rawKey(99)
      cache.write(DefaultCf, keyOf(3), value, scanPrefix)
      def written(k: Long): Array[Byte] = if (k == 3) value else new Array[Byte](900)
      val answers = keys.map(k => k -> cache.lookup(DefaultCf, keyOf(k), scanPrefix))
      val wrong = answers.collect {
        case (k, Some(v)) if !v.exists(_.sameElements(written(k))) => k
      }
      expect(wrong.isEmpty, s"prefix $scanPrefix: keys $wrong answered wrong after the clear")
      expect(answers.count(_._2.isDefined) < keys.size,
        s"prefix $scanPrefix: every key is still known: the write cleared nothing")
      expect(budget.usedBytes == cache.memoryBytes && budget.usedBytes <= full + 40,
        s"prefix $scanPrefix: the budget counts ${budget.usedBytes}, the cache holds " +
          s"${cache.memoryBytes} (limit ${full + 40})")
      expect(said.size == 1, s"prefix $scanPrefix: entries cleared for the filter said " +
        s"${said.size} time(s) that the budget was outgrown")
    }
  }

  /** The filter grows with the keys of the store, not with its writes: 10,000 keys
   * updated 200 times each stay in the filter they started in (they used to count 2M adds,
   * and the cache grew its filter to 4M keys), and are all still "maybe"; as many new keys
   * do fill it. */
  def keyWrittenAgainDoesNotGrowTheFilter(f: Fixture): Unit = {
    import f._
    val filter = new KeyFilter(1 << 14)
    for (_ <- 1 to 200; k <- 0L until 10000L) filter.add(CacheKey.hash(rawKey(k), 0))
    expect(filter.hasRoom, "10,000 keys added 200 times filled a filter of 16,384")
    expect((0L until 10000L).forall(k => filter.mightContain(CacheKey.hash(rawKey(k), 0))),
      "a key added was proven absent")
    (10000L until 20000L).foreach(k => filter.add(CacheKey.hash(rawKey(k), 0)))
    expect(!filter.hasRoom, "20,000 distinct keys left room in a filter of 16,384")
    val budget = new CacheBudget(64L << 20)
    val cache = new ReadCache(budget)
    cache.loaded(0, unchanged = false)
    val filterBytes = new KeyFilter().bytes // the filter a store starts with
    for (round <- 1 to 200; k <- 0L until 10000L) cache.write(DefaultCf, rawKey(k), rawKey(round))
    expect(cache.memoryBytes < filterBytes + (4L << 20), s"10,000 keys written 200 times: " +
      s"the cache holds ${cache.memoryBytes} bytes (a filter of ${filterBytes} and entries)")
  }

  /** Bit indexes are Ints: a filter never grows past them (it used to overflow the size into
   * a NegativeArraySizeException inside a put near 268M keys); the cache drops it instead. */
  def keyFilterGrowthNeverOverflows(f: Fixture): Unit = {
    import f._
    val largest = new KeyFilter(1 << 27) // 2^29 keys would take 5.4G bits
    expect(largest.growthBytes.isEmpty, s"a filter of 2^27 keys offers to grow by " +
      s"${largest.growthBytes} bytes")
    expect(largest.hasRoom, "a new filter has no room")

    // Entries overflow this budget (so the cache is not complete) but every filter would fit:
    // only the filter's own limit (1024 keys, then 4096, then no more) stops it.
    val budget = new CacheBudget(64L << 10)
    val cache = new ReadCache(budget, () => new KeyFilter(1024, maxBits = 4096 * 10))
    cache.loaded(0, unchanged = false)
    val keys = 8000L
    (0L until keys).foreach(k => cache.remember(DefaultCf, rawKey(k), rawKey(k)))
    val wrong = absentAnswers(cache, 0L until keys, f)
    expect(wrong.isEmpty, s"${wrong.size} written keys answered absent, e.g. ${wrong.take(5)}")
    expect(budget.usedBytes == cache.memoryBytes, s"the budget counts ${budget.usedBytes}, " +
      s"the cache holds ${cache.memoryBytes}")
    val proven = absentAnswers(cache, keys until keys + 1000, f)
    expect(proven.isEmpty, s"a filter past its limit still answered ${proven.size} keys absent")
  }

  /** A store read key after key in the worker's order by a cache that knows nothing (a new
   * working copy: Spark's join evicting past its cache) asks the worker once per window, not
   * once per key; its answers stay exact while the walk replaces, removes and adds keys in
   * the window's range, for absent keys between present ones, and for the same keys asked
   * again in no order. */
  def walkInKeyOrderReadsAhead(f: Fixture): Unit = {
    import f._
    val root = checkpoint("read-ahead")
    val stored = 3000L
    val writer = provider(root)
    val first = writer.getStore(0)
    (0L until stored).foreach(k => first.put(key(2 * k), value(k))) // odd keys: absent
    first.commit()
    writer.close()
    val expected = scala.collection.mutable.Map.empty[Long, Long]
    (0L until stored).foreach(k => expected(2 * k) = k)
    val inWorkerOrder = (0L until 2 * stored).sortWith((a, b) =>
      ReadAhead.compare(keyBytes(a), keyBytes(b)) < 0)
    val p = provider(root)
    val store = p.getStore(1)
    def roundTrips(): Long = Fixture.customMetric(p, "pyrocks.round_trips")
    def check(k: Long): Unit = {
      val got = valueOf(store.get(key(k)))
      expect(got == expected.get(k), s"key $k read ${got.getOrElse("absent")}, but holds " +
        s"${expected.get(k).getOrElse("absent")}")
    }
    val before = roundTrips()
    inWorkerOrder.zipWithIndex.foreach { case (k, i) =>
      check(k)
      if (i % 7 == 0) { store.remove(key(k)); expected -= k }
      else if (i % 5 == 0) { store.put(key(k), value(-k)); expected(k) = -k }
      if (i % 997 == 0) { // a key the worker never had, somewhere in the order
        val added = 2 * stored + 2 * i + 1
        store.put(key(added), value(added))
        expected(added) = added
      }
      check(k)
    }
    val walked = roundTrips() - before
    expect(walked < inWorkerOrder.size / 20, s"the walk over ${inWorkerOrder.size} keys in " +
      s"the worker's order asked the worker $walked times: it did not read ahead")
    val again = new scala.util.Random(3).shuffle(inWorkerOrder ++ expected.keys.filter(_ > 2 *
      stored))
    again.foreach(check)
    store.commit()
    p.close()
    val fresh = provider(root)
    val reread = fresh.getStore(2)
    val held = reread.iterator().map(r => r.key.getLong(0) -> r.value.getLong(0)).toMap
    expect(held == expected.toMap, s"version 2 holds ${held.size} keys, the walk left " +
      s"${expected.size}: its writes did not all reach the worker")
    reread.abort()
    fresh.close()
  }

  /** A window fed by hand: it answers for its range only, its room counts against the
   * budget, a write in its range keeps it exact (a replaced, removed or new key) or drops it
   * (a merge, a write past its room: memory back), and one that does not fit is answered but
   * not kept. */
  def readAheadWindowChargedAndExact(f: Fixture): Unit = {
    import f._
    def chunk(more: Boolean, keys: Seq[Long]): Array[Byte] = {
      val out = new java.io.ByteArrayOutputStream()
      val data = new java.io.DataOutputStream(out)
      data.writeByte(if (more) 1 else 0)
      keys.foreach { k => data.writeInt(8); data.writeInt(8); data.write(rawKey(k))
        data.write(rawKey(k * 10)) }
      out.toByteArray
    }
    def answer(cache: ReadCache, k: Long): Option[Option[Long]] =
      cache.lookup(DefaultCf, rawKey(k)).map(_.map(v => java.nio.ByteBuffer.wrap(v).getLong))
    val budget = new CacheBudget(1L << 20)
    val cache = new ReadCache(budget)
    cache.loaded(1, unchanged = false) // nothing known
    val even = (100L until 300L by 2)
    val own = cache.learnAhead(DefaultCf, rawKey(100), chunk(more = true, even), 4096)
    expect(own.map(java.nio.ByteBuffer.wrap(_).getLong).contains(1000L),
      s"the read-ahead's own key answered ${own.map(_.toSeq)}")
    expect(answer(cache, 150).contains(Some(1500L)) && answer(cache, 151).contains(None) &&
      answer(cache, 298).contains(Some(2980L)), s"in the window: 150 -> ${answer(cache, 150)}, " +
      s"151 -> ${answer(cache, 151)}, 298 -> ${answer(cache, 298)}")
    expect(answer(cache, 99).isEmpty && answer(cache, 299).isEmpty, "keys outside the window " +
      s"answered: 99 -> ${answer(cache, 99)}, 299 -> ${answer(cache, 299)}")
    expect(cache.memoryBytes > 0 && budget.usedBytes == cache.memoryBytes, s"the window holds " +
      s"${cache.memoryBytes} bytes, the budget counts ${budget.usedBytes}")
    (101L until 300L by 2).foreach(k => cache.write(DefaultCf, rawKey(k), rawKey(k)))
    expect(answer(cache, 156).isEmpty && budget.usedBytes == cache.memoryBytes,
      s"a window the cache's writes took past its room still answers 156 -> " +
        s"${answer(cache, 156)}, or its memory is still counted (${budget.usedBytes} bytes " +
        s"against the cache's ${cache.memoryBytes})")
    cache.learnAhead(DefaultCf, rawKey(100), chunk(more = false, even), 4096)
    expect(answer(cache, 1000000).contains(None), "a window that reached the family's end " +
      s"does not answer past its last key: ${answer(cache, 1000000)}")
    cache.forget(DefaultCf, rawKey(2000))
    expect(answer(cache, 160).isEmpty, "a merge in the window's range left it answering")
    // The window alone: through the cache, its entries would answer the written keys first.
    var charged = 0L
    val ahead = new ReadAhead(new PackedEntries.Memory {
      def reserve(n: Long): Boolean = { charged += n; true }
      def release(n: Long): Unit = charged -= n
    })
    def seen(k: Long): Option[Option[Long]] =
      ahead.lookup(0, rawKey(k)).map(_.map(v => java.nio.ByteBuffer.wrap(v).getLong))
    ahead.learn(0, rawKey(100), chunk(more = true, even), 4096)
    ahead.write(0, rawKey(150), rawKey(7), known = true)
    ahead.write(0, rawKey(152), null, known = true)
    ahead.write(0, rawKey(153), null, known = true) // absent, and stays so
    ahead.write(0, rawKey(155), rawKey(1), known = true) // new in the range
    ahead.write(0, rawKey(157), rawKey(2), known = true)
    ahead.write(0, rawKey(157), null, known = true)
    val after = Seq(150L, 152L, 153L, 154L, 155L, 157L).map(k => k -> seen(k))
    expect(after == Seq(150L -> Some(Some(7L)), 152L -> Some(None), 153L -> Some(None),
      154L -> Some(Some(1540L)), 155L -> Some(Some(1L)), 157L -> Some(None)),
      s"the window after writes in its range answers $after")
    expect(charged > 0 && charged == ahead.bytes, s"the window charged $charged bytes, holds " +
      s"${ahead.bytes}")
    (101L until 300L by 2).foreach(k => ahead.write(0, rawKey(k), rawKey(k), known = true))
    expect(seen(156).isEmpty && charged == 0, s"a window written past its room answers 156 " +
      s"-> ${seen(156)}, $charged bytes still charged")
    ahead.learn(0, rawKey(100), chunk(more = true, even), 4096)
    ahead.write(0, rawKey(160), rawKey(1), known = false)
    expect(seen(162).isEmpty && charged == 0, "a merge in the window's range left it answering")
    val tiny = new ReadCache(new CacheBudget(1024))
    tiny.loaded(1, unchanged = false)
    val kept = tiny.learnAhead(DefaultCf, rawKey(100), chunk(more = true, even), 4096)
    expect(kept.isDefined && answer(tiny, 102).isEmpty && tiny.memoryBytes == 0,
      s"a window larger than the budget: answered ${kept.map(_.toSeq)}, kept " +
        s"${tiny.memoryBytes} bytes")
  }

  /** A closed provider leaves its cache for the next provider of its store (a query
   * restarted in the same JVM): the gets of the commit it equals are answered without the
   * worker, and exactly, absent keys included. */
  def parkedCacheServesTheNextProvider(f: Fixture): Unit = {
    import f._
    val root = checkpoint("parked")
    val first = provider(root)
    val store = first.getStore(0)
    (0L until 100L).foreach(k => store.put(key(k), value(k)))
    store.remove(key(7))
    store.commit()
    first.close()
    val next = provider(root)
    val again = next.getStore(1)
    def roundTrips(): Long = Fixture.customMetric(next, "pyrocks.round_trips")
    val before = roundTrips()
    val seen = (0L until 120L).map(k => k -> valueOf(again.get(key(k))))
    val asked = roundTrips() - before - 1 // the metrics request is one
    expect(asked == 0, s"120 gets of the restarted store asked the worker $asked times: the " +
      "closed provider's cache was not taken over")
    val expected = (0L until 120L).map(k => k -> Option(k).filter(k => k < 100 && k != 7))
    expect(seen == expected, s"version 1 read through the taken-over cache: " +
      s"${seen.filter(s => !expected.contains(s))} (wrote keys 0-99 = k, then removed 7)")
    again.put(key(200), value(200))
    again.commit()
    next.close()
  }

  /** A parked cache answers only a load of the very commit it equals: a restart at an older
   * version (a rewind), and the same version of another commit (the checkpoint directory
   * replaced at the same path), read what the checkpoint holds. */
  def parkedCacheAnswersOnlyItsCommit(f: Fixture): Unit = {
    import f._
    def commitVersions(root: Path, values: Long*): Unit = {
      val p = provider(root)
      values.zipWithIndex.foreach { case (v, version) =>
        val s = p.getStore(version)
        s.put(key(1), value(v))
        s.commit()
      }
      p.close() // parks its cache, equal to the last version
    }
    def expectVersionOne(root: Path, expected: Long, what: String): Unit = {
      val p = provider(root)
      val s = p.getStore(1)
      expect(valueOf(s.get(key(1))).contains(expected), s"version 1 $what: key 1 = " +
        s"${valueOf(s.get(key(1)))}, not $expected")
      s.abort()
      p.close()
    }
    val rewound = checkpoint("parked-rewound")
    commitVersions(rewound, 10, 20)
    expectVersionOne(rewound, 10, "after a rewind (version 2, parked, has 20)")

    val replaced = checkpoint("parked-replaced")
    val other = checkpoint("parked-other")
    commitVersions(replaced, 1)
    commitVersions(other, 2)
    replaceTree(replaced, other)
    expectVersionOne(replaced, 2, "of a checkpoint replaced at the same path (the parked " +
      "cache had 1)")
  }

  private def replaceTree(target: Path, source: Path): Unit = {
    import java.nio.file.{Files, StandardCopyOption}
    import scala.jdk.CollectionConverters._
    Files.walk(target).iterator().asScala.toSeq.reverse.filter(_ != target).foreach(Files.delete)
    Files.walk(source).iterator().asScala.toSeq.filter(_ != source).foreach { from =>
      val to = target.resolve(source.relativize(from))
      if (Files.isDirectory(from)) Files.createDirectories(to)
      else Files.copy(from, to, StandardCopyOption.COPY_ATTRIBUTES)
    }
  }

  /** Parking, on the cache alone: one holding a write not yet committed is closed, not
   * parked; one parked under another budget is not taken over; and one the budget needs
   * room from goes whole, key filter included, and is never taken over after. */
  def parkedCachesEqualACommitAndGoWhole(f: Fixture): Unit = {
    import f._
    val budget = new CacheBudget(1L << 20)
    def committed(id: String): ReadCache = {
      val cache = new ReadCache(budget)
      cache.loaded(0, unchanged = false)
      (0L until 100L).foreach(k => cache.write(DefaultCf, rawKey(k), rawKey(k)))
      cache.committed(1, Some(id))
      cache
    }
    val dirty = committed("a")
    dirty.write(DefaultCf, rawKey(500), rawKey(500))
    ParkedCaches.park("dirty", dirty)
    expect(ParkedCaches.adopt("dirty", budget).isEmpty && dirty.memoryBytes == 0,
      s"a cache holding an uncommitted write was parked (it holds ${dirty.memoryBytes} bytes)")
    val elsewhere = committed("b")
    ParkedCaches.park("elsewhere", elsewhere)
    expect(ParkedCaches.adopt("elsewhere", new CacheBudget(1L << 20)).isEmpty,
      "a cache parked under one budget was taken over under another")
    expect(elsewhere.memoryBytes == 0, s"the cache no provider can take over still holds " +
      s"${elsewhere.memoryBytes} bytes")
    val idle = committed("c")
    ParkedCaches.park("idle", idle)
    expect(idle.memoryBytes > 0 && budget.usedBytes == idle.memoryBytes,
      s"the parked cache holds ${idle.memoryBytes} bytes, the budget counts ${budget.usedBytes}")
    val busy = new ReadCache(budget)
    busy.loaded(0, unchanged = false)
    (0L until 40000L).foreach(k => busy.write(DefaultCf, rawKey(k), rawKey(k))) // > 1 MiB
    expect(idle.memoryBytes == 0, s"the budget needed room, yet the parked cache still holds " +
      s"${idle.memoryBytes} bytes")
    expect(ParkedCaches.adopt("idle", budget).isEmpty, "a cache the budget took back was " +
      "taken over")
  }

  /** A model of one store's life across many providers in one JVM, against the map of
   * each committed version: providers opened and closed at random (closed between batches,
   * or under a task that wrote and never committed, as an unloaded provider of a cancelled
   * task is), batches that load the latest version or rewind to an older one, commits that
   * publish or lose to a version already published, aborts. Every get of every batch must
   * answer what the model holds, whichever cache (its own, a parked one, none) answers it. */
  def cachesExactAcrossProviders(f: Fixture): Unit = {
    import f._
    for (seed <- Seq(1L, 2L, 3L)) {
      val random = new scala.util.Random(seed)
      val root = checkpoint(s"providers-model-$seed")
      val versions = scala.collection.mutable.ArrayBuffer(Map.empty[Long, Long])
      var open = Vector.empty[PyRocksStateStoreProvider]
      for (step <- 0 until 80) {
        if (open.isEmpty || random.nextInt(4) == 0) open :+= provider(root)
        val p = open(random.nextInt(open.size))
        val version = if (random.nextInt(4) == 0) random.nextInt(versions.size)
          else versions.size - 1
        val store = p.getStore(version)
        var state = versions(version)
        def check(k: Long): Unit = expect(valueOf(store.get(key(k))) == state.get(k),
          s"seed $seed, step $step, version $version: key $k = ${valueOf(store.get(key(k)))}" +
            s", not ${state.get(k)}")
        (0 until 10).foreach(_ => check(random.nextInt(40).toLong))
        (0 until random.nextInt(12)).foreach { _ =>
          val k = random.nextInt(40).toLong
          if (random.nextInt(3) == 0) {
            store.remove(key(k))
            state -= k
          } else {
            val v = random.nextInt(1000).toLong
            store.put(key(k), value(v))
            state += k -> v
          }
          if (random.nextBoolean()) check(random.nextInt(40).toLong)
        }
        random.nextInt(8) match {
          case 0 => store.abort()
          case 1 => // the provider is unloaded under its task: nothing is committed
            p.close()
            open = open.filterNot(_ eq p)
          case _ =>
            store.commit() // publishes only a version not published yet
            if (version + 1 == versions.size) versions += state
        }
        if (open.contains(p) && random.nextInt(4) == 0) {
          p.close()
          open = open.filterNot(_ eq p)
        }
      }
      open.foreach(_.close())
    }
  }

  /** A cache written a group at a time (`writeAll`, as a provider writes the puts it held)
   * knows what one written a key at a time knows, and says the same of each key before its
   * write: over a budget of a few pages (evictions, the key filter growing or going), keys
   * repeated within a group, absent values, two families. */
  def groupsWriteAsKeysOneByOne(f: Fixture): Unit = {
    import f._
    for (seed <- Seq(1L, 2L, 3L)) {
      val random = new scala.util.Random(seed)
      def emptyCache(): ReadCache = {
        val cache = new ReadCache(new CacheBudget(192L << 10))
        cache.loaded(0, unchanged = false, empty = true)
        cache
      }
      val (single, grouped) = (emptyCache(), emptyCache())
      val (keys, values) = (new Array[Array[Byte]](24), new Array[Array[Byte]](24))
      val priors = new Array[Int](24)
      def seen(answer: Option[Option[Array[Byte]]]) = answer.map(_.map(_.toSeq))
      for (round <- 0 until 400) {
        val cf = if (random.nextInt(4) == 0) "other" else DefaultCf
        val n = 1 + random.nextInt(24)
        for (i <- 0 until n) {
          keys(i) = rawKey(random.nextInt(4000).toLong)
          values(i) = if (random.nextInt(8) == 0) null
            else Array.fill(random.nextInt(48))(random.nextInt().toByte)
        }
        grouped.writeAll(cf, keys, values, n, priors)
        for (i <- 0 until n) {
          val prior = single.write(cf, keys(i), values(i))
          expect(prior == priors(i), s"seed $seed, round $round, key ${i + 1} of $n: written " +
            s"in a group it was known as ${priors(i)}, one by one as $prior")
        }
        for (_ <- 0 until 16) {
          val k = rawKey(random.nextInt(4000).toLong)
          val (a, b) = (seen(single.lookup(cf, k)), seen(grouped.lookup(cf, k)))
          expect(a == b, s"seed $seed, round $round: the cache written in groups answers " +
            s"$b, the one written key by key $a")
        }
      }
      expect(grouped.pushedOutSinceLoad > 0, s"seed $seed: nothing was evicted; the budget " +
        "is too large for this check")
    }
  }

  /** A provider holds puts back a group at a time (`PendingPuts`): every later get, full
   * scan, removal, metric and commit sees them, in the order they were put, whether the
   * cache answers or every get asks the worker (readCacheMB=0); the worker counts their keys
   * exactly, and another working copy loads what was committed. */
  def heldPutsAreSeenByWhateverFollows(f: Fixture): Unit = {
    import f._
    for ((options, seed) <- Seq((Seq.empty[(String, String)], 1L), (Seq("readCacheMB" -> "0"), 2L))) {
      val random = new scala.util.Random(seed)
      val root = checkpoint(s"held-puts-$seed")
      val p = provider(root, options: _*)
      var (version, committed) = (0L, Map.empty[Long, Long])
      for (batch <- 0 until 14) {
        val store = p.getStore(version)
        expect(store.metrics.numKeys == committed.size, s"seed $seed, version $version: the " +
          s"worker counts ${store.metrics.numKeys} keys, not ${committed.size}")
        var state = committed
        var lastPut = 0L
        def check(k: Long, what: String): Unit = expect(valueOf(store.get(key(k))) == state.get(k),
          s"seed $seed, batch $batch, $what: key $k = ${valueOf(store.get(key(k)))}, not " +
            s"${state.get(k)}")
        for (op <- 0 until random.nextInt(70)) random.nextInt(20) match {
          case 0 | 1 => check(lastPut, s"op $op, a get of the key just put")
          case 2 => check(random.nextInt(100).toLong, s"op $op, a get")
          case 3 | 4 =>
            val k = if (random.nextBoolean()) lastPut else random.nextInt(100).toLong
            store.remove(key(k))
            state -= k
          case 5 =>
            val pairs = store.iterator()
            val scanned = try pairs.map(pair => pair.key.getLong(0) -> pair.value.getLong(0))
              .toMap finally pairs.close()
            expect(scanned == state, s"seed $seed, batch $batch, op $op: a full scan lists " +
              s"${scanned.toSeq.sorted}, not ${state.toSeq.sorted}")
          case 6 => expect(store.metrics.numKeys == state.size, s"seed $seed, batch $batch, " +
            s"op $op: the worker counts ${store.metrics.numKeys} keys, not ${state.size}")
          case _ =>
            lastPut = random.nextInt(100).toLong
            val v = random.nextInt(1000).toLong
            store.put(key(lastPut), value(v))
            state += lastPut -> v
        }
        if (random.nextInt(5) == 0) store.abort()
        else {
          store.commit()
          version += 1
          committed = state
        }
      }
      val other = provider(root, options: _*) // another working copy: what was published
      val loaded = other.getStore(version)
      for (k <- 0L until 100L) {
        expect(valueOf(loaded.get(key(k))) == committed.get(k), s"seed $seed: version " +
          s"$version loaded elsewhere has key $k = ${valueOf(loaded.get(key(k)))}, not " +
          s"${committed.get(k)}")
      }
      expect(loaded.metrics.numKeys == committed.size, s"seed $seed: version $version loaded " +
        s"elsewhere counts ${loaded.metrics.numKeys} keys, not ${committed.size}")
      loaded.abort()
      other.close()
      p.close()
    }
  }
}

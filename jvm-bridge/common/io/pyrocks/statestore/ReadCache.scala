package io.pyrocks.statestore

import java.util.concurrent.atomic.{AtomicBoolean, AtomicLong}

/**
 * Answers gets in the JVM, saving the round trip to the worker, and stays exactly equal to
 * what the worker would answer. Invariants, each enforced where noted:
 *  - an entry is either a value or "absent", learned from the worker or from this store's
 *    own writes (`remember`), so it equals the worker's answer at that moment;
 *  - every write of the key through this store updates the entry (`remember`) or drops it
 *    (`forget`), so it stays equal afterwards;
 *  - the cache belongs to one committed version and one working copy: it is kept across a
 *    load only if the worker reports its working copy unchanged at that version, and is
 *    dropped on abort, on a lost publish race, on a new connection (`invalidate`);
 *  - or it belongs to one commit (`commit`: its id, as the worker names it; None from the
 *    first write not yet committed): a load of that very commit, on any working copy, keeps
 *    it, because a commit's content never changes. A version re-committed by another run,
 *    a checkpoint replaced at the same path, a rewind: each is another commit id. This is
 *    what lets a closed provider's cache serve the next provider of its store
 *    (`ParkedCaches`: a query restarted in the same JVM starts warm);
 *  - `complete` means every key of the store has an entry or is absent: true only from an
 *    empty store (version 0, or one loaded empty) through writes that all went through this
 *    cache, false as soon as anything is dropped. Only then does a miss mean "absent"
 *    without asking, and do the entries of a family list all of it (`everything`);
 *  - `filter` holds every key written since the store was empty (the same lineage rule), and
 *    survives the cache starting over: a key it has never seen is absent, without asking.
 *    It also holds the prefix of every such key (for prefix-scan column families), so a
 *    prefix it has never seen has nothing under it. Its memory is charged to the budget
 *    (`filterBytes`); a growth that does not fit drops it for good (until the store is
 *    empty again), so lookups then ask the worker: it is never wrong, only gone;
 *  - a family's keys live in its own `space`, its scan prefixes in the next: no (column
 *    family, key) pair can stand for another however the bytes look;
 *  - in a prefix-scan family every entry lives in its prefix's record (`PrefixRecord`), in
 *    the worker's (unsigned bytewise) order. A record is *listed* when it holds EVERY key
 *    under its prefix: learned from a scan that ran to its end with no write in between
 *    (`epoch` unchanged, checked in `learnListing`), or started when nothing could be under
 *    the prefix (the cache complete, or the filter never saw the prefix), and kept so by
 *    every later write under the prefix. A listed record answers `lookup` for any key under
 *    it and `listing` for its prefix; anything that drops an entry drops its record.
 *  - gets walking a family in key order past what the cache holds read ahead (`ReadAhead`):
 *    its window follows the same rules as the entries, and goes with them (`clear`).
 * Storage is `PackedEntries`: records in pages, no object per entry.
 * Memory: all caches of a JVM share one budget. A cache that would exceed it first takes
 * memory back from the least recently used caches that no task is using (`CacheBudget.
 * reclaim`: a finished or idle query must not starve a running one), and only if that is
 * not enough evicts its own entries written longest ago, a page at a time (`storeEvicting`),
 * so a state larger than the budget keeps the part it wrote last. Taking memory back from
 * an idle cache is `clear`, which only forgets: it happens under that cache's own lock, so it
 * never races a lookup or a write.
 */
final class ReadCache(val budget: CacheBudget,
    newKeyFilter: () => KeyFilter = () => new KeyFilter()) {
  private val lock = new java.util.concurrent.locks.ReentrantLock()
  // Written under `lock` on every call, read without it by another cache's `reclaim`
  // (an age to sort by: a stale one only changes which idle cache goes first). Not
  // volatile: a volatile write is a full fence on x86, which made each get and put wait
  // for its own cache misses to retire (docs/benchmarks.md, Dec 6, stop 88).
  private var lastUsedNanos = System.nanoTime()
  private val entries = new PackedEntries(new PackedEntries.Memory {
    def reserve(bytes: Long): Boolean = ReadCache.this.reserve(bytes)
    def release(bytes: Long): Unit = budget.release(bytes)
  }, CacheKey.hash)
  // A window is about to be read, the oldest entries maybe never again: they make room for
  // it. Its room is twice what it reads: a sixteenth of the budget at most.
  private val ahead = new ReadAhead(new PackedEntries.Memory {
    def reserve(bytes: Long): Boolean = reserveEvicting(bytes)
    def release(bytes: Long): Unit = budget.release(bytes)
  }, math.min(ReadAhead.MaxBytes.toLong, budget.limitBytes / 32).toInt)
  private var writesSeen = 0L
  private var hashesAhead = new Array[Int](0) // `writeAll`'s keys' hashes, reused
  private var complete = false
  private var filter: Option[KeyFilter] = None
  private var filterBytes = 0L // charged to the budget while `filter` is set
  private val spaces = new java.util.HashMap[String, Integer]()
  private var version = -1L
  private var commit: Option[String] = None
  private var reclaimedEntries = 0L // other caches' entries this one's reservations dropped
  private var pushedOutAtLoad = 0L // `pushedOut` when the current batch loaded the store
  private val enabled = budget.limitBytes > 0 // readCacheMB=0: every get asks the worker

  /** Some(Some(value)) or Some(None) if known (absent = None); None if the worker must say.
   * `prefix`: the key's scan prefix, for a key of a prefix-scan column family. */
  def lookup(cf: String, key: Array[Byte],
      prefix: Option[Array[Byte]] = None): Option[Option[Array[Byte]]] =
    if (!enabled) None else guarded {
      val space = spaceOf(cf)
      val known = prefix match {
        case None =>
          val at = entries.find(space, key, CacheKey.hash(key, space))
          if (at >= 0) Some(Option(entries.value(at))) else ahead.lookup(space, key)
        case Some(p) =>
          val at = record(space + 1, p)
          if (at < 0) None
          else PrefixRecord.lookup(entries.page(at), entries.valueAt(at),
            entries.valueAt(at) + entries.valueLength(at), key, p)
      }
      known.orElse(if (complete || provenAbsent(CacheKey.hash(key, space))) Some(None)
        else None)
    }

  /** Changes whenever something this cache knows may have changed: a scan that started at
   * one epoch and ended at the same one saw the store as it still is. */
  def epoch: Long = guarded(writesSeen)

  /** Every (key, value) under `prefix`, in scan order, if known without asking the worker:
   * read in place from its record as it is now (later writes make new records). */
  def listing(cf: String, prefix: Array[Byte]): Option[KeyValueScan] =
    if (!enabled) None else guarded {
      val space = spaceOf(cf) + 1
      val at = record(space, prefix)
      if (at >= 0) {
        val start = entries.valueAt(at)
        if (complete || PrefixRecord.listed(entries.page(at), start)) {
          Some(new PrefixRecord.Scan(entries.sharedPage(at), start,
            start + entries.valueLength(at), entries.keyAt(at), entries.keyLength(at)))
        } else None
      } else if (complete || provenAbsent(CacheKey.hash(prefix, space))) {
        Some(KeyValueScan.Empty) // nothing was ever written under it
      } else None
    }

  /** Every (key, value) of `cf` if this cache knows every key of the store (`complete`), in
   * no particular order, read in place as of now (later writes do not show): a full scan
   * without a round trip. */
  def everything(cf: String): Option[KeyValueScan] =
    if (!enabled) None else guarded {
      if (!complete) None
      else {
        val space = spaceOf(cf)
        Some(new ReadCache.Everything(entries.snapshot(), space))
      }
    }

  /** A scan of `prefix` that began at `startEpoch` returned `pairs` and reached its end. */
  def learnListing(cf: String, prefix: Array[Byte], pairs: Seq[(Array[Byte], Array[Byte])],
      startEpoch: Long): Unit = if (enabled) guarded { if (startEpoch == writesSeen) {
    for (record <- PrefixRecord.of(pairs, prefix) if record.length <= PrefixRecord.MaxBytes) {
      keep(spaceOf(cf) + 1, prefix, record)
    }
  }}

  /** A get of `key` (not of a prefix-scan family) missed: how many bytes of pairs from it on
   * to ask the worker for (`learnAhead`), or 0 to ask for the key alone. */
  def aheadBytes(cf: String, key: Array[Byte]): Int =
    if (!enabled) 0 else guarded(ahead.onMiss(spaceOf(cf), key))

  /** The worker's answer to a read-ahead of `asked` bytes from `key` on; returns the answer
   * for `key`. */
  def learnAhead(cf: String, key: Array[Byte], chunk: Array[Byte], asked: Int)
      : Option[Array[Byte]] = guarded(ahead.learn(spaceOf(cf), key, chunk, asked))

  /** The worker's answer for `key` is now `value` (null = absent); `prefix` is the key's
   * scan prefix in a prefix-scan column family. */
  def remember(cf: String, key: Array[Byte], value: Array[Byte],
      prefix: Option[Array[Byte]] = None): Unit = if (enabled) guarded {
    learn(cf, key, value, prefix)
  }

  /** `remember` for this store's own write of `key`, answering what the cache knew of the
   * key before it: `ReadCache.Unknown`, `Absent` or `Present`. */
  def write(cf: String, key: Array[Byte], value: Array[Byte],
      prefix: Option[Array[Byte]] = None): Int = if (!enabled) ReadCache.Unknown else guarded {
    commit = None
    learn(cf, key, value, prefix)
  }

  /** `write` of `n` keys of `cf` (a family without scan prefixes), in order: `values(i)`
   * for `keys(i)`, what the cache knew of it before into `priors(i)`. One lock for them all,
   * and what finding each key reads is loaded for all of them before the first is written
   * (`PackedEntries.loadAhead`), so their misses to memory overlap. */
  def writeAll(cf: String, keys: Array[Array[Byte]], values: Array[Array[Byte]], n: Int,
      priors: Array[Int]): Unit =
    if (!enabled) java.util.Arrays.fill(priors, 0, n, ReadCache.Unknown) else guarded {
      commit = None
      val space = spaceOf(cf)
      if (hashesAhead.length < n) hashesAhead = new Array[Int](n)
      var i = 0
      while (i < n) {
        hashesAhead(i) = CacheKey.hash(keys(i), space)
        i += 1
      }
      entries.loadAhead(hashesAhead, n)
      i = 0
      while (i < n) {
        priors(i) = learnEntry(space, keys(i), hashesAhead(i), values(i))
        i += 1
      }
    }

  /** `remember`'s and `write`'s work; the caller holds the lock. */
  private def learn(cf: String, key: Array[Byte], value: Array[Byte],
      prefix: Option[Array[Byte]]): Int = {
    val space = spaceOf(cf)
    prefix match {
      case None => learnEntry(space, key, CacheKey.hash(key, space), value)
      case Some(p) => learnInRecord(space, key, value, p)
    }
  }

  /** What the cache knows of a key it has no entry for, `hash` the key's: absent if it
   * knows every key, or its filter proves it never written. */
  private def unlisted(hash: Int): Int =
    if (complete || provenAbsent(hash)) ReadCache.Absent else ReadCache.Unknown

  /** `learn` of a key of a family without scan prefixes (in `space`, its hash `hash`). */
  private def learnEntry(space: Int, key: Array[Byte], hash: Int, value: Array[Byte]): Int = {
    writesSeen += 1
    ahead.write(space, key, value, known = true)
    val found = entries.find(space, key, hash)
    val prior = if (found < 0) unlisted(hash)
      else if (entries.valueLength(found) < 0) ReadCache.Absent else ReadCache.Present
    // A key with a value here is in the store, so in the filter (`filter`, above).
    val at = if (value == null || prior == ReadCache.Present || addToFilter(hash)) found
      else entries.find(space, key, hash)
    if (!entries.put(space, key, hash, value, at) && !storeEvicting(space, key, hash, value)) {
      entries.remove(space, key, hash) // no room for the new answer: the old one goes
      complete = false
    }
    prior
  }

  /** `learn` of a key of a prefix-scan family, kept in its prefix's record. */
  private def learnInRecord(space: Int, key: Array[Byte], value: Array[Byte],
      p: Array[Byte]): Int = {
    writesSeen += 1
    val hash = CacheKey.hash(key, space)
    ahead.write(space, key, value, known = true)
    val pHash = CacheKey.hash(p, space + 1)
    val found = entries.find(space + 1, p, pHash)
    val (page, start) =
      if (found < 0) (null, 0) else (entries.page(found), entries.valueAt(found))
    val end = if (found < 0) 0 else start + entries.valueLength(found)
    val known = if (found < 0) ReadCache.Unknown
      else PrefixRecord.knows(page, start, end, key, p)
    val prior = if (known != ReadCache.Unknown) known else unlisted(hash)
    // A new record lists its prefix if nothing can be under it yet: asked before the
    // filter learns the prefix.
    val listed = if (found >= 0) PrefixRecord.listed(page, start)
      else complete || provenAbsent(pHash)
    // (`&`: both are added.) The record read above stays exact even if they clear it.
    val at = if (value == null || (addToFilter(hash) & addToFilter(pHash))) found
      else entries.find(space + 1, p, pHash)
    PrefixRecord.updated(page, start, end, p, key, value, listed) match {
      case Some(updated) if updated.length <= PrefixRecord.MaxBytes =>
        if (!entries.put(space + 1, p, pHash, updated, at) &&
            !storeEvicting(space + 1, p, pHash, updated)) {
          drop(space + 1, p)
        }
      // Too large to rewrite on every write, or a key the record cannot hold (not under
      // the prefix, or past a u16): the worker answers for the prefix.
      case _ => drop(space + 1, p)
    }
    prior
  }

  /** The answer for `key` is no longer known here. */
  def forget(cf: String, key: Array[Byte], prefix: Option[Array[Byte]] = None): Unit =
    if (enabled) guarded {
      writesSeen += 1
      commit = None
      val space = spaceOf(cf)
      val hash = CacheKey.hash(key, space)
      ahead.write(space, key, null, known = false)
      addToFilter(hash) // a merge may create the key
      prefix match {
        case None => entries.remove(space, key, hash)
        case Some(p) =>
          val pHash = CacheKey.hash(p, space + 1)
          addToFilter(pHash)
          entries.remove(space + 1, p, pHash)
      }
      complete = false
    }

  /** Where the record of `prefix` is, or -1. */
  private def record(space: Int, prefix: Array[Byte]): Long =
    entries.find(space, prefix, CacheKey.hash(prefix, space))

  private def keep(space: Int, prefix: Array[Byte], record: Array[Byte]): Unit = {
    val hash = CacheKey.hash(prefix, space)
    if (!entries.put(space, prefix, hash, record)) storeEvicting(space, prefix, hash, record)
  }

  /** A `put` the budget refused, tried again after each eviction of the entries written
   * longest ago (the cache then no longer knows every key); false if nothing is left to
   * evict. A cache over its budget keeps the most recently written entries this way,
   * where starting over would lose them all. */
  private def storeEvicting(space: Int, key: Array[Byte], hash: Int,
      value: Array[Byte]): Boolean = {
    var stored = false
    while (!stored && evictOldest()) stored = entries.put(space, key, hash, value)
    stored
  }

  /** `reserve`, evicting the entries written longest ago until `n` bytes fit. */
  private def reserveEvicting(n: Long): Boolean = {
    var fits = reserve(n)
    while (!fits && evictOldest()) fits = reserve(n)
    fits
  }

  private def evictOldest(): Boolean = entries.evictOldest() && {
    budget.outgrown()
    complete = false
    writesSeen += 1 // a scan in flight must not learn a listing from before the eviction
    true
  }

  /** Forgets a prefix's record: its keys are no longer all known. */
  private def drop(space: Int, prefix: Array[Byte]): Unit = {
    entries.remove(space, prefix, CacheKey.hash(prefix, space))
    complete = false
  }

  /** Whether the key filter proves the key (or prefix) whose `CacheKey.hash` is `hash` was
   * never written since the store was empty. */
  private def provenAbsent(hash: Int): Boolean = filter.exists(f => !f.mightContain(hash))

  /** Adds `hash` to the filter, if there is one; false if that changed the entries (a
   * growth the budget could hold only by clearing them: `growFilter`), so that a location
   * found before must be found again. */
  private def addToFilter(hash: Int): Boolean = {
    val seen = writesSeen // `clear` counts as a write
    filter.foreach { f =>
      if (f.hasRoom || growFilter(f)) f.add(hash)
      else dropFilter()
    }
    writesSeen == seen
  }

  /** The filter is worth more than the entries (it outlives them by design): they make room
   * for it if nothing else can. */
  private def growFilter(f: KeyFilter): Boolean = f.growthBytes.exists { n =>
    val fits = reserve(n) || { budget.outgrown(); clear(); reserve(n) }
    if (fits) {
      f.grow()
      filterBytes += n
    }
    fits
  }

  /** A filter that cannot hold every key must not exist: it would prove present keys absent. */
  private def dropFilter(): Unit = {
    filter = None
    budget.release(filterBytes)
    filterBytes = 0
  }

  private def newFilter(): Unit = {
    dropFilter()
    val f = newKeyFilter()
    if (reserve(f.bytes)) {
      filter = Some(f)
      filterBytes = f.bytes
    }
  }

  private def reserve(n: Long): Boolean =
    budget.reserve(n) || { reclaimedEntries += budget.reclaim(n, this); budget.reserve(n) }

  /** Entries this cache's need for room pushed out: its own evicted, and those of the idle
   * caches of running queries it emptied (not parked ones: a stopped query's cache going
   * says nothing of whether the running states fit). */
  private def pushedOut: Long = entries.evicted + reclaimedEntries

  /** The store was loaded at `loaded`; `unchanged` = the worker's working copy was kept;
   * `empty` = it was loaded empty whatever its version (Spark's loadEmpty); `loadedCommit`:
   * the id of the commit the worker loaded (None: not known, or nothing committed). */
  def loaded(loaded: Long, unchanged: Boolean, empty: Boolean = false,
      loadedCommit: Option[String] = None): Unit = guarded {
    val sameCommit = loadedCommit.isDefined && loadedCommit == commit
    if (empty || loaded != version || !(unchanged || sameCommit)) {
      clear()
      // Version 0, or a store loaded empty, holds no key: every key is known absent (so an
      // offline writer's puts cost the worker no lookup). Any other version was written by
      // writes we did not all see: nothing is known.
      val nothingStored = empty || loaded == 0
      complete = nothingStored
      if (nothingStored) newFilter() else dropFilter()
    }
    version = loaded
    commit = if (empty) None else loadedCommit
    pushedOutAtLoad = pushedOut
  }

  /** Entries pushed out to fit the budget since the last load: nonzero when the states of
   * the running queries outgrew it, the sign that reads now miss and full scans leave the
   * JVM. Zero does not prove they fit: a cache emptied in an earlier batch refills without
   * pushing anything out. */
  def pushedOutSinceLoad: Long = guarded(pushedOut - pushedOutAtLoad)

  /** This store published `newVersion` as the commit `id`. */
  def committed(newVersion: Long, id: Option[String]): Unit = guarded {
    version = newVersion
    commit = id
  }

  /** Whether this cache equals a commit (known by its id), so the next provider of its store
   * may take it over (`ParkedCaches`). */
  def equalsACommit: Boolean = enabled && guarded(commit.isDefined) // never version 0's

  /** JVM memory this cache holds: its entries, its key filter and its read-ahead window. */
  def memoryBytes: Long = guarded(entries.allocatedBytes + filterBytes + ahead.bytes)

  def invalidate(): Unit = guarded {
    clear()
    dropFilter()
    version = -1
    commit = None
  }

  /** The provider is gone: its memory goes back to the budget for good. */
  def close(): Unit = {
    invalidate()
    budget.deregister(this)
  }

  private[statestore] def lastUsed: Long = lastUsedNanos

  /** Gives all entries back if no task is using this cache right now; never waits. Its key
   * filter stays: it is small (about 1.25 bytes per key against ~60 for an entry) and
   * cannot be rebuilt. The number of entries given back. */
  private[statestore] def releaseIfIdle(): Int = if (lock.tryLock()) {
    try { val held = entries.size; clear(); held } finally lock.unlock()
  } else 0

  private def guarded[T](f: => T): T = {
    lock.lock()
    try {
      lastUsedNanos = System.nanoTime()
      f
    } finally lock.unlock()
  }

  if (enabled) budget.register(this)

  private def clear(): Unit = {
    writesSeen += 1
    entries.clear()
    ahead.clear()
    complete = false
  }

  /** Keys of the default family live in space 0, of the n-th other family in space 2n;
   * each family's scan prefixes in the next, odd, space. */
  private def spaceOf(cf: String): Int =
    if (cf == Wire.DefaultCf) 0
    else {
      val known = spaces.get(cf)
      if (known != null) known
      else {
        val space = 2 * (spaces.size + 1)
        spaces.put(cf, space)
        space
      }
    }
}

object ReadCache {
  /** What the cache knew of a key before a write (`write`). */
  val Unknown = 0
  val Absent = 1
  val Present = 2

  /** A family's every present key, read in place from a snapshot of the cache's entries:
   * the family's own records (keys of space `space`) and, for a prefix-scan family, the keys
   * in its prefixes' records (space `space` + 1), each in two slices: the record's prefix,
   * then the rest the record holds (a packed value is unpacked into the scan's arena). */
  final class Everything(entries: PackedEntries.Snapshot, space: Int) extends KeyValueScan {
    private val record = new PrefixRecord.Cursor(presentOnly = true, new WordPacking.Arena)
    private var inRecord = false // `record` is over a record of this family
    var keyBytes: Array[Byte] = _
    var keyAt = 0
    var keyLength = 0
    var valueBytes: Array[Byte] = _
    var valueAt = 0
    var valueLength = 0
    private var headAt = 0
    private var headLength = 0 // 0 for keys of the family's own records
    override def keyHeadBytes: Array[Byte] = keyBytes
    override def keyHeadAt: Int = headAt
    override def keyHeadLength: Int = headLength

    override def advance(): Boolean = {
      while (!inRecord || !record.advance()) {
        inRecord = false
        if (!entries.advance()) return false
        keyBytes = entries.page
        if (entries.space == space && entries.valueLength >= 0) {
          headLength = 0
          valueBytes = keyBytes
          keyAt = entries.keyAt
          keyLength = entries.keyLength
          valueAt = entries.valueAt
          valueLength = entries.valueLength
          return true
        }
        if (entries.space == space + 1) {
          record.over(entries.page, entries.valueAt, entries.valueAt + entries.valueLength)
          inRecord = true
          headAt = entries.keyAt
          headLength = entries.keyLength
        }
      }
      keyAt = record.keyAt
      keyLength = record.keyLength
      valueBytes = record.valueBytes
      valueAt = record.valueAt
      valueLength = record.valueLength
      true
    }

    override def close(): Unit = {}
  }
}

/** The memory all read caches of this JVM may use together (`readCacheMB`); `warn` says
 * when the running states first outgrow it (`outgrown`). */
final class CacheBudget(val limitBytes: Long,
    warn: String => Unit = CacheBudget.warnInLog) {
  private val used = new AtomicLong(0)
  private val saidOutgrown = new AtomicBoolean(false)
  private val caches = java.util.concurrent.ConcurrentHashMap.newKeySet[ReadCache]()

  def reserve(n: Long): Boolean =
    if (used.addAndGet(n) <= limitBytes) true else { used.addAndGet(-n); false }

  def release(n: Long): Unit = used.addAndGet(-n)

  def usedBytes: Long = used.get()

  /**
   * Entries of running stores' caches were pushed out for want of room: from now on their
   * gets go to the workers, and whole-state scans stream from them every batch, several times
   * slower at large states (docs/benchmarks.md, "State size"). The metric
   * `pyrocks.read_cache_evictions` counts it per batch, but only where one looks, and it reads
   * 0 in batches that merely refill what earlier ones emptied; so the executor's log says it
   * too, once per budget (a state that outgrew the cache does so every batch).
   */
  def outgrown(): Unit =
    if (!saidOutgrown.get && saidOutgrown.compareAndSet(false, true)) {
      warn(CacheBudget.outgrownMessage(limitBytes))
    }

  def register(cache: ReadCache): Unit = caches.add(cache)

  def deregister(cache: ReadCache): Unit = caches.remove(cache)

  /**
   * Empties the least recently used idle caches other than `requester` until `n` bytes fit
   * with an eighth of the budget to spare (so that this runs once in a while, not on every
   * entry); how many entries of live (not parked) caches it emptied (any: `outgrown`).
   */
  def reclaim(n: Long, requester: ReadCache): Long = {
    val goal = limitBytes - n - limitBytes / 8
    // Each cache's time is read once: tasks go on using their caches while this sorts, and
    // a sort whose keys move under it may find its comparisons inconsistent and throw
    // (the JDK's merge sort checks, past 32 caches), failing the task that needed room.
    val byAge = caches.toArray(Array.empty[ReadCache]).filter(_ ne requester)
      .map(cache => (cache.lastUsed, cache)).sortBy(_._1).map(_._2)
    var emptied = 0L
    // A parked cache goes whole, key filter included: nothing may ever take it over again.
    byAge.iterator.takeWhile(_ => used.get() > goal).foreach { cache =>
      if (ParkedCaches.unpark(cache)) cache.close() else emptied += cache.releaseIfIdle()
    }
    if (emptied > 0) outgrown()
    emptied
  }
}

object CacheBudget extends org.apache.spark.internal.Logging {
  private def warnInLog(message: String): Unit = logWarning(message)

  private def outgrownMessage(limitBytes: Long): String =
    s"pyrocks: the state stores of this executor outgrew their read cache " +
      s"(${LaunchOptions.Prefix}readCacheMB = ${limitBytes >> 20} MiB; default a quarter of " +
      "the heap). What does not fit is read from the state store workers: a round trip per " +
      "get, and the whole-state scans with which joins, session windows and watermarked " +
      "aggregations evict stream it every batch, several times slower than from the cache. " +
      "An entry takes its key and value bytes plus about 40 (a session window about 105 " +
      "bytes): raise readCacheMB, and the executor heap with it, to hold the state " +
      "(docs/tuning.md, Memory). The metric pyrocks.read_cache_evictions counts the entries " +
      "pushed out per batch. Logged once per executor."

  private val byLimit = scala.collection.mutable.Map.empty[Long, CacheBudget]

  /** One budget per JVM (per configured size: every provider of a query shares it). */
  def of(readCacheMB: Int): CacheBudget = synchronized {
    val limit = readCacheMB.toLong << 20
    byLimit.getOrElseUpdate(limit, new CacheBudget(limit))
  }
}

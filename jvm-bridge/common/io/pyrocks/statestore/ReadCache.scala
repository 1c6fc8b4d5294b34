package io.pyrocks.statestore

import java.util.concurrent.atomic.AtomicLong

/**
 * Answers gets in the JVM, saving the round trip to the worker, and stays exactly equal to
 * what the worker would answer. Invariants, each enforced where noted:
 *  - an entry is either a value or "absent" (a null), learned from the worker or from this
 *    store's own writes (`remember`), so it equals the worker's answer at that moment;
 *  - every write of the key through this store updates the entry (`remember`) or drops it
 *    (`forget`), so it stays equal afterwards;
 *  - the cache belongs to one committed version and one working copy: it is kept across a
 *    load only if the worker reports its working copy unchanged at that version, and is
 *    dropped on abort, on a lost publish race, on a new connection (`invalidate`);
 *  - `complete` means every key of the store has an entry or is absent: true only from an
 *    empty store (version 0, or one loaded empty) through writes that all went through this
 *    cache, false as soon as anything is dropped. Only then does a miss mean "absent"
 *    without asking, and do the entries of a family list all of it (`everything`);
 *  - `filter` holds every key written since the store was empty (the same lineage rule), and
 *    survives the cache starting over: a key it has never seen is absent, without asking.
 *    It also holds the prefix of every such key (for prefix-scan column families), so a
 *    prefix it has never seen has an empty listing. Its memory is charged to the budget
 *    (`filterBytes`); a growth that does not fit drops it for good (until the store is
 *    empty again), so lookups then ask the worker: it is never wrong, only gone;
 *  - a (column family, key) pair has one `CacheKey` and no other pair has the same one:
 *    each family's keys and each family's scan prefixes have their own `space`;
 *  - a prefix listing holds EVERY key under its prefix, in the worker's (unsigned bytewise)
 *    order: it is learned only from a scan that ran to its end with no write in between
 *    (`epoch` unchanged, checked in `learnListing`), and every later write of a key under the
 *    prefix updates it (`remember`) or drops it (`forget`); anything that drops point
 *    entries drops listings too. So a listing answers `lookup` for any key under it.
 * Memory: all caches of a JVM share one budget. A cache that would exceed it first takes
 * memory back from the least recently used caches that no task is using (`CacheBudget.
 * reclaim`: a finished or idle query must not starve a running one), and only if that is
 * not enough starts over itself. Taking memory back is `clear`, which only forgets: it
 * happens under this cache's own lock, so it never races a lookup or a write.
 */
final class ReadCache(budget: CacheBudget, newKeyFilter: () => KeyFilter = () => new KeyFilter()) {
  private val lock = new java.util.concurrent.locks.ReentrantLock()
  @volatile private var lastUsedNanos = System.nanoTime()
  // A key known absent maps to `ReadCache.Absent`, never to null, so that one hash lookup
  // answers both "known?" and "what?" (gets and puts are the hot path).
  private val entries = new java.util.HashMap[CacheKey, Array[Byte]]()
  private val listings = new java.util.HashMap[CacheKey, ReadCache.Listing]()
  private var writesSeen = 0L
  private var bytes = 0L
  private var complete = false
  private var filter: Option[KeyFilter] = None
  private var filterBytes = 0L // charged to the budget while `filter` is set
  private val spaces = new java.util.HashMap[String, Integer]()
  private var version = -1L
  private val enabled = budget.limitBytes > 0 // readCacheMB=0: every get asks the worker

  /** Some(Some(value)) or Some(None) if known (absent = None); None if the worker must say.
   * `prefix` is the key's scan prefix in a prefix-scan column family: a listing of it holds
   * every key under it, so it answers for the key (a session's update after its scan);
   * computed only if nothing else answers. */
  def lookup(cf: String, key: Array[Byte],
      prefix: => Option[Array[Byte]] = None): Option[Option[Array[Byte]]] =
    if (!enabled) None else guarded {
      val k = cacheKey(cf, key)
      val known = entries.get(k)
      if (known ne null) Some(if (known eq ReadCache.Absent) None else Some(known))
      else if (complete || filter.exists(f => !f.mightContain(k))) Some(None)
      else prefix.flatMap(p => Option(listings.get(prefixKey(cf, p)))).map(_.get(key))
    }

  /** Changes whenever something this cache knows may have changed: a scan that started at
   * one epoch and ended at the same one saw the store as it still is. */
  def epoch: Long = guarded(writesSeen)

  /** Every (key, value) under `prefix`, in scan order, if known without asking the worker. */
  def listing(cf: String, prefix: Array[Byte]): Option[Array[(Array[Byte], Array[Byte])]] =
    if (!enabled) None else guarded {
      val p = prefixKey(cf, prefix)
      val known = listings.get(p)
      if (known != null) Some(known.pairs)
      else if (filter.exists(f => !f.mightContain(p))) {
        adopt(p, new ReadCache.Listing) // never written since empty: nothing under it
        Some(Array.empty)
      } else None
    }

  /** Every (key, value) of `cf` if this cache knows every key of the store (`complete`), in
   * no particular order: a full scan without a round trip. A copy, as `listing`'s is. */
  def everything(cf: String): Option[Array[(Array[Byte], Array[Byte])]] =
    if (!enabled) None else guarded {
      if (!complete) None
      else {
        val space = spaceOf(cf)
        val out = new scala.collection.mutable.ArrayBuffer[(Array[Byte], Array[Byte])](
          entries.size)
        entries.forEach { (k, v) =>
          if (k.space == space && (v ne ReadCache.Absent)) out += ((k.bytes, v))
        }
        Some(out.toArray)
      }
    }

  /** A scan of `prefix` that began at `startEpoch` returned `pairs` and reached its end. */
  def learnListing(cf: String, prefix: Array[Byte], pairs: Seq[(Array[Byte], Array[Byte])],
      startEpoch: Long): Unit = if (enabled) guarded { if (startEpoch == writesSeen) {
    val listing = new ReadCache.Listing
    pairs.foreach { case (k, v) => listing.put(k, v) }
    adopt(prefixKey(cf, prefix), listing)
  }}

  /** The worker's answer for `key` is now `value` (null = absent); `prefix` is the key's
   * scan prefix in a prefix-scan column family. */
  def remember(cf: String, key: Array[Byte], value: Array[Byte],
      prefix: Option[Array[Byte]] = None): Unit = if (enabled) guarded {
    writesSeen += 1
    val k = cacheKey(cf, key)
    val p = prefix.map(prefixKey(cf, _))
    if (value != null) noteWritten(k, p)
    p.foreach(updateListing(_, key, value))
    val size = entrySize(k, value)
    if (reserve(size)) {
      val old = entries.put(k, if (value == null) ReadCache.Absent else value)
      if (old ne null) release(entrySize(k, old))
      bytes += size
    } else {
      clear() // over budget even after reclaiming: start over, knowing nothing
    }
  }

  /** The answer for `key` is no longer known here. */
  def forget(cf: String, key: Array[Byte], prefix: Option[Array[Byte]] = None): Unit =
    if (enabled) guarded {
      writesSeen += 1
      val k = cacheKey(cf, key)
      val p = prefix.map(prefixKey(cf, _))
      noteWritten(k, p) // a merge may create the key
      p.foreach(dropListing)
      drop(k)
      complete = false
    }

  private def noteWritten(k: CacheKey, prefix: Option[CacheKey]): Unit = {
    addToFilter(k)
    prefix.foreach(addToFilter)
  }

  private def addToFilter(k: CacheKey): Unit = filter.foreach { f =>
    if (f.hasRoom || growFilter(f)) f.add(k) else dropFilter()
  }

  /** The filter is worth more than the entries (it outlives them by design): they make room
   * for it if nothing else can. */
  private def growFilter(f: KeyFilter): Boolean = f.growthBytes.exists { n =>
    val fits = reserve(n) || { clear(); reserve(n) }
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

  private def adopt(p: CacheKey, listing: ReadCache.Listing): Unit = {
    dropListing(p)
    val size = p.bytes.length + listing.bytes
    if (reserve(size)) {
      listings.put(p, listing)
      bytes += size
    } else {
      clear()
    }
  }

  private def updateListing(p: CacheKey, key: Array[Byte], value: Array[Byte]): Unit = {
    val listing = listings.get(p)
    if (listing != null) {
      val grown = listing.put(key, value)
      if (grown <= 0) release(-grown)
      else if (reserve(grown)) bytes += grown
      else clear()
    }
  }

  private def reserve(n: Long): Boolean =
    budget.reserve(n) || (budget.reclaim(n, this) && budget.reserve(n))

  private def dropListing(p: CacheKey): Unit = {
    val listing = listings.remove(p)
    if (listing != null) release(p.bytes.length + listing.bytes)
  }

  /** The store was loaded at `loaded`; `unchanged` = the worker's working copy was kept;
   * `empty` = it was loaded empty whatever its version (Spark's loadEmpty). */
  def loaded(loaded: Long, unchanged: Boolean, empty: Boolean = false): Unit = guarded {
    if (empty || !(unchanged && loaded == version)) {
      clear()
      // Version 0, or a store loaded empty, holds no key: every key is known absent (so an
      // offline writer's puts cost the worker no lookup). Any other version was written by
      // writes we did not all see: nothing is known.
      val nothingStored = empty || loaded == 0
      complete = nothingStored
      if (nothingStored) newFilter() else dropFilter()
    }
    version = loaded
  }

  def committed(newVersion: Long): Unit = guarded { version = newVersion }

  /** JVM memory this cache holds: its entries and its key filter. */
  def memoryBytes: Long = guarded(bytes + filterBytes)

  def invalidate(): Unit = guarded {
    clear()
    dropFilter()
    version = -1
  }

  /** The provider is gone: its memory goes back to the budget for good. */
  def close(): Unit = {
    invalidate()
    budget.deregister(this)
  }

  private[statestore] def lastUsed: Long = lastUsedNanos

  /** Gives all entries back if no task is using this cache right now; never waits. Its key
   * filter stays: it is small (about 1.25 bytes per key against ~100 for an entry) and
   * cannot be rebuilt. */
  private[statestore] def releaseIfIdle(): Unit = if (lock.tryLock()) {
    try clear() finally lock.unlock()
  }

  private def guarded[T](f: => T): T = {
    lock.lock()
    try {
      lastUsedNanos = System.nanoTime()
      f
    } finally lock.unlock()
  }

  budget.register(this)

  private def drop(k: CacheKey): Unit = {
    val old = entries.remove(k)
    if (old ne null) release(entrySize(k, old))
  }

  private def clear(): Unit = {
    writesSeen += 1
    entries.clear()
    listings.clear()
    release(bytes)
    complete = false
  }

  private def release(n: Long): Unit = {
    bytes -= n
    budget.release(n)
  }

  private def entrySize(k: CacheKey, value: Array[Byte]): Long =
    k.bytes.length.toLong + (if (value == null) 0 else value.length) + ReadCache.EntryOverhead

  private def cacheKey(cf: String, key: Array[Byte]): CacheKey = new CacheKey(key, spaceOf(cf))

  /** Prefixes share the key filter (and nothing else) with keys, in a space of their own. */
  private def prefixKey(cf: String, prefix: Array[Byte]): CacheKey =
    new CacheKey(prefix, spaceOf(cf) + 1)

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
  /** Bytes a HashMap entry, its CacheKey and array headers cost beyond the data. */
  val EntryOverhead = 96L

  /** The entry of a key known absent: compared by identity, so no value is mistaken for it. */
  private val Absent = new Array[Byte](0)

  /** The keys under one prefix, in the worker's order (RocksDB compares bytes unsigned). */
  final class Listing {
    private val sorted = new java.util.TreeMap[Array[Byte], Array[Byte]](
      (a: Array[Byte], b: Array[Byte]) => java.util.Arrays.compareUnsigned(a, b))
    var bytes = 0L

    /** Sets (value != null) or removes the key; returns the change in `bytes`. */
    def put(key: Array[Byte], value: Array[Byte]): Long = {
      val before = bytes
      val old = if (value == null) sorted.remove(key) else sorted.put(key, value)
      if (old != null) bytes -= size(key, old)
      if (value != null) bytes += size(key, value)
      bytes - before
    }

    /** The key's value, None if it is not under this prefix. */
    def get(key: Array[Byte]): Option[Array[Byte]] = Option(sorted.get(key))

    /** A copy: callers may write to the store while they iterate. */
    def pairs: Array[(Array[Byte], Array[Byte])] = {
      val out = new Array[(Array[Byte], Array[Byte])](sorted.size)
      var i = 0
      sorted.forEach { (k, v) => out(i) = (k, v); i += 1 }
      out
    }

    private def size(key: Array[Byte], value: Array[Byte]): Long =
      key.length.toLong + value.length + EntryOverhead
  }
}

/** The memory all read caches of this JVM may use together (`readCacheMB`). */
final class CacheBudget(val limitBytes: Long) {
  private val used = new AtomicLong(0)
  private val caches = java.util.concurrent.ConcurrentHashMap.newKeySet[ReadCache]()

  def reserve(n: Long): Boolean =
    if (used.addAndGet(n) <= limitBytes) true else { used.addAndGet(-n); false }

  def release(n: Long): Unit = used.addAndGet(-n)

  def usedBytes: Long = used.get()

  def register(cache: ReadCache): Unit = caches.add(cache)

  def deregister(cache: ReadCache): Unit = caches.remove(cache)

  /**
   * Empties the least recently used idle caches other than `requester` until `n` bytes fit
   * with an eighth of the budget to spare (so that this runs once in a while, not on every
   * entry); true if `n` bytes now fit.
   */
  def reclaim(n: Long, requester: ReadCache): Boolean = {
    val goal = limitBytes - n - limitBytes / 8
    val byAge = caches.toArray(Array.empty[ReadCache]).filter(_ ne requester).sortBy(_.lastUsed)
    byAge.iterator.takeWhile(_ => used.get() > goal).foreach(_.releaseIfIdle())
    used.get() + n <= limitBytes
  }
}

object CacheBudget {
  private val byLimit = scala.collection.mutable.Map.empty[Long, CacheBudget]

  /** One budget per JVM (per configured size: every provider of a query shares it). */
  def of(readCacheMB: Int): CacheBudget = synchronized {
    val limit = readCacheMB.toLong << 20
    byLimit.getOrElseUpdate(limit, new CacheBudget(limit))
  }
}

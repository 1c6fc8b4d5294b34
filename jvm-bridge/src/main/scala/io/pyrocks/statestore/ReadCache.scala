package io.pyrocks.statestore

import java.nio.ByteBuffer
import java.nio.charset.StandardCharsets.UTF_8
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
 *    empty store (version 0) through writes that all went through this cache, false as soon
 *    as anything is dropped. Only then does a miss mean "absent" without asking;
 *  - `filter` holds every key written since the store was empty (the same lineage rule), and
 *    survives the cache starting over: a key it has never seen is absent, without asking.
 * Memory: all caches of a JVM share one budget; a cache that would exceed it starts over.
 */
final class ReadCache(budget: CacheBudget) {
  private val entries = new java.util.HashMap[ByteBuffer, Array[Byte]]()
  private var bytes = 0L
  private var complete = false
  private var filter: Option[KeyFilter] = None
  private var version = -1L
  private val enabled = budget.limitBytes > 0 // readCacheMB=0: every get asks the worker

  /** Some(Some(value)) or Some(None) if known (absent = None); None if the worker must say. */
  def lookup(cf: String, key: Array[Byte]): Option[Option[Array[Byte]]] = if (!enabled) None else {
    val k = cacheKey(cf, key)
    if (entries.containsKey(k)) Some(Option(entries.get(k)))
    else if (complete || filter.exists(f => !f.mightContain(k.array()))) Some(None)
    else None
  }

  /** The worker's answer for `key` is now `value` (null = absent). */
  def remember(cf: String, key: Array[Byte], value: Array[Byte]): Unit = if (enabled) {
    val k = cacheKey(cf, key)
    if (value != null) filter.foreach(_.add(k.array()))
    drop(k)
    val size = entrySize(k, value)
    if (budget.reserve(size)) {
      entries.put(k, value)
      bytes += size
    } else {
      clear() // over budget: start over, knowing nothing
    }
  }

  /** The answer for `key` is no longer known here. */
  def forget(cf: String, key: Array[Byte]): Unit = if (enabled) {
    val k = cacheKey(cf, key)
    filter.foreach(_.add(k.array())) // a merge may create the key
    drop(k)
    complete = false
  }

  /** The store was loaded at `loaded`; `unchanged` = the worker's working copy was kept. */
  def loaded(loaded: Long, unchanged: Boolean): Unit = {
    if (!(unchanged && loaded == version)) {
      clear()
      // Version 0 is the empty store: every key is known absent. Any other version was
      // written by writes we did not all see: nothing is known.
      complete = loaded == 0
      filter = if (loaded == 0) Some(new KeyFilter()) else None
    }
    version = loaded
  }

  def committed(newVersion: Long): Unit = version = newVersion

  /** JVM memory this cache holds: its entries and its key filter. */
  def memoryBytes: Long = bytes + filter.map(_.bytes).getOrElse(0L)

  def invalidate(): Unit = {
    clear()
    filter = None
    version = -1
  }

  private def drop(k: ByteBuffer): Unit = if (entries.containsKey(k)) {
    release(entrySize(k, entries.remove(k)))
  }

  private def clear(): Unit = {
    entries.clear()
    release(bytes)
    complete = false
  }

  private def release(n: Long): Unit = {
    bytes -= n
    budget.release(n)
  }

  private def entrySize(k: ByteBuffer, value: Array[Byte]): Long =
    k.capacity().toLong + (if (value == null) 0 else value.length) + ReadCache.EntryOverhead

  private def cacheKey(cf: String, key: Array[Byte]): ByteBuffer =
    if (cf == Wire.DefaultCf) ByteBuffer.wrap(key)
    else ByteBuffer.wrap(cf.getBytes(UTF_8) ++ Array[Byte](0) ++ key)
}

object ReadCache {
  /** Bytes a HashMap entry, its ByteBuffer and array headers cost beyond the data. */
  val EntryOverhead = 96L
}

/** The memory all read caches of this JVM may use together (`readCacheMB`). */
final class CacheBudget(val limitBytes: Long) {
  private val used = new AtomicLong(0)

  def reserve(n: Long): Boolean =
    if (used.addAndGet(n) <= limitBytes) true else { used.addAndGet(-n); false }

  def release(n: Long): Unit = used.addAndGet(-n)

  def usedBytes: Long = used.get()
}

object CacheBudget {
  private val byLimit = scala.collection.mutable.Map.empty[Long, CacheBudget]

  /** One budget per JVM (per configured size: every provider of a query shares it). */
  def of(readCacheMB: Int): CacheBudget = synchronized {
    val limit = readCacheMB.toLong << 20
    byLimit.getOrElseUpdate(limit, new CacheBudget(limit))
  }
}

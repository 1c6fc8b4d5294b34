package io.pyrocks.statestore

import java.util.concurrent.ConcurrentHashMap

import scala.jdk.CollectionConverters._

/**
 * Read caches whose providers closed, each left for the next provider of the same store in
 * this JVM: a query stopped and started again (a notebook's usual loop) finds its gets
 * answered in the JVM from its first batch, as before the stop, instead of asking the
 * worker once per key. Invariants, each enforced where noted:
 *  - only a cache that equals a commit is parked (`ReadCache.equalsACommit`: no write it
 *    holds is uncommitted), and the provider that parks it no longer uses it;
 *  - a parked cache answers nothing until a load of that very commit (`ReadCache.loaded`
 *    compares commit ids): taking one over is never a risk, only a chance;
 *  - one cache per store, taken over at most once (`adopt` removes it); a provider that
 *    uses another budget (another `readCacheMB`) starts afresh, and the parked one goes;
 *  - a parked cache is charged to its budget, and goes whole (key filter included) when
 *    the budget needs room (`CacheBudget.reclaim`) or the application ends (`discardAll`).
 */
private[statestore] object ParkedCaches {
  private val parked = new ConcurrentHashMap[String, ReadCache]()

  /** `store`'s provider closed, leaving `cache`: kept for the next one if it equals a
   * commit, closed otherwise. */
  def park(store: String, cache: ReadCache): Unit =
    if (!cache.equalsACommit) cache.close()
    else {
      val before = parked.put(store, cache)
      if (before != null && (before ne cache)) before.close()
    }

  /** The cache `store`'s last provider left, if it is charged to `budget`. */
  def adopt(store: String, budget: CacheBudget): Option[ReadCache] =
    Option(parked.remove(store)).filter { cache =>
      val fits = cache.budget eq budget
      if (!fits) cache.close()
      fits
    }

  /** Removes `cache` if it is parked; true if it was (so no provider will adopt it). */
  def unpark(cache: ReadCache): Boolean = parked.entrySet().asScala.exists { entry =>
    (entry.getValue eq cache) && parked.remove(entry.getKey, cache) // atomic: adopt may race
  }

  def discardAll(): Unit = parked.keySet().forEach { store =>
    val cache = parked.remove(store)
    if (cache != null) cache.close()
  }
}

package io.pyrocks.statestore

/**
 * A provider's puts held back, up to `capacity` of one column family, so that the read cache
 * writes them together (`ReadCache.writeAll`): a put of a large state pays two misses to
 * memory in the cache (its index slot, then its record), and those of a group overlap.
 * Spark's aggregations put every key of a batch one after another (`StateStoreSaveExec`),
 * so their puts come in full groups; an operator that reads between its puts (dedup, joins)
 * writes each group as it reads, a put at a time.
 *
 * Only puts of a single value under a key of a family without scan prefixes are held: what
 * the cache does for them touches their own entries alone. The invariant, enforced by the
 * provider (`PyRocksStateStoreProvider.locked`): the puts held are written, to the cache and
 * then as frames to the worker in the order they were put, before anything else reads or
 * writes the cache or the connection, so nothing ever sees the store without them. An
 * aborted store's are dropped (`discard`): they were never sent.
 */
final class PendingPuts(capacity: Int = PendingPuts.Capacity) {
  private var family: String = _
  private val keys = new Array[Array[Byte]](capacity)
  private val values = new Array[Array[Byte]](capacity)
  private val priors = new Array[Int](capacity)
  private var held = 0

  def isEmpty: Boolean = held == 0

  /** Whether a put of `cf` can be held with those held: false when a group is full, or is
   * of another family (the caller writes them first). */
  def accepts(cf: String): Boolean = held < capacity && (held == 0 || cf == family)

  def hold(cf: String, key: Array[Byte], value: Array[Byte]): Unit = {
    require(accepts(cf), s"a put of family $cf held beside $held of family $family")
    family = cf
    keys(held) = key
    values(held) = value
    held += 1
  }

  def isFull: Boolean = held == capacity

  /** Writes the puts held into `cache`, then sends each, in order, with what the cache knew
   * of its key before (`ReadCache.Unknown`, `Absent` or `Present`). Nothing is held once it
   * starts, so a `send` that comes back here finds nothing to write. */
  def writeTo(cache: ReadCache)(send: (String, Array[Byte], Array[Byte], Int) => Unit): Unit =
    if (held > 0) {
      val n = held
      held = 0
      cache.writeAll(family, keys, values, n, priors)
      var i = 0
      while (i < n) {
        send(family, keys(i), values(i), priors(i))
        keys(i) = null
        values(i) = null
        i += 1
      }
    }

  /** Drops the puts held: their store was aborted, or let go, before they were sent. */
  def discard(): Unit = {
    java.util.Arrays.fill(keys.asInstanceOf[Array[Object]], 0, held, null)
    java.util.Arrays.fill(values.asInstanceOf[Array[Object]], 0, held, null)
    held = 0
  }
}

object PendingPuts {
  /** Puts a group holds: the misses of 8 to 32 overlapped alike in a scratch probe. */
  val Capacity = 16
}

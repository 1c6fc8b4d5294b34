package io.pyrocks.statestore

import scala.collection.mutable.ArrayBuffer

/**
 * A negative-lookup filter: a growing Bloom filter over every key a store has held since it
 * was empty. It never forgets a key (deletes leave it in), so "not in the filter" proves
 * "not in the store"; a "maybe" just means asking the worker. About 10 bits per key, ~1%
 * false positives per filter. It starts small (its memory counts against the read cache's
 * budget, and most stores hold few keys) and grows by adding a filter four times the size
 * of the last one: few filters to probe on a miss, each adding its false positives.
 *
 * It never grows by itself: growing costs memory, so the owner (`ReadCache`) asks for
 * `growthBytes`, charges them to its budget and calls `grow`, or drops the filter. A
 * growth whose bit indexes would not fit an Int (about 214M keys in one filter) is not
 * offered: `growthBytes` is None.
 */
final class KeyFilter(initialCapacity: Int = 1 << 14, maxBits: Long = KeyFilter.MaxBits) {
  require(initialCapacity > 0 && initialCapacity.toLong * KeyFilter.BitsPerKey <= maxBits,
    s"a key filter of $initialCapacity keys exceeds $maxBits bits")

  private final class Bloom(val capacity: Int) {
    private val size = capacity * KeyFilter.BitsPerKey // fits: checked against maxBits
    // Words of our own rather than java.util.BitSet, whose every set checks and grows its
    // capacity (3% of a session-window batch's JVM time).
    private val bits = new Array[Long]((size + 63) >>> 6)
    var count = 0

    def add(h1: Int, h2: Int): Unit = {
      var i = 0
      while (i < KeyFilter.Hashes) {
        val bit = index(h1, h2, i)
        bits(bit >>> 6) |= 1L << bit
        i += 1
      }
      count += 1
    }

    def mightContain(h1: Int, h2: Int): Boolean = {
      var i = 0
      while (i < KeyFilter.Hashes) {
        val bit = index(h1, h2, i)
        if ((bits(bit >>> 6) & (1L << bit)) == 0) return false
        i += 1
      }
      true
    }

    // The probe's 32 bits scaled onto [0, size) by a multiply and a shift: a division
    // (floorMod) per probe cost more than the rest of `add`.
    private def index(h1: Int, h2: Int, i: Int): Int =
      (((h1 + i * h2) & 0xffffffffL) * size >>> 32).toInt

    def bytes: Long = KeyFilter.bytesFor(capacity)
  }

  private val blooms = ArrayBuffer(new Bloom(initialCapacity))

  /** False once the newest filter holds as many keys as it was sized for: `grow` first. */
  def hasRoom: Boolean = blooms.last.count < blooms.last.capacity

  /** What the next growth would allocate, or None if it cannot grow. */
  def growthBytes: Option[Long] = {
    val capacity = blooms.last.capacity.toLong * KeyFilter.Growth
    if (capacity * KeyFilter.BitsPerKey > maxBits) None else Some(KeyFilter.bytesFor(capacity))
  }

  def grow(): Unit = {
    require(growthBytes.isDefined, s"a key filter of ${blooms.last.capacity} keys cannot grow")
    blooms += new Bloom(blooms.last.capacity * KeyFilter.Growth)
  }

  /** Adds a key by its hash (`CacheKey.hash`) to the newest filter, even if that is already
   * full (it only gets less selective), unless that filter may hold it already: a key
   * written again and again must not count again, or a long run of updates would grow the
   * filter as if each were a new key. (A key wrongly taken as held tests "maybe" anyway.) */
  def add(hash: Int): Unit = {
    val (newest, stride) = (blooms.last, KeyFilter.stride(hash))
    if (!newest.mightContain(hash, stride)) newest.add(hash, stride)
  }

  def mightContain(hash: Int): Boolean = {
    val stride = KeyFilter.stride(hash)
    blooms.exists(_.mightContain(hash, stride))
  }

  def bytes: Long = blooms.map(_.bytes).sum
}

object KeyFilter {
  val BitsPerKey = 10
  val Hashes = 7
  val Growth = 4
  /** Bit indexes are Ints. */
  val MaxBits: Long = Int.MaxValue

  /** The probes' stride for a key of `hash`: Murmur's finalizer of it, odd so that probes
   * never repeat. Derived from the hash rather than from a second pass over the key's bytes
   * (which every write and every miss would pay): the two are then dependent only where the
   * hash itself collides, one key in 2^32. */
  private def stride(hash: Int): Int =
    scala.util.hashing.MurmurHash3.finalizeHash(hash ^ 0x1b873593, 4) | 1

  /** Bytes a filter of `capacity` keys allocates (its words). */
  def bytesFor(capacity: Long): Long = (capacity * BitsPerKey + 63) / 64 * 8
}

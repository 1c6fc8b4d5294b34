package io.pyrocks.statestore

import scala.collection.mutable.ArrayBuffer

/**
 * A negative-lookup filter: a growing Bloom filter over every key a store has held since it
 * was empty. It never forgets a key (deletes leave it in), so "not in the filter" proves
 * "not in the store"; a "maybe" just means asking the worker. About 10 bits per key, ~1%
 * false positives; it grows by adding a filter twice the size of the last one.
 */
final class KeyFilter(initialCapacity: Int = 1 << 16) {
  private final class Bloom(val capacity: Int) {
    private val bits = new java.util.BitSet(capacity * KeyFilter.BitsPerKey)
    private val size = capacity * KeyFilter.BitsPerKey
    var count = 0

    def add(h1: Int, h2: Int): Unit = {
      var i = 0
      while (i < KeyFilter.Hashes) { bits.set(index(h1, h2, i)); i += 1 }
      count += 1
    }

    def mightContain(h1: Int, h2: Int): Boolean = {
      var i = 0
      while (i < KeyFilter.Hashes) {
        if (!bits.get(index(h1, h2, i))) return false
        i += 1
      }
      true
    }

    // The probe's 32 bits scaled onto [0, size) by a multiply and a shift: a division
    // (floorMod) per probe cost more than the rest of `add`.
    private def index(h1: Int, h2: Int, i: Int): Int =
      (((h1 + i * h2) & 0xffffffffL) * size >>> 32).toInt

    def bytes: Long = size / 8L
  }

  private val blooms = ArrayBuffer(new Bloom(initialCapacity))

  def add(key: CacheKey): Unit = {
    val h1 = key.hashCode
    val h2 = key.secondHash
    var last = blooms.last
    if (last.count >= last.capacity) {
      last = new Bloom(last.capacity * 2)
      blooms += last
    }
    last.add(h1, h2)
  }

  def mightContain(key: CacheKey): Boolean = {
    val h1 = key.hashCode
    val h2 = key.secondHash
    blooms.exists(_.mightContain(h1, h2))
  }

  def bytes: Long = blooms.map(_.bytes).sum
}

object KeyFilter {
  val BitsPerKey = 10
  val Hashes = 7
}

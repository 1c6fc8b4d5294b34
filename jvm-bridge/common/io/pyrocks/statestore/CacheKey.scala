package io.pyrocks.statestore

import scala.util.hashing.MurmurHash3

/**
 * A key as the read cache's maps and its key filter see it, hashed once: the bytes plus the
 * `space` they belong to (a column family's keys, or its scan prefixes; see
 * `ReadCache.spaceOf`). Equality takes both, so no (family, key) pair can stand for another
 * however the bytes look, and the key bytes are never copied to tag them. Not
 * `ByteBuffer.wrap`: its polynomial hash collides heavily on UnsafeRow keys (fixed-width
 * fields, mostly zero bytes), which turned map lookups into tree walks. `hashCode` is a
 * Murmur hash seeded by the space; the key filter takes it as its first hash rather than
 * hashing the bytes again on every write and every miss, and derives its second from a
 * differently seeded pass.
 */
final class CacheKey(val bytes: Array[Byte], val space: Int) extends Comparable[CacheKey] {
  override val hashCode: Int = MurmurHash3.bytesHash(bytes, 0x3c074a61 + space * 0x9e3779b9)

  /** An independent hash for the key filter's probe stride; odd, so probes never repeat. */
  def secondHash: Int = MurmurHash3.bytesHash(bytes, 0x1b873593 + space * 0x85ebca6b) | 1

  override def equals(other: Any): Boolean = other match {
    case k: CacheKey => k.hashCode == hashCode && k.space == space &&
      java.util.Arrays.equals(k.bytes, bytes)
    case _ => false
  }

  override def compareTo(other: CacheKey): Int =
    if (space != other.space) Integer.compare(space, other.space)
    else java.util.Arrays.compareUnsigned(bytes, other.bytes)
}

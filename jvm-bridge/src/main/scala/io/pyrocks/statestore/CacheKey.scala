package io.pyrocks.statestore

import scala.util.hashing.MurmurHash3

/**
 * A key as the read cache's maps and its key filter see it, hashed once. Not
 * `ByteBuffer.wrap`: its polynomial hash collides heavily on UnsafeRow keys (fixed-width
 * fields, mostly zero bytes), which turned map lookups into tree walks. `hashCode` is a
 * Murmur hash; the key filter takes it as its first hash rather than hashing the bytes again
 * on every write and every miss, and derives its second from a differently seeded pass.
 */
final class CacheKey(val bytes: Array[Byte]) extends Comparable[CacheKey] {
  override val hashCode: Int = MurmurHash3.bytesHash(bytes, 0x3c074a61)

  /** An independent hash for the key filter's probe stride; odd, so probes never repeat. */
  def secondHash: Int = MurmurHash3.bytesHash(bytes, 0x1b873593) | 1

  override def equals(other: Any): Boolean = other match {
    case k: CacheKey => k.hashCode == hashCode && java.util.Arrays.equals(k.bytes, bytes)
    case _ => false
  }

  override def compareTo(other: CacheKey): Int =
    java.util.Arrays.compareUnsigned(bytes, other.bytes)
}

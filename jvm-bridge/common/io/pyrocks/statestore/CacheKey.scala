package io.pyrocks.statestore

import scala.util.hashing.MurmurHash3

/**
 * How the read cache and its key filter hash a key: its bytes and the `space` they belong
 * to (a column family's keys, or its scan prefixes; see `ReadCache.spaceOf`), so no (family,
 * key) pair hashes as another however the bytes look, and the bytes are never copied to tag
 * them. Murmur, not `ByteBuffer.hashCode`: that polynomial collides heavily on UnsafeRow keys
 * (fixed-width fields, mostly zero bytes). The key filter probes from this hash alone
 * (`KeyFilter.add`).
 */
object CacheKey {
  def hash(bytes: Array[Byte], space: Int): Int =
    MurmurHash3.bytesHash(bytes, 0x3c074a61 + space * 0x9e3779b9)
}

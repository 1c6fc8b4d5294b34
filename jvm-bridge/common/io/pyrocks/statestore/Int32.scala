package io.pyrocks.statestore

/**
 * Ints in the read cache's byte arrays (little-endian: they never leave the JVM), read and
 * written through checked array accesses, not `Platform`'s unchecked ones: a wrong offset
 * then fails with an exception that names it, where an unchecked read of a dropped page
 * would take the whole executor down (it did, once, while the packed cache was young).
 */
private[statestore] object Int32 {
  def get(bytes: Array[Byte], at: Int): Int =
    (bytes(at) & 0xff) | (bytes(at + 1) & 0xff) << 8 | (bytes(at + 2) & 0xff) << 16 |
      bytes(at + 3) << 24

  def put(bytes: Array[Byte], at: Int, value: Int): Unit = {
    bytes(at) = value.toByte
    bytes(at + 1) = (value >> 8).toByte
    bytes(at + 2) = (value >> 16).toByte
    bytes(at + 3) = (value >> 24).toByte
  }
}

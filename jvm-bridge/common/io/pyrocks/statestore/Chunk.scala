package io.pyrocks.statestore

/**
 * A worker's chunk of (key, value) pairs, as the worker packs it (`chunks.py`; the layout
 * in protocol.py): `[flags u8]`; with `Uniform`, `[key length u32][value length u32]` once,
 * then per pair `[key][value]`; otherwise per pair `[key length u32][value length u32][key]
 * [value]`; big-endian. `More`: the scan goes on after it.
 */
object Chunk {
  val More = 0x01
  val Uniform = 0x02
  private val Lengths = 8 // a key's and a value's length, u32 each

  def more(chunk: Array[Byte]): Boolean = (chunk(0) & More) != 0

  /** The pairs of a chunk, one at a time (`advance`), each a slice of it. A chunk whose
   * lengths do not add up to its size fails here, before a row points past its pairs. */
  final class Cursor(chunk: Array[Byte]) {
    private val uniform = (chunk(0) & Uniform) != 0
    private val sameKey = if (uniform) lengthAt(1) else 0
    private val sameValue = if (uniform) lengthAt(5) else 0
    private var position = if (uniform) 1 + Lengths else 1 // of the next pair's first byte
    var keyAt = 0
    var keyLength = 0
    var valueAt = 0
    var valueLength = 0
    if (uniform && (sameKey.toLong + sameValue == 0 || chunk.length < position ||
        (chunk.length - position) % (sameKey.toLong + sameValue) != 0)) {
      malformed(s"its pairs of $sameKey + $sameValue bytes do not fill its " +
        s"${chunk.length - position} bytes")
    }

    def advance(): Boolean = position < chunk.length && {
      if (uniform) {
        keyAt = position
        keyLength = sameKey
        valueLength = sameValue
      } else {
        keyAt = position + Lengths
        keyLength = lengthAt(position)
        valueLength = lengthAt(position + 4)
      }
      valueAt = keyAt + keyLength
      val end = valueAt.toLong + valueLength
      if (keyLength < 0 || valueLength < 0 || end > chunk.length) {
        malformed(s"a pair at byte $position runs past its end (${chunk.length} bytes)")
      }
      position = end.toInt
      true
    }

    private def lengthAt(at: Int): Int = {
      if (at + 4 > chunk.length) malformed(s"it ends inside the lengths at byte $at")
      (chunk(at) & 0xff) << 24 | (chunk(at + 1) & 0xff) << 16 | (chunk(at + 2) & 0xff) << 8 |
        (chunk(at + 3) & 0xff)
    }

    private def malformed(what: String): Nothing =
      throw new IllegalStateException(s"a chunk of pairs from the worker is malformed: $what")
  }
}

package io.pyrocks.statestore

import java.nio.ByteOrder

import org.apache.spark.unsafe.Platform

/**
 * A value of whole 8-byte words, each kept without its high zero bytes: `[words u8][a nibble
 * per word, the first word's in the low half of the first byte: how many of its bytes are
 * kept, 0-8][the kept bytes, word after word, low byte first]`. A word is a long in the
 * machine's order, as Spark's `UnsafeRow` reads its slots (the packed form never leaves the
 * JVM), read and written through `Platform` as `FixedWidthKeys` moves slots: the eviction
 * scan of session windows unpacks every value of the state every batch.
 *
 * Spark's rows are such words, and mostly zero bytes: a null bitset, small counts and ids,
 * timestamps in 7 bytes, offset-and-size words. A session window's 56-byte value (user, the
 * window's offset and size, count, then the window's bitset, start and end) packs into 28,
 * which is what lets the read cache hold seven of the eight stores of 20M sessions in its
 * default budget where five did (docs/benchmarks.md).
 *
 * Invariant, enforced by `packedLength`: a value is packed only if that makes it shorter, so
 * a value nothing can be saved on is never made longer.
 */
private[statestore] object WordPacking {
  private val MaxWords = 255
  private val Base = Platform.BYTE_ARRAY_OFFSET
  // Where a long read at the kept bytes has them as its low bytes: one read a word
  // (`unpackWhole`).
  private val LittleEndian = ByteOrder.nativeOrder() == ByteOrder.LITTLE_ENDIAN

  /** How long `value` is packed, or -1 if it is not to be packed: not whole words, more
   * than `MaxWords` of them, or no shorter packed. */
  def packedLength(value: Array[Byte]): Int = {
    val words = value.length / 8
    if (value.length % 8 != 0 || words == 0 || words > MaxWords) -1
    else {
      var length = headBytes(words)
      var i = 0
      while (i < words) {
        length += keptBytes(word(value, 8 * i))
        i += 1
      }
      if (length < value.length) length else -1
    }
  }

  /** Writes `value` packed at `at` of `out`, which has room for `packedLength(value)`. */
  def pack(value: Array[Byte], out: Array[Byte], at: Int): Unit = {
    val words = value.length / 8
    out(at) = words.toByte
    java.util.Arrays.fill(out, at + 1, at + headBytes(words), 0.toByte)
    var to = at + headBytes(words)
    var i = 0
    while (i < words) {
      val w = word(value, 8 * i)
      val kept = keptBytes(w)
      out(at + 1 + i / 2) = (out(at + 1 + i / 2) | (kept << (4 * (i % 2)))).toByte
      var b = 0
      while (b < kept) {
        out(to + b) = (w >>> (8 * b)).toByte
        b += 1
      }
      to += kept
      i += 1
    }
  }

  /** The length of the value packed at `at`, unpacked. */
  def unpackedLength(bytes: Array[Byte], at: Int): Int = 8 * (bytes(at) & 0xff)

  /** The value packed at `at`, in an array of its own. */
  def unpack(bytes: Array[Byte], at: Int): Array[Byte] = {
    val out = new Array[Byte](unpackedLength(bytes, at))
    unpackInto(bytes, at, out, 0)
    out
  }

  /** Writes the value packed at `at` unpacked at `outAt` of `out`. */
  private def unpackInto(bytes: Array[Byte], at: Int, out: Array[Byte], outAt: Int): Unit = {
    val words = bytes(at) & 0xff
    val from = at + headBytes(words)
    // Every word read whole, 8 bytes at once, stays inside `bytes`: what a record in a page
    // almost always is (the last bytes of a page, or another byte order, go a byte at a time).
    if (LittleEndian && from + 8 * words + 8 <= bytes.length) unpackWhole(bytes, at, out, outAt)
    else {
      var next = from
      var i = 0
      while (i < words) {
        val kept = (bytes(at + 1 + i / 2) >>> (4 * (i % 2))) & 0xf
        Platform.putLong(out, Base + outAt + 8L * i, readByBytes(bytes, next, kept))
        next += kept
        i += 1
      }
    }
  }

  /** `unpackInto` reading each word as a long and masking off what is not its own: the
   * eviction scan of session windows unpacks every value of the state every batch. */
  private def unpackWhole(bytes: Array[Byte], at: Int, out: Array[Byte], outAt: Int): Unit = {
    val words = bytes(at) & 0xff
    var from = Base + at + headBytes(words)
    var to = Base + outAt
    val end = to + 8L * words
    var head = at + 1
    while (to < end) {
      val nibbles = bytes(head)
      val low = nibbles & 0xf
      Platform.putLong(out, to, Platform.getLong(bytes, from) & Masks(low))
      from += low
      to += 8
      if (to < end) {
        val high = (nibbles >>> 4) & 0xf
        Platform.putLong(out, to, Platform.getLong(bytes, from) & Masks(high))
        from += high
        to += 8
      }
      head += 1
    }
  }

  // The low `kept` bytes of a word, by `kept` (0-8).
  private val Masks: Array[Long] = Array.tabulate(9)(k => if (k == 8) -1L else (1L << (8 * k)) - 1)

  /**
   * Where a scan unpacks its values: side by side in chunks it allocates, so a value costs
   * its bytes and not an array of its own (a full scan unpacks millions). Chunks double from
   * `FirstChunkBytes` to `ChunkBytes`: most scans are of one prefix's few keys. A chunk's
   * bytes never change once written: rows may point into them for good.
   */
  final class Arena {
    private var chunk: Array[Byte] = Array.emptyByteArray
    private var end = 0
    /** The chunk the last value went to, and where in it. */
    var bytes: Array[Byte] = chunk
    var at = 0

    /** Unpacks the value packed at `from` of `packed` into `bytes` at `at`. */
    def unpack(packed: Array[Byte], from: Int): Unit = {
      val length = unpackedLength(packed, from)
      if (end + length > chunk.length) {
        val grown = math.min(ChunkBytes, math.max(FirstChunkBytes, 2 * chunk.length))
        chunk = new Array[Byte](math.max(grown, length))
        end = 0
      }
      unpackInto(packed, from, chunk, end)
      bytes = chunk
      at = end
      end += length
    }
  }

  private val FirstChunkBytes = 256
  private val ChunkBytes = 64 << 10

  /** The word whose low `kept` bytes are at `from`, read a byte at a time (`pack`'s
   * inverse, whatever the machine's order and however near the array's end). */
  private def readByBytes(bytes: Array[Byte], from: Int, kept: Int): Long = {
    var w = 0L
    var b = kept - 1
    while (b >= 0) {
      w = (w << 8) | (bytes(from + b) & 0xffL)
      b -= 1
    }
    w
  }

  private def word(value: Array[Byte], at: Int): Long = Platform.getLong(value, Base + at)

  private def keptBytes(w: Long): Int = 8 - java.lang.Long.numberOfLeadingZeros(w) / 8

  private def headBytes(words: Int): Int = 1 + (words + 1) / 2
}

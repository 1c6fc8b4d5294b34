package io.pyrocks.statestore

import java.nio.ByteBuffer

/**
 * Streams a scan from the worker in chunks; the worker holds the RocksDB iterator. With
 * `onEnd`, it keeps what it returns (up to `ChunkedScan.MaxKeptBytes`) and hands it over if
 * the scan runs to its end: that is how the read cache learns a prefix listing.
 */
final class ChunkedScan(
    provider: PyRocksStateStoreProvider,
    iteratorId: Int,
    mode: Byte,
    cf: Array[Byte],
    a: Array[Byte],
    b: Array[Byte],
    onEnd: Option[Seq[(Array[Byte], Array[Byte])] => Unit] = None) extends KeyValueScan {

  private var chunk: Array[Byte] = open()
  private var more: Boolean = chunk(0) == 1
  private var position = 1 // of the next pair in `chunk`
  private var closed = false
  var keyAt = 0
  var keyLength = 0
  var valueAt = 0
  var valueLength = 0
  override def keyBytes: Array[Byte] = chunk
  override def valueBytes: Array[Byte] = chunk

  private def open(): Array[Byte] = {
    val body = ByteBuffer.allocate(4 + 1 + 2 + cf.length + 4 + a.length + 4 + b.length)
      .putInt(iteratorId).put(mode).putShort(cf.length.toShort).put(cf)
      .putInt(a.length).put(a).putInt(b.length).put(b).array()
    provider.request(Wire.IterOpen, body)
  }

  private var kept = onEnd.map(_ => scala.collection.mutable.ArrayBuffer.empty[
    (Array[Byte], Array[Byte])])
  private var keptBytes = 0L

  override def advance(): Boolean = {
    if (position >= chunk.length && more && !closed) {
      chunk = provider.request(Wire.IterNext, ByteBuffer.allocate(4).putInt(iteratorId).array())
      more = chunk(0) == 1
      position = 1
    }
    if (position >= chunk.length) {
      handOver()
      false
    } else {
      keyAt = position + ChunkedScan.PairHead
      keyLength = ChunkedScan.keyLength(chunk, keyAt)
      valueLength = ChunkedScan.valueLength(chunk, keyAt)
      valueAt = keyAt + keyLength
      position = valueAt + valueLength
      kept.foreach { buf =>
        keptBytes += keyLength + valueLength
        if (keptBytes <= ChunkedScan.MaxKeptBytes) buf += ((key(), value())) else kept = None
      }
      true
    }
  }

  private def handOver(): Unit = if (!more) for (f <- onEnd; pairs <- kept) {
    kept = None
    f(pairs.toSeq)
  }

  /** Lets the worker drop its iterator early when the caller stops before the end. */
  def close(): Unit = if (!closed) {
    closed = true
    if (more) provider.tell(Wire.IterClose, ByteBuffer.allocate(4).putInt(iteratorId).array())
  }
}

object ChunkedScan {
  /** Larger listings are not kept by the read cache (PrefixRecord): such a scan just streams. */
  val MaxKeptBytes: Long = PrefixRecord.MaxBytes

  /** A worker's chunk is [more u8], then per pair [key length u32][value length u32][key]
   * [value], big-endian, as the worker packs it (protocol.py): the lengths sit `PairHead`
   * bytes before the key. */
  val PairHead = 8

  def keyLength(chunk: Array[Byte], keyAt: Int): Int = lengthAt(chunk, keyAt - PairHead)
  def valueLength(chunk: Array[Byte], keyAt: Int): Int = lengthAt(chunk, keyAt - 4)

  private def lengthAt(chunk: Array[Byte], at: Int): Int =
    (chunk(at) & 0xff) << 24 | (chunk(at + 1) & 0xff) << 16 | (chunk(at + 2) & 0xff) << 8 |
      (chunk(at + 3) & 0xff)
}

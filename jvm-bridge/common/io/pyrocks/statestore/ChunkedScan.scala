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
  private var more: Boolean = Chunk.more(chunk)
  private var cursor = new Chunk.Cursor(chunk)
  private var closed = false
  override def keyBytes: Array[Byte] = chunk
  override def valueBytes: Array[Byte] = chunk
  override def keyAt: Int = cursor.keyAt
  override def keyLength: Int = cursor.keyLength
  override def valueAt: Int = cursor.valueAt
  override def valueLength: Int = cursor.valueLength

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
    var found = cursor.advance()
    while (!found && more && !closed) {
      chunk = provider.request(Wire.IterNext, ByteBuffer.allocate(4).putInt(iteratorId).array())
      more = Chunk.more(chunk)
      cursor = new Chunk.Cursor(chunk)
      found = cursor.advance()
    }
    if (!found) {
      handOver()
      false
    } else {
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
}

package io.pyrocks.statestore

import java.io.IOException
import java.nio.ByteBuffer
import java.nio.channels.SocketChannel
import java.nio.charset.StandardCharsets.UTF_8

/** Request types and record ops; the same numbers as `state_store/protocol.py` and `records.py`. */
object Wire {
  val Open: Byte = 1
  val Load: Byte = 2
  val Writes: Byte = 3
  val Get: Byte = 4
  val IterOpen: Byte = 5
  val IterNext: Byte = 6
  val IterClose: Byte = 7
  val Commit: Byte = 8
  val Abort: Byte = 9
  val Metrics: Byte = 10
  val Maintain: Byte = 11
  val Close: Byte = 12
  val DropCf: Byte = 13
  val ListCf: Byte = 14
  val Finish: Byte = 15

  val OpPut: Byte = 1
  val OpDelete: Byte = 2
  val OpMerge: Byte = 3
  val OpDeleteRange: Byte = 4
  val OpCreateCf: Byte = 5
  /** Op flags: the shim knew whether the key existed before the record (and whether it did). */
  val Known: Int = 0x80
  val Existed: Int = 0x40

  val ScanAll: Byte = 0
  val ScanPrefix: Byte = 1
  val ScanRange: Byte = 2

  val DefaultCf = "default"
  val StatusOk = 0
}

/**
 * One connection to a worker, serving one store. Writes are appended to an open WRITES
 * frame and shipped without waiting for an answer once `writeBatchBytes` accumulate; any
 * request that needs an answer first ships the buffered writes in the same socket write,
 * so the worker applies them before answering: a get always sees the store's own writes.
 *
 * Not thread-safe: the provider serialises callers.
 */
final class Connection(channel: SocketChannel, worker: WorkerProcess, writeBatchBytes: Int) {
  import Wire._

  private var out = new Array[Byte](writeBatchBytes + 4096)
  private var outLen = 0
  private var writesFrameStart = -1 // start of the open WRITES frame in `out`, or -1
  private val header = ByteBuffer.allocate(5)
  @volatile private var broken: Option[String] = None

  def isBroken: Boolean = broken.isDefined

  // ---- writes (no answer) --------------------------------------------------------------

  def write(op: Byte, cf: String, key: Array[Byte], value: Array[Byte]): Unit = {
    val cfBytes = cfName(cf)
    val recordSize = 1 + 2 + cfBytes.length + 4 + key.length + 4 + value.length
    if (writesFrameStart < 0) {
      ensure(5 + recordSize)
      writesFrameStart = outLen
      outLen += 5
      out(writesFrameStart + 4) = Writes
    } else {
      ensure(recordSize)
    }
    out(outLen) = op; outLen += 1
    putShort(cfBytes.length); putBytes(cfBytes)
    putInt(key.length); putBytes(key)
    putInt(value.length); putBytes(value)
    if (outLen >= writeBatchBytes) flush()
  }

  /** Closes the open WRITES frame and sends everything buffered. */
  def flush(): Unit = {
    closeWritesFrame()
    if (outLen > 0) {
      send(ByteBuffer.wrap(out, 0, outLen))
      outLen = 0
      if (out.length > writeBatchBytes * 4) out = new Array[Byte](writeBatchBytes + 4096)
    }
  }

  private def closeWritesFrame(): Unit = if (writesFrameStart >= 0) {
    ByteBuffer.wrap(out, writesFrameStart, 4).putInt(outLen - writesFrameStart - 4)
    writesFrameStart = -1
  }

  // ---- requests ------------------------------------------------------------------------

  /** Sends a request behind any buffered writes and returns the body of its answer. */
  def request(kind: Byte, body: Array[Byte] = Array.emptyByteArray): Array[Byte] = {
    enqueue(kind, body)
    flush()
    readResponse(kind)
  }

  /** A request that has no answer (ITER_CLOSE). */
  def tell(kind: Byte, body: Array[Byte]): Unit = enqueue(kind, body)

  private def enqueue(kind: Byte, body: Array[Byte]): Unit = {
    closeWritesFrame()
    ensure(5 + body.length)
    putInt(body.length + 1)
    out(outLen) = kind; outLen += 1
    putBytes(body)
  }

  private def readResponse(kind: Byte): Array[Byte] = {
    header.clear()
    readFully(header)
    header.flip()
    val length = header.getInt()
    val status = header.get()
    val body = ByteBuffer.allocate(length - 1)
    readFully(body)
    if (status != StatusOk) {
      throw new PyRocksStoreException(new String(body.array(), UTF_8), kind)
    }
    body.array()
  }

  private def readFully(buf: ByteBuffer): Unit = guard {
    while (buf.hasRemaining) {
      if (channel.read(buf) < 0) throw new IOException("connection closed by the worker")
    }
  }

  private def send(buf: ByteBuffer): Unit = guard {
    while (buf.hasRemaining) channel.write(buf)
  }

  /** I/O failure means the worker is gone or unusable: say which, and never reuse this. */
  private def guard[T](body: => T): T = {
    broken.foreach(reason => throw new WorkerFailedException(reason))
    try body catch {
      case e: IOException =>
        val reason = s"lost the connection to ${worker.describeFailure}"
        broken = Some(reason)
        close()
        throw new WorkerFailedException(reason, e)
    }
  }

  def close(): Unit = try channel.close() catch { case _: IOException => }

  // ---- buffer helpers ------------------------------------------------------------------

  private def ensure(extra: Int): Unit = if (outLen + extra > out.length) {
    out = java.util.Arrays.copyOf(out, math.max(out.length * 2, outLen + extra))
  }

  private def putInt(v: Int): Unit = {
    out(outLen) = (v >>> 24).toByte; out(outLen + 1) = (v >>> 16).toByte
    out(outLen + 2) = (v >>> 8).toByte; out(outLen + 3) = v.toByte
    outLen += 4
  }

  private def putShort(v: Int): Unit = {
    out(outLen) = (v >>> 8).toByte; out(outLen + 1) = v.toByte
    outLen += 2
  }

  private def putBytes(bytes: Array[Byte]): Unit = {
    System.arraycopy(bytes, 0, out, outLen, bytes.length)
    outLen += bytes.length
  }

  private def cfName(cf: String): Array[Byte] =
    if (cf == DefaultCf) Array.emptyByteArray else cf.getBytes(UTF_8)
}

/** An error the worker reported for a request: the message names the store and version. */
class PyRocksStoreException(message: String, val requestType: Byte)
  extends RuntimeException(message)

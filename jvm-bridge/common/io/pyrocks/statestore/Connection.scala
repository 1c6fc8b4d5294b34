package io.pyrocks.statestore

import java.io.IOException
import java.nio.ByteBuffer
import java.nio.channels.{ClosedByInterruptException, SocketChannel}
import java.nio.charset.StandardCharsets.UTF_8
import java.util.concurrent.atomic.AtomicLong

/** Request types and record ops: the same numbers as `state_store/runtime/protocol.py` and
 * `state_store/format/records.py`. */
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
  val LoadEmpty: Byte = 16
  val LoadFromSnapshot: Byte = 17
  val ReadAhead: Byte = 18
  val EndStores: Byte = 19
  /** Finish's body when the store closes after it (protocol.CLOSING). */
  val Closing: Byte = 1

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
  val ScanChanges: Byte = 3

  val DefaultCf = "default"
  val StatusOk = 0

  private val Names = Array("?", "OPEN", "LOAD", "WRITES", "GET", "ITER_OPEN", "ITER_NEXT",
    "ITER_CLOSE", "COMMIT", "ABORT", "METRICS", "MAINTAIN", "CLOSE", "DROP_CF", "LIST_CF",
    "FINISH", "LOAD_EMPTY", "LOAD_FROM_SNAPSHOT", "READ_AHEAD", "END_STORES")

  /** The request's name in `state_store/runtime/protocol.py`, for error messages. */
  def name(kind: Byte): String =
    if (kind > 0 && kind < Names.length) Names(kind) else s"request type $kind"
}

/**
 * One connection to a worker, serving one store. Writes are appended to an open WRITES
 * frame and shipped without waiting for an answer once `writeBatchBytes` accumulate; any
 * request that needs an answer first ships the buffered writes in the same socket write,
 * so the worker applies them before answering: a get always sees the store's own writes.
 *
 * Every exchange with the worker (a request and its answer, or a shipment of writes) has a
 * deadline of `timeoutNanos` (an END_STORES, one per store it ends), kept by
 * `RequestWatchdog` from `startedAt` so that the hot path pays no syscall for it: past it,
 * the worker is killed (a hung worker would hang every store it serves) and the caller
 * fails with a `WorkerTimeoutException`.
 *
 * A connection that failed once is `broken` for good: its stream may hold half a frame.
 * Not thread-safe: the provider serialises callers.
 */
final class Connection(
    channel: SocketChannel,
    worker: WorkerHandle,
    writeBatchBytes: Int,
    timeoutNanos: Long,
    store: String) {
  import Wire._
  import Connection._

  private var out = new Array[Byte](writeBatchBytes + 4096)
  private var outLen = 0
  private var writesFrameStart = -1 // start of the open WRITES frame in `out`, or -1
  private val header = ByteBuffer.allocate(5)
  @volatile private var broken: Option[String] = None
  /** When the exchange in flight started (System.nanoTime), Idle, or Expired once the
   * watchdog has claimed it: whoever moves it off a start time owns the outcome. */
  private val startedAt = new AtomicLong(Idle)
  @volatile private var inFlight: Byte = 0
  /** The stores the exchange in flight serves: each has a deadline (`allowedNanos`). */
  @volatile private var storesInFlight = 1
  /** The worker's number for this connection's session, from OPEN's answer (END_STORES
   * names sessions by it); set by the provider once the store is open. */
  @volatile private[statestore] var session: Long = 0L

  RequestWatchdog.watch(this)

  def isBroken: Boolean = broken.isDefined

  /** Why this connection can no longer be used, once it cannot. */
  def brokenReason: Option[String] = broken

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
  def flush(): Unit = exchange(Writes)(sendBuffered())

  private def sendBuffered(): Unit = {
    closeWritesFrame()
    if (outLen > 0) {
      val buf = ByteBuffer.wrap(out, 0, outLen)
      while (buf.hasRemaining) channel.write(buf)
      outLen = 0
      if (out.length > writeBatchBytes * 4) out = new Array[Byte](writeBatchBytes + 4096)
    }
  }

  private def closeWritesFrame(): Unit = if (writesFrameStart >= 0) {
    ByteBuffer.wrap(out, writesFrameStart, 4).putInt(outLen - writesFrameStart - 4)
    writesFrameStart = -1
  }

  // ---- requests ------------------------------------------------------------------------

  /** Sends a request behind any buffered writes and returns the body of its answer. One
   * that ends several stores (END_STORES, one after another) has as many deadlines. */
  def request(kind: Byte, body: Array[Byte] = Array.emptyByteArray, stores: Int = 1): Array[Byte] = {
    enqueue(kind, body)
    exchange(kind, math.max(1, stores)) {
      sendBuffered()
      readResponse(kind)
    }
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

  private def readFully(buf: ByteBuffer): Unit = {
    while (buf.hasRemaining) {
      if (channel.read(buf) < 0) throw new IOException("connection closed by the worker")
    }
  }

  // ---- failures ------------------------------------------------------------------------

  /**
   * Runs one exchange under the deadline. An I/O failure breaks the connection, and says
   * why: the watchdog's deadline, an interrupt of the calling thread (Spark cancelling the
   * task: the worker is fine, and drops this session's uncommitted writes when it sees the
   * connection close), or a worker that is gone.
   */
  private def exchange[T](kind: Byte, stores: Int = 1)(body: => T): T = {
    broken.foreach(reason => throw new WorkerFailedException(reason))
    inFlight = kind
    storesInFlight = stores // before the start: the watchdog reads the start first
    val start = System.nanoTime()
    startedAt.set(start)
    val result = try body catch {
      case e: IOException =>
        val timedOut = !startedAt.compareAndSet(start, Idle)
        close()
        throw failure(kind, e, timedOut)
      case e: Throwable => // an error answer: the exchange itself is complete
        end(kind, start)
        throw e
    }
    end(kind, start)
    result
  }

  /** Answered, but maybe past the deadline: then the watchdog has already killed the worker. */
  private def end(kind: Byte, start: Long): Unit =
    if (!startedAt.compareAndSet(start, Idle)) throw failure(kind, null, timedOut = true)

  private def failure(kind: Byte, e: IOException, timedOut: Boolean): RuntimeException = {
    if (timedOut) {
      val reason = timeoutMessage(kind)
      broken = Some(reason)
      new WorkerTimeoutException(reason, e)
    } else if (e.isInstanceOf[ClosedByInterruptException] || Thread.currentThread.isInterrupted) {
      val reason = s"${name(kind)} for $subject was interrupted; the connection to pyrocks " +
        s"worker ${worker.index} (pid ${worker.pid}) was closed, so the worker drops this " +
        "store's uncommitted writes"
      broken = Some(reason)
      new RequestInterruptedException(reason, e)
    } else {
      val reason = s"lost the connection to ${worker.describeFailure} during ${name(kind)} " +
        s"for $subject"
      broken = Some(reason)
      new WorkerFailedException(reason, e)
    }
  }

  private def timeoutMessage(kind: Byte): String =
    s"pyrocks worker ${worker.index} (pid ${worker.pid}) did not answer ${name(kind)} for " +
      s"$subject within ${allowedNanos / 1000000000L} s (${LaunchOptions.Prefix}" +
      "requestTimeoutSeconds); the worker was killed and is replaced at the next connection"

  /** How long the exchange in flight may take. */
  private def allowedNanos: Long = timeoutNanos * storesInFlight

  /** Whom the exchange in flight serves, for its failures: this connection's store, or the
   * count of stores a request on its connection ends (each failure line of theirs starts
   * with its own name, so naming only the carrier's would mislead). */
  private def subject: String =
    if (storesInFlight == 1) store else s"$storesInFlight stores (sent on the connection of $store)"

  /**
   * Called by the watchdog: if the exchange in flight is past its deadline, claims it, kills
   * the worker and closes the channel (which wakes the blocked caller). Returns when to look
   * again (System.nanoTime), Long.MaxValue once this connection needs no more watching.
   */
  private[statestore] def expireIfLate(now: Long): Long = {
    val start = startedAt.get()
    if (start == Expired || !channel.isOpen) Long.MaxValue
    else if (start == Idle) now + timeoutNanos // nothing in flight can end before this
    else if (now - start < allowedNanos) start + allowedNanos
    else if (!startedAt.compareAndSet(start, Expired)) now // it just ended: look again
    else {
      broken = Some(timeoutMessage(inFlight))
      worker.kill()
      close()
      Long.MaxValue
    }
  }

  private[statestore] def workerPid: Long = worker.pid

  /** Whether this side of the connection is still open (for tests and diagnostics). */
  private[statestore] def isOpen: Boolean = channel.isOpen

  /** The request in flight, if any (for tests and diagnostics). */
  private[statestore] def requestInFlight: Option[String] =
    if (startedAt.get() == Idle) None else Some(name(inFlight))

  def close(): Unit = {
    try channel.close() catch { case _: IOException => }
    RequestWatchdog.unwatch(this)
  }

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

object Connection {
  private val Idle = Long.MinValue
  private val Expired = Long.MinValue + 1
}

/** An error the worker reported for a request: the message names the store and version. */
class PyRocksStoreException(message: String, val requestType: Byte)
  extends RuntimeException(message)

/** A request outlived its deadline: the worker was killed, so Spark's retry gets a new one. */
class WorkerTimeoutException(message: String, cause: Throwable = null)
  extends WorkerFailedException(message, cause)

/** The calling thread was interrupted (Spark cancelled the task); the worker is fine. */
class RequestInterruptedException(message: String, cause: Throwable = null)
  extends RuntimeException(message, cause)

/**
 * Keeps every connection's deadline with one daemon thread per JVM, so that a request costs
 * no more than two atomic writes and a clock read for it: the thread sleeps until the
 * earliest moment a request in flight could be late, and expires the late ones.
 */
private[statestore] object RequestWatchdog {
  private val connections = java.util.concurrent.ConcurrentHashMap.newKeySet[Connection]()
  private var thread: Thread = _ // guarded by this

  def watch(c: Connection): Unit = synchronized {
    connections.add(c)
    if (thread == null) {
      thread = new Thread(() => run(), "pyrocks-request-watchdog")
      thread.setDaemon(true)
      thread.start()
    }
    notifyAll() // its deadline may come before the thread's next look
  }

  def unwatch(c: Connection): Unit = connections.remove(c)

  private def run(): Unit = synchronized {
    while (true) {
      val now = System.nanoTime()
      var next = Long.MaxValue
      connections.forEach { c =>
        val at = c.expireIfLate(now)
        if (at == Long.MaxValue) connections.remove(c) else next = math.min(next, at)
      }
      if (next == Long.MaxValue) wait()
      else {
        val millis = (next - System.nanoTime() + 999999) / 1000000
        if (millis > 0) wait(millis)
      }
    }
  }
}

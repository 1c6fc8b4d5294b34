package io.pyrocks.statestore

import java.io.{BufferedReader, File, InputStreamReader, IOException}
import java.net.{StandardProtocolFamily, UnixDomainSocketAddress}
import java.nio.channels.SocketChannel
import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.{Files, Path, Paths}
import java.nio.file.attribute.PosixFilePermissions
import java.util.concurrent.{CompletableFuture, TimeUnit}

import scala.util.control.NonFatal

import org.apache.spark.internal.Logging

/** The task fails with this when a worker is gone; Spark's retry gets a fresh worker. */
class WorkerFailedException(message: String, cause: Throwable = null)
  extends RuntimeException(message, cause)

/**
 * The Python worker processes of this JVM: one pool per distinct `workerSpec` (queries with
 * different worker options, e.g. memoryBoundMB, run side by side, each on its own pool).
 * Workers are an executor-wide resource shared by every store provider with that spec, and
 * they must all go when the JVM goes.
 *
 * Invariants: a pool, once handed out, is stopped only by `shutdown` (application end, JVM
 * exit), never because another query asked for a different one; sockets live in a private
 * directory (mode 0700) created here; a worker's stdin is a pipe from this JVM, so a worker
 * exits when the JVM dies, however it dies.
 */
object WorkerPool extends Logging {
  private val pools = scala.collection.mutable.Map.empty[LaunchOptions.WorkerSpec, WorkerPool]

  def get(opts: LaunchOptions): WorkerPool = synchronized {
    pools.getOrElseUpdate(opts.workerSpec, new WorkerPool(opts))
  }

  /** Stops every worker of every pool; the next `get` starts a new pool. Safe to call more
   * than once. Workers finish their stores first (final snapshots), each given up to its
   * pool's request timeout, all at once. */
  def shutdown(): Unit = {
    val stopping = synchronized {
      val all = pools.values.toList
      pools.clear()
      all
    }
    stopping.foreach(_.beginShutdown())
    stopping.foreach(_.awaitShutdown())
  }

  try {
    Runtime.getRuntime.addShutdownHook(new Thread(() => shutdown(), "pyrocks-pool-shutdown"))
  } catch {
    case _: IllegalStateException => // first touched while the JVM is exiting: nothing to stop
  }
}

final class WorkerPool(val opts: LaunchOptions) extends Logging {
  /** Working copies and logs: under localDir, private to this JVM. */
  val dir: Path = privateDir(Paths.get(opts.localDir))
  /** Socket paths are limited to about 104 bytes, so a long localDir puts them under /tmp. */
  val socketDir: Path =
    if (dir.resolve("w999.sock").toString.getBytes(UTF_8).length <= 100) dir
    else privateDir(Paths.get("/tmp"))

  private def privateDir(parent: Path): Path = {
    Files.createDirectories(parent)
    Files.createTempDirectory(parent, "pyrocks-",
      PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rwx------")))
  }

  private val slots = new Array[WorkerProcess](opts.workers)
  // A slot's lock is held while its worker is checked and, if need be, started (up to the
  // READY wait): a start holds up the tasks of its own slot only, so the slots of a query's
  // first tasks start side by side. `slots` itself is locked only to read or install one.
  private val slotLocks = Array.fill(opts.workers)(new Object)
  @volatile private var closed = false

  def size: Int = slots.length

  /** The slot whose worker serves the stores of `partition`: partitions spread over the
   * slots, so the tasks of a stage run on workers side by side. */
  private def slotOf(partition: Int): Int = math.abs(partition) % size

  /** A new connection to the worker of `partition`'s slot for `store`, starting or replacing
   * the worker if needed; its requests have `requestTimeoutSeconds` each. */
  def connect(partition: Int, writeBatchBytes: Int, requestTimeoutSeconds: Int,
      store: String): Connection =
    running(slotOf(partition)).connect(writeBatchBytes, requestTimeoutSeconds, store)

  /** The live worker of `slot`, started or replaced first if need be. */
  private def running(slot: Int): WorkerProcess = slotLocks(slot).synchronized {
    val existing = installed(slot)
    if (existing != null && existing.isAlive) existing
    else {
      if (existing != null) logWarning(s"replacing ${existing.describe}")
      install(slot, new WorkerProcess(dir, socketDir, slot, opts))
    }
  }

  /** Starts the worker of every slot that partitions `0 until partitions` connect to and
   * that never had one, each on a thread of its own, and returns those slots at once. A slot
   * whose worker died is left to its next task, which replaces it (and says so); a start
   * that fails here is only logged: the slot's first task starts it again and fails with
   * the error. */
  def startAhead(partitions: Int): Seq[Int] = {
    val missing = (0 until partitions).map(slotOf).distinct
      .filter(slot => slots.synchronized(!closed && slots(slot) == null))
    missing.foreach { slot =>
      val starter = new Thread(() => {
        try running(slot) catch {
          case NonFatal(e) => logInfo(s"worker $slot not started ahead: ${e.getMessage}")
        }
      }, s"pyrocks-start-ahead-w$slot")
      starter.setDaemon(true)
      starter.start()
    }
    missing
  }

  private def installed(slot: Int): WorkerProcess = slots.synchronized {
    if (closed) throw shutDown
    slots(slot)
  }

  /** A worker whose start ended after the shutdown began is discarded here: the shutdown
   * stops only the workers installed, once the starts in flight are over. */
  private def install(slot: Int, worker: WorkerProcess): WorkerProcess = slots.synchronized {
    if (closed) {
      worker.discard()
      throw shutDown
    }
    slots(slot) = worker
    worker
  }

  private def shutDown = new WorkerFailedException("the pyrocks worker pool was shut down")

  /** Asks every worker to finish and exit (they work on it in parallel). */
  private def beginShutdown(): Unit = slots.synchronized {
    closed = true
    slots.filter(_ != null).foreach(_.beginStop())
  }

  /** Waits for the workers up to the request timeout, kills what is left, removes files. */
  private def awaitShutdown(): Unit = {
    slotLocks.foreach(_.synchronized {})  // a start in flight ends, discarded by `install`
    val deadline = System.nanoTime() + opts.requestTimeoutSeconds * 1000000000L
    slots.filter(_ != null).foreach(_.awaitStop(deadline))
    deleteRecursively(dir.toFile)
    deleteRecursively(socketDir.toFile)
  }

  private def deleteRecursively(f: File): Unit = {
    Option(f.listFiles()).foreach(_.foreach(deleteRecursively))
    f.delete()
  }
}

/** What a connection knows of its worker: who it is, and how to end it. */
trait WorkerHandle {
  def index: Int
  def pid: Long
  /** Its state and the end of its stderr, for the error of a task that lost it. */
  def describeFailure: String
  /** Kills it at once; the pool replaces it at the next connection. */
  def kill(): Unit
}

/** One `python -m state_store.runtime.worker` process and its socket. */
final class WorkerProcess(poolDir: Path, socketDir: Path, val index: Int, opts: LaunchOptions)
  extends WorkerHandle with Logging {
  private val socketPath = socketDir.resolve(s"w$index.sock")
  private val dataDir = poolDir.resolve(s"w$index")
  private val stderrLog = poolDir.resolve(s"w$index.stderr")
  private val process: Process = start()
  val pid: Long = process.pid()

  private def start(): Process = {
    Files.deleteIfExists(socketPath)
    val builder = new ProcessBuilder(opts.pythonExec, "-m", "state_store.runtime.worker",
      "--socket", socketPath.toString, "--data-dir", dataDir.toString,
      "--log", stderrLog.toString, "--memory-bound-mb", opts.workerMemoryMB.toString)
    if (opts.compactOnCommit) builder.command().add("--compact-on-commit")
    val env = builder.environment()
    opts.pythonPath.foreach { p =>
      env.put("PYTHONPATH", (p +: Option(env.get("PYTHONPATH")).toSeq).mkString(File.pathSeparator))
    }
    // RocksDB's blocks are allocated and freed by different threads (requests, flushes,
    // compactions, uploads), and glibc gives threads arenas of their own, each keeping the
    // memory freed in it: a worker's RSS reached three times its share of memoryBoundMB at
    // 20M keys. One arena keeps it near the bound (5M keys streamed from the workers: 768
    // MiB for both with two arenas, 641 with one, at the same batch speed), and the stop right
    // after a batch is no slower with it (docs/tuning.md, knobs). A user's value is kept.
    env.putIfAbsent("MALLOC_ARENA_MAX", "1")
    builder.redirectError(stderrLog.toFile)
    val proc = try builder.start() catch {
      case e: IOException => throw new WorkerFailedException(
        s"cannot start the pyrocks worker '${opts.pythonExec}' " +
          s"(set ${LaunchOptions.Prefix}pythonExec): ${e.getMessage}", e)
    }
    try awaitReady(proc) catch {
      case e: Throwable =>
        // Whatever ends the wait (an interrupt: Spark cancels the other tasks of a failed
        // stage), the process goes with it: left to finish starting, it would bind this
        // slot's socket after its successor had removed it, and fail that successor with
        // "Address already in use" (or serve beside it, unknown to the pool).
        abandon(proc)
        throw e
    }
    proc
  }

  /** Kills a worker that never became this slot's, and waits until it is gone, even when
   * the waiting thread was interrupted (the interrupt is kept for the caller). */
  private def abandon(proc: Process): Unit = {
    proc.destroyForcibly()
    val interrupted = Thread.interrupted()
    try proc.waitFor(10, TimeUnit.SECONDS)
    finally if (interrupted) Thread.currentThread.interrupt()
  }

  private def awaitReady(proc: Process): Unit = {
    val ready = CompletableFuture.supplyAsync[String](() =>
      new BufferedReader(new InputStreamReader(proc.getInputStream, UTF_8)).readLine())
    val line = try ready.get(120, TimeUnit.SECONDS) catch { case NonFatal(_) => null }
    if (line == null || !line.startsWith("READY")) {
      abandon(proc)
      val stderr = stderrTail()
      throw new WorkerFailedException(s"pyrocks worker '${opts.pythonExec} -m " +
        s"state_store.runtime.worker' did not start (exit code ${exitCode(proc)}): $stderr" +
        importHint(stderr))
    }
  }

  /** Points at the settings only when the worker could not import what it needs: after
   * another failure (a socket, a disk) the hint would send the user the wrong way. */
  private def importHint(stderr: String): String =
    if (!Seq("No module named", "ImportError").exists(stderr.contains)) ""
    else s". Is the state_store package importable by that Python? " +
      s"(${LaunchOptions.Prefix}pythonExec / pythonPath)"

  @volatile private var killed = false

  /** False as soon as it was killed, even before the OS has reaped it. */
  def isAlive: Boolean = !killed && process.isAlive

  def connect(writeBatchBytes: Int, requestTimeoutSeconds: Int, store: String): Connection = {
    val channel = SocketChannel.open(StandardProtocolFamily.UNIX)
    try channel.connect(UnixDomainSocketAddress.of(socketPath)) catch {
      case e: IOException =>
        channel.close()
        throw new WorkerFailedException(s"cannot connect to $describe: ${e.getMessage}", e)
    }
    new Connection(channel, this, writeBatchBytes, requestTimeoutSeconds * 1000000000L, store)
  }

  def describe: String = {
    val state = if (process.isAlive) "running" else s"exited with code ${process.exitValue()}"
    s"pyrocks worker $index (pid $pid, $state)"
  }

  /** Why this worker failed, for the task's error: its state and the end of its stderr. A
   * worker that just closed its socket is given a moment to exit, so its exit code shows. */
  def describeFailure: String = {
    try process.waitFor(2, TimeUnit.SECONDS) catch {
      case _: InterruptedException => Thread.currentThread.interrupt() // keep it for the caller
    }
    s"$describe; stderr: ${stderrTail()}"
  }

  def kill(): Unit = {
    killed = true
    logWarning(s"killing $describe")
    process.destroyForcibly()
  }

  /** Kills a worker that never served (its pool was shut down as it started) and waits
   * until it is gone, so that nothing writes under the pool's directory after its removal. */
  def discard(): Unit = {
    killed = true
    abandon(process)
  }

  private def stderrTail(): String = try {
    val text = new String(Files.readAllBytes(stderrLog), UTF_8).trim
    if (text.isEmpty) "(empty)" else text.takeRight(2000)
  } catch { case NonFatal(_) => "(unavailable)" }

  private def exitCode(proc: Process): String =
    if (proc.isAlive) "none, still running" else proc.exitValue().toString

  /** Closing stdin asks the worker to finish its stores (final snapshots) and exit. */
  def beginStop(): Unit = try process.getOutputStream.close() catch { case NonFatal(_) => }

  /** Waits for the exit `beginStop` asked for until `deadline` (System.nanoTime), then kills. */
  def awaitStop(deadline: Long): Unit = {
    val exited = try process.waitFor(math.max(0L, deadline - System.nanoTime()),
      TimeUnit.NANOSECONDS) catch {
      case _: InterruptedException => Thread.currentThread.interrupt(); false
    }
    if (!exited) {
      logWarning(s"$describe did not finish within ${opts.requestTimeoutSeconds} s " +
        s"(${LaunchOptions.Prefix}requestTimeoutSeconds); killing it")
      process.destroyForcibly()
    }
  }
}

package io.pyrocks.statestore

import java.net.{StandardProtocolFamily, UnixDomainSocketAddress}
import java.nio.channels.{ServerSocketChannel, SocketChannel}
import java.nio.file.Files
import java.util.concurrent.atomic.AtomicInteger

/** Every request to a worker has a deadline; past it the worker is killed and replaced. */
object DeadlineChecks {
  val all: Map[String, Fixture => Unit] = Map(
    "request-deadline-on-silent-server" -> requestDeadlineOnSilentServer,
    "hung-worker-is-killed-and-replaced" -> hungWorkerIsKilledAndReplaced,
    "maintenance-request-has-deadline" -> maintenanceRequestHasDeadline)

  /** The worker side of a connection, as far as the connection can tell. */
  private final class FakeWorker extends WorkerHandle {
    val kills = new AtomicInteger()
    val failureDescriptions = new AtomicInteger()
    override def index: Int = 7
    override def pid: Long = 4242L
    override def describeFailure: String = {
      failureDescriptions.incrementAndGet()
      "fake worker"
    }
    override def kill(): Unit = kills.incrementAndGet()
  }

  /** A server that accepts and never answers: the request fails after its deadline,
   * naming the worker, the request and the store, and the worker is killed. */
  def requestDeadlineOnSilentServer(f: Fixture): Unit = {
    import f._
    // In the JVM's temporary directory, not the work dir: a socket's path has ~104 bytes at
    // most, and the work dir may be deeper than that (as the worker pool's socketDir knows).
    val socket = Files.createTempDirectory("pyrocks-silent-").resolve("silent.sock")
    val server = ServerSocketChannel.open(StandardProtocolFamily.UNIX)
    server.bind(UnixDomainSocketAddress.of(socket))
    val (_, accepted) = inThread("silent server")(server.accept()) // and never reads
    val channel = SocketChannel.open(StandardProtocolFamily.UNIX)
    channel.connect(UnixDomainSocketAddress.of(socket))
    val worker = new FakeWorker
    val conn = new Connection(channel, worker, 1024, 1000000000L, "store S of query Q")
    val timedOut = expectThrows[WorkerTimeoutException](conn.request(Wire.Commit, new Array(8)))
    expect(timedOut.getMessage.startsWith("pyrocks worker 7 (pid 4242) did not answer COMMIT " +
      "for store S of query Q within 1 s") &&
      timedOut.getMessage.contains("requestTimeoutSeconds"), timedOut.getMessage)
    expect(worker.kills.get == 1, s"the late worker was killed ${worker.kills.get} times")
    expect(conn.isBroken, "a connection past its deadline stays usable")
    val next = expectThrows[WorkerFailedException](conn.request(Wire.Get))
    expect(next.getMessage == timedOut.getMessage, s"the next request says: ${next.getMessage}")
    expect(worker.failureDescriptions.get == 0, "a deadline was reported as a dead worker")
    outcome(accepted).foreach(_.close())
    server.close()
    Files.delete(socket)
    Files.delete(socket.getParent)
  }

  /** A frozen worker (SIGSTOP) mid-batch: the commit fails after the deadline naming the
   * worker, the request and the store; the worker is killed, the task's abort is quiet, and
   * the next attempt gets a fresh worker and commits. */
  def hungWorkerIsKilledAndReplaced(f: Fixture): Unit = {
    import f._
    val p = provider(checkpoint("hung"), "requestTimeoutSeconds" -> "5")
    val store = p.getStore(0)
    store.put(key(1), value(1))
    val pid = workerPid(p)
    signal(pid, "STOP")
    val failed = expectThrows[IllegalStateException](store.commit())
    val text = messages(failed)
    expect(text.contains(s"pyrocks worker 0 (pid $pid) did not answer COMMIT for ${p.describe}" +
      " within 5 s"), text)
    expect(Iterator.iterate[Throwable](failed)(_.getCause).takeWhile(_ != null)
      .exists(_.isInstanceOf[WorkerTimeoutException]), s"not a timeout: $text")
    eventually(s"the hung worker $pid is killed")(!isAlive(pid))
    store.abort() // as the task's completion listener does
    val retry = p.getStore(0)
    expect(workerPid(p) != pid, "the hung worker was not replaced")
    retry.put(key(2), value(2))
    retry.commit()
    val v1 = p.getStore(1)
    expect(v1.get(key(1)) == null && valueOf(v1.get(key(2))).contains(2L),
      s"version 1 holds key 1 = ${valueOf(v1.get(key(1)))}, key 2 = ${valueOf(v1.get(key(2)))}")
    v1.abort()
    p.close()
  }

  /** Spark's maintenance thread calls in too: its requests have the same deadline. */
  def maintenanceRequestHasDeadline(f: Fixture): Unit = {
    import f._
    val p = provider(checkpoint("maintain"), "requestTimeoutSeconds" -> "5")
    val store = p.getStore(0)
    store.put(key(1), value(1))
    store.commit()
    val pid = workerPid(p)
    signal(pid, "STOP")
    val failed = expectThrows[WorkerTimeoutException](p.doCleanupMaintenance())
    expect(failed.getMessage.contains(s"(pid $pid) did not answer MAINTAIN for ${p.describe}"),
      failed.getMessage)
    eventually(s"the hung worker $pid is killed")(!isAlive(pid))
    p.close()
  }
}

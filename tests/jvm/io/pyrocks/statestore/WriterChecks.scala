package io.pyrocks.statestore

import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.Files

import scala.jdk.CollectionConverters._

import org.json4s.{DefaultFormats, JString}
import org.json4s.jackson.JsonMethods.parse

import org.apache.spark.sql.SparkSession

/** One writer per working copy; abort and interrupts; what a store tells its worker. */
object WriterChecks {
  val all: Map[String, Fixture => Unit] = Map(
    "second-writer-waits-then-fails" -> secondWriterWaitsThenFails,
    "second-writer-never-mixes-writes" -> secondWriterNeverMixesWrites,
    "reader-waits-for-writer" -> readerWaitsForWriter,
    "abort-always-leaves-store-aborted" -> abortAlwaysLeavesStoreAborted,
    "interrupt-is-not-a-dead-worker" -> interruptIsNotADeadWorker,
    "an-interrupted-start-leaves-no-worker" -> anInterruptedStartLeavesNoWorker,
    "a-slow-start-holds-up-only-its-own-slot" -> aSlowStartHoldsUpOnlyItsOwnSlot,
    "a-local-driver-starts-the-workers-ahead-of-its-tasks" -> workersStartAheadOfLocalTasks,
    "open-spec-names-query-and-writer" -> openSpecNamesQueryAndWriter)

  private def waiting(t: Thread): Boolean =
    t.getState == Thread.State.TIMED_WAITING || !t.isAlive

  /** A second task asking for the store while the first is updating it waits for the
   * request timeout, then fails naming the store and the holder's version. */
  def secondWriterWaitsThenFails(f: Fixture): Unit = {
    import f._
    val p = provider(checkpoint("held"), "requestTimeoutSeconds" -> "5")
    val first = p.getStore(0)
    first.put(key(1), value(1))
    val (_, second) = inThread("second task")(p.getStore(0))
    outcome(second) match {
      case Left(e: IllegalStateException) =>
        expect(e.getMessage.contains(p.describe) && e.getMessage.contains("version=0") &&
          e.getMessage.contains("requestTimeoutSeconds"), s"unclear refusal: ${e.getMessage}")
      case other => throw new AssertionError(s"the second writer got $other while the first " +
        "was updating the store")
    }
    expect(valueOf(first.get(key(1))).contains(1L), "the first writer lost its write")
    first.commit()
    val next = p.getStore(1)
    expect(valueOf(next.get(key(1))).contains(1L), "version 1 lost the first writer's write")
    next.abort()
    p.close()
  }

  /** The second task goes on once the first commits, and loads the version it asked for
   * afresh: no version ever holds writes of both. */
  def secondWriterNeverMixesWrites(f: Fixture): Unit = {
    import f._
    val p = provider(checkpoint("mix"))
    val first = p.getStore(0)
    first.put(key(1), value(1))
    val (thread, second) = inThread("second task") {
      val store = p.getStore(0)
      val sawFirst = valueOf(store.get(key(1)))
      store.put(key(2), value(2))
      store.commit() // loses the race to the first writer's version 1
      sawFirst
    }
    eventually("the second task waits for the first")(waiting(thread))
    first.put(key(3), value(3))
    first.commit()
    outcome(second) match {
      case Right(sawFirst) => expect(sawFirst.isEmpty,
        s"the second writer of version 0 saw the first writer's key 1 = $sawFirst")
      case Left(e) => throw new AssertionError(s"the second writer failed: $e", e)
    }
    val v1 = p.getStore(1)
    val got = (1L to 3L).map(k => k -> valueOf(v1.get(key(k))))
    expect(got == Seq(1L -> Some(1L), 2L -> None, 3L -> Some(3L)),
      s"version 1 should hold exactly the first writer's keys 1 and 3: $got")
    v1.abort()
    p.close()
  }

  /** A read store loads the same working copy: it waits for the writer too, and a thread
   * holding the writer is told at once rather than waiting for itself. */
  def readerWaitsForWriter(f: Fixture): Unit = {
    import f._
    val p = provider(checkpoint("reader"))
    val writer = p.getStore(0)
    writer.put(key(1), value(1))
    val own = expectThrows[IllegalStateException](p.getReadStore(0))
    expect(own.getMessage.contains("same thread"), own.getMessage)
    val (thread, read) = inThread("reading task") {
      val reader = p.getReadStore(0)
      valueOf(reader.get(key(1)))
    }
    eventually("the reader waits for the writer")(waiting(thread))
    expect(valueOf(writer.get(key(1))).contains(1L), "a reader rebuilt the writer's working copy")
    writer.abort()
    outcome(read) match {
      case Right(seen) => expect(seen.isEmpty, s"the reader of version 0 saw aborted key 1 = $seen")
      case Left(e) => throw new AssertionError(s"the reader failed: $e", e)
    }
    p.close()
  }

  /** Abort over a dead worker neither throws nor leaves the store UPDATING or held. */
  def abortAlwaysLeavesStoreAborted(f: Fixture): Unit = {
    import f._
    val p = provider(checkpoint("abort"), "requestTimeoutSeconds" -> "60")
    val store = p.getStore(0)
    store.put(key(1), value(1))
    val pid = workerPid(p)
    signal(pid, "KILL")
    eventually(s"worker $pid exits")(!isAlive(pid))
    store.abort()
    expect(!store.hasCommitted, "an aborted store has committed")
    val refused = expectThrows[IllegalStateException](store.put(key(2), value(2)))
    expect(refused.getMessage.contains("Aborted"), refused.getMessage)
    val (_, next) = inThread("next task")(p.getStore(0))
    outcome(next) match {
      case Right(again) =>
        expect(again.get(key(1)) == null, "the aborted write of key 1 survived")
        again.abort()
      case Left(e) => throw new AssertionError(s"the store stayed held after abort: $e", e)
    }
    p.close()
  }

  /**
   * Spark cancels a task by interrupting its thread, here in the middle of a request to a
   * (frozen, so the request is surely in flight) worker: the task sees an interrupt, not a
   * dead worker, its abort neither throws nor waits, and the worker, which is fine, drops
   * the session's uncommitted writes once it sees the connection close.
   */
  def interruptIsNotADeadWorker(f: Fixture): Unit = {
    import f._
    val p = provider(checkpoint("interrupt"), "readCacheMB" -> "0")
    val store = p.getStore(0)
    store.put(key(1), value(1))
    val pid = workerPid(p)
    signal(pid, "STOP")
    val (task, failures) = inThread("task") {
      val during = try { store.get(key(2)); None } catch { case e: Throwable => Some(e) }
      val inAbort = try { store.abort(); None } catch { case e: Throwable => Some(e) }
      (during, inAbort)
    }
    try {
      eventually("the task's get is in flight")(
        p.currentConnection.exists(_.requestInFlight.contains("GET")))
      task.interrupt()
      val (during, inAbort) = outcome(failures).fold(e => throw e, identity)
      during match {
        case Some(e: RequestInterruptedException) =>
          expect(e.getMessage.contains("interrupted") && e.getMessage.contains(p.describe) &&
            !e.getMessage.contains("lost the connection"), e.getMessage)
        case other => throw new AssertionError(s"an interrupted get gave $other", other.orNull)
      }
      expect(inAbort.isEmpty, s"abort after the interrupt threw ${inAbort.get}")
    } finally signal(pid, "CONT")
    val refused = expectThrows[IllegalStateException](store.put(key(2), value(2)))
    expect(refused.getMessage.contains("Aborted"), refused.getMessage)
    val again = p.getStore(0)
    expect(workerPid(p) == pid && isAlive(pid), "the interrupt cost the worker its life")
    expect(again.get(key(1)) == null, "the interrupted store's write of key 1 survived")
    again.abort()
    p.close()
  }

  /**
   * Spark cancels the other tasks of a failed stage, one of them while its worker is still
   * starting: the task sees the interrupt, and the process it started is gone by then. Left
   * to finish starting, it would bind the slot's socket after the next start had removed
   * it, and that start would fail with "Address already in use". The next start of the slot
   * gets a worker that commits.
   */
  def anInterruptedStartLeavesNoWorker(f: Fixture): Unit = {
    import f._
    // The first start writes its pid, then sleeps before it becomes the worker: the
    // interrupt surely meets a start in progress. Later starts go straight on.
    val pidFile = work.resolve("first-start.pid")
    val slowFirst = wrapperPython("slow-first-start",
      s"pid_file = '$pidFile'",
      "if not os.path.exists(pid_file):",
      "    with open(pid_file + '.tmp', 'w') as out:",
      "        out.write(str(os.getpid()))",
      "    os.rename(pid_file + '.tmp', pid_file)",
      "    time.sleep(60)")
    val options = Seq("pythonExec" -> slowFirst.toString)
    val (task, started) = inThread("task cancelled while its worker starts") {
      provider(checkpoint("cancelled"), options: _*).getStore(0) // its load starts the worker
    }
    eventually("the first worker process started")(Files.exists(pidFile))
    task.interrupt()
    outcome(started) match {
      case Left(e) if Iterator.iterate(e)(_.getCause).takeWhile(_ != null)
          .exists(_.isInstanceOf[InterruptedException]) =>
      case other => throw new AssertionError(s"an interrupted start gave $other")
    }
    val first = new String(Files.readAllBytes(pidFile), UTF_8).trim.toLong
    expect(!isAlive(first), s"the worker whose start was interrupted (pid $first) lives on")
    val next = provider(checkpoint("next"), options: _*)
    val store = next.getStore(0)
    expect(workerPid(next) != first, "the next start reused the abandoned process")
    store.put(key(1), value(1))
    store.commit()
    next.close()
  }

  /**
   * A query's first tasks start their slots' workers side by side: a start (the Python
   * process, up to its READY line) holds up the tasks of its own slot only, and a provider's
   * `init` (which Spark runs under one lock for the executor) waits for none. Here slot 0's
   * worker cannot start until the check lets it; its provider is created without waiting,
   * and a task of slot 1 meanwhile gets a worker and commits. Under one lock for the pool,
   * slot 1 waited for slot 0's start, which ended at the READY wait's limit (120 s) as a
   * failure; with the connection in `init`, creating slot 0's provider did.
   */
  def aSlowStartHoldsUpOnlyItsOwnSlot(f: Fixture): Unit = {
    import f._
    val pidFile = work.resolve("slot-0-start.pid")
    val gate = work.resolve("slot-0-may-start")
    val gated = wrapperPython("gated-slot-0",
      "socket = sys.argv[sys.argv.index('--socket') + 1]",
      "if os.path.basename(socket) == 'w0.sock':",
      s"    with open('$pidFile.tmp', 'w') as out:",
      "        out.write(str(os.getpid()))",
      s"    os.rename('$pidFile.tmp', '$pidFile')",
      s"    while not os.path.exists('$gate'):",
      "        time.sleep(0.01)")
    val options = Seq("pythonExec" -> gated.toString, "workers" -> "2")
    val p0 = partitionProvider(0, checkpoint("p0"), options: _*)
    val (_, slot0) = inThread("task of slot 0")(p0.getStore(0)) // its load starts the worker
    eventually("slot 0's worker process started")(Files.exists(pidFile))
    val p1 = partitionProvider(1, checkpoint("p1"), options: _*)
    val second = p1.getStore(0)
    second.put(key(1), value(1))
    second.commit()
    expect(!slot0.isDone, s"slot 0's start ended while it could not start: ${outcome(slot0)}")
    Files.createFile(gate)
    val first = outcome(slot0).fold(
      e => throw new AssertionError(s"slot 0 failed to start: $e", e), identity)
    expect(workerPid(p0) != workerPid(p1), "both slots were served by one worker")
    first.put(key(2), value(2))
    first.commit()
    p0.close()
    p1.close()
  }

  /** In local mode the provider Spark creates on the driver to plan a stateful operator
   * (it asks that one only for its metrics) starts the workers of the pool the tasks will
   * use, before any store is loaded, and the loads connect to them. Nothing starts for a
   * session that chose another provider, nor on options the tasks would refuse, nor for a
   * slot no partition connects to; only a local master runs the tasks in the driver's JVM. */
  def workersStartAheadOfLocalTasks(f: Fixture): Unit = {
    import f._
    val starts = Files.createDirectories(work.resolve("starts")) // a file per start, its pid
    val recording = wrapperPython("recording-python",
      s"open(os.path.join('$starts', str(os.getpid())), 'w').close()")
    val options = Seq("pythonExec" -> recording.toString, "workers" -> "2")
    val poolDir = work.resolve("pool") // the fixture's localDir
    def started: Set[Long] = {
      val listing = Files.list(starts)
      try listing.iterator.asScala.map(_.getFileName.toString.toLong).toSet
      finally listing.close()
    }
    val spark = SparkSession.builder.master("local[2]").appName("start-ahead")
      .config("spark.ui.enabled", "false").getOrCreate()
    try {
      conf(options: _*).sqlConfs.foreach { case (k, v) => spark.conf.set(k, v) }
      def planned(): Unit = expect(new PyRocksStateStoreProvider().supportedCustomMetrics ==
        ProviderMetrics.Custom, "the metrics changed")
      def nothingStarted(why: String): Unit =
        expect(!Files.exists(poolDir) && started.isEmpty, s"a pool started $why")
      planned() // the session chose Spark's default provider
      nothingStarted("for a session that did not choose ours")
      spark.conf.set("spark.sql.streaming.stateStore.providerClass",
        classOf[PyRocksStateStoreProvider].getName)
      spark.conf.set(LaunchOptions.Prefix + "workers", "0")
      planned()
      nothingStarted("on options a task refuses")
      spark.conf.set(LaunchOptions.Prefix + "workers", "2")
      planned()
      eventually("both slots' workers started, with no store loaded")(started.size == 2)
      val stores = Seq(0, 1).map(i => partitionProvider(i, checkpoint(s"p$i"), options: _*))
      stores.foreach { p =>
        val store = p.getStore(0)
        store.put(key(1), value(1))
        store.commit()
      }
      expect(stores.map(workerPid).toSet == started && started.size == 2,
        s"the loads used workers ${stores.map(workerPid)}; started: $started")
      stores.foreach(_.close())
    } finally spark.stop()
    // only the slots the partitions connect to (partition mod workers), each started once
    val threeSlots = conf(options :+ ("workers" -> "3"): _*).sqlConfs
    val three = WorkerPool.get(LaunchOptions.fromConfs(threeSlots))
    expect(three.startAhead(2) == Seq(0, 1), "2 partitions on 3 workers start other slots")
    eventually("the two slots' workers started")(started.size == 4)
    val masters = Seq("local", "local[2]", "local[*]", "local[2,3]", "local-cluster[2,1,1024]",
      "spark://host:7077", "yarn", "k8s://https://host")
    val threads = masters.map(LaunchOptions.localThreads)
    val cores = Runtime.getRuntime.availableProcessors
    expect(threads == Seq(Some(1), Some(2), Some(cores), Some(2), None, None, None, None),
      s"task threads in the driver's JVM: ${masters.zip(threads)}")
  }

  /** The worker is told which streaming query a store belongs to (from the checkpoint's
   * `metadata`, "" without one) and which JVM writes it. */
  def openSpecNamesQueryAndWriter(f: Fixture): Unit = {
    import f._
    implicit val formats: DefaultFormats.type = DefaultFormats
    val root = checkpoint("query")
    val queryId = "0d6f3a2e-6a43-4c1e-9b7e-2f1c3d4e5f60"
    Files.write(root.getParent.resolve("metadata"), s"""{"id":"$queryId"}""".getBytes(UTF_8))
    val withQuery = provider(root)
    val spec = parse(new String(withQuery.openSpec("probe"), UTF_8))
    expect((spec \ "query_id") == JString(queryId), s"query_id: ${spec \ "query_id"}")
    val writer = (spec \ "writer").extract[String]
    expect(writer.matches(s"executor \\S+ pid ${ProcessHandle.current().pid()} on .+"),
      s"writer: $writer")
    val bare = provider(checkpoint("no-query"))
    val bareSpec = parse(new String(bare.openSpec("probe"), UTF_8))
    expect((bareSpec \ "query_id") == JString(""), s"query_id: ${bareSpec \ "query_id"}")
    withQuery.close()
    bare.close()
  }
}

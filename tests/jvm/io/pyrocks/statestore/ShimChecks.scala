package io.pyrocks.statestore

import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.{Files, Path, Paths}
import java.util.concurrent.{CompletableFuture, TimeUnit}

import scala.util.control.NonFatal

import org.apache.hadoop.conf.Configuration

import org.apache.spark.sql.catalyst.expressions.{SpecificInternalRow, UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types.{LongType, StructType}

/**
 * The shim's own checks, run a group per JVM by `tests/test_shim_units.py` (ScalaTest is not
 * available): `ShimChecks <work dir> <python> <python path> <check>...` runs each check in
 * turn, in a directory of its own under the work dir and with every worker pool stopped
 * after it (so no check sees another's providers, pools or files), and prints
 * `BEGIN <check>`, then `PASS <check>` or why it failed and `FAIL <check>: <error>`. It exits
 * 0 when every check passed. They drive the real classes: providers on real worker
 * processes, the real read cache and connection. They live in the shim's package to reach
 * what it keeps `private[statestore]`.
 */
object ShimChecks {
  private val checks: Map[String, Fixture => Unit] =
    CacheChecks.all ++ WriterChecks.all ++ DeadlineChecks.all ++ FinishChecks.all ++
      ReplayChecks.all ++ ScanChecks.all ++ OptionChecks.all ++ KeyLayoutChecks.all ++
      PackedChecks.all ++ CoordinatorChecks.all

  def main(args: Array[String]): Unit = {
    val (work, python, pythonPath, names) = (args(0), args(1), args(2), args.toSeq.drop(3))
    val unknown = names.filterNot(checks.contains)
    if (names.isEmpty || unknown.nonEmpty) {
      System.err.println(s"no check '${unknown.mkString("', '")}'; known: " +
        checks.keys.toSeq.sorted.mkString(", "))
      sys.exit(2)
    }
    // Short directory names: some checks bind Unix sockets there (about 104 bytes at most).
    val failed = names.zipWithIndex.filterNot { case (name, i) =>
      run(name, Paths.get(work).resolve(s"c$i"), python, pythonPath)
    }
    sys.exit(if (failed.isEmpty) 0 else 1)
  }

  private def run(name: String, work: Path, python: String, pythonPath: String): Boolean = {
    println(s"BEGIN $name")
    val outcome = try {
      checks(name)(new Fixture(Files.createDirectories(work), python, pythonPath))
      None
    } catch { case e: Throwable => Some(e) }
    Thread.interrupted()  // a check that interrupts its own thread leaves no flag behind
    WorkerPool.shutdown()
    outcome match {
      case None =>
        println(s"PASS $name")
      case Some(e) =>
        e.printStackTrace(System.out)
        println(s"FAIL $name: $e")
    }
    System.out.flush()
    outcome.isEmpty
  }
}

/** What checks share: providers made as an executor makes them, rows, and assertions. */
final class Fixture(val work: Path, val python: String, pythonPath: String) {
  val keySchema: StructType = new StructType().add("k", LongType)
  val valueSchema: StructType = new StructType().add("v", LongType)
  /** Keys of a prefix-scan family: (group, item), scanned by group. */
  val pairSchema: StructType = new StructType().add("group", LongType).add("item", LongType)

  def checkpoint(name: String): Path = Files.createDirectories(work.resolve(name).resolve("state"))

  def conf(options: (String, String)*): StateStoreConf = {
    val sql = new SQLConf
    sql.setConfString("spark.sql.streaming.stateStore.commitValidation.enabled", "false")
    val defaults = Seq("pythonExec" -> python, "pythonPath" -> pythonPath, "workers" -> "1",
      "localDir" -> work.resolve("pool").toString)
    (defaults ++ options).foreach { case (k, v) =>  // ours by short key, Spark's in full
      sql.setConfString(if (k.startsWith("spark.")) k else LaunchOptions.Prefix + k, v)
    }
    new StateStoreConf(sql, Map.empty)
  }

  /** An executable `pythonExec` in the work directory, named `name`: it runs `lines`
   * (Python; `os`, `sys` and `time` imported) and then becomes this check's Python with the
   * same arguments, so the worker it starts is the real one. */
  def wrapperPython(name: String, lines: String*): Path = {
    val script = work.resolve(name)
    val body = Seq(s"#!$python", "import os, sys, time") ++ lines :+
      "os.execv(sys.executable, [sys.executable] + sys.argv[1:])"
    Files.write(script, body.mkString("\n").getBytes(UTF_8))
    expect(script.toFile.setExecutable(true), s"cannot make $script executable")
    script
  }

  /** A provider of partition 0, operator 0 of the store under `root`; each is a distinct
   * working copy, as two executors (or two attempts on one) would have. */
  def provider(root: Path, options: (String, String)*): PyRocksStateStoreProvider =
    partitionProvider(0, root, options: _*)

  /** As `provider`, of another partition: it connects to the worker of slot `partition`
   * modulo `workers`. */
  def partitionProvider(partition: Int, root: Path,
      options: (String, String)*): PyRocksStateStoreProvider =
    providerWith(partition, root, NoPrefixKeyStateEncoderSpec(keySchema), keySchema, options: _*)

  def prefixProvider(root: Path, options: (String, String)*): PyRocksStateStoreProvider =
    providerWith(0, root, PrefixKeyScanStateEncoderSpec(pairSchema, 1), pairSchema, options: _*)

  private def providerWith(partition: Int, root: Path, spec: KeyStateEncoderSpec,
      keys: StructType, options: (String, String)*): PyRocksStateStoreProvider = {
    val provider = new PyRocksStateStoreProvider
    provider.init(StateStoreId(root.toString, 0L, partition), keys, valueSchema, spec,
      useColumnFamilies = true, conf(options: _*), new Configuration(),
      useMultipleValuesPerKey = false, stateSchemaProvider = None)
    provider
  }

  // ---- rows (fresh objects: the checks keep them) -------------------------------------

  def key(k: Long): UnsafeRow = row(keySchema, k)
  def pair(group: Long, item: Long): UnsafeRow = row(pairSchema, group, item)
  def group(g: Long): UnsafeRow = row(new StructType().add("group", LongType), g)
  def value(v: Long): UnsafeRow = row(valueSchema, v)

  /** The bytes a NoPrefix family keeps for `key(k)` (and the read cache knows it by). */
  def keyBytes(k: Long): Array[Byte] = ColumnFamilyCodec.copyOf(key(k))

  def valueOf(row: UnsafeRow): Option[Long] = Option(row).map(_.getLong(0))

  /** Eight bytes per key, for checks of the cache alone (which sees only bytes). */
  def rawKey(k: Long): Array[Byte] = java.nio.ByteBuffer.allocate(8).putLong(k).array()

  private val projections = scala.collection.mutable.Map.empty[StructType, UnsafeProjection]

  private def row(schema: StructType, fields: Long*): UnsafeRow = synchronized {
    val in = new SpecificInternalRow(schema)
    fields.zipWithIndex.foreach { case (v, i) => in.setLong(i, v) }
    projections.getOrElseUpdate(schema, UnsafeProjection.create(schema))(in).copy()
  }

  // ---- assertions and waiting ---------------------------------------------------------

  def expect(ok: Boolean, what: => String): Unit =
    if (!ok) throw new AssertionError(what)

  def expectThrows[E <: Throwable](body: => Any)(implicit tag: scala.reflect.ClassTag[E]): E = {
    val thrown = try { body; None } catch { case e: Throwable => Some(e) }
    thrown match {
      case Some(e: E) => e
      case Some(other) => throw new AssertionError(
        s"expected ${tag.runtimeClass.getSimpleName}, got $other", other)
      case None => throw new AssertionError(s"expected ${tag.runtimeClass.getSimpleName}")
    }
  }

  /** The message of `e` and of every cause, as the task's error would show them. */
  def messages(e: Throwable): String =
    Iterator.iterate(e)(_.getCause).takeWhile(_ != null).map(_.toString).mkString(" <- ")

  /** Waits for a state another thread or process reaches (polls it: there is no event). */
  def eventually(what: String)(condition: => Boolean): Unit = {
    val deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120)
    while (!condition) {
      if (System.nanoTime() > deadline) throw new AssertionError(s"never happened: $what")
      Thread.sleep(10)
    }
  }

  /** Runs `body` on a new thread, as a second task would; join with `.get`. */
  def inThread[T](name: String)(body: => T): (Thread, CompletableFuture[T]) = {
    val result = new CompletableFuture[T]()
    val thread = new Thread(() => {
      try result.complete(body) catch { case e: Throwable => result.completeExceptionally(e) }
    }, name)
    thread.start()
    (thread, result)
  }

  def outcome[T](future: CompletableFuture[T]): Either[Throwable, T] =
    try Right(future.get(5, TimeUnit.MINUTES)) catch {
      case e: java.util.concurrent.ExecutionException => Left(e.getCause)
    }

  // ---- worker processes ---------------------------------------------------------------

  def workerPid(provider: PyRocksStateStoreProvider): Long =
    provider.currentConnection.map(_.workerPid).getOrElse(
      throw new AssertionError("the provider has no connection"))

  def isAlive(pid: Long): Boolean = {
    val handle = ProcessHandle.of(pid)
    // A killed child stays a zombie until the JVM reaps it: that is not alive either.
    handle.isPresent && handle.get.isAlive && !procState(pid).contains("Z")
  }

  private def procState(pid: Long): Option[String] = try {
    val stat = new String(Files.readAllBytes(Paths.get(s"/proc/$pid/stat")))
    Some(stat.substring(stat.lastIndexOf(')') + 2).split(' ')(0))
  } catch { case NonFatal(_) => None }

  def signal(pid: Long, name: String): Unit = {
    val done = new ProcessBuilder("kill", s"-$name", pid.toString).inheritIO().start().waitFor()
    expect(done == 0, s"kill -$name $pid failed")
    // A signal is delivered when the process next runs: wait until the kernel says it is
    // stopped, so that what follows surely meets a frozen worker.
    if (name == "STOP") eventually(s"worker $pid stopped")(processState(pid) == "T")
  }

  /** Lets a stopped worker run again, unless it is gone: a worker the shim killed (a request
   * past its deadline) may exit between any check of it and the signal. */
  def resumeUnlessGone(pid: Long): Unit = {
    val done = new ProcessBuilder("kill", "-CONT", pid.toString).inheritIO().start().waitFor()
    expect(done == 0 || !isAlive(pid), s"kill -CONT $pid failed and the worker is still there")
  }

  /** The state letter in /proc/<pid>/stat (R, S, T, Z, ...), "" once the process is gone. */
  def processState(pid: Long): String = try {
    val stat = new String(Files.readAllBytes(Paths.get(s"/proc/$pid/stat")), UTF_8)
    stat.substring(stat.lastIndexOf(')') + 2).takeWhile(_ != ' ')
  } catch { case _: java.io.IOException => "" }
}

object Fixture {
  /** One of the provider's custom metrics (`pyrocks.*`), as the worker counts it now. */
  def customMetric(p: PyRocksStateStoreProvider, name: String): Long =
    p.metrics().customMetrics.collectFirst { case (m, v) if m.name == name => v }
      .getOrElse(throw new AssertionError(s"no $name metric"))
}

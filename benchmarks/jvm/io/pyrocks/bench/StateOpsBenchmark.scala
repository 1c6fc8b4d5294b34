package io.pyrocks.bench

import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.{Files, Paths}
import java.util.UUID
import java.util.concurrent.{Callable, CountDownLatch, Executors, TimeUnit}

import scala.collection.mutable
import scala.util.control.NonFatal

import org.apache.spark.sql.catalyst.expressions.{SpecificInternalRow, UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.classic.SparkSession
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types.{LongType, StructType}

/**
 * State operations through Spark's `StateStoreProvider` API, timed in the driver JVM of a
 * local session, for any provider class: the JVM half of `benchmarks/micro.py`, which calls
 * `phases` and `throughput` through py4j and reads the JSON they return.
 *
 * Providers are made the way an executor makes them (`StateStoreProvider.createAndInit`),
 * with a `StateStoreConf` taken from the active session's SQL conf, so whatever the caller
 * set there (changelog checkpointing, `spark.sql.streaming.stateStore.pyrocks.*`) reaches the
 * provider. There is no task: stores are used from the calling thread(s), with no
 * TaskContext, and no maintenance runs because nothing registers the providers with
 * `StateStore`'s executor-side cache.
 */
object StateOpsBenchmark {
  private val keySchema = new StructType().add("key", LongType)
  private val valueSchema = new StructType().add("count", LongType).add("sum", LongType)
  // Session windows' state: (group, session start) -> (session end, count), scanned by group
  // (the first key column), as Spark's session window operators keep and read it.
  private val sessionKeySchema = new StructType().add("group", LongType).add("start", LongType)
  private val groupSchema = new StructType().add("group", LongType)

  /**
   * Rows the way stateful operators build them: one mutable input row and one projection
   * per schema, whose output UnsafeRow is reused for every call, so a provider must copy
   * what it keeps (a provider that kept the caller's row would fail the answer checks).
   */
  private final class Rows {
    private val keyIn = new SpecificInternalRow(keySchema)
    private val valueIn = new SpecificInternalRow(valueSchema)
    private val keyOut = UnsafeProjection.create(keySchema)
    private val valueOut = UnsafeProjection.create(valueSchema)

    def key(k: Long): UnsafeRow = { keyIn.setLong(0, k); keyOut(keyIn) }

    def value(count: Long, sum: Long): UnsafeRow = {
      valueIn.setLong(0, count)
      valueIn.setLong(1, sum)
      valueOut(valueIn)
    }

    private val sessionIn = new SpecificInternalRow(sessionKeySchema)
    private val sessionOut = UnsafeProjection.create(sessionKeySchema)
    private val groupIn = new SpecificInternalRow(groupSchema)
    private val groupOut = UnsafeProjection.create(groupSchema)

    def session(group: Long, start: Long): UnsafeRow = {
      sessionIn.setLong(0, group)
      sessionIn.setLong(1, start)
      sessionOut(sessionIn)
    }

    def group(group: Long): UnsafeRow = { groupIn.setLong(0, group); groupOut(groupIn) }
  }

  /**
   * CPU ticks used so far (USER_HZ, from /proc): by this JVM (every thread: GC included),
   * by its pyrocks worker processes (children running `workerModule`, which the caller
   * names), and by every process on the machine. The caller, who
   * knows USER_HZ, turns ticks into seconds; Linux only, zeros elsewhere.
   */
  private final case class Cpu(jvm: Long, workers: Long, host: Long) {
    def -(o: Cpu): Cpu = Cpu(jvm - o.jvm, workers - o.workers, host - o.host)
  }

  private def cpuNow(workerModule: String): Cpu = {
    val children = ProcessHandle.current().children().toArray.map(_.asInstanceOf[ProcessHandle])
    val workers = children.filter(p => cmdline(p.pid).split('\u0000').contains(workerModule))
    Cpu(procTicks("self"), workers.map(p => procTicks(p.pid.toString)).sum, hostTicks())
  }

  private def procTicks(pid: String): Long = try {
    val stat = Files.readString(Paths.get(s"/proc/$pid/stat"))
    val fields = stat.substring(stat.lastIndexOf(')') + 2).split(' ')
    fields(11).toLong + fields(12).toLong // utime + stime
  } catch { case NonFatal(_) => 0L }

  private def cmdline(pid: Long): String =
    try new String(Files.readAllBytes(Paths.get(s"/proc/$pid/cmdline")), UTF_8)
    catch { case NonFatal(_) => "" }

  /** Busy ticks of all CPUs: everything but idle and iowait. */
  private def hostTicks(): Long = try {
    val cpu = Files.readAllLines(Paths.get("/proc/stat")).get(0).trim.split("\\s+").drop(1)
      .take(8).map(_.toLong)
    cpu.sum - cpu(3) - cpu(4)
  } catch { case NonFatal(_) => 0L }

  /**
   * Wall nanoseconds and CPU ticks per named step, in the order they ran, as JSON:
   * {"ns": {step: n}, "jvm_ticks": {...}, "worker_ticks": {...}, "host_ticks": {...}}.
   */
  private final class Timings(workerModule: String) {
    private val steps = mutable.LinkedHashMap.empty[String, (Long, Cpu)]

    def apply[T](name: String)(body: => T): T = {
      val cpu = cpuNow(workerModule)
      val start = System.nanoTime()
      val result = body
      val nanos = System.nanoTime() - start
      steps(name) = (nanos, cpuNow(workerModule) - cpu)
      result
    }

    def record(name: String, nanos: Long): Unit = steps(name) = (nanos, Cpu(0, 0, 0))

    def json: String = {
      def obj(f: ((Long, Cpu)) => Long): String =
        steps.map { case (k, v) => s"\"$k\": ${f(v)}" }.mkString("{", ", ", "}")
      s"""{"ns": ${obj(_._1)}, "jvm_ticks": ${obj(_._2.jvm)}, """ +
        s""""worker_ticks": ${obj(_._2.workers)}, "host_ticks": ${obj(_._2.host)}}"""
    }
  }

  /** A provider for partition `partition` of operator `operator`, made as an executor would:
   * operator 0 keeps `keySchema` rows, operator 1 session windows' (scanned by group). */
  private def open(className: String, checkpointDir: String, partition: Int,
      runId: UUID, operator: Long = 0L): StateStoreProvider = {
    val session = SparkSession.active
    // A streaming query's commits are reported to the driver's StateStoreCoordinator when
    // commit validation is on; the coordinator is made with the session's query manager.
    session.streams
    val sqlConf = session.sessionState.conf.clone()
    sqlConf.setConfString(SQLConf.STATE_STORE_PROVIDER_CLASS.key, className)
    val providerId = StateStoreProviderId(StateStoreId(checkpointDir, operator, partition),
      runId)
    val (keys, encoder) = if (operator == 0L) (keySchema, NoPrefixKeyStateEncoderSpec(keySchema))
      else (sessionKeySchema, PrefixKeyScanStateEncoderSpec(sessionKeySchema, 1))
    StateStoreProvider.createAndInit(providerId, keys, valueSchema, encoder, false,
      new StateStoreConf(sqlConf, Map.empty), session.sessionState.newHadoopConf(), false, None)
  }

  private def putAll(store: StateStore, rows: Rows, from: Long, until: Long, tag: Long): Unit = {
    var i = from
    while (i < until) { store.put(rows.key(i), rows.value(tag, i)); i += 1 }
  }

  /** Gets keys [from, until); returns (keys found, keys found with the value `putAll` gave). */
  private def getAll(store: StateStore, rows: Rows, from: Long, until: Long,
      tag: Long): (Long, Long) = {
    var found = 0L
    var right = 0L
    var i = from
    while (i < until) {
      val v = store.get(rows.key(i))
      if (v != null) {
        found += 1
        if (v.getLong(0) == tag && v.getLong(1) == i) right += 1
      }
      i += 1
    }
    (found, right)
  }

  private def removeAll(store: StateStore, rows: Rows, from: Long, until: Long): Unit = {
    var i = from
    while (i < until) { store.remove(rows.key(i)); i += 1 }
  }

  /** Every row of the store, read field by field as an operator would; (rows, sum of keys). */
  private def scanAll(store: StateStore): (Long, Long) = {
    val it = store.iterator()
    var count = 0L
    var sum = 0L
    try {
      while (it.hasNext) {
        val pair = it.next()
        count += 1
        sum += pair.key.getLong(0) + pair.value.getLong(0) - 2 // updated rows carry tag 2
      }
    } finally it.close()
    (count, sum)
  }

  private def check(ok: Boolean, what: => String): Unit =
    if (!ok) throw new IllegalStateException(s"wrong answer: $what")

  /**
   * One store through its life, each step timed on its own (nanoseconds, the caller divides
   * by rows): version 0 gets keys 0..n-1 and commits; version 1 (a new store object) gets
   * every key (hits), then n absent keys (misses), updates every key and commits; version 2
   * iterates all rows, removes the first half and commits. Loads are timed too. Answers are
   * checked after the timed loops, so a wrong provider fails instead of looking fast.
   * Then session windows' state, `sessionsPerGroup` sessions a group (`sessionPhases`).
   */
  def phases(className: String, checkpointDir: String, keys: Int, sessionsPerGroup: Int,
      workerModule: String): String = {
    val n = keys.toLong
    val t = new Timings(workerModule)
    val rows = new Rows
    val provider = t("init")(open(className, checkpointDir, 0, UUID.randomUUID()))
    try {
      val v0 = t("load_v0")(provider.getStore(0))
      t("put_insert")(putAll(v0, rows, 0, n, tag = 1))
      t("commit_insert")(v0.commit())
      val v1 = t("load_v1")(provider.getStore(1))
      val hits = t("get_hit")(getAll(v1, rows, 0, n, tag = 1))
      val misses = t("get_miss")(getAll(v1, rows, n, 2 * n, tag = 1))
      t("put_update")(putAll(v1, rows, 0, n, tag = 2))
      t("commit_update")(v1.commit())
      val v2 = t("load_v2")(provider.getStore(2))
      val (count, sum) = t("iterate")(scanAll(v2))
      t("remove")(removeAll(v2, rows, 0, n / 2))
      t("commit_remove")(v2.commit())
      check(hits == (n, n), s"$className found (keys, right values) $hits of $n keys")
      check(misses._1 == 0, s"$className found ${misses._1} absent keys")
      check(count == n && sum == n * (n - 1) / 2, s"$className iterated $count rows, sum $sum")
      val v3 = provider.getStore(3)
      check(v3.get(rows.key(0)) == null && v3.get(rows.key(n - 1)) != null,
        s"$className: remove did not take")
      v3.abort()
    } finally provider.close()
    sessionPhases(className, checkpointDir, n, sessionsPerGroup, t, rows)
    t.json
  }

  /**
   * Session windows' state on a store of its own (operator 1): version 0 puts n sessions,
   * `perGroup` under each of n / `perGroup` groups, and commits; version 1
   * lists each group's sessions with `prefixScan` (every one read field by field), then
   * rewrites them as the save operator does after merging new rows in: each session put
   * again, one longer (Spark replaces a session whose start is unchanged rather than
   * removing it), and commits; version 2 merges each group's last two sessions into one:
   * the last removed, the one before it put longer (rows: groups), and commits. Timed:
   * `prefix_put`, `prefix_scan`, `prefix_rewrite`, `prefix_merge` and the three commits;
   * answers checked after the timed loops.
   */
  private def sessionPhases(className: String, checkpointDir: String, n: Long, perGroup: Int,
      t: Timings, rows: Rows): Unit = {
    require(perGroup >= 2, s"a merge needs two sessions a group, not $perGroup")
    val groups = n / perGroup
    val (last, merged) = (perGroup - 1L, perGroup - 2L)
    val provider = open(className, checkpointDir, 0, UUID.randomUUID(), operator = 1L)
    try {
      val v0 = provider.getStore(0)
      t("prefix_put")(forSessions(groups, perGroup) { (g, s) =>
        v0.put(rows.session(g, s), rows.value(s + 1, 1)) })
      t("commit_prefix_put")(v0.commit())
      val v1 = provider.getStore(1)
      val (listed, ends) = t("prefix_scan")(scanGroups(v1, rows, groups))
      t("prefix_rewrite")(forSessions(groups, perGroup) { (g, s) =>
        v1.put(rows.session(g, s), rows.value(s + 2, 2)) })
      t("commit_prefix_rewrite")(v1.commit())
      val v2 = provider.getStore(2)
      t("prefix_merge") {
        var g = 0L
        while (g < groups) {
          v2.remove(rows.session(g, last))
          v2.put(rows.session(g, merged), rows.value(last + 2, 3))
          g += 1
        }
      }
      t("commit_prefix_merge")(v2.commit())
      val firstEnds = (0L until perGroup).map(_ + 1).sum
      check(listed == groups * perGroup && ends == groups * firstEnds,
        s"$className: prefixScan listed $listed sessions (ends summing to $ends) of " +
          s"${groups * perGroup}")
      val v3 = provider.getStore(3)
      val (kept, mergedEnds) = scanGroups(v3, rows, groups)
      val expected = groups * ((0L until merged).map(_ + 2).sum + last + 2)
      check(kept == groups * (perGroup - 1) && mergedEnds == expected,
        s"$className: after the merge, $kept sessions whose ends sum to $mergedEnds " +
          s"(expected ${groups * (perGroup - 1)} and $expected)")
      v3.abort()
    } finally provider.close()
  }

  private def forSessions(groups: Long, perGroup: Int)(f: (Long, Long) => Unit): Unit = {
    var g = 0L
    while (g < groups) {
      var s = 0L
      while (s < perGroup) { f(g, s); s += 1 }
      g += 1
    }
  }

  /** Every group's sessions through `prefixScan`: (sessions listed, sum of their ends). */
  private def scanGroups(store: StateStore, rows: Rows, groups: Long): (Long, Long) = {
    var listed = 0L
    var ends = 0L
    var g = 0L
    while (g < groups) {
      val it = store.prefixScan(rows.group(g))
      try {
        while (it.hasNext) {
          val pair = it.next()
          listed += 1
          if (pair.key.getLong(0) != g) {
            throw new IllegalStateException(s"wrong answer: group $g's scan listed a session " +
              s"of group ${pair.key.getLong(0)}")
          }
          ends += pair.value.getLong(0)
        }
      } finally it.close()
      g += 1
    }
    (listed, ends)
  }

  /**
   * `threads` tasks at once, each on its own store (partition = thread number), each doing
   * the mix of a streaming aggregation: insert n keys and commit, then get and update every
   * key and commit. Providers are made and their version 0 loaded before the clock starts
   * (worker start-up is not a state operation). Returns JSON: the wall-clock nanoseconds
   * from the common start to the last task's end, and each task's own nanoseconds.
   */
  def throughput(className: String, checkpointDir: String, keys: Int, threads: Int,
      workerModule: String): String = {
    val runId = UUID.randomUUID()
    val providers = (0 until threads).map(p => open(className, checkpointDir, p, runId))
    val pool = Executors.newFixedThreadPool(threads)
    val t = new Timings(workerModule)
    try {
      providers.foreach(_.getStore(0).abort())
      val go = new CountDownLatch(1)
      val tasks = providers.map(p => pool.submit(new Callable[Long] {
        override def call(): Long = { go.await(); timedMix(p, keys.toLong) }
      }))
      t("wall") { go.countDown(); tasks.zipWithIndex.foreach { case (f, i) =>
        t.record(s"task_$i", f.get()) } }
    } finally {
      pool.shutdownNow()
      pool.awaitTermination(1, TimeUnit.MINUTES)
      providers.foreach(_.close())
    }
    t.json
  }

  private def timedMix(provider: StateStoreProvider, n: Long): Long = {
    val start = System.nanoTime()
    val rows = new Rows
    val first = provider.getStore(0)
    putAll(first, rows, 0, n, tag = 1)
    first.commit()
    val second = provider.getStore(1)
    var i = 0L
    while (i < n) {
      val key = rows.key(i)
      val old = second.get(key)
      check(old != null, s"key $i lost")
      second.put(key, rows.value(old.getLong(0) + 1, old.getLong(1) + i))
      i += 1
    }
    second.commit()
    System.nanoTime() - start
  }
}

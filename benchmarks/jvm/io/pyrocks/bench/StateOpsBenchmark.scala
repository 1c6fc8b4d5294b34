package io.pyrocks.bench

import java.util.UUID
import java.util.concurrent.{Callable, Executors}

import scala.collection.mutable

import org.apache.hadoop.conf.Configuration

import org.apache.spark.sql.catalyst.expressions.{UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types.{LongType, StructType}

/**
 * State operations through the StateStore API, timed in the JVM that Spark runs them in, for
 * any provider class: the micro benchmark of `benchmarks/micro.py`, which calls `phases` and
 * `throughput` through py4j and gets JSON back. Rows are built and reused the way Spark's
 * operators do (one projection, its output row reused), so a provider that kept a caller's
 * row instead of copying it would give wrong answers, which `phases` checks.
 */
object StateOpsBenchmark {
  private val keySchema = new StructType().add("k", LongType)
  private val valueSchema = new StructType().add("a", LongType).add("b", LongType)

  /** Rows the way operators make them: one projection each, whose output row is reused. */
  private final class Rows {
    private val keyProjection = UnsafeProjection.create(keySchema)
    private val valueProjection = UnsafeProjection.create(valueSchema)
    def key(k: Long): UnsafeRow = keyProjection(InternalRow(k))
    def value(a: Long, b: Long): UnsafeRow = valueProjection(InternalRow(a, b))
  }

  private def provider(className: String, dir: String, partition: Int,
      confs: java.util.Map[String, String]): StateStoreProvider = {
    val sqlConf = new SQLConf()
    confs.forEach((k, v) => sqlConf.setConfString(k, v))
    val p = StateStoreProvider.create(className)
    p.init(StateStoreId(dir, 0L, partition), keySchema, valueSchema,
      NoPrefixKeyStateEncoderSpec(keySchema), false, new StateStoreConf(sqlConf, Map.empty),
      queryConf(), false, None)
    p
  }

  /** What a streaming query's tasks carry: Spark's RocksDB provider asserts on the run id. */
  private def queryConf(): Configuration = {
    val conf = new Configuration()
    conf.set("sql.streaming.queryId", UUID.randomUUID().toString)
    conf.set("sql.streaming.runId", UUID.randomUUID().toString)
    conf
  }

  private def timed(f: => Unit): Long = {
    val start = System.nanoTime()
    f
    System.nanoTime() - start
  }

  /**
   * One store through insert, read, update, iterate and remove, each phase timed on its own
   * (nanoseconds in total; the caller divides by rows). Keys 0..n-1 are inserted; gets of
   * n..2n-1 miss. Returns JSON: {"phase": nanos, ...}.
   */
  def phases(className: String, dir: String, n: Int,
      confs: java.util.Map[String, String]): String = {
    val p = provider(className, dir, 0, confs)
    val rows = new Rows
    val ns = mutable.LinkedHashMap.empty[String, Long]
    try {
      var store = p.getStore(0)
      ns("put_insert") = timed { var i = 0L; while (i < n) { store.put(rows.key(i),
        rows.value(i, 1)); i += 1 } }
      ns("commit_insert") = timed(store.commit())
      store = p.getStore(1)
      var found = 0L
      ns("get_hit") = timed { var i = 0L; while (i < n) {
        val v = store.get(rows.key(i)); if (v != null && v.getLong(0) == i) found += 1
        i += 1 } }
      ns("get_miss") = timed { var i = n.toLong; while (i < 2L * n) {
        if (store.get(rows.key(i)) != null) found = -1L << 40; i += 1 } }
      ns("put_update") = timed { var i = 0L; while (i < n) { store.put(rows.key(i),
        rows.value(i, 2)); i += 1 } }
      ns("commit_update") = timed(store.commit())
      store = p.getStore(2)
      var sum = 0L
      ns("iterate") = timed { store.iterator().foreach(pair => sum += pair.value.getLong(1)) }
      ns("remove") = timed { var i = 0L; while (i < n / 2) { store.remove(rows.key(i)); i += 1 } }
      ns("commit_remove") = timed(store.commit())
      require(found == n && sum == 2L * n,
        s"$className answered wrongly: $found of $n gets found, value sum $sum != ${2L * n}")
    } finally p.close()
    ns.map { case (k, v) => s"\"$k\": $v" }.mkString("{", ", ", "}")
  }

  /**
   * `threads` tasks at once, each on its own store (partition = thread), each inserting n
   * keys, committing, then getting and updating each key and committing. Returns the
   * elapsed wall-clock nanoseconds of the slowest task.
   */
  def throughput(className: String, dir: String, n: Int, threads: Int,
      confs: java.util.Map[String, String]): Long = {
    val providers = (0 until threads).map(t => provider(className, dir, t, confs))
    val pool = Executors.newFixedThreadPool(threads)
    try {
      providers.foreach(p => p.getStore(0).abort()) // start workers, open stores: not timed
      val start = System.nanoTime()
      val tasks = providers.map(p => pool.submit(new Callable[Unit] {
        override def call(): Unit = mixedTask(p, n)
      }))
      tasks.foreach(_.get())
      System.nanoTime() - start
    } finally {
      pool.shutdown()
      providers.foreach(_.close())
    }
  }

  private def mixedTask(p: StateStoreProvider, n: Int): Unit = {
    val rows = new Rows
    val first = p.getStore(0)
    var i = 0L
    while (i < n) { first.put(rows.key(i), rows.value(i, 1)); i += 1 }
    first.commit()
    val second = p.getStore(1)
    i = 0L
    while (i < n) {
      val old = second.get(rows.key(i))
      second.put(rows.key(i), rows.value(i, old.getLong(1) + 1))
      i += 1
    }
    second.commit()
  }
}

package io.pyrocks.statestore

import org.apache.spark.SparkEnv

/**
 * The options the shim needs before any worker exists. Every other
 * `spark.sql.streaming.stateStore.pyrocks.*` key is validated by the worker against the
 * option table in `state_store/options.py`, which also lists these keys.
 */
final case class LaunchOptions(
    pythonExec: String,
    pythonPath: Option[String],
    workers: Int,
    writeBatchBytes: Int,
    readCacheMB: Int,
    memoryBoundMB: Int,
    localDir: String,
    requestTimeoutSeconds: Int,
    compactOnCommit: Boolean = false) {
  /** What the worker processes depend on: stores with the same spec share a pool. A commit
   * that compacts waits for RocksDB's compaction threads, which a worker otherwise runs at
   * the lowest CPU priority (working_copy.let_compactions_yield): so those queries get
   * workers of their own. */
  def workerSpec: LaunchOptions.WorkerSpec =
    (pythonExec, pythonPath, workers, memoryBoundMB, localDir, compactOnCommit)

  /** Each worker's share of the executor's RocksDB memory bound (0 = unbounded). */
  def workerMemoryMB: Int = if (memoryBoundMB == 0) 0 else math.max(1, memoryBoundMB / workers)
}

object LaunchOptions {
  val StatePrefix = "spark.sql.streaming.stateStore."
  val Prefix: String = StatePrefix + "pyrocks."
  /** Spark's RocksDB memory settings, mapped to memoryBoundMB as options.py's
   * `spark_memory_bound` maps them (a test checks the two agree). */
  val SparkBoundedMemory: String = StatePrefix + "rocksdb.boundedMemoryUsage"
  val SparkMaxMemoryMB: String = StatePrefix + "rocksdb.maxMemoryUsageMB"
  /** Spark's compactOnCommit, read when ours is not set, as options.py maps it. */
  val SparkCompactOnCommit: String = StatePrefix + "rocksdb.compactOnCommit"
  /** Sent with the options: the worker records it in manifests (options.RETAIN_KEY). */
  val RetainKey = "spark.sql.streaming.minBatchesToRetain"

  type WorkerSpec = (String, Option[String], Int, Int, String, Boolean)

  /** The options in `confs`; `onDriver` for processes the driver starts (the recorder). */
  def fromConfs(confs: Map[String, String], onDriver: Boolean = false): LaunchOptions = {
    def text(key: String): Option[String] = confs.get(Prefix + key).map { v =>
      if (v.trim.isEmpty) invalid(key, v, "a non-empty value")
      v.trim
    }
    def atLeast(key: String, min: Int, shift: Int, accepted: String): Option[Int] =
      text(key).map { v =>
        val n = Sizes.inUnits(v, shift).filter(_ <= Int.MaxValue).map(_.toInt)
        n.filter(_ >= min).getOrElse(invalid(key, v, accepted))
      }
    LaunchOptions(
      pythonExec = text("pythonExec").getOrElse(sparkPython(confs, onDriver)),
      pythonPath = text("pythonPath"),
      workers = atLeast("workers", 1, -1, "an integer >= 1").getOrElse(taskSlots()),
      writeBatchBytes = atLeast("writeBatchBytes", 1, 0, "a size >= 1 byte (256k)")
        .getOrElse(256 << 10),
      readCacheMB = atLeast("readCacheMB", 0, 20, "MiB >= 0 (or a size: 1g)")
        .getOrElse(defaultReadCacheMB(Runtime.getRuntime.maxMemory)),
      memoryBoundMB = atLeast("memoryBoundMB", 0, 20, "MiB >= 0 (or a size: 1g)")
        .orElse(sparkMemoryBound(confs)).getOrElse(512),
      localDir = text("localDir").getOrElse(System.getProperty("java.io.tmpdir")),
      requestTimeoutSeconds = text("requestTimeoutSeconds").map { v =>
        Sizes.wholeSeconds(v).filter(s => s >= 1 && s <= Int.MaxValue).map(_.toInt)
          .getOrElse(invalid("requestTimeoutSeconds", v,
            "whole seconds >= 1 (or a duration: 10min)"))
      }.getOrElse(600),
      compactOnCommit = compactOnCommit(confs))
  }

  /** Ours, else Spark's key; false when neither is set. */
  private[statestore] def compactOnCommit(confs: Map[String, String]): Boolean =
    Seq(Prefix + "compactOnCommit", SparkCompactOnCommit)
      .collectFirst { case key if confs.contains(key) => trueOrFalse(key, confs(key)) }
      .getOrElse(false)

  /** A boolean setting as options.py's `_boolean` reads it: true or false in any case. */
  private def trueOrFalse(key: String, value: String): Boolean =
    value.trim.toLowerCase match {
      case "true" => true
      case "false" => false
      case _ => throw new IllegalArgumentException(
        s"invalid value '$value' for $key; accepted: true or false")
    }

  /**
   * The read cache's budget when `readCacheMB` is not set: a quarter of this JVM's heap, at
   * least 256 MiB. Past the cache, every get is a round trip to a worker, so a state that
   * fits the cache runs several times faster than one that does not (docs/benchmarks.md,
   * "State size"); a quarter stays within the heap Spark leaves outside its unified memory.
   */
  private[statestore] def defaultReadCacheMB(maxHeapBytes: Long): Int =
    math.max(256L, (maxHeapBytes >> 20) / 4).min(Int.MaxValue).toInt

  /** memoryBoundMB from Spark's boundedMemoryUsage (false: per-store caches, our 0) and
   * maxMemoryUsageMB (Spark's default 500), when our own key is not set. */
  private[statestore] def sparkMemoryBound(confs: Map[String, String]): Option[Int] =
    confs.get(SparkBoundedMemory).map { bounded =>
      if (!trueOrFalse(SparkBoundedMemory, bounded)) 0
      else {
        val max = confs.getOrElse(SparkMaxMemoryMB, "500").trim
        Sizes.inUnits(max, 20).filter(n => n >= 0 && n <= Int.MaxValue).map(_.toInt)
          .getOrElse(throw new IllegalArgumentException(
            s"invalid value '$max' for $SparkMaxMemoryMB (Spark's setting, read as " +
              s"${Prefix}memoryBoundMB); accepted: MiB >= 0 (or a size: 1g)"))
      }
    }

  /**
   * The Python PySpark itself runs where this process runs, in PySpark's order: so a packed
   * environment shipped with `spark.archives` (and named by `spark.pyspark.python` or the
   * executors' PYSPARK_PYTHON) runs our workers too, with no option of ours.
   */
  private def sparkPython(confs: Map[String, String], onDriver: Boolean): String = {
    def conf(key: String) =
      confs.get(key).orElse(Option(SparkEnv.get).flatMap(_.conf.getOption(key)))
    val driverOnly = if (onDriver) {
      Seq(() => conf("spark.pyspark.driver.python"), () => sys.env.get("PYSPARK_DRIVER_PYTHON"))
    } else Nil
    val candidates = driverOnly.take(1) ++ Seq(() => conf("spark.pyspark.python")) ++
      driverOnly.drop(1) ++ Seq(() => sys.env.get("PYSPARK_PYTHON"))
    candidates.iterator.map(_()).collectFirst { case Some(p) if p.trim.nonEmpty => p.trim }
      .getOrElse("python3")
  }

  /**
   * The task threads of a master that runs the tasks in the driver's JVM (`local`,
   * `local[n]`, `local[*]`, `local[n,retries]`: SparkContext.isLocal's masters), or None for
   * any other: `local-cluster[...]` and real clusters run them in executors of their own.
   */
  private[statestore] def localThreads(master: String): Option[Int] = {
    val threads = """local\[(\*|\d+)(?:\s*,\s*\d+)?\]""".r
    master match {
      case "local" => Some(1)
      case threads("*") => Some(Runtime.getRuntime.availableProcessors())
      case threads(n) => Some(n.toInt)
      case _ => None
    }
  }

  private def invalid(key: String, value: String, accepted: String): Nothing =
    throw new IllegalArgumentException(
      s"invalid value '$value' for $Prefix$key; accepted: $accepted")

  /** Concurrent tasks an executor runs: each gets a worker, so they never queue. */
  private def taskSlots(): Int = {
    val conf = Option(SparkEnv.get).map(_.conf)
    localThreads(conf.flatMap(_.getOption("spark.master")).getOrElse(""))
      .orElse(conf.flatMap(_.getOption("spark.executor.cores")).map(_.toInt))
      .getOrElse(1)
      .max(1)
  }
}

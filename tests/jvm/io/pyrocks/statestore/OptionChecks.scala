package io.pyrocks.statestore

import java.nio.charset.StandardCharsets.UTF_8

import scala.jdk.OptionConverters._

import org.json4s._
import org.json4s.jackson.JsonMethods.parse

/** Option values the shim reads itself (sizes, durations, Spark's memory settings) read as
 * the worker's option table reads them: each check prints `READ <kind> <input> => <result>`
 * lines that tests/test_shim_units.py compares with Python's answers. */
object OptionChecks {
  val all: Map[String, Fixture => Unit] = Map(
    "sizes-and-durations-read-as-python-reads-them" -> sizesAndDurations,
    "spark-memory-and-compaction-settings-read-as-python-reads-them" -> sparkMemorySettings,
    "spark-state-settings-reach-the-worker-and-unknown-ones-are-named" -> settingsReachWorker,
    "compacting-stores-get-workers-whose-compactions-keep-priority" -> compactingStoresWorkers)

  val SizeSamples: Seq[String] = Seq("0", "1", "512", "256k", "256K", "64m", "64MiB", "1g",
    "1gb", " 2 g ", "1t", "1536k", "100k", "abc", "", "-1", "1.5m", "12x", "9999999999999")
  val DurationSamples: Seq[String] = Seq("1", "600", "10s", "10min", "2h", "1d", "500ms",
    "1500ms", "1.5", "1.5min", "0", "x", "", "10 s", "3m")

  private def shown(text: String): String = if (text.isEmpty) "<empty>" else text.replace(" ", "_")

  def sizesAndDurations(f: Fixture): Unit = {
    for (shift <- Seq(-1, 0, 10, 20); text <- SizeSamples) {
      val got = Sizes.inUnits(text, shift).map(_.toString).getOrElse("none")
      println(s"READ units:$shift ${shown(text)} => $got")
    }
    for (text <- DurationSamples) {
      val got = Sizes.wholeSeconds(text).map(_.toString).getOrElse("none")
      println(s"READ seconds ${shown(text)} => $got")
    }
  }

  def sparkMemorySettings(f: Fixture): Unit = {
    val samples: Seq[Map[String, String]] = Seq(
      Map.empty,
      Map(LaunchOptions.SparkBoundedMemory -> "true"),
      Map(LaunchOptions.SparkBoundedMemory -> "true", LaunchOptions.SparkMaxMemoryMB -> "300"),
      Map(LaunchOptions.SparkBoundedMemory -> "TRUE", LaunchOptions.SparkMaxMemoryMB -> "1g"),
      Map(LaunchOptions.SparkBoundedMemory -> "false", LaunchOptions.SparkMaxMemoryMB -> "300"),
      Map(LaunchOptions.SparkMaxMemoryMB -> "300"))
    for (conf <- samples) {
      val got = LaunchOptions.sparkMemoryBound(conf).map(_.toString).getOrElse("none")
      val bounded = conf.getOrElse(LaunchOptions.SparkBoundedMemory, "unset")
      val max = conf.getOrElse(LaunchOptions.SparkMaxMemoryMB, "unset")
      println(s"READ memory $bounded,$max => $got")
    }
    val ourCompact = LaunchOptions.Prefix + "compactOnCommit"
    val compactSamples = Seq("unset", "true", "FALSE", " true ", "yes", "1")
    for (ours <- compactSamples; spark <- compactSamples) {
      val conf = Seq(ourCompact -> ours, LaunchOptions.SparkCompactOnCommit -> spark)
        .filter(_._2 != "unset").toMap
      val got = try LaunchOptions.compactOnCommit(conf).toString catch {
        case e: IllegalArgumentException =>
          val key = conf.keys.find(_ == ourCompact).getOrElse(LaunchOptions.SparkCompactOnCommit)
          f.expect(e.getMessage.contains(key), s"refusal without its key: ${e.getMessage}")
          "refused"
      }
      println(s"READ compact ${shown(ours)},${shown(spark)} => $got")
    }
    val compacting = LaunchOptions.fromConfs(Map(ourCompact -> "true",
      LaunchOptions.Prefix + "workers" -> "1"))
    val plain = LaunchOptions.fromConfs(Map(LaunchOptions.Prefix + "workers" -> "1"))
    f.expect(compacting.compactOnCommit && !plain.compactOnCommit &&
      compacting.workerSpec != plain.workerSpec, "stores compacting on commit share workers")
    val ours = LaunchOptions.fromConfs(Map(LaunchOptions.Prefix + "memoryBoundMB" -> "64",
      LaunchOptions.SparkBoundedMemory -> "true", LaunchOptions.SparkMaxMemoryMB -> "300",
      LaunchOptions.Prefix + "workers" -> "1"))
    f.expect(ours.memoryBoundMB == 64, s"our memoryBoundMB lost to Spark's: ${ours.memoryBoundMB}")
    // readCacheMB unset: a quarter of the heap, at least 256 MiB; set: as given
    for ((heapMB, want) <- Seq(512L -> 256, 1024L -> 256, 4096L -> 1024, 8192L -> 2048)) {
      val got = LaunchOptions.defaultReadCacheMB(heapMB << 20)
      f.expect(got == want, s"default readCacheMB for a $heapMB MiB heap: $got, not $want")
    }
    val unset = LaunchOptions.fromConfs(Map(LaunchOptions.Prefix + "workers" -> "1"))
    f.expect(unset.readCacheMB == LaunchOptions.defaultReadCacheMB(Runtime.getRuntime.maxMemory),
      s"readCacheMB unset is not this JVM's default: ${unset.readCacheMB}")
    val given = LaunchOptions.fromConfs(Map(LaunchOptions.Prefix + "readCacheMB" -> "1g",
      LaunchOptions.Prefix + "workers" -> "1"))
    f.expect(given.readCacheMB == 1024, s"readCacheMB=1g read as ${given.readCacheMB}")
    val bad = f.expectThrows[IllegalArgumentException](LaunchOptions.fromConfs(Map(
      LaunchOptions.Prefix + "writeBatchBytes" -> "12x", LaunchOptions.Prefix + "workers" -> "1")))
    f.expect(bad.getMessage.contains(LaunchOptions.Prefix + "writeBatchBytes") &&
      bad.getMessage.contains("'12x'"), s"unclear refusal: ${bad.getMessage}")
  }

  /** The OPEN request carries Spark's state store settings (not only ours), the worker
   * applies those with a meaning here and names the others, and the JVM warns of those
   * once, not once per store. */
  def settingsReachWorker(f: Fixture): Unit = {
    import f._
    implicit val formats: DefaultFormats.type = DefaultFormats
    val unknown = "spark.sql.streaming.stateStore.rocksdb.formatVersion"
    val settings = Seq("spark.sql.streaming.stateStore.rocksdb.compression" -> "zstd",
      "spark.sql.streaming.stateStore.minDeltasForSnapshot" -> "3", unknown -> "5")
    val providers = (1 to 2).map(i => provider(checkpoint(s"tuned$i"), settings: _*))
    val spec = parse(new String(providers.head.openSpec("probe"), UTF_8)) \ "options"
    for ((k, v) <- settings) expect((spec \ k) == JString(v), s"OPEN lacks $k: $spec")
    // what the worker records in manifests for `state-store inspect`'s GC plan
    expect((spec \ LaunchOptions.RetainKey) == JString("100"), s"OPEN lacks retention: $spec")
    val before = IgnoredSettings.warnedSets
    providers.foreach { p =>
      val store = p.getStore(0)
      store.put(key(1), value(1))
      store.commit()
    }
    val added = IgnoredSettings.warnedSets -- before
    expect(added == Set(unknown) || before.contains(unknown),
      s"expected one warning naming $unknown, warned: $added")
    providers.foreach(_.close())
  }

  /** A worker runs its compactions at the lowest CPU priority unless started with
   * `--compact-on-commit` (working_copy.let_compactions_yield): the shim starts it so for
   * stores whose commits compact (Spark's key here), on a pool of their own. */
  def compactingStoresWorkers(f: Fixture): Unit = {
    import f._
    def workerArgs(options: (String, String)*): Seq[String] = {
      val p = provider(checkpoint(s"compacting-${options.size}"), options: _*)
      val store = p.getStore(0)
      store.put(key(1), value(1))
      store.commit()
      val pid = p.currentConnection.map(_.workerPid).getOrElse(-1L)
      val argv = ProcessHandle.of(pid).toScala.flatMap(_.info().arguments().toScala)
      p.close()
      argv.map(_.toSeq).getOrElse(Seq.empty)
    }
    val compacting = workerArgs("spark.sql.streaming.stateStore.rocksdb.compactOnCommit" -> "true")
    val plain = workerArgs()
    expect(compacting.contains("state_store.runtime.worker") &&
      compacting.contains("--compact-on-commit"), s"a compacting store's worker: $compacting")
    expect(plain.contains("state_store.runtime.worker") && !plain.contains("--compact-on-commit"),
      s"a store that does not compact on commit: $plain")
  }
}

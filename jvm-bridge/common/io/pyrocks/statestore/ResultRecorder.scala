package io.pyrocks.statestore

import java.io.{File, IOException}
import java.nio.charset.StandardCharsets.UTF_8
import java.util.UUID
import java.util.concurrent.ConcurrentHashMap

import scala.util.control.NonFatal

import org.json4s.{JNothing, JObject, JString, JValue}
import org.json4s.JsonDSL._
import org.json4s.jackson.JsonMethods.{compact, parse, render}

import org.apache.spark.SparkConf
import org.apache.spark.internal.Logging
import org.apache.spark.sql.execution.streaming.state.PyRocksQueryRuns
import org.apache.spark.sql.streaming.StreamingQueryListener
import org.apache.spark.sql.streaming.StreamingQueryListener._

/**
 * Records every query run of its session in the query result store (`resultStore`), as
 * Flink's JobResultStore records jobs: when a run ends, a recorder process
 * (`python -m state_store.results record`) writes the run's dirty entry, cleans
 * up after it and marks it clean, off the user's thread and with retries; when a session
 * starts, one resumes every entry an earlier driver left dirty. Registered through
 * `spark.sql.streaming.streamingQueryListeners` by `spark_conf(resultStore=...)`.
 *
 * By the time Spark reports the end of a run, its stores are already finished and closed
 * (`PyRocksCoordinator`): the recorder only does what is durable.
 */
class ResultRecorder(conf: SparkConf) extends StreamingQueryListener with Logging {
  import ResultRecorder._

  private val launch = LaunchOptions.fromConfs(conf.getAll.toMap, onDriver = true)
  private val url = conf.getOption(StoreKey).map(_.trim).filter(_.nonEmpty).getOrElse(
    throw new IllegalArgumentException(s"${getClass.getName} needs $StoreKey: the URL of " +
      "the query result store (state_store.spark.configure(builder, resultStore=URL))"))
  private val runs = new ConcurrentHashMap[UUID, Run]()

  startRecorder("resume", JNothing, JNothing)

  /** Called in the query's own thread before `start()` returns, so the query is active. */
  override def onQueryStarted(event: QueryStartedEvent): Unit = {
    val info = PyRocksQueryRuns.describe(event.id)
    val setting = (key: String) => info.flatMap(_.conf(key))
    runs.put(event.runId, Run(
      runKey = setting(RunKeyKey).getOrElse(event.runId.toString),
      name = Option(event.name),
      checkpoint = info.map(_.checkpoint).getOrElse(""),
      runsToCompletion = info.exists(_.runsToCompletion),
      stateRoot = setting(Prefix + "rootUrl").getOrElse(""),
      rootOptions = setting(Prefix + "rootOptions"),
      retain = setting("spark.sql.streaming.minBatchesToRetain").map(_.toInt),
      orphanMarginS = setting(Prefix + "orphanMarginSeconds").map(_.toDouble),
      startedAtMs = System.currentTimeMillis()))
  }

  override def onQueryProgress(event: QueryProgressEvent): Unit =
    Option(runs.get(event.progress.runId)).foreach(_.lastProgress = event.progress.json)

  override def onQueryIdle(event: QueryIdleEvent): Unit = ()

  override def onQueryTerminated(event: QueryTerminatedEvent): Unit = {
    val run = Option(runs.remove(event.runId)).getOrElse {
      logWarning(s"query run ${event.runId} ended but its start was not seen; recording it " +
        "without its checkpoint (no cleanup)")
      Run(event.runId.toString, None, "", runsToCompletion = false, "", None, None, None, 0L)
    }
    startRecorder("record", entry(event, run),
      run.rootOptions.map(parse(_)).getOrElse(JNothing))
  }

  private def entry(event: QueryTerminatedEvent, run: Run): JValue = {
    val outcome = if (event.exception.isDefined) "failed"
      else if (run.runsToCompletion) "finished" else "stopped"
    val progress = Option(run.lastProgress).map(parse(_))
    val lastBatch = progress.map(p => (p \ "batchId").values).collect {
      case n: BigInt => n.toLong
    }.getOrElse(-1L)
    ("version" -> 1) ~ ("result" -> (
      ("run_key" -> run.runKey) ~ ("query_id" -> event.id.toString) ~
        ("run_id" -> event.runId.toString) ~ ("outcome" -> outcome) ~
        ("name" -> run.name) ~ ("checkpoint" -> run.checkpoint) ~
        ("error" -> event.exception) ~ ("last_batch_id" -> lastBatch) ~
        ("started_at_ms" -> run.startedAtMs) ~ ("ended_at_ms" -> System.currentTimeMillis()) ~
        ("metrics" -> progress.getOrElse(JNothing)) ~ ("state_root" -> run.stateRoot) ~
        ("retain" -> run.retain) ~ ("orphan_margin_s" -> run.orphanMarginS)))
  }

  /**
   * Starts the recorder process; it logs to the driver's stderr and outlives no driver.
   * Every setting goes on its stdin, never in its argv (visible to every user of the
   * machine): the result store's settings as the session has them, the run's entry, and
   * the run's own rootOptions beside it (never in it: they may hold credentials).
   */
  private def startRecorder(mode: String, entry: JValue, runRootOptions: JValue): Unit = {
    val settings = conf.getAll.filter { case (key, _) => RecorderKeys.contains(key) }
      .toList.map { case (key, value) => key -> JString(value) }
    val stdin = compact(render(("conf" -> JObject(settings)) ~ ("entry" -> entry) ~
      ("run_root_options" -> runRootOptions)))
    val args = Seq(launch.pythonExec, "-m", "state_store.results", mode)
    val builder = new ProcessBuilder(args: _*)
    launch.pythonPath.foreach { p =>
      val env = builder.environment()
      env.put("PYTHONPATH", (p +: Option(env.get("PYTHONPATH")).toSeq).mkString(File.pathSeparator))
    }
    builder.redirectOutput(ProcessBuilder.Redirect.INHERIT)
    builder.redirectError(ProcessBuilder.Redirect.INHERIT)
    try {
      val process = builder.start()
      val in = process.getOutputStream
      try in.write(stdin.getBytes(UTF_8)) finally in.close()
    } catch {
      case e: IOException => logError(s"cannot start the result store recorder " +
        s"'${launch.pythonExec}' (set ${Prefix}pythonExec): ${e.getMessage}; the run is not " +
        s"recorded in $url", e)
      case NonFatal(e) => logError(s"recording in $url: $e", e)
    }
  }
}

object ResultRecorder {
  val Prefix: String = LaunchOptions.Prefix
  val StoreKey: String = Prefix + "resultStore"
  val RunKeyKey: String = Prefix + "runKey"
  /** What the recorder reads of the session's conf (state_store.results.settings). */
  private val RecorderKeys: Set[String] = Set("resultStore", "resultStoreOptions", "rootOptions",
    "cleanupBackoffInitialSeconds", "cleanupBackoffMaxSeconds", "cleanupMaxAttempts")
    .map(Prefix + _)

  /** What the start of a run tells about it; `lastProgress` follows its progress reports. */
  // retain and orphanMarginS are None where the session keeps the defaults, which the
  // recorder knows (state_store.results.record).
  private final case class Run(runKey: String, name: Option[String], checkpoint: String,
      runsToCompletion: Boolean, stateRoot: String, rootOptions: Option[String],
      retain: Option[Int], orphanMarginS: Option[Double], startedAtMs: Long) {
    @volatile var lastProgress: String = _
  }
}

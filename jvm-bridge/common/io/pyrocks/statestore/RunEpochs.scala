package io.pyrocks.statestore

import java.nio.charset.StandardCharsets.UTF_8
import java.util.UUID
import java.util.concurrent.ConcurrentHashMap

import scala.util.control.NonFatal

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{FileAlreadyExistsException, Path}

import org.apache.spark.{SparkConf, TaskContext}
import org.apache.spark.internal.Logging
import org.apache.spark.sql.execution.streaming.state.PyRocksQueryRuns
import org.apache.spark.sql.streaming.StreamingQueryListener
import org.apache.spark.sql.streaming.StreamingQueryListener._

/**
 * The run epochs of a checkpoint: each run of a streaming query gets the next number when
 * it starts, recorded as `<checkpoint>/_pyrocks_runs/<epoch, 10 digits>` holding the run id,
 * created without overwrite. A store publishes every version under its run's epoch, so a
 * later run supersedes what an earlier one published for the same version (the user
 * rewound the checkpoint: the batch runs again, as Spark's own providers overwrite it) and
 * a zombie attempt of an earlier run can never replace it (state_store/format/manifest.py).
 *
 * The driver registers each run as it starts, before its first batch (`RunEpochListener`):
 * one writer, so numbers never collide. A provider looks its run up; where no listener
 * registered it (a session configured by hand), the first provider of the run registers it.
 * Epoch 0 is every writer outside a query run (an offline restore's writer).
 */
object RunEpochs extends Logging {
  val Dir = "_pyrocks_runs"
  private val Digits = 10
  private val known = new ConcurrentHashMap[(String, String), java.lang.Long]()

  /** The epoch of run `runId` of the query whose checkpoint is `checkpoint`, registering
   * the run if it has none. Cached per JVM: a run's epoch never changes. */
  def epochOf(checkpoint: Path, runId: String, hadoopConf: Configuration): Long =
    known.computeIfAbsent((checkpoint.toString, runId),
      _ => java.lang.Long.valueOf(lookUpOrRegister(checkpoint, runId, hadoopConf)))

  private def lookUpOrRegister(checkpoint: Path, runId: String, conf: Configuration): Long = {
    val fs = checkpoint.getFileSystem(conf)
    val dir = new Path(checkpoint, Dir)
    def epochs(): Seq[Long] = (try fs.listStatus(dir).toSeq catch {
      case _: java.io.FileNotFoundException => Seq.empty
    }).map(_.getPath.getName).filter(n => n.length == Digits && n.forall(_.isDigit))
      .map(_.toLong).sorted.reverse
    def runOf(epoch: Long): String = {
      val in = fs.open(new Path(dir, name(epoch)))
      try new String(in.readAllBytes(), UTF_8).trim finally in.close()
    }
    var attempts = 0
    while (true) {
      val existing = epochs()
      // Newest first: the run asking is almost always the latest one.
      existing.find(e => runOf(e) == runId) match {
        case Some(epoch) => return epoch
        case None =>
          val next = existing.headOption.getOrElse(0L) + 1
          try {
            val out = fs.create(new Path(dir, name(next)), false)
            try out.write(runId.getBytes(UTF_8)) finally out.close()
            return next
          } catch {
            case e: FileAlreadyExistsException if attempts < 100 => attempts += 1
          }
      }
    }
    throw new IllegalStateException("unreachable")
  }

  private def name(epoch: Long): String = s"%0${Digits}d".format(epoch)

  /** The run a task belongs to: Spark runs a micro-batch's jobs in a job group named by the
   * run id, with the query id set; None outside a streaming task (a state reader, a test). */
  def runOf(task: TaskContext): Option[String] =
    for {
      t <- Option(task)
      _ <- Option(t.getLocalProperty("sql.streaming.queryId"))
      group <- Option(t.getLocalProperty("spark.jobGroup.id"))
      if scala.util.Try(UUID.fromString(group)).isSuccess
    } yield group
}

/**
 * The driver's per-run listener. Registers the run epoch of every query run that keeps its
 * state in this provider, as the run starts: Spark calls `onQueryStarted` of session
 * listeners synchronously on the query's own thread, before its first batch. After each
 * batch (and while idle) it looks for a stop request (StopRequests). Registered through
 * `spark.sql.streaming.streamingQueryListeners` by `spark_conf()`.
 */
class RunEpochListener(conf: SparkConf) extends StreamingQueryListener with Logging {
  def this() = this(new SparkConf())

  override def onQueryStarted(event: QueryStartedEvent): Unit =
    PyRocksQueryRuns.describe(event.id).foreach { run =>
      if (run.conf(PyRocksExtensions.ProviderKey).contains(classOf[PyRocksStateStoreProvider]
          .getName)) {
        try {
          val epoch = RunEpochs.epochOf(new Path(run.checkpoint), event.runId.toString,
            run.hadoopConf())
          logInfo(s"query ${event.id} run ${event.runId} publishes state as run epoch $epoch")
        } catch {
          case NonFatal(e) => logWarning(s"registering run ${event.runId} of query " +
            s"${event.id} in ${run.checkpoint}: $e (its first store registers it instead)", e)
        }
      }
    }

  // A batch boundary: where a stop request (`state-store stop`) is seen and honoured.
  override def onQueryProgress(event: QueryProgressEvent): Unit =
    StopRequests.poll(event.progress.id, event.progress.runId)

  override def onQueryIdle(event: QueryIdleEvent): Unit = StopRequests.poll(event.id, event.runId)

  override def onQueryTerminated(event: QueryTerminatedEvent): Unit = ()
}


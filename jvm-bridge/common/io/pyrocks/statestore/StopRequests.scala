package io.pyrocks.statestore

import java.nio.charset.StandardCharsets.UTF_8
import java.util.UUID
import java.util.concurrent.ConcurrentHashMap

import scala.util.control.NonFatal

import org.apache.hadoop.fs.{ChecksumFileSystem, Path}
import org.json4s._
import org.json4s.jackson.JsonMethods.{compact, parse, render}

import org.apache.spark.internal.Logging
import org.apache.spark.sql.execution.streaming.state.PyRocksQueryRuns

/**
 * Stop-with-savepoint from outside the application (`state-store stop`, Flink's
 * `flink stop --savepointPath`): the command writes a request into the query's checkpoint;
 * the driver running the query sees it at the query's next progress or idle event, stops
 * the query at that batch boundary (first processing everything available, if asked), and
 * answers with the last committed batch once `stop()` has returned, by when the stores are
 * finished. The command then writes the savepoint of that batch. The answer repeats the
 * request's id, so an answer is never taken for another request's; both records are parsed
 * as untrusted input (state_store/savepoint/stop_request.py writes and reads the same).
 */
object StopRequests extends Logging {
  val RequestFile = "_pyrocks_stop_request"
  val AnswerFile = "_pyrocks_stop_answer"
  private val IdPattern = "[A-Za-z0-9-]{1,64}"
  private val handling = ConcurrentHashMap.newKeySet[String]()

  final case class Request(id: String, drain: Boolean)

  /** Called on the listener thread after each progress or idle event of query `queryId`. */
  def poll(queryId: UUID, runId: UUID): Unit = PyRocksQueryRuns.describe(queryId).foreach { run =>
    if (run.conf(PyRocksExtensions.ProviderKey).contains(
        classOf[PyRocksStateStoreProvider].getName)) {
      val checkpoint = new Path(run.checkpoint)
      val fs = checkpoint.getFileSystem(run.hadoopConf())
      val file = new Path(checkpoint, RequestFile)
      val request = try {
        if (!fs.exists(file)) None else {
          val in = fs.open(file)
          try parseRequest(new String(in.readNBytes(4096), UTF_8)) finally in.close()
        }
      } catch {
        case NonFatal(e) =>
          logWarning(s"reading the stop request $file of query $queryId: $e"); None
      }
      request.filter(r => handling.add(r.id)).foreach { r =>
        val thread = new Thread(() => stopThenAnswer(run, checkpoint, queryId, runId, r),
          s"pyrocks-stop-request-${r.id}")
        thread.setDaemon(true)
        thread.start()
      }
    }
  }

  private[statestore] def parseRequest(text: String): Option[Request] = {
    implicit val formats: Formats = DefaultFormats
    try {
      val json = parse(text)
      val id = (json \ "id").extract[String]
      val drain = (json \ "drain").extractOrElse[Boolean](false)
      if (id.matches(IdPattern)) Some(Request(id, drain)) else {
        logWarning(s"ignoring a stop request with an invalid id: ${id.take(80)}"); None
      }
    } catch {
      case NonFatal(e) => logWarning(s"ignoring a stop request that is not one: $e"); None
    }
  }

  private def stopThenAnswer(run: PyRocksQueryRuns.RunInfo, checkpoint: Path, queryId: UUID,
      runId: UUID, request: Request): Unit = {
    logInfo(s"stop request ${request.id}: stopping query $queryId at a batch boundary" +
      (if (request.drain) " after processing what is available" else ""))
    val error = try {
      if (request.drain) run.drain()
      run.stop()
      None
    } catch { case NonFatal(e) => Some(e.toString) }
    val answer = JObject(
      "id" -> JString(request.id), "query_id" -> JString(queryId.toString),
      "run_id" -> JString(runId.toString),
      "last_committed_batch" -> run.lastCommittedBatch().map(b => JLong(b): JValue)
        .getOrElse(JNull),
      "error" -> error.map(JString(_): JValue).getOrElse(JNull))
    try {
      // No checksum side file: the command removes the answer, and only the answer.
      val fs = checkpoint.getFileSystem(run.hadoopConf()) match {
        case local: ChecksumFileSystem => local.getRawFileSystem
        case other => other
      }
      val partial = new Path(checkpoint, s".$AnswerFile.${request.id}")
      val out = fs.create(partial, true)
      try out.write(compact(render(answer)).getBytes(UTF_8)) finally out.close()
      val target = new Path(checkpoint, AnswerFile)
      fs.delete(target, false)
      if (!fs.rename(partial, target)) throw new java.io.IOException(s"rename to $target failed")
    } catch {
      case NonFatal(e) => logWarning(s"answering stop request ${request.id} of query " +
        s"$queryId in $checkpoint: $e", e)
    }
  }
}

package io.pyrocks.statestore

import java.net.URI
import java.nio.charset.StandardCharsets.UTF_8
import java.util.concurrent.{ConcurrentHashMap, ConcurrentLinkedQueue, Executors}

import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.json4s.{JArray, JLong, JObject, JString}
import org.json4s.jackson.JsonMethods.{compact, parse, render}

import org.apache.spark.SparkContext
import org.apache.spark.sql.SparkSession

/**
 * The providers of this JVM that serve a store now: added once `init` has opened the store,
 * removed by `close()`. `finishHere` finishes those of one checkpoint at once (what `close()`
 * does first) without closing them; `finishEverywhere` does it in the driver and on the
 * executors. `PyRocksStateStoreProvider.finishQuery` and `finishQueryEverywhere` are their
 * public faces (static methods, for py4j).
 */
private[statestore] object LiveProviders {
  private val live = ConcurrentHashMap.newKeySet[PyRocksStateStoreProvider]()

  def add(provider: PyRocksStateStoreProvider): Unit = live.add(provider)

  def remove(provider: PyRocksStateStoreProvider): Unit = live.remove(provider)

  /** What one JVM did: the providers it finished (by instance id, unique across JVMs) and,
   * per store whose Finish failed, which store, where, and why. */
  final case class Outcome(finished: Seq[String], failures: Seq[String])

  /**
   * Finishes every live provider of this JVM whose store belongs to `checkpointRoot` (the
   * checkpoint, or its `state` directory). Never throws for one store: every matching
   * provider is tried, and the failures are returned.
   */
  def finishHere(checkpointRoot: String): Outcome =
    eachLive(_.belongsTo(checkpointRoot))(_.finishNow())

  /**
   * Ends the providers of this JVM that query run `runId` created and no task updates: each
   * is finished (a final snapshot), then closed; its worker removes the working copy
   * behind the answer (teardown.py). Safe because a run that ended never uses its
   * providers again (a new run of the query gets new ones); Spark's own unload closes them
   * a second time, a no-op. Never throws for one store.
   */
  def endRunHere(runId: String): Outcome =
    // A provider a cancelled task still updates is left to Spark's unload: closing it under
    // the task could not lose a committed version, but finishing it could not either.
    endAll(live.asScala.toSeq.filter(p => p.servesRun(runId) && !p.isBeingUpdated))

  /** Ends `providers`: the stores of each worker in one request, the workers' at once. */
  private[statestore] def endAll(providers: Seq[PyRocksStateStoreProvider]): Outcome = {
    val ended = inParallel(perWorker(providers).map(_.asScala.toSeq))(endTogether)
    closeBehind(ended.flatMap(_._2))
    outcome(ended.flatMap(_._1))
  }

  /**
   * Ends `providers`, all served by one worker, in one request (END_STORES) on one of their
   * connections; the worker ends their stores one after another. Ended one request each,
   * a worker paid a thread's wake-up, a read and an answer per store: at 200 stores most of
   * a stop's time, several times what the ends themselves cost (docs/benchmarks.md). Each
   * is handed over first, so no other request can reach its session. If the request fails,
   * every store it named reports why. Returns the connections, for `closeBehind`.
   */
  private def endTogether(
      providers: Seq[PyRocksStateStoreProvider]): (Seq[Result], Seq[Connection]) = {
    val handed = providers.map(provider => provider -> provider.handOver())
    val connections = handed.flatMap(_._2)
    val answer = if (connections.isEmpty) Right(Map.empty[String, List[String]]) else {
      try Right(failuresBySession(connections.head.request(Wire.EndStores, sessions(connections),
        stores = connections.size)))
      catch { case NonFatal(e) => Left(s"the request failed: ${e.getMessage}") }
    }
    val results = handed.map {
      case (provider, None) => Right(Some(provider.instanceId)) // nothing was left to end
      case (provider, Some(connection)) =>
        val failures = answer.fold(Seq(_), _.getOrElse(connection.session.toString,
          List(s"worker pid ${connection.workerPid} did not answer for its session")))
        if (failures.isEmpty) Right(Some(provider.instanceId))
        else Left(failed(provider, failures.mkString("; ")))
    }
    (results, connections)
  }

  /** Closes the connections of ended stores once the answer they ended for has gone out:
   * `CloseAfterMs` later, on a thread of their own. Each close wakes a thread of its worker,
   * which then exits. At 200 stores, closed as each worker answered, that took up to 30 ms
   * of a stop while the other worker's stores were still ending; closed at once behind the
   * ends, the 200 wake-ups on two cores still held up the answer and the rest of `stop()` (a
   * JVM's first stop at 200 partitions 52-143 ms, against 30-45 with the wait:
   * docs/benchmarks.md). Nothing waits for them: the stores are ended. (The workers hold
   * back their working copies' removal for the same reason: runtime/teardown.py.) */
  private def closeBehind(connections: Seq[Connection]): Unit = if (connections.nonEmpty) {
    val closer = new Thread(() => {
      try Thread.sleep(CloseAfterMs) catch { case _: InterruptedException => }
      connections.foreach(_.close())
    }, "pyrocks-close-ended")
    closer.setDaemon(true)
    closer.start()
  }

  private def sessions(connections: Seq[Connection]): Array[Byte] =
    compact(render(JObject("sessions" -> JArray(connections.map(c => JLong(c.session)).toList))))
      .getBytes(UTF_8)

  /** END_STORES' answer, {"failures": {session: [failure, ...]}}, read without reflection
   * (json4s' `extract`), which costs a stop its first use in the JVM. */
  private def failuresBySession(answer: Array[Byte]): Map[String, List[String]] =
    parse(new String(answer, UTF_8)) \ "failures" match {
      case JObject(sessions) => sessions.map { case (session, failures) =>
        session -> failures.children.collect { case JString(failure) => failure }
      }.toMap
      case _ => Map.empty // every store then reports that its session went unanswered
    }

  /** Runs `action` on every live provider `which` selects, all at once (each waits on its
   * own worker: a final snapshot is a flush per store, and a run's end waits for the
   * slowest, not for their sum): those it returns true for are counted; one that throws is
   * reported with its store and JVM, and the others still run. */
  private def eachLive(which: PyRocksStateStoreProvider => Boolean)(
      action: PyRocksStateStoreProvider => Boolean): Outcome = {
    val queues = perWorker(live.asScala.toSeq.filter(which))
    val drainers = queues.flatMap(queue => Seq.fill(math.min(queue.size, ParallelPerWorker))(queue))
    outcome(inParallel(drainers)(drain(_, action)).flatten)
  }

  /** What each provider came to: failed (why), or done (its id if counted). */
  private type Result = Either[String, Option[String]]

  private def outcome(results: Seq[Result]): Outcome =
    Outcome(results.flatMap(_.toOption.flatten), results.flatMap(_.left.toOption))

  /** `run` on each of `tasks`, each on a thread of its own, all at once. */
  private def inParallel[T, R](tasks: Seq[T])(run: T => R): Seq[R] =
    if (tasks.isEmpty) Seq.empty else {
      val threads = Executors.newFixedThreadPool(tasks.size, (task: Runnable) => {
        val thread = new Thread(task, "pyrocks-finish")
        thread.setDaemon(true)
        thread
      })
      try tasks.map(task => threads.submit(() => run(task))).map(_.get())
      finally threads.shutdown()
    }

  /** The providers in one queue per worker (those with no connection in one of their own):
   * `endAll` ends each queue's stores in one request, `finishHere` drains each with
   * `ParallelPerWorker` threads of its own. A worker serves one request at a time (Python's
   * GIL), so threads shared by all workers piled up on whichever was slower, leaving the
   * others idle (at 200 stores, the ends of one worker at a time, then of the other's). */
  private[statestore] def perWorker(
      providers: Seq[PyRocksStateStoreProvider]): Seq[ConcurrentLinkedQueue[PyRocksStateStoreProvider]] =
    providers.groupBy(_.currentConnection.map(_.workerPid)).values
      .map(group => new ConcurrentLinkedQueue(group.asJava)).toSeq

  private def drain(queue: ConcurrentLinkedQueue[PyRocksStateStoreProvider],
      action: PyRocksStateStoreProvider => Boolean): Seq[Result] =
    Iterator.continually(queue.poll()).takeWhile(_ != null).map { provider =>
      try Right(if (action(provider)) Some(provider.instanceId) else None)
      catch { case NonFatal(e) => Left(failed(provider, Option(e.getMessage).getOrElse(e.toString))) }
    }.toList

  /** A store that failed to finish or end, with where it was and why. */
  private def failed(provider: PyRocksStateStoreProvider, why: String): String =
    s"${provider.describe} (${PyRocksStateStoreProvider.writerName}): $why"

  /** How long the connections of ended stores stay open after their ends (`closeBehind`):
   * longer than a stop takes once its stores have ended. */
  private val CloseAfterMs = 200L

  /** Stores finished at once per worker (`finishHere`): more would only queue on it (a
   * final snapshot's flush releases the GIL, so a few overlap). */
  private val ParallelPerWorker = 8

  /** `endRunHere` in the driver and on every executor; how many providers ended, or one
   * exception naming every store whose finish failed. */
  def endRunEverywhere(sc: SparkContext, runId: String): Int = {
    val here = endRunHere(runId)
    val there = if (sc.isLocal) Seq.empty
      else onExecutors(sc, s"end the state stores of query run $runId",
        () => LiveProviders.endRunHere(runId))
    orThrow(s"query run $runId", here +: there)
  }

  def finishHereOrThrow(checkpointRoot: String): Int = {
    refuseEmpty(checkpointRoot)
    orThrow(checkpointRoot, Seq(finishHere(checkpointRoot)))
  }

  def finishEverywhere(spark: SparkSession, checkpointRoot: String): Int =
    finishEverywhere(spark.sparkContext, checkpointRoot)

  def finishEverywhere(sc: SparkContext, checkpointRoot: String): Int = {
    refuseEmpty(checkpointRoot)
    // Qualified here, as Spark qualified the query's checkpoint location: an executor would
    // resolve a relative path against its own working directory.
    val root = qualify(checkpointRoot, sc.hadoopConfiguration).toString
    val here = finishHere(root)
    val there = if (sc.isLocal) Seq.empty
      else onExecutors(sc, s"finish the state stores of $root", () => LiveProviders.finishHere(root))
    orThrow(checkpointRoot, here +: there)
  }

  private def refuseEmpty(checkpointRoot: String): Unit =
    if (checkpointRoot == null || checkpointRoot.trim.isEmpty) {
      throw new IllegalArgumentException("finishing a query's state stores needs its " +
        s"checkpoint location (or that location's state directory), not '$checkpointRoot'")
    }

  /** One job whose tasks each run `action` on the executor they run on: at least one task
   * per executor, twice as many as the executors have cores. */
  private def onExecutors(sc: SparkContext, what: String,
      action: () => Outcome): Seq[Outcome] = {
    val executors = sc.getExecutorMemoryStatus.size - 1 // the driver has a block manager too
    if (executors <= 0) return Seq.empty
    val cores = sc.getConf.getOption("spark.executor.cores").map(_.toInt)
      .getOrElse(math.max(1, sc.defaultParallelism / executors))
    val tasks = math.max(executors, executors * cores * 2)
    val descriptionKey = "spark.job.description"
    val previous = sc.getLocalProperty(descriptionKey)
    sc.setJobDescription(s"pyrocks: $what")
    try {
      sc.parallelize(0 until tasks, tasks)
        .mapPartitions(_ => Iterator(action()))
        .collect().toSeq
    } finally sc.setLocalProperty(descriptionKey, previous)
  }

  /** How many providers were finished (each once, however many tasks reached its JVM), or
   * one exception naming every store whose Finish failed. */
  private def orThrow(whose: String, outcomes: Seq[Outcome]): Int = {
    val failures = outcomes.flatMap(_.failures).distinct
    if (failures.nonEmpty) {
      throw new StoresNotFinishedException(s"${failures.size} state store(s) of " +
        s"$whose could not be finished:\n  ${failures.mkString("\n  ")}")
    }
    outcomes.flatMap(_.finished).distinct.size
  }

  /**
   * `location` qualified as Spark qualifies a checkpoint location (scheme and authority of
   * its filesystem, an absolute path), then reduced to one spelling: `file:/x`, `file:///x`
   * and `/x` (on a local default filesystem) are the same directory.
   */
  def qualify(location: String, conf: Configuration): URI = {
    val path = new Path(location)
    val full = if (path.toUri.getScheme != null && path.isUriPathAbsolute) path
      else path.getFileSystem(conf).makeQualified(path)
    val uri = full.toUri
    val authority = Option(uri.getAuthority).filter(_.nonEmpty).orNull
    val bare = Option(uri.getPath).filter(_.nonEmpty).getOrElse("/")
    new URI(uri.getScheme.toLowerCase, authority,
      if (bare.length > 1) bare.stripSuffix("/") else bare, null, null)
  }

  /** Whether a store whose checkpoint root location (`<checkpoint>/state`) is `stateRoot`
   * belongs to `checkpointRoot`, given as the checkpoint or as its `state` directory. */
  def matches(stateRoot: String, checkpointRoot: String, conf: Configuration): Boolean = {
    val wanted = qualify(checkpointRoot, conf)
    val state = qualify(stateRoot, conf)
    state == wanted ||
      Option(new Path(state).getParent).exists(parent => qualify(parent.toString, conf) == wanted)
  }
}

/** Finishing the stores of a checkpoint failed for at least one store (all were tried). */
class StoresNotFinishedException(message: String) extends IllegalStateException(message)

package org.apache.spark.sql.execution.streaming.state

import java.util.UUID
import java.util.concurrent.{Executors, TimeUnit}
import java.util.concurrent.atomic.AtomicBoolean

import scala.collection.mutable
import scala.util.control.NonFatal

import org.apache.spark.SparkContext
import org.apache.spark.internal.Logging
import org.apache.spark.rpc.{RpcAddress, RpcCallContext, RpcEnv}
import org.apache.spark.scheduler.ExecutorCacheTaskLocation
import org.apache.spark.sql.internal.SQLConf

/**
 * Spark's own state store coordinator, plus the one moment Spark offers no hook for: the end
 * of a query run. When a run ends (stopped, finished as `AvailableNow` does, or failed),
 * Spark's query thread asks this endpoint, synchronously, to deactivate the run's stores;
 * `stop()` and `awaitTermination()` return only after that answer. So, for a run that loaded
 * stores, the answer is held until `whenRunEnds` has ended them (uploads drained, a final
 * snapshot of the last committed version): right after `stop()` returns, the state loads
 * with no replay, instead of after Spark's next maintenance round. The workers close and
 * remove the working copies behind that answer (state_store/runtime/teardown.py): local
 * files, which at Spark's 200 partitions were most of the stop when it waited for them.
 *
 * And one answer Spark leaves empty: where a store of a new run should go. Spark keys its
 * locations by provider id, which holds the run id, so the first batch of a restarted query
 * has no preferred executor and its partitions land anywhere, away from the read caches the
 * last run parked (ParkedCaches). So a store with no location in its run gets the executor
 * that last reported it, in any run: within a run, Spark's own answer.
 *
 * It lives in Spark's package because Spark's coordinator is package-private; it changes
 * nothing else Spark's coordinator does. The answer is never held past half of Spark's ask
 * timeout: the finish goes on in the background, and the query thread is never failed.
 */
private class PyRocksCoordinator(
    rpcEnv: RpcEnv,
    sqlConf: SQLConf,
    whenRunEnds: UUID => Unit,
    holdAtMostMs: Long,
    rememberedStores: Int = 65536)
  extends PyRocksCoordinatorBase(rpcEnv, sqlConf) {

  // Only the endpoint's own thread touches these: a ThreadSafeRpcEndpoint gets one message
  // at a time. The runs that reported a store:
  private val runsWithStores = mutable.HashSet[UUID]()
  // Where each store last reported from, whatever its run, for the `rememberedStores` that
  // reported last (a few hundred bytes each): a long-lived application that runs query
  // after query on new checkpoints must not grow it for ever.
  private val lastLocations = new java.util.LinkedHashMap[StateStoreId, String]() {
    override def removeEldestEntry(eldest: java.util.Map.Entry[StateStoreId, String]): Boolean =
      size() > rememberedStores
  }

  private val finisher = Executors.newScheduledThreadPool(2, (task: Runnable) => {
    val thread = new Thread(task, "pyrocks-finish-ended-run")
    thread.setDaemon(true)
    thread
  })

  override def receiveAndReply(context: RpcCallContext): PartialFunction[Any, Unit] = {
    case report @ ReportActiveInstance(id, host, executorId, _) =>
      runsWithStores += id.queryRunId
      lastLocations.remove(id.storeId) // re-inserted last: the most recent report is kept
      lastLocations.put(id.storeId, ExecutorCacheTaskLocation(host, executorId).toString)
      super.receiveAndReply(context)(report)
    case ask @ GetLocation(id) =>
      val held = new HeldReply(context)
      super.receiveAndReply(held)(ask)
      held.ifAnswered(None, Option(lastLocations.get(id.storeId)))
      held.release()
    case deactivate @ DeactivateInstances(runId) =>
      val held = new HeldReply(context)
      super.receiveAndReply(held)(deactivate)
      if (runsWithStores.remove(runId)) endThenAnswer(runId, held) else held.release()
    case other if super.receiveAndReply(context).isDefinedAt(other) =>
      super.receiveAndReply(context)(other)
  }

  private def endThenAnswer(runId: UUID, held: HeldReply): Unit = {
    val deadline = finisher.schedule((() => {
      if (held.release()) {
        logWarning(s"the stores of ended run $runId take longer than $holdAtMostMs ms to " +
          "finish; the query's termination goes on, the finish continues in the background")
      }
    }): Runnable, holdAtMostMs, TimeUnit.MILLISECONDS)
    finisher.execute { () =>
      try whenRunEnds(runId)
      catch {
        case NonFatal(e) => logWarning(s"finishing the stores of ended run $runId: $e", e)
      } finally {
        deadline.cancel(false)
        held.release()
      }
    }
  }

  override def onStop(): Unit = {
    finisher.shutdownNow()
    super.onStop()
  }

  /** Keeps the answer Spark's handler gives until `release()`; releases once only. */
  private class HeldReply(context: RpcCallContext) extends RpcCallContext {
    private val released = new AtomicBoolean(false)
    @volatile private var answer: Either[Throwable, Any] = Right(true)
    override def reply(response: Any): Unit = answer = Right(response)
    override def sendFailure(e: Throwable): Unit = answer = Left(e)
    override def senderAddress: RpcAddress = context.senderAddress
    /** Holds `instead` if the held answer is `answered`. */
    def ifAnswered(answered: Any, instead: Any): Unit =
      if (answer == Right(answered)) answer = Right(instead)
    /** Sends the held answer; false if it was sent already. */
    def release(): Boolean = released.compareAndSet(false, true) && {
      answer.fold(context.sendFailure, context.reply)
      true
    }
  }
}

object PyRocksCoordinator extends Logging {
  private val EndpointName = "StateStoreCoordinator" // StateStoreCoordinatorRef's

  /**
   * Registers the coordinator in the driver of the running application, unless the
   * application's conf sets `enabledKey` to false, or a coordinator already runs: ours (an
   * earlier session) or Spark's own (a session without this shim's extension used streaming
   * first; then the stores of an ended run are finished when Spark's maintenance unloads
   * them, as before). `whenRunEnds` gets the context and the id of the run that ended.
   */
  def installInActiveContext(enabledKey: String,
      whenRunEnds: (SparkContext, UUID) => Unit): Boolean =
    SparkContext.getActive.exists { sc =>
      sc.conf.getBoolean(enabledKey, defaultValue = true) && install(sc, whenRunEnds(sc, _))
    }

  private def install(sc: SparkContext, whenRunEnds: UUID => Unit): Boolean = {
    val env = sc.env
    val askTimeoutMs = sc.conf.getTimeAsMs("spark.rpc.askTimeout",
      sc.conf.get("spark.network.timeout", "120s"))
    try {
      env.rpcEnv.setupEndpoint(EndpointName,
        new PyRocksCoordinator(env.rpcEnv, SQLConf.get, whenRunEnds, askTimeoutMs / 2))
      true
    } catch {
      case _: IllegalArgumentException =>
        logDebug("a state store coordinator already runs in this application")
        false
    }
  }
}

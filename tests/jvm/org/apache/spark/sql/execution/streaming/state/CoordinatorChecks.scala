package org.apache.spark.sql.execution.streaming.state

import java.util.UUID
import java.util.concurrent.{CompletableFuture, TimeUnit}

import io.pyrocks.statestore.Fixture

import org.apache.spark.rpc.{RpcAddress, RpcCallContext}
import org.apache.spark.scheduler.ExecutorCacheTaskLocation
import org.apache.spark.sql.internal.SQLConf

/** `PyRocksCoordinator`, asked as Spark's scheduler and query thread ask it. It lives in
 * Spark's package, as the coordinator does, to reach it. */
object CoordinatorChecks {
  val all: Map[String, Fixture => Unit] = Map(
    "a-new-run-goes-where-its-stores-last-ran" -> newRunGoesWhereItsStoresLastRan,
    "the-coordinator-remembers-the-stores-that-reported-last" -> remembersTheLatestStores)

  /** An answer as the RPC layer would send it; a failure is thrown to the asker. */
  private final class Answer extends RpcCallContext {
    val value = new CompletableFuture[Any]()
    override def reply(response: Any): Unit = value.complete(response)
    override def sendFailure(e: Throwable): Unit = value.completeExceptionally(e)
    override def senderAddress: RpcAddress = RpcAddress("127.0.0.1", 1)
  }

  private def ask(coordinator: PyRocksCoordinator, message: Any): Any = {
    val answer = new Answer
    coordinator.receiveAndReply(answer)(message)
    answer.value.get(30, TimeUnit.SECONDS) // a deactivation is answered by another thread
  }

  private def where(coordinator: PyRocksCoordinator, store: StateStoreId, run: UUID): Any =
    ask(coordinator, GetLocation(StateStoreProviderId(store, run)))

  private def report(coordinator: PyRocksCoordinator, store: StateStoreId, run: UUID,
      host: String, executor: String): Unit =
    ask(coordinator, ReportActiveInstance(StateStoreProviderId(store, run), host, executor,
      Seq.empty))

  /** The location Spark's coordinator answers for an executor. */
  private def at(host: String, executor: String): Option[String] =
    Some(ExecutorCacheTaskLocation(host, executor).toString)

  /** Spark keys locations by run, so a restarted query's first batch would have none: a
   * store with no location in its run is sent where it last reported from, in any run; a
   * store that ran nowhere gets none; within a run, Spark's own answer stands. */
  def newRunGoesWhereItsStoresLastRan(f: Fixture): Unit = {
    import f.expect
    val coordinator = new PyRocksCoordinator(null, new SQLConf, _ => (), 10000L)
    try {
      val Seq(a, b, never) = Seq(3, 4, 5).map(StateStoreId("/q/state", 0L, _))
      val Seq(first, second, third) = Seq.fill(3)(UUID.randomUUID())
      def whereIn(store: StateStoreId, run: UUID): Any = where(coordinator, store, run)

      report(coordinator, a, first, "host-a", "1")
      report(coordinator, b, first, "host-b", "2")
      ask(coordinator, DeactivateInstances(first))
      expect(whereIn(a, second) == at("host-a", "1"), s"a's new run goes to ${whereIn(a, second)}")
      expect(whereIn(b, second) == at("host-b", "2"), s"b's new run goes to ${whereIn(b, second)}")
      expect(whereIn(never, second) == None,
        s"a store never run goes to ${whereIn(never, second)}")

      // the new run's batch ran elsewhere: the hint follows
      report(coordinator, a, second, "host-c", "3")
      expect(whereIn(a, third) == at("host-c", "3"), s"a moved, yet goes to ${whereIn(a, third)}")
      // two runs at once: each keeps Spark's own answer
      report(coordinator, a, third, "host-d", "4")
      expect(whereIn(a, second) == at("host-c", "3"),
        s"run 2's a goes to ${whereIn(a, second)}")
      expect(whereIn(a, third) == at("host-d", "4"), s"run 3's a goes to ${whereIn(a, third)}")
    } finally coordinator.onStop()
  }

  /** The last locations are kept for the stores that reported last, however many ran. */
  def remembersTheLatestStores(f: Fixture): Unit = {
    import f.expect
    val coordinator = new PyRocksCoordinator(null, new SQLConf, _ => (), 10000L,
      rememberedStores = 2)
    try {
      val Seq(a, b, c) = Seq(1, 2, 3).map(StateStoreId("/q/state", 0L, _))
      val (run, next) = (UUID.randomUUID(), UUID.randomUUID())
      def executorOf(store: StateStoreId): String = s"${store.partitionId}"
      def whereNext(store: StateStoreId): Any = where(coordinator, store, next)
      // a reported again after b: b is the eldest
      Seq(a, b, a, c).foreach(s => report(coordinator, s, run, "host", executorOf(s)))
      expect(whereNext(a) == at("host", executorOf(a)),
        s"a, reported again, goes to ${whereNext(a)}")
      expect(whereNext(b) == None, s"b, the eldest of 3 with room for 2, goes to ${whereNext(b)}")
      expect(whereNext(c) == at("host", executorOf(c)),
        s"c, reported last, goes to ${whereNext(c)}")
    } finally coordinator.onStop()
  }
}

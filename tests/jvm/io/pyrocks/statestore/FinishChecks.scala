package io.pyrocks.statestore

import java.nio.file.{Path, Paths}

import scala.jdk.CollectionConverters._

import org.apache.hadoop.conf.Configuration

import org.apache.spark.sql.execution.streaming.state._

/** `PyRocksStateStoreProvider.finishQuery`: the live providers of one checkpoint are
 * finished at once (final snapshot of the last committed version) and stay open. */
object FinishChecks {
  val all: Map[String, Fixture => Unit] = Map(
    "finish-query-matches-its-checkpoint-only" -> matchesItsCheckpointOnly,
    "finish-query-skips-writers-and-closed-providers" -> skipsWritersAndClosedProviders,
    "finish-query-names-every-failed-store" -> namesEveryFailedStore,
    "a-run-end-ends-each-workers-stores-in-one-request" -> endsEachWorkersStoresTogether)

  /** A provider whose store takes no idle snapshots: a last version's snapshot is the
   * finish's (or the end's) alone to take, however long the machine stalls between two
   * steps of a check (with the default, one second without a request took it). */
  private def providerOf(f: Fixture, root: Path, partition: Int,
      options: (String, String)*): PyRocksStateStoreProvider = {
    val provider = new PyRocksStateStoreProvider
    val noIdleSnapshots = ("snapshotWhenIdleSeconds" -> "0") +: options
    provider.init(StateStoreId(root.toString, 0L, partition), f.keySchema, f.valueSchema,
      NoPrefixKeyStateEncoderSpec(f.keySchema), useColumnFamilies = true,
      f.conf(noIdleSnapshots: _*),
      new Configuration(), useMultipleValuesPerKey = false, stateSchemaProvider = None)
    provider
  }

  /** Commits version `version + 1` with one write. */
  private def commitOne(f: Fixture, p: PyRocksStateStoreProvider, version: Long): Unit = {
    val store = p.getStore(version)
    store.put(f.key(version), f.value(version))
    store.commit()
  }

  /** Committed versions not yet covered by a published snapshot, as the worker counts them. */
  private def uploadLag(p: PyRocksStateStoreProvider): Long =
    Fixture.customMetric(p, "pyrocks.upload_lag_versions")

  /** Every spelling of a checkpoint (or of its `state` directory) finishes its providers,
   * and only those: not a sibling whose name it prefixes, not a path that matches nothing. */
  def matchesItsCheckpointOnly(f: Fixture): Unit = {
    import f._
    val a = checkpoint("a") // <work>/a/state, as Spark's <checkpoint>/state
    val ab = checkpoint("ab")
    val providers = Seq(providerOf(f, a, 0), providerOf(f, a, 1), providerOf(f, ab, 0))
    providers.foreach(commitOne(f, _, 0))
    val Seq(a0, a1, ab0) = providers
    expect(providers.map(uploadLag) == Seq(1L, 1L, 1L), "version 1 already had a snapshot")

    val nothing = PyRocksStateStoreProvider.finishQuery(work.resolve("nothing").toString)
    expect(nothing == 0, s"a checkpoint with no store finished $nothing providers")
    expect(PyRocksStateStoreProvider.finishQuery(work.toString) == 0,
      "the parent of the checkpoints matched their stores")
    expect(providers.map(uploadLag) == Seq(1L, 1L, 1L), "a store was finished by another path")

    val dir = a.getParent
    val relative = Paths.get("").toAbsolutePath.relativize(dir).toString
    val spellings = Seq(dir.toString, s"$dir/", s"file:$dir", s"file://$dir", dir.toUri.toString,
      a.toString, s"file:$a/", relative)
    for (spelling <- spellings) {
      val n = PyRocksStateStoreProvider.finishQuery(spelling)
      expect(n == 2, s"finishQuery($spelling) finished $n providers, not the 2 of ${dir}")
    }
    expect(uploadLag(a0) == 0 && uploadLag(a1) == 0, "a finished store has no final snapshot")
    expect(uploadLag(ab0) == 1, s"a store of $ab was finished by $dir, a prefix of its name")

    // Finished, not closed: the providers go on, and finish again.
    commitOne(f, a0, 1)
    val v2 = a0.getStore(2)
    expect(valueOf(v2.get(key(0))).contains(0L) && valueOf(v2.get(key(1))).contains(1L),
      "the finished store lost a committed write")
    v2.abort()
    expect(uploadLag(a0) == 1, "version 2 had a snapshot before any finish")
    expect(PyRocksStateStoreProvider.finishQuery(ab.toString) == 1, s"$ab: not finished")
    expect(uploadLag(ab0) == 0 && uploadLag(a0) == 1, "finishing ab touched a")
    providers.foreach(_.close())
  }

  /** A store being updated is not finished (nor counted) until its task commits; a closed
   * provider, or one whose worker is known gone, has nothing to finish. */
  def skipsWritersAndClosedProviders(f: Fixture): Unit = {
    import f._
    val root = checkpoint("w")
    val p = providerOf(f, root, 0)
    commitOne(f, p, 0)
    val store = p.getStore(1)
    store.put(key(1), value(1))
    expect(PyRocksStateStoreProvider.finishQuery(root.toString) == 0,
      "a store was finished while a task was updating it")
    store.commit()
    expect(uploadLag(p) == 2, s"the updated store was snapshotted: lag ${uploadLag(p)}")
    expect(PyRocksStateStoreProvider.finishQuery(root.toString) == 1, "not finished once idle")
    expect(uploadLag(p) == 0, "the last committed version has no snapshot after finishing")
    p.close()
    expect(PyRocksStateStoreProvider.finishQuery(root.toString) == 0,
      "a closed provider was finished")

    val lostRoot = checkpoint("lost")
    val lost = providerOf(f, lostRoot, 0)
    commitOne(f, lost, 0)
    val pid = workerPid(lost)
    signal(pid, "KILL")
    eventually(s"worker $pid exits")(!isAlive(pid))
    expectThrows[WorkerFailedException](lost.getStore(1)) // how the provider learns of it
    expect(lost.currentConnection.forall(_.isBroken), "the connection outlived its worker")
    expect(PyRocksStateStoreProvider.finishQuery(lostRoot.toString) == 0,
      "a provider whose worker is gone was counted as finished")
    commitOne(f, lost, 1) // a new worker takes over
    expect(PyRocksStateStoreProvider.finishQuery(lostRoot.toString) == 1,
      "the provider on its new worker was not finished")
    lost.close()
  }

  /** Two stores on a frozen worker and one on a sound worker: the sound one is finished all
   * the same, then one exception names both failed stores and why. */
  def namesEveryFailedStore(f: Fixture): Unit = {
    import f._
    val root = checkpoint("f")
    val options = Seq("workers" -> "2", "requestTimeoutSeconds" -> "5")
    // Worker index = partition % 2: partitions 0 and 2 share a worker, 1 has the other.
    val Seq(p0, p1, p2) = Seq(0, 1, 2).map(providerOf(f, root, _, options: _*))
    Seq(p0, p1, p2).foreach(commitOne(f, _, 0))
    val frozen = workerPid(p0)
    expect(workerPid(p2) == frozen && workerPid(p1) != frozen,
      s"workers: ${Seq(p0, p1, p2).map(workerPid)}")
    // Each worker's stores are ended by threads of their own, so a frozen worker holds none.
    val queues = LiveProviders.perWorker(Seq(p0, p1, p2)).map(_.asScala.toSet).toSet
    expect(queues == Set(Set(p0, p2), Set(p1)), s"ended by worker: ${queues.map(_.map(_.describe))}")
    signal(frozen, "STOP")
    val failed = try {
      expectThrows[StoresNotFinishedException](PyRocksStateStoreProvider.finishQuery(root.toString))
    } finally resumeUnlessGone(frozen)  // the shim may have killed it (its deadline passed)
    val message = failed.getMessage
    expect(message.contains(p0.describe) && message.contains(p2.describe) &&
      !message.contains(p1.describe), s"the failure names the wrong stores: $message")
    expect(message.contains("FINISH") && message.contains(s"pid $frozen"),
      s"the failure does not say why: $message")
    expect(uploadLag(p1) == 0, "the store on the sound worker was not finished")
    Seq(p0, p1, p2).foreach(_.close())
  }

  /** A run's end (`LiveProviders.endAll`): each worker's stores are ended by one END_STORES
   * request. Two stores on a frozen worker fail together, each named, with the request, the
   * stores it ended and the worker; the store on the sound worker ends all the same. Then three stores on sound
   * workers all end. Every ended store took its final snapshot (the next provider loads its
   * last version with nothing to replay) and let its connection go, which is then closed. */
  def endsEachWorkersStoresTogether(f: Fixture): Unit = {
    import f._
    val options = Seq("workers" -> "2", "requestTimeoutSeconds" -> "5")
    def twoVersions(root: Path): Seq[PyRocksStateStoreProvider] = {
      val providers = Seq(0, 1, 2).map(providerOf(f, root, _, options: _*))
      providers.foreach { p => commitOne(f, p, 0); commitOne(f, p, 1) }
      expect(providers.forall(uploadLag(_) > 0), "version 2 had a snapshot before the end")
      providers
    }
    def replayedByTheNext(root: Path, partition: Int): Long = {
      val next = providerOf(f, root, partition, options: _*)
      try {
        next.getStore(2).abort()
        Fixture.customMetric(next, "pyrocks.replayed_versions")
      } finally next.close()
    }

    val frozenRoot = checkpoint("ended-frozen")
    val Seq(p0, p1, p2) = twoVersions(frozenRoot) // partitions 0 and 2 share a worker
    val frozen = workerPid(p0)
    expect(workerPid(p2) == frozen && workerPid(p1) != frozen,
      s"workers: ${Seq(p0, p1, p2).map(workerPid)}")
    signal(frozen, "STOP")
    val outcome = try LiveProviders.endAll(Seq(p0, p1, p2)) finally resumeUnlessGone(frozen)
    expect(outcome.finished == Seq(p1.instanceId), s"ended: ${outcome.finished}")
    expect(outcome.failures.size == 2 &&
      Seq(p0, p2).forall(p => outcome.failures.exists(_.startsWith(p.describe))),
      s"the failures name the wrong stores: ${outcome.failures}")
    expect(outcome.failures.forall(m => m.contains("END_STORES for 2 stores") &&
      m.contains(s"pid $frozen")), s"the failures do not say why: ${outcome.failures}")
    expect(Seq(p0, p1, p2).forall(_.currentConnection.isEmpty), "an ended store kept its connection")
    expect(replayedByTheNext(frozenRoot, 1) == 0, "the sound worker's store has no final snapshot")

    val soundRoot = checkpoint("ended-sound")
    val sound = twoVersions(soundRoot)
    val connections = sound.flatMap(_.currentConnection)
    val ended = LiveProviders.endAll(sound)
    expect(ended.failures.isEmpty, s"failed: ${ended.failures}")
    expect(ended.finished.toSet == sound.map(_.instanceId).toSet, s"ended: ${ended.finished}")
    eventually("the ended stores' connections are closed")(connections.forall(!_.isOpen))
    for (partition <- 0 to 2) {
      expect(replayedByTheNext(soundRoot, partition) == 0, s"partition $partition has no final snapshot")
    }
  }
}

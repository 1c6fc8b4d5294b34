package io.pyrocks.statestore

import java.net.InetAddress
import java.nio.ByteBuffer
import java.nio.charset.StandardCharsets.UTF_8
import java.util.UUID
import java.util.concurrent.ConcurrentHashMap

import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import org.apache.hadoop.conf.Configuration
import org.json4s.{DefaultFormats, JLong, JObject, JString}
import org.json4s.jackson.JsonMethods.{compact, parse, render}

import org.apache.spark.{SparkEnv, TaskContext}
import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types.StructType

/**
 * Spark's entry point: `spark.sql.streaming.stateStore.providerClass` names this class.
 *
 * One provider serves one store (operator, partition, store name) for one query run. It
 * holds one connection to the worker that owns the store's working copy; every call goes
 * through `request`/`write` under the provider's lock, because Spark's maintenance thread
 * calls in while a task may be using a store. Puts may be held back a few at a time
 * (`PendingPuts`); whatever reads or writes the cache or the connection takes the lock
 * through `locked`, which writes them first.
 *
 * One writer per working copy (WriterSlot); where the store lives and whose it is
 * (StoreLocation); its metrics (ProviderMetrics); how rows become bytes (ColumnFamilyCodec);
 * the exact read cache (ReadCache).
 */
class PyRocksStateStoreProvider extends StateStoreProviderApi with FineGrainedReplayCompat
    with Logging {
  import PyRocksStateStoreProvider._

  private var storeId: StateStoreId = _
  private var location: StoreLocation = _
  private var storeConf: StateStoreConf = _
  private var schemas: Option[StateSchemaProvider] = None // the value schemas' history
  private var hadoopConf: Configuration = _
  private var launch: LaunchOptions = _
  private val codecs = new ConcurrentHashMap[String, ColumnFamilyCodec]()
  // Written under the lock; volatile so tests and diagnostics can look without waiting.
  @volatile private var connection: Connection = _
  private var cache: ReadCache = _ // guarded by this; see ReadCache for why it stays exact
  private val pending = new PendingPuts() // guarded by this
  private val localName = UUID.randomUUID().toString
  private var iteratorIds = 0
  private var writer: WriterSlot = _ // guarded by this

  override def init(
      stateStoreId: StateStoreId,
      keySchema: StructType,
      valueSchema: StructType,
      keyStateEncoderSpec: KeyStateEncoderSpec,
      useColumnFamilies: Boolean,
      storeConfs: StateStoreConf,
      hadoopConf: Configuration,
      useMultipleValuesPerKey: Boolean,
      stateSchemaProvider: Option[StateSchemaProvider]): Unit = {
    this.storeId = stateStoreId
    this.storeConf = storeConfs
    this.schemas = stateSchemaProvider
    this.hadoopConf = hadoopConf
    this.launch = LaunchOptions.fromConfs(storeConfs.sqlConfs)
    this.location = new StoreLocation(stateStoreId, hadoopConf, Option(TaskContext.get()))
    this.writer = new WriterSlot(this, launch.requestTimeoutSeconds, describe)
    registerColumnFamily(Wire.DefaultCf, keySchema, valueSchema, keyStateEncoderSpec,
      useMultipleValuesPerKey)
    // No connection yet: Spark inits every provider of the executor under one lock
    // (StateStore.getStateStoreProvider), and a connection starts a worker process or opens
    // the store in one, which tasks then did one after another (at 200 partitions, 1.8 s in
    // all of a first batch). The first load connects, the tasks side by side; a bad option or
    // a broken worker fails that task there.
    val budget = CacheBudget.of(launch.readCacheMB)
    this.cache = ParkedCaches.adopt(parkingName, budget).getOrElse(new ReadCache(budget))
    LiveProviders.add(this)
  }

  override def stateStoreId: StateStoreId = storeId

  def describe: String = location.describe

  /** The store, as ParkedCaches knows it: its checkpoint location as Spark resolved it. */
  private def parkingName: String = storeId.storeCheckpointLocation().toString

  override def getStore(
      version: Long,
      uniqueId: Option[String],
      forceSnapshotOnCommit: Boolean,
      loadEmpty: Boolean): StateStore = {
    val deadline = System.nanoTime() + launch.requestTimeoutSeconds * 1000000000L
    synchronized {
      writer.awaitFree(version, "update", deadline)
      load(version, empty = loadEmpty, checkpointId = uniqueId)
      val store = new PyRocksStateStore(this, version, readOnly = false)
      writer.take(store, connection)
      store
    }
  }

  override def getReadStore(version: Long, uniqueId: Option[String]): ReadStateStore = {
    val deadline = System.nanoTime() + launch.requestTimeoutSeconds * 1000000000L
    synchronized {
      writer.awaitFree(version, "read", deadline)
      load(version, checkpointId = uniqueId)
      new PyRocksStateStore(this, version, readOnly = true)
    }
  }

  override def replayFrom(snapshotVersion: Long, endVersion: Long,
      readOnly: Boolean): StateStore = {
    if (!readOnly) {
      throw new UnsupportedOperationException(s"$ProviderName replays a snapshot for reading " +
        s"only (the state data source's snapshotStartBatchId), not to update $describe")
    }
    val deadline = System.nanoTime() + launch.requestTimeoutSeconds * 1000000000L
    synchronized {
      writer.awaitFree(endVersion, "read", deadline)
      val body = ByteBuffer.allocate(16).putLong(snapshotVersion).putLong(endVersion).array()
      try request(Wire.LoadFromSnapshot, body) catch {
        case e: PyRocksStoreException => throw new IllegalStateException(s"cannot replay " +
          s"version $endVersion of $describe from the snapshot of version $snapshotVersion: " +
          e.getMessage, e)
      }
      cache.loaded(endVersion, unchanged = false)
      new PyRocksStateStore(this, endVersion, readOnly = true)
    }
  }

  override def changesBetween(startVersion: Long, endVersion: Long, colFamily: Option[String])
      : (Iterator[PyRocksFineGrainedReplay.Change], () => Unit) = {
    val cf = colFamily.getOrElse(Wire.DefaultCf)
    val c = codec(cf)
    def version(v: Long) = ByteBuffer.allocate(8).putLong(v).array()
    val scan = synchronized {
      new ChunkedScan(this, nextIteratorId(), Wire.ScanChanges, cfBytes(cf), version(startVersion),
        version(endVersion))
    }
    val changes = scan.pairs.map { case (head, value) =>
      val fields = ByteBuffer.wrap(head)
      val changed = fields.getLong()
      val op = fields.get()
      val key = c.decodeKey(java.util.Arrays.copyOfRange(head, ChangeHeadBytes, head.length))
      val kind = op match {
        case Wire.OpPut => RecordType.PUT_RECORD
        case Wire.OpDelete => RecordType.DELETE_RECORD
        case Wire.OpMerge => RecordType.MERGE_RECORD
        case other => throw new IllegalStateException(s"change feed of $describe: unknown " +
          s"change $other in version $changed")
      }
      (kind, key, if (op == Wire.OpDelete) null else c.decodeValue(value), changed - 1)
    }
    (changes, () => scan.close())
  }

  /** `empty`: Spark's loadEmpty, an empty store standing at `version` whose commit publishes
   * version + 1 with nothing before it (an offline writer, e.g. a canonical restore). */
  private def load(version: Long, empty: Boolean = false,
      checkpointId: Option[String] = None): Unit = synchronized {
    val kind = if (empty) Wire.LoadEmpty else Wire.Load
    val id = if (empty) Array.emptyByteArray else checkpointId.getOrElse("").getBytes(UTF_8)
    val body = ByteBuffer.allocate(8 + id.length).putLong(version).put(id).array()
    val answer = try request(kind, body)
    catch {
      case e: PyRocksStoreException => throw new IllegalStateException(
        s"cannot load version $version of $describe: ${e.getMessage}", e)
    }
    cache.loaded(version, unchanged = jsonField(answer, "unchanged") == "true", empty = empty,
      loadedCommit = jsonString(answer, "commit_id"))
  }

  /** A failed commit leaves `store` the writer: the task's abort releases it. */
  private[statestore] def commit(store: PyRocksStateStore, newVersion: Long): Unit =
    locked {
      val answer = try request(Wire.Commit, ByteBuffer.allocate(8).putLong(newVersion).array())
      catch {
        case NonFatal(e) =>
          cache.invalidate()
          throw new IllegalStateException(
            s"failed to commit version $newVersion of $describe: ${e.getMessage}", e)
      }
      writer.release(store)
      // Lost the race to publish: the worker reloads the winner's state, so must we.
      val commitId = jsonString(answer, "checkpoint_id")
      if (jsonField(answer, "published") == "true") cache.committed(newVersion, commitId)
      else cache.invalidate()
      store.committedAs(commitId, jsonString(answer, "base_checkpoint_id"))
      CoordinatorCompat.reportCommit(storeConf, newVersion, storeId, hadoopConf)
    }

  /** Never throws over the error that made the task abort; always releases the writer. */
  private[statestore] def abort(store: PyRocksStateStore): Unit = synchronized {
    try {
      pending.discard() // never sent: the abort undoes what was
      cache.invalidate()
      // A broken connection needs nothing undone: the worker drops the session's writes.
      if (connection != null && !connection.isBroken) {
        try request(Wire.Abort, Array.emptyByteArray) catch {
          case NonFatal(e) => logWarning(s"abort of $describe failed: ${e.getMessage}")
        }
      }
    } finally writer.release(store)
  }

  private def jsonField(answer: Array[Byte], field: String): String = {
    implicit val formats: DefaultFormats.type = DefaultFormats
    (parse(new String(answer, UTF_8)) \ field).values.toString
  }

  private def jsonString(answer: Array[Byte], field: String): Option[String] =
    parse(new String(answer, UTF_8)) \ field match {
      case JString(text) => Some(text)
      case _ => None
    }

  /** Whether Spark keeps state store checkpoint ids in its commit log (format version 2). */
  private[statestore] def checkpointIdsEnabled: Boolean = storeConf.enableStateStoreCheckpointIds

  // ---- reads and writes: the read cache sits here ---------------------------------------

  /** `prefix`: the key's scan prefix in a prefix-scan column family (where the read cache
   * keeps the key). */
  private[statestore] def get(cf: String, key: Array[Byte], multipleValues: Boolean,
      prefix: Option[Array[Byte]]): Option[Array[Byte]] = locked {
    val known = if (multipleValues) None else cache.lookup(cf, key, prefix)
    // Not `getOrElse`: its closure was a sixth of the bytes a get allocated (a JFR profile:
    // docs/benchmarks.md, Dec 7, stop 97).
    if (known.isDefined) known.get else ask(cf, key, multipleValues, prefix)
  }

  /** A get the cache cannot answer, asked of the worker (and remembered). */
  private def ask(cf: String, key: Array[Byte], multipleValues: Boolean,
      prefix: Option[Array[Byte]]): Option[Array[Byte]] = {
    val ahead = if (multipleValues || prefix.isDefined) 0 else cache.aheadBytes(cf, key)
    if (ahead > 0) {
      val body = keyBody(cf, key, 4).putInt(0, ahead).array()
      cache.learnAhead(cf, key, request(Wire.ReadAhead, body), ahead)
    } else {
      val answer = request(Wire.Get, keyBody(cf, key, 0).array())
      val value = if (answer(0) == 0) None
        else Some(java.util.Arrays.copyOfRange(answer, 1, answer.length))
      if (!multipleValues) cache.remember(cf, key, value.orNull, prefix)
      value
    }
  }

  /** A request body naming one key, `[cf length: short][cf][key]`, after `lead` bytes the
   * caller fills in (READ_AHEAD's byte limit). */
  private def keyBody(cf: String, key: Array[Byte], lead: Int): ByteBuffer = {
    val cfField = cfBytes(cf)
    val body = ByteBuffer.allocate(lead + 2 + cfField.length + key.length)
    body.position(lead)
    body.putShort(cfField.length.toShort).put(cfField).put(key)
    body
  }

  /** Writes take the key's scan prefix (prefix-scan column families): the cache keeps its
   * prefix listings exact through it. A single value under a key without one is held
   * (`PendingPuts`). */
  private[statestore] def put(cf: String, key: Array[Byte], value: Array[Byte],
      multipleValues: Boolean, prefix: Option[Array[Byte]]): Unit =
    if (!multipleValues && prefix.isEmpty) hold(cf, key, value)
    else locked {
      if (multipleValues) {
        write(Wire.OpPut, cf, key, value)
        cache.forget(cf, key, prefix)
      } else {
        write(withExistence(Wire.OpPut, cache.write(cf, key, value, prefix)), cf, key, value)
      }
    }

  /** Holds a put; a full group, or one of another family, is written. */
  private def hold(cf: String, key: Array[Byte], value: Array[Byte]): Unit = synchronized {
    if (!pending.accepts(cf)) writePending()
    pending.hold(cf, key, value)
    if (pending.isFull) writePending()
  }

  /** The provider's lock, the puts held written first: taken by whatever reads or writes the
   * cache or the connection, so that nothing sees the store without them. */
  private def locked[T](f: => T): T = synchronized {
    writePending()
    f
  }

  private def writePending(): Unit = if (!pending.isEmpty) pending.writeTo(cache)(sendPut)

  private val sendPut = (cf: String, key: Array[Byte], value: Array[Byte], prior: Int) =>
    write(withExistence(Wire.OpPut, prior), cf, key, value)

  private[statestore] def remove(cf: String, key: Array[Byte],
      prefix: Option[Array[Byte]]): Unit = locked {
    val prior = cache.write(cf, key, null, prefix)
    // Known absent: removing it changes nothing, so nothing is sent.
    if (prior != ReadCache.Absent) {
      write(withExistence(Wire.OpDelete, prior), cf, key, Array.emptyByteArray)
    }
  }

  /** Tells the worker what the cache knows of the key's existence: it counts keys exactly
   * without looking the key up again. */
  private def withExistence(op: Byte, prior: Int): Byte = prior match {
    case ReadCache.Present => (op | Wire.Known | Wire.Existed).toByte
    case ReadCache.Absent => (op | Wire.Known).toByte
    case _ => op
  }

  private[statestore] def merge(cf: String, key: Array[Byte], values: Array[Byte],
      prefix: Option[Array[Byte]]): Unit = locked {
    write(Wire.OpMerge, cf, key, values)
    cache.forget(cf, key, prefix)
  }

  /** A prefix scan the cache can answer costs no round trip; one it cannot teaches it. So
   * does a full scan of a family whose readers take its keys in any order; it starts when
   * its first pair is asked for (Spark's dedup opens one every batch, and may never read
   * it), and lists the state as of then, as the worker's scans do. */
  private[statestore] def scan(cf: String, mode: Byte, a: Array[Byte],
      b: Array[Byte]): KeyValueScan = locked {
    if (mode == Wire.ScanAll && anyOrder(cf)) new DeferredScan(() => locked {
      cache.everything(cf).getOrElse(streamed(cf, mode, a, b))
    })
    else {
      val listed = if (mode == Wire.ScanPrefix) cache.listing(cf, a) else None
      listed.getOrElse(streamed(cf, mode, a, b))
    }
  }

  /** A scan the worker answers, chunk by chunk; a prefix scan teaches the cache its listing. */
  private def streamed(cf: String, mode: Byte, a: Array[Byte], b: Array[Byte]): KeyValueScan = {
    val startEpoch = cache.epoch
    val learn = if (mode != Wire.ScanPrefix) None else Some { (pairs: Seq[(Array[Byte],
        Array[Byte])]) => locked(cache.learnListing(cf, a, pairs, startEpoch)) }
    new ChunkedScan(this, nextIteratorId(), mode, cfBytes(cf), a, b, learn)
  }

  /** The default family of a store without range-scan keys serves Spark's classic operators
   * (aggregation, dedup, joins, sessions, flatMapGroupsWithState), which Spark's HDFS
   * provider serves from a hash map: none depends on the order of a full scan. Families of
   * transformWithState (timers, TTL indexes) stop a scan at the first key not yet due. */
  private def anyOrder(cf: String): Boolean =
    cf == Wire.DefaultCf && !codec(cf).supportsRangeScan && !codec(cf).multipleValues

  private[statestore] def deleteRange(cf: String, start: Array[Byte], end: Array[Byte]): Unit =
    locked {
      write(Wire.OpDeleteRange, cf, start, end)
      cache.invalidate()
    }

  /** A new column family is empty, so what the cache knows stays true. */
  private[statestore] def createColumnFamily(cf: String): Unit =
    locked(write(Wire.OpCreateCf, cf, Array.emptyByteArray, Array.emptyByteArray))

  private[statestore] def dropColumnFamily(cf: String): Boolean = locked {
    cache.invalidate()
    request(Wire.DropCf, cf.getBytes(UTF_8))(0) == 1
  }

  // ---- column families ----------------------------------------------------------------------

  private def cfBytes(cf: String): Array[Byte] =
    if (cf == Wire.DefaultCf) Array.emptyByteArray else cf.getBytes(UTF_8)

  private[statestore] def registerColumnFamily(
      name: String,
      keySchema: StructType,
      valueSchema: StructType,
      spec: KeyStateEncoderSpec,
      multipleValues: Boolean): Unit =
    codecs.computeIfAbsent(name, _ => new ColumnFamilyCodec(s"$name of $describe", keySchema,
      valueSchema, spec, multipleValues,
      ValueEvolution.of(name, schemas, storeConf.stateStoreEncodingFormat)))

  private[statestore] def codec(cf: String): ColumnFamilyCodec = {
    val c = codecs.get(cf)
    if (c == null) throw new IllegalArgumentException(s"column family $cf is not registered " +
      s"in $describe (registered: ${codecs.keySet().asScala.toSeq.sorted.mkString(", ")})")
    c
  }

  private[statestore] def columnFamilies(): Set[String] = {
    implicit val formats: DefaultFormats.type = DefaultFormats
    parse(new String(request(Wire.ListCf, Array.emptyByteArray), UTF_8)).extract[List[String]].toSet
  }

  // ---- the connection -----------------------------------------------------------------------

  private[statestore] def nextIteratorId(): Int = synchronized { iteratorIds += 1; iteratorIds }

  // Called for every write: no closure here (a third of the bytes a put allocated).
  private def write(op: Byte, cf: String, key: Array[Byte], value: Array[Byte]): Unit =
    liveConnection().write(op, cf, key, value)

  private[statestore] def request(kind: Byte, body: Array[Byte]): Array[Byte] =
    locked(liveConnection().request(kind, body))

  private[statestore] def tell(kind: Byte, body: Array[Byte]): Unit =
    locked(liveConnection().tell(kind, body))

  /** A live connection, opening one (and the store in the worker) if needed; the caller
   * holds the provider's lock while it uses it. The writer's working copy lives in its
   * connection's session: once that is gone, the writer cannot go on (a new session has
   * nothing loaded), and says why. */
  private def liveConnection(): Connection = synchronized {
    if (connection == null || connection.isBroken) {
      writer.holder.foreach { store =>
        throw new WorkerFailedException(s"$store lost its working copy: ${writer.lostWorkingCopy}")
      }
      // A new connection means a new working copy: what the cache knew of the last one may
      // not hold. The first connection keeps it: empty, or parked by the store's last
      // provider, which answers only once a load matches its commit (ReadCache.loaded).
      if (connection != null) cache.invalidate()
      connection = null
      val conn = WorkerPool.get(launch).connect(storeId.partitionId, launch.writeBatchBytes,
        launch.requestTimeoutSeconds, describe)
      val opened = try conn.request(Wire.Open, openSpec(localName)) catch {
        case NonFatal(e) => conn.close(); throw e
      }
      IgnoredSettings.warnOnce(opened, msg => logWarning(msg))
      conn.session = sessionOf(opened)
      connection = conn
    }
    connection
  }

  private[statestore] def openSpec(localName: String): Array[Byte] = {
    // Ours, and Spark's own state store settings: the worker maps those that mean the same
    // here (state_store/options.py, SPARK_SETTINGS) and names the others.
    val pyrocks = storeConf.sqlConfs.filter(_._1.startsWith(LaunchOptions.StatePrefix)) +
      (LaunchOptions.RetainKey -> storeConf.minVersionsToRetain.toString)
    val spec = JObject(
      "store_root" -> JString(storeId.storeCheckpointLocation().toString),
      "store_path" -> JString(location.relativePath),
      "store_name" -> JString(describe),
      "local_name" -> JString(localName),
      "query_id" -> JString(location.queryId),
      "run_epoch" -> JLong(location.runEpoch),
      "writer" -> JString(writerName),
      "options" -> JObject(pyrocks.toList.map { case (k, v) => k -> JString(v) }),
      "hadoop" -> JObject(location.filesystemSettings.toList.map { case (k, v) => k -> JString(v) }))
    compact(render(spec)).getBytes(UTF_8)
  }

  // ---- for tests and diagnostics ------------------------------------------------------

  /** Never waits for the lock. */
  private[statestore] def currentConnection: Option[Connection] = Option(connection)

  /** This provider instance, unique across JVMs (also names its working copy). */
  private[statestore] def instanceId: String = localName

  /** The read cache, for tests: takes the lock, as the puts held are written into it first. */
  private[statestore] def readCache: ReadCache = locked(cache)

  // ---- maintenance, metrics, close ----------------------------------------------------------

  override def doMaintenance(): Unit = {
    doSnapshotMaintenance()
    doCleanupMaintenance()
  }

  /** Snapshots are uploaded by the worker's own upload thread, right after the commits
   * that make them due; there is nothing for Spark's maintenance thread to do. */
  override def doSnapshotMaintenance(): Unit = {}

  override def doCleanupMaintenance(): Unit = synchronized {
    if (connection != null && !connection.isBroken) {
      request(Wire.Maintain, ByteBuffer.allocate(4).putInt(storeConf.minVersionsToRetain).array())
    }
  }

  private[statestore] def metrics(): StateStoreMetrics = synchronized {
    ProviderMetrics.of(request(Wire.Metrics, Array.emptyByteArray), cache.memoryBytes,
      cache.pushedOutSinceLoad)
  }

  /** Spark asks for these on the driver while it plans a stateful operator, of a provider it
   * creates for that alone (never `init`ed): the first sign that tasks will open stores. */
  override def supportedCustomMetrics: Seq[StateStoreCustomMetric] = {
    startWorkersAhead()
    ProviderMetrics.Custom
  }

  /**
   * In local mode the driver's JVM runs the tasks, so their workers start while the query is
   * planned and its first stages run, not in its first stateful tasks (each of which waited
   * for a Python to start): those of the slots its state partitions connect to
   * (`spark.sql.shuffle.partitions`, which a restart reads from the checkpoint), no more, as
   * each holds an interpreter's memory. The options are read as the tasks will read them
   * (`StateStoreConf` of the session's conf, which is this thread's `SQLConf.get` only if it
   * names this class), so the tasks find this pool; options the tasks would refuse start
   * nothing here, and the tasks report them.
   */
  private def startWorkersAhead(): Unit = {
    val sqlConf = SQLConf.get
    val master = Option(SparkEnv.get).map(_.conf.get("spark.master", "")).getOrElse("")
    val tasksRunHere = LaunchOptions.localThreads(master).isDefined
    if (tasksRunHere && sqlConf.stateStoreProviderClass == getClass.getName) {
      try WorkerPool.get(LaunchOptions.fromConfs(new StateStoreConf(sqlConf).sqlConfs))
        .startAhead(sqlConf.numShufflePartitions)
      catch { case NonFatal(e) => logInfo(s"workers not started ahead: ${e.getMessage}") }
    }
  }

  /** Whether this store belongs to `checkpointRoot` (the checkpoint or its `state`
   * directory; any spelling of it, see `LiveProviders.qualify`). */
  private[statestore] def belongsTo(checkpointRoot: String): Boolean =
    LiveProviders.matches(storeId.checkpointRootLocation, checkpointRoot, hadoopConf)

  /** Whether a task holds this provider's store for update now. */
  private[statestore] def isBeingUpdated: Boolean = synchronized(writer.isTaken)

  /** Whether a task of query run `runId` created this provider. */
  private[statestore] def servesRun(runId: String): Boolean = location.run.contains(runId)

  /**
   * Finishes the store now, as `close()` does first, and stays open: uploads in flight
   * complete and the last committed version gets a snapshot if it has none (a second
   * finish is a no-op in the worker). For `finishQuery`, once the store's query has stopped.
   * Under the lock, so never in the middle of a request. Returns false, sending nothing,
   * when there is nothing to finish: no live connection (never opened, closed, or its
   * worker is gone), or a store of this provider is being updated (a task's batch must not
   * be snapshotted half-way, and the worker never snapshots uncommitted writes: it would
   * answer as if finished). Throws if the Finish fails or the worker reports failed
   * snapshot uploads.
   */
  private[statestore] def finishNow(): Boolean = synchronized {
    if (connection == null || connection.isBroken) false
    else if (writer.isTaken) {
      logInfo(s"not finishing $describe: ${writer.holder.get} is being updated")
      false
    } else {
      val failures = failuresOf(connection.request(Wire.Finish))
      if (failures.nonEmpty) {
        throw new IllegalStateException(s"the worker reports failed snapshot uploads: " +
          failures.mkString("; "))
      }
      true
    }
  }

  /** The provider is being unloaded (its query stopped or moved): `end`, failures logged. */
  override def close(): Unit =
    end().foreach(failure => logWarning(s"finishing and closing $describe: $failure"))

  /**
   * Finish, then close, in one request: finish completes uploads in flight and gives the
   * last committed version a snapshot if it has none (taken from the closed working copy),
   * so nothing is left half-published; it only ever writes committed state. Close releases
   * the worker-side store and the connection. Returns what failed (a failed snapshot, or the
   * request itself) and never throws: a failure must never mask an error the task already
   * reported. The read cache is parked for the store's next provider in this JVM if it
   * equals a commit (ParkedCaches); this provider keeps none (it is never used again, and if
   * it were, it must not write into a cache another provider took over).
   */
  private[statestore] def end(): Seq[String] = synchronized {
    handOver().fold(Seq.empty[String]) { conn =>
      try failuresOf(conn.request(Wire.Finish, Array(Wire.Closing)))
      catch { case NonFatal(e) => Seq(s"the request failed: ${e.getMessage}") }
      finally conn.close()
    }
  }

  /**
   * What `end` does before its request: the provider lets its store go (no longer live, its
   * read cache parked) and hands over its live connection, which the caller must end the
   * store on (FINISH with CLOSING, or END_STORES with the worker's other stores:
   * LiveProviders.endRunHere) and then close. None if there is none to end: never opened,
   * handed over before, or its worker gone. Under the lock, so never in the middle of a
   * request; once handed over, no request of this provider reaches that session again (a
   * later one opens a new connection), so each session is ended by one request only.
   */
  private[statestore] def handOver(): Option[Connection] = synchronized {
    pending.discard() // of a store never committed: its writes are lost with the session
    LiveProviders.remove(this)
    ParkedCaches.park(parkingName, cache)
    cache = new ReadCache(CacheBudget.of(0)) // answers nothing; charged to nothing
    val handed = Option(connection)
    connection = null
    handed.foreach(conn => if (conn.isBroken) conn.close())
    handed.filterNot(_.isBroken)
  }

  private def sessionOf(openAnswer: Array[Byte]): Long = {
    implicit val formats: DefaultFormats.type = DefaultFormats
    (parse(new String(openAnswer, UTF_8)) \ "session").extract[Long]
  }

  private def failuresOf(finishAnswer: Array[Byte]): List[String] = {
    implicit val formats: DefaultFormats.type = DefaultFormats
    (parse(new String(finishAnswer, UTF_8)) \ "failures").extract[List[String]]
  }
}

object PyRocksStateStoreProvider {
  val ProviderName = "PyRocksStateStoreProvider"
  private val ChangeHeadBytes = 9 // a change feed pair's key: version i64, op u8 (state_store/runtime/protocol.py)

  /**
   * Finishes at once every live provider of this JVM whose store belongs to the checkpoint
   * `checkpointRoot` (a stopped query's: its checkpoint directory, or that directory's
   * `state` subdirectory; `file:/x`, `file:///x` and `/x` name the same one): uploads in
   * flight complete and each store's last committed version gets a snapshot, as when
   * Spark unloads the provider, but the providers stay open (Spark's maintenance still
   * closes them; their second finish is a no-op). Skipped, and not counted: providers with
   * no live worker connection (nothing to finish) and providers a task is updating (a
   * batch is never snapshotted half-way). Returns how many providers were finished; if a
   * Finish fails, the others are still tried, then one `StoresNotFinishedException` names
   * every store that failed and why.
   *
   * From Python: `spark._jvm.io.pyrocks.statestore.PyRocksStateStoreProvider.finishQuery(root)`.
   */
  def finishQuery(checkpointRoot: String): Int = LiveProviders.finishHereOrThrow(checkpointRoot)

  /**
   * `finishQuery` in this driver JVM and, unless the master is local (where the driver is
   * the only executor), in every executor JVM, through one small Spark job whose tasks (at
   * least one per executor, twice as many as there are executor cores) each finish the
   * matching providers of the executor they run on. The checkpoint is qualified here, as
   * Spark qualified the query's location. Returns how many providers were finished in all
   * (each counted once, however many tasks reached its executor); failures are gathered
   * from every JVM into one `StoresNotFinishedException` (tasks report them rather than
   * fail, so a retried task cannot hide one).
   *
   * On a cluster reaching every executor is best effort: Spark does not guarantee where
   * tasks run, so an executor may get none of them (e.g. one busy with another query).
   * Providers of executors not reached finish all the same when Spark's maintenance unloads
   * them, at its next round (`spark.sql.streaming.stateStore.maintenanceInterval`).
   *
   * From Python: `spark._jvm.io.pyrocks.statestore.PyRocksStateStoreProvider`
   * `.finishQueryEverywhere(spark._jsparkSession, root)`.
   */
  def finishQueryEverywhere(spark: SparkSession, checkpointRoot: String): Int =
    LiveProviders.finishEverywhere(spark, checkpointRoot)

  private lazy val thisProcess: String = {
    val host = try InetAddress.getLocalHost.getHostName catch { case NonFatal(_) => "unknown host" }
    s"pid ${ProcessHandle.current().pid()} on $host"
  }

  /** This JVM, for the records a store's worker writes: which executor wrote what. */
  def writerName: String =
    s"executor ${Option(SparkEnv.get).map(_.executorId).getOrElse("(none)")} $thisProcess"
}

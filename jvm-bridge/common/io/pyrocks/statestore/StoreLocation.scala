package io.pyrocks.statestore

import java.io.FileNotFoundException
import java.nio.charset.StandardCharsets.UTF_8
import java.security.MessageDigest

import scala.util.control.NonFatal

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.json4s.{JNothing, JString}
import org.json4s.jackson.JsonMethods.parse

import org.apache.spark.TaskContext
import org.apache.spark.sql.execution.streaming.state.StateStoreId

/**
 * Where a store lives and whose it is: what the worker needs to open its durable root.
 * The query id (the same across restarts) comes from the `metadata` file Spark writes at
 * the checkpoint's root; the worker keeps each query's records apart by it, so a query
 * reset onto a reused path never adopts older state. The run and its epoch come from the
 * task that created the provider (RunEpochs).
 */
final class StoreLocation(val storeId: StateStoreId, hadoopConf: Configuration,
    task: Option[TaskContext]) {
  /** The query run whose task created the provider; None outside a streaming task (a
   * test, a state reader). */
  val run: Option[String] = task.flatMap(t => RunEpochs.runOf(t))

  /** The epoch its commits publish under; 0 outside a query run. */
  val runEpoch: Long = run.map(RunEpochs.epochOf(checkpoint, _, hadoopConf)).getOrElse(0L)

  private def checkpoint: Path = new Path(storeId.checkpointRootLocation).getParent

  /** The streaming query's id; "" where there is none (a provider made outside a query). */
  lazy val queryId: String = Option(checkpoint).map { dir =>
    val file = new Path(dir, "metadata")
    val text = try {
      val in = file.getFileSystem(hadoopConf).open(file)
      try Some(new String(in.readAllBytes(), UTF_8)) finally in.close()
    } catch { case _: FileNotFoundException => None }
    text.map { json =>
      (try parse(json) \ "id" catch { case NonFatal(_) => JNothing }) match {
        case JString(value) if value.nonEmpty => value
        case _ => throw new IllegalStateException(
          s"$file does not hold a streaming query id (expected {\"id\": \"<uuid>\"}): $json")
      }
    }.getOrElse("")
  }.getOrElse("")

  /** Where this store lives under a configured rootUrl: stable across restarts of a query
   * (the worker adds the query id below it). */
  def relativePath: String = {
    val digest = MessageDigest.getInstance("SHA-256")
      .digest(storeId.checkpointRootLocation.getBytes(UTF_8))
    val hash = digest.take(8).map("%02x".format(_)).mkString
    s"$hash/${storeId.operatorId}/${storeId.partitionId}/${storeId.storeName}"
  }

  def describe: String = s"${storeId.checkpointRootLocation} operator ${storeId.operatorId} " +
    s"partition ${storeId.partitionId} store ${storeId.storeName}"

  /** The query's object-store settings, as Hadoop's S3A, ABFS and GCS connectors read them:
   * the worker maps them to its filesystems' options (format/storage/hadoop.py). They hold
   * credentials, so they travel in the OPEN request over the worker's socket only. */
  lazy val filesystemSettings: Map[String, String] =
    StoreLocation.filesystemSettings(hadoopConf)
}

object StoreLocation {
  /** The key prefixes of those settings (the same list as hadoop.PREFIXES in Python). */
  val FilesystemPrefixes: Seq[String] = Seq("fs.s3a.", "fs.azure.", "fs.gs.")

  def filesystemSettings(conf: Configuration): Map[String, String] = {
    val entries = conf.iterator()
    val found = Map.newBuilder[String, String]
    while (entries.hasNext) {
      val entry = entries.next()
      if (FilesystemPrefixes.exists(entry.getKey.startsWith)) {
        // get() rather than the raw value: Hadoop's ${...} substitutions applied
        Option(conf.get(entry.getKey)).foreach(value => found += entry.getKey -> value)
      }
    }
    found.result()
  }
}

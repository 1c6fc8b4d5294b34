package io.pyrocks.statestore

import java.nio.charset.StandardCharsets.UTF_8

import org.json4s.DefaultFormats
import org.json4s.jackson.JsonMethods.parse

import org.apache.spark.sql.execution.streaming.state._

/** The provider's metrics: Spark's two, and this provider's own customMetrics, each named
 * as the worker's METRICS answer names it behind a `pyrocks.` prefix, but for the read
 * cache's own (`ReadCacheEvictions`), which the shim counts. */
object ProviderMetrics {
  val ReadCacheEvictions = "pyrocks.read_cache_evictions"

  val Custom: Seq[StateStoreCustomMetric] = Seq(
    StateStoreCustomTimingMetric("pyrocks.commit_ms", "pyrocks: time to commit (ms)"),
    StateStoreCustomSizeMetric("pyrocks.changelog_bytes", "pyrocks: changelog bytes written"),
    StateStoreCustomSumMetric("pyrocks.snapshots", "pyrocks: snapshots published"),
    StateStoreCustomSumMetric("pyrocks.snapshot_files_uploaded", "pyrocks: snapshot files uploaded"),
    StateStoreCustomSizeMetric("pyrocks.snapshot_bytes_uploaded", "pyrocks: snapshot bytes uploaded"),
    StateStoreCustomSumMetric("pyrocks.snapshot_files_reused", "pyrocks: snapshot files reused"),
    StateStoreCustomSizeMetric("pyrocks.snapshot_bytes_reused", "pyrocks: snapshot bytes reused"),
    StateStoreCustomSumMetric("pyrocks.snapshot_failures", "pyrocks: snapshot uploads failed"),
    StateStoreCustomSumMetric("pyrocks.forced_snapshots", "pyrocks: snapshots forced by the replay bound"),
    StateStoreCustomSumMetric("pyrocks.upload_lag_versions", "pyrocks: versions not yet in a snapshot"),
    StateStoreCustomTimingMetric("pyrocks.load_ms", "pyrocks: time to load versions (ms)"),
    StateStoreCustomSumMetric("pyrocks.replayed_versions", "pyrocks: changelogs replayed at load"),
    StateStoreCustomSumMetric("pyrocks.rebuilds", "pyrocks: working copies rebuilt"),
    StateStoreCustomSumMetric("pyrocks.lost_publish_races", "pyrocks: commits won by another attempt"),
    StateStoreCustomSumMetric("pyrocks.gc_files_deleted", "pyrocks: files deleted by GC"),
    StateStoreCustomSumMetric("pyrocks.round_trips", "pyrocks: requests answered by the worker"),
    StateStoreCustomSumMetric(ReadCacheEvictions,
      "pyrocks: read cache entries evicted (the state outgrew readCacheMB)"))

  /** The worker's METRICS answer as Spark's metrics; memory adds what the shim's read cache
   * holds to the worker's RocksDB memtables and table readers. */
  def of(answer: Array[Byte], cacheBytes: Long, cacheEvictions: Long): StateStoreMetrics = {
    implicit val formats: DefaultFormats.type = DefaultFormats
    val raw = parse(new String(answer, UTF_8)).extract[Map[String, Double]]
      .map { case (k, v) => k -> v.toLong } +
      (ReadCacheEvictions.stripPrefix("pyrocks.") -> cacheEvictions)
    val custom: Map[StateStoreCustomMetric, Long] =
      Custom.map(m => m -> raw.getOrElse(m.name.stripPrefix("pyrocks."), 0L)).toMap
    StateStoreMetrics(raw.getOrElse("num_keys", 0L), raw.getOrElse("memory_bytes", 0L) +
      cacheBytes, custom)
  }
}

package org.apache.spark.sql.execution.streaming.state

import java.util.UUID

import org.apache.hadoop.conf.Configuration

import org.apache.spark.sql.classic.SparkSession

/**
 * What the result store and stop requests need of a running query that Spark's listener
 * events do not say: its checkpoint, its trigger, its session's conf (where `run_once` puts
 * the run key), its last committed batch, and the query itself to stop. Looked up among the
 * application's active queries, which only Spark's own package can read; so this lives here.
 */
object PyRocksQueryRuns {
  final case class RunInfo(checkpoint: String, runsToCompletion: Boolean,
      conf: String => Option[String], hadoopConf: () => Configuration,
      lastCommittedBatch: () => Option[Long], drain: () => Unit, stop: () => Unit)

  /** The active query `queryId`, if this application runs it now. */
  def describe(queryId: UUID): Option[RunInfo] =
    SparkSession.getActiveSession.orElse(SparkSession.getDefaultSession)
      .flatMap(session => Option(session.sharedState.activeStreamingQueries.get(queryId)))
      .map { query =>
        val trigger = query.trigger.getClass.getSimpleName
        RunInfo(query.resolvedCheckpointRoot,
          trigger.startsWith("AvailableNow") || trigger.startsWith("OneTime"),
          key => query.sparkSession.conf.getOption(key),
          () => query.sparkSession.sessionState.newHadoopConf(),
          () => query.commitLog.getLatestBatchId(), () => query.processAllAvailable(),
          () => query.stop())
      }
}

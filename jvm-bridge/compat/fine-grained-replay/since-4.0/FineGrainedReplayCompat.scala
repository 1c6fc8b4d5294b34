// SupportsFineGrainedReplay as Spark 4.0 declares it: no read-only flag, no checkpoint ids.
package org.apache.spark.sql.execution.streaming.state

import org.apache.spark.util.NextIterator

trait FineGrainedReplayCompat extends SupportsFineGrainedReplay with PyRocksFineGrainedReplay {
  override def replayStateFromSnapshot(snapshotVersion: Long, endVersion: Long): StateStore =
    replayFrom(snapshotVersion, endVersion, readOnly = true)

  override def getStateStoreChangeDataReader(startVersion: Long, endVersion: Long,
      colFamilyNameOpt: Option[String]): NextIterator[PyRocksFineGrainedReplay.Change] =
    changeFeed(startVersion, endVersion, colFamilyNameOpt)
}

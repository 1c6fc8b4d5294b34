// SupportsFineGrainedReplay from Spark 4.1 on: a read-only flag and state store checkpoint
// ids (checkpointFormatVersion 2, which this provider refuses when it loads a store).
package org.apache.spark.sql.execution.streaming.state

import org.apache.spark.util.NextIterator

trait FineGrainedReplayCompat extends SupportsFineGrainedReplay with PyRocksFineGrainedReplay {
  override def replayStateFromSnapshot(snapshotVersion: Long, endVersion: Long,
      readOnly: Boolean, snapshotVersionStateStoreCkptId: Option[String],
      endVersionStateStoreCkptId: Option[String]): StateStore =
    replayFrom(snapshotVersion, endVersion, readOnly)

  override def getStateStoreChangeDataReader(startVersion: Long, endVersion: Long,
      colFamilyNameOpt: Option[String], endVersionStateStoreCkptId: Option[String])
      : NextIterator[PyRocksFineGrainedReplay.Change] =
    changeFeed(startVersion, endVersion, colFamilyNameOpt)
}

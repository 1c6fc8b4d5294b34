package org.apache.spark.sql.execution.streaming.state

import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.util.NextIterator

/**
 * Our provider's side of `SupportsFineGrainedReplay` (the state data source's change feed
 * and its `snapshotStartBatchId`), in Spark's package because the change feed's type,
 * `NextIterator`, is private to Spark. The release-specific signatures Spark calls are in
 * compat/fine-grained-replay and forward here.
 */
trait PyRocksFineGrainedReplay {
  /** `endVersion` rebuilt from the snapshot of `snapshotVersion`, for reading. */
  def replayFrom(snapshotVersion: Long, endVersion: Long, readOnly: Boolean): StateStore

  /** Every change versions start..end made to the column family, in order: (kind, key,
   * value or null for a delete, batch id = version - 1), and how to stop early. */
  def changesBetween(startVersion: Long, endVersion: Long, colFamily: Option[String])
      : (Iterator[PyRocksFineGrainedReplay.Change], () => Unit)

  protected def changeFeed(startVersion: Long, endVersion: Long, colFamily: Option[String])
      : NextIterator[PyRocksFineGrainedReplay.Change] = {
    val (changes, stop) = changesBetween(startVersion, endVersion, colFamily)
    new NextIterator[PyRocksFineGrainedReplay.Change] {
      override protected def getNext(): PyRocksFineGrainedReplay.Change =
        if (changes.hasNext) changes.next() else { finished = true; null }
      override protected def close(): Unit = stop()
    }
  }
}

object PyRocksFineGrainedReplay {
  type Change = (RecordType.Value, UnsafeRow, UnsafeRow, Long)
}

// Spark 4.1.x only. The shim's one per-release file: see the other variants beside it.
package org.apache.spark.sql.execution.streaming.state {

import org.apache.spark.rpc.RpcEnv
import org.apache.spark.sql.internal.SQLConf

private[state] abstract class PyRocksCoordinatorBase(rpcEnv: RpcEnv, sqlConf: SQLConf)
  extends StateStoreCoordinator(rpcEnv, sqlConf)
}

package io.pyrocks.statestore {

import org.apache.hadoop.conf.Configuration

import org.apache.spark.sql.execution.streaming.state._

/** Spark 4.0 and 4.1 ask a provider for `getStore(version, uniqueId)` only. */
private[statestore] trait ProviderCompat extends StateStoreProvider {
  def getStore(version: Long, uniqueId: Option[String], forceSnapshotOnCommit: Boolean,
      loadEmpty: Boolean): StateStore
  override def getStore(version: Long, uniqueId: Option[String]): StateStore =
    getStore(version, uniqueId, forceSnapshotOnCommit = false, loadEmpty = false)
}

private[statestore] object SparkCompat {
  def reportCommit(conf: StateStoreConf, version: Long, id: StateStoreId,
      hadoopConf: Configuration): Unit =
    if (conf.commitValidationEnabled) StateStore.reportCommitToCoordinator(version, id, hadoopConf)

  /** No RocksDBKeyStateEncoder.supportsRangeScan before 4.2: only the range spec scans. */
  def supportsRangeScan(encoder: RocksDBKeyStateEncoder, spec: KeyStateEncoderSpec): Boolean =
    spec.isInstanceOf[RangeKeyScanStateEncoderSpec]
}
}

// Spark 4.2 and later. The shim's one per-release file: see the other variants beside it.
package org.apache.spark.sql.execution.streaming.state {

import org.apache.spark.rpc.RpcEnv
import org.apache.spark.sql.internal.SQLConf

private[state] abstract class PyRocksCoordinatorBase(rpcEnv: RpcEnv, sqlConf: SQLConf)
  extends StateStoreCoordinator(rpcEnv, sqlConf)
}

package io.pyrocks.statestore {

import org.apache.hadoop.conf.Configuration

import org.apache.spark.sql.execution.streaming.state._

/** Spark 4.2+ has getStore(version, uniqueId, forceSnapshotOnCommit, loadEmpty) itself. */
private[statestore] trait ProviderCompat extends StateStoreProvider

private[statestore] object SparkCompat {
  def reportCommit(conf: StateStoreConf, version: Long, id: StateStoreId,
      hadoopConf: Configuration): Unit =
    if (conf.commitValidationEnabled) StateStore.reportCommitToCoordinator(version, id, hadoopConf)

  def supportsRangeScan(encoder: RocksDBKeyStateEncoder, spec: KeyStateEncoderSpec): Boolean =
    encoder.supportsRangeScan
}
}

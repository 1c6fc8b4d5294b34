// Spark's state store coordinator from 4.1 on: built with the SQLConf (for snapshot-lag
// reports), and told of every commit when commit validation is on.
package org.apache.spark.sql.execution.streaming.state

import org.apache.hadoop.conf.Configuration

import org.apache.spark.rpc.RpcEnv
import org.apache.spark.sql.internal.SQLConf

private[state] abstract class PyRocksCoordinatorBase(rpcEnv: RpcEnv, sqlConf: SQLConf)
  extends StateStoreCoordinator(rpcEnv, sqlConf)

object CoordinatorCompat {
  def reportCommit(conf: StateStoreConf, version: Long, id: StateStoreId,
      hadoopConf: Configuration): Unit =
    if (conf.commitValidationEnabled) StateStore.reportCommitToCoordinator(version, id, hadoopConf)
}

// Spark's state store coordinator in 4.0: built without a SQLConf, and no commit validation.
package org.apache.spark.sql.execution.streaming.state

import org.apache.hadoop.conf.Configuration

import org.apache.spark.rpc.RpcEnv
import org.apache.spark.sql.internal.SQLConf

private[state] abstract class PyRocksCoordinatorBase(rpcEnv: RpcEnv, sqlConf: SQLConf)
  extends StateStoreCoordinator(rpcEnv)

object CoordinatorCompat {
  /** Nothing to report: Spark validates commits with its coordinator from 4.1 on. */
  def reportCommit(conf: StateStoreConf, version: Long, id: StateStoreId,
      hadoopConf: Configuration): Unit = ()
}

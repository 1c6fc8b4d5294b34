package io.pyrocks.statestore

import org.apache.spark.sql.SparkSessionExtensions
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.execution.streaming.state.PyRocksCoordinator

/**
 * What the shim adds to a session, registered through `spark.sql.extensions` by
 * `spark_conf()`:
 *  - A check at analysis, where Spark itself refuses any provider but its own:
 *    transformWithState (Scala and Python) requires Spark's RocksDBStateStoreProvider by
 *    exact class name, and without this check the query only dies later with an
 *    unrelated-looking "worker crashed" error. (Real-Time Mode fails at start on its own.)
 *  - In the driver, the coordinator that finishes and closes a query's stores the moment
 *    its run ends (`PyRocksCoordinator`), unless `finishWhenQueryEnds` is false.
 */
class PyRocksExtensions extends (SparkSessionExtensions => Unit) {
  override def apply(extensions: SparkSessionExtensions): Unit = {
    PyRocksCoordinator.installInActiveContext(PyRocksExtensions.FinishKey,
      (sc, runId) => LiveProviders.endRunEverywhere(sc, runId.toString))
    extensions.injectCheckRule { session => plan =>
      val provider = session.conf.get(PyRocksExtensions.ProviderKey, "")
      if (provider == classOf[PyRocksStateStoreProvider].getName) {
        PyRocksExtensions.refuseTransformWithState(plan)
      }
    }
  }
}

object PyRocksExtensions {
  val ProviderKey = "spark.sql.streaming.stateStore.providerClass"
  val FinishKey: String = LaunchOptions.Prefix + "finishWhenQueryEnds"
  val SparkRocksDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

  def refuseTransformWithState(plan: LogicalPlan): Unit =
    plan.find(_.nodeName.startsWith("TransformWithState")).foreach { node =>
      throw new UnsupportedOperationException(
        s"${node.nodeName} cannot keep its state in ${classOf[PyRocksStateStoreProvider].getName}: " +
          s"Spark accepts only its own $SparkRocksDB (by exact class name) for " +
          s"transformWithState / transformWithStateInPandas. Run this query with " +
          s"$ProviderKey=$SparkRocksDB.")
    }
}

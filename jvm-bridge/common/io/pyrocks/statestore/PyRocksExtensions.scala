package io.pyrocks.statestore

import org.apache.spark.sql.SparkSessionExtensions
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.execution.{ColumnarRule, SparkPlan}
import org.apache.spark.sql.execution.streaming.state.PyRocksCoordinator

/**
 * What the shim adds to a session, registered through `spark.sql.extensions` by
 * `spark_conf()`:
 *  - transformWithState (Scala and Python) on this provider, where Spark accepts only its
 *    own RocksDBStateStoreProvider by exact class name: [[StatefulApiAcceptance]].
 *    (Real-Time Mode still fails at start, naming Spark's class.)
 *  - In the driver, the coordinator that finishes and closes a query's stores the moment
 *    its run ends (`PyRocksCoordinator`), unless `finishWhenQueryEnds` is false.
 */
class PyRocksExtensions extends (SparkSessionExtensions => Unit) {
  override def apply(extensions: SparkSessionExtensions): Unit = {
    PyRocksCoordinator.installInActiveContext(PyRocksExtensions.FinishKey,
      (sc, runId) => LiveProviders.endRunEverywhere(sc, runId.toString))
    extensions.injectColumnar { session =>
      new ColumnarRule {
        override def preColumnarTransitions: Rule[SparkPlan] = new Rule[SparkPlan] {
          override def apply(plan: SparkPlan): SparkPlan =
            if (session.conf.get(PyRocksExtensions.ProviderKey, "") ==
                classOf[PyRocksStateStoreProvider].getName) {
              StatefulApiAcceptance.accept(plan)
            } else {
              plan
            }
        }
      }
    }
  }
}

object PyRocksExtensions {
  val ProviderKey = "spark.sql.streaming.stateStore.providerClass"
  val FinishKey: String = LaunchOptions.Prefix + "finishWhenQueryEnds"
  val SparkRocksDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
}

package io.pyrocks.statestore

import org.apache.spark.sql.execution.SparkPlan

/**
 * transformWithState on this provider. From Spark 4.1 on, Spark's transformWithState nodes
 * (Scala's TransformWithStateExec; PySpark's TransformWithStateInPySparkExec, behind
 * transformWithStateInPandas and the row-based transformWithState) check, when they build
 * their RDD, that the session's provider class is exactly Spark's RocksDBStateStoreProvider
 * (`validateStateStoreProvider`), because Spark's HDFS provider lacks what they need: column
 * families, several values per key, prefix and range scans. This provider has all of them.
 *
 * So each such node is replaced, after the streaming planner gave it its state (a columnar
 * rule's pre-transition step runs after IncrementalExecution's state rule), by a subclass
 * that is Spark's node in every respect but that check (TransformWithStateCompat, one per
 * release whose node's constructor differs). The stores are opened as for any operator:
 * from the session's StateStoreConf, which names this provider. Nothing of Spark's is
 * put on the class path or changed for other providers: the rule runs only in sessions
 * whose provider is this one.
 */
object StatefulApiAcceptance {
  def accept(plan: SparkPlan): SparkPlan =
    plan.transformUp { case node => TransformWithStateCompat.accept(node) }
}

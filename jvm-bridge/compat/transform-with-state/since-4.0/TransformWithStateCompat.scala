// transformWithState on Spark 4.0 and 4.1: their nodes do not check the provider class, so
// they run on this provider as they are.
package io.pyrocks.statestore

import org.apache.spark.sql.execution.SparkPlan

private[statestore] object TransformWithStateCompat {
  def accept(node: SparkPlan): SparkPlan = node
}

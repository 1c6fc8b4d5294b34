// transformWithState from Spark 4.3 on (TransformWithStateExec gains isRealTimeMode):
// subclasses of Spark's nodes that answer the provider check and nothing else
// (StatefulApiAcceptance says why).
package io.pyrocks.statestore

import org.apache.spark.sql.execution.SparkPlan
import org.apache.spark.sql.execution.python.streaming.TransformWithStateInPySparkExec
import org.apache.spark.sql.execution.streaming.operators.stateful.transformwithstate.TransformWithStateExec

private[statestore] object TransformWithStateCompat {
  def accept(node: SparkPlan): SparkPlan = node match {
    case accepted: AcceptedTransformWithStateExec => accepted
    case accepted: AcceptedTransformWithStateInPySparkExec => accepted
    case spark: TransformWithStateExec => new AcceptedTransformWithStateExec(spark)
    case spark: TransformWithStateInPySparkExec =>
      new AcceptedTransformWithStateInPySparkExec(spark)
    case other => other
  }
}

/** Spark's TransformWithStateExec, with its provider check answered. Spark's copies of a
 * node (`copy`, `makeCopy`) build Spark's class: both are routed back through `accept`;
 * `spark` (the driver's original) is only needed for `makeCopy`, on the driver. */
private[statestore] class AcceptedTransformWithStateExec(
    @transient private val spark: TransformWithStateExec)
  extends TransformWithStateExec(
    spark.keyDeserializer, spark.valueDeserializer, spark.groupingAttributes,
    spark.dataAttributes, spark.statefulProcessor, spark.timeMode, spark.outputMode,
    spark.keyEncoder, spark.outputObjAttr, spark.stateInfo, spark.batchTimestampMs,
    spark.prevBatchTimestampMs, spark.eventTimeWatermarkForLateEvents,
    spark.eventTimeWatermarkForEviction, spark.child, spark.isStreaming, spark.isRealTimeMode,
    spark.hasInitialState, spark.initialStateGroupingAttrs, spark.initialStateDataAttrs,
    spark.initialStateDeserializer, spark.initialState) {
  override protected def validateStateStoreProvider(isStreaming: Boolean): Unit = ()
  override def nodeName: String = super.nodeName.stripPrefix("Accepted")
  override def withNewChildrenInternal(left: SparkPlan, right: SparkPlan): TransformWithStateExec =
    new AcceptedTransformWithStateExec(super.withNewChildrenInternal(left, right))
  // Not equal to Spark's node it replaces: plan rewrites keep a node only if it differs.
  override def canEqual(other: Any): Boolean = other.isInstanceOf[AcceptedTransformWithStateExec]
  override def equals(other: Any): Boolean = canEqual(other) && super.equals(other)
  override def hashCode(): Int = super.hashCode()
  override def makeCopy(newArgs: Array[AnyRef]): SparkPlan =
    TransformWithStateCompat.accept(spark.makeCopy(newArgs))
}

/** Spark's TransformWithStateInPySparkExec (transformWithStateInPandas and the row-based
 * transformWithState of PySpark), with its provider check answered. */
private[statestore] class AcceptedTransformWithStateInPySparkExec(
    @transient private val spark: TransformWithStateInPySparkExec)
  extends TransformWithStateInPySparkExec(
    spark.functionExpr, spark.groupingAttributes, spark.output, spark.outputMode,
    spark.timeMode, spark.stateInfo, spark.batchTimestampMs, spark.prevBatchTimestampMs,
    spark.eventTimeWatermarkForLateEvents, spark.eventTimeWatermarkForEviction,
    spark.userFacingDataType, spark.child, spark.isStreaming, spark.hasInitialState,
    spark.initialState, spark.initialStateGroupingAttrs, spark.initialStateSchema) {
  override protected def validateStateStoreProvider(isStreaming: Boolean): Unit = ()
  override def nodeName: String = super.nodeName.stripPrefix("Accepted")
  override def withNewChildrenInternal(
      left: SparkPlan, right: SparkPlan): TransformWithStateInPySparkExec =
    new AcceptedTransformWithStateInPySparkExec(super.withNewChildrenInternal(left, right))
  // Not equal to Spark's node it replaces: plan rewrites keep a node only if it differs.
  override def canEqual(other: Any): Boolean =
    other.isInstanceOf[AcceptedTransformWithStateInPySparkExec]
  override def equals(other: Any): Boolean = canEqual(other) && super.equals(other)
  override def hashCode(): Int = super.hashCode()
  override def makeCopy(newArgs: Array[AnyRef]): SparkPlan =
    TransformWithStateCompat.accept(spark.makeCopy(newArgs))
}

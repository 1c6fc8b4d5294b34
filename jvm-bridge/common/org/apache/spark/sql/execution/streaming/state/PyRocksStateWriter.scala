package org.apache.spark.sql.execution.streaming.state

import java.util.UUID

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection
import org.apache.spark.sql.classic.Dataset
import org.apache.spark.sql.types.{DataType, StructType}
import org.apache.spark.util.SerializableConfiguration

/**
 * Writes one store of a canonical savepoint into a checkpoint, through the target provider's
 * own API (ours, or Spark's RocksDB provider on the exit path): what any batch of the query
 * would do, minus the query.
 *
 * Routing is the caller's, and Spark's: `rows` (columns `key`, `value`, typed as the store's
 * schemas) must be partitioned by `repartition(numPartitions, <the operator's key columns>)`,
 * Spark's own hash partitioning, the one the query's shuffle applies. So partition i of
 * `rows` holds exactly the rows of the store of partition i, which loads an empty store at
 * `version` (Spark's loadEmpty), puts them and commits `version + 1`. A partition with no
 * rows still commits: every store of the operator must exist at the new version.
 *
 * Lives in Spark's package for `SerializableConfiguration` (the session's Hadoop settings,
 * e.g. for s3a, must reach the executors).
 */
object PyRocksStateWriter {
  /** Rows written per partition, in partition order. */
  def write(
      rows: Dataset[_],
      stateRoot: String,
      operatorId: Int,
      storeName: String,
      keySchemaJson: String,
      valueSchemaJson: String,
      numColsPrefixKey: Int,
      numPartitions: Int,
      version: Long,
      providerClass: String): Array[Long] = {
    val keySchema = DataType.fromJson(keySchemaJson).asInstanceOf[StructType]
    val valueSchema = DataType.fromJson(valueSchemaJson).asInstanceOf[StructType]
    val session = rows.sparkSession
    val sqlConf = session.sessionState.conf.clone()
    sqlConf.setConfString("spark.sql.streaming.stateStore.providerClass", providerClass)
    val storeConf = new StateStoreConf(sqlConf, Map.empty)
    val hadoopConf = new SerializableConfiguration(session.sessionState.newHadoopConf())
    val rdd = rows.queryExecution.toRdd
    require(rdd.getNumPartitions == numPartitions, s"store $storeName of operator " +
      s"$operatorId: the routed rows have ${rdd.getNumPartitions} partitions, not " +
      s"$numPartitions (adaptive execution must not coalesce them)")
    val rowKeyType = rows.schema("key").dataType.asInstanceOf[StructType]
    val rowValueType = rows.schema("value").dataType.asInstanceOf[StructType]
    rdd.mapPartitionsWithIndex { (partition, routed) =>
      val storeId = StateStoreId(stateRoot, operatorId, partition, storeName)
      val spec = if (numColsPrefixKey > 0) {
        PrefixKeyScanStateEncoderSpec(keySchema, numColsPrefixKey)
      } else NoPrefixKeyStateEncoderSpec(keySchema)
      val provider = StateStoreProvider.createAndInit(
        StateStoreProviderId(storeId, UUID.randomUUID()), keySchema, valueSchema, spec,
        useColumnFamilies = false, storeConf, hadoopConf.value,
        useMultipleValuesPerKey = false, stateSchemaProvider = None)
      try Iterator(fill(emptyStore(provider, version), routed, rowKeyType, rowValueType))
      finally provider.close()
    }.collect()
  }

  private def fill(store: StateStore, rows: Iterator[InternalRow], keyType: StructType,
      valueType: StructType): Long = {
    val toKey = UnsafeProjection.create(keyType)
    val toValue = UnsafeProjection.create(valueType)
    var count = 0L
    try {
      rows.foreach { row =>
        store.put(toKey(row.getStruct(0, keyType.length)).copy(),
          toValue(row.getStruct(1, valueType.length)).copy())
        count += 1
      }
      store.commit()
    } catch {
      case e: Throwable =>
        if (!store.hasCommitted) store.abort()
        throw e
    }
    count
  }

  /** `getStore(version, loadEmpty = true)`: Spark's own since 4.2, ours on every release
   * (reached by name so this compiles against 4.0 and 4.1, whose API lacks it). */
  private def emptyStore(provider: StateStoreProvider, version: Long): StateStore = {
    val method = provider.getClass.getMethods.find { m =>
      m.getName == "getStore" && m.getParameterCount == 4
    }.getOrElse(throw new UnsupportedOperationException(
      s"${provider.getClass.getName} cannot load an empty store (loadEmpty) on Spark " +
        s"${org.apache.spark.SPARK_VERSION}, so it cannot be written offline"))
    try {
      method.invoke(provider, Long.box(version), None, Boolean.box(false), Boolean.box(true))
        .asInstanceOf[StateStore]
    } catch {
      case e: java.lang.reflect.InvocationTargetException => throw e.getCause
    }
  }
}

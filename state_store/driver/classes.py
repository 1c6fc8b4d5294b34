"""The names the JVM knows things by: the shim's classes (jvm-bridge/) and the Spark
settings and providers this project refers to. Plain constants: importing them loads
neither pyspark nor a JVM (workers and the tools import them too)."""

PROVIDER_CLASS = "io.pyrocks.statestore.PyRocksStateStoreProvider"
LISTENER_CLASS = "io.pyrocks.statestore.PyRocksLifecycleListener"
EXTENSIONS_CLASS = "io.pyrocks.statestore.PyRocksExtensions"
RESULT_RECORDER_CLASS = "io.pyrocks.statestore.ResultRecorder"
RUN_EPOCH_LISTENER_CLASS = "io.pyrocks.statestore.RunEpochListener"

PROVIDER_KEY = "spark.sql.streaming.stateStore.providerClass"
QUERY_LISTENERS_KEY = "spark.sql.streaming.streamingQueryListeners"
SPARK_ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
SPARK_HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"

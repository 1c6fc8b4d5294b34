package io.pyrocks.statestore

import org.apache.spark.scheduler.{SparkListener, SparkListenerApplicationEnd}

/**
 * Stops this JVM's workers, and lets go of the read caches closed providers left
 * (ParkedCaches), when the application ends. Needed in local mode, where the JVM (and so
 * the pool) outlives `SparkSession.stop()`; executor JVMs take both with them when they
 * exit. Registered through `spark.extraListeners` by `spark_conf()`.
 */
class PyRocksLifecycleListener extends SparkListener {
  override def onApplicationEnd(end: SparkListenerApplicationEnd): Unit = {
    WorkerPool.shutdown()
    ParkedCaches.discardAll()
  }
}

package com.example.user

import java.util.concurrent.atomic.AtomicLong

import org.apache.spark.scheduler.{SparkListener, SparkListenerJobEnd}
import org.apache.spark.sql.SparkSessionExtensions

/** A user's own listener, as an audit tool or Delta Lake brings one: counts finished jobs. */
class JobCounter extends SparkListener {
  override def onJobEnd(end: SparkListenerJobEnd): Unit = JobCounter.jobs.incrementAndGet()
}

object JobCounter {
  val jobs = new AtomicLong()
}

/** A user's own SQL extension (Delta Lake's, Iceberg's): counts the sessions it joined. */
class UserExtension extends (SparkSessionExtensions => Unit) {
  override def apply(extensions: SparkSessionExtensions): Unit = UserExtension.applied.incrementAndGet()
}

object UserExtension {
  val applied = new AtomicLong()
}

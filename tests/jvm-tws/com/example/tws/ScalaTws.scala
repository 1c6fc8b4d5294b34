package com.example.tws

import java.time.Duration

import org.apache.spark.sql.{DataFrame, Encoders, SparkSession}
import org.apache.spark.sql.streaming._

/** A user's transformWithState queries in Scala (tests/tws_queries.py builds them through
 * py4j), with the same meaning as the PySpark ones there: each output row depends on the
 * input batches only. */
case class Event(k: Int, v: Int, ts: Long)
case class Start(k: Int, start: Long)
case class Totals(k: Int, kind: String, count: Long, recent: Long, buckets: Long, total: Long)
case class Counts(k: Int, kind: String, count: Long, fresh: Long, buckets: Long)

/** Event time, with initial state: a count (value state), the values since the last timer
 * (list state), a count per v % 4 bucket (map state); a timer 5 s past a batch's newest
 * event emits and clears the list; a decoy timer is deleted by the key's next rows. */
class EventTimeTotals extends StatefulProcessorWithInitialState[Int, Event, Totals, Start] {
  @transient private var count: ValueState[Long] = _
  @transient private var recent: ListState[Int] = _
  @transient private var buckets: MapState[Int, Long] = _

  override def init(outputMode: OutputMode, timeMode: TimeMode): Unit = {
    count = getHandle.getValueState[Long]("count", Encoders.scalaLong, TTLConfig.NONE)
    recent = getHandle.getListState[Int]("recent", Encoders.scalaInt, TTLConfig.NONE)
    buckets = getHandle.getMapState[Int, Long]("buckets", Encoders.scalaInt, Encoders.scalaLong,
      TTLConfig.NONE)
  }

  override def handleInitialState(key: Int, start: Start, timerValues: TimerValues): Unit =
    count.update(start.start)

  override def handleInputRows(key: Int, rows: Iterator[Event],
      timerValues: TimerValues): Iterator[Totals] = {
    val events = rows.toList
    count.update((if (count.exists()) count.get() else 0L) + events.size)
    recent.appendList(events.map(_.v).toArray)
    events.groupBy(_.v % 4).foreach { case (b, of) =>
      buckets.updateValue(b, (if (buckets.containsKey(b)) buckets.getValue(b) else 0L) + of.size)
    }
    getHandle.listTimers().filter(_ % 1000 == ScalaTws.Decoy).foreach(getHandle.deleteTimer)
    val newest = events.map(_.ts).max
    getHandle.registerTimer(newest * 1000 + 5000)
    getHandle.registerTimer(newest * 1000 + 60000 + ScalaTws.Decoy)
    Iterator(row(key, "rows"))
  }

  override def handleExpiredTimer(key: Int, timerValues: TimerValues,
      expiredTimerInfo: ExpiredTimerInfo): Iterator[Totals] = {
    val out = row(key, "timer")
    recent.clear()
    Iterator(out)
  }

  private def row(key: Int, kind: String): Totals = {
    val values = if (recent.exists()) recent.get().toList else Nil
    Totals(key, kind, if (count.exists()) count.get() else 0L, values.size,
      if (buckets.exists()) buckets.keys().size.toLong else 0L, values.map(_.toLong).sum)
  }
}

/** Processing time, with TTL: a count, this batch's values (list state, 1 ms TTL), buckets
 * seen (map state, an hour's TTL); a timer 1 ms ahead emits the count in the next batch. */
class ProcessingTimeCounts extends StatefulProcessor[Int, Event, Counts] {
  @transient private var count: ValueState[Long] = _
  @transient private var fresh: ListState[Int] = _
  @transient private var buckets: MapState[Int, Boolean] = _

  override def init(outputMode: OutputMode, timeMode: TimeMode): Unit = {
    count = getHandle.getValueState[Long]("count", Encoders.scalaLong, TTLConfig.NONE)
    fresh = getHandle.getListState[Int]("fresh", Encoders.scalaInt,
      TTLConfig(Duration.ofMillis(1)))
    buckets = getHandle.getMapState[Int, Boolean]("buckets", Encoders.scalaInt,
      Encoders.scalaBoolean, TTLConfig(Duration.ofHours(1)))
  }

  override def handleInputRows(key: Int, rows: Iterator[Event],
      timerValues: TimerValues): Iterator[Counts] = {
    val events = rows.toList
    count.update((if (count.exists()) count.get() else 0L) + events.size)
    fresh.appendList(events.map(_.v).toArray)
    events.foreach(e => buckets.updateValue(e.v % 4, true))
    val now = timerValues.getCurrentProcessingTimeInMs()
    getHandle.listTimers().filter(_ > now + 1800000L).foreach(getHandle.deleteTimer)
    getHandle.registerTimer(now + 1)
    getHandle.registerTimer(now + 3600000L)
    Iterator(row(key, "rows"))
  }

  override def handleExpiredTimer(key: Int, timerValues: TimerValues,
      expiredTimerInfo: ExpiredTimerInfo): Iterator[Counts] = Iterator(row(key, "timer"))

  private def row(key: Int, kind: String): Counts =
    Counts(key, kind, if (count.exists()) count.get() else 0L,
      if (fresh.exists()) fresh.get().size.toLong else 0L,
      if (buckets.exists()) buckets.keys().size.toLong else 0L)
}

object ScalaTws {
  val Decoy = 1L

  /** `events`: k, v, ts and a watermarked event-time column. */
  def eventTime(events: DataFrame): DataFrame = {
    val spark = events.sparkSession
    import spark.implicits._
    val starts = (0 to 10 by 2).map(k => Start(k, 1000L * k)).toDS().groupByKey(_.k)
    events.select("k", "v", "ts").as[Event].groupByKey(_.k)
      .transformWithState(new EventTimeTotals, TimeMode.EventTime(), OutputMode.Update(), starts)
      .toDF()
  }

  def processingTime(events: DataFrame): DataFrame = {
    val spark = events.sparkSession
    import spark.implicits._
    events.select(($"k" % 5).as("k"), $"v", $"ts").as[Event].groupByKey(_.k)
      .transformWithState(new ProcessingTimeCounts, TimeMode.ProcessingTime(),
        OutputMode.Update())
      .toDF()
  }
}

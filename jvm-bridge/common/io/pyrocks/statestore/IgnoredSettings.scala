package io.pyrocks.statestore

import java.nio.charset.StandardCharsets.UTF_8
import java.util.concurrent.ConcurrentHashMap

import org.json4s._
import org.json4s.jackson.JsonMethods.parse

/**
 * Settings of Spark's RocksDB provider that have no meaning for ours are never ignored
 * silently: the worker names them in its answer to OPEN (the table that decides is
 * `state_store/options.py`), and this JVM says so once per distinct set, not once per store.
 */
object IgnoredSettings {
  private val warned = ConcurrentHashMap.newKeySet[String]()

  def warnOnce(openAnswer: Array[Byte], warn: String => Unit): Unit = {
    val keys = ignoredKeys(openAnswer)
    if (keys.nonEmpty && warned.add(keys.mkString(","))) {
      warn(s"settings of Spark's RocksDB provider that the pyrocks state store ignores (no " +
        s"meaning here): ${keys.mkString(", ")}; see `state-store options` for the ones it " +
        "honours")
    }
  }

  /** The sets warned of so far (for the shim's checks). */
  private[statestore] def warnedSets: Set[String] = {
    import scala.jdk.CollectionConverters._
    warned.asScala.toSet
  }

  private[statestore] def ignoredKeys(openAnswer: Array[Byte]): List[String] = {
    implicit val formats: Formats = DefaultFormats
    (parse(new String(openAnswer, UTF_8)) \ "ignored_settings").extractOrElse[List[String]](Nil)
  }
}

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

  /** Logs the worker's warning (its words: options.py's `ignored_warning`) once per set. */
  def warnOnce(openAnswer: Array[Byte], warn: String => Unit): Unit = {
    implicit val formats: Formats = DefaultFormats
    val answer = parse(new String(openAnswer, UTF_8))
    val keys = (answer \ "ignored_settings").extractOrElse[List[String]](Nil)
    if (keys.nonEmpty && warned.add(keys.mkString(","))) {
      warn((answer \ "settings_warning").extractOrElse[String](keys.mkString(", ")))
    }
  }

  /** The sets warned of so far (for the shim's checks). */
  private[statestore] def warnedSets: Set[String] = {
    import scala.jdk.CollectionConverters._
    warned.asScala.toSet
  }
}

package io.pyrocks.statestore

/**
 * A scan's (key, value) pairs, one at a time (`advance`), each a slice of arrays that never
 * change once the scan hands them out (a chunk from the worker, a page of the read cache), so
 * a row may point into them with no copy; in the worker's key order unless the scan says
 * otherwise. `close` ends it early. A key may come in two slices: its head (`keyHeadBytes`,
 * none unless `keyHeadLength` > 0), then the rest (`keyBytes`): the read cache keeps a scan
 * prefix once for all the keys under it (`PrefixRecord`).
 */
trait KeyValueScan {
  /** Moves to the next pair; false when there is none. */
  def advance(): Boolean
  def keyBytes: Array[Byte]
  def keyAt: Int
  def keyLength: Int
  def valueBytes: Array[Byte]
  def valueAt: Int
  def valueLength: Int
  def close(): Unit
  def keyHeadBytes: Array[Byte] = null
  def keyHeadAt: Int = 0
  def keyHeadLength: Int = 0

  /** The whole key, in an array of its own. */
  def key(): Array[Byte] = {
    val out = new Array[Byte](keyHeadLength + keyLength)
    if (keyHeadLength > 0) System.arraycopy(keyHeadBytes, keyHeadAt, out, 0, keyHeadLength)
    System.arraycopy(keyBytes, keyAt, out, keyHeadLength, keyLength)
    out
  }
  def value(): Array[Byte] =
    java.util.Arrays.copyOfRange(valueBytes, valueAt, valueAt + valueLength)

  /** The scan as an iterator of itself, one step per pair. */
  def iterator: Iterator[KeyValueScan] = new Iterator[KeyValueScan] {
    private var ready = false
    private var more = true
    override def hasNext: Boolean = {
      if (!ready && more) { more = advance(); ready = true }
      more
    }
    override def next(): KeyValueScan = {
      if (!hasNext) throw new NoSuchElementException("end of state store scan")
      ready = false
      KeyValueScan.this
    }
  }

  /** The pairs in arrays of their own. */
  def pairs: Iterator[(Array[Byte], Array[Byte])] = iterator.map(at => (at.key(), at.value()))
}

object KeyValueScan {
  /** A scan with no pair: a prefix under which nothing was ever written. */
  object Empty extends KeyValueScan {
    override def advance(): Boolean = false
    private def none = throw new NoSuchElementException("an empty scan has no pair")
    override def keyBytes: Array[Byte] = none
    override def keyAt: Int = none
    override def keyLength: Int = none
    override def valueBytes: Array[Byte] = none
    override def valueAt: Int = none
    override def valueLength: Int = none
    override def close(): Unit = {}
  }
}

/** A scan that starts (`start`) when its first pair is asked for: one never read costs
 * nothing. */
final class DeferredScan(start: () => KeyValueScan) extends KeyValueScan {
  private var started: KeyValueScan = null
  private var closed = false

  override def advance(): Boolean = !closed && {
    if (started == null) started = start()
    started.advance()
  }
  override def keyBytes: Array[Byte] = started.keyBytes
  override def keyAt: Int = started.keyAt
  override def keyLength: Int = started.keyLength
  override def valueBytes: Array[Byte] = started.valueBytes
  override def valueAt: Int = started.valueAt
  override def valueLength: Int = started.valueLength
  override def keyHeadBytes: Array[Byte] = started.keyHeadBytes
  override def keyHeadAt: Int = started.keyHeadAt
  override def keyHeadLength: Int = started.keyHeadLength
  override def close(): Unit = {
    closed = true
    if (started != null) started.close()
  }
}

package io.pyrocks.statestore

/**
 * The entries of one scan prefix, as the read cache keeps them: one record, `[listed u8]`
 * then, in the worker's key order (unsigned bytewise), `[key length i32][value length i32,
 * -1 = absent][key][value]` per key (`Int32`: the record never leaves the JVM). A listed
 * record holds every key under its prefix, so a key it does not hold is absent; absent keys
 * are written only into records that are not listed. Small by design (`MaxBytes`): it is rewritten whole on every write under the prefix.
 * Read in place: `bytes` from `start` to `end` (a slice of a page of `PackedEntries`).
 */
object PrefixRecord {
  /** Larger records are not kept: rewriting them on every write would cost more than asking. */
  val MaxBytes: Int = 64 << 10

  def listed(bytes: Array[Byte], start: Int): Boolean = bytes(start) == 1

  /** Some(Some(value)) or Some(None) for a key the record knows; None otherwise (unless the
   * record is listed: then a key it does not hold is absent). */
  def lookup(bytes: Array[Byte], start: Int, end: Int,
      key: Array[Byte]): Option[Option[Array[Byte]]] = {
    val at = new Cursor(bytes, start, end, presentOnly = false)
    while (at.advance()) {
      val order = java.util.Arrays.compareUnsigned(bytes, at.keyAt, at.keyAt + at.keyLength,
        key, 0, key.length)
      if (order == 0) {
        return Some(if (at.valueLength < 0) None else Some(java.util.Arrays.copyOfRange(
          bytes, at.valueAt, at.valueAt + at.valueLength)))
      }
      if (order > 0) return if (listed(bytes, start)) Some(None) else None
    }
    if (listed(bytes, start)) Some(None) else None
  }

  /** What the record knows of `key` without reading its value: `ReadCache.Present`,
   * `Absent` (a key a listed record does not hold) or `Unknown`. */
  def knows(bytes: Array[Byte], start: Int, end: Int, key: Array[Byte]): Int = {
    val at = new Cursor(bytes, start, end, presentOnly = false)
    while (at.advance()) {
      val order = java.util.Arrays.compareUnsigned(bytes, at.keyAt, at.keyAt + at.keyLength,
        key, 0, key.length)
      if (order == 0) return if (at.valueLength < 0) ReadCache.Absent else ReadCache.Present
      if (order > 0) return if (listed(bytes, start)) ReadCache.Absent else ReadCache.Unknown
    }
    if (listed(bytes, start)) ReadCache.Absent else ReadCache.Unknown
  }

  def of(pairs: Seq[(Array[Byte], Array[Byte])], listed: Boolean): Array[Byte] = {
    val out = new Array[Byte](1 + pairs.map(p => 8 + p._1.length + p._2.length).sum)
    out(0) = if (listed) 1 else 0
    pairs.foldLeft(1) { case (at, (k, v)) => put(out, at, k, 0, k.length, v, 0, v.length) }
    out
  }

  /** The record `bytes(start until end)` (null: none yet) with `key` set to `value` (null:
   * absent), listed or not. */
  def updated(bytes: Array[Byte], start: Int, end: Int, key: Array[Byte], value: Array[Byte],
      listed: Boolean): Array[Byte] = {
    val keep = value != null || !listed // a listed record holds no absent key
    val valueLength = if (value == null) -1 else value.length
    // Entries are in key order, so one search finds both where `key` goes and the entry it
    // replaces (the first entry not below it, if equal); the rest is copied around it whole.
    var split = end
    var replaced = 0
    if (bytes != null) {
      val at = new Cursor(bytes, start, end, presentOnly = false)
      var searching = true
      while (searching && at.advance()) {
        val order = java.util.Arrays.compareUnsigned(bytes, at.keyAt, at.keyAt + at.keyLength,
          key, 0, key.length)
        if (order >= 0) {
          split = at.entryAt
          if (order == 0) replaced = at.entryLength
          searching = false
        }
      }
    }
    val before = if (bytes == null) 0 else split - (start + 1)
    val after = if (bytes == null) 0 else end - split - replaced
    val entry = if (keep) 8 + key.length + math.max(valueLength, 0) else 0
    val out = new Array[Byte](1 + before + entry + after)
    out(0) = if (listed) 1 else 0
    if (before > 0) System.arraycopy(bytes, start + 1, out, 1, before)
    if (keep) put(out, 1 + before, key, 0, key.length, value, 0, valueLength)
    if (after > 0) System.arraycopy(bytes, split + replaced, out, 1 + before + entry, after)
    out
  }

  /** Writes one entry at `at` of `out`; where the next one goes. `valueLength` -1: absent. */
  private def put(out: Array[Byte], at: Int, key: Array[Byte], keyAt: Int, keyLength: Int,
      value: Array[Byte], valueAt: Int, valueLength: Int): Int = {
    Int32.put(out, at, keyLength)
    Int32.put(out, at + 4, valueLength)
    System.arraycopy(key, keyAt, out, at + 8, keyLength)
    if (valueLength > 0) System.arraycopy(value, valueAt, out, at + 8 + keyLength, valueLength)
    at + 8 + keyLength + math.max(valueLength, 0)
  }

  /** The present keys of one prefix record, read in place. */
  final class Scan(page: Array[Byte], start: Int, end: Int) extends KeyValueScan {
    private val at = new Cursor(page, start, end, presentOnly = true)
    override def advance(): Boolean = at.advance()
    override def keyBytes: Array[Byte] = page
    override def keyAt: Int = at.keyAt
    override def keyLength: Int = at.keyLength
    override def valueBytes: Array[Byte] = page
    override def valueAt: Int = at.valueAt
    override def valueLength: Int = at.valueLength
    override def close(): Unit = {}
  }

  /** The entries of a record one at a time, in place; `presentOnly` skips absent ones. */
  final class Cursor(bytes: Array[Byte], start: Int, end: Int, presentOnly: Boolean) {
    private var next = start + 1
    var entryAt = 0
    var keyAt = 0
    var keyLength = 0
    var valueAt = 0
    var valueLength = 0 // -1: absent

    def entryLength: Int = 8 + keyLength + math.max(valueLength, 0)

    def advance(): Boolean = {
      var found = false
      while (!found && next < end) {
        entryAt = next
        keyLength = Int32.get(bytes, next)
        valueLength = Int32.get(bytes, next + 4)
        keyAt = next + 8
        valueAt = keyAt + keyLength
        next = valueAt + math.max(valueLength, 0)
        found = !presentOnly || valueLength >= 0
      }
      found
    }
  }
}

package io.pyrocks.statestore

/**
 * The entries of one scan prefix, as the read cache keeps them: one record, `[listed u8]`
 * then, in the worker's key order (unsigned bytewise), `[suffix length u16, its high bit set
 * if the value is packed][value length u16 as kept, 0xffff = absent][suffix][value]` per
 * key, where a key's suffix is what follows the prefix in it (`Int16`, little-endian: the
 * record never leaves the JVM). The prefix is the cache entry's key, so each key's copy of
 * it would be bytes for nothing: 21 of the 140 a session window's record took, and the u16
 * lengths save 4 more. A value of 8-byte words (a Spark row) is kept packed if that is
 * shorter (`WordPacking`: 56 -> 28 bytes a session window), and unpacked when read.
 *
 * Invariants, each enforced where noted:
 *  - every key of a record starts with its prefix: `updated` and `of` refuse (None) a key
 *    that does not, and one whose suffix or value the lengths cannot measure (a record is at
 *    most `MaxBytes` anyway), so the caller keeps nothing for that prefix;
 *  - a listed record holds every key under its prefix, so a key it does not hold is absent;
 *    absent keys are written only into records that are not listed.
 * Small by design (`MaxBytes`): it is rewritten whole on every write under the prefix.
 * Read in place: `bytes` from `start` to `end` (a slice of a page of `PackedEntries`). A key
 * is asked for whole, with the record's prefix: one not under it is not known here.
 */
object PrefixRecord {
  /** Larger records are not kept: rewriting them on every write would cost more than asking. */
  val MaxBytes: Int = 64 << 10

  private val Absent = 0xffff // a value length no kept record can have (`MaxBytes`)
  private val Packed = 0x8000 // in a suffix length: the value is packed
  private val EntryHead = 4

  def listed(bytes: Array[Byte], start: Int): Boolean = bytes(start) == 1

  /** Some(Some(value)) or Some(None) for a key the record knows; None otherwise (unless the
   * record is listed: then a key under `prefix` it does not hold is absent). */
  def lookup(bytes: Array[Byte], start: Int, end: Int, key: Array[Byte],
      prefix: Array[Byte]): Option[Option[Array[Byte]]] = {
    if (!under(key, prefix)) return None
    val at = find(bytes, start, end, key, prefix.length)
    if (at.found) Some(if (at.present) Some(at.value()) else None)
    else if (listed(bytes, start)) Some(None) else None
  }

  /** What the record knows of `key` without reading its value: `ReadCache.Present`,
   * `Absent` (a key a listed record does not hold) or `Unknown`. */
  def knows(bytes: Array[Byte], start: Int, end: Int, key: Array[Byte],
      prefix: Array[Byte]): Int = {
    if (!under(key, prefix)) return ReadCache.Unknown
    val at = find(bytes, start, end, key, prefix.length)
    if (at.found) { if (at.present) ReadCache.Present else ReadCache.Absent }
    else if (listed(bytes, start)) ReadCache.Absent else ReadCache.Unknown
  }

  /** A listed record of `pairs` (in key order, all under `prefix`); None if one is not
   * under it or too long to measure. */
  def of(pairs: Seq[(Array[Byte], Array[Byte])], prefix: Array[Byte]): Option[Array[Byte]] =
    if (!pairs.forall { case (k, v) => fits(k, prefix, v) }) None
    else {
      val out = new Array[Byte](1 + pairs.map(p => entryBytes(p._1, prefix.length, p._2)).sum)
      out(0) = 1
      pairs.foldLeft(1) { case (at, (k, v)) => put(out, at, k, prefix.length, v) }
      Some(out)
    }

  /** The record `bytes(start until end)` (null: none yet) with `key` set to `value` (null:
   * absent), listed or not; None if `key` is not under `prefix` or too long to measure. */
  def updated(bytes: Array[Byte], start: Int, end: Int, prefix: Array[Byte], key: Array[Byte],
      value: Array[Byte], listed: Boolean): Option[Array[Byte]] =
      if (!fits(key, prefix, value)) None else {
    val keep = value != null || !listed // a listed record holds no absent key
    // Entries are in key order, so one search finds both where `key` goes and the entry it
    // replaces (the first entry not below it, if equal); the rest is copied around it whole.
    val (split, replaced) = if (bytes == null) (end, 0) else {
      val at = find(bytes, start, end, key, prefix.length)
      if (at.entryAt < 0) (end, 0) else (at.entryAt, if (at.found) at.entryLength else 0)
    }
    val before = if (bytes == null) 0 else split - (start + 1)
    val after = if (bytes == null) 0 else end - split - replaced
    val entry = if (keep) entryBytes(key, prefix.length, value) else 0
    val out = new Array[Byte](1 + before + entry + after)
    out(0) = if (listed) 1 else 0
    if (before > 0) System.arraycopy(bytes, start + 1, out, 1, before)
    if (keep) put(out, 1 + before, key, prefix.length, value)
    if (after > 0) System.arraycopy(bytes, split + replaced, out, 1 + before + entry, after)
    Some(out)
  }

  /** Whether `key` may be kept under `prefix`: it starts with it, its suffix's length leaves
   * the high bit clear, and a u16 measures its value. */
  private def fits(key: Array[Byte], prefix: Array[Byte], value: Array[Byte]): Boolean =
    under(key, prefix) && key.length - prefix.length < Packed &&
      (value == null || value.length < Absent)

  private def under(key: Array[Byte], prefix: Array[Byte]): Boolean =
    key.length >= prefix.length &&
      java.util.Arrays.equals(key, 0, prefix.length, prefix, 0, prefix.length)

  private def entryBytes(key: Array[Byte], prefixLength: Int, value: Array[Byte]): Int =
    EntryHead + key.length - prefixLength + keptLength(value, packedLength(value))

  /** `WordPacking.packedLength` of `value`; -1 (not packed) for an absent one. */
  private def packedLength(value: Array[Byte]): Int =
    if (value == null) -1 else WordPacking.packedLength(value)

  /** The bytes `value` takes in a record, given its `packedLength` (-1: kept as it is). */
  private def keptLength(value: Array[Byte], packed: Int): Int =
    if (value == null) 0 else if (packed >= 0) packed else value.length

  /** Writes one entry at `at` of `out` (`value` null: absent); where the next one goes. */
  private def put(out: Array[Byte], at: Int, key: Array[Byte], prefixLength: Int,
      value: Array[Byte]): Int = {
    val suffix = key.length - prefixLength
    val packed = packedLength(value)
    val kept = keptLength(value, packed)
    val valueAt = at + EntryHead + suffix
    Int16.put(out, at, if (packed >= 0) suffix | Packed else suffix)
    Int16.put(out, at + 2, if (value == null) Absent else kept)
    System.arraycopy(key, prefixLength, out, at + EntryHead, suffix)
    if (packed >= 0) WordPacking.pack(value, out, valueAt)
    else if (value != null) System.arraycopy(value, 0, out, valueAt, kept)
    valueAt + kept
  }

  /** The cursor at the first entry whose key is not below `key` (`found` if equal);
   * `entryAt` -1 if there is none. */
  private def find(bytes: Array[Byte], start: Int, end: Int, key: Array[Byte],
      prefixLength: Int): Cursor = {
    val at = new Cursor(presentOnly = false).over(bytes, start, end)
    while (at.advance()) {
      val order = java.util.Arrays.compareUnsigned(bytes, at.keyAt, at.keyAt + at.keyLength,
        key, prefixLength, key.length)
      if (order >= 0) {
        at.found = order == 0
        return at
      }
    }
    at.entryAt = -1
    at
  }

  /** The present keys of one prefix record, read in place: each key is the prefix (the
   * key head, `page` from `keyHeadAt`: the cache entry's key) then its suffix. */
  final class Scan(page: Array[Byte], start: Int, end: Int, override val keyHeadAt: Int,
      override val keyHeadLength: Int) extends KeyValueScan {
    private val at = new Cursor(presentOnly = true, new WordPacking.Arena).over(page, start, end)
    override def advance(): Boolean = at.advance()
    override def keyHeadBytes: Array[Byte] = page
    override def keyBytes: Array[Byte] = page
    override def keyAt: Int = at.keyAt
    override def keyLength: Int = at.keyLength
    override def valueBytes: Array[Byte] = at.valueBytes
    override def valueAt: Int = at.valueAt
    override def valueLength: Int = at.valueLength
    override def close(): Unit = {}
  }

  /** The entries of a record one at a time, in place (`over` sets the record: one cursor
   * walks many); `presentOnly` skips absent ones. `keyAt` and `keyLength` are the suffix's.
   * A packed value is unpacked when first read: into `arena` (a scan's), or else into an
   * array of its own. */
  final class Cursor(presentOnly: Boolean, arena: WordPacking.Arena = null) {
    private var bytes: Array[Byte] = null
    private var next = 0
    private var end = 0
    var entryAt = 0
    var keyAt = 0
    var keyLength = 0
    private var keptAt = 0
    private var keptLength = 0 // -1: absent
    private var packed = false
    private var unpacked: Array[Byte] = null
    private var unpackedAt = 0
    private[PrefixRecord] var found = false

    /** Walks the record `bytes(start until end)` from its first entry. */
    def over(bytes: Array[Byte], start: Int, end: Int): Cursor = {
      this.bytes = bytes
      this.next = start + 1
      this.end = end
      this
    }

    def present: Boolean = keptLength >= 0
    def entryLength: Int = EntryHead + keyLength + math.max(keptLength, 0)

    /** The value is `valueBytes(valueAt until valueAt + valueLength)` (-1: absent). */
    def valueBytes: Array[Byte] = if (packed) { unpackValue(); unpacked } else bytes
    def valueAt: Int = if (packed) { unpackValue(); unpackedAt } else keptAt
    def valueLength: Int =
      if (packed) WordPacking.unpackedLength(bytes, keptAt) else keptLength

    /** The value in an array of its own (null: absent). */
    def value(): Array[Byte] =
      if (packed) WordPacking.unpack(bytes, keptAt)
      else if (keptLength < 0) null
      else java.util.Arrays.copyOfRange(bytes, keptAt, keptAt + keptLength)

    private def unpackValue(): Unit = if (unpacked == null) {
      if (arena == null) unpacked = WordPacking.unpack(bytes, keptAt)
      else {
        arena.unpack(bytes, keptAt)
        unpacked = arena.bytes
        unpackedAt = arena.at
      }
    }

    def advance(): Boolean = {
      var stepped = false
      while (!stepped && next < end) {
        entryAt = next
        val suffix = Int16.get(bytes, next)
        keyLength = suffix & ~Packed
        packed = (suffix & Packed) != 0
        unpacked = null
        unpackedAt = 0
        val length = Int16.get(bytes, next + 2)
        keptLength = if (length == Absent) -1 else length
        keyAt = next + EntryHead
        keptAt = keyAt + keyLength
        next = keptAt + math.max(keptLength, 0)
        stepped = !presentOnly || keptLength >= 0
      }
      stepped
    }
  }
}

package io.pyrocks.statestore

/**
 * The read cache's storage: (space, key) -> value (or "absent"), packed. Each entry is one
 * record in a page of bytes — `[space i32][key length i32][value length i32, -1 = absent]
 * [died i32][key][value]` — found through an open-addressing index (linear probing): one
 * long a slot, the key's hash and the record's location packed together (`slotFor`), so a
 * probe reads one array and touches a page only when the hashes agree. There is no object
 * per entry: an entry costs its bytes, 16 bytes of head and its index slots (8 bytes each),
 * and the garbage collector sees a few large arrays where a map of millions of small
 * objects cost it a core's worth of marking.
 *
 * Invariants, each enforced where noted:
 *  - a record's space and key never change once written, nor does its value once a reader
 *    may hold it: pages are shared with readers that read them in place (`snapshot`,
 *    `sharedPage`), and a record written before they last were (before `sharedEnd`) gets a
 *    new value as a new record. Only a record written since, whose value keeps its length,
 *    is rewritten in place (`put`): an update of fixed-width rows leaves no dead record
 *    behind, so nothing to compact;
 *  - a record's `died` field is 0 while the index points to it, and is set once, when it
 *    stops (`kill`: replaced, removed, or moved by `compact`), to the number of snapshots
 *    taken by then. So a snapshot taken at `n` (`Snapshot`) sees exactly the records written
 *    before it whose `died` is 0 or more than `n`: the entries as they were when it was
 *    taken, whatever happens to them afterwards, read in page order (sequentially);
 *  - the index holds the location of every live record, once, at or after its hash's home
 *    slot with no empty slot between the two (`remove` shifts later slots back rather than
 *    leaving tombstones), and is at most `MaxLoad` full (`growIndex`);
 *  - a location fits a slot: a record starts within `PageBytes` of its page's start (a
 *    larger record gets a page of its own, at 0), and the page table never holds more
 *    than `maxPages` pages, given back ones included (`newPage` refuses the next, as
 *    `memory` refuses one, and `evictOldest` then makes room in the table);
 *  - every byte of pages and index is charged to `memory` before it is allocated, and given
 *    back when it is dropped; an allocation `memory` refuses leaves the entries as they were
 *    and makes `put` answer false. A page dropped while a snapshot holds it stays readable
 *    to that snapshot (it keeps the array) though no longer charged.
 */
final class PackedEntries(memory: PackedEntries.Memory, hashOf: (Array[Byte], Int) => Int,
    maxPages: Int = PackedEntries.MaxPages) {
  require(maxPages >= 2 && maxPages <= PackedEntries.MaxPages, s"maxPages $maxPages")
  import PackedEntries._

  private var pages = new Array[Array[Byte]](8)
  private var ends = new Array[Int](8) // where each page's records end
  private var pageCount = 0 // pages(0 until pageCount) were written
  private var dropped = 0 // of them, pages(0 until dropped) were given back (null)
  private var writePos = 0 // in the last page
  private var slots = new Array[Long](0) // 0 = empty, else `slotFor(location, hash)`
  private var used = 0 // slots taken
  private var liveBytes = 0L // of records the index points to
  private var deadBytes = 0L // of records in pages still kept that it no longer does
  private var allocated = 0L // charged to `memory`
  private var snapshots = 0 // taken so far: what `died` counts
  private var sharedEnd = 0L // where the records ended when pages were last shared
  private var evictedEntries = 0L // live entries `evictOldest` dropped, ever
  private var loadedAhead = 0L // what `loadAhead` last read: never used, only kept

  def size: Int = used

  /** Live entries `evictOldest` has dropped since this was made (never reset). */
  def evicted: Long = evictedEntries

  override def toString: String = s"PackedEntries($used entries, $liveBytes live bytes, " +
    s"$deadBytes dead, ${pageCount - dropped} pages, ${slots.length} slots)"

  /** Bytes allocated (pages and index), all charged to `memory`. */
  def allocatedBytes: Long = allocated

  /** Bytes of the records in the pages kept, live or dead. */
  private[statestore] def keptRecordBytes: Long = {
    var total = 0L
    for (p <- dropped until pageCount - 1) total += ends(p)
    if (pageCount > 0) total + writePos else total
  }

  /** Bytes of the records in the pages kept that hold no entry: what compaction would free. */
  private[statestore] def deadRecordBytes: Long = deadBytes

  /** Slots of the page table: what the pages kept need, not what was ever allocated. */
  private[statestore] def pageTableSlots: Int = pages.length

  /** Pages the table holds, given back ones not yet forgotten included: at most `maxPages`. */
  private[statestore] def pagesInTable: Int = pageCount

  /** The location of the entry, or -1 if there is none. */
  def find(space: Int, key: Array[Byte], hash: Int): Long = {
    if (used == 0) return -1L
    val mask = slots.length - 1
    var i = hash & mask
    while (slots(i) != 0) {
      val slot = slots(i)
      if (hashOfSlot(slot) == hash && matches(locationOf(slot), space, key)) {
        return locationOf(slot)
      }
      i = (i + 1) & mask
    }
    -1L
  }

  /**
   * Brings into the CPU's caches what `find` of each of `hashes(0 until n)` will read: the
   * index slots from the hash's home to the first holding the hash, and the record that slot
   * names. A key found on its own pays two misses to memory one after the other (its slot,
   * then its record); loaded here, the misses of all `n` keys overlap: writing 16 keys at
   * once of 125k-entry caches took ~190 ns a key against ~345 one by one (a scratch probe;
   * docs/benchmarks.md, Dec 7, stop 96). Reads only; the sum of what it read goes to
   * `loadedAhead`, so that the JIT keeps the loads.
   */
  def loadAhead(hashes: Array[Int], n: Int): Unit = if (used > 0) {
    val mask = slots.length - 1
    var sum = 0L
    var i = 0
    while (i < n) { // every home slot first: these loads do not wait for each other
      sum += slots(hashes(i) & mask)
      i += 1
    }
    i = 0
    while (i < n) { // then every record: each waits only for its own slot, loaded above
      val hash = hashes(i)
      var at = hash & mask
      while (slots(at) != 0 && hashOfSlot(slots(at)) != hash) at = (at + 1) & mask
      if (slots(at) != 0) sum += field(locationOf(slots(at)), 4)
      i += 1
    }
    loadedAhead = sum
  }

  /** The page a record is in and where its value starts: to read the value in place
   * within this call. A reader that keeps the page beyond it takes `sharedPage`. */
  def page(location: Long): Array[Byte] = pages(pageOf(location))
  def keyAt(location: Long): Int = offsetOf(location) + Head
  def keyLength(location: Long): Int = field(location, 4)
  def valueAt(location: Long): Int = keyAt(location) + keyLength(location)
  /** -1: known absent. */
  def valueLength(location: Long): Int = field(location, 8)

  /** `page`, for a reader that keeps reading the record in place after this call: from now
   * on, no record written so far is rewritten. */
  def sharedPage(location: Long): Array[Byte] = {
    share()
    pages(pageOf(location))
  }

  /** The value of the record at `location` (absent: null), in an array of its own. */
  def value(location: Long): Array[Byte] = {
    val length = valueLength(location)
    if (length < 0) null
    else {
      val at = valueAt(location)
      java.util.Arrays.copyOfRange(pages(pageOf(location)), at, at + length)
    }
  }

  /** Sets the entry to `value` (null: known absent). False, with nothing changed, if
   * `memory` refused what it needed. */
  def put(space: Int, key: Array[Byte], hash: Int, value: Array[Byte]): Boolean =
    put(space, key, hash, value, find(space, key, hash))

  /** `put`, the entry's current location (`find`'s answer) known already. */
  def put(space: Int, key: Array[Byte], hash: Int, value: Array[Byte], existing: Long)
      : Boolean = {
    val length = if (value == null) -1 else value.length
    if (existing >= sharedEnd && valueLength(existing) == length) {
      if (length > 0) System.arraycopy(value, 0, page(existing), valueAt(existing), length)
      return true
    }
    if (existing < 0 && !roomForOneMore()) return false
    val location = append(space, key, 0, key.length, value, 0, length)
    if (location < 0) return false
    if (existing >= 0) {
      kill(existing)
      slots(slotOf(existing, hash)) = slotFor(location, hash)
    } else {
      insert(location, hash)
    }
    liveBytes += recordBytes(location)
    // The rarer test first: small caches often hold more dead bytes than half their live
    // ones, and the JIT, told so on every put, would leave its compiled code each time.
    if (deadBytes > MinCompactBytes && deadBytes > liveBytes / 2) compact()
    true
  }

  /** Forgets the entry, if there is one. */
  def remove(space: Int, key: Array[Byte], hash: Int): Unit = {
    val location = find(space, key, hash)
    if (location >= 0) {
      deleteSlot(slotOf(location, hash))
      kill(location)
    }
  }

  /** Drops every entry and gives all memory back. */
  def clear(): Unit = {
    memory.release(allocated)
    allocated = 0
    pages = new Array[Array[Byte]](8)
    ends = new Array[Int](8)
    pageCount = 0
    dropped = 0
    writePos = 0
    slots = new Array[Long](0)
    used = 0
    liveBytes = 0
    deadBytes = 0
    sharedEnd = 0 // the pages shared before are no longer these
  }

  /** Forgets every entry whose record is in the oldest page kept (entries written longest
   * ago, and not rewritten since) and gives the page back: room for newer ones. False if
   * no page but the one being written is left. */
  def evictOldest(): Boolean = {
    if (dropped >= pageCount - 1) return false
    forLiveRecords(dropped) { (location, key) =>
      deleteSlot(slotOf(location, hashOf(key, spaceOf(location))))
      kill(location)
      evictedEntries += 1
      true
    }
    dropOldest()
    // At `maxPages` a put waits for a page the slots can name: the table forgets the pages
    // given back once they are an eighth of it (the index pass they cost is paid for so).
    forgetDropped(force = pageCount >= maxPages && dropped * 8 >= pageCount)
    true
  }

  /** The live entries as they are now, of every space (the reader picks); later changes do
   * not show in it. */
  def snapshot(): Snapshot = {
    share()
    val taken = snapshots
    snapshots += 1
    val lastEnds = java.util.Arrays.copyOfRange(ends, dropped, pageCount)
    if (pageCount > dropped) lastEnds(lastEnds.length - 1) = writePos
    new Snapshot(java.util.Arrays.copyOfRange(pages, dropped, pageCount), lastEnds, taken)
  }

  /** Readers may hold every record written so far. */
  private def share(): Unit =
    sharedEnd = if (pageCount == 0) 0L else (pageCount - 1).toLong << 32 | writePos

  // ---- records --------------------------------------------------------------------------

  private def pageOf(location: Long): Int = (location >>> 32).toInt
  private def offsetOf(location: Long): Int = location.toInt
  private def field(location: Long, at: Int): Int =
    Int32.get(pages(pageOf(location)), offsetOf(location) + at)
  private def spaceOf(location: Long): Int = field(location, 0)
  private def recordBytes(location: Long): Long =
    Head + keyLength(location) + math.max(valueLength(location), 0)

  private def matches(location: Long, space: Int, key: Array[Byte]): Boolean =
    spaceOf(location) == space && keyLength(location) == key.length && {
      val page = pages(pageOf(location))
      val at = offsetOf(location) + Head
      java.util.Arrays.equals(page, at, at + key.length, key, 0, key.length)
    }

  /** The record no longer holds its entry: snapshots taken from now on skip it. */
  private def kill(location: Long): Unit = {
    Int32.put(pages(pageOf(location)), offsetOf(location) + 12, snapshots + 1)
    val size = recordBytes(location)
    liveBytes -= size
    deadBytes += size
  }

  /** Gives back the oldest page kept, none of whose records holds an entry any more. Its
   * records leave the dead count here, all at once and only here: a compaction refused
   * part-way through a page keeps the page, and with it every record it has walked, moved
   * ones included. Pages only ever go oldest first (`evictOldest`; `compact`, which stops at
   * the first page it cannot empty), so the dropped ones are always pages(0 until dropped). */
  private def dropOldest(): Unit = {
    deadBytes -= ends(dropped)
    uncharge(pages(dropped).length)
    pages(dropped) = null
    dropped += 1
  }

  /** Once the dropped pages are most of the page table, shifts the pages kept down over
   * them, and every location in the index with its page: the table, and what walks it,
   * stay proportional to the pages kept, however many a long run allocated and gave back.
   * The index pass this costs is paid for by the drops since the last shift. */
  private def forgetDropped(force: Boolean = false): Unit =
      if (dropped > 0 && (force || dropped >= MinForgotten && dropped * 2 >= pageCount)) {
    val kept = pageCount - dropped
    System.arraycopy(pages, dropped, pages, 0, kept)
    java.util.Arrays.fill(pages.asInstanceOf[Array[Object]], kept, pageCount, null)
    System.arraycopy(ends, dropped, ends, 0, kept)
    val shift = dropped.toLong << OffsetBits // each slot's page, down by `dropped`
    var i = 0
    while (i < slots.length) {
      if (slots(i) != 0) slots(i) -= shift
      i += 1
    }
    pageCount = kept
    sharedEnd = math.max(sharedEnd - (dropped.toLong << 32), 0L)
    dropped = 0
  }

  /** Writes a record after the last one (on a new page if it does not fit); its location, or
   * -1 if `memory` refused the page. `valueLength` -1: absent. */
  private def append(space: Int, key: Array[Byte], keyAt: Int, keyLength: Int,
      value: Array[Byte], valueAt: Int, valueLength: Int): Long = {
    val size = Head + keyLength + math.max(valueLength, 0)
    if (pageCount == 0 || writePos + size > pages(pageCount - 1).length) {
      if (!newPage(size)) return -1L
    }
    val page = pages(pageCount - 1)
    Int32.put(page, writePos, space)
    Int32.put(page, writePos + 4, keyLength)
    Int32.put(page, writePos + 8, valueLength)
    Int32.put(page, writePos + 12, 0)
    System.arraycopy(key, keyAt, page, writePos + Head, keyLength)
    if (valueLength > 0) {
      System.arraycopy(value, valueAt, page, writePos + Head + keyLength, valueLength)
    }
    val location = (pageCount - 1).toLong << 32 | writePos
    writePos += size
    location
  }

  /** Pages grow from small (most stores hold few keys) to `PageBytes`; a larger record
   * gets a page of its own size. */
  private def newPage(atLeast: Int): Boolean = {
    val grown = if (pageCount == 0) FirstPageBytes else math.min(PageBytes,
      pages(pageCount - 1).length * 2)
    val bytes = math.max(grown, atLeast)
    if (pageCount >= maxPages || !charge(bytes)) return false
    if (pageCount == pages.length) {
      pages = java.util.Arrays.copyOf(pages, pages.length * 2)
      ends = java.util.Arrays.copyOf(ends, ends.length * 2)
    }
    if (pageCount > 0) ends(pageCount - 1) = writePos
    pages(pageCount) = new Array[Byte](bytes)
    pageCount += 1
    writePos = 0
    true
  }

  private def charge(bytes: Long): Boolean =
    memory.reserve(bytes) && { allocated += bytes; true }

  private def uncharge(bytes: Long): Unit = {
    memory.release(bytes)
    allocated -= bytes
  }

  // ---- the index ------------------------------------------------------------------------

  private def slotOf(location: Long, hash: Int): Int = {
    val (mask, slot) = (slots.length - 1, slotFor(location, hash))
    var i = hash & mask
    while (slots(i) != slot) i = (i + 1) & mask
    i
  }

  /** A slot: the hash in the high half, the location in the low one as `[page + 1]
   * [offset: OffsetBits]` (never 0, which marks an empty slot). Pages count from the first
   * kept: `forgetDropped` shifts them down. */
  private def slotFor(location: Long, hash: Int): Long =
    hash.toLong << 32 | (pageOf(location) + 1L) << OffsetBits | offsetOf(location)

  private def locationOf(slot: Long): Long = {
    val page = (slot & 0xffffffffL) >>> OffsetBits
    (page - 1) << 32 | slot & OffsetMask
  }

  private def hashOfSlot(slot: Long): Int = (slot >>> 32).toInt

  private def roomForOneMore(): Boolean =
    (used + 1) <= slots.length * MaxLoad || growIndex()

  private def insert(location: Long, hash: Int): Unit = {
    val mask = slots.length - 1
    var i = hash & mask
    while (slots(i) != 0) i = (i + 1) & mask
    slots(i) = slotFor(location, hash)
    used += 1
  }

  /** Backward-shift deletion: each later slot of the run moves back into the gap when the
   * gap lies between its home and itself, so every entry stays reachable from its home. */
  private def deleteSlot(slot: Int): Unit = {
    val mask = slots.length - 1
    var gap = slot
    var i = (slot + 1) & mask
    while (slots(i) != 0) {
      val home = hashOfSlot(slots(i)) & mask
      if (((i - home) & mask) >= ((i - gap) & mask)) {
        slots(gap) = slots(i)
        gap = i
      }
      i = (i + 1) & mask
    }
    slots(gap) = 0
    used -= 1
  }

  private def growIndex(): Boolean = {
    val capacity = math.max(MinSlots, slots.length * 2)
    if (!charge(capacity.toLong * SlotBytes)) return false
    val oldSlots = slots
    slots = new Array[Long](capacity)
    used = 0
    var i = 0
    while (i < oldSlots.length) {
      val slot = oldSlots(i)
      if (slot != 0) insert(locationOf(slot), hashOfSlot(slot))
      i += 1
    }
    uncharge(oldSlots.length.toLong * SlotBytes)
    true
  }

  // ---- compaction -----------------------------------------------------------------------

  /** Moves the live records of the older pages after the newest and drops those pages, one
   * at a time, so at most a page more than the live records is ever allocated. */
  private def compact(): Unit = {
    val last = pageCount - 1 // pages before it are moved; moved records go after it
    while (dropped < last && moveLiveRecords(dropped)) dropOldest()
    forgetDropped()
  }

  /** Appends the live records of page `p` after the newest; false if memory refused a page
   * part-way (the rest stays where it is). */
  private def moveLiveRecords(p: Int): Boolean = forLiveRecords(p) { (location, key) =>
    val (page, keyAt, space) = (pages(p), offsetOf(location) + Head, spaceOf(location))
    val moved = append(space, page, keyAt, key.length, page, keyAt + key.length,
      valueLength(location))
    moved >= 0 && {
      val hash = hashOf(key, space)
      slots(slotOf(location, hash)) = slotFor(moved, hash)
      val size = recordBytes(location)
      kill(location)
      liveBytes += size
      true
    }
  }

  /** Calls `f` with the location and key of each live record of page `p` (those the index
   * points to), in page order, while it answers true; whether it went through them all. */
  private def forLiveRecords(p: Int)(f: (Long, Array[Byte]) => Boolean): Boolean = {
    var at = 0
    while (at < ends(p)) {
      val location = p.toLong << 32 | at
      if (field(location, 12) == 0) {
        val keyAt = at + Head
        val key = java.util.Arrays.copyOfRange(pages(p), keyAt, keyAt + keyLength(location))
        if (!f(location, key)) return false
      }
      at += recordBytes(location).toInt
    }
    true
  }
}

object PackedEntries {
  /** Where a cache's bytes are charged (the JVM's shared read-cache budget). */
  trait Memory {
    def reserve(bytes: Long): Boolean
    def release(bytes: Long): Unit
  }

  val Head = 16
  val FirstPageBytes = 4 << 10
  val PageBytes = 256 << 10 // small beside a budget: eviction frees memory a page at a time
  private val MinSlots = 64
  private val SlotBytes = 8L // a hash and a location, packed (`slotFor`)
  private val OffsetBits = 18 // a record starts within `PageBytes` (2^18) of its page's start
  private val OffsetMask = (1L << OffsetBits) - 1
  /** Pages in the table at once: a slot's 32 location bits hold the page + 1 above the
   * offset. So one store's cache holds at most about 4 GiB (16,383 pages of 256 KiB), and
   * past that evicts its oldest entries as it does past its budget. */
  val MaxPages: Int = (1 << (32 - OffsetBits)) - 1
  private val MaxLoad = 0.6
  private val MinCompactBytes = 1L << 20
  private val MinForgotten = 64 // dropped pages before the table is shifted over them

  /**
   * The entries at one moment, one record at a time in page order (`advance`), read in place:
   * every record written before the snapshot that still held its entry when it was taken
   * (`died` 0, or killed after the snapshot `taken` was), of every space: `space` says whose.
   */
  final class Snapshot private[PackedEntries] (pages: Array[Array[Byte]], ends: Array[Int],
      taken: Int) {
    private var p = 0
    private var next = 0 // in page p
    private var at = 0
    /** The page of the current record. */
    var page: Array[Byte] = _

    /** Moves to the next record the snapshot holds; false when there is none. */
    def advance(): Boolean = {
      while (p < pages.length) {
        if (next < ends(p)) {
          page = pages(p)
          at = next
          next = at + Head + keyLength + math.max(valueLength, 0)
          val died = int(12)
          if (died == 0 || died > taken + 1) return true // `kill` wrote 1 + snapshots by then
        } else {
          p += 1
          next = 0
        }
      }
      false
    }

    private def int(offset: Int): Int =
      Int32.get(page, at + offset)

    def space: Int = int(0)
    def keyAt: Int = at + Head
    def keyLength: Int = int(4)
    def valueAt: Int = keyAt + keyLength
    /** -1: known absent. */
    def valueLength: Int = int(8)
  }
}

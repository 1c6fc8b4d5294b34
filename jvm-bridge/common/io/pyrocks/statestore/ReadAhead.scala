package io.pyrocks.statestore

import java.util.Arrays.{compareUnsigned, copyOfRange}

/**
 * The read cache's window on a family walked in key order: gets that miss the cache one key
 * after another, each past the one before, read ahead from the worker a run of pairs at a
 * time. Spark's stream-stream join evicts that way (a scan of keyToNumValues in the worker's
 * order, then a get of each key's values from keyWithIndexToValue), and past the cache each
 * get would otherwise be a round trip. Invariants, each enforced where noted:
 *  - the window holds EVERY key of its family in [first, last] (`last` = null: up to the
 *    family's end), as the worker had them when it answered (`learn`); every write through
 *    the cache in that range keeps it so (a replaced, removed or new key: `write`), or drops
 *    it (a merge, whose outcome only the worker knows, or a write past its room);
 *  - it reads ahead only after `RunLength` misses in a row, each past the one before
 *    (`onMiss`): keys asked in no order never pay for pairs they will not use. Each window
 *    of a run is twice the one before, up to `maxBytes`;
 *  - its room (twice what it read, for what the task writes in its range) is charged to the
 *    cache's budget (`memory`) when it is read; a window that does not fit is not kept.
 * Not thread-safe: the read cache calls it under its lock.
 */
final class ReadAhead(memory: PackedEntries.Memory, maxBytes: Int = ReadAhead.MaxBytes) {
  import ReadAhead._

  private var window: Window = null
  private var lastSpace = -1
  private var lastMiss: Array[Byte] = null
  private var run = 0
  private var nextBytes = MinBytes

  /** Some(answer) (None = absent) if `key` is within the window's range. */
  def lookup(space: Int, key: Array[Byte]): Option[Option[Array[Byte]]] =
    if (window == null || !window.covers(space, key)) None else Some(window.answer(key))

  /** A get of `key` missed the cache: how many bytes of pairs to read from it on (0: ask
   * for the key alone). */
  def onMiss(space: Int, key: Array[Byte]): Int = {
    val ascending = space == lastSpace && lastMiss != null && compare(key, lastMiss) > 0
    if (ascending) run += 1
    else {
      run = 0
      nextBytes = MinBytes
    }
    lastSpace = space
    lastMiss = key.clone() // the caller may reuse its array
    if (run < RunLength) 0
    else {
      val bytes = nextBytes
      nextBytes = math.min(bytes * 2, math.max(maxBytes, MinBytes))
      bytes
    }
  }

  /** The worker's answer to a read-ahead of `asked` bytes from `key` (a chunk, as
   * `ChunkedScan` reads it) becomes the window; returns the answer for `key`. */
  def learn(space: Int, key: Array[Byte], chunk: Array[Byte], asked: Int): Option[Array[Byte]] = {
    clear()
    val learned = Window.of(space, key, chunk, room = 2L * math.max(chunk.length, asked))
    if (memory.reserve(learned.room)) {
      window = learned
      if (learned.last != null) lastMiss = learned.last // the run goes on past it
    } else { // no room now: start over, small
      run = 0
      nextBytes = MinBytes
    }
    learned.answer(key)
  }

  /** This store wrote `key`: `value` (null = removed), or an outcome not known here (a
   * merge: `known` = false). */
  def write(space: Int, key: Array[Byte], value: Array[Byte], known: Boolean): Unit =
    if (window != null && window.covers(space, key)) {
      val kept = known && window.write(key, value)
      if (!kept) clear()
    }

  def bytes: Long = if (window == null) 0 else window.room

  def clear(): Unit = if (window != null) {
    memory.release(window.room)
    window = null
  }
}

object ReadAhead {
  val RunLength = 4
  val MinBytes: Int = 4 << 10
  val MaxBytes: Int = 1 << 20

  /** Unsigned bytewise: the worker's (RocksDB's default) key order. */
  def compare(a: Array[Byte], b: Array[Byte]): Int = compareUnsigned(a, b)

  /** The pairs of one read-ahead, in place in the worker's chunk (the i-th key's bytes
   * from `keyAt(i)` to `valueAt(i)`, its value's `valueLength(i)` bytes from there), and what
   * the task wrote in its range since: a replaced value in `replaced` (`Removed` for a
   * removal), a key new to the range in `added`; together no more than `room` bytes. */
  private final class Window(val space: Int, val first: Array[Byte], val last: Array[Byte],
      chunk: Array[Byte], keyAt: Array[Int], valueAt: Array[Int], valueLength: Array[Int],
      val room: Long) {
    private val replaced = new Array[Array[Byte]](keyAt.length)
    private val added = new java.util.TreeMap[Array[Byte], Array[Byte]](
      (a: Array[Byte], b: Array[Byte]) => compare(a, b))
    // + keyAt, valueAt, valueLength, replaced
    private var used: Long = chunk.length + (3L * 4L + 8L) * keyAt.length

    def covers(space: Int, key: Array[Byte]): Boolean = space == this.space &&
      compare(key, first) >= 0 && (last == null || compare(key, last) <= 0)

    def answer(key: Array[Byte]): Option[Array[Byte]] = {
      val i = indexOf(key)
      if (i < 0) Option(added.get(key))
      else if (replaced(i) == null) {
        Some(copyOfRange(chunk, valueAt(i), valueAt(i) + valueLength(i)))
      } else if (replaced(i) eq Removed) None
      else Some(replaced(i))
    }

    /** Takes the write of `key` in (copies of what it keeps: the caller may reuse its
     * arrays); false if it does not fit in `room`. */
    def write(key: Array[Byte], value: Array[Byte]): Boolean = {
      val i = indexOf(key)
      val size = if (value == null) 0 else value.length + Overhead
      if (i >= 0) {
        val before = if (replaced(i) == null || (replaced(i) eq Removed)) 0
          else replaced(i).length + Overhead
        fits(size - before) && {
          replaced(i) = if (value == null) Removed else value.clone()
          true
        }
      } else if (value == null) {
        val gone = added.remove(key)
        if (gone != null) used -= key.length + gone.length + 2 * Overhead
        true
      } else {
        val gone = added.get(key)
        val before = if (gone == null) 0 else key.length + gone.length + 2 * Overhead
        fits(key.length + size + Overhead - before) && {
          added.put(key.clone(), value.clone())
          true
        }
      }
    }

    private def fits(more: Long): Boolean = used + more <= room && { used += more; true }

    /** The pair's index, or -1: the keys are in the worker's order. */
    private def indexOf(key: Array[Byte]): Int = {
      var (low, high) = (0, keyAt.length - 1)
      while (low <= high) {
        val mid = (low + high) >>> 1
        val c = compareUnsigned(chunk, keyAt(mid), valueAt(mid), key, 0, key.length)
        if (c < 0) low = mid + 1 else if (c > 0) high = mid - 1 else return mid
      }
      -1
    }
  }

  private object Window {
    def of(space: Int, first: Array[Byte], chunk: Array[Byte], room: Long): Window = {
      val (keyAt, valueAt, valueLength) =
        (Array.newBuilder[Int], Array.newBuilder[Int], Array.newBuilder[Int])
      val pairs = new Chunk.Cursor(chunk)
      while (pairs.advance()) {
        keyAt += pairs.keyAt
        valueAt += pairs.valueAt
        valueLength += pairs.valueLength
      }
      val (keys, values) = (keyAt.result(), valueAt.result())
      // More pairs after these: the window ends at the last one (the worker sends some).
      val last = if (!Chunk.more(chunk)) null else if (keys.nonEmpty) {
        copyOfRange(chunk, keys.last, values.last)
      } else throw new IllegalStateException("a read-ahead from the worker says more pairs " +
        "follow but holds none")
      new Window(space, first.clone(), last, chunk, keys, values, valueLength.result(), room)
    }
  }

  /** What an array kept beside the chunk costs beyond its bytes (header, reference). */
  private val Overhead = 24

  /** A removal, told apart from any value by identity. */
  private val Removed = new Array[Byte](0)
}

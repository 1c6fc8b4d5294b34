package io.pyrocks.statestore

/**
 * One writer per working copy: the one store of a provider that is UPDATING, if any.
 *
 * A load rebuilds the working copy over any uncommitted writes, so while a writer exists
 * no other store is loaded: a second task (a zombie attempt and its retry, a speculative
 * copy) waits until the writer commits or aborts, and fails past the request timeout; it
 * never loads over the first task's writes, so no version mixes two tasks'.
 *
 * Every method runs under `lock` (the provider's monitor, which every call of the
 * provider holds); `awaitFree` releases it while it waits.
 */
final class WriterSlot(lock: AnyRef, timeoutSeconds: Int, describe: => String) {
  private var writer: PyRocksStateStore = _
  private var writerThread: Thread = _
  private var writerConnection: Connection = _ // holds the writer's working copy

  def isTaken: Boolean = writer != null

  def holder: Option[PyRocksStateStore] = Option(writer)

  /** Waits (releasing the lock) until no store is UPDATING, or fails naming the holder. */
  def awaitFree(version: Long, purpose: String, deadline: Long): Unit = {
    while (writer != null) {
      def refuse(why: String) = new IllegalStateException(s"cannot load version $version of " +
        s"$describe to $purpose it: $writer is being updated $why")
      if (writerThread eq Thread.currentThread()) {
        throw refuse("by this same thread, which has neither committed nor aborted it")
      }
      val left = deadline - System.nanoTime()
      if (left <= 0) {
        throw refuse(s"by another task, which neither committed nor aborted it within " +
          s"$timeoutSeconds s (${LaunchOptions.Prefix}requestTimeoutSeconds)")
      }
      lock.wait(math.max(1L, left / 1000000L))
    }
  }

  def take(store: PyRocksStateStore, connection: Connection): Unit = {
    writer = store
    writerThread = Thread.currentThread()
    writerConnection = connection
  }

  /** `store` has committed or aborted: the next store may load. */
  def release(store: PyRocksStateStore): Unit = if (writer eq store) {
    writer = null
    writerThread = null
    writerConnection = null
    lock.notifyAll()
  }

  /** Why the writer cannot go on once its connection (and so its working copy) is gone. */
  def lostWorkingCopy: String = Option(writerConnection).flatMap(_.brokenReason)
    .getOrElse("the provider was closed while it was being updated")
}

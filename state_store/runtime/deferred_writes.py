"""Write frames applied to a working copy's RocksDB behind the session, on a thread of
their own, so that neither the task sending them nor its commit waits for RocksDB.

Why it is safe: a version is durable through its changelog and manifest (engine.py), which
hold every frame's bytes whether or not RocksDB has them yet; RocksDB is the working copy's
index of that state, and only what reads it needs it complete.

Why it pays: RocksDB's memtable insert (~1 µs a record here) holds the GIL, and a task's
commit used to wait for its worker to apply the batch's last frames: about 20 ms a store
and batch at 1M keys of aggregation. Applied behind the commit, that work runs beside the
next task or in the driver's gap between batches.

Invariants, enforced by `WorkingCopy` (working_copy.py) and, the last, here:
- Everything that reads or reshapes RocksDB calls `settle` first, so it sees every record
  sent before it, in order; only the records' own puts and deletes are ever deferred, and
  a commit's snapshot checkpoint (snapshots.py), a job of this queue so that it reads
  RocksDB in order with them: after the version's frames, before any later one.
- A failed apply poisons the queue: the jobs after it are dropped, each told so before
  any `settle` returns (`dropped`: a job waited on elsewhere, the snapshot's checkpoint,
  is then known never to run), and every `settle` raises until the working copy is
  closed. The engine then forgets the loaded version, so the next load rebuilds it from
  the durable root.
- At most `limit_bytes` of frames wait (a single larger one waits alone): `submit` blocks
  the session beyond it, so a worker's memory does not grow with a batch's size.
- A request that goes first (`first`: the commit, which the task waits for) pauses the
  applies between their RocksDB writes (`step`); whatever waits for the applies (`settle`,
  `quiesce`, `submit` at the limit) lifts the pause while it waits, so a pause never waits
  on itself. Without it, the commit took the GIL back from the apply at each of its I/O
  calls: at 100k keys of aggregation the commit took the worker 4.3 ms a store beside the
  applies against 2.9 ms with none (docs/benchmarks.md, Dec 6).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from ..errors import StateStoreError

LIMIT_BYTES = 4 << 20  # as the changelog spool keeps in memory (changelog_spool.py)


@dataclass(frozen=True)
class _Job:
    size: int  # of its frame: what it holds of `limit_bytes` while it waits
    apply: Callable[[], None]
    dropped: Callable[[], None] | None  # called if a failure before it drops it


class DeferredWrites:
    def __init__(self, name: str, limit_bytes: int = LIMIT_BYTES) -> None:
        self.name = name  # the store's, for errors
        self.limit_bytes = limit_bytes
        self._changed = threading.Condition()
        self._queue: deque[_Job] = deque()
        self._queued_bytes = 0
        self._applying = False  # a thread is draining the queue
        self._failure: str | None = None
        self._first = 0  # requests going first: the applies pause
        self._waiting = 0  # threads waiting for the applies: no pause holds them up

    def submit(self, size: int, apply: Callable[[], None],
               dropped: Callable[[], None] | None = None) -> None:
        """Queues `apply` (of a frame of `size` bytes) behind every earlier one. If a failed
        apply before it drops it, `dropped` is called instead (once, on the apply thread;
        it must not raise nor use this queue)."""
        with self._changed:
            self._wait_until(lambda: not self._queue or self._failure is not None
                             or self._queued_bytes + size <= self.limit_bytes)
            self._raise_failure()
            self._queue.append(_Job(size, apply, dropped))
            self._queued_bytes += size
            if not self._applying:
                self._applying = True
                threading.Thread(target=self._drain, name=f"apply {self.name}",
                                 daemon=True).start()

    def settle(self) -> None:
        """Returns once every queued frame is applied; raises if one failed."""
        with self._changed:
            self._wait_until(lambda: not self._applying)
            self._raise_failure()

    def quiesce(self) -> None:
        """`settle` without raising, and clears a failure: what closing the copy needs."""
        with self._changed:
            self._wait_until(lambda: not self._applying)
            self._failure = None

    @contextmanager
    def first(self) -> Iterator[None]:
        """The applies pause at their next `step` until the block ends."""
        with self._changed:
            self._first += 1
        try:
            yield
        finally:
            with self._changed:
                self._first -= 1
                self._changed.notify_all()

    def step(self) -> None:
        """An apply's point between two RocksDB writes: it waits there while a request
        goes first and nothing waits for the applies."""
        with self._changed:
            self._changed.wait_for(lambda: self._first == 0 or self._waiting > 0)

    def _wait_until(self, done: Callable[[], bool]) -> None:
        """Waits (the lock held) until `done`; a pause does not hold the applies meanwhile."""
        self._waiting += 1
        self._changed.notify_all()  # a paused apply goes on
        try:
            self._changed.wait_for(done)
        finally:
            self._waiting -= 1

    @property
    def busy(self) -> bool:
        """Frames are waiting or being applied: a `settle` now would wait for them."""
        with self._changed:
            return self._applying

    @property
    def queued_bytes(self) -> int:
        """Bytes of frames not yet applied (the one being applied among them)."""
        with self._changed:
            return self._queued_bytes

    @property
    def failure(self) -> str | None:
        with self._changed:
            return self._failure

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise StateStoreError(f"{self.name}: applying write records to the working copy "
                                  f"failed: {self._failure}")

    def _drain(self) -> None:
        while True:
            with self._changed:
                if not self._queue:
                    self._applying = False
                    self._changed.notify_all()
                    return
                job = self._queue[0]
            try:
                job.apply()
            except Exception as e:  # reported by every settle from now on
                self._poison(f"{type(e).__name__}: {e}")
                return
            with self._changed:
                self._queue.popleft()
                self._queued_bytes -= job.size
                self._changed.notify_all()

    def _poison(self, failure: str) -> None:
        """Records the failure and drops every job behind it, telling each before any
        `settle` (which waits for `_applying` to end) can return."""
        with self._changed:
            self._failure = failure
            dropped = [job.dropped for job in list(self._queue)[1:] if job.dropped]
            self._queue.clear()
            self._queued_bytes = 0
        for tell in dropped:
            tell()
        with self._changed:
            self._applying = False
            self._changed.notify_all()

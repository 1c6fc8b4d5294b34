"""Final snapshots taken while a store is idle, so that stopping a query costs no pause.

Flink takes a final checkpoint when a job finishes (FLIP-147); ours is `finish`, which the
shim asks for when a query run ends. Its cost is a memtable flush per store, so a `stop()`
that had to wait for it would pause for as long. But a store whose query stopped was idle
before: nothing came after its last commit. So a store that has had no request for
`snapshotWhenIdleSeconds` after a commit starts that version's snapshot in the background
then, and the finish at `stop()` has nothing left to write.

What a `stop()` right after a batch still has to write is the stores that committed within
that delay of it. A worker holding a few stores (8 shuffle partitions) has all of them
there whatever the delay, while a batch of 200 stores on two workers commits over its whole
length, so a delay of a second left dozens a worker. A short delay for every store would
snapshot every version of batches that follow each other, and each flush feeds RocksDB's
compactions. So the delay is shortened for the oldest only: at most `most_waiting` sessions
of a worker wait the full delay; the others, the ones whose commit is oldest, are
snapshotted once idle `hurried_s`.

One thread per worker keeps one deadline per session that committed a version not yet
snapshotted. At its deadline a session is idle only if its last request is that long ago
and none is being served (its lock is free); otherwise the deadline moves to when it could
be. The engine says whether anything is left to snapshot; if not, the session is disarmed
(the next commit arms it again).
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

MOST_WAITING = 4  # a worker's share of 8 shuffle partitions on two task slots: all of it
HURRIED_S = 0.25


class IdleCandidate(Protocol):
    """What the scheduler needs of a worker session."""

    lock: threading.Lock  # held while a request is served
    last_request: float  # when the last request arrived, on the scheduler's clock

    def snapshot_when_idle(self) -> bool:
        """Starts the snapshot if one is due; False to be asked again later."""
        ...


@dataclass
class _Armed:
    """A session with a committed version not yet snapshotted."""

    deadline: float  # its one current entry in the heap: any other entry of it is stale
    wait: float  # how long it must be idle: the store's delay, or `hurried_s`


class IdleSnapshots:
    """The deadlines of a worker's sessions; `start=False` (tests) leaves visiting the due
    ones to `visit_due`, on the caller's clock."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, start: bool = True,
                 most_waiting: int = MOST_WAITING, hurried_s: float = HURRIED_S) -> None:
        self._clock = clock
        self._most_waiting = most_waiting
        self._hurried_s = hurried_s
        self._due: list[tuple[float, int, IdleCandidate]] = []
        # In the order of their last commits, oldest first: a commit moves its session last.
        self._armed: dict[IdleCandidate, _Armed] = {}
        self._order = itertools.count()  # ties on the deadline never compare sessions
        self._changed = threading.Condition()
        if start:
            threading.Thread(target=self._run, name="idle-snapshots", daemon=True).start()

    def committed(self, session: IdleCandidate, idle_seconds: float) -> None:
        """`session` just committed (its lock held): snapshot it once idle `idle_seconds`
        (0: never), or sooner once `most_waiting` sessions committed after it."""
        if idle_seconds <= 0:
            return
        with self._changed:
            self._armed.pop(session, None)
            armed = self._armed[session] = _Armed(0.0, idle_seconds)
            self._schedule(session, armed, self._clock() + idle_seconds)
            self._hurry_the_oldest()

    def pending(self) -> int:
        """Sessions with a committed version not yet snapshotted."""
        with self._changed:
            return len(self._armed)

    def visit_due(self) -> None:
        """Visits every session whose deadline has passed."""
        while True:
            with self._changed:
                if not self._due or self._due[0][0] > self._clock():
                    return
                deadline, _, session = heapq.heappop(self._due)
                armed = self._armed.get(session)
                if armed is None or armed.deadline != deadline:
                    continue  # stale: committed again, hurried, or snapshotted since
            self._visit(session, armed)

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._due or self._due[0][0] > self._clock():
                    self._changed.wait(self._due[0][0] - self._clock() if self._due else None)
            self.visit_due()

    def _hurry_the_oldest(self) -> None:
        """Invariant: at most `most_waiting` armed sessions wait longer than `hurried_s`,
        the ones that committed last (a commit arms its session anew, unhurried)."""
        excess = len(self._armed) - self._most_waiting
        for session, armed in itertools.islice(self._armed.items(), max(excess, 0)):
            if armed.wait > self._hurried_s:
                armed.wait = self._hurried_s
                self._schedule(session, armed, min(armed.deadline,
                                                   session.last_request + armed.wait))

    def _schedule(self, session: IdleCandidate, armed: _Armed, deadline: float) -> None:
        armed.deadline = deadline
        heapq.heappush(self._due, (deadline, next(self._order), session))
        self._changed.notify()

    def _visit(self, session: IdleCandidate, armed: _Armed) -> None:
        if not session.lock.acquire(blocking=False):  # serving a request: not idle now
            with self._changed:
                self._schedule(session, armed, self._clock() + armed.wait)
            return
        try:  # under the session's lock, so a commit cannot slip between look and (dis)arm
            wait = armed.wait
            quiet_until = session.last_request + wait
            if self._clock() >= quiet_until:
                quiet_until = None if session.snapshot_when_idle() \
                    else self._clock() + wait  # an upload in flight: look again later
            with self._changed:
                if quiet_until is None:
                    del self._armed[session]
                elif armed.wait < wait:  # hurried meanwhile: look again with the new wait
                    self._schedule(session, armed, self._clock())
                else:
                    self._schedule(session, armed, quiet_until)
        finally:
            session.lock.release()

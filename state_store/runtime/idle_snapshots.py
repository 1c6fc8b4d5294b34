"""Final snapshots taken while a store is idle, so that stopping a query costs no pause.

Flink takes a final checkpoint when a job finishes (FLIP-147); ours is `finish`, which the
shim asks for when a query run ends. Its cost is a memtable flush per store, so a `stop()`
that had to wait for it would pause for as long. But a store whose query stopped was idle
before: nothing came after its last commit. So a store that has had no request for
`snapshotWhenIdleSeconds` after a commit starts that version's snapshot in the background
then, and the finish at `stop()` has nothing left to write.

One thread per worker keeps one deadline per session that committed a version not yet
snapshotted. At its deadline a session is idle only if its last request is that long ago
and none is being served (its lock is free); otherwise the deadline moves to when it could
be. The engine says whether anything is left to snapshot; if not, the deadline is dropped
(the next commit sets one again).
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable
from typing import Protocol


class IdleCandidate(Protocol):
    """What the scheduler needs of a worker session."""

    lock: threading.Lock  # held while a request is served
    last_request: float  # when the last request arrived, on the scheduler's clock

    def snapshot_when_idle(self) -> bool:
        """Starts the snapshot if one is due; False to be asked again later."""
        ...


class IdleSnapshots:
    """The deadlines of a worker's sessions; `start=False` (tests) leaves visiting the due
    ones to `visit_due`, on the caller's clock."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, start: bool = True) -> None:
        self._clock = clock
        self._due: list[tuple[float, int, float, IdleCandidate]] = []
        self._armed: set[IdleCandidate] = set()  # sessions with a deadline: one each
        self._order = itertools.count()  # ties on the deadline never compare sessions
        self._changed = threading.Condition()
        if start:
            threading.Thread(target=self._run, name="idle-snapshots", daemon=True).start()

    def committed(self, session: IdleCandidate, idle_seconds: float) -> None:
        """`session` just committed (its lock held): snapshot it once idle `idle_seconds`
        (0: never)."""
        if idle_seconds <= 0:
            return
        with self._changed:
            if session not in self._armed:
                self._armed.add(session)
                self._push(self._clock() + idle_seconds, idle_seconds, session)

    def pending(self) -> int:
        with self._changed:
            return len(self._due)

    def visit_due(self) -> None:
        """Visits every session whose deadline has passed."""
        while True:
            with self._changed:
                if not self._due or self._due[0][0] > self._clock():
                    return
                _, _, idle_seconds, session = heapq.heappop(self._due)
            self._visit(session, idle_seconds)

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._due or self._due[0][0] > self._clock():
                    self._changed.wait(self._due[0][0] - self._clock() if self._due else None)
            self.visit_due()

    def _push(self, deadline: float, idle_seconds: float, session: IdleCandidate) -> None:
        heapq.heappush(self._due, (deadline, next(self._order), idle_seconds, session))
        self._changed.notify()

    def _visit(self, session: IdleCandidate, idle_seconds: float) -> None:
        if not session.lock.acquire(blocking=False):  # serving a request: not idle now
            with self._changed:
                self._push(self._clock() + idle_seconds, idle_seconds, session)
            return
        try:  # under the session's lock, so a commit cannot slip between look and (dis)arm
            quiet_until = session.last_request + idle_seconds
            if self._clock() >= quiet_until:
                quiet_until = None if session.snapshot_when_idle() \
                    else self._clock() + idle_seconds  # an upload in flight: look again later
            with self._changed:
                if quiet_until is None:
                    self._armed.discard(session)
                else:
                    self._push(quiet_until, idle_seconds, session)
        finally:
            session.lock.release()

"""Releasing the working copies of closed stores, behind the requests that closed them.

A store that ends answers once what is durable is done: its final snapshot published, its
uploads drained (engine.py). What is left is local and loses nothing if late: closing its
RocksDB and removing its directory, about 2.7 ms of a worker's CPU per store. A query's
`stop()` ends all of its stores at once and waits for every answer, so done in line those
releases were most of the stop: 200 stores cost it about 270 ms (docs/benchmarks.md).

So a worker hands the working copies of its closed stores to one `Teardown`, whose thread
releases them once none has been handed over for `quiet_s`: after the burst of ends that a
stop is, so that the releases do not compete for the CPU with the answers it waits for. A
steady stream of ends (tasks closing one store after another) is released at least every
`max_hold_s`, so that closed copies do not pile up on disk.

Invariant: every copy handed over is released before the worker exits (`release_all`,
from its exit path). Each copy's directory is its own (worker.py names it per session), so
nothing opened later can be the copy being removed.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

QUIET_S = 0.3
MAX_HOLD_S = 2.0


class Closable(Protocol):
    """A working copy, as far as releasing it goes."""

    def close(self) -> None: ...


# What a store calls at close with its working copy and that copy's directory: `release_now`,
# or a worker's `Teardown.release`.
Release = Callable[[Closable, Path], None]


def release_now(copy: Closable, directory: Path) -> None:
    """Closes `copy` and removes `directory`, the one it lives in: the in-line release."""
    try:
        copy.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


class Teardown:
    """A worker's closed working copies, waiting to be released; `start=False` (tests)
    leaves releasing them to `release_due` and `release_all`, on the caller's clock."""

    def __init__(self, quiet_s: float = QUIET_S, max_hold_s: float = MAX_HOLD_S,
                 clock: Callable[[], float] = time.monotonic, start: bool = True) -> None:
        self._quiet_s = quiet_s
        self._max_hold_s = max_hold_s
        self._clock = clock
        self._handed: list[tuple[Closable, Path]] = []
        self._first_handed = self._last_handed = 0.0
        self._changed = threading.Condition()
        # One release at a time: the worker's exit waits for the thread's batch in progress.
        self._releasing = threading.Lock()
        if start:
            threading.Thread(target=self._run, name="teardown", daemon=True).start()

    def release(self, copy: Closable, directory: Path) -> None:
        """Takes `copy`, living in `directory`, to close and remove behind the caller."""
        with self._changed:
            now = self._clock()
            self._handed.append((copy, directory))
            self._last_handed = now
            if len(self._handed) == 1:  # the thread waits for a first copy, with no deadline
                self._first_handed = now
                self._changed.notify()  # later ones only move the deadline it reads on waking

    def waiting(self) -> int:
        with self._changed:
            return len(self._handed)

    def release_due(self) -> None:
        """Releases everything handed over, if it is due now."""
        with self._changed:
            due = bool(self._handed) and self._wait() <= 0
        if due:
            self.release_all()

    def release_all(self) -> None:
        """Releases every copy handed over so far, on the caller's thread. A copy whose
        close fails is reported on stderr (the worker's log) and its directory removed all
        the same: nothing in it is needed (its store's state is durable in its root)."""
        with self._releasing:
            with self._changed:
                handed, self._handed = self._handed, []
            for copy, directory in handed:
                try:
                    release_now(copy, directory)
                except Exception as e:
                    print(f"closing the working copy in {directory}: {type(e).__name__}: {e}",
                          file=sys.stderr)

    def _wait(self) -> float:
        """Seconds until the copies handed over are due (the condition's lock held)."""
        return min(self._last_handed + self._quiet_s,
                   self._first_handed + self._max_hold_s) - self._clock()

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._handed or self._wait() > 0:
                    self._changed.wait(self._wait() if self._handed else None)
            self.release_all()

"""A store's requests to its storage that need not wait for one another.

On an object store every request waits a network round trip, and most of a request's time
is that wait: requests that do not depend on one another run side by side on the worker's
`storage-requests` threads (worker.py makes them; its sessions share them). On a local
disk, or with no threads given, they run in line: a request there costs less than handing
it to another thread.

Each call keeps at most `IN_FLIGHT` of its requests running at once, so that one store's
load never takes every thread from the commits of the worker's other sessions; and it
returns, or raises, only once none of its requests is running any more, so that a caller
may remove what they were writing to.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future, wait
from typing import Generic, TypeVar

from ..format.store_root import begun_here, run_each_here

T = TypeVar("T")

IN_FLIGHT = 4
# Fetched ahead of their use at most this many bytes (one request is always allowed): the
# changelogs of a replay wait in memory for their turn.
AHEAD_BYTES = 64 << 20


class StorageRequests:
    """The requests of one store: `started` (one beside the caller's), `in_order` (results
    used one by one, the next ones fetched meanwhile), `run_all` (all at once)."""

    def __init__(self, executor: Executor | None, remote: bool) -> None:
        self.executor = executor if remote else None

    def started(self, request: Callable[[], T]) -> Callable[[], T]:
        """`request` begun now; calling the answer waits for its result."""
        if self.executor is None:
            return begun_here(request)
        return self.executor.submit(request).result

    def in_order(self, requests: Sequence[Callable[[], T]], sizes: Sequence[int]
                 ) -> InOrder[T]:
        """The results of `requests` in their order, the first ones begun now (`sizes`: the
        bytes each brings, as its record says)."""
        return InOrder(self.executor, requests, sizes)

    def run_all(self, requests: Sequence[Callable[[], T]]) -> list[T]:
        """Runs every one of `requests`, this thread among the ones that run them, and
        answers their results in order. After a failure none more starts; the first
        failure, in order, is raised."""
        if self.executor is None or len(requests) < 2:
            return run_each_here(requests)
        queue = deque(enumerate(requests))
        results: dict[int, T] = {}
        failures: dict[int, BaseException] = {}
        lock = threading.Lock()

        def lane() -> None:
            while True:
                with lock:
                    if failures or not queue:
                        return
                    index, request = queue.popleft()
                try:
                    results[index] = request()
                except BaseException as failure:  # noqa: BLE001 - raised below, in order
                    with lock:
                        failures[index] = failure

        lanes = [self.executor.submit(lane) for _ in range(min(IN_FLIGHT, len(requests)) - 1)]
        lane()
        # The queue is empty now: a lane not yet begun has nothing to do, and is withdrawn.
        _wait_unless_withdrawn(lanes)
        if failures:
            raise failures[min(failures)]
        return [results[index] for index in range(len(requests))]


class InOrder(Generic[T]):
    """Results in the order of their requests, each fetched ahead of its turn while the
    ones before it are used; the first failure, in order, is raised at its turn. Closed
    (abandoned, or after a failure), it starts nothing more and waits for what runs."""

    def __init__(self, executor: Executor | None, requests: Sequence[Callable[[], T]],
                 sizes: Sequence[int]) -> None:
        self.executor = executor
        self.requests, self.sizes = requests, sizes
        self.pending: deque[tuple[Future[T], int]] = deque()
        self.held = 0  # the bytes of the pending requests
        self.upcoming = 0  # the first request not begun
        self._begin_more()

    def __iter__(self) -> InOrder[T]:
        return self

    def __next__(self) -> T:
        if self.executor is None and self.upcoming < len(self.requests):
            self.upcoming += 1
            return self.requests[self.upcoming - 1]()
        if not self.pending:
            raise StopIteration
        future, size = self.pending.popleft()
        self.held -= size
        self._begin_more()
        return future.result()

    def _begin_more(self) -> None:
        if self.executor is None:
            return
        requests, sizes = self.requests, self.sizes
        while self.upcoming < len(requests) and len(self.pending) < IN_FLIGHT and (
                not self.pending or self.held + sizes[self.upcoming] <= AHEAD_BYTES):
            self.pending.append((self.executor.submit(requests[self.upcoming]),
                                 sizes[self.upcoming]))
            self.held += sizes[self.upcoming]
            self.upcoming += 1

    def close(self) -> None:
        self.upcoming = len(self.requests)
        _wait_unless_withdrawn([future for future, _ in self.pending])
        self.pending.clear()


def _wait_unless_withdrawn(futures: list[Future]) -> None:
    """Withdraws each of `futures` not yet begun and waits for the others. (`wait` on a
    withdrawn one would wait until a thread of the pool came to it.)"""
    wait([future for future in futures if not future.cancel()])

"""storage_requests.py: a store's independent requests side by side on a worker's threads
(on an object store), or in line (on a local disk), with real threads. Each test's requests
wait for one another through events, so a rule broken shows as a request that waited for
one that never came (bounded by WAIT_S), not as a timing."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from state_store.runtime.storage_requests import AHEAD_BYTES, IN_FLIGHT, StorageRequests

WAIT_S = 10.0  # a request waiting for one that is never made gives up after this


@pytest.fixture
def threads() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(3 * IN_FLIGHT) as pool:
        yield pool


class Requests:
    """`count` requests; request i answers i once every event it is told to wait for is
    set, and records when it began and ended."""

    def __init__(self, count: int) -> None:
        self.began = [threading.Event() for _ in range(count)]
        self.ended = [threading.Event() for _ in range(count)]
        self.waits: dict[int, list[threading.Event]] = {}
        self.fails: dict[int, Exception] = {}
        self.gave_up: list[int] = []

    def __call__(self) -> list[Callable[[], int]]:
        return [self._request(i) for i in range(len(self.began))]

    def _request(self, i: int) -> Callable[[], int]:
        def request() -> int:
            self.began[i].set()
            try:
                for event in self.waits.get(i, []):
                    if not event.wait(WAIT_S):
                        self.gave_up.append(i)
                if i in self.fails:
                    raise self.fails[i]
                return i
            finally:
                self.ended[i].set()
        return request

    def begun(self) -> int:
        return sum(event.is_set() for event in self.began)


def test_in_order_answers_in_order_while_the_next_ones_run_ahead(
        threads: ThreadPoolExecutor) -> None:
    """The first request waits until the last one of the first IN_FLIGHT has begun: in
    line it would wait in vain."""
    requests = Requests(10)
    requests.waits[0] = [requests.began[IN_FLIGHT - 1]]
    fetched = StorageRequests(threads, remote=True).in_order(requests(), [1] * 10)
    assert list(fetched) == list(range(10))
    assert requests.gave_up == []


def test_in_order_keeps_at_most_in_flight_requests_and_the_bytes_ahead_bounded(
        threads: ThreadPoolExecutor) -> None:
    """IN_FLIGHT requests begin at once when they are small; when two would bring more
    than AHEAD_BYTES, one at a time (the next begins when the one before is taken)."""
    for size, at_once in [(1, IN_FLIGHT), (AHEAD_BYTES // 2 + 1, 1)]:
        requests = Requests(2 * IN_FLIGHT)
        release = threading.Event()
        requests.waits = {i: [release] for i in range(2 * IN_FLIGHT)}
        fetched = StorageRequests(threads, remote=True).in_order(
            requests(), [size] * 2 * IN_FLIGHT)
        assert requests.began[at_once - 1].wait(WAIT_S)
        release.set()
        for i in range(at_once):  # the ones begun end; none more begins until one is taken
            assert requests.ended[i].wait(WAIT_S)
        assert requests.begun() == at_once, (size, requests.begun())
        assert list(fetched) == list(range(2 * IN_FLIGHT))


def test_in_order_raises_the_first_failure_at_its_turn_and_closing_waits(
        threads: ThreadPoolExecutor) -> None:
    """Request 1 fails after request 2 has failed: 0 is answered, then 1's failure is
    raised. Closed then, it begins nothing more, and returns only once request 3, still
    running, has ended."""
    requests = Requests(8)
    release = threading.Event()
    requests.fails = {1: ValueError("first"), 2: ValueError("second")}
    requests.waits = {1: [requests.ended[2]], 3: [release]}
    fetched = StorageRequests(threads, remote=True).in_order(requests(), [1] * 8)
    assert next(fetched) == 0
    with pytest.raises(ValueError, match="first"):
        next(fetched)
    assert requests.began[3].wait(WAIT_S)
    closer = threading.Thread(target=fetched.close)
    closer.start()
    closer.join(0.5)  # with request 3 held, close must still be waiting for it
    still_waiting = closer.is_alive()
    release.set()
    closer.join()
    assert still_waiting and requests.ended[3].is_set()
    # Two taken, so at most two more than IN_FLIGHT were ever begun; none after the close.
    begun = requests.begun()
    assert begun <= IN_FLIGHT + 2 and all(
        requests.ended[i].is_set() for i in range(8) if requests.began[i].is_set())
    with pytest.raises(StopIteration):
        next(fetched)
    assert requests.begun() == begun


def test_run_all_runs_them_side_by_side_and_raises_the_first_failure_in_order(
        threads: ThreadPoolExecutor) -> None:
    """Every request begins before any fails (in line, request 0 would wait in vain for the
    last); 0 fails after 1 has: 0's failure is raised, once none of them is running."""
    requests = Requests(IN_FLIGHT)
    last = IN_FLIGHT - 1
    requests.waits = {0: [requests.began[last], requests.ended[1]], 1: [requests.began[last]],
                      last: [requests.ended[0]]}
    requests.fails = {0: ValueError("first"), 1: ValueError("second")}
    with pytest.raises(ValueError, match="first"):
        StorageRequests(threads, remote=True).run_all(requests())
    assert requests.gave_up == []
    assert all(event.is_set() for event in requests.ended)


def test_run_all_answers_the_results_in_the_order_of_the_requests(
        threads: ThreadPoolExecutor) -> None:
    """Request 0 ends last (it waits for the others to end): the results are still in the
    requests' order."""
    requests = Requests(IN_FLIGHT)
    requests.waits = {0: requests.ended[1:]}
    assert StorageRequests(threads, remote=True).run_all(requests()) == list(range(IN_FLIGHT))
    assert requests.gave_up == []


def test_run_all_returns_only_once_every_request_has_ended(
        threads: ThreadPoolExecutor) -> None:
    """The caller removes what a failed download was writing to: a request still running
    when run_all raises would write into a directory gone (or a new one)."""
    requests = Requests(IN_FLIGHT)
    release = threading.Event()
    requests.waits = {0: [requests.began[1]], 1: [release]}
    requests.fails = {0: ValueError("damaged")}
    raised: list[BaseException] = []

    def run() -> None:
        try:
            StorageRequests(threads, remote=True).run_all(requests())
        except ValueError as failure:
            raised.append(failure)

    caller = threading.Thread(target=run)
    caller.start()
    assert requests.began[1].wait(WAIT_S) and requests.ended[0].wait(WAIT_S)
    caller.join(0.5)  # with request 1 held, run_all must still be waiting for it
    still_waiting = caller.is_alive()
    release.set()
    caller.join()
    assert still_waiting and len(raised) == 1


def test_run_all_begins_no_request_after_a_failure() -> None:
    """The worker's threads all busy, this thread runs the requests alone, in order: after
    request 0 fails it begins none of the others, and the lanes it handed to the threads,
    never begun, are withdrawn: it returns without waiting for a thread to come to them."""
    release = threading.Event()
    with ThreadPoolExecutor(1) as busy:
        blocker = busy.submit(release.wait, WAIT_S)
        requests = Requests(2 * IN_FLIGHT)
        requests.fails = {0: ValueError("damaged")}
        with pytest.raises(ValueError, match="damaged"):
            StorageRequests(busy, remote=True).run_all(requests())
        threads_still_busy = not blocker.done()
        release.set()
    assert requests.begun() == 1 and threads_still_busy


def test_on_a_local_disk_requests_run_in_line(threads: ThreadPoolExecutor) -> None:
    """A local request costs less than handing it to a thread: each runs on the caller's
    thread, when its answer is asked for (in_order) or at once (started, run_all)."""
    local = StorageRequests(threads, remote=False)
    here = threading.get_ident()
    assert local.started(threading.get_ident)() == here
    requests = Requests(3)
    fetched = local.in_order(requests(), [1] * 3)
    assert requests.begun() == 0
    assert next(fetched) == 0 and requests.begun() == 1
    ran_on: list[int] = []
    local.run_all([lambda: ran_on.append(threading.get_ident())] * 3)
    assert ran_on == [here] * 3

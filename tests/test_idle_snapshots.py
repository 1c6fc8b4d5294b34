"""The final snapshot taken ahead of time: a store idle since its commit snapshots that
version in the background, so finishing it (at stop()) has nothing left to write. Real
worker sessions and engines on real rocksdict; the scheduler's clock is the test's."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from state_store.runtime.idle_snapshots import IdleSnapshots
from state_store.runtime.protocol import I64, Request
from state_store.runtime.worker import Session, WorkerShared
from test_engine import open_store, put


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def session_with_store(tmp_path: Path, idle: IdleSnapshots | None, root: str | None = None,
                       **options: object) -> Session:
    """A worker session with a store open on `root` (a local one by default)."""
    shared = WorkerShared(tmp_path / "worker", ThreadPoolExecutor(1), idle=idle)
    session = Session(None, shared)  # type: ignore[arg-type]
    session.store = open_store(root or tmp_path / "root", tmp_path / "local", interval=100,
                               snapshot_when_idle_seconds=1.0, **options)
    return session


def request(session: Session, clock: Callable[[], float], kind: Request, body: bytes = b"") -> None:
    """One request as serve() handles it: noted, then dispatched under the session's lock."""
    with session.lock:
        session.last_request = clock()
        session.dispatch(kind, body)


def commit(session: Session, clock: Callable[[], float], version: int) -> None:
    """A batch as the shim sends it: load, a write, the commit."""
    request(session, clock, Request.LOAD, I64.pack(version - 1))
    request(session, clock, Request.WRITES, put(f"k{version}", "v"))
    request(session, clock, Request.COMMIT, I64.pack(version))


def snapshots(session: Session) -> list[int]:
    assert session.store is not None
    session.store.snapshots.drain()
    return session.store.checkpoint.snapshot_versions()


def test_a_store_idle_after_its_commit_snapshots_it_and_finish_has_nothing_to_do(
        tmp_path: Path) -> None:
    clock = Clock()
    idle = IdleSnapshots(clock, start=False)
    session = session_with_store(tmp_path, idle)
    for version in (1, 2, 3):
        commit(session, clock, version)
    assert snapshots(session) == []  # 100 is the interval
    clock.now += 0.99
    idle.visit_due()
    assert snapshots(session) == []  # not idle long enough yet
    clock.now += 0.02
    idle.visit_due()
    assert snapshots(session) == [3]
    assert session.store is not None
    session.store.finish()
    assert session.store.metrics.snapshots == 1  # since the last load: finish wrote none
    assert idle.pending() == 0


def test_a_request_after_the_commit_moves_the_deadline(tmp_path: Path) -> None:
    """Spark asks for metrics (and more) after a commit: the store is idle only once the
    last request is `snapshotWhenIdleSeconds` ago."""
    clock = Clock()
    idle = IdleSnapshots(clock, start=False)
    session = session_with_store(tmp_path, idle)
    commit(session, clock, 1)
    clock.now += 0.5
    request(session, clock, Request.METRICS)
    clock.now += 0.6
    idle.visit_due()
    assert snapshots(session) == []  # 0.6 s since the last request
    assert idle.pending() == 1
    clock.now += 0.4
    idle.visit_due()
    assert snapshots(session) == [1]
    assert idle.pending() == 0


def test_uncommitted_writes_are_never_snapshotted_and_the_next_commit_rearms(
        tmp_path: Path) -> None:
    clock = Clock()
    idle = IdleSnapshots(clock, start=False)
    session = session_with_store(tmp_path, idle)
    commit(session, clock, 1)
    request(session, clock, Request.LOAD, I64.pack(1))  # the next batch, not committed
    request(session, clock, Request.WRITES, put("uncommitted", "x"))
    clock.now += 5
    idle.visit_due()
    assert snapshots(session) == []
    assert idle.pending() == 0  # dropped: nothing committed to snapshot
    request(session, clock, Request.COMMIT, I64.pack(2))
    clock.now += 1
    idle.visit_due()
    assert snapshots(session) == [2]


def test_a_store_serving_a_request_is_not_idle(tmp_path: Path) -> None:
    clock = Clock()
    idle = IdleSnapshots(clock, start=False)
    session = session_with_store(tmp_path, idle)
    commit(session, clock, 1)
    clock.now += 5
    with session.lock:  # a request arrived just now and holds the session
        idle.visit_due()
    assert snapshots(session) == []
    assert idle.pending() == 1  # looked at again later


def test_an_upload_in_flight_defers_the_idle_snapshot_until_it_is_done(tmp_path: Path) -> None:
    clock = Clock()
    idle = IdleSnapshots(clock, start=False)
    session = session_with_store(tmp_path, idle)
    store = session.store
    assert store is not None
    commit(session, clock, 1)
    blocker = threading.Event()
    original = store.snapshots._upload

    def held_upload(*args: object) -> object:
        blocker.wait(30)
        return original(*args)  # type: ignore[arg-type]

    store.snapshots._upload = held_upload  # type: ignore[method-assign]
    store.opts = replace(store.opts, snapshot_interval=1)
    commit(session, clock, 2)  # its snapshot is due at once, and held
    store.opts = replace(store.opts, snapshot_interval=100)
    commit(session, clock, 3)
    clock.now += 5
    idle.visit_due()
    assert idle.pending() == 1  # asked again later, not dropped
    blocker.set()
    store.snapshots.drain()
    assert store.checkpoint.snapshot_versions() == [2]
    clock.now += 5
    idle.visit_due()
    assert snapshots(session) == [2, 3]


def test_zero_seconds_means_never(tmp_path: Path) -> None:
    clock = Clock()
    idle = IdleSnapshots(clock, start=False)
    session = session_with_store(tmp_path, idle)
    assert session.store is not None
    session.store.opts = replace(session.store.opts, snapshot_when_idle_seconds=0.0)
    commit(session, clock, 1)
    commit(session, clock, 2)
    clock.now += 3600
    idle.visit_due()
    assert idle.pending() == 0
    assert snapshots(session) == []


def test_the_worker_thread_takes_it_on_real_time(tmp_path: Path) -> None:
    """The scheduler's own thread, on the monotonic clock: the snapshot appears once the
    store has been idle (waited for, with a hang guard only)."""
    idle = IdleSnapshots()
    session = session_with_store(tmp_path, idle)
    assert session.store is not None
    session.store.opts = replace(session.store.opts, snapshot_when_idle_seconds=0.05)
    commit(session, time.monotonic, 1)
    commit(session, time.monotonic, 2)
    done = threading.Event()

    def published() -> bool:
        with session.lock:
            return 2 in snapshots(session)

    for _ in range(600):
        if published():
            done.set()
            break
        done.wait(0.05)
    assert done.is_set(), "the idle store was never snapshotted"


def test_beyond_the_most_waiting_the_oldest_commits_are_snapshotted_after_the_short_wait(
        tmp_path: Path) -> None:
    """A worker with many stores (200 shuffle partitions): at most `most_waiting` sessions
    wait the full delay, the ones that committed last; the older ones are snapshotted once
    idle `hurried_s`, so a stop right after a batch finds few final snapshots left."""
    clock = Clock()
    idle = IdleSnapshots(clock, start=False, most_waiting=2, hurried_s=0.25)
    sessions = [session_with_store(tmp_path / name, idle) for name in "abcd"]
    for session in sessions:  # full delay 1 s each; a commit every 0.1 s
        commit(session, clock, 1)
        clock.now += 0.1
    clock.now = 0.40  # a idle 0.4 s, b 0.3 s, c 0.2 s, d 0.1 s
    idle.visit_due()
    assert [snapshots(s) for s in sessions] == [[1], [1], [], []]
    assert idle.pending() == 2
    clock.now = 0.99  # c's full delay is not over
    idle.visit_due()
    assert [snapshots(s) for s in sessions] == [[1], [1], [], []]
    clock.now = 1.31
    idle.visit_due()
    assert [snapshots(s) for s in sessions] == [[1], [1], [1], [1]]
    assert idle.pending() == 0


def test_a_commit_makes_its_session_the_newest_again(tmp_path: Path) -> None:
    """The sessions that wait the full delay are the ones whose commit is newest: a session
    hurried before commits again and waits the full delay, the one now oldest is hurried."""
    clock = Clock()
    idle = IdleSnapshots(clock, start=False, most_waiting=1, hurried_s=0.25)
    a, b = (session_with_store(tmp_path / name, idle) for name in "ab")
    commit(a, clock, 1)
    clock.now = 0.1
    commit(b, clock, 1)  # a is hurried now
    clock.now = 0.2
    commit(a, clock, 2)  # the newest again; b is the oldest
    clock.now = 0.46
    idle.visit_due()
    assert (snapshots(a), snapshots(b)) == ([], [1])
    clock.now = 1.21
    idle.visit_due()
    assert (snapshots(a), snapshots(b)) == ([2], [1])

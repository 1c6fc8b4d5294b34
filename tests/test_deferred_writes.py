"""Write frames applied behind the session (deferred_writes.py), on real RocksDB: whatever
reads the working copy sees every write sent before it, a commit does not wait for them,
a snapshot holds exactly its version, and a failed apply loses the working copy, never a
committed version. Applies are held back (a delay, or a gate) so that each test would see
the writes missing if the rule it guards were broken."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from state_store.errors import StateStoreError
from state_store.format import records
from state_store.format.records import EXISTED, KNOWN, Op
from state_store.runtime.deferred_writes import DeferredWrites
from state_store.runtime.engine import VersionedStore
from state_store.runtime.working_copy import WorkingCopy
from test_engine import contents, known_puts
from test_engine import open_store as open_engine_store

KEYS = [b"key-%04d" % i for i in range(64)]
HELD_S = 0.3  # how long each deferred frame waits before RocksDB gets it


def open_store(root: Path, local: Path) -> VersionedStore:
    """A store that defers frames of any size (the default defers only large ones)."""
    return open_engine_store(root, local, interval=100, defer_min_bytes=0)


def known_deletes(keys: list[bytes]) -> bytes:
    return b"".join(records.encode(Op.DELETE | KNOWN | EXISTED, "default", k) for k in keys)


def hold_applies(monkeypatch: pytest.MonkeyPatch,
                 before: Callable[[], None] = lambda: time.sleep(HELD_S)) -> None:
    original = WorkingCopy._apply_deferred

    def held(self: WorkingCopy, cf: str, run: Iterator[tuple[int, bytes, bytes]]) -> None:
        before()
        original(self, cf, run)

    monkeypatch.setattr(WorkingCopy, "_apply_deferred", held)


def first_version(store: VersionedStore) -> dict[bytes, bytes]:
    """Version 1 (its commit snapshots: the lineage starts there), applied and settled."""
    store.load(0)
    store.write(known_puts(KEYS, b"v1", existed=False))
    assert store.commit(1)["published"]
    return {k: b"v1" for k in KEYS}


def write_version_two_held(store: VersionedStore, monkeypatch: pytest.MonkeyPatch,
                           before: Callable[[], None] = lambda: time.sleep(HELD_S),
                           frame: bytes | None = None) -> None:
    """Version 1 committed; then version 2's `frame` (by default every key to b"v2")
    written, its apply held by `before`."""
    first_version(store)
    hold_applies(monkeypatch, before)
    store.load(1)
    store.write(known_puts(KEYS, b"v2", existed=True) if frame is None else frame)
    assert store.copy.deferred.queued_bytes > 0, "the frame is deferred"


def test_reads_see_every_deferred_write_before_them(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(tmp_path / "root", tmp_path / "a")
    write_version_two_held(store, monkeypatch)
    assert store.get("default", KEYS[0]) == b"v2"
    store.write(known_deletes(KEYS[:10]))
    assert store.get("default", KEYS[0]) is None
    store.write(known_puts(KEYS[10:20], b"v3", existed=True))
    expected = {**{k: b"v2" for k in KEYS[20:]}, **{k: b"v3" for k in KEYS[10:20]}}
    assert contents(store) == expected
    assert store.num_keys == len(expected)
    assert store.commit(2)["num_keys"] == len(expected)
    fresh = open_store(tmp_path / "root", tmp_path / "b")
    fresh.load(2)
    assert contents(fresh) == expected


def test_a_frame_applied_now_lands_on_the_deferred_ones(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A merge reads the working copy: it must find the puts deferred before it."""
    store = open_store(tmp_path / "root", tmp_path / "a")
    write_version_two_held(store, monkeypatch)
    store.write(records.encode(Op.MERGE, "default", KEYS[0], b"+m"))
    assert store.get("default", KEYS[0]) == b"v2+m"


def test_a_commit_does_not_wait_and_its_snapshot_holds_its_version(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(tmp_path / "root", tmp_path / "a")
    write_version_two_held(store, monkeypatch)
    assert store.commit(2)["published"]
    assert store.copy.deferred.queued_bytes > 0, "the commit returned before the apply"
    store.snapshot_now()
    store.snapshots.drain()
    reader = open_store(tmp_path / "root", tmp_path / "b")
    reader.load_from_snapshot(2, 2)  # the snapshot alone, no changelog replayed
    assert contents(reader) == {k: b"v2" for k in KEYS}


def commit_version_two_then_fail_its_apply(store: VersionedStore,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Version 2 published while its frame's apply is held; then the apply fails, as on a
    full disk (`settle` is where the store learns it)."""
    gate = threading.Event()

    def fail() -> None:
        gate.wait(30)
        raise OSError("no space left on device")

    write_version_two_held(store, monkeypatch, before=fail)
    assert store.commit(2)["published"]
    gate.set()


def test_a_failed_apply_loses_the_working_copy_not_the_version(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(tmp_path / "root", tmp_path / "a")
    commit_version_two_then_fail_its_apply(store, monkeypatch)
    with pytest.raises(StateStoreError, match="applying write records to the working copy "
                       "failed.*no space left on device"):
        store.get("default", KEYS[0])
    monkeypatch.undo()
    store.load(2)  # rebuilt from the root: the version was committed whole
    assert contents(store) == {k: b"v2" for k in KEYS}
    assert store.num_keys == len(KEYS)


def test_a_store_ending_after_a_failed_apply_snapshots_nothing_wrong(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The final snapshot (`end`) is of the committed version, which the failed copy no
    longer holds: none is taken, and the version still loads whole from its changelog."""
    store = open_store(tmp_path / "root", tmp_path / "a")
    commit_version_two_then_fail_its_apply(store, monkeypatch)
    store.end()
    monkeypatch.undo()
    fresh = open_store(tmp_path / "root", tmp_path / "b")
    fresh.load(2)
    assert contents(fresh) == {k: b"v2" for k in KEYS}


def test_a_small_frame_is_applied_at_once(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The shim sends a frame short of its batch size only before a read, which would
    wait for it at once: such a frame is applied on the session's thread."""
    store = open_engine_store(tmp_path / "root", tmp_path / "a")
    first_version(store)
    hold_applies(monkeypatch)
    store.load(1)
    frame = known_puts(KEYS, b"v2", existed=True)
    assert len(frame) < store.opts.defer_min_bytes
    store.write(frame)
    assert store.copy.deferred.queued_bytes == 0
    store.write(known_puts(batch_size_keys(store), b"v2", existed=False))
    assert store.copy.deferred.queued_bytes > 0, "a frame of the batch size is deferred"


def test_a_small_frame_behind_waiting_ones_is_queued_and_the_commit_does_not_wait(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A task's last frame is short of the batch size. Applied at once, it would wait for
    the frames before it (`settle`), and so would the commit behind it."""
    store = open_engine_store(tmp_path / "root", tmp_path / "a")
    gate = threading.Event()
    write_version_two_held(store, monkeypatch, before=gate.wait,
                           frame=known_puts(batch_size_keys(store), b"v2", existed=False))
    opener = threading.Timer(30, gate.set)  # only so that a broken rule fails, not hangs
    opener.start()
    try:
        held = store.copy.deferred.queued_bytes
        store.write(known_puts(KEYS, b"v2", existed=True))
        assert store.copy.deferred.queued_bytes > held, "queued behind the held frame"
        assert store.commit(2)["published"]
        assert not gate.is_set(), "neither the small frame nor the commit waited"
    finally:
        gate.set()
        opener.cancel()
    assert store.get("default", KEYS[0]) == b"v2"
    assert store.num_keys == len(KEYS) + len(batch_size_keys(store))


def batch_size_keys(store: VersionedStore) -> list[bytes]:
    """Keys whose puts make a frame of the batch size (`defer_min_bytes` and up)."""
    return [b"big-%06d" % i for i in range(store.opts.defer_min_bytes // 16)]


def test_the_queue_holds_at_most_its_limit_and_keeps_order() -> None:
    deferred = DeferredWrites("unit", limit_bytes=100)
    gate = threading.Event()
    applied: list[tuple[int, int]] = []
    deferred.submit(60, lambda: gate.wait(30))

    def produce() -> None:
        for i in range(5):
            deferred.submit(60, lambda i=i: applied.append((i, deferred.queued_bytes)))

    producer = threading.Thread(target=produce)
    producer.start()
    producer.join(0.5)
    assert producer.is_alive(), "a frame past the limit waits for the queue to drain"
    gate.set()
    producer.join(30)
    deferred.settle()
    assert [i for i, _ in applied] == list(range(5))
    assert max(queued for _, queued in applied) <= 100


def test_a_failure_is_reported_until_the_copy_is_closed() -> None:
    deferred = DeferredWrites("unit")

    def fail() -> None:
        raise OSError("disk gone")

    deferred.submit(1, fail)
    with pytest.raises(StateStoreError, match="unit: applying write records.*disk gone"):
        deferred.settle()
    with pytest.raises(StateStoreError, match="disk gone"):
        deferred.submit(1, lambda: None)
    deferred.quiesce()
    deferred.submit(1, lambda: None)
    deferred.settle()


def test_a_failure_tells_each_job_it_drops_before_a_settle_returns() -> None:
    """A job behind a failed apply never runs; one that asked to be told (`dropped`: the
    snapshot's checkpoint, which `drain` waits for) is told once, before `settle` returns,
    so a caller that settles and then waits for it never waits for what will not run."""
    deferred = DeferredWrites("unit")
    gate, ran, told = threading.Event(), [], []

    def fail() -> None:
        gate.wait(30)
        raise OSError("disk gone")

    def tell_slowly(name: str) -> Callable[[], None]:
        # Slow, so that a settle returning before the drops are told would see none.
        return lambda: (time.sleep(HELD_S), told.append(name))

    deferred.submit(1, fail)
    deferred.submit(1, lambda: ran.append("checkpoint"), tell_slowly("checkpoint"))
    deferred.submit(1, lambda: ran.append("frame"))
    deferred.submit(1, lambda: ran.append("another"), tell_slowly("another"))
    gate.set()
    with pytest.raises(StateStoreError, match="disk gone"):
        deferred.settle()
    assert (ran, told) == ([], ["checkpoint", "another"])
    assert deferred.queued_bytes == 0


def stepping_apply(deferred: DeferredWrites, progress: list[int], steps: int = 3) \
        -> Callable[[], None]:
    """An apply of `steps` RocksDB writes, as `WorkingCopy._apply_deferred` makes them: a
    `step` before each."""
    def apply() -> None:
        for i in range(steps):
            deferred.step()
            progress.append(i)
    return apply


def test_a_commit_goes_before_the_applies_queued_behind_it() -> None:
    """The task waits for its commit, not for the applies: while a request goes first
    (`first`, the commit), an apply waits at its next step, and goes on after."""
    deferred = DeferredWrites("unit")
    progress: list[int] = []
    with deferred.first():
        deferred.submit(1, stepping_apply(deferred, progress))
        time.sleep(HELD_S)  # time for a first step the rule would let through
        assert progress == [], "the apply waits while the commit goes first"
        assert deferred.busy
    deferred.settle()
    assert progress == [0, 1, 2]


@pytest.mark.parametrize("waiter", ["settle", "submit-at-the-limit"])
def test_a_pause_never_waits_on_itself(waiter: str) -> None:
    """A commit that must wait for the applies (a forced snapshot reads the working copy;
    a full queue) lifts its own pause while it waits: it would wait forever otherwise."""
    deferred = DeferredWrites("unit", limit_bytes=100)
    progress: list[int] = []
    done = threading.Event()

    def commit() -> None:
        with deferred.first():
            deferred.submit(60, stepping_apply(deferred, progress))
            if waiter == "settle":
                deferred.settle()
            else:
                deferred.submit(60, lambda: None)
                deferred.settle()
            done.set()

    committer = threading.Thread(target=commit, daemon=True)
    committer.start()
    committer.join(30)  # only so that a broken rule fails, not hangs
    assert done.is_set(), f"a commit that waits for the applies ({waiter}) finished"
    assert progress == [0, 1, 2]


def test_a_commit_that_snapshots_first_waits_for_its_applies(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the replay bound a commit snapshots the working copy before it publishes, so it
    must wait for the applies it made pause."""
    store = open_engine_store(tmp_path / "root", tmp_path / "a", interval=100,
                              defer_min_bytes=0, max_replay_versions=1)
    published: list[bool] = []

    def commit_version_two() -> None:
        write_version_two_held(store, monkeypatch)  # its apply's first step: in the commit
        published.append(bool(store.commit(2)["published"]))

    committer = threading.Thread(target=commit_version_two, daemon=True)
    committer.start()
    committer.join(30)  # only so that a broken rule fails, not hangs
    assert published == [True]
    assert store.metrics.forced_snapshots == 1
    reader = open_store(tmp_path / "root", tmp_path / "b")
    reader.load_from_snapshot(2, 2)  # the forced snapshot alone
    assert contents(reader) == {k: b"v2" for k in KEYS}


def test_the_commit_goes_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An apply let go while the commit runs (here: as it publishes) waits for it to end."""
    store = open_store(tmp_path / "root", tmp_path / "a")
    let_go, applied = threading.Event(), threading.Event()
    write_version_two_held(store, monkeypatch, before=lambda: let_go.wait(30))
    original_apply = WorkingCopy._apply_deferred  # as held: the gate, then the apply

    def apply_then_tell(self: WorkingCopy, cf: str, run: Iterator[tuple[int, bytes, bytes]]) \
            -> None:
        original_apply(self, cf, run)
        applied.set()

    monkeypatch.setattr(WorkingCopy, "_apply_deferred", apply_then_tell)
    seen_while_committing: list[bool] = []
    publish = store.checkpoint.publish_manifest

    def publish_meanwhile(*args: object, **kwargs: object) -> bool:
        let_go.set()
        seen_while_committing.append(applied.wait(HELD_S))
        return publish(*args, **kwargs)

    monkeypatch.setattr(store.checkpoint, "publish_manifest", publish_meanwhile)
    assert store.commit(2)["published"]
    assert seen_while_committing == [False], "the apply waited for the commit"
    assert store.get("default", KEYS[0]) == b"v2"
    assert applied.is_set()

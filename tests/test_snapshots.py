"""Incremental and forced-full snapshots, commits that never wait for uploads, the replay
bound, the final snapshot, concurrent attempts, and orphan collection — on real rocksdict."""

from __future__ import annotations

import gc
import os
import random
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from rocksdict import Options, Rdict

import faulty_fs
from faulty_fs import FUSE
from state_store.errors import StateStoreError
from state_store.format import records
from state_store.format.manifest import Owner
from state_store.format.records import Op
from state_store.format.storage import StorageError, open_storage
from state_store.runtime.engine import VersionedStore
from state_store.runtime.teardown import Closable, release_now
from test_engine import commit_versions, contents, known_puts, open_store, put


@pytest.fixture(autouse=True)
def _closed_gate():
    yield
    FUSE.gate.set()
    FUSE.disarm()


def bulk(n: int, seed: int, value_size: int = 100) -> bytes:
    rng = random.Random(seed)
    return b"".join(put(f"key-{rng.randrange(10**9):09d}", "x" * value_size) for _ in range(n))


def test_snapshot_after_a_small_change_uploads_only_new_ssts(tmp_path: Path) -> None:
    store = open_store(tmp_path / "root", tmp_path / "a", interval=1)
    # Two large batches: two SSTs, below RocksDB's L0 compaction trigger (4), so no
    # background compaction rewrites them between the two snapshots.
    for version in range(2):
        store.load(version)
        store.write(bulk(40_000, seed=version))
        store.commit(version + 1)
        store.snapshots.drain()
    first = store.checkpoint.read_snapshot(2)
    store.metrics = type(store.metrics)()
    store.load(2)
    store.write(put("key-small-change", "y"))
    store.commit(3)
    store.snapshots.drain()
    second = store.checkpoint.read_snapshot(3)

    ssts = lambda d: {f.name: f for f in d.files if f.local_name.endswith(".sst")}  # noqa: E731
    shared = ssts(first).keys() & ssts(second).keys()
    new = ssts(second).keys() - ssts(first).keys()
    assert len(shared) == 2 and len(new) == 1  # the flushed memtable is the only new SST
    state_bytes = sum(f.size for f in ssts(second).values())
    assert store.metrics.snapshot_files_reused == len(shared)
    assert store.metrics.snapshot_bytes_reused == sum(ssts(second)[n].size for n in shared)
    assert store.metrics.snapshot_bytes_uploaded < state_bytes / 20
    on_disk = {p.name for p in (tmp_path / "root" / "files").iterdir()}
    assert new <= on_disk and shared <= on_disk
    fresh = open_store(tmp_path / "root", tmp_path / "b")
    fresh.load(3)
    assert fresh.metrics.replayed_versions == 0
    assert fresh.get("default", b"key-small-change") == b"y"


def test_forced_full_snapshot_references_nothing_earlier(tmp_path: Path) -> None:
    store = open_store(tmp_path / "root", tmp_path / "a", interval=1)
    expected = commit_versions(store, 4)
    store.snapshots.drain()
    earlier = {f.name for s in store.checkpoint.snapshot_versions()
               for f in store.checkpoint.read_snapshot(s).files}
    store.opts = replace(store.opts, snapshot_interval=100)  # no background snapshot of 5
    store.load(4)
    store.write(put("extra", "1"))
    store.commit(5)
    store.snapshot_now(full=True)
    snapshots = [store.checkpoint.read_snapshot(v) for v in store.checkpoint.snapshot_versions()]
    full = [s for s in snapshots if s.full]
    assert len(full) == 1 and full[0].version == 5
    assert not {f.name for f in full[0].files} & earlier
    assert all(f.owner is Owner.OWNED for f in full[0].files)
    fresh = open_store(tmp_path / "root", tmp_path / "b")
    fresh.load(5)
    assert contents(fresh) == {**expected[4], b"extra": b"1"}


def test_commit_returns_while_the_snapshot_is_still_uploading(tmp_path: Path) -> None:
    store = open_store(f"{faulty_fs.PROTOCOL}://{tmp_path}/root", tmp_path / "a", interval=1)
    store.load(0)
    store.write(put("a", "1"))
    store.commit(1)
    store.snapshots.drain()
    FUSE.gate.clear()  # every durable write blocks until the gate opens
    store.load(1)
    store.write(put("b", "2"))
    done = threading.Event()
    threading.Thread(target=lambda: (store.commit(2), done.set()), daemon=True).start()
    assert not done.wait(0.5)  # the commit itself writes a changelog: blocked too
    FUSE.gate.set()
    assert done.wait(10)
    FUSE.gate.clear()  # now only the background upload of the snapshot of 2 can be waiting
    store.load(2)
    store.write(put("c", "3"))
    committed = threading.Event()
    threading.Thread(target=lambda: (store.commit(3), committed.set()), daemon=True).start()
    FUSE.gate.set()
    assert committed.wait(10)
    store.snapshots.drain()
    assert 2 in store.checkpoint.snapshot_versions() or 3 in store.checkpoint.snapshot_versions()


def test_a_commit_returns_before_its_snapshots_checkpoint_which_holds_its_version(
        tmp_path: Path) -> None:
    """A commit's snapshot is checkpointed (a memtable flush) on the copy's apply thread,
    behind the frames its version wrote and ahead of the next batch's: the commit waits for
    neither those frames nor the flush, and the snapshot holds exactly that version."""
    store = open_store(tmp_path / "root", tmp_path / "a", interval=1, defer_min_bytes=0)
    def known(value: bytes, existed: bool) -> bytes:  # a frame of puts, as the shim sends
        return known_puts([b"a", b"b"], value, existed)

    store.load(0)
    store.write(known(b"1", existed=False))
    store.commit(1)
    store.snapshots.drain()
    store.load(1)
    store.write(known(b"2", existed=True))
    applying = threading.Event()  # the frames before the commit are applied once it opens
    store.copy.deferred.submit(0, applying.wait)
    committed = threading.Event()
    threading.Thread(target=lambda: (store.commit(2), committed.set()), daemon=True).start()
    try:
        assert committed.wait(30), "the commit waited for its snapshot's checkpoint"
        assert store.snapshots.in_flight()
        store.load(2)
        store.write(known(b"3", existed=True))  # the next batch's: behind the checkpoint
    finally:
        applying.set()
    store.snapshots.drain()
    assert 2 in store.checkpoint.snapshot_versions()
    fresh = open_store(tmp_path / "root", tmp_path / "b")
    fresh.load(2)
    assert fresh.metrics.replayed_versions == 0  # read from the snapshot alone
    assert fresh.get("default", b"a") == b"2"
    store.commit(3)
    assert store.get("default", b"a") == b"3"


def queue_failing_frame(store: VersionedStore, message: str) -> threading.Event:
    """Queues a frame on the store's apply thread that fails (an OSError of `message`) once
    the event returned is set."""
    failing = threading.Event()

    def fail() -> None:
        failing.wait(30)
        raise OSError(message)

    store.copy.deferred.submit(0, fail)
    return failing


def test_a_snapshot_dropped_behind_a_failed_frame_is_over(tmp_path: Path) -> None:
    """A frame of the version that fails to apply drops the commit's checkpoint queued
    behind it: the snapshot is over at once (none published, no failure of its own: the
    frame's loses the working copy), so neither `in_flight` nor `drain` waits for it."""
    store = open_store(tmp_path / "root", tmp_path / "a", interval=1, defer_min_bytes=0)
    store.load(0)
    store.write(put("a", "1"))
    store.commit(1)
    store.snapshots.drain()
    store.load(1)
    store.write(put("a", "2"))
    failing = queue_failing_frame(store, "no space left on device")
    assert store.commit(2)["published"]
    assert store.snapshots.in_flight()
    failing.set()
    with pytest.raises(StateStoreError, match="no space left on device"):
        store.copy.deferred.settle()
    assert not store.snapshots.in_flight()
    drained = threading.Thread(target=store.snapshots.drain, daemon=True)
    drained.start()
    drained.join(30)  # only so that a broken rule fails, not hangs
    assert not drained.is_alive(), "drain waited for a snapshot that will never be taken"
    assert 2 not in store.checkpoint.snapshot_versions()
    assert store.metrics.snapshot_failures == 0


def test_a_snapshot_whose_frame_fails_before_it_is_queued_is_no_failure_of_its_own(
        tmp_path: Path) -> None:
    """A frame of the version that fails while its commit publishes, before the commit's
    checkpoint is queued: no snapshot is taken, and, as when the failure drops a checkpoint
    queued already, none is counted as failed: the frame's failure is what the store
    reports (a write refuses, a load rebuilds the copy)."""
    store = open_store(tmp_path / "root", tmp_path / "a", interval=1, defer_min_bytes=0)
    store.load(0)
    store.write(put("a", "1"))
    failing = queue_failing_frame(store, "disk gone")
    start = store.snapshots.start

    def start_once_the_frame_failed(*args: object) -> None:
        failing.set()
        deadline = time.monotonic() + 30  # only so that a broken rule fails, not hangs
        while store.copy.deferred.failure is None and time.monotonic() < deadline:
            time.sleep(0.01)
        start(*args)  # type: ignore[arg-type]

    store.snapshots.start = start_once_the_frame_failed  # type: ignore[method-assign]
    assert store.commit(1)["published"]
    assert not store.snapshots.in_flight()
    assert store.checkpoint.snapshot_versions() == []
    assert store.metrics.snapshot_failures == 0 and store.failures == []
    rebuilds = store.metrics.rebuilds
    store.load(1)  # the failed frame's copy is rebuilt from the committed version
    assert store.metrics.rebuilds == rebuilds + 1 and store.get("default", b"a") == b"1"


def test_commit_publishes_before_its_snapshot(tmp_path: Path) -> None:
    """The manifest of a version is durable while that version's snapshot is still pending."""
    store = open_store(f"{faulty_fs.PROTOCOL}://{tmp_path}/root", tmp_path / "a", interval=1)
    store.load(0)
    store.write(put("a", "1"))
    blocker = threading.Event()
    original = store.snapshots._upload

    def slow_upload(*args: object) -> None:
        blocker.wait(10)
        original(*args)  # type: ignore[arg-type]

    store.snapshots._upload = slow_upload  # type: ignore[method-assign]
    store.commit(1)
    assert store.checkpoint.versions() == [1]
    assert store.checkpoint.snapshot_versions() == []
    assert store.upload_lag() == 1
    blocker.set()
    store.snapshots.drain()
    assert store.checkpoint.snapshot_versions() == [1]
    assert store.upload_lag() == 0


def test_replay_bound_forces_a_snapshot(tmp_path: Path) -> None:
    store = open_store(tmp_path / "root", tmp_path / "a", interval=1000, max_replay_versions=3)
    commit_versions(store, 10)
    for version in range(1, 11):
        assert len(store.checkpoint.plan_load(version).changelogs) <= 3
    assert store.checkpoint.snapshot_versions()


def test_replay_bound_in_bytes(tmp_path: Path) -> None:
    store = open_store(tmp_path / "root", tmp_path / "a", interval=1000,
                       max_replay_bytes=50_000)
    for version in range(6):
        store.load(version)
        store.write(bulk(200, seed=version))  # ~25 kB of changelog per version
        store.commit(version + 1)
    for version in range(1, 7):
        plan = store.checkpoint.plan_load(version)
        assert sum(c.file.size for c in plan.changelogs) <= 50_000


def test_finish_leaves_the_last_version_loadable_without_replay(tmp_path: Path) -> None:
    store = open_store(tmp_path / "root", tmp_path / "a", interval=100)
    expected = commit_versions(store, 5)
    store.finish()
    store.close()
    fresh = open_store(tmp_path / "root", tmp_path / "b")
    fresh.load(5)
    assert fresh.metrics.replayed_versions == 0
    assert contents(fresh) == expected[5]


@pytest.mark.parametrize("ending", ["finish", "end"])
def test_neither_finish_nor_end_snapshots_uncommitted_writes(tmp_path: Path,
                                                             ending: str) -> None:
    store = open_store(tmp_path / "root", tmp_path / "a", interval=100)
    commit_versions(store, 2)
    store.load(2)
    store.write(put("uncommitted", "x"))
    getattr(store, ending)()
    assert store.checkpoint.snapshot_versions() == []
    assert (tmp_path / "a").exists() == (ending == "finish")  # `end` closes: the copy goes


def test_end_snapshots_the_open_copy_and_leaves_its_close_to_the_release(
        tmp_path: Path) -> None:
    """A store that is going (`end`: finish, then close) takes its final snapshot, every
    family's rows, from its working copy while it is open, and hands the copy over open:
    RocksDB's close waits for the compactions running on it, at nice 19 (slow on busy
    cores), so the close is the release's, behind the answer."""
    store = _with_unflushed_rows(tmp_path, "extra")  # version 2 not snapshotted, in memtables
    handed: list[tuple[bool, list[int]]] = []

    def release(copy: Closable, directory: Path) -> None:
        handed.append((store.copy.db is not None, store.checkpoint.snapshot_versions()))
        release_now(copy, directory)

    store.release = release
    store.load(2)
    store.write(put("after", "y") + put("k0000007", "z", cf="extra"))
    assert store.commit(3)["published"]
    store.end()
    assert [(open_, versions[-1]) for open_, versions in handed] == [(True, 3)]  # open when
    # handed over, its final snapshot published
    assert store.failures == [] and not (tmp_path / "a").exists()
    fresh = open_store(tmp_path / "root", tmp_path / "b")
    fresh.load(3)
    assert fresh.metrics.replayed_versions == 0
    extra = contents(fresh, "extra")
    assert len(extra) == 100_000 and extra[b"k0000007"] == b"z"
    assert extra[b"k0099999"] == b"x" * 100 and contents(fresh) == {b"after": b"y"}


def test_a_final_flush_starts_ahead_of_the_end_for_committed_state_only(
        tmp_path: Path) -> None:
    """`start_final_flush` hands a store's memtables to RocksDB's flush thread and returns,
    so that a worker ending several stores flushes one while it uploads another; a store
    whose working copy holds uncommitted writes owes no final snapshot and is left alone."""
    committed = _with_unflushed_rows(tmp_path, "default")
    dirty = open_store(tmp_path / "root-dirty", tmp_path / "dirty", interval=1000)
    commit_versions(dirty, 1)
    dirty.load(1)
    dirty.write(put("uncommitted", "x"))
    def active() -> list[int]:
        return [s.copy.rocksdb().property_int_value("rocksdb.num-entries-active-mem-table")
                for s in (committed, dirty)]

    before = active()
    assert before[0] == 100_000 and before[1] > 0
    for store in (committed, dirty):
        store.start_final_flush()
    assert active() == [0, before[1]]
    assert 2 not in committed.checkpoint.snapshot_versions()  # `end` takes it
    committed.end()
    assert committed.checkpoint.snapshot_versions()[-1] == 2 and committed.failures == []
    dirty.close()


def test_end_records_a_final_snapshot_it_could_not_take_and_closes(tmp_path: Path) -> None:
    """No room to stage the snapshot (a file where its directory goes): the failure is
    recorded as a failed upload is, the store still closes, and its versions still load."""
    store = open_store(tmp_path / "root", tmp_path / "a", interval=100)
    expected = commit_versions(store, 3)
    store.snapshots.scratch.parent.mkdir(parents=True, exist_ok=True)
    store.snapshots.scratch.write_text("in the way")
    store.end()
    assert len(store.failures) == 1 and "final snapshot of version 3" in store.failures[0]
    assert store.checkpoint.snapshot_versions() == []
    assert not (tmp_path / "a").exists()
    fresh = open_store(tmp_path / "root", tmp_path / "b")
    fresh.load(3)
    assert contents(fresh) == expected[3] and fresh.metrics.replayed_versions == 3


def test_concurrent_attempts_at_one_version(tmp_path: Path) -> None:
    """Zombie and retry commit version 3 at the same instant: one wins, the other cleans up."""
    root = tmp_path / "root"
    commit_versions(open_store(root, tmp_path / "seed"), 2)
    attempts = [open_store(root, tmp_path / f"attempt-{i}", interval=100) for i in range(2)]
    for i, store in enumerate(attempts):
        store.load(2)
        store.write(put("winner", f"attempt-{i}"))
    start = threading.Barrier(2)
    results: list[bool] = [False, False]

    def commit(i: int) -> None:
        start.wait(60)
        results[i] = bool(attempts[i].commit(3)["published"])

    threads = [threading.Thread(target=commit, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        assert not t.is_alive(), "a commit never returned"
    assert sorted(results) == [False, True]
    winner = results.index(True)
    checkpoint = attempts[winner].checkpoint
    referenced = {f.file.name for v in checkpoint.versions()
                  for f in checkpoint.read_manifest(v).changelogs}
    assert {p.name for p in (root / "files").iterdir()} == referenced  # the loser's file is gone
    reader = open_store(root, tmp_path / "reader")
    reader.load(3)
    assert reader.get("default", b"winner") == f"attempt-{winner}".encode()


def test_orphans_of_crashed_attempts_are_collected_after_the_margin(tmp_path: Path) -> None:
    root = tmp_path / "root"
    store = open_store(root, tmp_path / "a", interval=100)
    commit_versions(store, 3)
    orphan = root / "files" / "0123456789abcdef0123456789abcdef.changelog"
    orphan.write_bytes(b"a crashed attempt's changelog")
    interrupted = root / "manifests" / "00000000000000000004.json.deadbeef.tmp"
    interrupted.write_bytes(b"{")
    store.opts = replace(store.opts, orphan_margin_seconds=3600)
    store.collect_garbage(10)
    assert orphan.exists() and interrupted.exists()  # too young: might be a commit in flight
    old = time.time() - 7200
    for path in (orphan, interrupted):
        os.utime(path, (old, old))
    store.collect_garbage(10)
    assert not orphan.exists() and not interrupted.exists()
    fresh = open_store(root, tmp_path / "b")
    fresh.load(3)


def test_transient_storage_errors_are_retried(tmp_path: Path) -> None:
    storage = open_storage(f"{faulty_fs.PROTOCOL}://{tmp_path}/root")
    FUSE.transient = 2  # two failures, then the backoff's third attempt goes through
    written = storage.write_new("files/a", b"payload")
    assert storage.read_verified("files/a", written, "test") == b"payload"
    FUSE.transient = 2
    assert storage.publish("manifests/1.json", b"record")
    FUSE.transient = 10  # more than the retries: the error names what kept failing
    with pytest.raises(StorageError, match=r"writing .*files/b failed after 5 attempts"):
        storage.write_new("files/b", b"x")




def _seen_by_another_thread(action: Callable[[], None], look: Callable[[], int]) -> list[int]:
    """What `look` returned each time another Python thread (another session of the worker)
    got a turn while `action` ran. The switch interval is lifted and collections are off
    meanwhile, so it gets one only when `action` gives the GIL up itself, never because a
    time slice ran out or a finalizer blocked."""
    seen: list[int] = []
    running, done = threading.Event(), threading.Event()

    def other_session() -> None:
        while not done.is_set():
            if running.is_set():
                seen.append(look())
            time.sleep(0)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(3600)
    gc.disable()
    thread = threading.Thread(target=other_session)
    try:
        thread.start()
        running.set()
        action()
        running.clear()
        return seen
    finally:
        gc.enable()
        done.set()
        thread.join()
        sys.setswitchinterval(interval)

def _with_unflushed_rows(tmp_path: Path, cf: str) -> VersionedStore:
    """A store whose last commit left 100k rows (10 MB) of `cf` in its memtables (nothing else)."""
    store = open_store(tmp_path / "root", tmp_path / "a", interval=1000)
    store.load(0)
    store.write(records.encode(Op.CREATE_CF, "extra"))
    assert store.commit(1)["published"]  # the first version's snapshot empties the memtables
    store.load(1)
    store.write(b"".join(put(f"k{i:07d}", "x" * 100, cf=cf) for i in range(100_000)))
    assert store.commit(2)["published"]
    return store


def test_a_checkpoint_flushes_every_family_with_the_gil_released(tmp_path: Path) -> None:
    """RocksDB's checkpoint flushes the memtables, holding the GIL throughout: the worker's
    other sessions would wait. Every column family (here only the second has rows) is
    flushed before, by RocksDB's threads, while this thread waits without the GIL: another
    thread runs while the flush is under way (10 MB: not done in a moment)."""
    copy = _with_unflushed_rows(tmp_path, "extra").copy
    extra = copy.cfs["extra"]
    seen = _seen_by_another_thread(
        lambda: copy.checkpoint(tmp_path / "checkpoint"),
        lambda: extra.property_int_value("rocksdb.num-immutable-mem-table"))
    assert any(seen), "no other thread ran while the second family's memtable was flushed"
    families = {"extra": Options(raw_mode=True)}
    taken = Rdict(str(tmp_path / "checkpoint"), Options(raw_mode=True), column_families=families)
    assert taken.get_column_family("extra")[b"k0099999"] == b"x" * 100
    taken.close()


def test_a_working_copy_is_closed_with_its_memtables_flushed(tmp_path: Path) -> None:
    """RocksDB's close flushes the memtables (its WAL is off), the GIL held; so they are
    flushed before, as for a checkpoint. What RocksDB's close is left, it is given here."""
    copy = _with_unflushed_rows(tmp_path, "default").copy
    families = list(copy.cfs.values())
    unflushed_at_close: list[int] = []

    class RocksDbAtClose:
        def __init__(self, db: Rdict) -> None:
            self.db = db

        def __getattr__(self, name: str) -> object:
            return getattr(self.db, name)

        def close(self) -> None:
            unflushed_at_close.extend(
                f.property_int_value("rocksdb.num-entries-active-mem-table")
                + f.property_int_value("rocksdb.num-immutable-mem-table") for f in families)
            families.clear()
            self.db.close()

    copy.db = RocksDbAtClose(copy.rocksdb())  # type: ignore[assignment]
    copy.close()
    assert unflushed_at_close == [0, 0]

"""The many-writer defects of issue 9, each as the smallest scenario that showed it.

The model test (test_many_writers_model.py) searches for such scenarios at random; these
pin down the ones found, so each stays fixed whatever the random search draws.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import faulty_fs
from faulty_fs import FUSE, SimulatedCrash
from state_store import options as options_mod
from state_store.errors import OptionError, StateStoreError
from state_store.format import gc, lineage
from state_store.format.manifest import Changelog, Manifest
from state_store.format.storage import open_storage
from state_store.format.store_root import StoreRoot, query_dir
from state_store.options import StoreOptions
from state_store.runtime.engine import VersionedStore
from state_store.tools.inspect import describe_store
from test_engine import contents, put


def query_store(base: Path | str, query_id: str, local: Path,
                **options: object) -> VersionedStore:
    """A store of query `query_id` under the checkpoint-path root `base`, as the worker
    opens it."""
    storage = open_storage(str(base))
    checkpoint = StoreRoot(storage.child(query_dir(query_id)), "s", storage)
    opts = StoreOptions(**options)  # type: ignore[arg-type]
    return VersionedStore("s", checkpoint, local, opts, ThreadPoolExecutor(1))


def run_batch(store: VersionedStore, version: int, key: str, value: str) -> None:
    store.load(version)
    store.write(put(key, value))
    assert store.commit(version + 1)["published"]


def test_a_reset_query_starts_empty_and_never_adopts_the_old_state(tmp_path: Path) -> None:
    old = query_store(tmp_path / "base", "old", tmp_path / "a")
    for v in range(3):
        run_batch(old, v, f"k{v}", "old")
    old.close()
    new = query_store(tmp_path / "base", "new", tmp_path / "b")
    new.load(0)
    assert contents(new) == {}
    new.write(put("k9", "new"))
    assert new.commit(1)["published"]  # not lost to the old query's version 1
    fresh = query_store(tmp_path / "base", "new", tmp_path / "c")
    fresh.load(1)
    assert contents(fresh) == {b"k9": b"new"}
    # the old query's root is reported, then collected once idle past the margin
    assert gc.stale_queries(new.checkpoint, time.time() + 1) == [query_dir("old")]
    report = describe_store(new.checkpoint, retain=10, orphan_margin_s=0)
    assert report.gc_would_delete["stale_queries"] == [query_dir("old")]
    assert gc.stale_queries(new.checkpoint, time.time() - 3600) == []  # active recently: kept
    new.opts = StoreOptions(orphan_margin_seconds=0)
    new.collect_garbage(10)
    assert not (tmp_path / "base" / query_dir("old")).exists()
    assert (tmp_path / "base" / query_dir("new") / "manifests").exists()


def test_catch_up_adopts_the_newer_base_so_chains_stay_contiguous(tmp_path: Path) -> None:
    """A moves to C and back: C's final snapshot is the base of C's commit; A, still at
    the version C started from, catches up and must build on C's base, not its own."""
    a = query_store(tmp_path / "base", "q", tmp_path / "a", snapshot_interval=3)
    for v in range(4):
        run_batch(a, v, "k", f"a{v}")
    a.snapshots.drain()
    assert a.lineage.base_version == 3
    c = query_store(tmp_path / "base", "q", tmp_path / "c", snapshot_interval=3)
    c.load(4)
    c.finish()  # a reader, or an unloaded provider: snapshot 4
    run_batch(c, 4, "c", "1")  # version 5 on base 4
    run_batch(a, 5, "a", "1")  # A catches up from 4 to 5, commits 6
    manifest = a.checkpoint.read_manifest(6)
    assert lineage.chain_gap(manifest) is None
    assert manifest.snapshot_version == 4
    a.collect_garbage(1)  # keeps only what version 6 needs
    fresh = query_store(tmp_path / "base", "q", tmp_path / "f")
    fresh.load(6)
    assert contents(fresh) == {b"k": b"a3", b"c": b"1", b"a": b"1"}


def test_a_caught_up_copy_never_reuses_another_instances_files(tmp_path: Path) -> None:
    """Found by the model: C catches up to a version built on A's snapshot, whose SSTs
    have the same local names and sizes as C's own but other bytes (another RocksDB
    instance). C's next snapshot must upload its own files, not reference A's."""
    a = query_store(tmp_path / "base", "q", tmp_path / "a", snapshot_interval=1,
                    max_replay_versions=1)
    c = query_store(tmp_path / "base", "q", tmp_path / "c", snapshot_interval=1,
                    max_replay_versions=1)
    c.load(0)  # C's working copy: an empty RocksDB of its own
    run_batch(a, 0, "k", "a")  # A commits 1 and snapshots it
    c.load(1)  # catches up by replaying A's changelog into C's own instance
    c.finish()
    run_batch(a, 1, "k2", "a")  # version 2 on A's snapshot 1
    run_batch(c, 2, "k3", "c")  # C catches up to 2, commits 3 and snapshots it
    c.snapshots.drain()
    fresh = query_store(tmp_path / "base", "q", tmp_path / "f")
    fresh.load(3)
    assert contents(fresh) == {b"k": b"a", b"k2": b"a", b"k3": b"c"}


def test_a_manifest_with_a_chain_gap_is_never_published(tmp_path: Path) -> None:
    store = query_store(tmp_path / "base", "q", tmp_path / "a")
    run_batch(store, 0, "k", "v")
    changelog = store.checkpoint.read_manifest(1).changelogs[0]
    broken = Manifest(3, None, [changelog, Changelog(3, changelog.file)], 1)
    with pytest.raises(StateStoreError, match=r"version 3 on base None needs changelogs "
                                              r"\[1, 2, 3\], has \[1, 3\]"):
        store.checkpoint.publish_manifest(broken)
    assert store.checkpoint.versions() == [1]


def test_a_losing_attempt_withdraws_its_forced_snapshot(tmp_path: Path) -> None:
    """B reaches its replay bound and publishes a forced snapshot of version 2 before it
    loses version 2 to A: it withdraws the snapshot and every file of its own."""
    a = query_store(tmp_path / "base", "q", tmp_path / "a", snapshot_interval=100)
    b = query_store(tmp_path / "base", "q", tmp_path / "b", snapshot_interval=100,
                    max_replay_versions=1)
    run_batch(a, 0, "k", "v1")
    a.load(1)
    b.load(1)
    a.write(put("k", "from-a"))
    b.write(put("k", "from-b"))
    before = set((tmp_path / "base" / query_dir("q") / "files").iterdir())
    assert a.commit(2)["published"]
    after_a = set((tmp_path / "base" / query_dir("q") / "files").iterdir())
    lost = b.commit(2)  # and answers the winner's commit id, which Spark then records
    assert lost["published"] is False
    assert lost["checkpoint_id"] == a.checkpoint.read_manifest(2).commit_id
    assert b.metrics.forced_snapshots == 1
    assert a.checkpoint.snapshot_versions() == []
    assert set((tmp_path / "base" / query_dir("q") / "files").iterdir()) == after_a != before


def test_a_losing_attempts_forced_snapshot_is_never_used(tmp_path: Path) -> None:
    """B dies while withdrawing its forced snapshot of version 2 (it lost version 2 to A):
    nobody may load A's version 2 from B's snapshot, and GC drops it."""
    base = f"{faulty_fs.PROTOCOL}://{tmp_path}/base"
    a = query_store(base, "q", tmp_path / "a", snapshot_interval=100)
    b = query_store(base, "q", tmp_path / "b", snapshot_interval=100, max_replay_versions=1)
    run_batch(a, 0, "k", "v1")
    a.load(1)
    b.load(1)
    a.write(put("k", "from-a"))
    b.write(put("k", "from-b"))
    assert a.commit(2)["published"]
    FUSE.arm_when(lambda what: what.startswith("delete") and "/snapshots/" in what)
    with pytest.raises(SimulatedCrash):
        b.commit(2)
    FUSE.disarm()
    assert b.metrics.forced_snapshots == 1
    assert 2 in a.checkpoint.snapshot_versions()  # B's snapshot was published...
    fresh = query_store(base, "q", tmp_path / "f")
    fresh.load(2)
    assert contents(fresh) == {b"k": b"from-a"}  # ...and is not A's version 2
    assert fresh.checkpoint.plan_load(2).snapshot is None
    a.opts = StoreOptions(orphan_margin_seconds=0)
    a.collect_garbage(5)  # and GC drops it: no retained version can start from it
    assert 2 not in a.checkpoint.snapshot_versions()


def test_a_linked_upload_is_aged_from_when_it_entered_storage(tmp_path: Path) -> None:
    storage = open_storage(str(tmp_path / "root"))
    old = tmp_path / "local.sst"
    old.write_bytes(b"sst bytes")
    os.utime(old, (0, 0))  # RocksDB wrote it long ago
    storage.upload_new(old, "files/x.sst")
    storage.duplicate("files/x.sst", "files/y.sst")
    entered = storage.list_entered("files")
    assert min(entered.values()) > time.time() - 600  # not 1970: both just entered


def test_orphan_margin_has_a_safe_minimum() -> None:
    key = options_mod.PREFIX + "orphanMarginSeconds"
    with pytest.raises(OptionError, match=r"orphanMarginSeconds.*>= 600"):
        options_mod.store_options({key: "5"})
    assert options_mod.store_options({key: "600"}).orphan_margin_seconds == 600


def test_a_catch_up_that_fails_midway_leaves_no_version_loaded(tmp_path: Path) -> None:
    a = query_store(tmp_path / "base", "q", tmp_path / "a", snapshot_interval=100)
    run_batch(a, 0, "k", "1")
    b = query_store(tmp_path / "base", "q", tmp_path / "b", snapshot_interval=100)
    run_batch(b, 1, "k", "2")
    run_batch(b, 2, "k", "3")
    changelog = b.checkpoint.read_manifest(3).changelogs[-1]
    (tmp_path / "base" / query_dir("q") / "files" / changelog.file.name).write_bytes(b"bad")
    with pytest.raises(StateStoreError, match="changelog of version 3"):
        a.load(3)  # version 2 was replayed, version 3 failed
    assert a.loaded_version is None  # never "version 1" holding version 2's data
    with pytest.raises(StateStoreError, match="no version loaded"):
        a.write(put("x", "y"))


def test_counting_off_reports_no_count_and_counting_on_again_recounts(tmp_path: Path) -> None:
    off = query_store(tmp_path / "base", "q", tmp_path / "a", track_num_keys=False)
    run_batch(off, 0, "k1", "v")
    run_batch(off, 1, "k2", "v")
    assert off.checkpoint.read_manifest(2).num_keys == -1  # unknown, not zero
    on = query_store(tmp_path / "base", "q", tmp_path / "b")
    on.load(2)
    assert on.num_keys == 2
    run_batch(on, 2, "k3", "v")
    assert on.checkpoint.read_manifest(3).num_keys == 3


def test_a_zombie_catching_up_never_builds_on_a_version_a_later_run_replaced(
        tmp_path: Path) -> None:
    """A store of run 1, clean at version 2, loads version 3 after run 2 (a rewind) replaced
    version 2 and published 3 on it: it must rebuild, not replay 3's changes onto its own
    version 2 (its working copy must equal a committed version). Its commit is then fenced
    (test_many_writers_model.py), so this is the only place the check shows."""
    def store(local: str, epoch: int) -> VersionedStore:
        storage = open_storage(str(tmp_path / "base"))
        checkpoint = StoreRoot(storage.child(query_dir("q")), "s", storage)
        return VersionedStore("s", checkpoint, tmp_path / local, StoreOptions(),
                              ThreadPoolExecutor(1), epoch=epoch)

    zombie = store("a", epoch=1)
    run_batch(zombie, 0, "k", "run-1")
    run_batch(zombie, 1, "old", "run-1")  # version 2 of run 1
    later = store("b", epoch=2)
    later.load(1)  # the rewind: run 2 redoes the batch of version 2
    later.write(put("new", "run-2"))
    assert later.commit(2)["published"]
    run_batch(later, 2, "k", "run-2")  # version 3 of run 2, on run 2's version 2
    assert zombie.load(3) is False  # rebuilt, not caught up
    assert contents(zombie) == {b"k": b"run-2", b"new": b"run-2"}

"""Working copies released behind the request that closed their store (runtime/teardown.py):
the store's end answers once its final snapshot is durable, and its RocksDB is closed and
its directory removed after a quiet spell, or at the worker's exit. Real engines on real
rocksdict; the teardown's clock is the test's."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from state_store.format.storage import open_storage
from state_store.format.store_root import StoreRoot
from state_store.options import StoreOptions
from state_store.runtime.engine import VersionedStore
from state_store.runtime.teardown import Teardown
from test_engine import contents, put
from test_idle_snapshots import Clock


def store_on(root: Path, local: Path, teardown: Teardown) -> VersionedStore:
    """A store whose snapshots come only from its end (interval 1000)."""
    checkpoint = StoreRoot(open_storage(str(root)), "test-store")
    return VersionedStore("test-store", checkpoint, local, StoreOptions(snapshot_interval=1000),
                          ThreadPoolExecutor(1), release=teardown.release)


def commit(store: VersionedStore, version: int) -> None:
    store.load(version - 1)
    store.write(put(f"k{version}", f"v{version}"))
    store.commit(version)


def test_an_ended_store_is_durable_at_once_and_its_copy_released_after_a_quiet_spell(
        tmp_path: Path) -> None:
    clock = Clock()
    teardown = Teardown(quiet_s=0.3, max_hold_s=2.0, clock=clock, start=False)
    store = store_on(tmp_path / "root", tmp_path / "local", teardown)
    for version in (1, 2):
        commit(store, version)
    store.end()
    assert store.checkpoint.snapshot_versions() == [2]  # the final snapshot, before release
    assert (tmp_path / "local").is_dir() and teardown.waiting() == 1
    clock.now += 0.29
    teardown.release_due()
    assert (tmp_path / "local").is_dir()
    clock.now += 0.02
    teardown.release_due()
    assert not (tmp_path / "local").exists() and teardown.waiting() == 0


def test_a_closed_copy_stays_open_until_released(tmp_path: Path) -> None:
    """A plain close (no final snapshot due) hands over the open database itself."""
    clock = Clock()
    teardown = Teardown(clock=clock, start=False)
    store = store_on(tmp_path / "root", tmp_path / "local", teardown)
    commit(store, 1)
    store.close()
    assert store.copy.db is not None
    teardown.release_all()
    assert store.copy.db is None and not (tmp_path / "local").exists()


def test_a_steady_stream_of_ends_is_released_within_the_longest_hold(tmp_path: Path) -> None:
    """Ends closer together than the quiet spell still release the first by `max_hold_s`."""
    clock = Clock()
    teardown = Teardown(quiet_s=0.3, max_hold_s=2.0, clock=clock, start=False)
    locals_ = [tmp_path / f"local-{i}" for i in range(10)]
    for local in locals_:  # one end every 0.25 s, from 0 to 2.25
        store = store_on(tmp_path / f"root-{local.name}", local, teardown)
        commit(store, 1)
        store.close()
        teardown.release_due()
        clock.now += 0.25
    # At 2 s the first had been held for 2 s: it was released with the eight after it.
    assert [local.exists() for local in locals_] == [False] * 9 + [True]
    assert teardown.waiting() == 1


def test_a_store_reopened_while_its_old_copy_waits_keeps_its_own(tmp_path: Path) -> None:
    """The next task of the same store opens a copy of its own (a new directory), loads the
    ended store's final version, and commits on; releasing the old copy leaves it alone."""
    clock = Clock()
    teardown = Teardown(clock=clock, start=False)
    first = store_on(tmp_path / "root", tmp_path / "local-a", teardown)
    for version in (1, 2):
        commit(first, version)
    first.end()
    second = store_on(tmp_path / "root", tmp_path / "local-b", teardown)
    commit(second, 3)
    teardown.release_all()
    assert not (tmp_path / "local-a").exists()
    second.load(3)
    assert contents(second) == {b"k1": b"v1", b"k2": b"v2", b"k3": b"v3"}
    assert second.metrics.replayed_versions == 0  # the first's final snapshot, not a replay


class _FailingClose:
    def close(self) -> None:
        raise OSError("the disk went away")


def test_a_copy_whose_close_fails_is_reported_and_the_rest_released(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    teardown = Teardown(start=False)
    broken = tmp_path / "broken"
    broken.mkdir()
    teardown.release(_FailingClose(), broken)
    store = store_on(tmp_path / "root", tmp_path / "local", teardown)
    commit(store, 1)
    store.close()
    teardown.release_all()
    assert not broken.exists() and not (tmp_path / "local").exists()
    assert store.copy.db is None
    assert f"{broken}: OSError: the disk went away" in capsys.readouterr().err

"""S3 specifics against a real S3 API on loopback (moto's server mode): a damaged object is
refused by name, and an incremental snapshot copies nothing it has. (What every object
store does alike: test_object_stores.py.)"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pyrocks_support import S3Endpoint
from state_store.errors import CorruptFileError
from state_store.format.storage import open_storage
from state_store.format.store_root import StoreRoot
from state_store.options import StoreOptions
from state_store.runtime.engine import VersionedStore
from test_engine import commit_versions
from test_snapshots import bulk


def s3_store(s3: S3Endpoint, root: str, local: Path, **options: object) -> VersionedStore:
    storage = open_storage(root, s3.options)
    opts = StoreOptions(**{"snapshot_interval": 2, **options})  # type: ignore[arg-type]
    return VersionedStore("s3-store", StoreRoot(storage, "s3-store"), local, opts,
                          ThreadPoolExecutor(1))


def test_corrupt_object_is_refused(s3: S3Endpoint, tmp_path: Path) -> None:
    root = s3.url(f"corrupt-{uuid.uuid4().hex}")
    store = s3_store(s3, root, tmp_path / "a", snapshot_interval=100)
    commit_versions(store, 3)
    changelog = store.checkpoint.read_manifest(3).changelogs[-1].file
    store.checkpoint.storage.fs.pipe_file(f"{root[5:]}/files/{changelog.name}", b"garbage")
    with pytest.raises(CorruptFileError, match=rf"version 3 .*{changelog.name}"):
        s3_store(s3, root, tmp_path / "b").load(3)


def test_incremental_snapshot_on_s3_copies_nothing_it_has(s3: S3Endpoint, tmp_path: Path) -> None:
    root = s3.url(f"incremental-{uuid.uuid4().hex}")
    store = s3_store(s3, root, tmp_path / "a", snapshot_interval=1)
    store.load(0)
    store.write(bulk(30_000, seed=1))
    store.commit(1)
    store.snapshots.drain()
    store.metrics = type(store.metrics)()
    store.load(1)
    store.write(bulk(10, seed=2))
    store.commit(2)
    store.snapshots.drain()
    first, second = (store.checkpoint.read_snapshot(v) for v in (1, 2))
    shared = {f.name for f in first.files} & {f.name for f in second.files}
    assert shared and store.metrics.snapshot_files_reused == len(shared)
    assert store.metrics.snapshot_bytes_uploaded < store.metrics.snapshot_bytes_reused / 10

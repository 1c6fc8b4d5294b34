"""Snapshots of a store's working copy: taken at commit, uploaded off the commit path.

A snapshot starts as a local RocksDB checkpoint taken right after a commit, while the
working copy equals the committed version (a flush plus hard links: cost proportional to
the memtable, not to the state). Its upload then runs on the worker's upload thread, so
the commit returns at once; the version becomes loadable from the snapshot when its
descriptor is published. Invariant: `reusable` only ever holds files of the newest
published snapshot, which every retained version can reach, so garbage collection cannot
have deleted a file an incremental snapshot references.
"""

from __future__ import annotations

import shutil
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Executor, Future
from pathlib import Path

from rocksdict import Checkpoint as RocksCheckpoint
from rocksdict import Rdict

from .checkpoint import Checkpoint, UploadStats
from .manifest import FileRef, SnapshotDescriptor


class Snapshotter:
    def __init__(self, checkpoint: Checkpoint, scratch: Path, uploads: Executor,
                 on_published: Callable[[UploadStats], None],
                 on_failed: Callable[[str], None]) -> None:
        self.checkpoint = checkpoint
        self.scratch = scratch
        self.uploads = uploads
        self.on_published = on_published
        self.on_failed = on_failed
        self._lock = threading.Lock()
        self._latest: int | None = None  # newest published snapshot version known here
        self._reusable: dict[str, FileRef] = {}
        self._inflight: Future[None] | None = None

    @property
    def latest(self) -> int | None:
        with self._lock:
            return self._latest

    def adopt(self, descriptor: SnapshotDescriptor | None) -> None:
        """The working copy was restored from `descriptor`: its SSTs are durable already."""
        with self._lock:
            if descriptor is None:
                self._latest, self._reusable = None, {}
            else:
                self._latest = descriptor.version
                self._reusable = {f.local_name: f for f in descriptor.files}

    def in_flight(self) -> bool:
        return self._inflight is not None and not self._inflight.done()

    def start(self, db: Rdict, version: int, num_keys: int) -> None:
        """Checkpoints the working copy now; uploads and publishes it in the background."""
        local = self._local_checkpoint(db)
        self._inflight = self.uploads.submit(self._upload, local, version, num_keys, False)

    def take_now(self, db: Rdict, version: int, num_keys: int, full: bool = False) -> None:
        """A snapshot on the caller's thread (a replay bound reached, or the final one)."""
        self.drain()
        self._upload(self._local_checkpoint(db), version, num_keys, full)

    def drain(self) -> None:
        """Waits for the upload in flight, if any. Its failure was recorded, not raised."""
        inflight, self._inflight = self._inflight, None
        if inflight is not None:
            inflight.result()

    def _local_checkpoint(self, db: Rdict) -> Path:
        target = self.scratch / f"checkpoint-{uuid.uuid4().hex}"
        self.scratch.mkdir(parents=True, exist_ok=True)
        RocksCheckpoint(db).create_checkpoint(str(target))
        return target

    def _upload(self, local: Path, version: int, num_keys: int, full: bool) -> None:
        try:
            with self._lock:
                reusable = dict(self._reusable)
            descriptor, stats = self.checkpoint.upload_snapshot(
                version, local, reusable, num_keys, full)
            if self.checkpoint.publish_snapshot(descriptor):
                self._record(descriptor, stats)
            else:  # another attempt published this version's snapshot first
                reused = {f.name for f in reusable.values()}
                self.checkpoint.discard_unpublished(
                    [f for f in descriptor.files if f.name not in reused])
        except Exception as e:  # a failed upload leaves orphans; the commit path is unaffected
            self.on_failed(f"snapshot of version {version}: {type(e).__name__}: {e}")
        finally:
            shutil.rmtree(local, ignore_errors=True)

    def _record(self, descriptor: SnapshotDescriptor, stats: UploadStats) -> None:
        with self._lock:
            if self._latest is None or descriptor.version >= self._latest:
                self._latest = descriptor.version
                self._reusable = {f.local_name: f for f in descriptor.files}
        self.on_published(stats)

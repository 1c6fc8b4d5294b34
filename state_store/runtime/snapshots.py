"""Snapshots of a store's working copy, and the base every new version builds on.

This module owns "which snapshot is the base of the next version": `Snapshotter.base` is
the newest published snapshot the working copy's lineage may build on. It changes only
when the working copy is rebuilt from a snapshot (`adopt`), when it catches up to a
manifest of another writer (`adopt` of that manifest's base, if newer), and when one of
its own snapshots is published. A snapshot's lineage (manifest.SnapshotDescriptor) is that
of the committed version it captures, so a snapshot is only ever used with the manifest
of the attempt that made it.

A snapshot starts as a local RocksDB checkpoint taken right after a commit, while the
working copy equals the committed version (a flush plus hard links: cost proportional to
the memtable, not to the state). Its upload then runs on the worker's upload thread, so
the commit returns at once; the version becomes loadable from the snapshot when its
descriptor is published.

Invariant: the base's `files` (what an incremental upload may reference instead of
uploading) are files of the base that are byte for byte files of this working copy: the
snapshot it was rebuilt from, or one it uploaded itself. A base adopted from another
writer's manifest (a catch-up) was made by another RocksDB instance, whose files may carry
the same names and sizes with other bytes: it brings no reusable files, so the next
snapshot uploads (on a local disk: links) every file. And the base is needed by every
version built on it, so garbage collection cannot delete a file an upload references.
"""

from __future__ import annotations

import shutil
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from pathlib import Path

from rocksdict import Checkpoint as RocksCheckpoint
from rocksdict import Rdict

from ..format.manifest import FileRef, SnapshotDescriptor
from ..format.store_root import StoreRoot, UploadStats


@dataclass(frozen=True)
class Base:
    """A published snapshot a new version may name as its base."""

    version: int
    lineage: str
    files: dict[str, FileRef]  # by local name: reusable by an incremental upload


@dataclass(frozen=True)
class Taken:
    """A snapshot this store published, and which of its files an earlier snapshot has too
    (so withdrawing it must keep them)."""

    descriptor: SnapshotDescriptor
    reused: frozenset[str]


class Snapshotter:
    def __init__(self, checkpoint: StoreRoot, scratch: Path, uploads: Executor,
                 on_published: Callable[[UploadStats], None],
                 on_failed: Callable[[str], None]) -> None:
        self.checkpoint = checkpoint
        self.scratch = scratch
        self.uploads = uploads
        self.on_published = on_published
        self.on_failed = on_failed
        self._lock = threading.Lock()
        self._base: Base | None = None
        self._inflight: Future[None] | None = None

    @property
    def base(self) -> Base | None:
        with self._lock:
            return self._base

    @property
    def latest(self) -> int | None:
        """The base's version (None: the empty store)."""
        base = self.base
        return None if base is None else base.version

    def adopt(self, descriptor: SnapshotDescriptor | None) -> None:
        """The working copy was rebuilt from `descriptor` (None: from nothing)."""
        with self._lock:
            self._base = None if descriptor is None else _base_of(descriptor)

    def adopt_newer(self, descriptor: SnapshotDescriptor | None) -> None:
        """The working copy caught up to a version built on `descriptor`: that becomes the
        base unless ours is newer. Its files are another instance's (see the invariant)."""
        with self._lock:
            if descriptor is None or (self._base is not None
                                      and self._base.version >= descriptor.version):
                return
            self._base = Base(descriptor.version, descriptor.lineage, files={})

    def in_flight(self) -> bool:
        return self._inflight is not None and not self._inflight.done()

    def start(self, db: Rdict, version: int, num_keys: int, lineage: str) -> None:
        """Checkpoints the working copy now; uploads and publishes it in the background."""
        local = self._local_checkpoint(db)
        self._inflight = self.uploads.submit(self._upload, local, version, num_keys, lineage,
                                             False)

    def take_now(self, db: Rdict, version: int, num_keys: int, lineage: str,
                 full: bool = False) -> Taken | None:
        """A snapshot on the caller's thread (a replay bound reached, or the final one);
        what was published, or None if nothing was (a failure is recorded, not raised)."""
        self.drain()
        return self._upload(self._local_checkpoint(db), version, num_keys, lineage, full)

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

    def _upload(self, local: Path, version: int, num_keys: int, lineage: str,
                full: bool) -> Taken | None:
        try:
            base = self.base
            reusable = dict(base.files) if base is not None else {}
            reused = frozenset(f.name for f in reusable.values())
            descriptor, stats = self.checkpoint.upload_snapshot(
                version, local, reusable, num_keys, full, lineage)
            if self.checkpoint.publish_snapshot(descriptor):
                self._record(descriptor, stats)
                return Taken(descriptor, reused)
            # Another reader of the same committed version published this snapshot first.
            self.checkpoint.discard_unpublished(
                [f for f in descriptor.files if f.name not in reused])
        except Exception as e:  # a failed upload leaves orphans; the commit path is unaffected
            self.on_failed(f"snapshot of version {version}: {type(e).__name__}: {e}")
        finally:
            shutil.rmtree(local, ignore_errors=True)
        return None

    def _record(self, descriptor: SnapshotDescriptor, stats: UploadStats) -> None:
        with self._lock:
            if self._base is None or descriptor.version >= self._base.version:
                self._base = _base_of(descriptor)
        self.on_published(stats)


def _base_of(descriptor: SnapshotDescriptor) -> Base:
    return Base(descriptor.version, descriptor.lineage,
                {f.local_name: f for f in descriptor.files})

"""Making snapshots of a working copy and uploading them.

A snapshot starts as a local RocksDB checkpoint taken right after a commit, while the
working copy equals the committed version (a flush plus hard links: cost proportional to
the memtable, not to the state). Its upload then runs on the worker's upload thread, so
the commit returns at once; the version becomes loadable from the snapshot when its
descriptor is published. An upload is incremental against the working copy's base (which
files it may reference instead of uploading is the lineage's to say: lineage.Base), and a
published snapshot is reported to the lineage, which may make it the next base.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from pathlib import Path

from ..format.lineage import Lineage
from ..format.manifest import SnapshotDescriptor
from ..format.store_root import RunsAll, StoreRoot, UploadStats, run_each_here
from .working_copy import WorkingCopy


@dataclass(frozen=True)
class Taken:
    """A snapshot this store published, and which of its files an earlier snapshot has too
    (so withdrawing it must keep them)."""

    descriptor: SnapshotDescriptor
    reused: frozenset[str]


class Snapshotter:
    def __init__(self, root: StoreRoot, lineage: Lineage, scratch: Path, uploads: Executor,
                 on_published: Callable[[UploadStats], None],
                 on_failed: Callable[[str], None], run_all: RunsAll = run_each_here) -> None:
        self.root = root
        self.run_all = run_all  # a snapshot's file uploads, side by side on an object store
        self.lineage = lineage
        self.scratch = scratch
        self.uploads = uploads
        self.on_published = on_published
        self.on_failed = on_failed
        self._inflight: Future[Taken | None] | None = None

    def in_flight(self) -> bool:
        return self._inflight is not None and not self._inflight.done()

    def start(self, copy: WorkingCopy, version: int, lineage: str) -> None:
        """Checkpoints the working copy, which holds `version`, now; uploads and publishes
        it in the background."""
        local = self._local_checkpoint(copy)
        self._inflight = self.uploads.submit(self._upload, local, version, copy.num_keys,
                                             lineage, False)

    def take_now(self, copy: WorkingCopy, version: int, lineage: str,
                 full: bool = False) -> Taken | None:
        """A snapshot on the caller's thread (a replay bound reached, or the final one);
        what was published, or None if nothing was (a failure is recorded, not raised).
        `full` references no earlier file: every file becomes the snapshot's own."""
        self.drain()
        return self._upload(self._local_checkpoint(copy), version, copy.num_keys, lineage,
                            full)

    def drain(self) -> None:
        """Waits for the upload in flight, if any. Its failure was recorded, not raised."""
        inflight, self._inflight = self._inflight, None
        if inflight is not None:
            inflight.result()

    def _local_checkpoint(self, copy: WorkingCopy) -> Path:
        target = self._scratch_dir()
        copy.checkpoint(target)
        return target

    def _scratch_dir(self) -> Path:
        """A new directory's name (not made yet) under the scratch directory."""
        self.scratch.mkdir(parents=True, exist_ok=True)
        return self.scratch / f"checkpoint-{uuid.uuid4().hex}"

    def _upload(self, local: Path, version: int, num_keys: int, lineage: str,
                full: bool) -> Taken | None:
        try:
            base = self.lineage.base
            reusable = dict(base.files) if base is not None else {}
            reused = frozenset(f.name for f in reusable.values())
            descriptor, stats = self.root.upload_snapshot(
                version, local, reusable, num_keys, full, lineage, self.run_all)
            if self.root.publish_snapshot(descriptor):
                self.lineage.published(descriptor)
                self.on_published(stats)
                return Taken(descriptor, reused)
            # Another reader of the same committed version published this snapshot first.
            self.root.discard_unpublished(
                [f for f in descriptor.files if f.name not in reused])
        except Exception as e:  # a failed upload leaves orphans; the commit path is unaffected
            self.on_failed(f"snapshot of version {version}: {type(e).__name__}: {e}")
        finally:
            shutil.rmtree(local, ignore_errors=True)
        return None

"""Making snapshots of a working copy and uploading them.

A snapshot starts as a local RocksDB checkpoint of the working copy as it is at the
committed version (a flush plus hard links: cost proportional to the memtable, not to the
state). A commit's snapshot (`start`) takes it on the copy's apply thread, queued behind
the frames the version wrote and ahead of any later one (deferred_writes.py), so it holds
exactly that version while the commit has returned already: the flush of the memtable
written since the last snapshot, which each snapshot's commit waited for, runs beside the
tasks. Its upload then runs on the worker's upload thread; the version becomes loadable
from the snapshot when its descriptor is published. An upload is incremental against the
working copy's base (which files it may reference instead of uploading is the lineage's to
say: lineage.Base), and a published snapshot is reported to the lineage, which may make it
the next base.
"""

from __future__ import annotations

import contextlib
import shutil
import uuid
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from pathlib import Path

from ..errors import StateStoreError
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


@dataclass(frozen=True)
class _InFlight:
    """A commit's snapshot: its checkpoint a job of the copy's apply thread, then its
    upload; `done` once published, failed or dropped (None: nothing published)."""

    copy: WorkingCopy
    done: Future[Taken | None]

    def relay(self, upload: Future[Taken | None]) -> None:
        """The upload's outcome becomes the snapshot's (`_upload` records its own failures:
        what it raises is no failure of the store's, a process's death, and `drain`
        raises it)."""
        if upload.cancelled():
            self.done.set_result(None)
        elif upload.exception() is not None:
            self.done.set_exception(upload.exception())
        else:
            self.done.set_result(upload.result())


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
        self._inflight: _InFlight | None = None

    def in_flight(self) -> bool:
        return self._inflight is not None and not self._inflight.done.done()

    def start(self, copy: WorkingCopy, version: int, lineage: str) -> None:
        """Checkpoints the working copy as it holds `version` (every frame sent so far
        applied, none sent later), on its apply thread; uploads and publishes it in the
        background. Returns at once."""
        inflight = _InFlight(copy, Future())
        num_keys = copy.num_keys

        def checkpoint_then_upload() -> None:  # a job of the apply thread: never raises
            try:
                local = self._local_checkpoint(copy.checkpoint_applied)
                upload = self.uploads.submit(self._upload, local, version, num_keys,
                                             lineage, False)
                upload.add_done_callback(inflight.relay)
            except Exception as e:  # as a failed upload: the committed version is whole
                self.on_failed(f"snapshot of version {version}: {type(e).__name__}: {e}")
                inflight.done.set_result(None)
            except BaseException as e:  # noqa: BLE001 - not the queue's: `drain` raises it
                inflight.done.set_exception(e)

        # A frame of the version that fails loses the copy, not the commit, and is what the
        # store reports (a write refuses, a load rebuilds): the snapshot it prevents is no
        # failure of its own, whether the frame failed before the checkpoint was queued or
        # after.
        def dropped() -> None:
            inflight.done.set_result(None)

        try:
            copy.deferred.submit(0, checkpoint_then_upload, dropped)
        except StateStoreError:
            return
        self._inflight = inflight

    def take_now(self, copy: WorkingCopy, version: int, lineage: str,
                 full: bool = False) -> Taken | None:
        """A snapshot on the caller's thread (a replay bound reached, or the final one);
        what was published, or None if nothing was (a failure is recorded, not raised).
        `full` references no earlier file: every file becomes the snapshot's own."""
        self.drain()
        return self._upload(self._local_checkpoint(copy.checkpoint), version, copy.num_keys,
                            lineage, full)

    def drain(self) -> None:
        """Waits for the snapshot in flight, if any. Its failure was recorded, not raised."""
        inflight, self._inflight = self._inflight, None
        if inflight is None:
            return
        # Its checkpoint waits behind frames that a commit may be holding paused: a settle
        # lets them go on (deferred_writes.py). A failed frame fails its settle and drops
        # the checkpoint (`dropped`): no snapshot then, and the failure is the frame's.
        with contextlib.suppress(StateStoreError):
            inflight.copy.deferred.settle()
        inflight.done.result()

    def _local_checkpoint(self, checkpoint: Callable[[Path], None]) -> Path:
        """A new scratch directory that `checkpoint` (a working copy's, or on its apply
        thread its `checkpoint_applied`) fills; nothing is left if it fails."""
        target = self._scratch_dir()
        try:
            checkpoint(target)
        except Exception:
            shutil.rmtree(target, ignore_errors=True)
            raise
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

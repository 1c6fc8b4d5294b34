"""A versioned key-value store: one per (operator, partition, store name) in a worker.

It holds a working copy (working_copy.py) of one committed version, takes write records
into it, and commits them as the next version of its durable root (store_root.py): a
changelog and a manifest, with snapshots uploaded off the commit path (snapshots.py). Which
snapshot a version builds on and which changelogs its manifest lists is its lineage's to
decide (lineage.py).

The store is a state machine, checked on every call (`_require`), as Spark's stores are:

  NONE      no version loaded: at first, and whenever the working copy stops being a
            committed version (an abort of writes, a failed write, a lost publish race);
            only a load leaves it
  CLEAN     the working copy is committed version `loaded_version` (loaded, or just
            committed); reads, writes and commits may follow
  UPDATING  the working copy is `loaded_version` plus exactly the `pending` records
            (changelog_spool.py);
            commit publishes them, abort drops them (back to NONE)
  CLOSED    released; nothing more
"""

from __future__ import annotations

import contextlib
import functools
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Executor
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from ..errors import CorruptFileError, StateStoreError, StorageError, VersionNotFoundError
from ..format import gc, records
from ..format.lineage import Lineage, LoadPlan
from ..format.manifest import Changelog, Retention
from ..format.records import OP_MASK, Op
from ..format.store_root import StoreRoot, UploadStats
from ..options import StoreOptions
from .changelog_spool import ChangelogSpool
from .memory import RocksMemory
from .snapshots import Snapshotter, Taken
from .storage_requests import InOrder, StorageRequests
from .teardown import Release, release_now
from .working_copy import UNTRACKED, WorkingCopy

_CHANGE_OPS = frozenset({Op.PUT, Op.DELETE, Op.MERGE})  # what a change feed reports


class State(Enum):
    NONE = "no version loaded"
    CLEAN = "a committed version loaded"
    UPDATING = "uncommitted writes"
    CLOSED = "closed"


_LOADED = (State.CLEAN, State.UPDATING)
_OPEN = (State.NONE, State.CLEAN, State.UPDATING)


@dataclass
class Metrics:
    """Counters since the last load (one batch), reported through the shim's customMetrics."""

    commits: int = 0
    commit_ms: float = 0.0
    changelog_bytes: int = 0
    snapshots: int = 0
    snapshot_files_uploaded: int = 0
    snapshot_bytes_uploaded: int = 0
    snapshot_files_reused: int = 0
    snapshot_bytes_reused: int = 0
    snapshot_failures: int = 0
    forced_snapshots: int = 0
    loads: int = 0
    load_ms: float = 0.0
    replayed_versions: int = 0
    rebuilds: int = 0
    lost_publish_races: int = 0
    gc_files_deleted: int = 0
    round_trips: int = 0

    def add_upload(self, stats: UploadStats) -> None:
        self.snapshots += 1
        self.snapshot_files_uploaded += stats.files_uploaded
        self.snapshot_bytes_uploaded += stats.bytes_uploaded
        self.snapshot_files_reused += stats.files_reused
        self.snapshot_bytes_reused += stats.bytes_reused


class VersionedStore:
    def __init__(self, name: str, root: StoreRoot, local_dir: Path,
                 opts: StoreOptions, uploads: Executor, memory: RocksMemory | None = None,
                 writer: str = "", epoch: int = 0,
                 release: Release = release_now, requests: Executor | None = None) -> None:
        self.name = name
        self.epoch = epoch  # the run epoch this store's commits publish under (manifest.py)
        self.checkpoint = root
        self.local_dir = local_dir
        self.opts = opts
        self.writer = writer  # recorded in the manifests this store publishes
        # The upload thread reports into the metrics while a load may start a new batch's.
        self._metrics_lock = threading.Lock()
        self.metrics = Metrics()
        self.failures: list[str] = []  # snapshot uploads that failed since the last load
        # Commits tried and snapshots published since open: what moves retention on, and
        # so what makes files garbage (gc_pacing.py).
        self.record_writes = 0
        self.lineage = Lineage()
        self.copy = WorkingCopy(name, opts, memory)
        # Requests to the root that need not wait for one another (storage_requests.py).
        self.requests = StorageRequests(requests, root.storage.remote)
        self.snapshots = Snapshotter(root, self.lineage, local_dir / "scratch", uploads,
                                     on_published=self._snapshot_published,
                                     on_failed=self._snapshot_failed,
                                     run_all=self.requests.run_all)
        self.state = State.NONE
        self.loaded_version: int | None = None  # None unless CLEAN or UPDATING
        self.pending = ChangelogSpool(local_dir, opts.changelog_compression)
        self.release = release  # of the working copy at close: in line, or teardown.py's

    @property
    def num_keys(self) -> int:
        return self.copy.num_keys

    def _require(self, states: tuple[State, ...], action: str) -> None:
        failure = self.copy.deferred.failure
        if failure is not None and self.state in _LOADED:
            # A write applied behind the session failed (deferred_writes.py): the copy is
            # no version now, committed ones are whole in the root, and a load rebuilds.
            self._lose_version()
            if State.NONE not in states:
                raise StateStoreError(
                    f"{self.name}: cannot {action}: applying write records to the working "
                    f"copy failed ({failure}); the committed versions are intact and the "
                    "next load rebuilds the working copy")
        if self.state not in states:
            raise StateStoreError(f"{self.name}: cannot {action} with {self.state.value} "
                                  f"(it needs {' or '.join(s.value for s in states)})")

    def _lose_version(self) -> None:
        """The working copy is no longer any committed version: the next load rebuilds."""
        self.state, self.loaded_version = State.NONE, None
        self.pending.clear()
        self.lineage.forget()

    # ---- loading ------------------------------------------------------------------------

    def load(self, version: int, checkpoint_id: str | None = None) -> bool:
        """Makes the working copy equal `version` (the commit of it `checkpoint_id` names,
        when Spark passes one); True if it already was (nothing changed, so whatever the
        shim derived from this working copy, e.g. its read cache, holds)."""
        self._require(_OPEN, f"load version {version}")
        if version < 0:
            raise StateStoreError(f"cannot load negative version {version} of {self.name}")
        if self.state is State.CLEAN and self.loaded_version == version \
                and not self.lineage.empty \
                and checkpoint_id in (None, self.lineage.commit_id):
            return True  # the common batch-to-batch case
        started = time.perf_counter()
        if not self._catch_up(version, checkpoint_id):
            self._rebuild(version, checkpoint_id=checkpoint_id)
        self.metrics.loads += 1
        self.metrics.load_ms += (time.perf_counter() - started) * 1000
        return False

    def load_empty(self, version: int) -> None:
        """Makes the working copy an empty store standing at `version` (Spark's loadEmpty:
        an offline writer fills a version N + 1 from nothing, e.g. a canonical restore), so
        the next commit publishes version + 1 without any earlier version existing."""
        self._require(_OPEN, f"load an empty version {version}")
        if version < 0:
            raise StateStoreError(f"cannot load negative version {version} of {self.name}")
        self._rebuild(version, [None], empty=version > 0)  # version 0's plan: nothing at all

    def load_from_snapshot(self, snapshot_version: int, version: int) -> None:
        """Makes the working copy equal `version`, rebuilt from the snapshot of
        `snapshot_version` (Spark's replayStateFromSnapshot, for readers)."""
        self._require(_OPEN, f"replay version {version}")
        self._rebuild(version, [self.checkpoint.plan_from_snapshot(snapshot_version, version)])
        self.metrics.loads += 1

    def _catch_up(self, version: int, checkpoint_id: str | None = None) -> bool:
        """Replays only the missing changelogs when the clean working copy is behind (another
        writer committed the versions in between), as the lineage allows."""
        current = self.loaded_version
        if self.state is not State.CLEAN or current is None or version < current:
            return False
        index = self.checkpoint.index(self.requests.started)
        target = self.checkpoint.read_manifest(version, index, checkpoint_id)
        missing = self.lineage.catch_up(current, target)
        if missing is None:
            return False
        try:
            base = self.checkpoint.base_snapshot(target, index)
        except CorruptFileError:
            return False  # gone meanwhile: rebuild from what the manifest can still use
        self._lose_version()  # until the replay is complete, the copy is neither
        with contextlib.closing(self._fetched(missing)) as fetched:
            self._replay(fetched)
        self.lineage.caught_up(target, base)
        self.copy.count_keys(target.num_keys)
        self.state, self.loaded_version = State.CLEAN, version
        return True

    def _rebuild(self, version: int, plans: list[LoadPlan | None] | None = None,
                 empty: bool = False, checkpoint_id: str | None = None) -> None:
        self.snapshots.drain()
        self.copy.close()
        self._lose_version()
        if version == 0:
            self.checkpoint.refuse_foreign_state()
        if plans is None:
            plans = [None] if version == 0 else [*self.checkpoint.load_plans(
                version, checkpoint_id=checkpoint_id, started=self.requests.started)]
        shutil.rmtree(self.local_dir, ignore_errors=True)
        self.local_dir.mkdir(parents=True)
        plan, db_dir, changelogs = self._download_first_readable(plans)
        with contextlib.closing(changelogs):  # a failed load leaves no fetch running
            self.copy.open(db_dir)
            self._replay(changelogs)
        self.lineage.rebuilt(plan, empty)
        self.copy.count_keys(plan.manifest.num_keys if plan else 0)
        self.state, self.loaded_version = State.CLEAN, version
        self.metrics.rebuilds += 1

    def _replay(self, fetched: InOrder[Iterator[bytes]]) -> None:
        """Applies changelogs in order, their payloads as `_fetched` brings them."""
        for payloads in fetched:
            for payload in payloads:
                self.copy.apply(payload, count_keys=False)
            self.metrics.replayed_versions += 1

    def _fetched(self, changelogs: list[Changelog]) -> InOrder[Iterator[bytes]]:
        """Each changelog's payloads, in order, fetched ahead while the ones before apply."""
        return self.requests.in_order(
            [functools.partial(self.checkpoint.changelog_payloads, c) for c in changelogs],
            [c.file.size for c in changelogs])

    def _download_first_readable(self, plans: list[LoadPlan | None]
                                 ) -> tuple[LoadPlan | None, Path, InOrder[Iterator[bytes]]]:
        """The first plan whose snapshot downloads intact, the directory it is in, and its
        changelogs' payloads (`_fetched`, begun once the snapshot's files are); an
        unreadable snapshot falls back to the next (older) one."""
        for i, plan in enumerate(plans):
            db_dir = self.local_dir / f"db-{uuid.uuid4().hex}"
            try:
                if plan is not None and plan.snapshot is not None:
                    db_dir.mkdir(parents=True)  # none: working_copy.open makes a new one
                    self.checkpoint.download_snapshot(plan.snapshot, db_dir,
                                                      self.requests.run_all)
                return plan, db_dir, self._fetched(plan.changelogs if plan else [])
            except CorruptFileError:
                shutil.rmtree(db_dir, ignore_errors=True)
                if i == len(plans) - 1:
                    raise  # no older snapshot to fall back to: the error names the file
        raise AssertionError("load_plans never returns an empty list")

    def changes(self, cf: str, start: int, end: int) -> Iterator[tuple[int, Op, bytes, bytes]]:
        """The change feed: (version, op, key, value) of every put, delete and merge of `cf`
        that versions start..end made, in the order they were made; needs no working copy."""
        self._require(_OPEN, "read the change feed")
        if not 0 < start <= end:
            raise StateStoreError(f"{self.name}: no changes between versions {start} and {end}")
        index = self.checkpoint.index()
        retained = set(index.versions())
        missing = [v for v in range(start, end + 1) if v not in retained]
        if missing:
            raise VersionNotFoundError(
                f"the changes of versions {start}..{end} of {self.name} are not all retained: "
                f"versions {missing[0]}..{missing[-1]} are missing (retained: "
                f"{min(retained, default=0)}..{max(retained, default=0)})")
        owns = [self.checkpoint.own_changelog(version, index) for version in range(start, end + 1)]
        with contextlib.closing(self._fetched(owns)) as fetched:
            for version, payloads in zip(range(start, end + 1), fetched, strict=True):
                for payload in payloads:
                    for op, record_cf, key, value in records.decode(payload):
                        kind = op & OP_MASK
                        if record_cf == cf and kind in _CHANGE_OPS:
                            yield version, Op(kind), key, value

    # ---- reading and writing ------------------------------------------------------------

    def get(self, cf: str, key: bytes) -> bytes | None:
        self._require(_LOADED, "read")
        return self.copy.get(cf, key)

    def scan(self, cf: str, start: bytes | None, stop: bytes | None,
             prefix: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        self._require(_LOADED, "scan")
        return self.copy.scan(cf, start, stop, prefix)

    def column_families(self) -> list[str]:
        self._require(_LOADED, "list column families")
        return self.copy.column_families()

    def write(self, payload: bytes) -> None:
        self._require(_LOADED, "write (after an abort or an error, load again)")
        try:
            self.copy.apply(payload, count_keys=self.copy.num_keys != UNTRACKED)
        except Exception:
            self._lose_version()  # partially applied: the working copy is unknown
            raise
        self.pending.append(payload)
        self.state = State.UPDATING

    def drop_cf(self, cf: str) -> bool:
        self._require(_LOADED, f"drop column family {cf}")
        if cf not in self.copy.cfs or cf == records.DEFAULT_CF:
            return False
        self.write(records.encode(Op.DROP_CF, cf))
        return True

    def abort(self) -> None:
        """Drops uncommitted writes. After a commit (Spark may abort a committed store) or
        with nothing written, the committed version stays loaded."""
        self._require(_OPEN, "abort")
        if self.state is State.UPDATING:
            self._lose_version()

    # ---- committing ---------------------------------------------------------------------

    def commit(self, new_version: int) -> dict[str, int | bool]:
        """Durable when it returns: the changelog and the manifest are published.

        A snapshot never delays it, unless the replay bound would be exceeded (or the
        version is written from nothing): then the commit waits for the upload in flight
        and, if that is not enough, snapshots now.
        """
        self._require(_LOADED, f"commit version {new_version}")
        with self.copy.deferred.first():  # the task waits for the commit, not the applies
            return self._publish_version(new_version)

    def _publish_version(self, new_version: int) -> dict[str, int | bool]:
        if new_version != self.loaded_version + 1:  # type: ignore[operator]
            raise StateStoreError(f"{self.name}: cannot commit version {new_version} on top "
                                  f"of version {self.loaded_version}")
        started = time.perf_counter()
        # The fence's listing (`_refuse_if_superseded`) and the changelog's upload need
        # not wait for each other, on an object store a round trip each.
        newest_epoch = self.requests.started(self.checkpoint.newest_epoch)
        with self._metrics_lock:  # the upload thread counts its snapshots too
            self.record_writes += 1  # published, lost or fenced, each leaves files to collect
        changelog = self.pending.store(self.checkpoint, new_version)
        self._refuse_if_superseded(new_version, newest_epoch(), changelog)
        self.metrics.changelog_bytes += changelog.file.size
        if self.opts.compact_on_commit:  # before any snapshot of this version is taken
            self.copy.compact()
        forced = self._snapshot_first_if_needed(changelog)
        manifest = self.lineage.next_manifest(
            changelog, self.copy.num_keys, self.copy.column_families(), self.writer, self.epoch,
            Retention(self.opts.min_versions_to_retain, self.opts.orphan_margin_seconds))
        base_id = self.lineage.commit_id
        if not self.checkpoint.publish_manifest(manifest):
            # Another attempt of this run published first; its files are the version now,
            # and this attempt's own files (changelog, forced snapshot) serve nobody.
            if forced is not None:
                self.checkpoint.withdraw_snapshot(forced.descriptor, set(forced.reused))
            self.checkpoint.discard_unpublished([changelog.file])
            self._lose_version()
            self.metrics.lost_publish_races += 1
            winner = self.checkpoint.read_manifest(new_version)
            return {"published": False, "checkpoint_id": winner.commit_id,
                    "base_checkpoint_id": base_id}
        self.lineage.committed(manifest)
        self.pending.clear()
        self.state, self.loaded_version = State.CLEAN, new_version
        if self.lineage.snapshot_due(self.opts.snapshot_interval) \
                and not self.snapshots.in_flight():
            self.snapshots.start(self.copy, new_version, manifest.lineage)
        self.metrics.commits += 1
        self.metrics.commit_ms += (time.perf_counter() - started) * 1000
        return {"published": True, "num_keys": self.copy.num_keys,
                "checkpoint_id": manifest.commit_id, "base_checkpoint_id": base_id}

    def _snapshot_first_if_needed(self, changelog: Changelog) -> Taken | None:
        """The snapshot this version's manifest must name, taken now (lineage.py): for a
        version written from nothing, or one whose chain would pass the replay bound even
        after the upload in flight. Published before the manifest (which names it), it
        carries this attempt's lineage: if the attempt loses, no winner ever starts from it."""
        version = changelog.version
        if self.lineage.empty:
            return self.snapshots.take_now(self.copy, version, changelog.file.name)
        bound = (self.opts.max_replay_versions, self.opts.max_replay_bytes)
        if not self.lineage.beyond_bound(changelog, *bound):
            return None
        self.snapshots.drain()
        if not self.lineage.beyond_bound(changelog, *bound):
            return None
        self.metrics.forced_snapshots += 1
        return self.snapshots.take_now(self.copy, version, changelog.file.name)

    def _refuse_if_superseded(self, new_version: int, newest: int,
                              changelog: Changelog) -> None:
        """Writers are fenced by run epoch (manifest.py): once a later run of the query has
        published any version of this store, an attempt of an earlier run (a zombie task
        that outlived its run, whose working copy may hold a version that run replaced)
        publishes nothing more. It fails rather than reports a lost race: a current run
        that met this (its epochs mislaid) must not go on as if its state were committed.
        `newest` was listed before the manifest is published, as the fence needs; the
        changelog uploaded meanwhile serves nobody then, and goes (if its removal fails,
        collection takes it as the orphan of a failed commit)."""
        if newest > self.epoch:
            with contextlib.suppress(StorageError):
                self.checkpoint.discard_unpublished([changelog.file])
            self._lose_version()
            raise StateStoreError(
                f"{self.name}: version {new_version} of run epoch {self.epoch} is not "
                f"published: a later run of this query (run epoch {newest}) has published "
                f"state at {self.checkpoint.storage.url} since; this attempt belongs to an "
                "earlier run. (If no other run exists, the query's run epochs under "
                "<checkpoint>/_pyrocks_runs/ were removed: restore them, or restore the "
                "query into a new checkpoint.)")

    # ---- finishing, maintenance, metrics, closing ---------------------------------------

    def finish(self) -> None:
        """Completes uploads in flight and makes sure the last committed version has a
        snapshot (the final checkpoint), so it loads with no replay. A dirty working copy
        (an uncommitted batch) is not snapshotted: only committed state is ever written."""
        self._require(_OPEN, "finish")
        self.snapshots.drain()
        lineage = self._final_snapshot_due()
        if lineage is not None:
            self.snapshots.take_now(self.copy, self.loaded_version, lineage)

    def start_final_flush(self) -> None:
        """The flush of `end`'s final snapshot, started ahead of it: a worker ending several
        stores starts every one's before it ends the first (worker.end_stores), so that
        one store flushes while another uploads."""
        if self._final_snapshot_due() is not None:  # a clean copy of a committed version
            self.copy.start_flush()

    def end(self) -> None:
        """`finish`, then `close`: the store is going. The final snapshot is a checkpoint of
        the open working copy, as `finish`'s is, and the close is left to the release behind
        the answer (teardown.py): RocksDB's close waits for the compactions running on the
        copy, which run at nice 19 (working_copy.let_compactions_yield), so on busy cores a
        close that waited for one to notice it took 20-70 ms (docs/benchmarks.md, Dec 6).
        Closed even if the snapshot fails (that is recorded in `failures`, as a failed
        upload is)."""
        self._require(_OPEN, "finish")
        try:
            self.finish()
        except Exception as e:  # the committed state is whole without it: the close goes on
            self._snapshot_failed(f"final snapshot of version {self.loaded_version}: "
                                  f"{type(e).__name__}: {e}")
        finally:
            self.close()

    def snapshot_when_idle(self) -> bool:
        """The final snapshot, ahead of the run's end: a store idle since its last commit
        starts that version's snapshot in the background (idle_snapshots.py calls this), so a
        `finish` at stop() finds nothing left to write. False while an upload is in flight:
        the caller asks again later."""
        if self.state is not State.CLEAN or self.lineage.base_version == self.loaded_version:
            return True
        if self.snapshots.in_flight():
            return False
        lineage = self.lineage.lineage
        if self.loaded_version and lineage is not None:
            try:
                self.snapshots.start(self.copy, self.loaded_version, lineage)
            except Exception as e:  # finish tries again; the failure is reported there
                self._snapshot_failed(f"snapshot of version {self.loaded_version} when idle: "
                                      f"{type(e).__name__}: {e}")
        return True

    def snapshot_now(self, full: bool = False) -> None:
        """Snapshots the loaded committed version on this thread; `full` references no
        earlier file (every file becomes this snapshot's own, through duplicate())."""
        lineage = self._committed_lineage()
        if lineage is not None:
            self.snapshots.take_now(self.copy, self.loaded_version, lineage, full)

    def _final_snapshot_due(self) -> str | None:
        """`_committed_lineage` if that committed version has no snapshot yet: what `finish`
        and `end` must write before the store may go."""
        if self.lineage.base_version == self.loaded_version:
            return None
        return self._committed_lineage()

    def _committed_lineage(self) -> str | None:
        """The lineage of the loaded version if the working copy holds exactly that committed
        version (only committed state is ever snapshotted); None otherwise."""
        lineage = self.lineage.lineage
        return lineage if self.state is State.CLEAN and self.loaded_version else None

    def collect_garbage(self, min_versions_to_retain: int) -> int:
        self._require(_OPEN, "collect garbage")
        # Our own upload in flight is not referenced yet: let it publish first. (Other
        # processes' uploads are protected by the orphan margin.)
        self.snapshots.drain()
        plan = gc.collect_garbage(self.checkpoint, min_versions_to_retain,
                                  self.opts.orphan_margin_seconds)
        self.metrics.gc_files_deleted += plan.files_deleted
        return plan.files_deleted

    def reset_metrics(self) -> None:
        """Starts the counters of a new batch (customMetrics report per batch); `failures`
        too restarts, so a finish reports the failed uploads since the last load only."""
        with self._metrics_lock:
            self.metrics = Metrics()
            self.failures = []

    def _snapshot_published(self, stats: UploadStats) -> None:
        with self._metrics_lock:
            self.metrics.add_upload(stats)
            self.record_writes += 1

    def _snapshot_failed(self, message: str) -> None:
        with self._metrics_lock:
            self.metrics.snapshot_failures += 1
            self.failures.append(message)

    def upload_lag(self) -> int:
        """Committed versions not yet covered by a published snapshot."""
        return (self.loaded_version or 0) - (self.lineage.base_version or 0)

    def memory_bytes(self) -> int:
        return self.copy.memory_bytes()

    def close(self) -> None:
        """Hands the working copy and its directory to `release` (a worker's releases them
        behind the caller: teardown.py). Never writes: call `finish` first for a final
        snapshot; its upload, and any in flight, are done when this returns."""
        if self.state is State.CLOSED:
            return
        self.snapshots.drain()
        self._lose_version()
        self.state = State.CLOSED
        self.release(self.copy, self.local_dir)

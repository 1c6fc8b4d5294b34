"""A versioned key-value store on rocksdict: one per (operator, partition, store name).

The working copy is a local RocksDB. Writes go straight into it (so gets, iterators and
scans see them natively) and their records are kept as the pending changelog. Invariant:
`loaded_version` is not None only while the working copy equals that committed version
plus exactly the pending records; anything that breaks it (abort, a failed write, a lost
publish race) sets it to None and the next load rebuilds from durable storage.
"""

from __future__ import annotations

import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path

from rocksdict import ColumnFamily, Options, Rdict, WriteBatch, WriteOptions

from ..errors import CorruptFileError, StateStoreError, VersionNotFoundError
from ..format import records
from ..format.manifest import Changelog, Manifest
from ..format.records import DEFAULT_CF, EXISTED, KNOWN, OP_MASK, Op
from ..format.store_root import LoadPlan, StoreRoot, UploadStats
from ..options import StoreOptions
from .memory import RocksMemory
from .snapshots import Snapshotter, Taken

# Plain ints for the per-record loop: reading an IntEnum member costs ~130 ns on 3.11.
_PUT, _DELETE = int(Op.PUT), int(Op.DELETE)


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


def _rocks_options(opts: StoreOptions, memory: RocksMemory | None) -> Options:
    o = Options(raw_mode=True)
    o.create_if_missing(True)
    o.set_write_buffer_size(opts.write_buffer_mb << 20)
    if memory is not None:
        memory.apply(o)
    return o


_CHANGE_OPS = frozenset({Op.PUT, Op.DELETE, Op.MERGE})  # what a change feed reports

# Recorded in manifests when key counting is off: the count is unknown, not zero.
UNTRACKED = -1


class VersionedStore:
    def __init__(self, name: str, checkpoint: StoreRoot, local_dir: Path,
                 opts: StoreOptions, uploads: Executor, memory: RocksMemory | None = None,
                 writer: str = "", epoch: int = 0) -> None:
        self.name = name
        self.epoch = epoch  # the run epoch this store's commits publish under (manifest.py)
        self.checkpoint = checkpoint
        self.local_dir = local_dir
        self.opts = opts
        self.memory = memory  # shared with the worker's other stores; None = RocksDB defaults
        self.writer = writer  # recorded in the manifests this store publishes
        # The upload thread reports into the metrics while a load may start a new batch's.
        self._metrics_lock = threading.Lock()
        self.metrics = Metrics()
        self.failures: list[str] = []  # snapshot uploads that failed since the last load
        self.snapshots = Snapshotter(checkpoint, local_dir / "scratch", uploads,
                                     on_published=self._snapshot_published,
                                     on_failed=self._snapshot_failed)
        self.db: Rdict | None = None
        self.cfs: dict[str, Rdict] = {}
        self.loaded_version: int | None = None
        self.manifest: Manifest | None = None  # of loaded_version; None for version 0
        self.pending = bytearray()
        self.num_keys = 0
        # Set by load_empty: the next commit has no earlier version to chain from.
        self.empty_base = False
        self.write_options = WriteOptions()
        self.write_options.disable_wal = True  # the changelog, not the WAL, makes writes durable

    # ---- loading ------------------------------------------------------------------------

    def load(self, version: int) -> bool:
        """Makes the working copy equal `version`; True if it already was (nothing changed,
        so whatever the shim derived from this working copy, e.g. its read cache, holds)."""
        if version < 0:
            raise StateStoreError(f"cannot load negative version {version} of {self.name}")
        if self.empty_base:  # the working copy is not any published version
            self.loaded_version, self.empty_base = None, False
        if self.loaded_version == version and not self.pending:
            return True  # the common batch-to-batch case
        started = time.perf_counter()
        if not self._catch_up(version):
            self.loaded_version = None
            self._rebuild(version)
        self.metrics.loads += 1
        self.metrics.load_ms += (time.perf_counter() - started) * 1000
        return False

    def load_empty(self, version: int) -> None:
        """Makes the working copy an empty store standing at `version` (Spark's loadEmpty:
        an offline writer fills a version N + 1 from nothing, e.g. a canonical restore), so
        the next commit publishes version + 1 without any earlier version existing."""
        if version < 0:
            raise StateStoreError(f"cannot load negative version {version} of {self.name}")
        self._rebuild(version, [None])  # the plan of version 0: no snapshot, no changelog
        self.empty_base = version > 0

    def _catch_up(self, version: int) -> bool:
        """Replays only the missing changelogs when the clean working copy is behind (another
        writer committed the versions in between)."""
        current = self.loaded_version
        if current is None or self.pending or version < current:
            return False
        index = self.checkpoint.index()
        manifest = self.checkpoint.read_manifest(version, index)
        if manifest.lineage_of(current) != (self.manifest.lineage if self.manifest else None):
            return False  # built on another attempt's (or a later run's) `current`
        missing = manifest.changelogs_after(current)
        if len(missing) != version - current:
            return False  # the chain starts after our version: rebuild from a snapshot
        base = None
        if manifest.snapshot_version is not None:
            try:
                base = self.checkpoint.base_snapshot(manifest, index)
            except CorruptFileError:
                return False  # gone meanwhile: rebuild from what the manifest can still use
        self.loaded_version = None  # until the replay is complete, the copy is neither
        for changelog in missing:
            self._apply(self.checkpoint.read_changelog(changelog), count_keys=False)
            self.metrics.replayed_versions += 1
        # The next version's chain must reach back to a base its manifest can name: the
        # other writer's, unless ours is newer (then it is in that writer's history too).
        self.snapshots.adopt_newer(base)
        self.manifest, self.loaded_version = manifest, version
        self.num_keys = self._counted(manifest)
        return True

    def load_from_snapshot(self, snapshot_version: int, version: int) -> None:
        """Makes the working copy equal `version`, rebuilt from the snapshot of
        `snapshot_version` (Spark's replayStateFromSnapshot, for readers)."""
        self.empty_base = False
        self._rebuild(version, [self.checkpoint.plan_from_snapshot(snapshot_version, version)])
        self.metrics.loads += 1

    def changes(self, cf: str, start: int, end: int) -> Iterator[tuple[int, Op, bytes, bytes]]:
        """The change feed: (version, op, key, value) of every put, delete and merge of `cf`
        that versions start..end made, in the order they were made; needs no working copy."""
        if not 0 < start <= end:
            raise StateStoreError(f"{self.name}: no changes between versions {start} and {end}")
        retained = set(self.checkpoint.versions())
        missing = [v for v in range(start, end + 1) if v not in retained]
        if missing:
            raise VersionNotFoundError(
                f"the changes of versions {start}..{end} of {self.name} are not all retained: "
                f"versions {missing[0]}..{missing[-1]} are missing (retained: "
                f"{min(retained, default=0)}..{max(retained, default=0)})")
        for version in range(start, end + 1):
            data = self.checkpoint.read_changelog(self.checkpoint.own_changelog(version))
            for op, record_cf, key, value in records.decode(data):
                kind = op & OP_MASK
                if record_cf == cf and kind in _CHANGE_OPS:
                    yield version, Op(kind), key, value

    def _rebuild(self, version: int, plans: list[LoadPlan | None] | None = None) -> None:
        self.snapshots.drain()
        self._close_db()
        if version == 0:
            self.checkpoint.refuse_foreign_state()
        if plans is None:
            plans = [None] if version == 0 else [*self.checkpoint.load_plans(version)]
        shutil.rmtree(self.local_dir, ignore_errors=True)
        self.local_dir.mkdir(parents=True)
        plan, db_dir = self._download_first_readable(plans)
        self._open_db(db_dir)
        self.snapshots.adopt(plan.snapshot if plan else None)
        for changelog in plan.changelogs if plan else []:
            self._apply(self.checkpoint.read_changelog(changelog), count_keys=False)
            self.metrics.replayed_versions += 1
        self.pending.clear()
        self.manifest = plan.manifest if plan else None
        self.num_keys = self._counted(self.manifest)
        self.loaded_version = version
        self.metrics.rebuilds += 1

    def _download_first_readable(self, plans: list[LoadPlan | None]
                                 ) -> tuple[LoadPlan | None, Path]:
        """The first plan whose snapshot downloads intact, and the directory it is in; an
        unreadable snapshot falls back to the next (older) one."""
        for i, plan in enumerate(plans):
            db_dir = self.local_dir / f"db-{uuid.uuid4().hex}"
            try:
                if plan is not None and plan.snapshot is not None:
                    self.checkpoint.download_snapshot(plan.snapshot, db_dir)
                return plan, db_dir
            except CorruptFileError:
                shutil.rmtree(db_dir, ignore_errors=True)
                if i == len(plans) - 1:
                    raise  # no older snapshot to fall back to: the error names the file
        raise AssertionError("load_plans never returns an empty list")

    def _counted(self, manifest: Manifest | None) -> int:
        """The key count of a freshly loaded version: the manifest's, unless it was written
        with counting off and counting is on now (then count once)."""
        if not self.opts.track_num_keys:
            return UNTRACKED
        if manifest is None:
            return 0
        if manifest.num_keys != UNTRACKED:
            return manifest.num_keys
        return sum(1 for cf in self.cfs for _ in self.scan(cf, None, None, None))

    def _open_db(self, db_dir: Path) -> None:
        options = _rocks_options(self.opts, self.memory)
        existing = Rdict.list_cf(str(db_dir), options) if db_dir.exists() else [DEFAULT_CF]
        self.db = Rdict(str(db_dir), options,
                        column_families={cf: options for cf in existing if cf != DEFAULT_CF})
        self.db.set_write_options(self.write_options)
        self.cfs = {cf: self.db.get_column_family(cf) for cf in existing if cf != DEFAULT_CF}
        self.cfs[DEFAULT_CF] = self.db

    def _close_db(self) -> None:
        self.cfs.clear()
        if self.db is not None:
            self.db.close()
            self.db = None

    # ---- reading ------------------------------------------------------------------------

    def _cf(self, cf: str) -> Rdict:
        try:
            return self.cfs[cf]
        except KeyError:
            raise StateStoreError(f"column family {cf!r} does not exist in {self.name}") from None

    def get(self, cf: str, key: bytes) -> bytes | None:
        return self._cf(cf).get(key)

    def scan(self, cf: str, start: bytes | None, stop: bytes | None,
             prefix: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """Pairs in key order from `start` (inclusive) to `stop` (exclusive) or within `prefix`.

        A RocksDB iterator reads the state as of its creation, so writes made while the
        caller iterates (Spark allows them) do not disturb the iteration.
        """
        it = self._cf(cf).iter()
        seek = prefix if prefix is not None else start
        if seek is None:
            it.seek_to_first()
        else:
            it.seek(seek)
        while it.valid():
            key = it.key()
            if (prefix is not None and not key.startswith(prefix)) or (
                stop is not None and key >= stop
            ):
                return
            yield key, it.value()
            it.next()

    def column_families(self) -> list[str]:
        return sorted(self.cfs)

    # ---- writing ------------------------------------------------------------------------

    def write(self, payload: bytes) -> None:
        self._require_loaded()
        try:
            self._apply(payload, count_keys=self.num_keys != UNTRACKED)
        except Exception:
            self.loaded_version = None  # partially applied: the working copy is unknown
            raise
        self.pending += payload

    def drop_cf(self, cf: str) -> bool:
        self._require_loaded()
        if cf not in self.cfs or cf == DEFAULT_CF:
            return False
        self.write(records.encode(Op.DROP_CF, cf))
        return True

    def _require_loaded(self) -> None:
        if self.loaded_version is None:
            raise StateStoreError(f"{self.name}: no version loaded (write after abort or error)")

    def _apply(self, payload: bytes, count_keys: bool) -> None:
        batch = _RecordBatch(self)
        for flagged, cf, key, value in records.decode(payload):
            op = flagged & OP_MASK
            if op == _PUT:
                if count_keys and not self._existed(flagged, cf, key, batch):
                    self.num_keys += 1
                batch.put(cf, key, value)
            elif op == _DELETE:
                if count_keys and self._existed(flagged, cf, key, batch):
                    self.num_keys -= 1
                batch.delete(cf, key)
            else:
                batch.flush()  # the other operations read or reshape the working copy
                self._apply_other(op, cf, key, value, count_keys)
                batch = _RecordBatch(self)  # column families may have changed: fresh handles
        batch.flush()

    def _apply_other(self, op: int, cf: str, key: bytes, value: bytes, count_keys: bool) -> None:
        if op == Op.MERGE:
            target = self._cf(cf)
            old = target.get(key)
            if old is None and count_keys:
                self.num_keys += 1
            target[key] = value if old is None else old + value
        elif op == Op.DELETE_RANGE:
            self._delete_range(cf, key, value, count_keys)
        elif op == Op.CREATE_CF:
            self._create_cf(cf)
        elif op == Op.DROP_CF:
            self._drop_cf(cf, count_keys)

    def _existed(self, flagged: int, cf: str, key: bytes, batch: _RecordBatch) -> bool:
        """Whether `key` existed before this record: the shim's word when it knew."""
        if flagged & KNOWN:
            return bool(flagged & EXISTED)
        batch.flush()  # the lookup must see the records before this one
        return self._exists(self._cf(cf), key)

    @staticmethod
    def _exists(target: Rdict, key: bytes) -> bool:
        return target.key_may_exist(key) and target.get(key) is not None

    def _delete_range(self, cf: str, start: bytes, stop: bytes, count_keys: bool) -> None:
        if count_keys:
            self.num_keys -= sum(1 for _ in self.scan(cf, start, stop, None))
        self._cf(cf).delete_range(start, stop)

    def _create_cf(self, cf: str) -> None:
        if cf not in self.cfs:
            assert self.db is not None
            self.cfs[cf] = self.db.create_column_family(
                cf, _rocks_options(self.opts, self.memory))

    def _drop_cf(self, cf: str, count_keys: bool) -> None:
        if cf in self.cfs and cf != DEFAULT_CF:
            if count_keys:
                self.num_keys -= sum(1 for _ in self.scan(cf, None, None, None))
            del self.cfs[cf]
            assert self.db is not None
            self.db.drop_column_family(cf)

    # ---- committing ---------------------------------------------------------------------

    def commit(self, new_version: int) -> dict[str, int | bool]:
        """Durable when it returns: the changelog and the manifest are published.

        A snapshot never delays it, unless the replay bound would be exceeded: then the
        commit waits for the upload in flight and, if that is not enough, snapshots now.
        """
        self._require_loaded()
        assert self.loaded_version is not None
        if new_version != self.loaded_version + 1:
            raise StateStoreError(
                f"{self.name}: cannot commit version {new_version} on top of version "
                f"{self.loaded_version}"
            )
        self._refuse_if_superseded(new_version)
        started = time.perf_counter()
        changelog = self.checkpoint.write_changelog(new_version, bytes(self.pending))
        self.metrics.changelog_bytes += changelog.file.size
        chain = self._chain_with(changelog)
        forced: Taken | None = None
        if self.empty_base:
            # No version before this one exists: its manifest must be based on its own
            # snapshot, which holds everything (a chain from 0 would name missing versions).
            forced = self.snapshots.take_now(self._db(), new_version, self.num_keys,
                                             changelog.file.name)
            chain = self._chain_with(changelog)
        elif self._beyond_replay_bound(chain):
            self.snapshots.drain()
            chain = self._chain_with(changelog)
            if self._beyond_replay_bound(chain):
                # Published before the manifest (the manifest names it), so it carries this
                # attempt's lineage: if the attempt loses, no winner ever starts from it.
                forced = self.snapshots.take_now(self._db(), new_version, self.num_keys,
                                                 changelog.file.name)
                self.metrics.forced_snapshots += 1
                chain = self._chain_with(changelog)
        base = self.snapshots.base
        manifest = Manifest(new_version, None if base is None else base.version, chain,
                            self.num_keys, self.column_families(),
                            base_lineage="" if base is None else base.lineage,
                            writer=self.writer, epoch=self.epoch)
        if not self.checkpoint.publish_manifest(manifest):
            # Another attempt of this run published first; its files are the version now,
            # and this attempt's own files (changelog, forced snapshot) serve nobody.
            if forced is not None:
                self.checkpoint.withdraw_snapshot(forced.descriptor, set(forced.reused))
            self.checkpoint.discard_unpublished([changelog.file])
            self.snapshots.adopt(None)
            self.abort_attempt()
            self.metrics.lost_publish_races += 1
            return {"published": False}
        self.loaded_version, self.manifest = new_version, manifest
        self.pending.clear()
        self.empty_base = False
        if len(chain) >= self.opts.snapshot_interval and not self.snapshots.in_flight():
            self.snapshots.start(self._db(), new_version, self.num_keys, manifest.lineage)
        self.metrics.commits += 1
        self.metrics.commit_ms += (time.perf_counter() - started) * 1000
        return {"published": True, "num_keys": self.num_keys}

    def _refuse_if_superseded(self, new_version: int) -> None:
        """Writers are fenced by run epoch (manifest.py): once a later run of the query has
        published any version of this store, an attempt of an earlier run (a zombie task
        that outlived its run, whose working copy may hold a version that run replaced)
        publishes nothing more. It fails rather than reports a lost race: a current run
        that met this (its epochs mislaid) must not go on as if its state were committed."""
        newest = self.checkpoint.newest_epoch()
        if newest > self.epoch:
            self.abort_attempt()
            raise StateStoreError(
                f"{self.name}: version {new_version} of run epoch {self.epoch} is not "
                f"published: a later run of this query (run epoch {newest}) has published "
                f"state at {self.checkpoint.storage.url} since; this attempt belongs to an "
                "earlier run. (If no other run exists, the query's run epochs under "
                "<checkpoint>/_pyrocks_runs/ were removed: restore them, or restore the "
                "query into a new checkpoint.)")

    def abort_attempt(self) -> None:
        """Drops the working copy's uncommitted writes and its version: the next load
        rebuilds from durable storage."""
        self.loaded_version, self.manifest = None, None
        self.pending.clear()
        self.empty_base = False

    def _chain_with(self, changelog: Changelog) -> list[Changelog]:
        """The changelogs to replay after the newest published snapshot, ending with ours.

        Our own changelog always stays in the manifest, so every version keeps the record
        of its own change even when a snapshot of it exists.
        """
        base = self.snapshots.latest
        previous = self.manifest.changelogs_after(base) if self.manifest else []
        return [*previous, changelog]

    def _beyond_replay_bound(self, chain: list[Changelog]) -> bool:
        replay = [c for c in chain if c.version > (self.snapshots.latest or 0)]
        return (len(replay) > self.opts.max_replay_versions
                or sum(c.file.size for c in replay) > self.opts.max_replay_bytes)

    def finish(self) -> None:
        """Completes uploads in flight and makes sure the last committed version has a
        snapshot (the final checkpoint), so it loads with no replay. A dirty working copy
        (an uncommitted batch) is not snapshotted: only committed state is ever written."""
        self.snapshots.drain()
        if self.snapshots.latest != self.loaded_version:
            self.snapshot_now()

    def snapshot_now(self, full: bool = False) -> None:
        """Snapshots the loaded committed version on this thread; `full` references no
        earlier file (every file becomes this snapshot's own, through duplicate())."""
        version = self.loaded_version
        if version and self.manifest and not self.pending:
            self.snapshots.take_now(self._db(), version, self.num_keys, self.manifest.lineage,
                                    full)

    def reset_metrics(self) -> None:
        """Starts the counters of a new batch (customMetrics report per batch); `failures`
        too restarts, so a finish reports the failed uploads since the last load only."""
        with self._metrics_lock:
            self.metrics = Metrics()
            self.failures = []

    def _snapshot_published(self, stats: UploadStats) -> None:
        with self._metrics_lock:
            self.metrics.add_upload(stats)

    def _snapshot_failed(self, message: str) -> None:
        with self._metrics_lock:
            self.metrics.snapshot_failures += 1
            self.failures.append(message)

    def _db(self) -> Rdict:
        assert self.db is not None
        return self.db

    def abort(self) -> None:
        if self.pending:
            self.loaded_version, self.manifest = None, None
            self.pending.clear()

    # ---- maintenance and metrics -------------------------------------------------------

    def collect_garbage(self, min_versions_to_retain: int) -> int:
        # Our own upload in flight is not referenced yet: let it publish first. (Other
        # processes' uploads are protected by the orphan margin.)
        self.snapshots.drain()
        plan = self.checkpoint.collect_garbage(min_versions_to_retain,
                                               self.opts.orphan_margin_seconds)
        self.metrics.gc_files_deleted += plan.files_deleted
        return plan.files_deleted

    def upload_lag(self) -> int:
        """Committed versions not yet covered by a published snapshot."""
        return (self.loaded_version or 0) - (self.snapshots.latest or 0)

    def memory_bytes(self) -> int:
        if self.db is None:
            return 0
        total = 0
        for prop in ("rocksdb.cur-size-all-mem-tables", "rocksdb.estimate-table-readers-mem"):
            total += self.db.property_int_value(prop) or 0
        return total

    def close(self) -> None:
        """Releases the working copy. Never writes: call `finish` first for a final snapshot."""
        self.snapshots.drain()
        self._close_db()
        shutil.rmtree(self.local_dir, ignore_errors=True)


class _RecordBatch:
    """Puts and deletes collected into one RocksDB WriteBatch: one pass through RocksDB's
    write path per run of records instead of one per record. Invariant: whatever reads the
    working copy calls `flush` first, so every read sees all records before it."""

    def __init__(self, store: VersionedStore) -> None:
        self.store = store
        self.batch = WriteBatch(raw_mode=True)
        self.handles: dict[str, ColumnFamily] = {}

    def put(self, cf: str, key: bytes, value: bytes) -> None:
        if cf == DEFAULT_CF:
            self.batch.put(key, value)
        else:
            self.batch.put(key, value, self._handle(cf))

    def delete(self, cf: str, key: bytes) -> None:
        if cf == DEFAULT_CF:
            self.batch.delete(key)
        else:
            self.batch.delete(key, self._handle(cf))

    def flush(self) -> None:
        if not self.batch.is_empty():
            assert self.store.db is not None
            self.store.db.write(self.batch, self.store.write_options)  # consumes the batch
            self.batch = WriteBatch(raw_mode=True)

    def _handle(self, cf: str) -> ColumnFamily:
        handle = self.handles.get(cf)
        if handle is None:
            self.store._cf(cf)  # a clear error for a column family that does not exist
            assert self.store.db is not None
            handle = self.handles[cf] = self.store.db.get_column_family_handle(cf)
        return handle

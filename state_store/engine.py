"""A versioned key-value store on rocksdict: one per (operator, partition, store name).

The working copy is a local RocksDB. Writes go straight into it (so gets, iterators and
scans see them natively) and their records are kept as the pending changelog. Invariant:
`loaded_version` is not None only while the working copy equals that committed version
plus exactly the pending records; anything that breaks it (abort, a failed write, a lost
publish race) sets it to None and the next load rebuilds from durable storage.
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rocksdict import Checkpoint as RocksCheckpoint
from rocksdict import Options, Rdict, WriteOptions

from . import records
from .checkpoint import Checkpoint
from .errors import StateStoreError
from .manifest import Manifest
from .options import StoreOptions
from .records import DEFAULT_CF, Op


@dataclass
class Metrics:
    """Counters since the store was opened, reported through the shim's customMetrics."""

    commits: int = 0
    commit_ms: float = 0.0
    changelog_bytes: int = 0
    snapshots: int = 0
    snapshot_bytes: int = 0
    loads: int = 0
    load_ms: float = 0.0
    replayed_versions: int = 0
    rebuilds: int = 0
    lost_publish_races: int = 0
    gc_files_deleted: int = 0
    round_trips: int = 0


def _rocks_options(opts: StoreOptions) -> Options:
    o = Options(raw_mode=True)
    o.create_if_missing(True)
    o.set_write_buffer_size(opts.write_buffer_mb << 20)
    return o


class VersionedStore:
    def __init__(self, name: str, checkpoint: Checkpoint, local_dir: Path,
                 opts: StoreOptions) -> None:
        self.name = name
        self.checkpoint = checkpoint
        self.local_dir = local_dir
        self.opts = opts
        self.metrics = Metrics()
        self.db: Rdict | None = None
        self.cfs: dict[str, Rdict] = {}
        self.loaded_version: int | None = None
        self.manifest: Manifest | None = None  # of loaded_version; None for version 0
        self.pending = bytearray()
        self.num_keys = 0
        self._write_opts = WriteOptions()
        self._write_opts.disable_wal = True  # the changelog, not the WAL, makes writes durable

    # ---- loading ------------------------------------------------------------------------

    def load(self, version: int) -> None:
        if version < 0:
            raise StateStoreError(f"cannot load negative version {version} of {self.name}")
        if self.loaded_version == version and not self.pending:
            return  # the working copy already is this version (the common batch-to-batch case)
        started = time.perf_counter()
        self.loaded_version = None
        self._close_db()
        manifest = None if version == 0 else self.checkpoint.read_manifest(version)
        if version == 0:
            self.checkpoint.refuse_foreign_state()
        self._rebuild(manifest)
        self.manifest, self.loaded_version = manifest, version
        self.metrics.loads += 1
        self.metrics.load_ms += (time.perf_counter() - started) * 1000

    def _rebuild(self, manifest: Manifest | None) -> None:
        db_dir = self.local_dir / f"db-{uuid.uuid4().hex}"
        shutil.rmtree(self.local_dir, ignore_errors=True)
        self.local_dir.mkdir(parents=True)
        if manifest and manifest.snapshot:
            self.checkpoint.download_snapshot(manifest.snapshot, db_dir)
        self._open_db(db_dir)
        self.num_keys = manifest.num_keys if manifest else 0
        for changelog in manifest.changelogs if manifest else []:
            self._apply(self.checkpoint.read_changelog(changelog), count_keys=False)
            self.metrics.replayed_versions += 1
        self.pending.clear()
        if manifest:
            self.num_keys = manifest.num_keys
        self.metrics.rebuilds += 1

    def _open_db(self, db_dir: Path) -> None:
        options = _rocks_options(self.opts)
        existing = Rdict.list_cf(str(db_dir), options) if db_dir.exists() else [DEFAULT_CF]
        self.db = Rdict(str(db_dir), options,
                        column_families={cf: options for cf in existing if cf != DEFAULT_CF})
        self.db.set_write_options(self._write_opts)
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
            self._apply(payload, count_keys=self.opts.track_num_keys)
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
        for rec in records.decode(payload):
            if rec.op is Op.PUT:
                target = self._cf(rec.cf)
                if count_keys and not self._exists(target, rec.key):
                    self.num_keys += 1
                target[rec.key] = rec.value
            elif rec.op is Op.DELETE:
                target = self._cf(rec.cf)
                if count_keys and self._exists(target, rec.key):
                    self.num_keys -= 1
                target.delete(rec.key)
            elif rec.op is Op.MERGE:
                target = self._cf(rec.cf)
                old = target.get(rec.key)
                if old is None and count_keys:
                    self.num_keys += 1
                target[rec.key] = rec.value if old is None else old + rec.value
            elif rec.op is Op.DELETE_RANGE:
                self._delete_range(rec.cf, rec.key, rec.value, count_keys)
            elif rec.op is Op.CREATE_CF:
                self._create_cf(rec.cf)
            elif rec.op is Op.DROP_CF:
                self._drop_cf(rec.cf, count_keys)

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
            self.cfs[cf] = self.db.create_column_family(cf, _rocks_options(self.opts))

    def _drop_cf(self, cf: str, count_keys: bool) -> None:
        if cf in self.cfs and cf != DEFAULT_CF:
            if count_keys:
                self.num_keys -= sum(1 for _ in self.scan(cf, None, None, None))
            del self.cfs[cf]
            assert self.db is not None
            self.db.drop_column_family(cf)

    # ---- committing ---------------------------------------------------------------------

    def commit(self, new_version: int) -> dict[str, int | bool]:
        self._require_loaded()
        assert self.loaded_version is not None
        if new_version != self.loaded_version + 1:
            raise StateStoreError(
                f"{self.name}: cannot commit version {new_version} on top of version "
                f"{self.loaded_version}"
            )
        started = time.perf_counter()
        manifest = self._next_manifest(new_version)
        if not self.checkpoint.publish(manifest):
            # Another attempt of this batch published first; its files are the version now.
            self.checkpoint.discard_unpublished(self._new_files(manifest))
            self.loaded_version, self.manifest = None, None
            self.pending.clear()
            self.metrics.lost_publish_races += 1
            return {"published": False}
        self.loaded_version, self.manifest = new_version, manifest
        self.pending.clear()
        self.metrics.commits += 1
        self.metrics.commit_ms += (time.perf_counter() - started) * 1000
        return {"published": True, "num_keys": self.num_keys}

    def _next_manifest(self, version: int) -> Manifest:
        chain = list(self.manifest.changelogs) if self.manifest else []
        if len(chain) + 1 >= self.opts.snapshot_interval:
            snapshot, chain = self._snapshot(version), []
        else:
            snapshot = self.manifest.snapshot if self.manifest else None
            changelog = self.checkpoint.write_changelog(version, bytes(self.pending))
            self.metrics.changelog_bytes += changelog.file.size
            chain.append(changelog)
        return Manifest(version, snapshot, chain, self.num_keys, self.column_families())

    def _new_files(self, manifest: Manifest) -> list:
        previous = {f.name for f in self.manifest.files()} if self.manifest else set()
        return [f for f in manifest.files() if f.name not in previous]

    def _snapshot(self, version: int):
        assert self.db is not None
        target = self.local_dir / f"checkpoint-{uuid.uuid4().hex}"
        RocksCheckpoint(self.db).create_checkpoint(str(target))
        try:
            snapshot = self.checkpoint.upload_snapshot(version, target)
        finally:
            shutil.rmtree(target, ignore_errors=True)
        self.metrics.snapshots += 1
        self.metrics.snapshot_bytes += sum(f.size for f in snapshot.files)
        return snapshot

    def abort(self) -> None:
        if self.pending:
            self.loaded_version, self.manifest = None, None
            self.pending.clear()

    # ---- maintenance and metrics -------------------------------------------------------

    def collect_garbage(self, min_versions_to_retain: int) -> int:
        deleted = self.checkpoint.collect_garbage(min_versions_to_retain).files_deleted
        self.metrics.gc_files_deleted += deleted
        return deleted

    def memory_bytes(self) -> int:
        if self.db is None:
            return 0
        total = 0
        for prop in ("rocksdb.cur-size-all-mem-tables", "rocksdb.estimate-table-readers-mem"):
            total += self.db.property_int_value(prop) or 0
        return total

    def close(self) -> None:
        self._close_db()
        shutil.rmtree(self.local_dir, ignore_errors=True)

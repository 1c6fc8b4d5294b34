"""The working copy of one store: a local RocksDB that write records are applied to.

Gets, scans and iterators read it natively; the engine (engine.py) decides which version it
holds. It keeps the store's exact key count as records apply (the shim says, in each
record, whether the key existed when it knew; otherwise one lookup tells). RocksDB's own
write-ahead log is off: the changelog, not the WAL, makes writes durable.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from itertools import islice
from pathlib import Path

from rocksdict import (
    BlockBasedOptions,
    Cache,
    Checkpoint,
    ColumnFamily,
    DBCompressionType,
    Env,
    Options,
    Rdict,
    WriteBatch,
    WriteOptions,
)

from ..errors import StateStoreError
from ..format import records
from ..format.records import DEFAULT_CF, EXISTED, KNOWN, OP_MASK, Op
from ..options import StoreOptions
from .deferred_writes import DeferredWrites
from .memory import RocksMemory

# Plain ints for the per-record loop: reading an IntEnum member costs ~130 ns on 3.11.
_PUT, _DELETE = int(Op.PUT), int(Op.DELETE)
_PUT_OR_DELETE = frozenset((_PUT, _DELETE))  # applied through the WriteBatch
# How a put or delete whose op byte says whether its key existed (KNOWN set) changes the
# key count, by that byte: a new key +1, a removed one -1.
_KEY_COUNT_CHANGE = tuple(
    1 if b == _PUT | KNOWN else -1 if b == _DELETE | KNOWN | EXISTED else 0 for b in range(256))
# The op bytes that change it, for counting a frame's op bytes at once (`_defer`).
_COUNT_CHANGING = tuple((bytes([b]), change) for b, change in enumerate(_KEY_COUNT_CHANGE)
                        if change)
# The op bytes of records that may be applied behind the session (deferred_writes.py), by
# whether keys are counted: then each must say whether its key existed.
_DEFERRABLE = {count: bytes(op | flags for op in _PUT_OR_DELETE
                            for flags in ((KNOWN, KNOWN | EXISTED) if count
                                          else (0, KNOWN, EXISTED, KNOWN | EXISTED)))
               for count in (False, True)}
_DEFERRED_BATCH = 256  # records: ~0.3 ms of RocksDB's write path here
# Recorded in manifests when key counting is off: the count is unknown, not zero.
UNTRACKED = -1


# Spark's names (options.COMPRESSIONS) for rocksdict's.
_COMPRESSION = {"none": DBCompressionType.none(), "snappy": DBCompressionType.snappy(),
                "zlib": DBCompressionType.zlib(), "bzip2": DBCompressionType.bz2(),
                "lz4": DBCompressionType.lz4(), "lz4hc": DBCompressionType.lz4hc(),
                "zstd": DBCompressionType.zstd()}


def rocks_options(opts: StoreOptions, memory: RocksMemory | None) -> Options:
    """One store's RocksDB options, shared by all its column families."""
    o = Options(raw_mode=True)
    o.create_if_missing(True)
    o.set_write_buffer_size(opts.write_buffer_mb << 20)
    o.set_compression_type(_COMPRESSION[opts.compression])
    o.set_max_open_files(opts.max_open_files)
    table = BlockBasedOptions()
    table.set_block_size(opts.block_size_kb << 10)
    if memory is not None:
        memory.apply(o, table)
    else:
        table.set_block_cache(Cache(opts.block_cache_mb << 20))
    o.set_block_based_table_factory(table)
    return o


def let_compactions_yield() -> None:
    """Runs this process's RocksDB compactions (the default environment's LOW pool) at the
    lowest CPU priority (nice 19), so they take what the tasks leave of the cores instead
    of an equal share. They are background work nobody waits for; flushes (HIGH pool),
    which a snapshot waits for, keep their priority. A compaction that falls behind far
    enough stalls its store's writes, and a stalled writer leaves the core to it. Not for
    a worker whose stores compact on commit: each commit waits for a compaction then (the
    shim gives those stores workers of their own). Measured at 13M session windows on 2
    cores: compactions took up to a core beside the tasks (docs/benchmarks.md)."""
    Env().lower_thread_pool_cpu_priority()


class WorkingCopy:
    def __init__(self, name: str, opts: StoreOptions, memory: RocksMemory | None) -> None:
        self.name = name
        self.opts = opts
        self.memory = memory  # shared with the worker's other stores; None = RocksDB defaults
        self.db: Rdict | None = None
        # Made once per store: without a memory bound it holds the store's own block cache,
        # which its column families share.
        self.options = rocks_options(opts, memory)
        self.cfs: dict[str, Rdict] = {}
        self.db_dir: Path | None = None
        self.num_keys = 0  # UNTRACKED when counting is off
        self.write_options = WriteOptions()
        self.write_options.disable_wal = True
        self.deferred = DeferredWrites(name)

    # ---- opening and closing ------------------------------------------------------------

    def open(self, db_dir: Path) -> None:
        """Opens the RocksDB in `db_dir` (a downloaded snapshot), or a new empty one."""
        options = self.options
        existing = Rdict.list_cf(str(db_dir), options) if db_dir.exists() else [DEFAULT_CF]
        self.db_dir = db_dir
        self.db = Rdict(str(db_dir), options,
                        column_families={cf: options for cf in existing if cf != DEFAULT_CF})
        self.db.set_write_options(self.write_options)
        self.cfs = {cf: self.db.get_column_family(cf) for cf in existing if cf != DEFAULT_CF}
        self.cfs[DEFAULT_CF] = self.db

    def close(self) -> None:
        """Closes RocksDB, whose close flushes the memtables (the WAL is off) holding the GIL;
        so they are flushed first by `flush`, which waits without it (`checkpoint` says why).
        Deferred writes are waited for, and a failed one forgotten: the copy is gone."""
        self.deferred.quiesce()
        with contextlib.suppress(Exception):  # the close's own flush reports it
            self._flush_memtables()  # none to flush when closed: `cfs` is empty then
        self.cfs.clear()  # a column family's handle would keep the database open
        if self.db is not None:
            self.db.close()
            self.db = None

    def rocksdb(self) -> Rdict:
        assert self.db is not None, "the working copy is open"
        return self.db

    def checkpoint(self, target: Path) -> None:
        """A RocksDB checkpoint of the working copy in `target`, a new directory: hard links
        to its SST files and copies of the rest. The caller lets nothing write meanwhile.

        A checkpoint flushes the memtables first (the WAL is off), and the binding's checkpoint
        holds the GIL throughout: about 7 ms a store in which no other session of this worker
        is served. Its `flush` waits with the GIL released, so the memtables are flushed by
        it first; the checkpoint is left links and small copies (about 2 ms). Unlike a
        close, it never waits for a compaction RocksDB is running on the copy."""
        self.deferred.settle()
        self.checkpoint_applied(target)

    def checkpoint_applied(self, target: Path) -> None:
        """`checkpoint` for a caller the frames sent so far are applied for: a job of the
        apply thread itself (snapshots.py queues one there), whose `settle` would wait
        for itself."""
        self._flush_memtables()
        Checkpoint(self.rocksdb()).create_checkpoint(str(target))

    def start_flush(self) -> None:
        """Hands the memtables to RocksDB's flush thread and returns: a worker ending several
        stores flushes the next one's while it snapshots and uploads this one's
        (worker.end_stores). `checkpoint`'s own flush then finds it done, or waits for it."""
        self.deferred.settle()
        self._flush_memtables(wait=False)

    def _flush_memtables(self, wait: bool = True) -> None:
        for family in self.cfs.values():
            family.flush(wait)

    def count_keys(self, recorded: int) -> None:
        """Sets the key count of a freshly loaded version: the one its manifest `recorded`,
        unless that was written with counting off and counting is on now (then count once)."""
        if not self.opts.track_num_keys:
            self.num_keys = UNTRACKED
        elif recorded != UNTRACKED:
            self.num_keys = recorded
        else:
            self.num_keys = sum(1 for cf in self.cfs for _ in self.scan(cf, None, None, None))

    # ---- reading ------------------------------------------------------------------------

    def cf(self, cf: str) -> Rdict:
        try:
            return self.cfs[cf]
        except KeyError:
            raise StateStoreError(f"column family {cf!r} does not exist in {self.name}") from None

    def get(self, cf: str, key: bytes) -> bytes | None:
        self.deferred.settle()
        return self.cf(cf).get(key)

    def scan(self, cf: str, start: bytes | None, stop: bytes | None,
             prefix: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """Pairs in key order from `start` (inclusive) to `stop` (exclusive) or within `prefix`.

        A RocksDB iterator reads the state as of its creation, so writes made while the
        caller iterates (Spark allows them) do not disturb the iteration.
        """
        # items() steps the iterator in RocksDB's binding, one call per pair (a third
        # faster than key(), value() and next() from here); a whole family is its items().
        self.deferred.settle()
        if start is None and stop is None and prefix is None:
            return iter(self.cf(cf).items())
        return self._bounded(cf, start, stop, prefix)

    def _bounded(self, cf: str, start: bytes | None, stop: bytes | None,
                 prefix: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        for key, value in self.cf(cf).items(from_key=prefix if prefix is not None else start):
            if (prefix is not None and not key.startswith(prefix)) or (
                stop is not None and key >= stop
            ):
                return
            yield key, value

    def column_families(self) -> list[str]:
        return sorted(self.cfs)

    def compact(self) -> None:
        """Compacts every column family: what compactOnCommit asks of each commit."""
        self.deferred.settle()
        for handle in self.cfs.values():
            handle.compact_range(None, None)

    def memory_bytes(self) -> int:
        if self.db is None:
            return 0
        return sum(self.db.property_int_value(prop) or 0
                   for prop in ("rocksdb.cur-size-all-mem-tables",
                                "rocksdb.estimate-table-readers-mem"))

    # ---- applying write records ---------------------------------------------------------

    def apply(self, payload: bytes, count_keys: bool) -> None:
        """Applies write records: now, or, for a frame of puts and deletes whose key count
        needs no lookup, behind the caller (deferred_writes.py)."""
        run = records.uniform(payload)
        if run is not None and self._defer(run, len(payload), count_keys):
            return
        self.deferred.settle()
        if run is not None:
            self._apply_run(run.cf, run.records, count_keys)
            return
        batch = _RecordBatch(self)
        for flagged, cf, key, value in records.decode(payload):
            op = flagged & OP_MASK
            if op in _PUT_OR_DELETE:
                if count_keys:
                    self.num_keys += _KEY_COUNT_CHANGE[self._known(flagged, cf, key, batch)]
                if op == _PUT:
                    batch.put(cf, key, value)
                else:
                    batch.delete(cf, key)
            else:
                batch.flush()  # the other operations read or reshape the working copy
                self._apply_other(op, cf, key, value, count_keys)
                batch = _RecordBatch(self)  # column families may have changed: fresh handles
        batch.flush()

    def _defer(self, run: records.UniformRun, size: int, count_keys: bool) -> bool:
        """Queues `run` if it is puts and deletes only, of a column family that exists, each
        saying whether its key existed (when keys are counted): then the count changes by
        the op bytes alone, here, and nothing of it needs RocksDB before a read.

        A frame under `defer_min_bytes` ends a task's writes before a request: a read, or
        the commit. On an idle queue it is applied now, since a read would wait for its
        handover. Behind waiting frames it is queued too: applying it now would wait for
        them all (`settle`), which a read behind it waits for anyway and a commit need not."""
        if (size < self.opts.defer_min_bytes and not self.deferred.busy) \
                or run.cf not in self.cfs \
                or run.ops.translate(None, _DEFERRABLE[count_keys]):
            return False
        if count_keys:
            self.num_keys += sum(change * run.ops.count(op) for op, change in _COUNT_CHANGING)
        self.deferred.submit(size, lambda: self._apply_deferred(run.cf, run.records))
        return True

    def _apply_deferred(self, cf: str, run: Iterator[tuple[int, bytes, bytes]]) -> None:
        """A deferred run's puts and deletes, in WriteBatches of `_DEFERRED_BATCH` records:
        RocksDB's write holds the GIL throughout (the binding's), so the session thread,
        which needs it to take the next frame or a commit, waits at most one of them."""
        handle = _RecordBatch(self).handle(cf)
        db = self.rocksdb()
        put, delete = WriteBatch.put, WriteBatch.delete
        while True:
            self.deferred.step()
            batch = WriteBatch(raw_mode=True)
            for flagged, key, value in islice(run, _DEFERRED_BATCH):
                if flagged & OP_MASK == _PUT:
                    put(batch, key, value, handle)
                else:
                    delete(batch, key, handle)
            if batch.is_empty():
                return
            db.write(batch, self.write_options)

    def _apply_run(self, cf: str, run: Iterator[tuple[int, bytes, bytes]],
                   count_keys: bool) -> None:
        """`apply` for a payload of one column family and one record shape
        (`records.uniform`): the same effect, with the family looked up once rather than
        per record, and RocksDB's writers called unbound on the WriteBatch being filled."""
        batch = _RecordBatch(self)
        handle = batch.handle(cf)
        put, delete = WriteBatch.put, WriteBatch.delete
        for flagged, key, value in run:
            op = flagged & OP_MASK
            if op in _PUT_OR_DELETE:
                if count_keys:
                    self.num_keys += _KEY_COUNT_CHANGE[self._known(flagged, cf, key, batch)]
                if op == _PUT:
                    put(batch.batch, key, value, handle)
                else:
                    delete(batch.batch, key, handle)
            else:
                batch.flush()
                self._apply_other(op, cf, key, value, count_keys)
                batch = _RecordBatch(self)
                handle = batch.handle(cf)
        batch.flush()

    def _apply_other(self, op: int, cf: str, key: bytes, value: bytes, count_keys: bool) -> None:
        if op == Op.MERGE:
            target = self.cf(cf)
            old = target.get(key)
            if old is None and count_keys:
                self.num_keys += 1
            target[key] = value if old is None else old + value
        elif op == Op.DELETE_RANGE:
            if count_keys:
                self.num_keys -= sum(1 for _ in self.scan(cf, key, value, None))
            self.cf(cf).delete_range(key, value)
        elif op == Op.CREATE_CF:
            if cf not in self.cfs:
                self.cfs[cf] = self.rocksdb().create_column_family(
                    cf, self.options)
        elif op == Op.DROP_CF and cf in self.cfs and cf != DEFAULT_CF:
            if count_keys:
                self.num_keys -= sum(1 for _ in self.scan(cf, None, None, None))
            del self.cfs[cf]
            self.rocksdb().drop_column_family(cf)

    def _known(self, flagged: int, cf: str, key: bytes, batch: _RecordBatch) -> int:
        """The record's op byte with KNOWN set, and EXISTED if `key` existed before it: the
        shim's word when it knew, else one lookup (after flushing `batch`, so that it sees
        the records before this one)."""
        if flagged & KNOWN:
            return flagged
        batch.flush()
        target = self.cf(cf)
        existed = target.key_may_exist(key) and target.get(key) is not None
        return flagged | KNOWN | (EXISTED if existed else 0)


class _RecordBatch:
    """Puts and deletes collected into one RocksDB WriteBatch: one pass through RocksDB's
    write path per run of records instead of one per record. Invariant: whatever reads the
    working copy calls `flush` first, so every read sees all records before it."""

    def __init__(self, copy: WorkingCopy) -> None:
        self.copy = copy
        self.batch = WriteBatch(raw_mode=True)
        self.handles: dict[str, ColumnFamily] = {}

    def put(self, cf: str, key: bytes, value: bytes) -> None:
        self.batch.put(key, value, self.handle(cf))

    def delete(self, cf: str, key: bytes) -> None:
        self.batch.delete(key, self.handle(cf))

    def handle(self, cf: str) -> ColumnFamily | None:
        """What RocksDB's writers take for `cf`: None for the default family, else its
        handle, looked up once per batch."""
        if cf == DEFAULT_CF:
            return None
        handle = self.handles.get(cf)
        if handle is None:
            self.copy.cf(cf)  # a clear error for a column family that does not exist
            handle = self.handles[cf] = self.copy.rocksdb().get_column_family_handle(cf)
        return handle

    def flush(self) -> None:
        if not self.batch.is_empty():
            self.copy.rocksdb().write(self.batch, self.copy.write_options)  # consumes it
            self.batch = WriteBatch(raw_mode=True)

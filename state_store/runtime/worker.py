"""The worker process: serves stores to the shim over a Unix domain socket.

One thread per connection; one connection serves one store (OPEN first), and is one
session, numbered by the worker (OPEN answers its number; END_STORES names sessions by it).
RocksDB is opened only after the process starts (never inherited across fork). The worker
exits when its parent JVM goes away (EOF on stdin), removing its socket and working
directories.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import json
import os
import shutil
import socket
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .. import options as options_mod
from ..errors import ClaimedCheckpointError, ProtocolError
from ..format.restores import ClaimMarker, claimed_by_other, describe_claim
from ..format.seeding import apply_seed, read_seed, staged_path
from ..format.spark_checkpoint import STATE
from ..format.storage import ConditionProbes, Storage, open_storage
from ..format.storage.hadoop import options_for
from ..format.store_root import StoreRoot, query_dir
from .chunks import ScanChunks, one_chunk
from .engine import VersionedStore
from .gc_pacing import GcPacing
from .idle_snapshots import IdleSnapshots
from .memory import RocksMemory, map_arena_blocks_apart
from .protocol import (
    CHANGE_HEAD,
    CLOSING,
    HEADER,
    I32,
    I64,
    MORE,
    NO_RESPONSE,
    SNAPSHOT_AND_VERSION,
    U16,
    U32,
    Request,
    ScanMode,
    Status,
)
from .storage_requests import IN_FLIGHT, StorageRequests
from .teardown import Release, Teardown, release_now
from .working_copy import let_compactions_yield

_SEND_LIMIT = 1 << 20
# How long a thread waiting for the GIL waits before asking for it (CPython's default: 5
# ms). Writes applied behind a session hold it in RocksDB's write path; a session taking
# its next frame or a commit should not wait that long for each of its steps.
SWITCH_INTERVAL_S = 0.0005


@dataclass(frozen=True)
class WorkerShared:
    """What a worker's sessions share: made once by main(), handed to each session."""

    data_dir: Path  # the sessions' working copies live under it
    uploads: Executor  # snapshot uploads, one at a time
    memory: RocksMemory | None = None  # the RocksDB memory bound of all the stores
    probes: ConditionProbes = field(default_factory=ConditionProbes)  # one per endpoint
    idle: IdleSnapshots | None = None  # the idle-snapshot scheduler
    release: Release = release_now  # of a closed store's working copy: the Teardown's
    # A store's requests to an object store that need not wait for one another
    # (storage_requests.py); None: in line.
    requests: Executor | None = None
    # The open sessions by id, each one's own among them (END_STORES ends them).
    sessions: dict[int, Session] = field(default_factory=dict)


class Session:
    """The state of one connection: its store, its open iterators, a deferred write error."""

    def __init__(self, conn: socket.socket, shared: WorkerShared, session_id: int = 0) -> None:
        self.id = session_id
        self.conn = conn
        self.shared = shared
        self.lock = threading.Lock()  # one request at a time, and none during final snapshots
        self.last_request = time.monotonic()  # the idle-snapshot scheduler's sign of activity
        self.store: VersionedStore | None = None
        self.gc_pacing: GcPacing | None = None  # the open store's, from its first maintenance
        self.iterators: dict[int, ScanChunks] = {}
        self.deferred_error: str | None = None
        self.chunk_bytes = 1 << 20
        self.location: Storage | None = None  # the store's place under Spark's state/
        self.query_id = ""

    # ---- framing ------------------------------------------------------------------------

    def serve(self, on_closed: Callable[[Session], None]) -> None:
        reader = self.conn.makefile("rb", buffering=1 << 18)
        try:
            while True:
                header = reader.read(HEADER.size)
                if len(header) < HEADER.size:
                    return  # the shim closed the connection
                length, kind = HEADER.unpack(header)
                if length < 1:  # a frame counts its type byte: nothing valid is shorter
                    self.reply(Status.ERROR, f"malformed frame of length {length}".encode())
                    return
                body = reader.read(length - 1)
                if len(body) != length - 1:
                    return
                with self.lock:
                    self.last_request = time.monotonic()
                    self.handle(kind, body)
        finally:
            with self.lock:
                self.close_store()
            self.conn.close()
            on_closed(self)

    def handle(self, kind: int, body: bytes) -> None:
        try:
            request = Request(kind)
        except ValueError:
            self.reply(Status.ERROR, f"unknown request type {kind}".encode())
            return
        if request in NO_RESPONSE:
            try:
                self.dispatch(request, body)
            except Exception as e:  # reported by the next request that has a response
                self.deferred_error = self.deferred_error or _describe(e)
            return
        if self.deferred_error is not None:
            message, self.deferred_error = self.deferred_error, None
            self.reply(Status.ERROR, message.encode())
            return
        if self.store is not None:
            self.store.metrics.round_trips += 1
        try:
            result = self.dispatch(request, body)
        except Exception as e:
            self.reply(Status.ERROR, _describe(e).encode())
            return
        self.reply(Status.OK, result or b"")

    def reply(self, status: Status, body: bytes | bytearray) -> None:
        # Header and body leave in one call without being joined: a chunk is a megabyte, and
        # a copy of it (into pages mapped afresh: memory.map_arena_blocks_apart) cost the
        # worker a sixth of its time per streamed pair.
        header = HEADER.pack(len(body) + 1, status)
        sent = self.conn.sendmsg([header, body])
        if sent < len(header) + len(body):  # the socket took part of it (rare): copy the rest
            self.conn.sendall((header + body)[sent:])

    # ---- requests -----------------------------------------------------------------------

    def dispatch(self, request: Request, body: bytes) -> bytes | bytearray | None:
        if request is Request.OPEN:
            return self.open(json.loads(body))
        if request is Request.END_STORES:
            return _json({"failures": self.end_stores(json.loads(body)["sessions"])})
        store = self.require_store()
        if request is Request.WRITES:
            store.write(body)
        elif request is Request.GET:
            cf, key = _split_cf(body, 0)
            value = store.get(cf, key)
            return b"\x00" if value is None else b"\x01" + value
        elif request is Request.ITER_OPEN:
            return self.iter_open(body)
        elif request is Request.READ_AHEAD:
            (limit,) = U32.unpack_from(body, 0)
            cf, key = _split_cf(body, U32.size)
            return one_chunk(store.scan(cf, key, None, None), limit)
        elif request is Request.ITER_NEXT:
            return self.next_chunk(U32.unpack_from(body)[0])
        elif request is Request.ITER_CLOSE:
            self.iterators.pop(U32.unpack_from(body)[0], None)
        elif request is Request.LOAD:
            self.iterators.clear()
            store.reset_metrics()  # customMetrics report per batch: count from each load
            checkpoint_id = body[I64.size:].decode() or None
            unchanged = store.load(I64.unpack_from(body)[0], checkpoint_id)
            return _json({"num_keys": max(store.num_keys, 0), "unchanged": unchanged,
                          "commit_id": store.lineage.commit_id})
        elif request is Request.LOAD_EMPTY:
            self.iterators.clear()
            store.reset_metrics()
            store.load_empty(I64.unpack(body)[0])
            return _json({"num_keys": 0, "unchanged": False})
        elif request is Request.LOAD_FROM_SNAPSHOT:
            self.iterators.clear()
            store.reset_metrics()
            store.load_from_snapshot(*SNAPSHOT_AND_VERSION.unpack(body))
            return _json({"num_keys": max(store.num_keys, 0), "unchanged": False})
        elif request is Request.COMMIT:
            self.iterators.clear()
            answer = store.commit(I64.unpack(body)[0])
            idle = self.shared.idle
            if idle is not None and answer["published"]:
                idle.committed(self, store.opts.snapshot_when_idle_seconds)
            return _json(answer)
        elif request is Request.ABORT:
            self.iterators.clear()
            store.abort()
        elif request is Request.METRICS:
            return _json(self.metrics(store))
        elif request is Request.MAINTAIN:
            return _json({"gc_files_deleted": self.collect_garbage(store, I32.unpack(body)[0])})
        elif request is Request.FINISH:
            if body[:1] == CLOSING:
                return _json({"failures": self.end_store(store)})
            store.finish()
            return _json({"failures": store.failures})
        elif request is Request.CLOSE:
            self.close_store()
        elif request is Request.DROP_CF:
            return b"\x01" if store.drop_cf(body.decode()) else b"\x00"
        elif request is Request.LIST_CF:
            return _json(store.column_families())
        return None

    def end_store(self, store: VersionedStore) -> list[str]:
        """FINISH with CLOSING: the final snapshot, then the close; the failed uploads."""
        store.end()
        self.close_store()
        return store.failures

    def end_stores(self, session_ids: list[int]) -> dict[str, list[str]]:
        """END_STORES: the store of each named session ends, each under its session's lock
        (so never in the middle of a request of its own). A session is named in one such
        request only (the shim hands each store over once: LiveProviders.endRunHere), so
        two of them never wait for each other's locks. Every store's final flush starts
        first, so RocksDB's flush thread works through them while the stores before are
        snapshotted and uploaded: one after another on this thread, or, when a store's
        root is on an object store (where an end mostly waits for round trips) and the
        worker has request threads, side by side (storage_requests.run_all) on threads of
        their own: an end waits for its session's lock, which none of the worker's shared
        request threads may do (a session holding it may be waiting for one of them)."""
        named = {session_id: self if session_id == self.id else self.shared.sessions.get(session_id)
                 for session_id in session_ids}
        stores = [s.store for s in named.values() if s is not None and s.store is not None]
        for session in named.values():
            if session is not None and session.store is not None:
                with self.lock_of(session), contextlib.suppress(Exception):  # its end reports it
                    session.store.start_final_flush()
        remote = self.shared.requests is not None and any(
            store.checkpoint.storage.remote for store in stores)
        with ThreadPoolExecutor(IN_FLIGHT - 1, thread_name_prefix="store-ends") as threads:
            ends = StorageRequests(threads, remote).run_all(
                [functools.partial(self._end_named, session_id, session)
                 for session_id, session in named.items()])
        return dict(ends)

    def _end_named(self, session_id: int, session: Session | None) -> tuple[str, list[str]]:
        """One store's end for `end_stores`: its failures, by its session's id."""
        if session is None:
            return str(session_id), [f"no session {session_id} is open in worker pid {os.getpid()}"]
        with self.lock_of(session):
            try:
                return str(session_id), session.end_store(session.require_store())
            except Exception as e:  # this store's; the others still end
                return str(session_id), [_describe(e)]

    def lock_of(self, session: Session) -> contextlib.AbstractContextManager[object]:
        """`session`'s lock, for a request this session serves: its own this session's
        thread holds already, and waits meanwhile (its END_STORES' ends run on other
        threads too)."""
        return contextlib.nullcontext() if session is self else session.lock

    def snapshot_when_idle(self) -> bool:
        return self.store is None or self.store.snapshot_when_idle()

    def require_store(self) -> VersionedStore:
        if self.store is None:
            raise ProtocolError("no store opened on this connection (OPEN must come first)")
        return self.store

    def open(self, spec: dict) -> bytes:
        opts = options_mod.store_options(spec["options"])
        self.chunk_bytes = opts.iterator_chunk_bytes
        # Unique per session: a reconnect's new session must never share (and so have
        # deleted under it) the working copy an old session is still closing.
        local = self.shared.data_dir / f"{spec['local_name']}-{uuid.uuid4().hex[:8]}"
        self.close_store()
        checkpoint = self.open_checkpoint(spec, opts)
        writer = f"{spec.get('writer', '')} worker pid {os.getpid()}".strip()
        self.store = VersionedStore(
            spec["store_name"], checkpoint, local, opts, self.shared.uploads,
            self.shared.memory, writer, int(spec.get("run_epoch", 0)),
            release=self.shared.release, requests=self.shared.requests)
        ignored = options_mod.ignored_spark_settings(spec["options"])
        return _json({"pid": os.getpid(), "root": checkpoint.storage.url, "session": self.id,
                      # Spark's RocksDB settings with no meaning here: the shim warns once
                      "ignored_settings": ignored,
                      "settings_warning": options_mod.ignored_warning(ignored) if ignored else ""})

    def open_checkpoint(self, spec: dict, opts: options_mod.StoreOptions) -> StoreRoot:
        """The store's durable root: its own under the checkpoint (or rootUrl) per query
        (format/store_root.py), refused if a CLAIM restore took the checkpoint over, and seeded
        from its restore at a restored query's first open (format/seeding.py)."""
        base_url = (opts.root_url.rstrip("/") + "/" + spec["store_path"] if opts.root_url
                    else spec["store_root"])
        hadoop = spec.get("hadoop") or {}  # the query's filesystem settings (hadoop.py)
        base = self.open_storage(base_url, hadoop, opts.root_options if opts.root_url else None)
        query_id = spec.get("query_id", "")
        self.location, self.query_id = None, query_id
        storage = base.child(query_dir(query_id)) if query_id else base
        storage.verify_publish()  # refused at start, never in the middle of a commit
        if not query_id:
            return StoreRoot(storage, spec["store_name"])
        location = self.open_storage(spec["store_root"], hadoop) if opts.root_url else base
        _refuse_claimed(location, query_id)
        seed = read_seed(location)
        seed = seed if seed is not None and seed.query_id == query_id else None
        checkpoint = StoreRoot(storage, spec["store_name"], base,
                                frozenset(seed.roots) if seed else frozenset())
        if seed is not None:
            staged = None
            if opts.root_url:  # `store_path` is <checkpoint hash>/<op>/<part>/<store>
                staged = self.open_storage(opts.root_url, hadoop, opts.root_options).child(
                    staged_path(query_id, spec["store_path"].split("/", 1)[1]))
            apply_seed(location, checkpoint, query_id, staged)
        self.location = location
        return checkpoint

    def open_storage(self, url: str, hadoop: dict[str, str],
                     own: dict | None = None) -> Storage:
        """A root of this worker's: its options from the query's Hadoop settings with
        `own` (rootOptions) over them, its endpoint probed once per worker."""
        return open_storage(url, options_for(url, hadoop, own), self.shared.probes)

    def collect_garbage(self, store: VersionedStore, retain: int) -> int:
        """Spark's maintenance: GC when due (gc_pacing.py), unless a CLAIM restore took this
        checkpoint's state over while the query ran: its files belong to the claiming query
        now, whose GC alone may delete them."""
        pacing = self.gc_pacing = self.gc_pacing or GcPacing(store.opts.orphan_margin_seconds)
        writes = store.record_writes
        if not pacing.due(writes, retain):
            return 0
        if self.location is not None and _claimed_by_other(self.location, self.query_id):
            return 0
        deleted = store.collect_garbage(retain)
        pacing.collected(writes, retain)
        return deleted

    def close_store(self) -> None:
        self.iterators.clear()
        self.gc_pacing = None
        if self.store is not None:
            self.store.close()
            self.store = None

    def iter_open(self, body: bytes) -> bytearray:
        (iter_id,) = U32.unpack_from(body, 0)
        mode = ScanMode(body[4])
        cf, rest = _split_cf(body, 5)
        (a_len,) = U32.unpack_from(rest, 0)
        a = rest[4:4 + a_len]
        (b_len,) = U32.unpack_from(rest, 4 + a_len)
        b = rest[8 + a_len:8 + a_len + b_len]
        store = self.require_store()
        if mode is ScanMode.PREFIX:
            it = store.scan(cf, None, None, a)
        elif mode is ScanMode.RANGE:
            it = store.scan(cf, a or None, b or None, None)
        elif mode is ScanMode.CHANGES:
            changes = store.changes(cf, I64.unpack(a)[0], I64.unpack(b)[0])
            it = ((CHANGE_HEAD.pack(v, op) + key, value) for v, op, key, value in changes)
        else:
            it = store.scan(cf, None, None, None)
        self.iterators[iter_id] = ScanChunks(it)
        return self.next_chunk(iter_id)

    def next_chunk(self, iter_id: int) -> bytearray:
        chunks = self.iterators.get(iter_id)
        if chunks is None:
            raise ProtocolError(f"iterator {iter_id} is not open")
        chunk = chunks.next(self.chunk_bytes)
        if not chunk[0] & MORE:
            del self.iterators[iter_id]
        return chunk

    def metrics(self, store: VersionedStore) -> dict:
        counters = {k: round(v) for k, v in vars(store.metrics).items()}
        # Untracked counts report 0, as Spark's RocksDB provider does with counting off.
        return {**counters, "num_keys": max(store.num_keys, 0),
                "memory_bytes": store.memory_bytes(), "upload_lag_versions": store.upload_lag()}


def _checkpoint_of(location: Storage) -> Storage:
    """The checkpoint holding `location`, a store's place under `<checkpoint>/state/`."""
    return open_storage(location.url.rsplit(f"/{STATE}/", 1)[0], location.options)


def _claimed_by_other(location: Storage, query_id: str) -> ClaimMarker | None:
    return claimed_by_other(_checkpoint_of(location), query_id)


def _refuse_claimed(location: Storage, query_id: str) -> None:
    """A checkpoint whose state a CLAIM restore took over must not run again: its GC would
    delete files the claiming query now owns."""
    claim = _claimed_by_other(location, query_id)
    if claim is not None:
        raise ClaimedCheckpointError(
            f"{describe_claim(_checkpoint_of(location).url, claim)}: running this query would "
            "delete them. Run the restored query, or restore this one anew from a savepoint "
            "of it.")


def _split_cf(body: bytes, offset: int) -> tuple[str, bytes]:
    (cf_len,) = U16.unpack_from(body, offset)
    start = offset + 2
    cf = body[start:start + cf_len].decode() if cf_len else "default"
    return cf, body[start + cf_len:]


def _json(value: object) -> bytes:
    return json.dumps(value).encode()


def _describe(e: Exception) -> str:
    if isinstance(e, options_mod.OptionError) or type(e).__module__.startswith("state_store"):
        return f"{type(e).__name__}: {e}"
    return f"{type(e).__name__}: {e}\n{traceback.format_exc()}"


# ---- process ------------------------------------------------------------------------------


def _watch_parent(sessions: Mapping[int, Session], cleanup: Callable[[], None]) -> None:
    """Exits when the parent JVM closes our stdin (it shut the pool down, or died).

    Before exiting, every open store finishes: uploads in flight complete and the last
    committed version gets its snapshot, so nothing is left half-published.
    """
    try:
        while sys.stdin.buffer.read(1 << 12):
            pass
    finally:
        for session in list(sessions.values()):
            with session.lock:
                if session.store is not None:
                    with contextlib.suppress(Exception):
                        session.store.end()
                session.close_store()
        cleanup()
        os._exit(0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="state_store.runtime.worker")
    parser.add_argument("--socket", required=True, type=Path)
    parser.add_argument("--data-dir", required=True, type=Path)
    parser.add_argument("--log", type=Path, help="our stderr file, removed on a clean exit")
    parser.add_argument("--memory-bound-mb", type=int, default=0,
                        help="RocksDB memory shared by this worker's stores (0: unbounded)")
    parser.add_argument("--compact-on-commit", action="store_true",
                        help="its stores compact at every commit, which waits for RocksDB's "
                             "compaction threads: they keep their CPU priority")
    args = parser.parse_args(argv)
    args.data_dir.mkdir(parents=True, exist_ok=True)
    sys.setswitchinterval(SWITCH_INTERVAL_S)

    teardown = Teardown()

    def cleanup() -> None:
        teardown.release_all()  # the copies of the stores just ended, and any still waiting
        shutil.rmtree(args.data_dir, ignore_errors=True)
        args.socket.unlink(missing_ok=True)
        if args.log:
            args.log.unlink(missing_ok=True)
        for pool_dir in {args.socket.parent, args.data_dir.parent}:
            with contextlib.suppress(OSError):
                pool_dir.rmdir()  # the pool's private directories, once they are empty

    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(args.socket))
    os.chmod(args.socket, 0o600)
    server.listen(64)
    map_arena_blocks_apart()
    if not args.compact_on_commit:
        let_compactions_yield()
    shared = WorkerShared(
        args.data_dir,
        ThreadPoolExecutor(max_workers=1, thread_name_prefix="snapshot-upload"),
        RocksMemory.bounded(args.memory_bound_mb),
        idle=IdleSnapshots(), release=teardown.release,
        # Each store keeps at most storage_requests.IN_FLIGHT of its requests here at once:
        # two stores loading leave none of a third's commit waiting for a thread.
        requests=ThreadPoolExecutor(max_workers=3 * IN_FLIGHT,
                                    thread_name_prefix="storage-requests"))
    sessions = shared.sessions
    threading.Thread(target=_watch_parent, args=(sessions, cleanup), daemon=True).start()
    announce_ready()

    def forget(session: Session) -> None:
        sessions.pop(session.id, None)

    for session_id in itertools.count(1):
        conn, _ = server.accept()
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _SEND_LIMIT)
        session = Session(conn, shared, session_id)
        sessions[session_id] = session
        threading.Thread(target=session.serve, args=(forget,), daemon=True).start()


def announce_ready() -> None:
    """Writes READY, the one line the shim waits for on our stdout before it connects.
    Nobody reads that pipe afterwards, so fd 1 becomes the stderr log first: whatever
    prints later (here or in a library) must not fill the pipe and wedge the worker."""
    sys.stdout.flush()
    pipe = os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr
    with os.fdopen(pipe, "w") as ready:
        ready.write(f"READY {os.getpid()}\n")


if __name__ == "__main__":
    main()

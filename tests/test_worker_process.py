"""The worker process on its own, driven over its socket as the shim drives it."""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest

from pyrocks_support import (
    HttpRelay,
    S3Endpoint,
    condition_ignoring_endpoint,
    readline_within,
    wait_until,
)
from state_store.driver import bridge
from state_store.format import records
from state_store.format.records import Op
from state_store.format.storage import open_storage
from state_store.format.store_root import StoreRoot
from state_store.options import PREFIX, StoreOptions
from state_store.runtime.engine import VersionedStore
from state_store.runtime.protocol import (
    CLOSING,
    HEADER,
    I64,
    MORE,
    PAIR_HEAD,
    UNIFORM,
    Request,
    ScanMode,
    Status,
)
from state_store.runtime.worker import Session, WorkerShared
from test_chunks import pairs_of as chunk_pairs
from test_engine import commit_versions, open_store
from test_object_stores import lists, uploads_named


@contextlib.contextmanager
def started_worker(tmp_path: Path, *flags: str) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A worker started as the shim starts one (with its launch `flags`), and its socket."""
    sock = tmp_path / "w.sock"
    with open(tmp_path / "w.stderr", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "state_store.runtime.worker", "--socket", str(sock),
             "--data-dir", str(tmp_path / "data"), "--log", str(tmp_path / "w.stderr"),
             *flags],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log)
    assert proc.stdout is not None
    assert readline_within(proc.stdout, 60).startswith(b"READY")
    yield proc, sock
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(30)


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    with started_worker(tmp_path) as started:
        yield started


def connect(sock: Path) -> socket.socket:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(str(sock))
    conn.settimeout(30)  # a hang fails the test instead of blocking it
    return conn


def request(conn: socket.socket, kind: Request, body: bytes) -> tuple[int, bytes]:
    conn.sendall(HEADER.pack(len(body) + 1, kind) + body)
    header = receive(conn, HEADER.size)
    length, status = HEADER.unpack(header)
    return status, receive(conn, length - 1)


def receive(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def test_the_shim_numbers_and_names_every_request_as_the_worker_does() -> None:
    """Connection.scala's `Wire` and protocol.py's `Request` are one table kept in step by
    hand: each request's code and its name in the shim's errors."""
    source = (bridge.shim_dir() / "common/io/pyrocks/statestore/Connection.scala").read_text()
    wire = source[source.index("object Wire"):source.index("val Closing")]
    codes = {name: int(code) for name, code in re.findall(r"val (\w+): Byte = (\d+)", wire)}
    names_start = source.index("private val Names")
    names = re.findall(r'"([^"]+)"', source[names_start:source.index(")", names_start)])
    for kind in Request:
        camel = "".join(word.capitalize() for word in kind.name.split("_"))
        assert codes.get(camel) == kind.value, (kind, codes)
        assert names[kind.value] == kind.name, (kind, names)
    assert len(codes) == len(Request) and len(names) == len(Request) + 1  # names[0]: "?"


def test_a_zero_length_frame_is_refused_not_read_to_the_end(worker, tmp_path: Path) -> None:
    _, sock = worker
    conn = connect(sock)
    conn.sendall(HEADER.pack(0, Request.LOAD))
    length, status = HEADER.unpack(receive(conn, HEADER.size))
    assert status == Status.ERROR
    assert b"malformed frame of length 0" in receive(conn, length - 1)
    assert conn.recv(1) == b""  # and the connection is closed, not left waiting


def test_stdout_after_ready_goes_to_the_log(worker) -> None:
    """Nobody reads the worker's stdout pipe after READY: anything printed there later
    would fill it and wedge the worker, so fd 1 must be the stderr log."""
    proc, _ = worker
    assert os.readlink(f"/proc/{proc.pid}/fd/1") == os.readlink(f"/proc/{proc.pid}/fd/2")


def test_each_session_has_its_own_working_copy(worker, tmp_path: Path) -> None:
    """A reconnect opens the same store again while the old session may still be closing:
    the old session's cleanup must not delete the new one's working copy."""
    _, sock = worker
    spec = {"store_root": str(tmp_path / "root"), "store_path": "", "store_name": "s",
            "local_name": "provider-1", "options": {}, "query_id": "q"}
    rows = b"".join(records.encode(Op.PUT, "default", b"k%d" % i, b"v" * 100)
                    for i in range(1000))
    first, second = connect(sock), connect(sock)
    for conn in (first, second):
        status, _ = request(conn, Request.OPEN, json.dumps(spec).encode())
        assert status == Status.OK
        status, answer = request(conn, Request.LOAD, I64.pack(0))
        assert status == Status.OK, answer
    first.close()  # the old session closes its store
    second.sendall(HEADER.pack(len(rows) + 1, Request.WRITES) + rows)
    status, answer = request(second, Request.COMMIT, I64.pack(1))
    assert status == Status.OK and json.loads(answer)["published"], answer
    status, answer = request(second, Request.FINISH, b"")  # a snapshot of the working copy
    assert status == Status.OK and json.loads(answer) == {"failures": []}, answer
    second.close()
    assert list((tmp_path / "root" / "query-q" / "snapshots").iterdir())


def test_a_closing_finish_publishes_the_final_snapshot_and_closes_the_store(
        worker, tmp_path: Path) -> None:
    """FINISH with CLOSING (what the shim sends when Spark unloads a provider or its query
    run ends): the last committed version's snapshot is published, and the store is closed
    in the same request; the worker removes its working copy behind the answer."""
    proc, sock = worker
    options = {f"{PREFIX}snapshotWhenIdleSeconds": "0", f"{PREFIX}snapshotInterval": "100"}
    spec = {"store_root": str(tmp_path / "root"), "store_path": "", "store_name": "s",
            "local_name": "provider-1", "options": options, "query_id": "q"}
    conn = connect(sock)
    assert request(conn, Request.OPEN, json.dumps(spec).encode())[0] == Status.OK
    for version, rows in enumerate((range(0, 1000), range(500, 1500)), start=1):
        assert request(conn, Request.LOAD, I64.pack(version - 1))[0] == Status.OK
        writes = b"".join(records.encode(Op.PUT, "default", b"k%05d" % i, b"v%d" % version)
                          for i in rows)
        conn.sendall(HEADER.pack(len(writes) + 1, Request.WRITES) + writes)
        status, answer = request(conn, Request.COMMIT, I64.pack(version))
        assert status == Status.OK and json.loads(answer)["published"], answer
    root = StoreRoot(open_storage(str(tmp_path / "root" / "query-q")), "s")
    assert 2 not in root.snapshot_versions()
    status, answer = request(conn, Request.FINISH, CLOSING)
    assert status == Status.OK and json.loads(answer) == {"failures": []}, answer
    assert 2 in root.snapshot_versions()
    status, answer = request(conn, Request.LOAD, I64.pack(2))
    assert status == Status.ERROR and b"no store opened on this connection" in answer, answer
    assert wait_until(lambda: not holds_a_database(tmp_path / "data"))  # released
    fresh = VersionedStore("s", root, tmp_path / "fresh", StoreOptions(), ThreadPoolExecutor(1))
    fresh.load(2)
    assert fresh.metrics.replayed_versions == 0
    assert dict(fresh.scan("default", None, None, None)) == {
        **{b"k%05d" % i: b"v1" for i in range(500)},
        **{b"k%05d" % i: b"v2" for i in range(500, 1500)}}
    fresh.close()


def holds_a_database(directory: Path) -> bool:
    """Whether a RocksDB (its CURRENT file) is under `directory`. The worker removes working
    copies meanwhile: `os.walk` skips a directory gone before it is listed, where
    `Path.rglob` raises."""
    return any("CURRENT" in files for _, _, files in os.walk(directory))


def open_with_two_versions(sock: Path, spec: dict, before_second_commit: Callable[[], None]
                           = lambda: None) -> tuple[socket.socket, int]:
    """A connection whose store (OPEN `spec`) committed versions 1 and 2, and its session's
    id; `before_second_commit` runs once version 2's writes are sent."""
    conn = connect(sock)
    status, answer = request(conn, Request.OPEN, json.dumps(spec).encode())
    assert status == Status.OK, answer
    for version in (1, 2):
        assert request(conn, Request.LOAD, I64.pack(version - 1))[0] == Status.OK
        writes = records.encode(Op.PUT, "default", b"k%d" % version, b"v")
        conn.sendall(HEADER.pack(len(writes) + 1, Request.WRITES) + writes)
        if version == 2:
            before_second_commit()
        status, reply = request(conn, Request.COMMIT, I64.pack(version))
        assert status == Status.OK and json.loads(reply)["published"], reply
    return conn, json.loads(answer)["session"]


def local_spec(root: Path, name: str) -> dict:
    """A store on local files whose version 1 has a snapshot (it was written from nothing)
    and whose later versions have none (no idle snapshots)."""
    options = {f"{PREFIX}snapshotWhenIdleSeconds": "0", f"{PREFIX}snapshotInterval": "100"}
    return {"store_root": str(root), "store_path": "", "store_name": name,
            "local_name": f"provider-{name}", "options": options, "query_id": "q"}


def test_one_end_stores_request_ends_every_session_it_names(worker, tmp_path: Path) -> None:
    """END_STORES (a query run's end: one request per worker): each named session's store
    publishes its final snapshot and closes, the carrier's own among them; a session it does
    not name goes on; a named one that cannot end (its store closed before, or no such
    session) is reported by its id, and the others end all the same."""
    _, sock = worker
    opened = {name: open_with_two_versions(sock, local_spec(tmp_path / name, name))
              for name in "abcd"}
    (a, a_id), (b, b_id), (c, c_id), (d, d_id) = opened.values()
    assert len({a_id, b_id, c_id, d_id}) == 4
    assert request(d, Request.CLOSE, b"")[0] == Status.OK  # d's session stays, its store not
    roots = {name: StoreRoot(open_storage(str(tmp_path / name / "query-q")), name)
             for name in opened}
    assert not any(2 in root.snapshot_versions() for root in roots.values())

    body = json.dumps({"sessions": [c_id, d_id, a_id, 99999]}).encode()
    status, answer = request(a, Request.END_STORES, body)
    assert status == Status.OK, answer
    failures = json.loads(answer)["failures"]
    assert failures[str(a_id)] == [] and failures[str(c_id)] == [], failures
    assert "no store opened on this connection" in failures[str(d_id)][0], failures
    assert failures["99999"] == [f"no session 99999 is open in worker pid {worker[0].pid}"]
    assert {name: 2 in root.snapshot_versions() for name, root in roots.items()} == {
        "a": True, "b": False, "c": True, "d": False}
    for ended in (a, c):
        status, answer = request(ended, Request.LOAD, I64.pack(2))
        assert status == Status.ERROR and b"no store opened on this connection" in answer
    status, answer = request(b, Request.LOAD, I64.pack(2))  # not named: still open
    assert status == Status.OK and json.loads(answer)["unchanged"], answer
    for conn in (a, b, c, d):
        conn.close()


def test_ending_a_workers_stores_starts_every_final_flush_before_the_first_end(
        tmp_path: Path) -> None:
    """END_STORES (here on sessions in this process) hands every named store's memtables
    to RocksDB's flush thread before it ends the first store, so one store's flush runs
    while another's snapshot is taken and uploaded; each still ends with its snapshot."""
    shared = WorkerShared(tmp_path / "worker", ThreadPoolExecutor(1))
    peers = shared.sessions
    for session_id in (1, 2, 3):
        session = Session(None, shared, session_id)  # type: ignore[arg-type]
        session.store = open_store(tmp_path / f"root-{session_id}",
                                   tmp_path / f"local-{session_id}", interval=100)
        commit_versions(session.store, 2)  # version 2 owes its snapshot, in the memtable
        peers[session_id] = session
    unflushed_at_first_end: list[int] = []

    def end(store: VersionedStore, original=VersionedStore.end) -> None:
        if not unflushed_at_first_end:
            unflushed_at_first_end.extend(
                peer.store.copy.rocksdb().property_int_value(
                    "rocksdb.num-entries-active-mem-table")
                for peer in peers.values() if peer.store is not None)
        original(store)

    ends = {session_id: peers[session_id].store for session_id in peers}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(VersionedStore, "end", end)
        failures = peers[1].end_stores([3, 1, 2])
    assert failures == {"1": [], "2": [], "3": []}
    assert unflushed_at_first_end == [0, 0, 0]
    assert all(store.checkpoint.snapshot_versions()[-1] == 2  # type: ignore[union-attr]
               for store in ends.values())


def thread_niceness(pid: int) -> dict[str, set[int]]:
    """The nice values of a process's threads, by thread name (/proc's stat, field 19)."""
    found: dict[str, set[int]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that just ended
            stat = (task / "stat").read_text()
            name, fields = stat[stat.index("(") + 1:stat.rindex(")")], stat.rsplit(")")[1].split()
            found.setdefault(name, set()).add(int(fields[16]))
    return found


@pytest.mark.parametrize("flags, compactions", [((), 19), (("--compact-on-commit",), 0)],
                         ids=["compactions-yield", "compact-on-commit"])
def test_a_workers_compactions_yield_to_the_tasks(tmp_path: Path, flags: tuple[str, ...],
                                                  compactions: int) -> None:
    """RocksDB's compaction threads (its LOW pool, `rocksdb:low`) run at nice 19 once they
    have run a compaction, unless the worker's stores compact on commit (their commits wait
    for compactions); flushes (`rocksdb:high`), which snapshots wait for, and the threads
    serving sessions keep nice 0. Each commit here snapshots, whose flush leaves one L0
    file: the fifth passes RocksDB's trigger of four, and a compaction runs."""
    options = {f"{PREFIX}snapshotWhenIdleSeconds": "0", f"{PREFIX}snapshotInterval": "1"}
    spec = {"store_root": str(tmp_path / "root"), "store_path": "", "store_name": "s",
            "local_name": "provider-1", "options": options, "query_id": "q"}
    with started_worker(tmp_path, *flags) as (proc, sock):
        conn = connect(sock)
        assert request(conn, Request.OPEN, json.dumps(spec).encode())[0] == Status.OK
        for version in range(1, 9):
            assert request(conn, Request.LOAD, I64.pack(version - 1))[0] == Status.OK
            writes = b"".join(records.encode(Op.PUT, "default", b"k%05d" % i, b"v%d" % version)
                              for i in range(2000))
            conn.sendall(HEADER.pack(len(writes) + 1, Request.WRITES) + writes)
            status, answer = request(conn, Request.COMMIT, I64.pack(version))
            assert status == Status.OK and json.loads(answer)["published"], answer
        compacted = tmp_path / "data"
        assert wait_until(lambda: compaction_ran(compacted)), sorted(compacted.rglob("LOG"))
        niceness = thread_niceness(proc.pid)
        serving = Path(f"/proc/{proc.pid}/comm").read_text().strip()  # Python's threads
        assert niceness == {**niceness, "rocksdb:low": {compactions}, "rocksdb:high": {0},
                            serving: {0}}, niceness
        conn.close()


def compaction_ran(data_dir: Path) -> bool:
    """Whether a RocksDB under `data_dir` finished a compaction (its info LOG says so)."""
    return any("compaction_finished" in log.read_text(errors="replace")
               for log in data_dir.rglob("LOG"))


def test_an_endpoint_ignoring_conditional_writes_is_refused_at_open(worker, s3: S3Endpoint,
                                                                    tmp_path: Path) -> None:
    """Before any commit can start: the store's OPEN fails, naming the endpoint."""
    _, sock = worker
    proxy = condition_ignoring_endpoint(s3)
    try:
        spec = {"store_root": str(tmp_path / "ckpt"), "store_path": "op/0/default",
                "store_name": "s", "local_name": "p", "query_id": "q",
                "options": {"spark.sql.streaming.stateStore.pyrocks.rootUrl": s3.url("open"),
                            "spark.sql.streaming.stateStore.pyrocks.rootOptions":
                                json.dumps(proxy.options)}}
        status, answer = request(connect(sock), Request.OPEN, json.dumps(spec).encode())
        assert status == Status.ERROR
        assert f"S3 endpoint {proxy.endpoint} ignores conditional writes" in answer.decode()
    finally:
        proxy.stop()


def test_a_workers_commit_on_s3_lists_the_run_epochs_while_its_changelog_uploads(
        worker, s3: S3Endpoint, tmp_path: Path) -> None:
    """The worker gives its stores the threads that let a commit's fence listing run beside
    its changelog's upload: the relay holds the listing until the upload has arrived
    (test_object_stores.py proves the engine's side on each store)."""
    _, sock = worker
    relay = HttpRelay(s3)
    try:
        options = {f"{PREFIX}rootUrl": s3.url(f"overlap-{os.getpid()}-{tmp_path.name}"),
                   f"{PREFIX}rootOptions": json.dumps(relay.options)}
        spec = {"store_root": str(tmp_path / "ckpt"), "store_path": "op/0/default",
                "store_name": "s", "local_name": "p", "query_id": "q", "options": options}
        conn, _ = open_with_two_versions(
            sock, spec, lambda: relay.hold(lists("manifests"), until=uploads_named(".changelog")))
        assert not relay.held_too_long, "the listing waited for an upload that never came"
        conn.close()
    finally:
        relay.stop()


def test_a_worker_ends_its_stores_on_an_object_store_side_by_side(
        s3: S3Endpoint, tmp_path: Path) -> None:
    """END_STORES (on sessions in this process) with stores on S3: their ends (final
    snapshot, close) run at once. The relay holds store a's first upload of its final
    snapshot until store b's has arrived, which one store after another never would; both
    end with their snapshot."""
    relay = HttpRelay(s3)
    try:
        with ThreadPoolExecutor(12) as requests:
            shared = WorkerShared(tmp_path / "worker", ThreadPoolExecutor(1), requests=requests)
            urls = {name: s3.url(f"ends-{name}-{os.getpid()}-{tmp_path.name}") for name in "ab"}
            for session_id, name in enumerate("ab", start=1):
                session = Session(None, shared, session_id)  # type: ignore[arg-type]
                root = StoreRoot(open_storage(urls[name], relay.options), "s")
                session.store = VersionedStore("s", root, tmp_path / name, StoreOptions(
                    snapshot_interval=100), ThreadPoolExecutor(1), requests=requests)
                commit_versions(session.store, 2)  # version 2 owes its final snapshot
                shared.sessions[session_id] = session
            stores = [session.store for session in shared.sessions.values()]
            relay.hold(uploads_named("-CURRENT", under=urls["a"]),
                       until=uploads_named("-CURRENT", under=urls["b"]), timeout=10)
            failures = shared.sessions[1].end_stores([1, 2])
        assert failures == {"1": [], "2": []}
        assert not relay.held_too_long, "store a's final snapshot waited for b's, never made"
        assert all(store.checkpoint.snapshot_versions()[-1] == 2  # type: ignore[union-attr]
                   for store in stores)
    finally:
        relay.stop()


def test_a_worker_starts_without_loading_pyspark() -> None:
    """Workers start on every fresh executor (restores, moved partitions): their imports
    stay light; pyspark alone would add about 0.3 s to each start."""
    probe = "import sys, state_store.runtime.worker; print('pyspark' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"


def pairs_of(chunk: bytes) -> tuple[bool, list[tuple[bytes, bytes]]]:
    """A chunk's `more` and its pairs."""
    flags, found = chunk_pairs(chunk)
    return bool(flags & MORE), found


def test_a_read_ahead_answers_the_pairs_from_its_key_on(worker, tmp_path: Path) -> None:
    """READ_AHEAD: the pairs from the key on in key order (the batch's own uncommitted writes
    among them), about `limit` bytes; `more` is 0 only when they reach the family's end."""
    _, sock = worker
    spec = {"store_root": str(tmp_path / "root"), "store_path": "", "store_name": "s",
            "local_name": "provider-1", "options": {}, "query_id": "q"}
    conn = connect(sock)
    assert request(conn, Request.OPEN, json.dumps(spec).encode())[0] == Status.OK
    assert request(conn, Request.LOAD, I64.pack(0))[0] == Status.OK
    rows = b"".join(records.encode(Op.PUT, "default", b"k%03d" % i, b"v%d" % i)
                    for i in range(0, 1000, 2))
    conn.sendall(HEADER.pack(len(rows) + 1, Request.WRITES) + rows)

    sizes = []

    def read_ahead(key: bytes, limit: int) -> tuple[bool, list[tuple[bytes, bytes]]]:
        status, chunk = request(conn, Request.READ_AHEAD,
                                limit.to_bytes(4, "big") + (0).to_bytes(2, "big") + key)
        assert status == Status.OK, chunk
        sizes.append(len(chunk))
        return pairs_of(chunk)

    more, found = read_ahead(b"k501", 100)
    assert more and found[0] == (b"k502", b"v502")
    assert [k for k, _ in found] == [b"k%03d" % i for i in range(502, 502 + 2 * len(found), 2)]
    assert sizes[-1] - len(b"k998v998") <= 100 < sizes[-1]  # its last pair took it past
    assert read_ahead(b"k990", 1 << 20) == (False, [(b"k%03d" % i, b"v%d" % i)
                                                    for i in range(990, 1000, 2)])
    assert read_ahead(b"k999", 1 << 20) == (False, [])
    conn.close()


def test_a_full_scan_streams_every_pair_in_chunks(worker, tmp_path: Path) -> None:
    """ITER_OPEN and ITER_NEXT: every pair once, in key order, in chunks that end with the
    pair that takes them past `iteratorChunkBytes`, even one value larger than a chunk."""
    _, sock = worker
    spec = {"store_root": str(tmp_path / "root"), "store_path": "", "store_name": "s",
            "local_name": "provider-1", "options": {"iteratorChunkBytes": "65536"},
            "query_id": "q"}
    conn = connect(sock)
    assert request(conn, Request.OPEN, json.dumps(spec).encode())[0] == Status.OK
    assert request(conn, Request.LOAD, I64.pack(0))[0] == Status.OK
    written = {b"k%06d" % i: os.urandom(i % 300) for i in range(20_000)}
    written[b"k010000"] = os.urandom(3 << 20)  # past every socket buffer and chunk limit
    rows = b"".join(records.encode(Op.PUT, "default", k, v) for k, v in written.items())
    conn.sendall(HEADER.pack(len(rows) + 1, Request.WRITES) + rows)

    body = (7).to_bytes(4, "big") + bytes([ScanMode.ALL]) + (0).to_bytes(2, "big") + \
        (0).to_bytes(4, "big") * 2
    status, chunk = request(conn, Request.ITER_OPEN, body)
    streamed, chunks = [], 0
    while True:
        assert status == Status.OK, chunk
        more, pairs = pairs_of(chunk)
        chunks += 1
        last_key, last_value = pairs[-1]
        head = 0 if chunk[0] & UNIFORM else PAIR_HEAD.size
        before_last = len(chunk) - head - len(last_key) - len(last_value)
        assert before_last <= 65536 < len(chunk) or not more  # ends once past the limit
        streamed += pairs
        if not more:
            break
        status, chunk = request(conn, Request.ITER_NEXT, (7).to_bytes(4, "big"))
    assert streamed == sorted(written.items())
    assert chunks > 50
    conn.close()


def test_a_reply_the_socket_takes_in_parts_arrives_whole() -> None:
    """A socket that takes a reply a part at a time (a timeout socket sends without
    blocking) still delivers header and body whole and in order."""
    sender, receiver = socket.socketpair()
    sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    sender.settimeout(30)
    receiver.settimeout(30)  # a reply cut short fails the test instead of hanging it
    body = bytearray(os.urandom(2 << 20))
    got = bytearray()

    def drain() -> None:
        with contextlib.suppress(TimeoutError):
            while len(got) < HEADER.size + len(body):
                part = receiver.recv(1 << 16)
                if not part:
                    return
                got.extend(part)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    Session.reply(SimpleNamespace(conn=sender), Status.OK, body)  # type: ignore[arg-type]
    reader.join(30)
    assert bytes(got) == HEADER.pack(len(body) + 1, Status.OK) + body
    sender.close()
    receiver.close()

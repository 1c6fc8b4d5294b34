"""Durable state on each object store, against its real API on loopback: S3 (moto's server
mode), Azure Blob Storage (Azurite) and Google Cloud Storage (fake-gcs-server). Each
publishes by its service's create-if-absent, refuses an endpoint that drops the condition
(at open and at commit, publishing nothing), probes an endpoint once per owner, commits by
writing its changelog and manifest and nothing else, and copies server-side: checked by
counting the requests a recording proxy sees."""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from pyrocks_support import HttpRelay, condition_ignoring_endpoint
from state_store.errors import CorruptFileError, StateStoreError, UnsupportedStorageError
from state_store.format.lineage import LoadPlan
from state_store.format.storage import ConditionProbes, open_storage
from state_store.format.storage.base import CHUNK, Storage, Written
from state_store.format.store_root import StoreRoot
from state_store.options import PREFIX, StoreOptions, store_options
from state_store.runtime.engine import VersionedStore
from state_store.runtime.worker import Session, WorkerShared
from test_engine import contents, put

Request = tuple[str, str, dict[str, str]]

# How each service's API spells the requests these tests count.
SERVER_SIDE_COPY: dict[str, Callable[[str, str, dict[str, str]], bool]] = {
    "moto_server": lambda method, path, headers: method == "PUT" and "x-amz-copy-source" in headers,
    "azurite": lambda method, path, headers: method == "PUT" and "x-ms-copy-source" in headers,
    "fake-gcs-server": lambda method, path, headers: method == "POST" and "/rewriteTo/" in path,
}
CREATE: dict[str, Callable[[str, str, dict[str, str]], bool]] = {
    "moto_server": lambda method, path, headers: method == "PUT"
    and "x-amz-copy-source" not in headers,
    "azurite": lambda method, path, headers: method == "PUT" and "x-ms-copy-source" not in headers
    and "restype=container" not in path,
    "fake-gcs-server": lambda method, path, headers: method == "POST" and "/upload/" in path,
}


def copies(server: Any, requests: list[Request]) -> int:
    return sum(1 for r in requests if SERVER_SIDE_COPY[server.name](*r))


def creates(server: Any, requests: list[Request]) -> list[Request]:
    return [r for r in requests if CREATE[server.name](*r)]


def moved_bytes(server: Any, requests: list[Request], suffix: str) -> list[str]:
    """Requests that moved the bytes of files named `*suffix` through the client: reads
    of their content and writes of it (a server-side copy, metadata and deletes are not)."""
    moved = []
    for method, path, headers in requests:
        name = path.split("?")[0]
        if server.name == "fake-gcs-server" and method == "GET" and "alt=media" not in path:
            continue  # the object's metadata (a JSON resource), not its bytes
        if suffix in name and method not in ("HEAD", "DELETE") and not SERVER_SIDE_COPY[
                server.name](method, path, headers):
            moved.append(f"{method} {path}")
    return moved


@pytest.fixture
def relay(object_store: Any) -> Iterator[HttpRelay]:
    proxy = HttpRelay(object_store)
    yield proxy
    proxy.stop()


def store_on(url: str, options: dict, local: Path, probes: ConditionProbes | None = None,
             interval: int = 100, requests: Executor | None = None) -> VersionedStore:
    root = StoreRoot(open_storage(url, options, probes), "store")
    return VersionedStore("store", root, local, StoreOptions(snapshot_interval=interval),
                          ThreadPoolExecutor(1), requests=requests)


def about_to_commit_2(store: VersionedStore, change: bytes) -> None:
    """Version 1 committed (k = v1) and loaded, and `change` written on it."""
    store.load(0)
    store.write(put("k", "v1"))
    store.commit(1)
    store.load(1)
    store.write(change)


def test_publish_is_put_if_absent(object_store: Any) -> None:
    storage = open_storage(object_store.url(f"publish-{uuid.uuid4().hex}"), object_store.options)
    assert storage.publish("manifests/1.json", b"first")
    assert not storage.publish("manifests/1.json", b"second")
    assert storage.read("manifests/1.json", "test") == b"first"


def test_an_endpoint_that_drops_the_condition_is_refused_at_open_and_at_commit(
        object_store: Any, tmp_path: Path) -> None:
    proxy = condition_ignoring_endpoint(object_store)
    try:
        url = object_store.url(f"ignoring-{uuid.uuid4().hex}")
        at_open = open_storage(url, proxy.options)
        with pytest.raises(UnsupportedStorageError, match=rf"{proxy.endpoint}.* ignores "
                                                           r"conditional writes"):
            at_open.verify_publish()  # what the worker asks when a store opens
        store = store_on(url, proxy.options, tmp_path / "a")  # opened without asking
        store.load(0)
        store.write(put("k", "v"))
        with pytest.raises(UnsupportedStorageError, match="ignores conditional writes"):
            store.commit(1)
        honest = StoreRoot(open_storage(url, object_store.options), "store")
        assert honest.versions() == []  # nothing was published (an orphan changelog may be)
    finally:
        proxy.stop()


def test_a_worker_probes_each_endpoint_once_for_all_its_stores(
        object_store: Any, relay: HttpRelay, tmp_path: Path) -> None:
    """Four stores of a query opened by one worker (its sessions share its probes), the
    state URL and credentials from the Hadoop settings, the endpoint from rootOptions (a
    proxy that counts): 3 probe requests in all, not 3 per store; another endpoint gets its
    own probe."""
    probes = ConditionProbes()
    root = object_store.hadoop_url(f"worker-{uuid.uuid4().hex[:8]}")
    query_id = str(uuid.uuid4())

    def open_store(partition: int, options: dict) -> StoreRoot:
        session = Session(None, WorkerShared(  # type: ignore[arg-type]
            tmp_path / "worker", ThreadPoolExecutor(1), probes=probes))
        location = tmp_path / "checkpoint" / "state" / "0" / str(partition)
        location.mkdir(parents=True, exist_ok=True)
        spec = {"store_root": str(location), "store_path": f"0123/0/{partition}/default",
                "store_name": f"store {partition}", "local_name": f"l{partition}",
                "query_id": query_id, "hadoop": object_store.hadoop}
        opts = store_options({PREFIX + "rootUrl": root,
                              PREFIX + "rootOptions": json.dumps(options)})
        return session.open_checkpoint(spec, opts)

    for partition in range(4):
        assert open_store(partition, relay.options).storage.url.startswith(root)
    assert len(creates(object_store, relay.requests)) == 2, relay.requests  # create twice
    assert len(relay.requests) == 3, relay.requests  # and delete the probe object
    other = HttpRelay(object_store)
    try:
        open_store(4, other.options)
        assert len(other.requests) == 3 and len(probes.probed()) == 2
    finally:
        other.stop()


def test_a_commit_writes_its_changelog_and_manifest_only(object_store: Any, relay: HttpRelay,
                                                         tmp_path: Path) -> None:
    url = object_store.url(f"commit-{uuid.uuid4().hex}")
    store = store_on(url, relay.options, tmp_path / "a")
    store.checkpoint.storage.verify_publish()
    about_to_commit_2(store, put("k", "v2") + put("j", "w"))
    fs = object_store.filesystem()
    before = set(fs.find(url.split("://", 1)[1]))
    relay.requests.clear()
    store.commit(2)
    written = creates(object_store, relay.requests)
    fs.invalidate_cache()
    added = sorted(p.rsplit("/", 2)[-2] for p in set(fs.find(url.split("://", 1)[1])) - before)
    assert added == ["files", "manifests"], added  # one changelog file, one manifest
    assert len(written) == 2, relay.requests
    # and one listing, of the manifests (the run-epoch fence): three requests in all
    assert len(relay.requests) == 3, relay.requests
    assert not [r for r in relay.requests if r[0] == "DELETE"]
    store.close()
    reader = store_on(url, object_store.options, tmp_path / "b")
    reader.load(2)
    assert contents(reader) == {b"k": b"v2", b"j": b"w"}


def lists(directory: str) -> Callable[[str, str, bytes], bool]:
    """A listing of the root's `directory` (manifests, snapshots)."""
    def matches(method: str, path: str, body: bytes) -> bool:
        return method == "GET" and "prefix=" in path and directory in unquote(path)
    return matches


def uploads_named(fragment: str, under: str = "") -> Callable[[str, str, bytes], bool]:
    """An upload of a file whose name holds `fragment` (in the root at the URL `under`, if
    given): named in the path (S3, Azure) or in the upload's metadata, the first part of
    its body (GCS)."""
    root = under.split("://", 1)[-1].split("/", 1)[-1]  # the bucket's name is the host's

    def matches(method: str, path: str, body: bytes) -> bool:
        places = (unquote(path).split("?")[0], body[:4096].decode("latin-1"))
        return method in ("PUT", "POST") and any(
            root in place and fragment in place for place in places)
    return matches


def test_a_commit_lists_the_run_epochs_while_its_changelog_uploads(
        object_store: Any, relay: HttpRelay, tmp_path: Path) -> None:
    """The run-epoch fence's listing and the changelog's upload are round trips neither of
    which needs the other, so a commit makes them at once (storage_requests.py),
    and publishes its manifest after both. The relay holds the listing until the upload
    has arrived: made one after the other, the upload would not come while it waits."""
    url = object_store.url(f"overlap-{uuid.uuid4().hex}")
    with ThreadPoolExecutor(2) as requests:
        store = store_on(url, relay.options, tmp_path / "a", requests=requests)
        about_to_commit_2(store, put("k", "v2"))
        relay.requests.clear()
        relay.hold(lists("manifests"), until=uploads_named(".changelog"))
        assert store.commit(2)["published"]
        assert not relay.held_too_long, "the listing waited for an upload that never came"
        listing = next(i for i, (m, p, _) in enumerate(relay.requests)
                       if lists("manifests")(m, p, b""))
        published = creates(object_store, relay.requests)[-1]  # the manifest, last
        assert listing < relay.requests.index(published), relay.requests
        store.close()
    reader = store_on(url, object_store.options, tmp_path / "b")
    reader.load(2)
    assert contents(reader) == {b"k": b"v2"}


def test_a_fenced_commit_leaves_no_changelog(object_store: Any, tmp_path: Path) -> None:
    """A zombie attempt of an earlier run uploads its changelog while the fence's listing is
    in flight; refused, it removes that changelog: nothing of it stays in the root."""
    url = object_store.url(f"fenced-{uuid.uuid4().hex}")
    with ThreadPoolExecutor(2) as requests:
        def store(local: str, epoch: int) -> VersionedStore:
            root = StoreRoot(open_storage(url, object_store.options), "store")
            return VersionedStore("store", root, tmp_path / local, StoreOptions(),
                                  ThreadPoolExecutor(1), epoch=epoch, requests=requests)

        zombie, later = store("a", epoch=1), store("b", epoch=2)
        zombie.load(0)
        zombie.write(put("k", "run-1"))
        zombie.commit(1)
        zombie.load(1)
        zombie.write(put("k", "zombie"))
        later.load(1)
        later.write(put("k", "run-2"))
        assert later.commit(2)["published"]
        files = later.checkpoint.storage.names("files")
        with pytest.raises(StateStoreError, match="a later run of this query"):
            zombie.commit(2)
        assert later.checkpoint.storage.names("files") == files
        later.close()
        zombie.close()


def seven_versions(object_store: Any, local: Path, snapshot_of_7: bool = False
                   ) -> tuple[str, dict[bytes, bytes], list[LoadPlan]]:
    """A root with versions 1..7 committed, each snapshot uploaded before the next commit
    (so that 5, 6 and 7 build on the snapshot of 4), and with `snapshot_of_7` one of 7
    after them: its URL, version 7's contents, and the plans of a load of 7, cheapest
    first: [the snapshot of 7,] the snapshot of 4 then the changelogs of 5, 6 and 7."""
    url = object_store.url(f"load-{uuid.uuid4().hex}")
    store = store_on(url, object_store.options, local, interval=4)
    for version in range(1, 8):
        store.load(version - 1)
        store.write(put(f"k{version}", "v") + put("shared", str(version)))
        store.commit(version)
        store.snapshots.drain()
    if snapshot_of_7:
        store.snapshot_now()
        store.snapshots.drain()
    expected = contents(store)
    plans = store.checkpoint.load_plans(7)
    store.close()
    assert [(p.snapshot and p.snapshot.version, [c.version for c in p.changelogs])
            for p in plans] == [(7, [])] * snapshot_of_7 + [(4, [5, 6, 7])]
    return url, expected, plans


def names_file(name: str) -> Callable[[str, str, bytes], bool]:
    return lambda method, path, body: f"files/{name}" in unquote(path)


def test_a_load_reads_each_file_in_one_request(object_store: Any, relay: HttpRelay,
                                               tmp_path: Path) -> None:
    """A load lists the records (snapshots, manifests), reads the version's manifest and
    its snapshot's descriptor, then each of the snapshot's files and each changelog once:
    no request first to learn a file's size (the records say it), and none for a file its
    record says is empty (every snapshot holds RocksDB's empty WAL)."""
    url, expected, (plan, *_) = seven_versions(object_store, tmp_path / "writer")
    assert plan.snapshot is not None
    files = [(ref.name, ref.size) for ref in plan.snapshot.files] + [
        (c.file.name, c.file.size) for c in plan.changelogs]
    assert any(size == 0 for _, size in files), files
    reader = store_on(url, relay.options, tmp_path / "reader")
    relay.requests.clear()
    reader.load(7)
    assert contents(reader) == expected
    for name, size in files:
        made = [f"{m} {p}" for m, p, _ in relay.requests if names_file(name)(m, p, b"")]
        assert len(made) == (1 if size else 0), (name, made)
    read = sum(1 for _, size in files if size)
    assert len(relay.requests) == 4 + read, relay.requests
    reader.close()


def test_a_file_larger_than_a_chunk_downloads_in_one_request(
        object_store: Any, relay: HttpRelay, tmp_path: Path) -> None:
    """A snapshot file over one read chunk (an SST of a large state) is fetched in one
    streamed request and checked on local disk: read as a stream (fsspec's `open`), it took
    a request for its size and one per block, each a round trip after the one before. A
    damaged one is refused, naming it."""
    storage = open_storage(object_store.url(f"large-{uuid.uuid4().hex}"), object_store.options)
    source = tmp_path / "000123.sst"
    source.write_bytes(random.Random(7).randbytes(CHUNK + (3 << 20)))
    written = storage.upload_new(source, "files/large.sst")
    through_relay = open_storage(storage.url, relay.options)
    relay.requests.clear()
    through_relay.download_verified("files/large.sst", tmp_path / "copy.sst", written, "sst")
    assert (tmp_path / "copy.sst").read_bytes() == source.read_bytes()
    assert [f"{m} {p}" for m, p, _ in relay.requests] == [
        f"{m} {p}" for m, p, _ in relay.requests if names_file("large.sst")(m, p, b"")]
    assert len(relay.requests) == 1, relay.requests
    other = Written(written.size, "crc32:00000000")
    with pytest.raises(CorruptFileError, match=r"sst: file .*large\.sst"):
        through_relay.download_verified("files/large.sst", tmp_path / "again.sst", other, "sst")


def reads(directory: str) -> Callable[[str, str, bytes], bool]:
    """A read of one of the root's records in `directory` (manifests, snapshots)."""
    def matches(method: str, path: str, body: bytes) -> bool:
        return method == "GET" and "prefix=" not in path and f"{directory}/" in unquote(path)
    return matches


def test_a_load_fetches_its_snapshot_files_and_changelogs_side_by_side(
        object_store: Any, relay: HttpRelay, tmp_path: Path) -> None:
    """With a worker's request threads, a load lists the manifests and the snapshots at
    once, reads the version's manifest and the newest snapshot's descriptor at once,
    downloads the snapshot's files at once, and fetches the changelogs ahead while the
    ones before are replayed. Load by load, the relay holds one listing until the other
    has been asked for (each way), one record until the other has (each way), the first
    file until another has, the first changelog until the next one has: made one after the
    other, the one held would wait in vain."""
    url, expected, (plan, *_) = seven_versions(object_store, tmp_path / "writer")
    assert plan.snapshot is not None
    first_file, *_ = [ref.name for ref in plan.snapshot.files]
    first_changelog, second_changelog, _ = [c.file.name for c in plan.changelogs]
    with ThreadPoolExecutor(8) as requests:
        for what, held, until in [
                ("the listing of the manifests", lists("manifests"), lists("snapshots")),
                ("the listing of the snapshots", lists("snapshots"), lists("manifests")),
                ("the manifest", reads("manifests"), reads("snapshots")),
                ("the snapshot's descriptor", reads("snapshots"), reads("manifests")),
                ("the snapshot's first file", names_file(first_file),
                 lambda m, p, b: "files/" in unquote(p) and first_file not in unquote(p)),
                ("the first changelog", names_file(first_changelog),
                 names_file(second_changelog))]:
            reader = store_on(url, relay.options, tmp_path / f"reader-{uuid.uuid4().hex}",
                              requests=requests)
            relay.hold(held, until, timeout=10)
            reader.load(7)
            assert not relay.held_too_long, f"{what} waited for a request that never came"
            assert contents(reader) == expected
            reader.close()


def test_a_snapshot_uploads_its_files_side_by_side(object_store: Any, relay: HttpRelay,
                                                    tmp_path: Path) -> None:
    """A snapshot taken on the store's thread (its final one) uploads its files at once on
    the worker's request threads: the relay holds CURRENT's upload until MANIFEST's has
    arrived, which one after the other (they are uploaded in name order) never would."""
    url = object_store.url(f"snapshot-{uuid.uuid4().hex}")
    with ThreadPoolExecutor(8) as requests:
        store = store_on(url, relay.options, tmp_path / "writer", requests=requests)
        about_to_commit_2(store, put("k", "v2") + put("j", "w"))
        store.commit(2)
        relay.hold(uploads_named("-CURRENT"), until=uploads_named("-MANIFEST-"),
                   timeout=10)
        store.snapshot_now()
        assert not relay.held_too_long, "CURRENT's upload waited for one that never came"
        assert store.checkpoint.snapshot_versions()[-1] == 2
        assert not store.failures, store.failures
        store.close()
    reader = store_on(url, object_store.options, tmp_path / "reader")
    assert reader.checkpoint.load_plans(2)[0].changelogs == []  # from the snapshot of 2
    reader.load(2)
    assert contents(reader) == {b"k": b"v2", b"j": b"w"}


def test_a_load_with_a_damaged_snapshot_file_falls_back_to_an_older_snapshot(
        object_store: Any, tmp_path: Path) -> None:
    """One of the newest snapshot's files is damaged: the downloads side by side all end
    before the load turns to the older snapshot (of 4) and replays versions 5..7 on it."""
    url, expected, (plan, older) = seven_versions(object_store, tmp_path / "writer",
                                                  snapshot_of_7=True)
    assert plan.snapshot is not None and older.snapshot is not None
    shared = {ref.name for ref in older.snapshot.files}  # an SST file both may list
    damaged = max((ref for ref in plan.snapshot.files if ref.name not in shared),
                  key=lambda ref: ref.size)
    storage = open_storage(url, object_store.options)
    storage.fs.pipe_file(storage.path(f"files/{damaged.name}"), b"x" * damaged.size)
    with ThreadPoolExecutor(8) as requests:
        reader = store_on(url, object_store.options, tmp_path / "reader", requests=requests)
        reader.load(7)
        assert contents(reader) == expected
        assert reader.metrics.replayed_versions == 3
        reader.close()


def test_s3_sends_a_commits_small_bodies_without_asking_first(s3: Any,
                                                              tmp_path: Path) -> None:
    """botocore has every PUT ask S3 first (`Expect: 100-continue`) and send its body on the
    answer, a round trip more; a commit's changelog and manifest are sent at once, and only
    a body past 2 MiB (a snapshot's SST file) still asks."""
    relay = HttpRelay(s3)
    try:
        url = s3.url(f"expect-{uuid.uuid4().hex}")
        store = store_on(url, relay.options, tmp_path / "a")
        about_to_commit_2(store, put("k", "v2"))
        relay.requests.clear()
        store.commit(2)
        puts = [headers for method, _, headers in relay.requests if method == "PUT"]
        assert len(puts) == 2 and not [h for h in puts if "expect" in h], relay.requests
        store.close()
        storage = open_storage(url, relay.options)
        relay.requests.clear()
        storage.write_new("files/large.sst", bytes(3 << 20))
        assert [h.get("expect") for method, _, h in relay.requests
                if method == "PUT"] == ["100-continue"], relay.requests
    finally:
        relay.stop()


def test_azure_lists_a_directory_in_one_request_as_adlfs_lists_it(azurite: Any) -> None:
    """`AzureStorage.names` asks one List Blobs where adlfs asks two; it finds the names
    adlfs finds (files, directories, a directory with a marker blob: one name), and none in
    a directory that does not exist."""
    relay = HttpRelay(azurite)
    try:
        storage = open_storage(azurite.url(f"names-{uuid.uuid4().hex}"), relay.options)
        storage.fs.pipe({storage.path(rel): b"1" for rel in (
            "d/a.json", "d/b.json", "d/sub/c.json", "d/sub/deeper/e.json", "d2/f.json",
            "d/made/g.json")})
        storage.fs.pipe_file(storage.path("d/made"), b"")  # a directory's marker blob
        for rel in ("d", "d/sub", "missing"):
            relay.requests.clear()
            found = storage.names(rel)
            assert len(relay.requests) == 1, relay.requests
            assert found == Storage.names(storage, rel), rel
        assert storage.names("d") == ["a.json", "b.json", "made", "sub"]
        assert storage.names("missing") == []
    finally:
        relay.stop()


def test_duplicate_is_a_server_side_copy(object_store: Any, relay: HttpRelay) -> None:
    storage = open_storage(object_store.url(f"dup-{uuid.uuid4().hex}"), relay.options)
    payload = bytes(range(256)) * 40_000  # 10 MB
    written = storage.write_new("files/source.sst", payload)
    relay.requests.clear()
    storage.duplicate("files/source.sst", "files/copy.sst")
    storage.duplicate_verified("files/source.sst", "files/checked.sst", storage, written, "src")
    assert copies(object_store, relay.requests) == 2
    assert moved_bytes(object_store, relay.requests, ".sst") == []
    for name in ("copy", "checked"):
        assert storage.read_verified(f"files/{name}.sst", written, name) == payload


def test_a_glob_is_one_listing_and_finds_what_a_walk_finds(object_store: Any,
                                                          relay: HttpRelay) -> None:
    """A glob lists the keys below the pattern's literal head at once, where fsspec's glob
    (the generic `Storage.glob`) asks once per directory on S3; both find the same paths:
    a query's stores under a rootUrl, every record directory, one level, one file."""
    storage = open_storage(object_store.url(f"glob-{uuid.uuid4().hex}"), relay.options)
    stores = [f"c1/{op}/{part}/{name}"
              for op in "01" for part in "012" for name in ("default", "left")]
    files = [f"{store}/query-a/manifests/1.json" for store in stores] + \
        [f"{store}/query-a/snapshots/1.zip" for store in stores[:4]] + \
        [f"{store}/query-b/manifests/2.json" for store in stores[::3]]
    storage.fs.pipe({storage.path(rel): b"{}" for rel in files})
    expected = {
        "*/*/*/*/query-a": [f"{store}/query-a" for store in stores],
        "**/manifests": sorted({rel.rpartition("/")[0] for rel in files if "/manifests/" in rel}),
        "c1/1/*": ["c1/1/0", "c1/1/1", "c1/1/2"],
        files[-1]: [files[-1]],
    }
    for pattern, paths in expected.items():
        relay.requests.clear()
        assert storage.glob(pattern) == sorted(paths), pattern
        flat = sum(1 for method, _, _ in relay.requests if method == "GET")
        relay.requests.clear()
        assert Storage.glob(storage, pattern) == sorted(paths), pattern
        walked = sum(1 for method, _, _ in relay.requests if method == "GET")
        if pattern.startswith("*/"):  # one listing (two pages at most) for any tree
            assert flat <= 2, flat
            if object_store.name == "moto_server":  # s3fs's walk: a request per directory
                assert walked > len(stores), walked


def test_versions_snapshots_and_gc(object_store: Any, tmp_path: Path) -> None:
    url = object_store.url(f"engine-{uuid.uuid4().hex}")
    store = store_on(url, object_store.options, tmp_path / "a", interval=2)
    expected = {}
    for version in range(1, 9):
        store.load(version - 1)
        store.write(put(f"k{version}", "v") + put("shared", str(version)))
        store.commit(version)
        expected[version] = contents(store)
    store.snapshots.drain()
    assert store.checkpoint.snapshot_versions()
    store.collect_garbage(3)
    assert store.checkpoint.versions() == [6, 7, 8]
    for version in (6, 7, 8):
        fresh = store_on(url, object_store.options, tmp_path / f"reader-{version}")
        fresh.load(version)
        assert contents(fresh) == expected[version]

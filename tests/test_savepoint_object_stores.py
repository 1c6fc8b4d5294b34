"""On each object store (S3, Azure, GCS on loopback, behind a recording relay): a savepoint
and a no-claim restore move SST bytes by server-side copy only, each copy verified without
reading it (S3: the CRC32 it computes; GCS: the CRC32C it computes against the one written
with the file; Azure: the checksum the file carries in its metadata): no read and no write
of an SST's bytes passes through this process, and a damaged source file is still refused
by name. Each lists a source store's records no more often than it must: a listing is a
request, and a query has hundreds of stores."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from pyrocks_support import HttpRelay
from state_store.cli import main
from state_store.errors import CorruptFileError
from state_store.format.seeding import apply_seed
from state_store.format.storage import open_storage
from state_store.format.store_root import StoreRoot, query_dir
from state_store.savepoint import restore, savepoint
from state_store.savepoint.verify import verify_savepoint
from test_engine import contents, open_store, put
from test_object_stores import copies, moved_bytes

SOURCE_ID = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"


@pytest.fixture
def relay(object_store: Any) -> Iterator[HttpRelay]:
    proxy = HttpRelay(object_store)
    yield proxy
    proxy.stop()


def record_listings(requests: list[tuple[str, str, dict[str, str]]], under: str) -> Counter:
    """How often each store's record directories below `under` were listed, keyed by the
    store's path below it and `manifests` or `snapshots`: the three APIs list by a GET with
    a `prefix` parameter."""
    listed: Counter = Counter()
    for method, path, _ in requests:
        prefix = parse_qs(urlsplit(path).query).get("prefix", [""])[0].rstrip("/")
        store, _, records = prefix.partition(under)[2].rpartition("/")
        if method == "GET" and under in prefix and records in ("manifests", "snapshots"):
            listed[f"{store} {records}"] += 1
    return listed


def build_checkpoint(server: Any, url: str, scratch: Path) -> dict[str, dict[bytes, bytes]]:
    """A checkpoint with Spark's files (stand-ins) and two stores at version 3."""
    fs, options = server.filesystem(), server.options
    path = url.split("://", 1)[1]
    fs.pipe({f"{path}/metadata": json.dumps({"id": SOURCE_ID}).encode(),
             f"{path}/offsets/1": b"v1\n{}\n", f"{path}/offsets/2": b"v1\n{}\n",
             f"{path}/commits/2": b"v1\n{}\n",
             f"{path}/state/0/_metadata/metadata": b"v1\n" + json.dumps(
                 {"operatorInfo": {"operatorId": 0, "operatorName": "stateStoreSave"},
                  "stateStoreInfo": [{"storeName": "default", "numColsPrefixKey": 0,
                                      "numPartitions": 2}]}).encode()})
    expected = {}
    for p in range(2):
        root = f"{url}/state/0/{p}/{query_dir(SOURCE_ID)}"
        store = open_store(root, scratch / f"build-{p}", interval=1, storage_options=options)
        for v in range(3):
            store.load(v)
            store.write(b"".join(put(f"key-{i}-{p}", f"value-{v}-{i}" * 20) for i in range(300)))
            store.commit(v + 1)
            store.snapshots.drain()
        expected[f"0/{p}"] = contents(store)
        store.close()
    return expected


def test_savepoint_and_restore_copy_ssts_server_side(
        object_store: Any, relay: HttpRelay, tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:8]
    source = object_store.url(f"sp-src-{run}")
    expected = build_checkpoint(object_store, source, tmp_path)
    options = object_store.options

    # What one listing of a directory costs on this service (Azure's client asks twice).
    relay.requests.clear()
    open_storage(f"{source}/state/0/0/{query_dir(SOURCE_ID)}", relay.options).names("manifests")
    per_listing = sum(record_listings(relay.requests, f"sp-src-{run}/state/").values())

    relay.requests.clear()
    info = savepoint(source, object_store.url(f"sp-{run}"), storage_options=relay.options)
    assert moved_bytes(object_store, relay.requests, ".sst") == []
    # Its manifests: to find the batch's version, then with its snapshots to plan the copy.
    assert record_listings(relay.requests, f"sp-src-{run}/state/") == {
        f"0/{p}/{query_dir(SOURCE_ID)} {records}": per_listing * (2 if records == "manifests"
                                                                  else 1)
        for p in range(2) for records in ("manifests", "snapshots")}, relay.requests
    assert copies(object_store, relay.requests) > 0
    assert verify_savepoint(open_storage(info.path, options)).verified
    assert main(["inspect", info.path, "--storage-options", json.dumps(options)]) == 0

    new = object_store.url(f"restored-{run}")
    relay.requests.clear()
    restored = restore(info.path, new, storage_options=relay.options)
    assert moved_bytes(object_store, relay.requests, ".sst") == []
    assert record_listings(relay.requests, f"sp-{run}/stores/") == {  # planned once each
        f"0/{p} {records}": per_listing for p in range(2)
        for records in ("manifests", "snapshots")}
    assert copies(object_store, relay.requests) > 0
    if object_store.name == "moto_server":  # S3 computes each copy's CRC32 on request
        assert all(h.get("x-amz-checksum-algorithm") == "CRC32" for m, p, h in relay.requests
                   if "x-amz-copy-source" in h)
    for key in expected:  # the first open finds each store copied already
        location = open_storage(f"{new}/state/{key}", options)
        target = StoreRoot(location.child(query_dir(restored.query_id)), key, location)
        assert apply_seed(location, target, restored.query_id) is None
        assert target.versions() == [3]
    for key, want in expected.items():  # then the store loads (downloads) as usual
        root = f"{new}/state/{key}/{query_dir(restored.query_id)}"
        reader = open_store(root, tmp_path / f"read-{key.replace('/', '-')}",
                            storage_options=options)
        reader.load(3)
        assert contents(reader) == want
        reader.close()


def test_a_damaged_file_is_refused_by_name(
        object_store: Any, relay: HttpRelay, tmp_path: Path) -> None:
    """Replaced by another writer (same size, other bytes): S3's checksum of the copy
    refuses it unread; on Azure and GCS the replacement lost the checksum our writes carry,
    so that one file is read back and refused."""
    run = uuid.uuid4().hex[:8]
    source = object_store.url(f"sp-src-{run}")
    build_checkpoint(object_store, source, tmp_path)
    info = savepoint(source, object_store.url(f"sp-{run}"),
                     storage_options=object_store.options)
    fs = object_store.filesystem()
    sst = next(p for p in fs.find(info.path.split("://", 1)[1]) if p.endswith(".sst"))
    good = fs.cat_file(sst)
    fs.pipe_file(sst, bytes([good[0] ^ 1]) + good[1:])
    name = sst.rsplit("/", 1)[-1]
    relay.requests.clear()
    with pytest.raises(CorruptFileError, match=rf"{name}.* (fails its checksum|is corrupt)"):
        restore(info.path, object_store.url(f"restored-{run}"), storage_options=relay.options)
    moved = moved_bytes(object_store, relay.requests, ".sst")
    if object_store.name == "moto_server":
        assert moved == []  # refused on S3's checksum, not by reading
    else:
        assert moved and all(name in m or "restored" in m for m in moved), moved

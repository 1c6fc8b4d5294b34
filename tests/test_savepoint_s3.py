"""On S3 (a moto server on loopback, behind a recording relay): a savepoint and a no-claim
restore move SST bytes by server-side copy only, the restore's copies verified by the
CRC32 S3 computes for each: no GetObject and no PutObject of an SST passes through this
process, and a damaged source file is still refused by name."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import fsspec
import pytest

from pyrocks_support import S3Endpoint, S3Relay
from state_store.errors import CorruptFileError
from state_store.format.seeding import apply_seed
from state_store.format.storage import open_storage
from state_store.format.store_root import StoreRoot, query_dir
from state_store.savepoint import restore, savepoint
from state_store.savepoint.verify import verify_savepoint
from test_engine import contents, open_store, put

SOURCE_ID = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"


@pytest.fixture
def relay(s3: S3Endpoint) -> S3Relay:
    proxy = S3Relay(s3)
    yield proxy
    proxy.stop()


def build_checkpoint(url: str, options: dict, scratch: Path) -> dict[str, dict[bytes, bytes]]:
    """A checkpoint on S3 with Spark's files (stand-ins) and two stores at version 3."""
    fs = fsspec.filesystem("s3", skip_instance_cache=True, **options)
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


def sst_transfers(requests: list[tuple[str, str, dict[str, str]]]) -> list[str]:
    """Requests that moved SST bytes through the client: anything on an .sst key but a
    server-side copy (PUT with x-amz-copy-source), a metadata call (HEAD) or a DELETE."""
    moved = []
    for method, path, headers in requests:
        if ".sst" in path.split("?")[0] and method not in ("HEAD", "DELETE") and not (
                method == "PUT" and "x-amz-copy-source" in headers):
            moved.append(f"{method} {path}")
    return moved


def copies_of_ssts(requests: list[tuple[str, str, dict[str, str]]]) -> int:
    return sum(1 for method, path, headers in requests
               if method == "PUT" and ".sst" in path and "x-amz-copy-source" in headers)


def test_savepoint_and_forced_full_snapshot_copy_ssts_server_side(
        s3: S3Endpoint, relay: S3Relay, tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:8]
    source = s3.url(f"sp-src-{run}")
    expected = build_checkpoint(source, s3.options, tmp_path)

    relay.requests.clear()
    info = savepoint(source, s3.url(f"sp-{run}"), storage_options=relay.options)
    assert sst_transfers(relay.requests) == []
    assert copies_of_ssts(relay.requests) > 0
    assert verify_savepoint(open_storage(info.path, s3.options)).verified

    new = s3.url(f"restored-{run}")
    relay.requests.clear()
    restored = restore(info.path, new, storage_options=relay.options)
    assert sst_transfers(relay.requests) == []
    copies = [h for m, p, h in relay.requests if m == "PUT" and ".sst" in p
              and "x-amz-copy-source" in h]
    assert copies and all(h.get("x-amz-checksum-algorithm") == "CRC32" for h in copies)
    for key in expected:  # the first open finds each store copied already
        location = open_storage(f"{new}/state/{key}", s3.options)
        target = StoreRoot(location.child(query_dir(restored.query_id)), key, location)
        assert apply_seed(location, target, restored.query_id) is None
        assert target.versions() == [3]
    for key, want in expected.items():  # then the store loads (downloads) as usual
        root = f"{new}/state/{key}/{query_dir(restored.query_id)}"
        reader = open_store(root, tmp_path / f"read-{key.replace('/', '-')}",
                            storage_options=s3.options)
        reader.load(3)
        assert contents(reader) == want
        reader.close()


def test_a_damaged_file_is_refused_by_its_server_side_checksum(
        s3: S3Endpoint, relay: S3Relay, tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:8]
    source = s3.url(f"sp-src-{run}")
    build_checkpoint(source, s3.options, tmp_path)
    info = savepoint(source, s3.url(f"sp-{run}"), storage_options=s3.options)
    fs = fsspec.filesystem("s3", skip_instance_cache=True, **s3.options)
    sst = next(p for p in fs.find(info.path.split("://", 1)[1]) if p.endswith(".sst"))
    good = fs.cat_file(sst)
    fs.pipe_file(sst, bytes([good[0] ^ 1]) + good[1:])  # same size, other bytes
    relay.requests.clear()
    with pytest.raises(CorruptFileError, match=rf"{sst.rsplit('/', 1)[-1]}.*fails its checksum"):
        restore(info.path, s3.url(f"restored-{run}"), storage_options=relay.options)
    assert sst_transfers(relay.requests) == []  # refused on S3's checksum, not by reading

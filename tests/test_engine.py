"""The engine on real rocksdict and real files: versions, durability, races, corruption."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from state_store.errors import (
    CorruptFileError,
    ForeignCheckpointError,
    StateStoreError,
    VersionNotFoundError,
)
from state_store.format import gc, records, seeding
from state_store.format.manifest import manifest_path
from state_store.format.records import EXISTED, KNOWN, Op
from state_store.format.storage import open_storage
from state_store.format.storage.base import Storage
from state_store.format.store_root import StoreRoot
from state_store.options import StoreOptions
from state_store.runtime.engine import VersionedStore
from state_store.runtime.working_copy import WorkingCopy


def open_store(root: Path | str, local: Path, interval: int = 3,
               storage_options: dict | None = None, trusted: frozenset[str] = frozenset(),
               **options: object) -> VersionedStore:
    checkpoint = StoreRoot(open_storage(str(root), storage_options), "test-store",
                            trusted_roots=trusted)
    opts = StoreOptions(snapshot_interval=interval, **options)  # type: ignore[arg-type]
    return VersionedStore("test-store", checkpoint, local, opts, ThreadPoolExecutor(1))


def put(key: str, value: str, cf: str = "default") -> bytes:
    return records.encode(Op.PUT, cf, key.encode(), value.encode())


def delete(key: str) -> bytes:
    return records.encode(Op.DELETE, "default", key.encode())


def known_puts(keys: list[bytes], value: bytes, existed: bool) -> bytes:
    """A frame the worker defers: one record shape, each record saying whether its key
    existed (what the shim sends when its read cache knows)."""
    op = Op.PUT | KNOWN | (EXISTED if existed else 0)
    return b"".join(records.encode(op, "default", k, value) for k in keys)


def contents(store: VersionedStore, cf: str = "default") -> dict[bytes, bytes]:
    return dict(store.scan(cf, None, None, None))


def committed(store: VersionedStore, version: int) -> dict[str, Any]:
    """A commit and the snapshot it may start, waited for: that snapshot's checkpoint runs
    on the copy's apply thread and its upload on the upload thread (snapshots.py); a model
    step that waits for both keeps every storage mutation of the step in one order, so a
    crash it injects strikes them as it would in line."""
    answer = store.commit(version)
    store.snapshots.drain()
    return answer


def commit_versions(store: VersionedStore, n: int,
                    drain: bool = False) -> list[dict[bytes, bytes]]:
    """Commits versions 1..n, each changing a few keys; returns the expected state of each.

    With `drain`, each snapshot upload completes before the next commit (uploads that
    keep up), which makes the set of snapshots deterministic."""
    expected: list[dict[bytes, bytes]] = [{}]
    for v in range(n):
        store.load(v)
        state = dict(expected[-1])
        batch = put(f"k{v}", f"v{v}") + put("shared", f"s{v}")
        state[f"k{v}".encode()] = f"v{v}".encode()
        state[b"shared"] = f"s{v}".encode()
        if v >= 2:
            batch += delete(f"k{v - 2}")
            state.pop(f"k{v - 2}".encode())
        store.write(batch)
        assert (committed(store, v + 1) if drain else store.commit(v + 1))["published"]
        expected.append(state)
    return expected


def test_every_version_reloads_with_its_data(tmp_path: Path) -> None:
    store = open_store(tmp_path / "root", tmp_path / "a")
    expected = commit_versions(store, 8)
    fresh = open_store(tmp_path / "root", tmp_path / "b")
    for version, state in enumerate(expected):
        fresh.load(version)
        assert contents(fresh) == state, f"version {version}"
        assert fresh.num_keys == len(state)


def test_snapshots_bound_the_changelog_chain(tmp_path: Path) -> None:
    store = open_store(tmp_path / "root", tmp_path / "a", interval=3)
    for version in range(7):  # uploads that keep up: each drained before the next commit
        store.load(version)
        store.write(put(f"k{version}", "v"))
        store.commit(version + 1)
        store.snapshots.drain()
    assert store.checkpoint.snapshot_versions() == [3, 6]
    plan = store.checkpoint.plan_load(7)
    assert plan.snapshot is not None and plan.snapshot.version == 6
    assert [c.version for c in plan.changelogs] == [7]


def test_gets_and_scans_see_uncommitted_writes(tmp_path: Path) -> None:
    store = open_store(tmp_path / "root", tmp_path / "a")
    store.load(0)
    store.write(put("a", "1") + put("ab", "2") + put("b", "3"))
    assert store.get("default", b"ab") == b"2"
    assert [k for k, _ in store.scan("default", None, None, b"a")] == [b"a", b"ab"]
    assert [k for k, _ in store.scan("default", b"ab", b"b", None)] == [b"ab"]


def test_a_scan_lists_the_state_as_of_its_first_pair_whatever_is_written_meanwhile(
        tmp_path: Path) -> None:
    """Spark may write while it iterates (e.g. evicting what a scan lists): the iteration
    neither sees those writes nor loses a pair to them."""
    store = open_store(tmp_path / "root", tmp_path / "a")
    store.load(0)
    store.write(b"".join(put(f"k{i:04}", str(i)) for i in range(3000)))
    scan = store.scan("default", None, None, b"k")
    listed = [next(scan)]
    store.write(delete("k0001") + put("k0002", "changed") + put("k5000", "new"))
    listed += list(scan)
    assert listed == [(f"k{i:04}".encode(), str(i).encode()) for i in range(3000)]
    assert store.get("default", b"k0001") is None


@pytest.mark.parametrize("fail_first_upload", [False, True])
def test_a_batch_larger_than_the_spools_memory_commits_from_its_file(
        tmp_path: Path, fail_first_upload: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the spool's memory the batch's records go to a local file, which becomes the
    changelog: the version reloads (and replays) the same, the file is gone after the commit,
    and a commit whose upload failed can be committed again with every record."""
    store = open_store(tmp_path / "root", tmp_path / "local", interval=100)
    store.pending.memory_bytes = store.pending.chunk_bytes = 1024
    store.load(0)
    store.write(put("first", "1"))
    assert store.commit(1)["published"]
    store.load(1)
    expected = {b"first": b"1"}
    for frame in range(20):
        batch = b"".join(put(f"k{frame}-{i}", "x" * 50) for i in range(20))
        store.write(batch)
        expected.update({f"k{frame}-{i}".encode(): b"x" * 50 for i in range(20)})
    spooled = store.pending.path
    assert spooled is not None and spooled.exists(), "a 28 KiB batch stayed in memory"
    assert store.pending.buffer == b""
    if fail_first_upload:
        real = store.checkpoint.storage.upload_new
        calls = []

        def fail_once(local: Path, rel: str):  # type: ignore[no-untyped-def]
            calls.append(rel)
            if len(calls) == 1:
                raise OSError("the disk is full")
            return real(local, rel)

        monkeypatch.setattr(store.checkpoint.storage, "upload_new", fail_once)
        with pytest.raises(OSError, match="disk is full"):
            store.commit(2)
    assert store.commit(2)["published"]
    assert not spooled.exists(), "the spool file outlived its commit"
    assert contents(store) == expected
    other = open_store(tmp_path / "root", tmp_path / "other", interval=100)
    other.load(2)  # replays the changelogs, the spool's among them (no snapshot of 2 yet)
    assert contents(other) == expected
    assert other.metrics.replayed_versions >= 1, other.metrics
    store.close()
    other.close()


def test_abort_discards_writes(tmp_path: Path) -> None:
    store = open_store(tmp_path / "root", tmp_path / "a")
    expected = commit_versions(store, 2)
    store.load(2)
    store.write(put("junk", "x"))
    store.abort()
    store.load(2)
    assert contents(store) == expected[2]


def test_second_publisher_loses_and_cleans_up(tmp_path: Path) -> None:
    root = tmp_path / "root"
    winner, loser = open_store(root, tmp_path / "w"), open_store(root, tmp_path / "l")
    for store in (winner, loser):
        store.load(0)
    winner.write(put("k", "winner"))
    loser.write(put("k", "loser"))
    assert winner.commit(1)["published"]
    files_before = set((root / "files").iterdir())
    assert not loser.commit(1)["published"]
    assert set((root / "files").iterdir()) == files_before  # the loser's changelog is gone
    loser.load(1)
    assert loser.get("default", b"k") == b"winner"


def test_column_families_are_versioned(tmp_path: Path) -> None:
    store = open_store(tmp_path / "root", tmp_path / "a")
    store.load(0)
    store.write(records.encode(Op.CREATE_CF, "extra") + put("x", "1", cf="extra"))
    store.write(records.encode(Op.MERGE, "extra", b"x", b"2"))
    store.commit(1)
    fresh = open_store(tmp_path / "root", tmp_path / "b")
    fresh.load(1)
    assert fresh.column_families() == ["default", "extra"]
    assert fresh.get("extra", b"x") == b"12"
    fresh.load(0)
    assert fresh.column_families() == ["default"]


def test_missing_version_names_version_and_range(tmp_path: Path) -> None:
    store = open_store(tmp_path / "root", tmp_path / "a")
    commit_versions(store, 3)
    with pytest.raises(VersionNotFoundError, match=r"version 9 .* retained: 1\.\.3"):
        open_store(tmp_path / "root", tmp_path / "b").load(9)


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete"])
def test_corrupt_changelog_names_file_and_version(tmp_path: Path, damage: str) -> None:
    store = open_store(tmp_path / "root", tmp_path / "a", interval=100)
    commit_versions(store, 3)
    changelog = store.checkpoint.read_manifest(3).changelogs[1]
    path = tmp_path / "root" / "files" / changelog.file.name
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[:-3])
    elif damage == "flip":
        path.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    else:
        path.unlink()
    with pytest.raises(CorruptFileError, match=rf"version 2 .*{changelog.file.name}"):
        open_store(tmp_path / "root", tmp_path / "b").load(3)


def test_corrupt_manifest_is_refused(tmp_path: Path) -> None:
    store = open_store(tmp_path / "root", tmp_path / "a")
    commit_versions(store, 2)
    (tmp_path / "root" / manifest_path(2)).write_text('{"kind": "pyrocks-state-store", "format')
    with pytest.raises(CorruptFileError, match="manifest of version 2"):
        open_store(tmp_path / "root", tmp_path / "b").load(2)


def damage_snapshot_sst(root: Path, snapshot_version: int, damage: str) -> str:
    """Replaces an SST of a published snapshot with damaged bytes; returns its name."""
    snapshot = StoreRoot(open_storage(str(root)), "probe").read_snapshot(snapshot_version)
    # the newest SST: uploaded by this snapshot, not shared with an earlier one
    sst = max((f for f in snapshot.files if f.local_name.endswith(".sst")),
              key=lambda f: f.local_name)
    path = root / "files" / sst.name
    data = path.read_bytes()
    path.unlink()  # a hard link to RocksDB's file: replace it rather than write through it
    path.write_bytes(b"\0" * sst.size if damage == "zeros" else data[: sst.size // 2])
    return sst.name


@pytest.mark.parametrize("damage", ["zeros", "truncate"])
def test_corrupt_base_snapshot_is_refused_naming_the_file(tmp_path: Path, damage: str) -> None:
    store = open_store(tmp_path / "root", tmp_path / "a", interval=2)
    commit_versions(store, 3, drain=True)  # version 3 is based on snapshot 2
    assert store.checkpoint.read_manifest(3).snapshot_version == 2
    name = damage_snapshot_sst(tmp_path / "root", 2, damage)
    with pytest.raises(CorruptFileError, match=rf"snapshot of version 2 .*{name}"):
        open_store(tmp_path / "root", tmp_path / "b").load(3)


def test_a_snapshot_file_recorded_empty_is_not_read_and_must_have_the_empty_checksum(
        tmp_path: Path) -> None:
    """A file the snapshot's record says is empty (RocksDB's WAL, in every snapshot) is
    made locally, not read: gone from the root, the load still rebuilds the version. A
    record that says empty with another checksum is refused, naming the file."""
    store = open_store(tmp_path / "root", tmp_path / "a", interval=2)
    expected = commit_versions(store, 3, drain=True)  # version 3 is based on snapshot 2
    descriptor = next((tmp_path / "root").glob("snapshots/*.json"))
    raw = json.loads(descriptor.read_text())
    empty = next(f for f in raw["files"] if f["size"] == 0)
    (tmp_path / "root" / "files" / empty["name"]).unlink()
    fresh = open_store(tmp_path / "root", tmp_path / "b")
    fresh.load(3)
    assert contents(fresh) == expected[3]
    fresh.close()
    empty["checksum"] = "crc32:0badf00d"
    descriptor.write_text(json.dumps(raw))
    with pytest.raises(CorruptFileError, match=rf"{empty['name']} says it is empty.*0badf00d"):
        open_store(tmp_path / "root", tmp_path / "c").load(3)


def test_unreadable_newest_snapshot_falls_back_to_an_older_one(tmp_path: Path) -> None:
    store = open_store(tmp_path / "root", tmp_path / "a", interval=2)
    expected = commit_versions(store, 4, drain=True)  # snapshots 2 and 4; 4 is based on 2
    assert store.checkpoint.snapshot_versions() == [2, 4]
    damage_snapshot_sst(tmp_path / "root", 4, "truncate")
    fresh = open_store(tmp_path / "root", tmp_path / "b")
    fresh.load(4)  # snapshot 2 plus changelogs 3 and 4
    assert contents(fresh) == expected[4]
    assert fresh.lineage.base_version == 2


def test_foreign_provider_files_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "1.delta").write_bytes(b"spark's own format")
    store = open_store(root, tmp_path / "a")
    with pytest.raises(ForeignCheckpointError, match="another state store provider.*1.delta"):
        store.load(0)
    with pytest.raises(ForeignCheckpointError):
        store.load(1)


def test_gc_keeps_retained_versions_and_deletes_the_rest(tmp_path: Path) -> None:
    store = open_store(tmp_path / "root", tmp_path / "a", interval=3)
    expected = commit_versions(store, 9)
    store.collect_garbage(min_versions_to_retain=3)
    checkpoint = store.checkpoint
    assert checkpoint.versions() == [7, 8, 9]
    leftover = gc.plan_garbage(checkpoint, 3, orphan_margin_s=0)
    assert (leftover.garbage, leftover.orphans, leftover.expired_snapshots) == ([], [], [])
    fresh = open_store(tmp_path / "root", tmp_path / "b")
    for v in (7, 8, 9):
        fresh.load(v)
        assert contents(fresh) == expected[v]


def test_a_local_root_lists_the_names_fsspec_lists(tmp_path: Path) -> None:
    """LocalStorage.names, the commit path's listing, skips fsspec: same names, in order.

    Uploads are drained: an upload in flight publishes a snapshot record between the two
    listings, whose aside copy (.tmp) one of them would see and the other not."""
    store = open_store(tmp_path / "root", tmp_path / "a", interval=2)
    commit_versions(store, 5, drain=True)
    storage = store.checkpoint.storage
    (tmp_path / "root" / "manifests" / "aside").mkdir()  # a directory is an entry too
    for rel in ("manifests", "snapshots", "files", "missing"):
        assert storage.names(rel) == Storage.names(storage, rel)
    assert len(storage.names("manifests")) == 6 and storage.names("missing") == []


def test_every_call_is_checked_against_the_stores_state(tmp_path: Path) -> None:
    """NONE -> load -> CLEAN -> write -> UPDATING -> commit -> CLEAN; abort of writes ->
    NONE; close -> CLOSED. A call the state does not allow names the state."""
    store = open_store(tmp_path / "root", tmp_path / "a")
    for call in (lambda: store.write(put("k", "v")), lambda: store.commit(1),
                 lambda: store.get("default", b"k")):
        with pytest.raises(StateStoreError, match="with no version loaded"):
            call()
    store.load(0)
    store.write(put("k", "v"))
    assert store.state.name == "UPDATING"
    store.abort()
    assert store.state.name == "NONE"
    with pytest.raises(StateStoreError, match="cannot write .*with no version loaded"):
        store.write(put("k", "v"))
    store.load(0)
    store.write(put("k", "v"))
    assert store.commit(1)["published"]
    store.abort()  # Spark may abort a store it committed: the version stays loaded
    assert store.state.name == "CLEAN" and store.get("default", b"k") == b"v"
    store.close()
    with pytest.raises(StateStoreError, match="cannot load version 1 with closed"):
        store.load(1)


def test_a_checkpoint_id_loads_the_commit_spark_recorded(tmp_path: Path) -> None:
    """checkpointFormatVersion 2: a commit answers its id (and its base's); a load given an
    id builds that commit of the version, even when a later run published the version again
    (a rewound query); an id no commit has is refused, naming it."""
    root = tmp_path / "root"
    first = open_store(root, tmp_path / "first")
    first.epoch = 1
    first.load(0)
    first.write(put("k", "first run"))
    one = first.commit(1)
    assert one["base_checkpoint_id"] is None and one["checkpoint_id"].endswith(".changelog")
    first.write(put("k", "first run, batch 2"))
    two = first.commit(2)
    assert two["base_checkpoint_id"] == one["checkpoint_id"]

    rewound = open_store(root, tmp_path / "rewound")
    rewound.epoch = 2
    rewound.load(1, one["checkpoint_id"])
    rewound.write(put("k", "second run"))
    again = rewound.commit(2)
    assert again["checkpoint_id"] != two["checkpoint_id"]
    assert again["base_checkpoint_id"] == one["checkpoint_id"]

    reader = open_store(root, tmp_path / "reader")
    reader.load(2)  # without an id: the latest run's commit
    assert reader.get("default", b"k") == b"second run"
    reader.load(2, two["checkpoint_id"])
    assert reader.get("default", b"k") == b"first run, batch 2"
    reader.load(2, again["checkpoint_id"])
    assert reader.get("default", b"k") == b"second run"
    with pytest.raises(VersionNotFoundError, match=r"version 2 .*checkpoint id 'nope'"):
        reader.load(2, "nope")


@pytest.mark.parametrize("claim", [False, True], ids=["no-claim", "claim"])
def test_a_copied_version_keeps_its_checkpoint_id(tmp_path: Path, claim: bool) -> None:
    """A savepoint or restore copies a version under new file names; a restored query's
    commit log (copied from the source's) still names the source commit's id."""
    source = open_store(tmp_path / "source", tmp_path / "s")
    commit_versions(source, 2)
    recorded = source.checkpoint.read_manifest(2).commit_id
    target_root = StoreRoot(open_storage(str(tmp_path / "target")), "test-store",
                            trusted_roots=frozenset({str(tmp_path / "source")}))
    copy = seeding.copy_version(source.checkpoint, source.checkpoint.plan_load(2), target_root,
                                claim=claim)
    assert copy.commit_id == recorded and (claim or copy.lineage != recorded)
    restored = open_store(tmp_path / "target", tmp_path / "t",
                          trusted=frozenset({(tmp_path / "source").as_uri(),
                                             str(tmp_path / "source")}))
    restored.load(2, recorded)
    assert restored.get("default", b"shared") == b"s1"
    restored.write(put("k", "after"))
    assert restored.commit(3)["base_checkpoint_id"] == recorded


@pytest.mark.parametrize("cf", ["default", "named"])
def test_a_frame_of_one_record_shape_applies_as_record_by_record(tmp_path: Path,
                                                                  cf: str) -> None:
    """A frame `records.uniform` unpacks at once leaves the state and the key count that
    the same records leave one by one: puts and deletes whose existence the shim knew or
    not, and a merge among them (it reads the working copy)."""
    def key(i: int) -> bytes:
        return b"key-%03d" % i

    existing = [records.encode(Op.PUT, cf, key(i), b"old-%03d" % i) for i in range(0, 40, 2)]
    stream = []
    for i in range(40):
        exists = i % 2 == 0
        known = KNOWN | (EXISTED if exists else 0)
        kind = i % 5
        if kind == 0:
            stream.append(records.encode(Op.PUT | known, cf, key(i), b"new-%03d" % i))
        elif kind == 1:
            stream.append(records.encode(Op.PUT, cf, key(i), b"new-%03d" % i))
        elif kind == 2:
            stream.append(records.encode(Op.DELETE | known, cf, key(i), b"xxxxxxx"))
        elif kind == 3:
            stream.append(records.encode(Op.DELETE, cf, key(i), b"xxxxxxx"))
        else:
            stream.append(records.encode(Op.MERGE, cf, key(i), b"+merged"))
    frame = b"".join(stream)
    assert records.uniform(frame) is not None

    copies = []
    for name, payloads in (("whole", [frame]), ("one-by-one", stream)):
        copy = WorkingCopy(name, StoreOptions(), None)
        copy.open(tmp_path / name)
        if cf != "default":
            copy.apply(records.encode(Op.CREATE_CF, cf), count_keys=True)
        copy.apply(b"".join(existing), count_keys=True)
        for payload in payloads:
            copy.apply(payload, count_keys=True)
        copies.append(copy)
    whole, one_by_one = (dict(c.scan(cf, None, None, None)) for c in copies)
    assert whole == one_by_one
    assert copies[0].num_keys == copies[1].num_keys == len(whole)
    assert whole[key(4)] == b"old-004+merged" and key(2) not in whole
    for copy in copies:
        copy.close()

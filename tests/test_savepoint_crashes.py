"""Property: a process killed at any storage mutation of a savepoint, a restore or a store's
seeding leaves either a clear error with nothing of the source touched, or a result that a
rerun completes; a completed chain always loads exactly the committed state.

The source is a checkpoint laid out as Spark and the provider lay it out (Spark's files are
stand-ins: a savepoint copies them as bytes), on a filesystem that dies on cue."""

from __future__ import annotations

import json
import shutil
import tempfile
from functools import partial
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import faulty_fs
from faulty_fs import FUSE, dies_during
from state_store.format.manifest import Owner
from state_store.format.restores import CLAIM_MARKER, RESTORE_RECORD
from state_store.format.seeding import apply_seed, trusted_roots
from state_store.format.storage import open_storage
from state_store.format.store_root import StoreRoot, query_dir
from state_store.savepoint import RestoreError, SourceError, restore, savepoint
from state_store.savepoint.verify import verify_savepoint
from test_engine import contents, open_store, put

SOURCE_ID = "11111111-2222-3333-4444-555555555555"
PARTITIONS = 2
BATCHES = 4  # batches 0..3 committed: state version 4


def build_source(base: Path) -> tuple[str, dict[str, dict[bytes, bytes]]]:
    """A checkpoint of query SOURCE_ID with two stores at version BATCHES; their state."""
    ckpt = base / "ckpt"
    (ckpt / "offsets").mkdir(parents=True)
    (ckpt / "commits").mkdir()
    (ckpt / "sources" / "0").mkdir(parents=True)
    (ckpt / "state" / "0" / "_metadata").mkdir(parents=True)
    (ckpt / "metadata").write_text(json.dumps({"id": SOURCE_ID}) + "\n")
    for b in range(BATCHES):
        (ckpt / "offsets" / str(b)).write_text(f"v1\n{{\"batch\": {b}}}\n")
        (ckpt / "commits" / str(b)).write_text("v1\n{}\n")
    (ckpt / "sources" / "0" / "0").write_text("v1\nfile-0\n")
    (ckpt / "state" / "0" / "_metadata" / "metadata").write_text(
        "v1\n" + json.dumps({"operatorInfo": {"operatorId": 0, "operatorName": "dedupe"},
                             "stateStoreInfo": [{"storeName": "default", "numColsPrefixKey": 0,
                                                 "numPartitions": PARTITIONS}]}))
    expected = {}
    for p in range(PARTITIONS):
        root = f"{faulty_fs.PROTOCOL}://{ckpt}/state/0/{p}/{query_dir(SOURCE_ID)}"
        store = open_store(root, base / f"build-{p}", interval=2)
        for v in range(BATCHES):
            store.load(v)
            store.write(put(f"k{v % 3}-{p}", f"v{v}") + put(f"n{v}-{p}", "x"))
            store.commit(v + 1)
            store.snapshots.drain()
        expected[f"0/{p}"] = contents(store)
        store.close()
    return f"{faulty_fs.PROTOCOL}://{ckpt}", expected


def snapshot_of(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes()
            for p in directory.rglob("*") if p.is_file()}


def take_savepoint(base: Path, source: str, crash_at: int | None,
                   died: list[bool] | None = None) -> str:
    before = snapshot_of(base / "ckpt")
    target = f"{faulty_fs.PROTOCOL}://{base}/sp"
    crashed = dies_during(crash_at, lambda: savepoint(source, target))
    if died is not None:
        died.append(crashed)
    if crashed:
        assert snapshot_of(base / "ckpt") == before  # the source is only read
        if (base / "sp").exists():
            with pytest.raises(SourceError, match="incomplete savepoint|neither"):
                restore(target, f"{faulty_fs.PROTOCOL}://{base}/never")
        target = f"{faulty_fs.PROTOCOL}://{base}/sp-again"
        savepoint(source, target)
    assert verify_savepoint(open_storage(target)).verified
    assert snapshot_of(base / "ckpt") == before
    return target


def do_restore(base: Path, source: str, source_dir: Path, mode: str,
               crash_at: int | None) -> str:
    before = snapshot_of(source_dir)
    new = f"{faulty_fs.PROTOCOL}://{base}/new"
    if dies_during(crash_at, lambda: restore(source, new, mode=mode)):
        after = snapshot_of(source_dir)
        claim = after.pop(CLAIM_MARKER, None)
        assert after == before  # at most the claim marker is added to the source
        if claim is not None:  # the marker names this restore, so its rerun may go on
            record = json.loads((base / "new" / RESTORE_RECORD).read_text())
            assert json.loads(claim)["query_id"] == record["query_id"]
        assert not (base / "new" / "metadata").exists()  # incomplete: unusable by Spark
        restore(source, new, mode=mode)  # the rerun completes it
    return json.loads((base / "new" / "metadata").read_text())["id"]


def seed_and_load(base: Path, query_id: str, mode: str, crash_at: int | None,
                  expected: dict[str, dict[bytes, bytes]]) -> None:
    for key, want in expected.items():
        location = open_storage(f"{faulty_fs.PROTOCOL}://{base}/new/state/{key}")
        target = StoreRoot(location.child(query_dir(query_id)), key, location)
        if dies_during(crash_at, partial(apply_seed, location, target, query_id)):
            assert apply_seed(location, target, query_id) is not None or target.versions()
        assert target.versions() == [BATCHES]
        refs = target.read_manifest(BATCHES).changelogs
        owners = {c.file.owner for c in refs}
        assert owners == ({Owner.CLAIMED} if mode == "claim" else {Owner.OWNED})
        reader = open_store(target.storage.url, base / f"read-{key.replace('/', '-')}",
                            trusted=trusted_roots(location, query_id))
        reader.load(BATCHES)
        assert contents(reader) == want, key
        reader.close()


crash_point = st.none() | st.integers(min_value=0, max_value=45)


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["no-claim", "claim"]), st.booleans(), crash_point, crash_point,
       crash_point)
def test_crashes_in_savepoint_restore_and_seeding(mode: str, via_savepoint: bool,
                                                  at_savepoint: int | None,
                                                  at_restore: int | None,
                                                  at_seed: int | None) -> None:
    base = Path(tempfile.mkdtemp(prefix="pyrocks-sp-crash-"))
    try:
        source, expected = build_source(base)
        source_dir = base / "ckpt"
        if via_savepoint:
            source = take_savepoint(base, source, at_savepoint)
            source_dir = Path(source.split("://", 1)[1])
        query_id = do_restore(base, source, source_dir, mode, at_restore)
        assert query_id != SOURCE_ID
        seed_and_load(base, query_id, mode, at_seed, expected)
    finally:
        FUSE.disarm()
        shutil.rmtree(base, ignore_errors=True)


def test_every_crash_point_of_a_savepoint(tmp_path: Path) -> None:
    """Exhaustively, for one savepoint: each mutation in turn is the one that kills it."""
    source, _ = build_source(tmp_path / "count")
    before = FUSE.mutations
    take_savepoint(tmp_path / "count", source, None)
    mutations = FUSE.mutations - before
    assert mutations > 10
    for crash_at in range(mutations):
        base = tmp_path / f"crash-{crash_at}"
        source, _ = build_source(base)
        died: list[bool] = []
        take_savepoint(base, source, crash_at, died)
        assert died == [True], f"no crash at mutation {crash_at} of {mutations}"


def test_a_restore_refuses_a_directory_that_is_not_its_own(tmp_path: Path) -> None:
    source, _ = build_source(tmp_path)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    with pytest.raises(RestoreError, match="not empty"):
        restore(source, str(busy))
    done = restore(source, str(tmp_path / "done"))
    with pytest.raises(RestoreError, match="already a checkpoint"):
        restore(source, done.checkpoint)
    with pytest.raises(RestoreError, match="unknown restore mode 'steal'"):
        restore(source, str(tmp_path / "other"), mode="steal")
    with pytest.raises(SourceError, match="batch 9 .* is not committed"):
        restore(source, str(tmp_path / "other"), batch=9)


def test_seeds_of_an_earlier_build_still_apply(tmp_path: Path) -> None:
    """A restore made before no-claim restores copied at once (and claims recorded their
    roots) left seeds naming only the source's root: their stores still seed from it."""
    source, expected = build_source(tmp_path)
    for mode in ("no-claim", "claim"):
        new = tmp_path / f"new-{mode}"
        query_id = json.loads((Path(restore(source, str(new), mode=mode).checkpoint)
                               / "metadata").read_text())["id"]
        for key, want in expected.items():
            location = open_storage(str(new / "state" / key))
            shutil.rmtree(new / "state" / key / query_dir(query_id), ignore_errors=True)
            seed = json.loads((new / "state" / key / "_seed.json").read_text())
            source_root = f"{source}/state/{key}/{query_dir(SOURCE_ID)}"
            seed["source_root"] = source_root  # as the earlier build wrote it
            seed.pop("roots", None)
            (new / "state" / key / "_seed.json").write_text(json.dumps(seed))
            target = StoreRoot(location.child(query_dir(query_id)), key, location)
            assert apply_seed(location, target, query_id) is not None
            reader = open_store(target.storage.url, tmp_path / f"read-{mode}-{key[-1]}",
                                trusted=trusted_roots(location, query_id))
            reader.load(BATCHES)
            assert contents(reader) == want
            reader.close()
        if mode == "claim":
            (Path(source.split("://", 1)[1]) / CLAIM_MARKER).unlink()  # for the next one

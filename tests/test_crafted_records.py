"""Property: a crafted record never makes this project read, link, change or delete a file
outside the roots it works in.

Every kind of durable record (manifest, snapshot descriptor, savepoint descriptor, seed,
restore record, claim marker) gets one field replaced by a hostile value: a `..` path, an
absolute path, a URL, an empty segment, another root. Then the operations that read such a
record run as users run them (savepoint, restore in both modes, a store's first open and
load in the worker, GC, inspect, the result store's cleanup), inside a tree of sentinel
files. After each: every sentinel has its bytes, its single link and its access time, and no
file appeared outside the operation's own directories; an operation that refused says
which field or value it refused.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from state_store.errors import CorruptFileError, StateStoreError
from state_store.format import gc
from state_store.format.storage import open_storage
from state_store.format.store_root import query_dir
from state_store.results import Backoff, CleanupFailed, QueryResult
from state_store.results.cleanup import StateAccess, clean_up
from state_store.runtime.worker import Session, WorkerShared
from state_store.savepoint import restore, savepoint
from state_store.savepoint.verify import verify_savepoint
from state_store.tools.inspect import describe_location
from test_engine import open_store, put

QUERY_ID = "11111111-2222-3333-4444-555555555555"
PARTITIONS = 2
VERSIONS = 3


@dataclass
class Tree:
    base: Path
    victim: Path  # the sentinels: nothing may read, link, change or delete them
    ckpt: Path  # a checkpoint of QUERY_ID, two stores at VERSIONS
    sp: Path  # a native savepoint of it
    claimed: Path  # a CLAIM restore of a copy of it (seeds, restore record, claim marker)
    claimed_source: Path

    def hostile_names(self) -> list[str]:
        secret = self.victim / "secret.txt"
        return ["../../../../victim/secret.txt", f"../{'../' * 8}{secret}", str(secret),
                f"file://{secret}", "s3://bucket/victim/secret.txt", "files//secret.txt",
                "", ".", "..", "files/../../secret.txt", "..\\..\\secret.txt"]

    def hostile_roots(self) -> list[str]:
        return [str(self.victim), f"file://{self.victim}", f"{self.ckpt}/../victim",
                "victim", f"{self.victim}/files", "", "s3://bucket/victim"]


def build(base: Path) -> Tree:
    victim = base / "victim"
    (victim / "files").mkdir(parents=True)
    for name in ("secret.txt", "_SUCCESS", "files/secret.txt", "files/_SUCCESS"):
        (victim / name).write_bytes(b"" if name.endswith("_SUCCESS") else b"top secret")
    tree = Tree(base, victim, base / "work" / "ckpt", base / "work" / "sp",
                base / "work" / "claimed", base / "work" / "claimed-source")
    _checkpoint(tree.ckpt, base / "scratch")
    savepoint(str(tree.ckpt), str(tree.sp))
    shutil.copytree(tree.ckpt, tree.claimed_source)
    restore(str(tree.claimed_source), str(tree.claimed), mode="claim")
    for p in victim.rglob("*"):  # atime before mtime: a read moves it (relatime)
        os.utime(p, (1_000_000, time.time()))
    return tree


def _checkpoint(ckpt: Path, scratch: Path) -> None:
    (ckpt / "offsets").mkdir(parents=True)
    (ckpt / "commits").mkdir()
    (ckpt / "state" / "0" / "_metadata").mkdir(parents=True)
    (ckpt / "metadata").write_text(json.dumps({"id": QUERY_ID}) + "\n")
    for b in range(VERSIONS):
        (ckpt / "offsets" / str(b)).write_text('v1\n{"conf": {}}\n{}\n')
        (ckpt / "commits" / str(b)).write_text("v1\n{}\n")
    (ckpt / "state" / "0" / "_metadata" / "metadata").write_text("v1\n" + json.dumps(
        {"operatorInfo": {"operatorId": 0, "operatorName": "stateStoreSave"},
         "stateStoreInfo": [{"storeName": "default", "numColsPrefixKey": 0,
                             "numPartitions": PARTITIONS}]}))
    for p in range(PARTITIONS):
        store = open_store(ckpt / "state" / "0" / str(p) / query_dir(QUERY_ID),
                           scratch / str(p), interval=2)
        for v in range(VERSIONS):
            store.load(v)
            store.write(put(f"k{v}", "v") + put(f"p{p}", str(v)))
            store.commit(v + 1)
            store.snapshots.drain()
        store.close()


# ---- the records and their fields -----------------------------------------------------

def records(tree: Tree, kind: str) -> list[Path]:
    found = {
        "manifest": sorted(tree.ckpt.glob("state/0/*/query-*/manifests/*.json")),
        "snapshot": sorted(tree.ckpt.glob("state/0/*/query-*/snapshots/*.json")),
        "savepoint manifest": sorted(tree.sp.glob("stores/0/*/manifests/*.json")),
        "savepoint snapshot": sorted(tree.sp.glob("stores/0/*/snapshots/*.json")),
        "savepoint descriptor": [tree.sp / "_savepoint.json"],
        "seed": sorted(tree.claimed.glob("state/0/*/_seed.json")),
        "restore record": [tree.claimed / "_restore.json"],
        "claim marker": [tree.claimed_source / "_claimed.json"],
    }[kind]
    assert found, kind
    return found


FIELDS: dict[str, list[tuple[Any, ...]]] = {
    "manifest": [("changelogs", -1, "file", "name"), ("changelogs", -1, "file", "root"),
                 ("base_lineage",)],
    "snapshot": [("files", 0, "name"), ("files", 0, "local_name"), ("files", 0, "root"),
                 ("lineage",)],
    "savepoint descriptor": [("files", 0, "path"), ("files", -1, "path"), ("stores", 0),
                             ("source",)],
    "seed": [("source_root",), ("roots", 0), ("query_id",), ("source",)],
    "restore record": [("query_id",), ("source",)],
    "claim marker": [("query_id",), ("checkpoint",)],
}
FIELDS["savepoint manifest"] = FIELDS["manifest"]
FIELDS["savepoint snapshot"] = FIELDS["snapshot"]


def craft(record: Path, field: tuple[Any, ...], value: str) -> None:
    raw = json.loads(record.read_text())
    node = raw
    for step in field[:-1]:
        node = node[step]
    node[field[-1]] = value
    if field[-1] == "root" and value:
        node["owner"] = "claimed"  # a root beside a file of our own is refused outright
    record.write_text(json.dumps(raw))


# ---- what users run ---------------------------------------------------------------------

def first_open_and_load(tree: Tree, checkpoint: Path) -> None:
    """Each store of `checkpoint` opened and loaded as the worker does it (seed applied),
    then its garbage collected with every file aged past the margin."""
    query_id = json.loads((checkpoint / "metadata").read_text())["id"]
    for p in range(PARTITIONS):
        session = Session(None, WorkerShared(  # type: ignore[arg-type]
            tree.base / "worker", ThreadPoolExecutor(1)))
        spec = {"store_root": str(checkpoint / "state" / "0" / str(p)), "store_path": "",
                "store_name": f"store {p}", "local_name": f"l{p}", "query_id": query_id,
                "options": {}}
        try:
            session.open(spec)
            assert session.store is not None
            session.store.load(session.store.checkpoint.versions()[-1])
            gc.collect_garbage(session.store.checkpoint, 1, orphan_margin_s=0)
        finally:
            session.close_store()


def cleanup_after_run(tree: Tree, checkpoint: Path) -> None:
    result = QueryResult(run_key=f"run-{uuid.uuid4().hex[:6]}", query_id="q", run_id="r",
                         outcome="stopped", checkpoint=str(checkpoint), retain=1)
    try:
        clean_up(result, StateAccess(), Backoff(0.0, 0.0, max_attempts=1))
    except CleanupFailed as e:
        raise StateStoreError(str(e)) from e


def inspect(tree: Tree, target: Path) -> None:
    storage = open_storage(str(target))
    if (target / "_savepoint.json").exists():
        report = verify_savepoint(storage)
        if report.problems:
            raise StateStoreError("; ".join(report.problems))
    describe_location(storage, 1, 0)


Operation = Callable[[Tree], object]
OPERATIONS: dict[str, list[tuple[str, Operation]]] = {
    "checkpoint": [
        ("savepoint", lambda t: savepoint(str(t.ckpt), str(t.base / "work" / "new-sp"))),
        ("restore no-claim", lambda t: first_open_and_load(t, Path(restore(
            str(t.ckpt), str(t.base / "work" / "new-nc")).checkpoint))),
        ("restore claim", lambda t: first_open_and_load(t, Path(restore(
            str(t.ckpt), str(t.base / "work" / "new-c"), mode="claim").checkpoint))),
        ("open, load and GC", lambda t: first_open_and_load(t, t.ckpt)),
        ("inspect", lambda t: inspect(t, t.ckpt)),
        ("result cleanup", lambda t: cleanup_after_run(t, t.ckpt)),
    ],
    "savepoint": [
        ("restore no-claim", lambda t: first_open_and_load(t, Path(restore(
            str(t.sp), str(t.base / "work" / "new-nc")).checkpoint))),
        ("restore claim", lambda t: first_open_and_load(t, Path(restore(
            str(t.sp), str(t.base / "work" / "new-c"), mode="claim").checkpoint))),
        ("savepoint of it", lambda t: savepoint(str(t.sp), str(t.base / "work" / "new-sp"))),
        ("inspect", lambda t: inspect(t, t.sp)),
    ],
    "claimed": [
        ("open, load and GC", lambda t: first_open_and_load(t, t.claimed)),
        ("inspect", lambda t: inspect(t, t.claimed)),
        ("result cleanup", lambda t: cleanup_after_run(t, t.claimed)),
        ("savepoint", lambda t: (first_open_and_load(t, t.claimed),
                                 savepoint(str(t.claimed), str(t.base / "work" / "new-sp")))),
        ("restore the source", lambda t: restore(str(t.claimed_source),
                                                 str(t.base / "work" / "new-nc"))),
        ("source's own first open", lambda t: first_open_and_load(t, t.claimed_source)),
    ],
}
WHERE = {"manifest": "checkpoint", "snapshot": "checkpoint", "savepoint manifest": "savepoint",
         "savepoint snapshot": "savepoint", "savepoint descriptor": "savepoint",
         "seed": "claimed", "restore record": "claimed", "claim marker": "claimed"}


# ---- what must hold ---------------------------------------------------------------------

def sentinels(tree: Tree) -> dict[str, tuple[bytes, int, float]]:
    return {str(p.relative_to(tree.victim)): (unread(p), p.stat().st_nlink, p.stat().st_atime)
            for p in sorted(tree.victim.rglob("*")) if p.is_file()}


def unread(path: Path) -> bytes:
    """The file's bytes, its atime left alone (O_NOATIME: the test owns the file), so only
    the operation's reads can move it. A plain read here moved it, and when that read fell
    in the clock tick of `build`'s utime (relatime moves an atime not after the ctime) the
    next plain read moved it again: a failure by timing, and a read the check missed."""
    with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOATIME), "rb") as file:
        return file.read()


def outside_work(tree: Tree) -> set[str]:
    """Every path outside the directories operations may write (work/, scratch/)."""
    allowed = (tree.base / "work", tree.base / "scratch", tree.base / "worker")
    return {str(p) for p in tree.base.rglob("*")
            if not any(p == a or a in p.parents for a in allowed)}


def atime_is_tracked(base: Path) -> bool:
    probe = base / "atime-probe"
    probe.write_bytes(b"x")
    os.utime(probe, (1_000_000, time.time()))
    probe.read_bytes()
    tracked = probe.stat().st_atime > 1_000_000
    probe.unlink()
    return tracked


KINDS = sorted(FIELDS)


@st.composite
def attacks(draw: st.DrawFn) -> tuple[str, tuple[Any, ...], int, str, int]:
    kind = draw(st.sampled_from(KINDS))
    field = draw(st.sampled_from(FIELDS[kind]))
    pool = "root" if field[-1] in ("root", "source_root", "source", "checkpoint") or \
        field[0] == "roots" else "name"
    value = draw(st.integers(0, 10))
    operation = draw(st.integers(0, len(OPERATIONS[WHERE[kind]]) - 1))
    return kind, field, value, pool, operation


@settings(max_examples=70, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(attacks())
def test_a_crafted_record_never_touches_a_file_outside_its_roots(
        attack: tuple[str, tuple[Any, ...], int, str, int]) -> None:
    kind, field, pick, pool, operation = attack
    base = Path(tempfile.mkdtemp(prefix="pyrocks-crafted-"))
    try:
        tree = build(base)
        values = tree.hostile_roots() if pool == "root" else tree.hostile_names()
        value = values[pick % len(values)]
        for record in records(tree, kind):
            craft(record, field, value)
        before, outside = sentinels(tree), outside_work(tree)
        watch_atime = atime_is_tracked(base / "scratch")
        name, run = OPERATIONS[WHERE[kind]][operation]
        try:
            run(tree)
        except CorruptFileError as e:  # a refused record says what it refused
            message = str(e)
            assert str(field[-1]) in message or value in message or "corrupt" in message \
                or "checksum" in message or "missing" in message, (name, message)
        except StateStoreError:
            pass  # a refusal the operation gives anyway (e.g. the source is claimed)
        after = sentinels(tree)
        if not watch_atime:
            before = {k: v[:2] + (0.0,) for k, v in before.items()}
            after = {k: v[:2] + (0.0,) for k, v in after.items()}
        assert after == before, f"{name} touched a sentinel ({kind} {field} = {value!r})"
        assert outside_work(tree) == outside, f"{name} wrote outside its directories"
    finally:
        shutil.rmtree(base, ignore_errors=True)

"""What `state-store inspect` reports about a checkpoint or a store root.

Read-only: it lists records and plans garbage collection without deleting anything.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from ..format.manifest import MANIFEST_DIR, FileRef, Owner
from ..format.seeding import CLAIM, SEED_FILE, Seed, trusted_roots
from ..format.storage import Storage
from ..format.store_root import QUERY_DIR_PREFIX, StoreRoot
from ..savepoint.layout import CLAIM_MARKER, CLAIM_RELEASE, RESTORE_RECORD
from ..savepoint.sources import stores_under_root


@dataclass
class VersionReport:
    version: int
    num_keys: int
    base_snapshot: int | None
    changelogs: list[int]
    bytes_needed: int  # snapshot it loads from plus changelogs it replays
    bytes_shared_with_previous: int


@dataclass
class SnapshotReport:
    version: int
    full: bool
    files: list[dict[str, Any]]  # name, size, owner, local_name
    bytes: int
    bytes_shared_with_previous: int


@dataclass
class StoreReport:
    root: str
    query_id: str = ""  # the query whose root this is ("" for a root not kept per query)
    # An earlier query of the same checkpoint path (it was reset): never read again, and
    # deleted by the current query's GC once idle for the orphan margin.
    stale: bool = False
    versions: list[VersionReport] = field(default_factory=list)
    snapshots: list[SnapshotReport] = field(default_factory=list)
    owned_bytes: int = 0
    references: list[str] = field(default_factory=list)  # other roots retained records use
    gc_would_delete: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def find_store_roots(storage: Storage) -> list[str]:
    """Store roots (relative) at or under `storage`: directories holding manifests/."""
    pattern = f"{storage.root}/**/{MANIFEST_DIR}"
    found = {p.rsplit("/", 1)[0] for p in storage.fs.glob(pattern)}
    if storage.fs.exists(f"{storage.root}/{MANIFEST_DIR}"):
        found.add(storage.root)
    return sorted(p[len(storage.root):].lstrip("/") for p in found)


def describe_root(storage: Storage, retain: int, orphan_margin_s: float) -> list[StoreReport]:
    """A report per store root at or under `storage` (a checkpoint, a rootUrl, a store)."""
    reports = []
    queries: dict[str, dict[str, StoreReport]] = {}  # base -> query id -> its store report
    for rel in find_store_roots(storage):
        base, _, name = rel.rpartition("/")
        own = storage.child(rel) if rel else storage
        if not name.startswith(QUERY_DIR_PREFIX):
            reports.append(describe_store(StoreRoot(own, rel), retain, orphan_margin_s))
            continue
        at_base = storage.child(base) if base else storage
        query_id = name[len(QUERY_DIR_PREFIX):]
        checkpoint = StoreRoot(own, rel, at_base, trusted_roots(at_base, query_id))
        report = describe_store(checkpoint, retain, orphan_margin_s)
        report.query_id = query_id
        queries.setdefault(base, {})[report.query_id] = report
        reports.append(report)
    current = _checkpoint_query_id(storage)
    for base, group in queries.items():
        # The checkpoint's own query if we were given the checkpoint, else the one that
        # committed last (after a reset, the old query no longer commits here).
        def committed(query_id: str, base: str = base) -> float:
            return StoreRoot.last_commit(
                storage.child(f"{base}/{QUERY_DIR_PREFIX}{query_id}".lstrip("/")))

        live = current if current in group else max(group, key=committed)
        for query_id, report in group.items():
            report.stale = query_id != live
    return reports


@dataclass
class LocationReport:
    """What `state-store inspect` reports about a checkpoint (or any root of stores)."""

    location: str
    kind: str  # "checkpoint", or "state root" (a rootUrl, a store root)
    query_id: str | None
    # (contract) the sources (savepoints, other checkpoints) a retained version of the
    # current query still needs; [] when none: then they may be deleted.
    depends_on: list[str]
    restored_from: dict[str, Any] | None
    claimed_by: dict[str, Any] | None
    stores: list[StoreReport]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def describe_location(storage: Storage, retain: int, orphan_margin_s: float,
                      state_root: Storage | None = None) -> LocationReport:
    """Every store root at or under `storage` (or, for a query that keeps its state under
    a rootUrl, the current query's stores under `state_root`), and what the current query
    depends on. A restored store that has not opened yet still depends on its source; so
    does one this report cannot see: the list errs on the side of keeping a source."""
    query_id = _checkpoint_query_id(storage)
    seeds = _seeds(storage)
    if state_root is not None and query_id:
        roots = stores_under_root(state_root, query_id)
        stores = [describe_store(StoreRoot(root, key, trusted_roots=_trusted(seeds, key,
                                                                              query_id)),
                                 retain, orphan_margin_s)
                  for key, root in sorted(roots.items())]
    else:
        stores = describe_root(storage, retain, orphan_margin_s)
        roots = {}
    depends: set[str] = set()
    for key, seed in seeds.items():
        # A no-claim restore copied its stores already; a claim is applied at first open.
        if seed.mode != CLAIM or seed.query_id != query_id:
            continue
        root = roots.get(key) or storage.child(f"state/{key}/{QUERY_DIR_PREFIX}{seed.query_id}")
        if not StoreRoot(root, key).versions():
            depends.add(seed.source)
    by_root = {root: seed.source for seed in seeds.values() for root in seed.roots}
    for report in stores:
        if not report.stale:
            depends.update(by_root.get(root, root) for root in report.references)
    restored = storage.read_if_exists(RESTORE_RECORD)
    return LocationReport(
        storage.url, "checkpoint" if query_id else "state root", query_id, sorted(depends),
        json.loads(restored) if restored else None, _claim(storage), stores)


def _trusted(seeds: dict[str, Seed], key: str, query_id: str) -> frozenset[str]:
    seed = seeds.get(key)
    return frozenset(seed.roots) if seed is not None and seed.query_id == query_id \
        else frozenset()


def _claim(storage: Storage) -> dict[str, Any] | None:
    """The claim marker, with `released_at` once the claimer released the source."""
    claimed = storage.read_if_exists(CLAIM_MARKER)
    if claimed is None:
        return None
    released = storage.read_if_exists(CLAIM_RELEASE)
    return {**json.loads(claimed),
            "released_at": json.loads(released)["released_at"] if released else None}


def _seeds(storage: Storage) -> dict[str, Seed]:
    """The restore seeds of a checkpoint, by store key."""
    seeds = {}
    for path in storage.find("state"):
        if path.endswith(f"/{SEED_FILE}"):
            key = path[len("state/"):-len(SEED_FILE) - 1]
            seeds[key] = Seed.from_json(storage.read(path, "restore seed"), path)
    return seeds


def format_location(report: LocationReport) -> str:
    lines = []
    if report.restored_from:
        r = report.restored_from
        lines.append(f"restored from {r['source']} batch {r['batch']} ({r['mode']}) as query "
                     f"{r['query_id']}")
    if report.claimed_by:
        c = report.claimed_by
        lines.append(f"CLAIMED by query {c['query_id']} ({c['checkpoint']}): do not run this "
                     "query again; its files belong to the claiming query")
        if c.get("released_at"):
            lines.append(f"released by the claiming query at {c['released_at']}: it needs "
                         "nothing here any more; this location may be deleted")
    lines.append(f"depends on: {', '.join(report.depends_on)}" if report.depends_on else
                 "depends on: nothing outside its own state")
    lines += [format_report(store) for store in report.stores]
    return "\n".join(lines)


def _checkpoint_query_id(storage: Storage) -> str | None:
    """The query id in `<checkpoint>/metadata`, if `storage` is a Spark checkpoint."""
    data = storage.read_if_exists("metadata")
    if data is None:
        return None
    try:
        return str(json.loads(data.splitlines()[0])["id"])
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def describe_store(checkpoint: StoreRoot, retain: int, orphan_margin_s: float) -> StoreReport:
    report = StoreReport(checkpoint.storage.url)
    index = checkpoint.index()
    previous: set[str] = set()
    all_files: dict[str, FileRef] = {}
    for version in index.versions():
        plan = checkpoint.plan_load(version, index)
        names = {f.name for f in plan.files}
        report.versions.append(VersionReport(
            version, plan.manifest.num_keys, plan.snapshot.version if plan.snapshot else None,
            [c.version for c in plan.changelogs], _size(plan.files),
            _size(f for f in plan.files if f.name in previous)))
        previous = names
        all_files.update((c.file.name, c.file) for c in plan.manifest.changelogs)
    previous = set()
    for path in reversed(index.snapshot_paths()):
        snap = checkpoint.read_snapshot_at(path)
        report.snapshots.append(SnapshotReport(
            snap.version, snap.full,
            [{"name": f.name, "size": f.size, "owner": f.owner.value,
              "local_name": f.local_name} for f in snap.files],
            _size(snap.files), _size(f for f in snap.files if f.name in previous)))
        previous = {f.name for f in snap.files}
        all_files.update((f.name, f) for f in snap.files)
    report.owned_bytes = sum(f.size for f in all_files.values() if f.owner is Owner.OWNED)
    report.references = sorted({f.root for f in all_files.values() if f.root})
    gc = checkpoint.plan_garbage(retain, orphan_margin_s)
    report.gc_would_delete = {
        "manifests": gc.expired_manifests, "superseded": gc.superseded_manifests,
        "snapshots": gc.expired_snapshots, "files": [f.name for f in gc.garbage],
        "orphans": gc.orphans, "stale_queries": gc.stale_queries,
    }
    return report


def format_report(report: StoreReport) -> str:
    lines = [f"store {report.root}  ({report.owned_bytes:,} bytes owned)"]
    if report.stale:
        lines.append(f"  STALE: query {report.query_id} is an earlier query of this checkpoint "
                     "path; nothing reads it, the current query's GC deletes it once idle")
    for v in report.versions:
        lines.append(
            f"  version {v.version:>6}  keys {v.num_keys:>10,}  loads from snapshot "
            f"{v.base_snapshot if v.base_snapshot is not None else '-':>6} + "
            f"{len(v.changelogs)} changelogs  needs {v.bytes_needed:,} B "
            f"({v.bytes_shared_with_previous:,} B shared with the previous version)")
    for s in report.snapshots:
        kind = "full" if s.full else "incremental"
        lines.append(f"  snapshot {s.version:>5}  {kind:<11} {len(s.files)} files  "
                     f"{s.bytes:,} B ({s.bytes_shared_with_previous:,} B shared with previous)")
        for f in s.files:
            lines.append(f"      {f['name']}  {f['size']:,} B  {f['owner']}")
    gc = report.gc_would_delete
    lines.append(f"  GC would delete: {len(gc['manifests'])} manifests {gc['manifests']}, "
                 f"{len(gc['superseded'])} superseded by a later run, "
                 f"{len(gc['snapshots'])} snapshots, {len(gc['files'])} files, "
                 f"{len(gc['orphans'])} orphans, "
                 f"{len(gc['stale_queries'])} earlier queries' roots {gc['stale_queries']}")
    return "\n".join(lines)


def _size(files) -> int:
    return sum(f.size for f in files)

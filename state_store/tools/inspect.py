"""What `state-store inspect` reports about a checkpoint or a store root.

Read-only: it lists records and plans garbage collection without deleting anything.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..format import gc
from ..format.dependencies import depends_on, store_seeds
from ..format.manifest import MANIFEST_DIR, FileRef, Manifest, Owner
from ..format.restores import CLAIM_RELEASE, RESTORE_RECORD, ClaimRelease, RestoreRecord, read_claim
from ..format.seeding import Seed, trusted_roots
from ..format.spark_checkpoint import SourceError, query_id_of, stores_under_root
from ..format.storage import Storage
from ..format.store_root import QUERY_DIR_PREFIX, StoreRoot
from ..options import StoreOptions


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
    # The settings the dry run used: given on the command line, else those the query's
    # last manifest recorded, else the defaults.
    gc_settings: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def find_store_roots(storage: Storage) -> list[str]:
    """Store roots (relative) at or under `storage`: directories holding manifests/."""
    found = {p.rpartition("/")[0] for p in storage.glob(f"**/{MANIFEST_DIR}")}
    if storage.fs.exists(f"{storage.root}/{MANIFEST_DIR}"):
        found.add("")
    return sorted(found)


def describe_root(storage: Storage, retain: int | None,
                  orphan_margin_s: float | None) -> list[StoreReport]:
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
    current = _query_id(storage)
    for base, group in queries.items():
        # The checkpoint's own query if we were given the checkpoint, else the one that
        # committed last (after a reset, the old query no longer commits here).
        def committed(query_id: str, base: str = base) -> float:
            return gc.last_commit(
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


def describe_location(storage: Storage, retain: int | None, orphan_margin_s: float | None,
                      state_root: Storage | None = None) -> LocationReport:
    """Every store root at or under `storage` (or, for a query that keeps its state under
    a rootUrl, the current query's stores under `state_root`), and what the current query
    depends on (format/dependencies.py)."""
    query_id = _query_id(storage)
    if state_root is not None and query_id:
        seeds = store_seeds(storage)
        stores = [describe_store(StoreRoot(root, key, trusted_roots=_trusted(seeds, key,
                                                                              query_id)),
                                 retain, orphan_margin_s)
                  for key, root in sorted(stores_under_root(state_root, query_id).items())]
    else:
        stores = describe_root(storage, retain, orphan_margin_s)
    restored = storage.read_if_exists(RESTORE_RECORD)
    return LocationReport(
        storage.url, "checkpoint" if query_id else "state root", query_id,
        depends_on(storage, state_root),
        asdict(RestoreRecord.from_json(restored, f"{storage.url}/{RESTORE_RECORD}"))
        if restored else None, _claim(storage), stores)


def _trusted(seeds: dict[str, Seed], key: str, query_id: str) -> frozenset[str]:
    seed = seeds.get(key)
    return frozenset(seed.roots) if seed is not None and seed.query_id == query_id \
        else frozenset()


def _claim(storage: Storage) -> dict[str, Any] | None:
    """The claim marker, with `released_at` once the claimer released the source."""
    claim = read_claim(storage)
    if claim is None:
        return None
    data = storage.read_if_exists(CLAIM_RELEASE)
    released = ClaimRelease.from_json(data, f"{storage.url}/{CLAIM_RELEASE}") if data else None
    return {**asdict(claim), "released_at": released.released_at if released else None}


def _query_id(storage: Storage) -> str | None:
    """The query id of `storage` if it is a Spark checkpoint (a damaged `metadata` is shown
    as no query: inspect still lists what it finds)."""
    try:
        return query_id_of(storage)
    except SourceError:
        return None


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


# What a store records when nothing sets them (StoreOptions owns these defaults).
DEFAULT_RETAIN = StoreOptions().min_versions_to_retain
DEFAULT_ORPHAN_MARGIN_S = StoreOptions().orphan_margin_seconds


def gc_settings(latest: Manifest | None, retain: int | None,
                orphan_margin_s: float | None) -> dict[str, Any]:
    """What the GC dry run of a store uses: each setting given, else the one its query's
    latest manifest recorded (what its own GC uses), else the default."""
    recorded = latest.retention if latest is not None else None
    return {
        "min_versions_to_retain": retain if retain is not None else
        recorded.min_versions if recorded else DEFAULT_RETAIN,
        "orphan_margin_seconds": orphan_margin_s if orphan_margin_s is not None else
        recorded.orphan_margin_s if recorded else DEFAULT_ORPHAN_MARGIN_S,
        "source": "given" if retain is not None or orphan_margin_s is not None else
        "recorded" if recorded is not None else "default",
    }


def describe_store(checkpoint: StoreRoot, retain: int | None,
                   orphan_margin_s: float | None) -> StoreReport:
    report = StoreReport(checkpoint.storage.url)
    latest: Manifest | None = None
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
        previous, latest = names, plan.manifest
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
    report.gc_settings = gc_settings(latest, retain, orphan_margin_s)
    plan = gc.plan_garbage(checkpoint, report.gc_settings["min_versions_to_retain"],
                           report.gc_settings["orphan_margin_seconds"])
    report.gc_would_delete = {
        "manifests": plan.expired_manifests, "superseded": plan.superseded_manifests,
        "snapshots": plan.expired_snapshots, "files": [f.name for f in plan.garbage],
        "orphans": plan.orphans, "stale_queries": plan.stale_queries,
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
    settings = report.gc_settings
    lines.append(f"    (retaining {settings['min_versions_to_retain']} versions, orphan margin "
                 f"{settings['orphan_margin_seconds']:g} s: "
                 + {"given": "as given)", "recorded": "the query's own settings)",
                    "default": "defaults; the query recorded none)"}[settings["source"]])
    return "\n".join(lines)


def _size(files) -> int:
    return sum(f.size for f in files)

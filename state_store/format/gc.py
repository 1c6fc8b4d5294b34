"""Garbage collection of one store root: the shared-file registry, derived from its records.

Who deletes a file: only `collect_garbage`, and only a file that this store owns (or
claimed, in a root a restore recorded) and that either (a) was referenced by a record it
just removed, for falling out of retention or for being superseded by a later run's
manifest of the same version, and is referenced by no retained record, or (b) is referenced
by no record at all and entered durable storage before the orphan margin (the leftovers of
crashed or losing attempts), or (c) belongs to an earlier query of the same checkpoint path
(a reset checkpoint) that has been idle for the orphan margin. In-flight uploads are younger
than the margin, so nothing that a commit or upload in progress still needs is touched.
Another attempt's snapshot is withdrawn only by the attempt that made it, when it lost
(store_root.withdraw_snapshot). Which snapshots a retained version still needs is
lineage.py's rule (`serves_any`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from . import lineage
from .manifest import FILES_DIR, MANIFEST_DIR, SNAPSHOT_DIR, FileRef, Manifest, Owner, file_path
from .storage import Storage
from .store_root import QUERY_DIR_PREFIX, RecordIndex, StoreRoot


@dataclass
class GcPlan:
    expired_manifests: list[int] = field(default_factory=list)  # versions out of retention
    superseded_manifests: list[str] = field(default_factory=list)  # record paths
    expired_snapshots: list[str] = field(default_factory=list)  # record paths
    records: list[str] = field(default_factory=list)  # every record path the plan removes
    garbage: list[FileRef] = field(default_factory=list)  # files no retained record needs
    orphans: list[str] = field(default_factory=list)  # paths relative to the store root
    stale_queries: list[str] = field(default_factory=list)  # query dirs beside this one

    @property
    def files_deleted(self) -> int:
        return len(self.garbage) + len(self.orphans)


def plan_garbage(root: StoreRoot, min_versions_to_retain: int,
                 orphan_margin_s: float) -> GcPlan:
    """What `collect_garbage` would delete now (also the dry run of `state-store inspect`)."""
    index = root.index()
    versions = index.versions()
    retained = versions[-min_versions_to_retain:] if min_versions_to_retain > 0 else versions
    manifests = [root.read_manifest(v, index) for v in retained]
    plan = GcPlan(expired_manifests=[v for v in versions if v not in retained],
                  superseded_manifests=index.superseded())
    keep_snapshots, plan.expired_snapshots = sort_snapshots(root, index, manifests)
    expired_records = [index.manifests[v][e] for v in plan.expired_manifests
                       for e in index.manifests[v]]
    plan.records = [*expired_records, *plan.superseded_manifests, *plan.expired_snapshots]
    live = _files_of(root, [m.path for m in manifests], keep_snapshots)
    expired = _files_of(root, [*expired_records, *plan.superseded_manifests],
                        plan.expired_snapshots)
    plan.garbage = sorted((f for f in expired.values()
                           if f.name not in live and _deletable(root, f)),
                          key=lambda f: f.name)
    cutoff = time.time() - orphan_margin_s
    plan.orphans = _orphans(root.storage, set(live) | set(expired), cutoff)
    plan.stale_queries = stale_queries(root, cutoff)
    return plan


def sort_snapshots(root: StoreRoot, index: RecordIndex,
                   retained: list[Manifest]) -> tuple[list[str], list[str]]:
    """The snapshot records `index` lists, as (kept, expired): a snapshot expires when no
    retained manifest may start from it."""
    kept: list[str] = []
    expired: list[str] = []
    for path in index.snapshot_paths():
        snapshot = root.snapshot_if_readable(path)
        # Unreadable: what it references is unknown, so it decides nothing and stays.
        if snapshot is None or lineage.serves_any(snapshot, retained):
            kept.append(path)
        else:
            expired.append(path)
    return kept, expired


def collect_garbage(root: StoreRoot, min_versions_to_retain: int,
                    orphan_margin_s: float) -> GcPlan:
    plan = plan_garbage(root, min_versions_to_retain, orphan_margin_s)
    # Records first: a crash after this leaks files (later orphans), never breaks a record.
    for path in plan.records:
        root.forget(path)
    for ref in plan.garbage:
        root.storage_of(ref).delete(file_path(ref.name))
    for rel in plan.orphans:
        root.storage.delete(rel)
    for name in plan.stale_queries:
        assert root.base is not None
        root.base.delete_tree(name)
    return plan


def _deletable(root: StoreRoot, ref: FileRef) -> bool:
    """GC deletes only in roots it owns or claimed: our own files, and files a CLAIM
    restore took over from a root it recorded; never a SHARED (read-only) one."""
    if ref.owner is Owner.OWNED:
        return not ref.root
    return ref.owner is Owner.CLAIMED and ref.root in root.trusted_roots


def _files_of(root: StoreRoot, manifests: list[str], snapshots: list[str]) -> dict[str, FileRef]:
    files: dict[str, FileRef] = {}
    for path in manifests:
        manifest: Manifest | None = root.manifest_if_readable(path)
        if manifest is not None:
            files.update((c.file.name, c.file) for c in manifest.changelogs)
    for path in snapshots:
        snapshot = root.snapshot_if_readable(path)
        if snapshot is not None:
            files.update((f.name, f) for f in snapshot.files)
    return files


def _orphans(storage: Storage, referenced: set[str], older_than: float) -> list[str]:
    """Our files no record names, and interrupted publishes, written before the cutoff.
    (An unreadable record's files are judged by age: it can no longer use them.)"""
    orphans = [f"{FILES_DIR}/{name}" for name, mtime in storage.list_entered(FILES_DIR).items()
               if name not in referenced and mtime < older_than]
    for directory in (MANIFEST_DIR, SNAPSHOT_DIR):
        orphans += [f"{directory}/{name}"
                    for name, mtime in storage.list_entered(directory).items()
                    if name.endswith(".tmp") and mtime < older_than]
    return sorted(orphans)


def stale_queries(root: StoreRoot, idle_before: float) -> list[str]:
    """Roots of earlier queries of this checkpoint path (it was reset), idle since before
    `idle_before`: nothing of them is ever read again."""
    if root.base is None:
        return []
    own = root.storage.path("").rstrip("/").rsplit("/", 1)[-1]
    return [name for name in root.base.list_dirs("")
            if name.startswith(QUERY_DIR_PREFIX) and name != own
            and last_activity(root.base.child(name)) < idle_before]


def last_activity(root: Storage) -> float:
    """When a store root last gained a record (or, with none, a file)."""
    times = [t for d in (MANIFEST_DIR, SNAPSHOT_DIR) for t in root.list_entered(d).values()]
    return max(times or root.list_entered(FILES_DIR).values() or [0.0])


def last_commit(root: Storage) -> float:
    """When a store root last gained a version. Only a running query commits, while a
    stopped one may still publish final snapshots: of the queries of one checkpoint path,
    the one that committed last is the current one."""
    return max(root.list_entered(MANIFEST_DIR).values(), default=0.0)

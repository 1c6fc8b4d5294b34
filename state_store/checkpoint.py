"""Publishing versions and snapshots of one store, reading them back, and collecting garbage.

Who deletes a file: only `collect_garbage`, and only a file that this store owns and that
either (a) was referenced by a record it just removed for falling out of retention and is
referenced by no retained record, or (b) is referenced by no record at all and entered
durable storage before the orphan margin (the leftovers of crashed or losing attempts), or
(c) belongs to an earlier query of the same checkpoint path (a reset checkpoint) that has
been idle for the orphan margin. In-flight uploads are younger than the margin, so nothing
that a commit or upload in progress still needs is touched.

Where a store lives: `<base>/query-<query id>/`. The base is fixed by the checkpoint path
(and rootUrl); the query id changes when a user resets the checkpoint, so a new query never
sees, and never adopts, the records of an earlier one.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import fsspec

from .errors import (
    CorruptFileError,
    ForeignCheckpointError,
    StateStoreError,
    VersionNotFoundError,
)
from .manifest import (
    FILES_DIR,
    MANIFEST_DIR,
    SNAPSHOT_DIR,
    Changelog,
    FileRef,
    Manifest,
    Owner,
    SnapshotDescriptor,
    file_path,
    manifest_path,
    parse_record_name,
    snapshot_path,
)
from .storage import Storage, open_storage

# Names Spark's own providers leave in a store directory.
FOREIGN_SUFFIXES = (".delta", ".snapshot", ".changelog", ".zip")
QUERY_DIR_PREFIX = "query-"


def query_dir(query_id: str) -> str:
    return f"{QUERY_DIR_PREFIX}{query_id}"


@dataclass
class UploadStats:
    files_uploaded: int = 0
    bytes_uploaded: int = 0
    files_reused: int = 0
    bytes_reused: int = 0


@dataclass(frozen=True)
class LoadPlan:
    """How to rebuild a version: start from `snapshot` (None = empty), replay `changelogs`."""

    manifest: Manifest
    snapshot: SnapshotDescriptor | None
    changelogs: list[Changelog]


@dataclass
class GcPlan:
    expired_manifests: list[int] = field(default_factory=list)
    expired_snapshots: list[int] = field(default_factory=list)
    garbage: list[FileRef] = field(default_factory=list)  # files no retained record needs
    orphans: list[str] = field(default_factory=list)  # paths relative to the store root
    stale_queries: list[str] = field(default_factory=list)  # query dirs beside this one

    @property
    def files_deleted(self) -> int:
        return len(self.garbage) + len(self.orphans)


class Checkpoint:
    """The durable side of one store: its root holds manifests/, snapshots/ and files/.

    `base` is the directory that holds this query's root beside those of earlier queries of
    the same checkpoint path (None when the root is not namespaced by query).
    """

    def __init__(self, storage: Storage, store_name: str, base: Storage | None = None) -> None:
        self.storage = storage
        self.store_name = store_name
        self.base = base
        # Records are immutable once published, so a parsed record never goes stale.
        self._manifests: dict[int, Manifest] = {}
        self._snapshots: dict[int, SnapshotDescriptor] = {}
        self._foreign: dict[str, Storage] = {}  # other roots our records reference, by URL

    def storage_of(self, ref: FileRef) -> Storage:
        """The root holding a file: ours, or the root a CLAIM restore took it from (opened
        with our storage options when on the same kind of filesystem)."""
        if not ref.root:
            return self.storage
        if ref.root not in self._foreign:
            self._foreign[ref.root] = open_root(ref.root, self.storage)
        return self._foreign[ref.root]

    # ---- listing and reading records ----------------------------------------------------

    def versions(self) -> list[int]:
        return _record_versions(self.storage.list_names(MANIFEST_DIR))

    def snapshot_versions(self) -> list[int]:
        return _record_versions(self.storage.list_names(SNAPSHOT_DIR))

    def read_manifest(self, version: int) -> Manifest:
        if version not in self._manifests:
            where = f"manifest of version {version} of {self.store_name} ({manifest_path(version)})"
            data = self.storage.read_if_exists(manifest_path(version))
            if data is None:
                raise self._missing(version)
            manifest = Manifest.from_json(data, where)
            if manifest.version != version:
                raise CorruptFileError(f"{where} describes version {manifest.version}")
            self._manifests[version] = manifest
        return self._manifests[version]

    def read_snapshot(self, version: int) -> SnapshotDescriptor:
        if version not in self._snapshots:
            where = f"snapshot of version {version} of {self.store_name} ({snapshot_path(version)})"
            data = self.storage.read(snapshot_path(version), where)
            descriptor = SnapshotDescriptor.from_json(data, where)
            if descriptor.version != version:
                raise CorruptFileError(f"{where} describes version {descriptor.version}")
            self._snapshots[version] = descriptor
        return self._snapshots[version]

    def _missing(self, version: int) -> Exception:
        available = self.versions()
        if not available:
            self.refuse_foreign_state()
        shown = f"{available[0]}..{available[-1]}" if available else "none"
        return VersionNotFoundError(
            f"version {version} of {self.store_name} does not exist at {self.storage.url} "
            f"(committed versions retained: {shown})"
        )

    def refuse_foreign_state(self) -> None:
        """Fails if Spark's own providers wrote this directory: we cannot read their format."""
        where = self.base or self.storage
        foreign = [n for n in where.list_names("") if n.endswith(FOREIGN_SUFFIXES)]
        if foreign:
            raise ForeignCheckpointError(
                f"{where.url} holds state written by another state store provider "
                f"(found {', '.join(foreign[:3])}); this provider cannot read it. Run the query "
                "with the provider that wrote the checkpoint, or start from a new checkpoint."
            )

    def plan_load(self, version: int) -> LoadPlan:
        """The cheapest way to `version`: from the newest snapshot that may serve it."""
        return self.load_plans(version)[0]

    def load_plans(self, version: int) -> list[LoadPlan]:
        """Every way to rebuild `version`, cheapest first: each published snapshot that may
        serve its manifest (same lineage, not before its base), newest first, then none at
        all if the base is the empty store. A loader falls back along this list when a
        snapshot turns out unreadable."""
        manifest = self.read_manifest(version)
        base = manifest.snapshot_version or 0
        plans = []
        for s in sorted(self.snapshot_versions(), reverse=True):
            if base <= s <= version:
                snapshot = self._snapshot_if_readable(s)
                if snapshot is not None and manifest.can_start_from(snapshot):
                    plans.append(LoadPlan(manifest, snapshot, manifest.changelogs_after(s)))
        if manifest.snapshot_version is None:
            plans.append(LoadPlan(manifest, None, manifest.changelogs))
        if not plans:
            raise CorruptFileError(
                f"version {version} of {self.store_name} cannot be loaded: its base snapshot "
                f"{snapshot_path(base)} is missing or unreadable at {self.storage.url}")
        return plans

    def plan_from_snapshot(self, snapshot_version: int, version: int) -> LoadPlan:
        """Rebuilding `version` from the snapshot of `snapshot_version` and every later
        version's own changelog, whatever newer snapshots exist (Spark's
        replayStateFromSnapshot: a reader that distrusts them)."""
        if not 0 < snapshot_version <= version:
            raise StateStoreError(f"{self.store_name}: cannot replay version {version} from a "
                                  f"snapshot of version {snapshot_version}")
        snapshot = self.read_snapshot(snapshot_version)  # names the file if it is missing
        if not self.read_manifest(snapshot_version).can_start_from(snapshot):
            raise CorruptFileError(
                f"the snapshot of version {snapshot_version} of {self.store_name} was made by "
                "an attempt whose version was not published: it holds no committed state")
        return LoadPlan(self.read_manifest(version), snapshot,
                        [self.own_changelog(v) for v in range(snapshot_version + 1, version + 1)])

    def own_changelog(self, version: int) -> Changelog:
        """The changes `version` made: the last changelog of its manifest (manifest.py)."""
        own = self.read_manifest(version).changelogs[-1]
        if own.version != version:
            raise CorruptFileError(f"the manifest of version {version} of {self.store_name} "
                                   f"ends with the changelog of version {own.version}")
        return own

    def _snapshot_if_readable(self, version: int) -> SnapshotDescriptor | None:
        try:
            return self.read_snapshot(version)
        except CorruptFileError:
            return None  # deleted by GC meanwhile, or damaged: another plan may serve

    # ---- writing records ----------------------------------------------------------------

    def write_changelog(self, version: int, data: bytes) -> Changelog:
        name = f"{uuid.uuid4().hex}.changelog"
        written = self.storage.write_new(file_path(name), data)
        return Changelog(version, FileRef(name, written.size, written.checksum))

    def upload_snapshot(self, version: int, checkpoint_dir: Path, reusable: dict[str, FileRef],
                        num_keys: int, full: bool,
                        lineage: str) -> tuple[SnapshotDescriptor, UploadStats]:
        """Turns a local RocksDB checkpoint into a descriptor (not yet published).

        Incremental: an SST already durable (`reusable`, keyed by local name) is referenced,
        not uploaded again; SSTs are immutable, so equal name and size mean equal bytes.
        Full: nothing is referenced; a durable SST is duplicated into a file of our own.
        """
        prefix, stats, files = uuid.uuid4().hex, UploadStats(), []
        for local in sorted(checkpoint_dir.iterdir()):
            known = reusable.get(local.name)
            size = local.stat().st_size
            if known is not None and known.size == size and local.suffix == ".sst":
                if not full:
                    files.append(known)
                    stats.files_reused, stats.bytes_reused = (stats.files_reused + 1,
                                                              stats.bytes_reused + size)
                    continue
                name = f"{prefix}-{local.name}"
                self.storage.duplicate(file_path(known.name), file_path(name),
                                       self.storage_of(known), known.size)
                ref = FileRef(name, known.size, known.checksum, local_name=local.name)
            else:
                name = f"{prefix}-{local.name}"
                written = self.storage.upload_new(local, file_path(name))
                ref = FileRef(name, written.size, written.checksum, local_name=local.name)
            files.append(ref)
            stats.files_uploaded, stats.bytes_uploaded = (stats.files_uploaded + 1,
                                                          stats.bytes_uploaded + ref.size)
        return SnapshotDescriptor(version, files, num_keys, full, lineage), stats

    def publish_manifest(self, manifest: Manifest) -> bool:
        """Makes the version visible; False if another attempt published it first.

        A manifest whose chain is not contiguous from its base would make its version (and
        every later one) unloadable once GC removes what it skipped: never published.
        """
        gap = manifest.chain_gap()
        if gap is not None:
            raise StateStoreError(f"refusing to publish a broken manifest of {self.store_name}: "
                                  f"{gap}")
        return self.storage.publish(manifest_path(manifest.version), manifest.to_json())

    def publish_snapshot(self, descriptor: SnapshotDescriptor) -> bool:
        return self.storage.publish(snapshot_path(descriptor.version), descriptor.to_json())

    def discard_unpublished(self, files: list[FileRef]) -> None:
        """Removes files only an unpublished record used (a lost race, a failed upload)."""
        for ref in files:
            if ref.owner is Owner.OWNED:
                self.storage.delete(file_path(ref.name))

    # ---- reading data -------------------------------------------------------------------

    def read_changelog(self, changelog: Changelog) -> bytes:
        ref = changelog.file
        what = f"changelog of version {changelog.version} of {self.store_name}"
        return self.storage_of(ref).read_verified(file_path(ref.name), ref.written, what)

    def download_snapshot(self, snapshot: SnapshotDescriptor, target: Path) -> None:
        target.mkdir(parents=True)
        what = f"snapshot of version {snapshot.version} of {self.store_name}"
        for ref in snapshot.files:
            self.storage_of(ref).download_verified(
                file_path(ref.name), target / ref.local_name, ref.written, what
            )

    # ---- the shared-file registry and garbage collection -----------------------------------

    def plan_garbage(self, min_versions_to_retain: int, orphan_margin_s: float) -> GcPlan:
        """What `collect_garbage` would delete now (also the dry run of `state-store inspect`)."""
        versions, snapshots = self.versions(), self.snapshot_versions()
        retained = versions[-min_versions_to_retain:] if min_versions_to_retain > 0 else versions
        keep_snapshots = [s for s in snapshots if self._snapshot_needed(s, retained)]
        plan = GcPlan(
            expired_manifests=[v for v in versions if v not in retained],
            expired_snapshots=[s for s in snapshots if s not in keep_snapshots],
        )
        live = self._files_of(retained, keep_snapshots)
        expired = self._files_of(plan.expired_manifests, plan.expired_snapshots)
        # Ours, and files a CLAIM restore took over; never a SHARED (read-only) one.
        plan.garbage = sorted(
            (f for f in expired.values()
             if f.owner in (Owner.OWNED, Owner.CLAIMED) and f.name not in live),
            key=lambda f: f.name)
        known = set(live) | set(expired)
        cutoff = time.time() - orphan_margin_s
        plan.orphans = self._orphans(known, cutoff)
        plan.stale_queries = self.stale_queries(cutoff)
        return plan

    def _snapshot_needed(self, version: int, retained: list[int]) -> bool:
        """A snapshot stays while a retained version may start from it, or while it may be
        the base of a version still being committed (newer than every retained one)."""
        if not retained or version > retained[-1]:
            return True
        try:
            snapshot = self.read_snapshot(version)
        except CorruptFileError:
            return True  # unreadable: what it references is unknown, so keep deciding nothing
        return any(self.read_manifest(v).can_start_from(snapshot) for v in retained)

    def stale_queries(self, idle_before: float) -> list[str]:
        """Roots of earlier queries of this checkpoint path (it was reset), idle since before
        `idle_before`: nothing of them is ever read again."""
        if self.base is None:
            return []
        own = self.storage.path("").rstrip("/").rsplit("/", 1)[-1]
        stale = []
        for name in self.base.list_dirs(""):
            if (name.startswith(QUERY_DIR_PREFIX) and name != own
                    and self.last_activity(self.base.child(name)) < idle_before):
                stale.append(name)
        return stale

    @staticmethod
    def last_activity(root: Storage) -> float:
        """When a store root last gained a record (or, with none, a file)."""
        times = [t for d in (MANIFEST_DIR, SNAPSHOT_DIR) for t in root.list_entered(d).values()]
        return max(times or root.list_entered(FILES_DIR).values() or [0.0])

    @staticmethod
    def last_commit(root: Storage) -> float:
        """When a store root last gained a version. Only a running query commits, while a
        stopped one may still publish final snapshots: of the queries of one checkpoint
        path, the one that committed last is the current one."""
        return max(root.list_entered(MANIFEST_DIR).values(), default=0.0)

    def collect_garbage(self, min_versions_to_retain: int, orphan_margin_s: float) -> GcPlan:
        plan = self.plan_garbage(min_versions_to_retain, orphan_margin_s)
        # Records first: a crash after this leaks files (later orphans), never breaks a record.
        for v in plan.expired_manifests:
            self.storage.delete(manifest_path(v))
            self._manifests.pop(v, None)
        for s in plan.expired_snapshots:
            self.storage.delete(snapshot_path(s))
            self._snapshots.pop(s, None)
        for ref in plan.garbage:
            self.storage_of(ref).delete(file_path(ref.name))
        for rel in plan.orphans:
            self.storage.delete(rel)
        for name in plan.stale_queries:
            assert self.base is not None
            self.base.delete_tree(name)
        return plan

    def _files_of(self, versions: list[int], snapshots: list[int]) -> dict[str, FileRef]:
        files: dict[str, FileRef] = {}
        for v in versions:
            files.update((c.file.name, c.file) for c in self.read_manifest(v).changelogs)
        for s in snapshots:
            snapshot = self._snapshot_if_readable(s)
            if snapshot is not None:
                files.update((f.name, f) for f in snapshot.files)
        return files

    def _orphans(self, referenced: set[str], older_than: float) -> list[str]:
        """Our files no record names, and interrupted publishes, written before the cutoff."""
        orphans = [
            f"{FILES_DIR}/{name}" for name, mtime in self.storage.list_entered(FILES_DIR).items()
            if name not in referenced and mtime < older_than
        ]
        for directory in (MANIFEST_DIR, SNAPSHOT_DIR):
            orphans += [
                f"{directory}/{name}"
                for name, mtime in self.storage.list_entered(directory).items()
                if name.endswith(".tmp") and mtime < older_than
            ]
        return sorted(orphans)


def open_root(url: str, like: Storage) -> Storage:
    """Another root, opened with `like`'s storage options when it is on the same kind of
    filesystem (a savepoint beside its checkpoint on one endpoint), else with none."""
    same_kind = _protocol(url) == _protocol(like.url)
    return open_storage(url, like.options if same_kind else None)


def _protocol(url: str) -> str:
    return fsspec.core.split_protocol(url)[0] or "file"


def _record_versions(names: list[str]) -> list[int]:
    return sorted(v for v in map(parse_record_name, names) if v is not None)

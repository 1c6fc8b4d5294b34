"""Publishing versions and snapshots of one store, reading them back, and collecting garbage.

Who deletes a file: only `collect_garbage`, and only a file that this store owns (or
claimed, in a root a restore recorded) and that either (a) was referenced by a record it
just removed, for falling out of retention or for being superseded by a later run's
manifest of the same version, and is referenced by no retained record, or (b) is referenced
by no record at all and entered durable storage before the orphan margin (the leftovers of
crashed or losing attempts), or (c) belongs to an earlier query of the same checkpoint path
(a reset checkpoint) that has been idle for the orphan margin. In-flight uploads are younger
than the margin, so nothing that a commit or upload in progress still needs is touched.
Another attempt's snapshot is withdrawn only by the attempt that made it, when it lost.

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

from ..errors import (
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
    parse_manifest_name,
    parse_snapshot_name,
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

    @property
    def files(self) -> list[FileRef]:
        """Every file the plan reads: the snapshot's, then the changelogs'."""
        return [*(self.snapshot.files if self.snapshot else []),
                *(c.file for c in self.changelogs)]


@dataclass(frozen=True)
class RecordIndex:
    """One listing of a store root's records: which versions exist, under which run epochs,
    and which snapshots. A version is its manifest of the highest epoch (manifest.py); the
    others are superseded."""

    manifests: dict[int, dict[int, str]]  # version -> epoch -> record path
    snapshots: dict[int, dict[str | None, str]]  # version -> lineage (None: unnamed) -> path

    def versions(self) -> list[int]:
        return sorted(self.manifests)

    def manifest_path(self, version: int) -> str | None:
        epochs = self.manifests.get(version)
        return None if not epochs else epochs[max(epochs)]

    def superseded(self) -> list[str]:
        """Manifests of a version that a later run published again."""
        return sorted(path for epochs in self.manifests.values()
                      for epoch, path in epochs.items() if epoch != max(epochs))

    def snapshot_paths(self, low: int = 0, high: int | None = None) -> list[str]:
        """Snapshot records of versions low..high, newest version first."""
        return [path for v in sorted(self.snapshots, reverse=True)
                if low <= v and (high is None or v <= high)
                for path in self.snapshots[v].values()]


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


class StoreRoot:
    """The durable side of one store: its root holds manifests/, snapshots/ and files/.

    `base` is the directory that holds this query's root beside those of earlier queries of
    the same checkpoint path (None when the root is not namespaced by query).
    `trusted_roots` are the other roots its records may name (the sources a restore
    recorded, seeding.py): a record naming any other root is refused, so nothing outside
    them is ever read or deleted because a record says so.
    """

    def __init__(self, storage: Storage, store_name: str, base: Storage | None = None,
                 trusted_roots: frozenset[str] = frozenset()) -> None:
        self.storage = storage
        self.store_name = store_name
        self.base = base
        self.trusted_roots = trusted_roots
        # Records are immutable once published, so a parsed record never goes stale.
        self._records: dict[str, Manifest | SnapshotDescriptor] = {}
        self._foreign: dict[str, Storage] = {}  # other roots our records reference, by URL

    def storage_of(self, ref: FileRef) -> Storage:
        """The root holding a file: ours, or a root a restore recorded (opened with our
        storage options when on the same kind of filesystem)."""
        if not ref.root:
            return self.storage
        if ref.root not in self.trusted_roots:
            raise CorruptFileError(
                f"a record of {self.store_name} names file {ref.name} in root {ref.root}, "
                f"which no restore of this store recorded (trusted: "
                f"{', '.join(sorted(self.trusted_roots)) or 'none'}); nothing was read, "
                "written or deleted because of it")
        if ref.root not in self._foreign:
            self._foreign[ref.root] = open_root(ref.root, self.storage)
        return self._foreign[ref.root]

    # ---- listing and reading records ----------------------------------------------------

    def index(self) -> RecordIndex:
        manifests: dict[int, dict[int, str]] = {}
        for name in self.storage.names(MANIFEST_DIR):
            parsed = parse_manifest_name(name)
            if parsed is not None:
                manifests.setdefault(parsed[0], {})[parsed[1]] = f"{MANIFEST_DIR}/{name}"
        snapshots: dict[int, dict[str | None, str]] = {}
        for name in self.storage.names(SNAPSHOT_DIR):
            parsed = parse_snapshot_name(name)
            if parsed is not None:
                snapshots.setdefault(parsed[0], {})[parsed[1]] = f"{SNAPSHOT_DIR}/{name}"
        return RecordIndex(manifests, snapshots)

    def versions(self) -> list[int]:
        return self.index().versions()

    def newest_epoch(self) -> int:
        """The highest run epoch any retained manifest was published under (0: none)."""
        parsed = map(parse_manifest_name, self.storage.names(MANIFEST_DIR))
        return max((epoch for _, epoch in filter(None, parsed)), default=0)

    def snapshot_versions(self) -> list[int]:
        return sorted(self.index().snapshots)

    def read_manifest(self, version: int, index: RecordIndex | None = None) -> Manifest:
        """The committed manifest of `version`: of the latest run that published it."""
        path = (index or self.index()).manifest_path(version)
        if path is None:
            raise self._missing(version)
        return self.read_manifest_at(path)

    def read_manifest_at(self, path: str) -> Manifest:
        record = self._records.get(path)
        if record is None:
            version, epoch = parse_manifest_name(path.rsplit("/", 1)[-1]) or (-1, 0)
            run = f" of run epoch {epoch}" if epoch else ""
            where = f"manifest of version {version}{run} of {self.store_name} ({path})"
            data = self.storage.read(path, where)
            record = Manifest.from_json(data, where)
            if record.path != path:
                raise CorruptFileError(f"{where} describes version {record.version} of run "
                                       f"epoch {record.epoch}")
            self._records[path] = record
        assert isinstance(record, Manifest)
        return record

    def read_snapshot_at(self, path: str) -> SnapshotDescriptor:
        record = self._records.get(path)
        if record is None:
            version, lineage = parse_snapshot_name(path.rsplit("/", 1)[-1]) or (-1, None)
            where = f"snapshot of version {version} of {self.store_name} ({path})"
            record = SnapshotDescriptor.from_json(self.storage.read(path, where), where)
            if record.version != version or lineage not in (None, record.lineage):
                raise CorruptFileError(f"{where} describes version {record.version} of "
                                       f"lineage {record.lineage}")
            self._records[path] = record
        assert isinstance(record, SnapshotDescriptor)
        return record

    def read_snapshot(self, version: int) -> SnapshotDescriptor:
        """The snapshot of `version` that serves its committed manifest (for people and
        tests; loads choose among every snapshot through `load_plans`)."""
        index = self.index()
        manifest = self.read_manifest(version, index) if version in index.manifests else None
        found = [self.read_snapshot_at(p) for p in index.snapshot_paths(version, version)]
        serving = [s for s in found if manifest is None or manifest.lineage_of(version)
                   == s.lineage]
        if not serving:
            raise CorruptFileError(f"no snapshot of version {version} of {self.store_name} "
                                   f"serves its committed manifest at {self.storage.url}")
        return serving[0]

    def base_snapshot(self, manifest: Manifest,
                      index: RecordIndex | None = None) -> SnapshotDescriptor | None:
        """The snapshot `manifest` names as its base (None: the empty store)."""
        if manifest.snapshot_version is None:
            return None
        version = manifest.snapshot_version
        for path in (index or self.index()).snapshot_paths(version, version):
            snapshot = self._snapshot_if_readable(path)
            if snapshot is not None and snapshot.lineage == manifest.base_lineage:
                return snapshot
        raise CorruptFileError(
            f"the base of version {manifest.version} of {self.store_name}, a snapshot of "
            f"version {version} of lineage {manifest.base_lineage}, is missing or unreadable "
            f"at {self.storage.url}")

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

    def plan_load(self, version: int, index: RecordIndex | None = None) -> LoadPlan:
        """The cheapest way to `version`: from the newest snapshot that may serve it."""
        return self.load_plans(version, index)[0]

    def load_plans(self, version: int, index: RecordIndex | None = None) -> list[LoadPlan]:
        """Every way to rebuild `version`, cheapest first: each published snapshot that may
        serve its manifest (same lineage, not before its base), newest first, then none at
        all if the base is the empty store. A loader falls back along this list when a
        snapshot turns out unreadable."""
        index = index or self.index()
        manifest = self.read_manifest(version, index)
        base = manifest.snapshot_version or 0
        plans, unreadable = [], []
        for path in index.snapshot_paths(base, version):
            try:
                snapshot = self.read_snapshot_at(path)
            except CorruptFileError as e:  # deleted by GC meanwhile, or damaged
                unreadable.append(str(e))
                continue
            if manifest.can_start_from(snapshot):
                plans.append(LoadPlan(manifest, snapshot,
                                      manifest.changelogs_after(snapshot.version)))
        if manifest.snapshot_version is None:
            plans.append(LoadPlan(manifest, None, manifest.changelogs))
        if not plans:
            raise CorruptFileError(
                f"version {version} of {self.store_name} cannot be loaded: no readable "
                f"snapshot of version {base} of lineage {manifest.base_lineage} (its base) is "
                f"at {self.storage.url}" + "".join(f"; {e}" for e in unreadable))
        return plans

    def plan_from_snapshot(self, snapshot_version: int, version: int) -> LoadPlan:
        """Rebuilding `version` from the snapshot of `snapshot_version` and every later
        version's own changelog, whatever newer snapshots exist (Spark's
        replayStateFromSnapshot: a reader that distrusts them)."""
        if not 0 < snapshot_version <= version:
            raise StateStoreError(f"{self.store_name}: cannot replay version {version} from a "
                                  f"snapshot of version {snapshot_version}")
        index = self.index()
        committed = self.read_manifest(snapshot_version, index)
        for path in index.snapshot_paths(snapshot_version, snapshot_version):
            snapshot = self.read_snapshot_at(path)  # names the file if it is unreadable
            if committed.can_start_from(snapshot):
                return LoadPlan(self.read_manifest(version, index), snapshot,
                                [self.own_changelog(v, index)
                                 for v in range(snapshot_version + 1, version + 1)])
        raise CorruptFileError(
            f"no snapshot of version {snapshot_version} of {self.store_name} holds its "
            "committed state (none was published, or only by attempts whose version was not)")

    def own_changelog(self, version: int, index: RecordIndex | None = None) -> Changelog:
        """The changes `version` made: the last changelog of its manifest (manifest.py)."""
        own = self.read_manifest(version, index).changelogs[-1]
        if own.version != version:
            raise CorruptFileError(f"the manifest of version {version} of {self.store_name} "
                                   f"ends with the changelog of version {own.version}")
        return own

    def _snapshot_if_readable(self, path: str) -> SnapshotDescriptor | None:
        try:
            return self.read_snapshot_at(path)
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
        """Makes the version visible; False if another attempt of the same run published it
        first (a later run's publish of the same version supersedes it: manifest.py).

        A manifest whose chain is not contiguous from its base would make its version (and
        every later one) unloadable once GC removes what it skipped: never published.
        """
        gap = manifest.chain_gap()
        if gap is not None:
            raise StateStoreError(f"refusing to publish a broken manifest of {self.store_name}: "
                                  f"{gap}")
        return self.storage.publish(manifest.path, manifest.to_json())

    def publish_snapshot(self, descriptor: SnapshotDescriptor) -> bool:
        return self.storage.publish(descriptor.path, descriptor.to_json())

    def discard_unpublished(self, files: list[FileRef]) -> None:
        """Removes files only an unpublished record used (a lost race, a failed upload)."""
        for ref in files:
            if ref.owner is Owner.OWNED:
                self.storage.delete(file_path(ref.name))

    def withdraw_snapshot(self, descriptor: SnapshotDescriptor, kept: set[str]) -> None:
        """Removes a snapshot an attempt published before losing its version: its lineage is
        that attempt's, so no published manifest can start from it. The record goes first,
        then its own files (those in `kept` belong to an earlier snapshot too)."""
        self.storage.delete(descriptor.path)
        self._records.pop(descriptor.path, None)
        self.discard_unpublished([f for f in descriptor.files if f.name not in kept])

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
                file_path(ref.name), target / (ref.local_name or ref.name), ref.written, what
            )

    # ---- the shared-file registry and garbage collection -----------------------------------

    def plan_garbage(self, min_versions_to_retain: int, orphan_margin_s: float) -> GcPlan:
        """What `collect_garbage` would delete now (also the dry run of `state-store inspect`)."""
        index = self.index()
        versions = index.versions()
        retained = versions[-min_versions_to_retain:] if min_versions_to_retain > 0 else versions
        manifests = [self.read_manifest(v, index) for v in retained]
        plan = GcPlan(expired_manifests=[v for v in versions if v not in retained],
                      superseded_manifests=index.superseded())
        keep_snapshots = []
        for path in index.snapshot_paths():
            if self._snapshot_needed(path, manifests):
                keep_snapshots.append(path)
            else:
                plan.expired_snapshots.append(path)
        expired_records = [index.manifests[v][e] for v in plan.expired_manifests
                           for e in index.manifests[v]]
        plan.records = [*expired_records, *plan.superseded_manifests, *plan.expired_snapshots]
        live = self._files_of([m.path for m in manifests], keep_snapshots)
        expired = self._files_of([*expired_records, *plan.superseded_manifests],
                                 plan.expired_snapshots)
        plan.garbage = sorted((f for f in expired.values()
                               if f.name not in live and self._deletable(f)),
                              key=lambda f: f.name)
        known = set(live) | set(expired)
        cutoff = time.time() - orphan_margin_s
        plan.orphans = self._orphans(known, cutoff)
        plan.stale_queries = self.stale_queries(cutoff)
        return plan

    def _deletable(self, ref: FileRef) -> bool:
        """GC deletes only in roots it owns or claimed: our own files, and files a CLAIM
        restore took over from a root it recorded; never a SHARED (read-only) one."""
        if ref.owner is Owner.OWNED:
            return not ref.root
        return ref.owner is Owner.CLAIMED and ref.root in self.trusted_roots

    def _snapshot_needed(self, path: str, retained: list[Manifest]) -> bool:
        """A snapshot stays while a retained version may start from it, or while it may be
        the base of a version still being committed (newer than every retained one)."""
        snapshot = self._snapshot_if_readable(path)
        if snapshot is None:
            return True  # unreadable: what it references is unknown, so keep deciding nothing
        if not retained or snapshot.version > retained[-1].version:
            return True
        return any(m.can_start_from(snapshot) for m in retained)

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
        for path in plan.records:
            self.storage.delete(path)
            self._records.pop(path, None)
        for ref in plan.garbage:
            self.storage_of(ref).delete(file_path(ref.name))
        for rel in plan.orphans:
            self.storage.delete(rel)
        for name in plan.stale_queries:
            assert self.base is not None
            self.base.delete_tree(name)
        return plan

    def _files_of(self, manifests: list[str], snapshots: list[str]) -> dict[str, FileRef]:
        files: dict[str, FileRef] = {}
        for path in manifests:
            manifest = self._manifest_if_readable(path)
            if manifest is not None:
                files.update((c.file.name, c.file) for c in manifest.changelogs)
        for path in snapshots:
            snapshot = self._snapshot_if_readable(path)
            if snapshot is not None:
                files.update((f.name, f) for f in snapshot.files)
        return files

    def _manifest_if_readable(self, path: str) -> Manifest | None:
        try:
            return self.read_manifest_at(path)
        except CorruptFileError:
            return None  # its files are unknown: orphan collection judges them by age

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

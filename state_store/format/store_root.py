"""One store's durable root: its records (manifests, snapshot descriptors) and data files.

A root holds manifests/, snapshots/ and files/ (layout: manifest.py). This module lists,
reads, writes and publishes them; what they mean for a version's history is lineage.py's
to decide, and which of them may be deleted is gc.py's.

Where a store lives: `<base>/query-<query id>/`. The base is fixed by the checkpoint path
(and rootUrl); the query id changes when a user resets the checkpoint, so a new query never
sees, and never adopts, the records of an earlier one.
"""

from __future__ import annotations

import contextlib
import functools
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from ..errors import CorruptFileError, ForeignCheckpointError, VersionNotFoundError
from . import changelog_file, lineage
from .lineage import LoadPlan
from .manifest import (
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
from .storage import Storage, open_storage, storage_kind

# Names Spark's own providers leave in a store directory.
FOREIGN_SUFFIXES = (".delta", ".snapshot", ".changelog", ".zip")
QUERY_DIR_PREFIX = "query-"


T = TypeVar("T")


def query_dir(query_id: str) -> str:
    return f"{QUERY_DIR_PREFIX}{query_id}"


@dataclass
class UploadStats:
    files_uploaded: int = 0
    bytes_uploaded: int = 0
    files_reused: int = 0
    bytes_reused: int = 0


class Starts(Protocol):
    """Begins a request and answers how to wait for its result (a store's requests that
    need not wait for one another: runtime/storage_requests.py)."""

    def __call__(self, request: Callable[[], T]) -> Callable[[], T]: ...


def begun_here(request: Callable[[], T]) -> Callable[[], T]:
    result = request()
    return lambda: result


class RunsAll(Protocol):
    """Runs requests that need not wait for one another and answers their results in
    order (runtime/storage_requests.py)."""

    def __call__(self, requests: Sequence[Callable[[], T]]) -> list[T]: ...


def run_each_here(requests: Sequence[Callable[[], T]]) -> list[T]:
    return [request() for request in requests]


@dataclass(frozen=True)
class RecordIndex:
    """One listing of a store root's records: which versions exist, under which run epochs,
    and which snapshots. A version is its manifest of the highest epoch (manifest.py); the
    others are superseded."""

    manifests: dict[int, dict[int, str]]  # version -> epoch -> record path
    snapshots: dict[int, dict[str | None, str]]  # version -> lineage (None: unnamed) -> path

    def versions(self) -> list[int]:
        return sorted(self.manifests)

    def newest_epoch(self) -> int:
        """The highest run epoch of any manifest listed (0: none)."""
        return max((max(epochs) for epochs in self.manifests.values()), default=0)

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

    def index(self, started: Starts | None = None) -> RecordIndex:
        """The records listed: the manifests and the snapshots, two listings that need
        not wait for each other; `started` may begin the first beside this thread's."""
        manifests = (started or begun_here)(self._manifests)
        snapshots: dict[int, dict[str | None, str]] = {}
        for name in self.storage.names(SNAPSHOT_DIR):
            parsed = parse_snapshot_name(name)
            if parsed is not None:
                snapshots.setdefault(parsed[0], {})[parsed[1]] = f"{SNAPSHOT_DIR}/{name}"
        return RecordIndex(manifests(), snapshots)

    def _manifests(self) -> dict[int, dict[int, str]]:
        manifests: dict[int, dict[int, str]] = {}
        for name in self.storage.names(MANIFEST_DIR):
            parsed = parse_manifest_name(name)
            if parsed is not None:
                manifests.setdefault(parsed[0], {})[parsed[1]] = f"{MANIFEST_DIR}/{name}"
        return manifests

    def versions(self) -> list[int]:
        """The versions retained: one listing, of the manifests only."""
        return sorted(self._manifests())

    def newest_epoch(self) -> int:
        """The highest run epoch any retained manifest was published under (0: none): one
        listing, of the manifests only (the commit path asks it)."""
        return RecordIndex(self._manifests(), {}).newest_epoch()

    def snapshot_versions(self) -> list[int]:
        return sorted(self.index().snapshots)

    def read_manifest(self, version: int, index: RecordIndex | None = None,
                      checkpoint_id: str | None = None) -> Manifest:
        """The committed manifest of `version`: of the latest run that published it, or,
        given Spark's state store checkpoint id (checkpointFormatVersion 2: the commit log
        names the attempt each batch used), the one that attempt published, whichever
        run's it is (Manifest.commit_id)."""
        index = index or self.index()
        if checkpoint_id is None:
            path = index.manifest_path(version)
            if path is None:
                raise self._missing(version)
            return self.read_manifest_at(path)
        epochs = index.manifests.get(version, {})
        for epoch in sorted(epochs, reverse=True):
            manifest = self.read_manifest_at(epochs[epoch])
            if manifest.commit_id == checkpoint_id:
                return manifest
        if not epochs:
            raise self._missing(version)
        retained = sorted(self.read_manifest_at(p).commit_id for p in epochs.values())
        raise VersionNotFoundError(
            f"version {version} of {self.store_name} at {self.storage.url} has no commit "
            f"with the checkpoint id {checkpoint_id!r} Spark's commit log names (retained "
            f"commits of it: {retained})")

    def _read_manifest_beside_snapshots(self, version: int, index: RecordIndex,
                                       checkpoint_id: str | None = None,
                                       started: Starts | None = None) -> Manifest:
        """`read_manifest`, with the descriptors of the newest snapshots listed up to
        `version` read beside it (`started` may begin them on another thread): a load needs
        the manifest's base snapshot, almost always one of them, and reading them only once
        the manifest names it would wait a round trip more. Each is one a rebuild reads
        anyway (`load_plans` reads every snapshot from the base up), so nothing is read in
        vain but when the manifest's base is missing from the listing. (A catch-up reads
        only the base: it does not read ahead.)"""
        newest = max((v for v in index.snapshots if v <= version), default=None)
        paths = [] if newest is None else index.snapshot_paths(newest, newest)
        ahead = (started or begun_here)(functools.partial(self._read_snapshots, paths))
        manifest = self.read_manifest(version, index, checkpoint_id)
        ahead()
        return manifest

    def _read_snapshots(self, paths: list[str]) -> None:
        for path in paths:
            with contextlib.suppress(CorruptFileError):  # snapshots_between says why
                self.read_snapshot_at(path)

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
        serving = [s for s in found if manifest is None
                   or lineage.lineage_of(manifest, version) == s.lineage]
        if not serving:
            raise CorruptFileError(f"no snapshot of version {version} of {self.store_name} "
                                   f"serves its committed manifest at {self.storage.url}")
        return serving[0]

    def snapshots_between(self, low: int, high: int, index: RecordIndex | None = None,
                          unreadable: list[str] | None = None) -> list[SnapshotDescriptor]:
        """The readable snapshots of versions low..high, newest first; why each other one
        could not be read goes to `unreadable` (deleted by GC meanwhile, or damaged)."""
        found = []
        for path in (index or self.index()).snapshot_paths(low, high):
            try:
                found.append(self.read_snapshot_at(path))
            except CorruptFileError as e:
                if unreadable is not None:
                    unreadable.append(str(e))
        return found

    def base_snapshot(self, manifest: Manifest,
                      index: RecordIndex | None = None) -> SnapshotDescriptor | None:
        """The snapshot `manifest` names as its base (None: the empty store)."""
        if manifest.snapshot_version is None:
            return None
        version = manifest.snapshot_version
        base = lineage.base_of(manifest, self.snapshots_between(version, version, index))
        if base is None:
            raise CorruptFileError(
                f"the base of version {manifest.version} of {self.store_name}, a snapshot of "
                f"version {version} of lineage {manifest.base_lineage}, is missing or "
                f"unreadable at {self.storage.url}")
        return base

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

    def load_plans(self, version: int, index: RecordIndex | None = None,
                   checkpoint_id: str | None = None,
                   started: Starts | None = None) -> list[LoadPlan]:
        """Every way to rebuild `version` (the commit `checkpoint_id` names, if given),
        cheapest first (lineage.load_plans)."""
        index = index or self.index(started)
        manifest = self._read_manifest_beside_snapshots(version, index, checkpoint_id, started)
        unreadable: list[str] = []
        candidates = self.snapshots_between(manifest.snapshot_version or 0, version, index,
                                            unreadable)
        where = f"{self.store_name} at {self.storage.url}"
        return lineage.load_plans(manifest, candidates, where, unreadable)

    def plan_from_snapshot(self, snapshot_version: int, version: int) -> LoadPlan:
        """Rebuilding `version` from the snapshot of `snapshot_version` and every later
        version's own changelog, whatever newer snapshots exist (lineage.replay_plan)."""
        if not 0 < snapshot_version <= version:
            raise VersionNotFoundError(f"{self.store_name}: cannot replay version {version} "
                                       f"from a snapshot of version {snapshot_version}")
        index = self.index()
        at_snapshot = self.read_manifest(snapshot_version, index)
        serving = [s for s in self.snapshots_between(snapshot_version, snapshot_version, index)
                   if lineage.can_start_from(at_snapshot, s)]
        if not serving:
            raise CorruptFileError(
                f"no snapshot of version {snapshot_version} of {self.store_name} holds its "
                "committed state (none was published, or only by attempts whose version was "
                "not)")
        changelogs = [self.own_changelog(v, index) for v in range(snapshot_version + 1,
                                                                  version + 1)]
        return lineage.replay_plan(at_snapshot, serving[0], self.read_manifest(version, index),
                                   changelogs, self.store_name)

    def own_changelog(self, version: int, index: RecordIndex | None = None) -> Changelog:
        """The changes `version` made: the last changelog of its manifest (manifest.py)."""
        own = self.read_manifest(version, index).changelogs[-1]
        if own.version != version:
            raise CorruptFileError(f"the manifest of version {version} of {self.store_name} "
                                   f"ends with the changelog of version {own.version}")
        return own

    # ---- writing records ----------------------------------------------------------------

    def write_changelog(self, version: int, data: bytes) -> Changelog:
        name = f"{uuid.uuid4().hex}.changelog"
        written = self.storage.write_new(file_path(name), data)
        return Changelog(version, FileRef(name, written.size, written.checksum))

    def upload_changelog(self, version: int, local_path: Path) -> Changelog:
        """`write_changelog` of the bytes in a local file (a batch too large to hold)."""
        name = f"{uuid.uuid4().hex}.changelog"
        written = self.storage.upload_new(local_path, file_path(name))
        return Changelog(version, FileRef(name, written.size, written.checksum))

    def upload_snapshot(self, version: int, checkpoint_dir: Path, reusable: dict[str, FileRef],
                        num_keys: int, full: bool, lineage: str,
                        run_all: RunsAll = run_each_here
                        ) -> tuple[SnapshotDescriptor, UploadStats]:
        """Turns a local RocksDB checkpoint into a descriptor (not yet published).

        Incremental: an SST already durable (`reusable`, keyed by local name) is referenced,
        not uploaded again; SSTs are immutable, so equal name and size mean equal bytes.
        Full: nothing is referenced; a durable SST is duplicated into a file of our own.
        No file's upload waits for another's: `run_all` may run them side by side.
        """
        prefix, stats = uuid.uuid4().hex, UploadStats()
        files = run_all([functools.partial(self._snapshot_file, prefix, local,
                                           reusable.get(local.name), full)
                         for local in sorted(checkpoint_dir.iterdir())])
        for ref, reused in files:
            if reused:
                stats.files_reused += 1
                stats.bytes_reused += ref.size
            else:
                stats.files_uploaded += 1
                stats.bytes_uploaded += ref.size
        refs = [ref for ref, _ in files]
        return SnapshotDescriptor(version, refs, num_keys, full, lineage), stats

    def _snapshot_file(self, prefix: str, local: Path, known: FileRef | None,
                       full: bool) -> tuple[FileRef, bool]:
        """What a snapshot lists for its file `local`, and whether that is `known` (the
        base's file of that name) itself; else a file of the snapshot's own, copied from
        `known` (a full snapshot) or uploaded."""
        name = f"{prefix}-{local.name}"
        if known is not None and known.size == local.stat().st_size and local.suffix == ".sst":
            if not full:
                return known, True
            self.storage.duplicate(file_path(known.name), file_path(name),
                                   self.storage_of(known), known.size)
            return FileRef(name, known.size, known.checksum, local_name=local.name), False
        written = self.storage.upload_new(local, file_path(name))
        return FileRef(name, written.size, written.checksum, local_name=local.name), False

    def publish_manifest(self, manifest: Manifest) -> bool:
        """Makes the version visible; False if another attempt of the same run published it
        first (a later run's publish of the same version supersedes it: manifest.py). A
        manifest that breaks the chain rule is never published (lineage.check_chain)."""
        lineage.check_chain(manifest, self.store_name)
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
        self.forget(descriptor.path)
        self.discard_unpublished([f for f in descriptor.files if f.name not in kept])

    # ---- reading data -------------------------------------------------------------------

    def changelog_payloads(self, changelog: Changelog) -> Iterator[bytes]:
        """The write payloads of a changelog, verified whole before the first is given, to
        replay one at a time (changelog_file.py)."""
        ref = changelog.file
        what = f"changelog of version {changelog.version} of {self.store_name}"
        data = self.storage_of(ref).read_verified(file_path(ref.name), ref.written, what)
        return changelog_file.payloads(data, f"the {what} ({file_path(ref.name)})")

    def download_snapshot(self, snapshot: SnapshotDescriptor, target: Path,
                          run_all: RunsAll = run_each_here) -> None:
        """Each of the snapshot's files downloaded into the directory `target`, verified.
        No file's download waits for another's: `run_all` may run them side by side."""
        what = f"snapshot of version {snapshot.version} of {self.store_name}"
        run_all([functools.partial(self.storage_of(ref).download_verified, file_path(ref.name),
                                   target / (ref.local_name or ref.name), ref.written, what)
                 for ref in snapshot.files])

    def manifest_if_readable(self, path: str) -> Manifest | None:
        try:
            return self.read_manifest_at(path)
        except CorruptFileError:
            return None

    def snapshot_if_readable(self, path: str) -> SnapshotDescriptor | None:
        try:
            return self.read_snapshot_at(path)
        except CorruptFileError:
            return None

    def forget(self, path: str) -> None:
        """Deletes a record (GC's), dropping it from the parsed records."""
        self.storage.delete(path)
        self._records.pop(path, None)


def open_root(url: str, like: Storage) -> Storage:
    """Another root, opened with `like`'s storage options and endpoint probes when it is on
    the same kind of storage (a savepoint beside its checkpoint on one service, whichever
    spelling of the scheme each uses), else with none."""
    if storage_kind(url) == like.kind:
        return open_storage(url, like.options, like.probes)
    return open_storage(url)

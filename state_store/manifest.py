"""The durable records of a store: manifests (versions) and snapshot descriptors.

A version exists if and only if its manifest is published (put-if-absent, see storage).
Its state is: the snapshot it names as base, plus its changelogs replayed in order. A
snapshot of a version may be published later than the version itself (uploads run in the
background); a reader may start from any published snapshot between the base and the
version and replay only the changelogs after it.

Every file either record needs is listed with size, checksum and owner, so the set of
retained records alone tells which files are live: that is the shared-file registry
(checkpoint.Registry).

Layout under a store root:
  manifests/<version:020d>.json   one per committed version
  snapshots/<version:020d>.json   one per uploaded snapshot
  files/<uuid>.changelog          the writes of one version (records.py encoding)
  files/<uuid>-<local name>       a file of a RocksDB checkpoint (SST, MANIFEST, OPTIONS, ...)
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from .errors import CorruptFileError
from .storage import Written

FORMAT_VERSION = 1
KIND = "pyrocks-state-store"
MANIFEST_DIR = "manifests"
SNAPSHOT_DIR = "snapshots"
FILES_DIR = "files"


class Owner(str, Enum):
    """Who may delete a file. Only OWNED files are ever garbage-collected by this store."""

    OWNED = "owned"
    CLAIMED = "claimed"  # taken over from another query's checkpoint (CLAIM restore)
    # Read-only to us, never deleted. Not written by this build: a NO_CLAIM restore copies
    # the source's files at a store's first open instead (seeding.py).
    SHARED = "shared"


@dataclass(frozen=True, slots=True)
class FileRef:
    name: str  # path relative to the files/ directory of `root`
    size: int
    checksum: str
    owner: Owner = Owner.OWNED
    local_name: str = ""  # for snapshot files: the name RocksDB expects on local disk
    # The store root holding the file: "" for this store's own root, else the URL of
    # another query's or a savepoint's root (a CLAIM restore references those files).
    root: str = ""

    @property
    def written(self) -> Written:
        return Written(self.size, self.checksum)


@dataclass(frozen=True, slots=True)
class Changelog:
    version: int
    file: FileRef


@dataclass(frozen=True)
class SnapshotDescriptor:
    """A complete RocksDB checkpoint of one version.

    `lineage` names the attempt whose state it captures: the changelog file of its version
    in the manifest that attempt published. Two attempts of one batch write different
    changelogs, so a snapshot of a losing attempt never matches the winner's manifest
    (see `Manifest.can_start_from`).
    """

    version: int
    files: list[FileRef]
    num_keys: int
    full: bool = False  # forced full: references no file of an earlier snapshot
    lineage: str = ""
    format_version: int = FORMAT_VERSION
    kind: str = KIND

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @staticmethod
    def from_json(data: bytes, where: str) -> SnapshotDescriptor:
        raw = checked_record(data, where)
        try:
            return SnapshotDescriptor(
                version=int(raw["version"]), files=[_file_ref(f) for f in raw["files"]],
                num_keys=int(raw["num_keys"]), full=bool(raw["full"]),
                lineage=str(raw.get("lineage", "")),
            )
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptFileError(f"{where} is not a valid snapshot descriptor: {e!r}") from e


@dataclass(frozen=True)
class Manifest:
    """A committed version: its base snapshot plus the changelogs that follow it.

    Invariant (checked by `chain_gap`, enforced where a manifest is published): the chain
    holds every version after the base, in order, ending with this version's own changelog;
    a manifest whose base is its own version holds just its own changelog.
    """

    version: int
    snapshot_version: int | None  # the base snapshot, None = the empty store
    changelogs: list[Changelog]
    num_keys: int
    column_families: list[str] = field(default_factory=list)
    base_lineage: str = ""  # the base snapshot's lineage: only that snapshot may serve
    writer: str = ""  # the JVM and worker that published it (for people and tests)
    format_version: int = FORMAT_VERSION
    kind: str = KIND

    def changelogs_after(self, version: int | None) -> list[Changelog]:
        return [c for c in self.changelogs if version is None or c.version > version]

    @property
    def lineage(self) -> str:
        """The attempt that published this version: the name of its own changelog."""
        return self.changelogs[-1].file.name

    def lineage_of(self, version: int) -> str | None:
        """The lineage a snapshot of `version` must carry to serve this manifest."""
        if version == self.snapshot_version:
            return self.base_lineage
        return next((c.file.name for c in self.changelogs if c.version == version), None)

    def can_start_from(self, snapshot: SnapshotDescriptor) -> bool:
        """Whether loading this version may start from `snapshot` (then replay the rest)."""
        base = self.snapshot_version or 0
        return (base <= snapshot.version <= self.version
                and snapshot.lineage == self.lineage_of(snapshot.version))

    def chain_gap(self) -> str | None:
        """What breaks the chain invariant, or None when it holds."""
        base = self.snapshot_version or 0
        got = [c.version for c in self.changelogs]
        want = [self.version] if base == self.version else list(range(base + 1, self.version + 1))
        if got != want:
            return (f"version {self.version} on base {self.snapshot_version} needs changelogs "
                    f"{want}, has {got}")
        return None

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @staticmethod
    def from_json(data: bytes, where: str) -> Manifest:
        raw = checked_record(data, where)
        try:
            snapshot = raw["snapshot_version"]
            return Manifest(
                version=int(raw["version"]),
                snapshot_version=None if snapshot is None else int(snapshot),
                changelogs=[
                    Changelog(int(c["version"]), _file_ref(c["file"])) for c in raw["changelogs"]
                ],
                num_keys=int(raw["num_keys"]),
                column_families=list(raw["column_families"]),
                base_lineage=str(raw.get("base_lineage", "")),
                writer=str(raw.get("writer", "")),
            )
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptFileError(f"{where} is not a valid manifest: {e!r}") from e


def checked_record(data: bytes, where: str, kind: str = KIND,
                   format_version: int = FORMAT_VERSION) -> dict[str, Any]:
    """A JSON record of `kind`, refused unless this build reads its `format_version`:
    every durable record of this project is checked here before a field is used."""
    try:
        raw = json.loads(data)
    except ValueError as e:
        raise CorruptFileError(f"{where} is not valid JSON: {e}") from e
    if not isinstance(raw, dict) or raw.get("kind") != kind:
        raise CorruptFileError(f"{where} is not a {kind} record")
    if raw.get("format_version") != format_version:
        raise CorruptFileError(
            f"{where} has format_version {raw.get('format_version')}; "
            f"this build reads format_version {format_version}"
        )
    return raw


def _file_ref(raw: dict[str, Any]) -> FileRef:
    return FileRef(
        name=raw["name"], size=int(raw["size"]), checksum=raw["checksum"],
        owner=Owner(raw["owner"]), local_name=raw.get("local_name", ""),
        root=str(raw.get("root", "")),
    )


def manifest_path(version: int) -> str:
    return f"{MANIFEST_DIR}/{version:020d}.json"


def snapshot_path(version: int) -> str:
    return f"{SNAPSHOT_DIR}/{version:020d}.json"


def parse_record_name(name: str) -> int | None:
    """The version in a manifest or snapshot descriptor name; None for anything else."""
    stem, dot, ext = name.partition(".")
    return int(stem) if dot and ext == "json" and stem.isdigit() else None


def file_path(name: str) -> str:
    return f"{FILES_DIR}/{name}"

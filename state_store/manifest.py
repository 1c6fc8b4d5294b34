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
    SHARED = "shared"  # read-only to us (NO_CLAIM restore); never deleted


@dataclass(frozen=True, slots=True)
class FileRef:
    name: str  # path relative to the store root's files/ directory
    size: int
    checksum: str
    owner: Owner = Owner.OWNED
    local_name: str = ""  # for snapshot files: the name RocksDB expects on local disk

    @property
    def written(self) -> Written:
        return Written(self.size, self.checksum)


@dataclass(frozen=True, slots=True)
class Changelog:
    version: int
    file: FileRef


@dataclass(frozen=True)
class SnapshotDescriptor:
    """A complete RocksDB checkpoint of one version."""

    version: int
    files: list[FileRef]
    num_keys: int
    full: bool = False  # forced full: references no file of an earlier snapshot
    format_version: int = FORMAT_VERSION
    kind: str = KIND

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @staticmethod
    def from_json(data: bytes, where: str) -> SnapshotDescriptor:
        raw = _checked(data, where)
        try:
            return SnapshotDescriptor(
                version=int(raw["version"]), files=[_file_ref(f) for f in raw["files"]],
                num_keys=int(raw["num_keys"]), full=bool(raw["full"]),
            )
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptFileError(f"{where} is not a valid snapshot descriptor: {e!r}") from e


@dataclass(frozen=True)
class Manifest:
    version: int
    snapshot_version: int | None  # the base: the newest snapshot published at commit time
    changelogs: list[Changelog]  # every version after the base, in order, up to `version`
    num_keys: int
    column_families: list[str] = field(default_factory=list)
    format_version: int = FORMAT_VERSION
    kind: str = KIND

    def changelogs_after(self, version: int | None) -> list[Changelog]:
        return [c for c in self.changelogs if version is None or c.version > version]

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @staticmethod
    def from_json(data: bytes, where: str) -> Manifest:
        raw = _checked(data, where)
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
            )
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptFileError(f"{where} is not a valid manifest: {e!r}") from e


def _checked(data: bytes, where: str) -> dict[str, Any]:
    try:
        raw = json.loads(data)
    except ValueError as e:
        raise CorruptFileError(f"{where} is not valid JSON: {e}") from e
    if not isinstance(raw, dict) or raw.get("kind") != KIND:
        raise CorruptFileError(f"{where} is not a record of this state store")
    if raw.get("format_version") != FORMAT_VERSION:
        raise CorruptFileError(
            f"{where} has format_version {raw.get('format_version')}; "
            f"this build reads format_version {FORMAT_VERSION}"
        )
    return raw


def _file_ref(raw: dict[str, Any]) -> FileRef:
    return FileRef(
        name=raw["name"], size=int(raw["size"]), checksum=raw["checksum"],
        owner=Owner(raw["owner"]), local_name=raw.get("local_name", ""),
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

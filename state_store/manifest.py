"""The manifest: the durable, immutable record that makes one version of a store visible.

A version exists if and only if its manifest is published (put-if-absent, see storage).
The manifest lists every file the version needs, each with size, checksum and owner, so a
version is loadable from its manifest alone and garbage is derivable from the set of
retained manifests (the shared-file registry).

Layout under a store root:
  manifests/<version:020d>.json   one per committed version
  files/<uuid>.changelog          the writes of one version (records.py encoding)
  files/<uuid>-<name>             a file of a RocksDB snapshot (SST, MANIFEST, OPTIONS, ...)
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import Enum

from .errors import CorruptFileError
from .storage import Written

FORMAT_VERSION = 1
KIND = "pyrocks-state-store"
MANIFEST_DIR = "manifests"
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
class Snapshot:
    """A complete RocksDB checkpoint of one version."""

    version: int
    files: list[FileRef]


@dataclass(frozen=True, slots=True)
class Changelog:
    version: int
    file: FileRef


@dataclass(frozen=True)
class Manifest:
    version: int
    snapshot: Snapshot | None  # the newest snapshot at or below `version`, if any
    changelogs: list[Changelog]  # every version after the snapshot, in order, up to `version`
    num_keys: int
    column_families: list[str] = field(default_factory=list)
    format_version: int = FORMAT_VERSION
    kind: str = KIND

    def files(self) -> list[FileRef]:
        snapshot_files = self.snapshot.files if self.snapshot else []
        return [*snapshot_files, *(c.file for c in self.changelogs)]

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @staticmethod
    def from_json(data: bytes, where: str) -> Manifest:
        try:
            raw = json.loads(data)
            if raw.get("kind") != KIND:
                raise CorruptFileError(f"{where} is not a manifest of this state store")
            if raw.get("format_version") != FORMAT_VERSION:
                raise CorruptFileError(
                    f"{where} has format_version {raw.get('format_version')}; "
                    f"this build reads format_version {FORMAT_VERSION}"
                )
            snap = raw["snapshot"]
            return Manifest(
                version=int(raw["version"]),
                snapshot=None if snap is None else Snapshot(
                    int(snap["version"]), [_file_ref(f) for f in snap["files"]]
                ),
                changelogs=[
                    Changelog(int(c["version"]), _file_ref(c["file"])) for c in raw["changelogs"]
                ],
                num_keys=int(raw["num_keys"]),
                column_families=list(raw["column_families"]),
            )
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptFileError(f"{where} is not a valid manifest: {e!r}") from e


def _file_ref(raw: dict) -> FileRef:
    return FileRef(
        name=raw["name"], size=int(raw["size"]), checksum=raw["checksum"],
        owner=Owner(raw["owner"]), local_name=raw.get("local_name", ""),
    )


def manifest_path(version: int) -> str:
    return f"{MANIFEST_DIR}/{version:020d}.json"


def parse_manifest_name(name: str) -> int | None:
    stem, dot, ext = name.partition(".")
    return int(stem) if dot and ext == "json" and stem.isdigit() else None


def file_path(name: str) -> str:
    return f"{FILES_DIR}/{name}"

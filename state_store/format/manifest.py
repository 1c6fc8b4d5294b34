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
  manifests/<version:020d>.json             a version published by run epoch 0
  manifests/<version:020d>-<epoch:010d>.json  ... by a later run of the query (epoch > 0)
  snapshots/<version:020d>-<lineage>.json   one per uploaded snapshot, named by its lineage
  snapshots/<version:020d>.json             (snapshots written before lineage names)
  files/<uuid>.changelog                    the writes of one version (changelog_file.py)
  files/<uuid>-<local name>                 a file of a RocksDB checkpoint (SST, MANIFEST, ...)

Run epochs: every run of a query publishes under a run epoch that the driver advances at
each query start (`RunEpochs` in the shim). Among attempts of one run, the first to publish
a version wins (put-if-absent on the same name); a later run supersedes what an earlier one
published for the same version (a user rewound the checkpoint by deleting its last offsets
and commits, and the batch runs again): a version is its manifest of the highest epoch.
A zombie attempt of an earlier run writes under its own, lower epoch, so it can never
replace what a later run published.

Every name in a record is checked where the record is parsed (names.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import Any

from ..errors import CorruptFileError
from .names import file_name, root_url
from .storage import Written

FORMAT_VERSION = 1
KIND = "pyrocks-state-store"
MANIFEST_DIR = "manifests"
SNAPSHOT_DIR = "snapshots"
FILES_DIR = "files"
_CHECKSUM = re.compile(r"crc32:[0-9a-f]{8}")
_MANIFEST_NAME = re.compile(r"(\d{20})(?:-(\d{10}))?\.json")
_SNAPSHOT_NAME = re.compile(r"(\d{20})(?:-([A-Za-z0-9._-]+))?\.json")


class Owner(str, Enum):
    """Who may delete a file. Only OWNED files, and CLAIMED ones in a root a restore
    recorded, are ever garbage-collected by this store."""

    OWNED = "owned"
    CLAIMED = "claimed"  # taken over from another query's checkpoint (CLAIM restore)
    # Read-only to us, never deleted. Not written by this build (a NO_CLAIM restore copies
    # the source's files instead), but read.
    SHARED = "shared"


@dataclass(frozen=True, slots=True)
class FileRef:
    name: str  # a file name inside the files/ directory of `root`
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

    def to_raw(self) -> dict[str, Any]:
        return {"name": self.name, "size": self.size, "checksum": self.checksum,
                "owner": self.owner.value, "local_name": self.local_name, "root": self.root}


@dataclass(frozen=True, slots=True)
class Changelog:
    version: int
    file: FileRef

    def to_raw(self) -> dict[str, Any]:
        return {"version": self.version, "file": self.file.to_raw()}


@dataclass(frozen=True)
class SnapshotDescriptor:
    """A complete RocksDB checkpoint of one version.

    `lineage` names the attempt whose state it captures: the changelog file of its version
    in the manifest that attempt published. Two attempts of one batch write different
    changelogs, so a snapshot of a losing attempt never matches the winner's manifest
    (lineage.can_start_from). Its record is named by version and lineage, so the
    snapshots of two attempts never compete for one name.
    """

    version: int
    files: list[FileRef]
    num_keys: int
    full: bool = False  # forced full: references no file of an earlier snapshot
    lineage: str = ""
    format_version: int = FORMAT_VERSION
    kind: str = KIND

    @property
    def path(self) -> str:
        return snapshot_path(self.version, self.lineage)

    def to_json(self) -> bytes:
        return _record_json(self, files=[f.to_raw() for f in self.files])

    @staticmethod
    def from_json(data: bytes, where: str) -> SnapshotDescriptor:
        raw = checked_record(data, where)
        try:
            lineage = str(raw.get("lineage", ""))
            return SnapshotDescriptor(
                version=_version(raw["version"]),
                files=[_file_ref(f, where, f"files[{i}]") for i, f in enumerate(raw["files"])],
                num_keys=int(raw["num_keys"]), full=bool(raw["full"]),
                lineage=lineage and file_name(lineage, where, "lineage"),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CorruptFileError(f"{where} is not a valid snapshot descriptor: {e!r}") from e


@dataclass(frozen=True)
class Retention:
    """The GC settings of the run that published a manifest: what `state-store inspect`'s
    dry run uses unless told otherwise, so it plans what the query's own GC would do."""

    min_versions: int  # spark.sql.streaming.minBatchesToRetain
    orphan_margin_s: float  # orphanMarginSeconds

    @staticmethod
    def from_raw(raw: Any) -> Retention | None:
        if raw is None:
            return None
        margin = float(raw["orphan_margin_s"])
        if not 0 <= margin < float("inf"):
            raise ValueError(f"retention.orphan_margin_s {margin} is not a duration")
        return Retention(_version(raw["min_versions"]), margin)


@dataclass(frozen=True)
class Manifest:
    """A committed version: its base snapshot plus the changelogs that follow it.

    Its chain holds every version after the base, in order, ending with this version's own
    changelog (lineage.py states and enforces the rules a manifest and its snapshots obey).
    """

    version: int
    snapshot_version: int | None  # the base snapshot, None = the empty store
    changelogs: list[Changelog]
    num_keys: int
    column_families: list[str] = field(default_factory=list)
    base_lineage: str = ""  # the base snapshot's lineage: only that snapshot may serve
    writer: str = ""  # the JVM and worker that published it (for people and tests)
    epoch: int = 0  # the run that published it (see the module docstring)
    retention: Retention | None = None  # None in manifests older than the field
    # A copy's (savepoint, restore): the commit id of the manifest it copies; "" otherwise
    checkpoint_id: str = ""
    format_version: int = FORMAT_VERSION
    kind: str = KIND

    @property
    def path(self) -> str:
        return manifest_path(self.version, self.epoch)

    def changelogs_after(self, version: int | None) -> list[Changelog]:
        return [c for c in self.changelogs if version is None or c.version > version]

    @property
    def lineage(self) -> str:
        """The attempt that published this version: the name of its own changelog."""
        return self.changelogs[-1].file.name

    @property
    def commit_id(self) -> str:
        """The commit's id (Spark's state store checkpoint id, checkpointFormatVersion 2):
        the lineage of the attempt that committed it, kept by every copy of it (a copy's
        changelogs have new names, so a restored query's commit log still names it)."""
        return self.checkpoint_id or self.lineage

    def to_json(self) -> bytes:
        return _record_json(
            self, changelogs=[c.to_raw() for c in self.changelogs],
            retention=None if self.retention is None else asdict(self.retention))

    @staticmethod
    def from_json(data: bytes, where: str) -> Manifest:
        raw = checked_record(data, where)
        try:
            snapshot = raw["snapshot_version"]
            lineage = str(raw.get("base_lineage", ""))
            return Manifest(
                version=_version(raw["version"]),
                snapshot_version=None if snapshot is None else _version(snapshot),
                changelogs=[
                    Changelog(_version(c["version"]),
                              _file_ref(c["file"], where, f"changelogs[{i}].file"))
                    for i, c in enumerate(raw["changelogs"])
                ],
                num_keys=int(raw["num_keys"]),
                column_families=[str(cf) for cf in raw["column_families"]],
                base_lineage=lineage and file_name(lineage, where, "base_lineage"),
                writer=str(raw.get("writer", "")),
                epoch=_version(raw.get("epoch", 0)),
                retention=Retention.from_raw(raw.get("retention")),
                checkpoint_id=_checkpoint_id(raw.get("checkpoint_id", ""), where),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CorruptFileError(f"{where} is not a valid manifest: {e!r}") from e


def _record_json(record: Any, **nested: Any) -> bytes:
    """`record`'s fields as JSON, those holding records given in `nested` already as dicts.
    What `dataclasses.asdict` would give, without its deep copy of every file reference: a
    manifest is written at every commit of every store (with 10 changelogs listed: 126 us
    through `asdict`, 37 us this way)."""
    raw = {f.name: getattr(record, f.name) for f in fields(record)}
    raw.update(nested)
    return json.dumps(raw, sort_keys=True).encode()


def _checkpoint_id(value: object, where: str) -> str:
    """A commit id is compared, never used as a path; still only a plain name is accepted."""
    return "" if value == "" else file_name(value, where, "checkpoint_id")


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


def _version(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{value!r} is not a version (an integer >= 0)")
    return value


def _file_ref(raw: dict[str, Any], where: str, field: str) -> FileRef:
    """A file reference, its every name checked (names.py) and its owner consistent with
    its root: a file we own lives in our root, a claimed one in the root it came from."""
    owner = Owner(raw["owner"])
    size, checksum = raw["size"], raw["checksum"]
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ValueError(f"{field}.size {size!r} is not a size")
    if not isinstance(checksum, str) or not _CHECKSUM.fullmatch(checksum):
        raise ValueError(f"{field}.checksum {checksum!r} is not a checksum")
    local = raw.get("local_name", "")
    root = raw.get("root", "")
    ref = FileRef(
        name=file_name(raw["name"], where, f"{field}.name"), size=size, checksum=checksum,
        owner=owner, local_name=local and file_name(local, where, f"{field}.local_name"),
        root=root and root_url(root, where, f"{field}.root"))
    if (owner is Owner.OWNED) != (ref.root == ""):
        raise CorruptFileError(
            f"{where}: field {field}.root holds {ref.root!r} for a file owned "
            f"{owner.value}: a file this store owns lives in its own root (root \"\"), any "
            "other names the root it came from; nothing was read, written or deleted because "
            "of it")
    return ref


def manifest_path(version: int, epoch: int = 0) -> str:
    suffix = f"-{epoch:010d}" if epoch else ""
    return f"{MANIFEST_DIR}/{version:020d}{suffix}.json"


def snapshot_path(version: int, lineage: str) -> str:
    suffix = f"-{lineage}" if lineage else ""
    return f"{SNAPSHOT_DIR}/{version:020d}{suffix}.json"


def parse_manifest_name(name: str) -> tuple[int, int] | None:
    """(version, epoch) of a manifest record's file name; None for anything else."""
    match = _MANIFEST_NAME.fullmatch(name)
    return None if match is None else (int(match[1]), int(match[2] or 0))


def parse_snapshot_name(name: str) -> tuple[int, str | None] | None:
    """(version, lineage) of a snapshot record's file name (lineage None: a record named
    before lineage names, whose lineage is inside it); None for anything else."""
    match = _SNAPSHOT_NAME.fullmatch(name)
    return None if match is None else (int(match[1]), match[2])


def file_path(name: str) -> str:
    return f"{FILES_DIR}/{name}"

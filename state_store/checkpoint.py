"""Publishing versions of one store and reading them back.

Who deletes a file: only `collect_garbage`, and only files that (a) this store owns,
(b) were referenced by a manifest it just removed for falling out of retention, and
(c) no retained manifest references. Files of unpublished (in-flight or crashed) commits
are never touched here, because nothing proves them unreferenced yet.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

from .errors import CorruptFileError, ForeignCheckpointError, VersionNotFoundError
from .manifest import (
    MANIFEST_DIR,
    Changelog,
    FileRef,
    Manifest,
    Owner,
    Snapshot,
    file_path,
    manifest_path,
    parse_manifest_name,
)
from .storage import Storage

# Names Spark's own providers leave in a store directory.
_FOREIGN_SUFFIXES = (".delta", ".snapshot", ".changelog", ".zip")


@dataclass(frozen=True)
class GcResult:
    manifests_deleted: int
    files_deleted: int


class Checkpoint:
    """The durable side of one store: its root holds manifests/ and files/."""

    def __init__(self, storage: Storage, store_name: str) -> None:
        self.storage = storage
        self.store_name = store_name

    def versions(self) -> list[int]:
        names = self.storage.list_names(MANIFEST_DIR)
        return sorted(v for v in map(parse_manifest_name, names) if v is not None)

    def read_manifest(self, version: int) -> Manifest:
        where = f"manifest of version {version} of {self.store_name} ({manifest_path(version)})"
        try:
            data = self.storage.fs.cat_file(self.storage.path(manifest_path(version)))
        except FileNotFoundError:
            raise self._missing(version) from None
        manifest = Manifest.from_json(data, where)
        if manifest.version != version:
            raise CorruptFileError(f"{where} describes version {manifest.version}")
        return manifest

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
        foreign = [n for n in self.storage.list_names("") if n.endswith(_FOREIGN_SUFFIXES)]
        if foreign:
            raise ForeignCheckpointError(
                f"{self.storage.url} holds state written by another state store provider "
                f"(found {', '.join(foreign[:3])}); this provider cannot read it. Run the query "
                "with the provider that wrote the checkpoint, or start from a new checkpoint."
            )

    # ---- writing a version --------------------------------------------------------------

    def write_changelog(self, version: int, data: bytes) -> Changelog:
        name = f"{uuid.uuid4().hex}.changelog"
        written = self.storage.write_new(file_path(name), data)
        return Changelog(version, FileRef(name, written.size, written.checksum))

    def upload_snapshot(self, version: int, checkpoint_dir: Path) -> Snapshot:
        prefix = uuid.uuid4().hex
        files = []
        for local in sorted(checkpoint_dir.iterdir()):
            name = f"{prefix}-{local.name}"
            written = self.storage.upload_new(local, file_path(name))
            files.append(FileRef(name, written.size, written.checksum, local_name=local.name))
        return Snapshot(version, files)

    def publish(self, manifest: Manifest) -> bool:
        """Makes the version visible; False if another attempt published it first."""
        return self.storage.publish(manifest_path(manifest.version), manifest.to_json())

    def discard_unpublished(self, files: list[FileRef]) -> None:
        """Removes the files of a commit that lost the race to publish (they are ours alone)."""
        for ref in files:
            self.storage.delete(file_path(ref.name))

    # ---- reading a version --------------------------------------------------------------

    def read_changelog(self, changelog: Changelog) -> bytes:
        ref = changelog.file
        what = f"changelog of version {changelog.version} of {self.store_name}"
        return self.storage.read_verified(file_path(ref.name), ref.written, what)

    def download_snapshot(self, snapshot: Snapshot, target: Path) -> None:
        target.mkdir(parents=True)
        for ref in snapshot.files:
            what = f"snapshot of version {snapshot.version} of {self.store_name}"
            self.storage.download_verified(
                file_path(ref.name), target / ref.local_name, ref.written, what
            )

    # ---- retention ----------------------------------------------------------------------

    def collect_garbage(self, min_versions_to_retain: int) -> GcResult:
        versions = self.versions()
        if len(versions) <= min_versions_to_retain:
            return GcResult(0, 0)
        expired = versions[:-min_versions_to_retain]
        retained = versions[-min_versions_to_retain:]
        candidates = {f.name for v in expired for f in self._owned_files(v)}
        # Unpublish first: a crash after this leaks files (harmless), never breaks a version.
        for v in expired:
            self.storage.delete(manifest_path(v))
        referenced = {f.name for v in retained for f in self.read_manifest(v).files()}
        garbage = candidates - referenced
        for name in garbage:
            self.storage.delete(file_path(name))
        return GcResult(len(expired), len(garbage))

    def _owned_files(self, version: int) -> list[FileRef]:
        try:
            manifest = self.read_manifest(version)
        except (VersionNotFoundError, CorruptFileError):
            return []  # unreadable: we cannot prove what it references, so delete nothing of it
        return [f for f in manifest.files() if f.owner is Owner.OWNED]

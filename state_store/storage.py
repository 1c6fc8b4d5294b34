"""Durable storage through fsspec: immutable files, put-if-absent publish, checksummed reads.

Invariants enforced here:
  * A data file is written once under a fresh name and never overwritten (`write_new`).
  * `publish` is put-if-absent: the first writer of a path wins and a loser learns so from
    the return value; a reader never sees a partially written published file.
  * Every read is checked against the size and checksum recorded when the file was written.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path

import fsspec
from fsspec.implementations.local import LocalFileSystem

from .errors import CorruptFileError

_CHUNK = 4 << 20


def checksum(data: bytes | memoryview, running: int = 0) -> int:
    return zlib.crc32(data, running)


def format_checksum(crc: int) -> str:
    return f"crc32:{crc:08x}"


@dataclass(frozen=True, slots=True)
class Written:
    """What a write learned about the bytes it stored: enough to verify them on read."""

    size: int
    checksum: str


class Storage:
    """One durable root (a local path or an fsspec URL) with paths relative to it."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.fs, self.root = fsspec.core.url_to_fs(self.url)
        self.is_local = isinstance(self.fs, LocalFileSystem)

    def path(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    # ---- writes -------------------------------------------------------------------------

    def write_new(self, rel: str, data: bytes) -> Written:
        """Stores an immutable file under a name the caller made unique (a UUID)."""
        path = self.path(rel)
        self.fs.makedirs(self.fs._parent(path), exist_ok=True)
        if self.is_local:
            with open(path, "xb") as f:
                f.write(data)
        else:
            self.fs.pipe_file(path, data)
        return Written(len(data), format_checksum(checksum(data)))

    def upload_new(self, local_path: Path, rel: str) -> Written:
        """Copies a local file to an immutable durable file, hard-linking when both are local."""
        path = self.path(rel)
        self.fs.makedirs(self.fs._parent(path), exist_ok=True)
        crc, size = 0, 0
        with open(local_path, "rb") as src:
            while chunk := src.read(_CHUNK):
                crc, size = checksum(chunk, crc), size + len(chunk)
        if self.is_local:
            _link_or_copy(local_path, Path(path))
        else:
            self.fs.put_file(str(local_path), path)
        return Written(size, format_checksum(crc))

    def publish(self, rel: str, data: bytes) -> bool:
        """Put-if-absent. True if this call published `rel`; False if it already existed."""
        path = self.path(rel)
        self.fs.makedirs(self.fs._parent(path), exist_ok=True)
        if self.is_local:
            # Write aside, then link into place: link fails if the name exists (first wins),
            # and readers only ever see the complete file.
            tmp = f"{path}.{uuid.uuid4().hex}.tmp"
            with open(tmp, "xb") as f:
                f.write(data)
            try:
                os.link(tmp, path)
                return True
            except FileExistsError:
                return False
            finally:
                os.unlink(tmp)
        try:
            self.fs.pipe_file(path, data, mode="create")
            return True
        except FileExistsError:
            return False

    def delete(self, rel: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self.path(rel))

    # ---- reads --------------------------------------------------------------------------

    def read_verified(self, rel: str, written: Written, what: str) -> bytes:
        """Reads a whole file and checks it; `what` names it in errors (e.g. 'changelog of v3')."""
        data = self.read(rel, what)
        self.verify(rel, data, written, what)
        return data

    def read(self, rel: str, what: str) -> bytes:
        try:
            return self.fs.cat_file(self.path(rel))
        except FileNotFoundError as e:
            raise CorruptFileError(f"{what}: file {self.path(rel)} is missing") from e

    def verify(self, rel: str, data: bytes, written: Written, what: str) -> None:
        if len(data) != written.size:
            raise CorruptFileError(
                f"{what}: file {self.path(rel)} has {len(data)} bytes, expected {written.size}"
            )
        actual = format_checksum(checksum(data))
        if actual != written.checksum:
            raise CorruptFileError(
                f"{what}: file {self.path(rel)} fails its checksum "
                f"(found {actual}, expected {written.checksum})"
            )

    def download_verified(self, rel: str, local_path: Path, written: Written, what: str) -> None:
        """Copies a durable file to local disk, verifying it on the way."""
        path = self.path(rel)
        crc, size = 0, 0
        try:
            with self.fs.open(path, "rb") as src, open(local_path, "wb") as dst:
                while chunk := src.read(_CHUNK):
                    crc, size = checksum(chunk, crc), size + len(chunk)
                    dst.write(chunk)
        except FileNotFoundError as e:
            raise CorruptFileError(f"{what}: file {path} is missing") from e
        if size != written.size or format_checksum(crc) != written.checksum:
            raise CorruptFileError(
                f"{what}: file {path} is corrupt ({size} bytes, {format_checksum(crc)}; "
                f"expected {written.size} bytes, {written.checksum})"
            )

    def list_names(self, rel_dir: str) -> list[str]:
        try:
            entries = self.fs.ls(self.path(rel_dir), detail=False)
        except FileNotFoundError:
            return []
        return sorted(str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries)


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another device, or links unsupported
        shutil.copyfile(src, dst)

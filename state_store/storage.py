"""Durable storage through fsspec: immutable files, put-if-absent publish, checksummed reads.

Invariants enforced here:
  * A data file is written once under a fresh name and never overwritten (`write_new`,
    `upload_new`, `duplicate`).
  * `publish` is put-if-absent: the first writer of a path wins, a loser learns so from
    the return value, and a reader never sees a partially written published file.
  * Every read is checked against the size and checksum recorded when the file was written.

Per-filesystem fast paths: on a local filesystem an upload or a duplicate is a hard link
(RocksDB never modifies a file it has written, so sharing the inode is safe); on S3 a
duplicate is a server-side copy. Anything else streams the bytes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import fsspec
from fsspec.implementations.local import LocalFileSystem

from .errors import CorruptFileError, StateStoreError

_CHUNK = 4 << 20
_ATTEMPTS = 5
_FIRST_BACKOFF_S = 0.05
# Errors that are answers, not accidents: retrying cannot change them.
_PERMANENT = (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError,
              PermissionError, CorruptFileError)
T = TypeVar("T")


def checksum(data: bytes | memoryview, running: int = 0) -> int:
    return zlib.crc32(data, running)


def format_checksum(crc: int) -> str:
    return f"crc32:{crc:08x}"


@dataclass(frozen=True, slots=True)
class Written:
    """What a write learned about the bytes it stored: enough to verify them on read."""

    size: int
    checksum: str


class StorageError(StateStoreError):
    """A storage operation kept failing after its retries."""


class Storage:
    """One durable root (a local path or an fsspec URL) with paths relative to it."""

    def __init__(self, url: str, options: dict[str, Any] | None = None) -> None:
        self.url = url.rstrip("/")
        self.fs, self.root = fsspec.core.url_to_fs(self.url, **(options or {}))
        self.is_local = isinstance(self.fs, LocalFileSystem)
        self.is_s3 = "s3" in _protocols(self.fs)

    def path(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    def _retry(self, what: str, op: Callable[[], T]) -> T:
        """Runs `op`, retrying transient failures with exponential backoff."""
        for attempt in range(_ATTEMPTS):
            try:
                return op()
            except _PERMANENT:
                raise
            except OSError as e:
                if attempt == _ATTEMPTS - 1:
                    raise StorageError(f"{what} failed after {_ATTEMPTS} attempts: {e}") from e
                time.sleep(_FIRST_BACKOFF_S * 2**attempt)
        raise AssertionError("unreachable")

    # ---- writes -------------------------------------------------------------------------

    def _makedirs_for(self, path: str) -> None:
        if self.is_local:
            os.makedirs(os.path.dirname(path), exist_ok=True)

    def write_new(self, rel: str, data: bytes) -> Written:
        """Stores an immutable file under a name the caller made unique (a UUID)."""
        path = self.path(rel)
        self._makedirs_for(path)
        if self.is_local:
            with open(path, "xb") as f:
                f.write(data)
        else:
            self._retry(f"writing {path}", lambda: self.fs.pipe_file(path, data))
        return Written(len(data), format_checksum(checksum(data)))

    def upload_new(self, local_path: Path, rel: str) -> Written:
        """Copies a local file to a new immutable durable file (a hard link when local)."""
        path = self.path(rel)
        self._makedirs_for(path)
        crc, size = 0, 0
        with open(local_path, "rb") as src:
            while chunk := src.read(_CHUNK):
                crc, size = checksum(chunk, crc), size + len(chunk)
        if self.is_local:
            _link_or_copy(Path(local_path), Path(path))
        else:
            self._retry(f"uploading {path}", lambda: self.fs.put_file(str(local_path), path))
        return Written(size, format_checksum(crc))

    def duplicate(self, src_rel: str, dst_rel: str) -> None:
        """Makes `dst` a new file with the bytes of `src`, by the cheapest means available."""
        src, dst = self.path(src_rel), self.path(dst_rel)
        self._makedirs_for(dst)
        if self.is_local:
            _link_or_copy(Path(src), Path(dst))
        elif self.is_s3:
            self._retry(f"copying {src} to {dst}", lambda: self.fs.copy(src, dst))
        else:
            self._retry(f"copying {src} to {dst}", lambda: self._stream_copy(src, dst))

    def _stream_copy(self, src: str, dst: str) -> None:
        with self.fs.open(src, "rb") as r, self.fs.open(dst, "wb") as w:
            while chunk := r.read(_CHUNK):
                w.write(chunk)

    def publish(self, rel: str, data: bytes) -> bool:
        """Put-if-absent. True if this call published `rel`; False if it already existed."""
        path = self.path(rel)
        self._makedirs_for(path)
        if self.is_local:
            # Written aside, then linked into place: the link fails if the name exists (the
            # first publisher wins) and readers only ever see the complete file.
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
            self._retry(f"publishing {path}",
                        lambda: self.fs.pipe_file(path, data, mode="create"))
            return True
        except FileExistsError:
            # A retried put whose first attempt landed also reports "exists": it is ours if
            # the bytes are ours (every manifest names UUID files, so no two attempts match).
            return self.fs.cat_file(path) == data

    def delete(self, rel: str) -> None:
        path = self.path(rel)
        with contextlib.suppress(FileNotFoundError):
            self._retry(f"deleting {path}", lambda: self.fs.rm_file(path))

    # ---- reads --------------------------------------------------------------------------

    def read(self, rel: str, what: str) -> bytes:
        path = self.path(rel)
        try:
            return self._retry(f"reading {path}", lambda: self.fs.cat_file(path))
        except FileNotFoundError as e:
            raise CorruptFileError(f"{what}: file {path} is missing") from e

    def read_verified(self, rel: str, written: Written, what: str) -> bytes:
        """Reads a whole file and checks it; `what` names it in errors (e.g. 'changelog of v3')."""
        data = self.read(rel, what)
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
        return data

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
        return sorted(self.list_modified(rel_dir))

    def list_modified(self, rel_dir: str) -> dict[str, float]:
        """Names in a directory with their modification times (seconds since the epoch)."""
        path = self.path(rel_dir)
        try:
            entries = self._retry(f"listing {path}",
                                  lambda: self.fs.ls(path, detail=True, refresh=True))
        except FileNotFoundError:
            return {}
        return {
            str(e["name"]).rstrip("/").rsplit("/", 1)[-1]: _modified(e)
            for e in entries if e.get("type") != "directory"
        }


def _protocols(fs: fsspec.AbstractFileSystem) -> tuple[str, ...]:
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)


def _modified(entry: dict[str, Any]) -> float:
    for key in ("mtime", "LastModified", "created"):
        value = entry.get(key)
        if isinstance(value, datetime):
            return value.timestamp()
        if isinstance(value, (int, float)):
            return float(value)
    return time.time()  # unknown: treat as brand new, so orphan collection never takes it


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except FileExistsError:
        raise
    except OSError:  # another device, or links unsupported
        with open(src, "rb") as r, open(dst, "xb") as w:
            shutil.copyfileobj(r, w, _CHUNK)

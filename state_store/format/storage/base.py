"""The storage interface every durable root goes through, and what all filesystems share.

Invariants enforced here and by each implementation:
  * A data file is written once under a fresh name and never overwritten (`write_new`,
    `upload_new`, `duplicate`).
  * `publish` is put-if-absent and atomic: the first writer of a path wins, a loser learns
    so from the return value, and a reader never sees a partially written published file.
    Each implementation uses its filesystem's native conditional write; a filesystem
    without one is refused when the storage is opened (see `open_storage`).
  * Every read is checked against the size and checksum recorded when the file was written.
  * A file's age (`list_entered`) is the time it entered durable storage, never a time
    copied from its source: orphan collection judges files by it.
"""

from __future__ import annotations

import contextlib
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import fsspec

from ...errors import CorruptFileError, StorageError, is_transient
from .probes import ConditionProbes

CHUNK = 4 << 20
_ATTEMPTS = 5
_FIRST_BACKOFF_S = 0.05
T = TypeVar("T")


def checksum(data: bytes | memoryview, running: int = 0) -> int:
    return zlib.crc32(data, running)


def format_checksum(crc: int) -> str:
    return f"crc32:{crc:08x}"


EMPTY_CHECKSUM = format_checksum(checksum(b""))


@dataclass(frozen=True, slots=True)
class Written:
    """What a write learned about the bytes it stored: enough to verify them on read."""

    size: int
    checksum: str


class Storage:
    """One durable root (a local path or an fsspec URL) with paths relative to it.

    Subclasses provide `publish` (the atomic put-if-absent) and may replace the generic
    upload and duplicate with their filesystem's fast paths.
    """

    kind = "generic"
    # Requests are round trips over a network: independent ones are worth overlapping.
    remote = True

    def __init__(self, url: str, fs: fsspec.AbstractFileSystem, root: str,
                 options: dict[str, Any], probes: ConditionProbes | None = None) -> None:
        self.url = url.rstrip("/")
        self.fs = fs
        self.root = root.rstrip("/") or root
        self.options = options
        self.probes = probes or ConditionProbes()

    def path(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    def child(self, rel: str) -> Storage:
        """The same filesystem rooted at `rel` below this root (same endpoint: a probe
        already passed holds for it)."""
        return type(self)(f"{self.url}/{rel}", self.fs, self.path(rel), self.options,
                          self.probes)

    def retry(self, what: str, op: Callable[[], T]) -> T:
        """Runs `op`, retrying transient failures with exponential backoff."""
        for attempt in range(_ATTEMPTS):
            try:
                return op()
            except OSError as e:
                if not is_transient(e):
                    raise
                if attempt == _ATTEMPTS - 1:
                    raise StorageError(f"{what} failed after {_ATTEMPTS} attempts: {e}") from e
                time.sleep(_FIRST_BACKOFF_S * 2**attempt)
        raise AssertionError("unreachable")

    # ---- writes -------------------------------------------------------------------------

    def write_new(self, rel: str, data: bytes) -> Written:
        """Stores an immutable file under a name the caller made unique (a UUID)."""
        path = self.path(rel)
        self.retry(f"writing {path}", lambda: self.fs.pipe_file(path, data))
        return Written(len(data), format_checksum(checksum(data)))

    def upload_new(self, local_path: Path, rel: str) -> Written:
        """Copies a local file to a new immutable durable file."""
        written = local_written(local_path)
        path = self.path(rel)
        self.retry(f"uploading {path}", lambda: self.fs.put_file(str(local_path), path))
        return written

    def duplicate(self, src_rel: str, dst_rel: str, source: Storage | None = None,
                  size: int | None = None) -> None:
        """Makes `dst` a new file with the bytes of `src` (under `source`, default: this
        root), by the cheapest means available: a subclass's fast path when both roots are
        on its filesystem, else streamed through this process (the last resort). `size`,
        when the caller knows it, spares a fast path asking for it."""
        source = source or self
        if self.same_filesystem(source):
            self._duplicate_native(source.path(src_rel), self.path(dst_rel), size)
        else:
            self._stream_copy(source, src_rel, dst_rel)

    def duplicate_verified(self, src_rel: str, dst_rel: str, source: Storage,
                           expected: Written, what: str) -> None:
        """`duplicate`, then the copy checked against `expected` (size and checksum, as a
        record noted them): a damaged source never becomes a copy that looks intact. A bad
        copy is removed and the error names the source file (`what`)."""
        self.duplicate(src_rel, dst_rel, source, expected.size)
        try:
            self.verify(dst_rel, expected, what)
        except CorruptFileError:
            self.delete(dst_rel)
            raise

    def same_filesystem(self, other: Storage) -> bool:
        """Whether a native copy can go from `other` to here (same kind, same endpoint)."""
        return (type(other) is type(self) and type(other.fs) is type(self.fs)
                and other.options == self.options)

    def _duplicate_native(self, src: str, dst: str, size: int | None = None) -> None:
        """Copies between two paths of this filesystem (overridden by fast paths)."""
        self._copy_streamed(self.fs, src, dst)

    def _stream_copy(self, source: Storage, src_rel: str, dst_rel: str) -> None:
        self._copy_streamed(source.fs, source.path(src_rel), self.path(dst_rel))

    def _copy_streamed(self, src_fs: fsspec.AbstractFileSystem, src: str, dst: str) -> None:
        def copy() -> None:
            with src_fs.open(src, "rb") as r, self.fs.open(dst, "wb") as w:
                while chunk := r.read(CHUNK):
                    w.write(chunk)

        self.retry(f"copying {src} to {dst}", copy)

    def publish(self, rel: str, data: bytes) -> bool:
        """Put-if-absent. True if this call published `rel`; False if it already existed."""
        raise NotImplementedError

    def verify_publish(self) -> None:
        """Fails now if `publish` could not be atomic here (checked when a store opens, so
        that no commit ever starts on such a root)."""

    def delete(self, rel: str) -> None:
        path = self.path(rel)
        with contextlib.suppress(FileNotFoundError):
            self.retry(f"deleting {path}", lambda: self.fs.rm_file(path))

    def delete_tree(self, rel: str) -> None:
        """Removes a directory and everything under it (a stale query's records)."""
        path = self.path(rel)
        with contextlib.suppress(FileNotFoundError):
            self.retry(f"deleting {path}", lambda: self.fs.rm(path, recursive=True))

    # ---- reads --------------------------------------------------------------------------

    def read(self, rel: str, what: str, size: int | None = None) -> bytes:
        """The whole file; `size` is what its record says it holds, when one does."""
        path = self.path(rel)
        try:
            return self.retry(f"reading {path}", lambda: self._cat(path, size))
        except FileNotFoundError as e:
            raise CorruptFileError(f"{what}: file {path} is missing") from e

    def _cat(self, path: str, size: int | None) -> bytes:
        """One file's bytes: a store whose client would ask the file's size first (a round
        trip of its own) takes it from the record instead."""
        return self.fs.cat_file(path)

    def read_if_exists(self, rel: str) -> bytes | None:
        """The whole file, or None if it does not exist (transient errors are retried)."""
        path = self.path(rel)
        try:
            return self.retry(f"reading {path}", lambda: self.fs.cat_file(path))
        except FileNotFoundError:
            return None

    def read_verified(self, rel: str, written: Written, what: str) -> bytes:
        """Reads a whole file and checks it; `what` names it in errors (e.g. 'changelog of v3').

        A file its record says is empty is not read: its bytes are known, and the record's
        checksum must be the empty file's. Every snapshot holds one (RocksDB's empty WAL),
        and Azure's client reads an empty blob in two round trips (a range first, which a
        blob of no bytes cannot give)."""
        if not written.size:
            if written.checksum != EMPTY_CHECKSUM:
                raise CorruptFileError(
                    f"{what}: the record of file {self.path(rel)} says it is empty, but its "
                    f"checksum {written.checksum} is not an empty file's ({EMPTY_CHECKSUM})")
            return b""
        data = self.read(rel, what, written.size)
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
        """Copies a durable file to local disk, verifying it. Each in one request: a file of
        one chunk is read whole, a larger one streamed to disk (`get_file`) and checked
        there. Read as a stream instead (fsspec's `open`), a file cost a request for its
        size first and then one per block, each a round trip after the one before."""
        if written.size <= CHUNK:
            local_path.write_bytes(self.read_verified(rel, written, what))
            return
        path = self.path(rel)
        try:
            self.retry(f"downloading {path}", lambda: self._get_file(path, local_path))
        except FileNotFoundError as e:
            raise CorruptFileError(f"{what}: file {path} is missing") from e
        with open(local_path, "rb") as copy:
            self._check_stream(path, copy.read, written, what)

    def _get_file(self, path: str, local_path: Path) -> None:
        """One file streamed to local disk in one request."""
        self.fs.get_file(path, str(local_path))

    def verify(self, rel: str, written: Written, what: str) -> None:
        """Reads a durable file through and checks its size and checksum."""
        path = self.path(rel)
        try:
            with self.fs.open(path, "rb") as src:
                self._check_stream(path, src.read, written, what)
        except FileNotFoundError as e:
            raise CorruptFileError(f"{what}: file {path} is missing") from e

    @staticmethod
    def _check_stream(path: str, read: Callable[[int], bytes], written: Written,
                      what: str) -> None:
        """Reads `read` to its end and checks it holds the bytes of `written` (the file
        at `path`, which errors name)."""
        crc, size = 0, 0
        while chunk := read(CHUNK):
            crc, size = checksum(chunk, crc), size + len(chunk)
        if size != written.size or format_checksum(crc) != written.checksum:
            raise CorruptFileError(
                f"{what}: file {path} is corrupt ({size} bytes, {format_checksum(crc)}; "
                f"expected {written.size} bytes, {written.checksum})"
            )

    def find(self, rel_dir: str) -> list[str]:
        """Every file under `rel_dir` at any depth, as paths relative to this root."""
        base = self.path(rel_dir)
        try:
            self.fs.invalidate_cache(base)
            found = self.retry(f"listing {base}", lambda: self.fs.find(base))
        except FileNotFoundError:
            return []
        return sorted(str(p)[len(self.root) + 1:] for p in found)

    def glob(self, rel_pattern: str) -> list[str]:
        """Paths (relative to this root) matching a glob pattern below it, listed afresh:
        a walk over a listing cache would miss what another process wrote since (and
        s3fs forgets a path's own listing on request, not its children's: so all of it)."""
        self.fs.invalidate_cache()
        found = self.retry(f"listing {self.path(rel_pattern)}",
                           lambda: self.fs.glob(self.path(rel_pattern)))
        return sorted(str(p).rstrip("/")[len(self.root) + 1:] for p in found)

    def list_names(self, rel_dir: str) -> list[str]:
        return sorted(self.list_entered(rel_dir))

    def names(self, rel_dir: str) -> list[str]:
        """Every entry's name in a directory, asking nothing else about them: one request on
        an object store, no stat per entry on a local disk (record listings on the commit
        path)."""
        path = self.path(rel_dir)
        try:
            found = self.retry(f"listing {path}", lambda: self._fresh_ls(path, detail=False))
        except FileNotFoundError:
            return []
        return sorted(str(p).rstrip("/").rsplit("/", 1)[-1] for p in found)

    def list_dirs(self, rel_dir: str) -> list[str]:
        """Names of the directories directly under `rel_dir`."""
        return sorted(_name(e) for e in self._ls(rel_dir) if e.get("type") == "directory")

    def list_entered(self, rel_dir: str) -> dict[str, float]:
        """Files in a directory with the time each entered durable storage (epoch seconds)."""
        return {_name(e): _modified(e) for e in self._ls(rel_dir) if e.get("type") != "directory"}

    def _ls(self, rel_dir: str) -> list[dict[str, Any]]:
        path = self.path(rel_dir)
        try:
            return self.retry(f"listing {path}", lambda: self._fresh_ls(path, detail=True))
        except FileNotFoundError:
            return []

    def _fresh_ls(self, path: str, detail: bool) -> list[Any]:
        """A listing from the service, never from a listing cache: another writer may have
        published since (s3fs and gcsfs honour `refresh`; adlfs only an invalidated cache)."""
        self.fs.invalidate_cache(path)
        return self.fs.ls(path, detail=detail, refresh=True)


def local_written(local_path: Path) -> Written:
    crc, size = 0, 0
    with open(local_path, "rb") as src:
        while chunk := src.read(CHUNK):
            crc, size = checksum(chunk, crc), size + len(chunk)
    return Written(size, format_checksum(crc))


def _name(entry: dict[str, Any]) -> str:
    return str(entry["name"]).rstrip("/").rsplit("/", 1)[-1]


def _modified(entry: dict[str, Any]) -> float:
    for key in ("mtime", "LastModified", "created"):
        value = entry.get(key)
        if isinstance(value, datetime):
            return value.timestamp()
        if isinstance(value, (int, float)):
            return float(value)
    return time.time()  # unknown: treat as brand new, so orphan collection never takes it

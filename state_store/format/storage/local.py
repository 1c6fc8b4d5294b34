"""A durable root on a local (or locally mounted) filesystem.

Publish: the bytes are written aside, then hard-linked into place; `link` fails if the
name exists, so the first publisher wins and readers only ever see complete files.
Upload and duplicate are hard links (RocksDB never modifies a file it has written, so
sharing the inode is safe). A link keeps the inode's old modification time, so each link
is touched: a file's age must count from when it entered durable storage.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import fsspec

from .base import CHUNK, Storage, Written, checksum, format_checksum, local_written


class LocalStorage(Storage):
    kind = "local"
    remote = False

    def _makedirs_for(self, path: str) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)

    def names(self, rel_dir: str) -> list[str]:
        """`Storage.names` without fsspec's path normalising of every entry: the commit
        path lists a store's manifests, `minBatchesToRetain` of them at steady state, at
        every commit (store_root.newest_epoch); 101 of them took 0.21 ms, this 0.04."""
        try:
            return sorted(os.listdir(self.path(rel_dir)))
        except FileNotFoundError:
            return []

    def write_new(self, rel: str, data: bytes) -> Written:
        path = self.path(rel)
        self._makedirs_for(path)
        with open(path, "xb") as f:
            f.write(data)
        return Written(len(data), format_checksum(checksum(data)))

    def upload_new(self, local_path: Path, rel: str) -> Written:
        written = local_written(local_path)
        path = self.path(rel)
        self._makedirs_for(path)
        _link_or_copy(Path(local_path), Path(path))
        return written

    def _copy_streamed(self, src_fs: fsspec.AbstractFileSystem, src: str, dst: str) -> None:
        self._makedirs_for(dst)  # from another filesystem: no link possible
        super()._copy_streamed(src_fs, src, dst)

    def _duplicate_native(self, src: str, dst: str, size: int | None = None) -> None:
        self._makedirs_for(dst)
        _link_or_copy(Path(src), Path(dst))

    def publish(self, rel: str, data: bytes) -> bool:
        path = self.path(rel)
        self._makedirs_for(path)
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


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except FileExistsError:
        raise
    except OSError:  # another device, or links unsupported
        with open(src, "rb") as r, open(dst, "xb") as w:
            shutil.copyfileobj(r, w, CHUNK)
    os.utime(dst)  # its age starts now (see the module docstring)

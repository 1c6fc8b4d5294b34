"""The write records of the batch a store is in: its next changelog, until the commit.

Frames gather into chunks of the changelog file (changelog_file.py), each compressed as it
fills, so the records are held compressed. They are kept in memory up to `MEMORY_BYTES`, then
appended to a local file, so a worker's memory does not grow with the size of a batch (a
fill batch of 2M session windows held 27 MiB per store in memory, and twice that while it
committed). The commit stores them as the version's changelog: the bytes, or the file
uploaded (on a local root, a hard link: no copy at all).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import BinaryIO

from ..format.changelog_file import CHUNK_BYTES, ChunkWriter
from ..format.manifest import Changelog
from ..format.store_root import StoreRoot

MEMORY_BYTES = 4 << 20


class ChangelogSpool:
    def __init__(self, directory: Path, codec: str, memory_bytes: int = MEMORY_BYTES,
                 chunk_bytes: int = CHUNK_BYTES) -> None:
        self.directory = directory  # the store's local directory: removed with it
        self.chunks = ChunkWriter(codec)
        self.memory_bytes = memory_bytes
        self.chunk_bytes = chunk_bytes
        self.raw = bytearray()  # frames not yet in a chunk
        self.buffer = bytearray()  # the file's bytes, while they stay in memory
        self.file: BinaryIO | None = None
        self.path: Path | None = None

    def append(self, payload: bytes) -> None:
        self.raw += payload
        if len(self.raw) >= self.chunk_bytes:
            self._close_chunk()

    def _close_chunk(self) -> None:
        if not self.raw:
            return
        chunk = self.chunks.chunk(self.raw)
        self.raw = bytearray()
        if self.path is None and not self.buffer:  # the file's first chunk
            chunk = self.chunks.header + chunk
        if self.path is None and len(self.buffer) + len(chunk) > self.memory_bytes:
            self._spill()
        if self.path is not None:
            if self.file is None:  # a commit that failed closed it: the records are all there
                self.file = open(self.path, "ab")  # noqa: SIM115
            self.file.write(chunk)
        else:
            self.buffer += chunk

    def _spill(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / f"{uuid.uuid4().hex}.changelog-spool"
        self.file = open(self.path, "xb")  # noqa: SIM115 - open until the commit or a clear
        self.file.write(self.buffer)
        self.buffer = bytearray()

    def store(self, root: StoreRoot, version: int) -> Changelog:
        """The records as the changelog of `version` (not yet named by any manifest). They
        stay here until `clear`, so a commit that fails may be tried again."""
        self._close_chunk()
        if self.path is None:
            return root.write_changelog(version, bytes(self.buffer))
        if self.file is not None:
            self.file.close()
            self.file = None
        return root.upload_changelog(version, self.path)

    def clear(self) -> None:
        """Starts the next batch: the records are gone (a stored changelog stays)."""
        if self.file is not None:
            self.file.close()
            self.file = None
        if self.path is not None:
            self.path.unlink(missing_ok=True)
            self.path = None
        self.raw = bytearray()
        self.buffer = bytearray()

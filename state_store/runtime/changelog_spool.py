"""The write records of the batch a store is in: its next changelog, until the commit.

They are kept in memory up to `MEMORY_BYTES`, then appended to a local file as frames
arrive, so a worker's memory does not grow with the size of a batch (a fill batch of 2M
session windows held 27 MiB per store in memory, and twice that while it committed). The
commit stores them as the version's changelog: the bytes, or the file uploaded (on a local
root, a hard link: no copy at all).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import BinaryIO

from ..format.manifest import Changelog
from ..format.store_root import StoreRoot

MEMORY_BYTES = 4 << 20


class ChangelogSpool:
    def __init__(self, directory: Path, memory_bytes: int = MEMORY_BYTES) -> None:
        self.directory = directory  # the store's local directory: removed with it
        self.memory_bytes = memory_bytes
        self.buffer = bytearray()
        self.file: BinaryIO | None = None
        self.path: Path | None = None
        self.size = 0

    def append(self, payload: bytes) -> None:
        if self.path is None and len(self.buffer) + len(payload) > self.memory_bytes:
            self._spill()
        if self.path is not None:
            if self.file is None:  # a commit that failed closed it: the records are all there
                self.file = open(self.path, "ab")  # noqa: SIM115
            self.file.write(payload)
        else:
            self.buffer += payload
        self.size += len(payload)

    def _spill(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / f"{uuid.uuid4().hex}.changelog-spool"
        self.file = open(self.path, "xb")  # noqa: SIM115 - open until the commit or a clear
        self.file.write(self.buffer)
        self.buffer = bytearray()

    def store(self, root: StoreRoot, version: int) -> Changelog:
        """The records as the changelog of `version` (not yet named by any manifest). They
        stay here until `clear`, so a commit that fails may be tried again."""
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
        self.buffer = bytearray()
        self.size = 0

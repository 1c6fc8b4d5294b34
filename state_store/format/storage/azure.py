"""A durable root on Azure Blob Storage / ADLS Gen2 (abfs://, abfss://, az://) through adlfs.

Publish is one Put Blob with `If-None-Match: *`, on an endpoint probed first
(`conditional.py`). Duplicate is a server-side Copy Blob, waited on until the service
reports it done: no byte of the file passes through this process.

Azure computes no checksum of a copy that our records could be checked against, so each
file this root writes carries our CRC32 in its metadata (`CRC32_KEY`), and a Copy Blob
carries the metadata along: a copy whose metadata and size are what the record expects is
accepted without reading it. A blob another writer replaced loses that metadata, and is
read back and checked like any foreign file; every load still checks every byte it reads.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from fsspec.asyn import sync

from ...errors import StorageError
from .base import Written, checksum, format_checksum, local_written
from .conditional import ProbedEndpointStorage

CRC32_KEY = "pyrocks_crc32"  # metadata names are C# identifiers on Azure
_COPY_POLL_S = 0.05


class AzureStorage(ProbedEndpointStorage):
    kind = "azure"

    service, condition = "Azure", "If-None-Match"
    honest = "Azure Storage itself, Azurite"

    def endpoint_url(self) -> str:
        return str(self.fs.service_client.url)

    def write_new(self, rel: str, data: bytes) -> Written:
        path = self.path(rel)
        written = Written(len(data), format_checksum(checksum(data)))
        self.retry(f"writing {path}", lambda: self._upload(path, data, written))
        return written

    def upload_new(self, local_path: Path, rel: str) -> Written:
        written = local_written(local_path)
        path = self.path(rel)

        def upload() -> None:
            with open(local_path, "rb") as data:
                self._upload(path, data, written)

        self.retry(f"uploading {path}", upload)
        return written

    def _upload(self, path: str, data: Any, written: Written) -> None:
        sync(self.fs.loop, self._upload_async, path, data,
             {CRC32_KEY: written.checksum, "is_directory": "false"})

    async def _upload_async(self, path: str, data: Any, metadata: dict[str, str]) -> None:
        container, blob, _ = self.fs.split_path(path)
        async with self.fs.service_client.get_blob_client(container, blob) as client:
            await client.upload_blob(data, overwrite=True, metadata=metadata,
                                     max_concurrency=self.fs.max_concurrency or 1)
        self.fs.invalidate_cache(self.fs._parent(path))

    def names(self, rel_dir: str) -> list[str]:
        """One List Blobs of the directory's prefix: adlfs lists the prefix without its
        slash first, to learn it names a directory, a round trip more on each commit (the
        run-epoch fence lists the manifests)."""
        path = self.path(rel_dir)
        return self.retry(f"listing {path}", lambda: sync(self.fs.loop, self._names, path))

    async def _names(self, path: str) -> list[str]:
        container, prefix, _ = self.fs.split_path(path)
        below = f"{prefix.rstrip('/')}/" if prefix.strip("/") else None  # None: the container
        found = set()
        async with self.fs.service_client.get_container_client(container) as client:
            # A directory adlfs made is a marker blob and the prefix of its blobs: one name.
            async for entry in client.walk_blobs(name_starts_with=below, delimiter="/"):
                found.add(entry.name.rstrip("/").rsplit("/", 1)[-1])
        return sorted(found - {""})

    def _duplicate_native(self, src: str, dst: str, size: int | None = None) -> None:
        self.retry(f"copying {src} to {dst}", lambda: self._copy(src, dst, describe=False))

    def _copy_reported(self, src: str, dst: str) -> Written | None:
        """The copy's size and the CRC32 its metadata carried (see the module docstring)."""
        copy = self._copy(src, dst, describe=True)
        checksum_written = (copy.metadata or {}).get(CRC32_KEY)
        return None if checksum_written is None else Written(copy.size, checksum_written)

    def _copy(self, src: str, dst: str, describe: bool) -> Any:
        """Copies on the server and waits for it to be done; with `describe`, returns the
        copy's properties (its size and metadata: one more request)."""
        return sync(self.fs.loop, self._copy_async, src, dst, describe)

    async def _copy_async(self, src: str, dst: str, describe: bool) -> Any:
        from azure.core.exceptions import ResourceNotFoundError  # with adlfs, an extra

        src_container, src_blob, _ = self.fs.split_path(src)
        dst_container, dst_blob, _ = self.fs.split_path(dst)
        service = self.fs.service_client
        source_url = service.get_blob_client(src_container, src_blob).url
        properties = None
        async with service.get_blob_client(dst_container, dst_blob) as target:
            try:
                started = await target.start_copy_from_url(source_url)
            except ResourceNotFoundError as e:
                raise FileNotFoundError(src) from e
            if describe or started["copy_status"] != "success":
                properties = await target.get_blob_properties()
                while properties.copy.status == "pending":  # large or cross-account copies
                    await asyncio.sleep(_COPY_POLL_S)
                    properties = await target.get_blob_properties()
                copy = properties.copy
                if copy.status != "success":
                    raise StorageError(f"copying {src} to {dst}: the service reports "
                                       f"{copy.status} ({copy.status_description})")
        self.fs.invalidate_cache(self.fs._parent(dst))
        return properties

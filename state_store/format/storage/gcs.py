"""A durable root on Google Cloud Storage (gs://, gcs://) through gcsfs's JSON-API client.

Publish is one multipart upload with `ifGenerationMatch=0`, the JSON API's create-if-absent,
on an endpoint probed first (`conditional.py`): always a single request, whatever the size,
because the condition must hold for the one request that creates the object (a resumable
upload is several, and emulators honour the condition on multipart uploads only).

gcsfs's default class first asks a gRPC control endpoint what kind of bucket it talks to
(zonal, hierarchical) and, where that endpoint does not answer (emulators, proxies), waits
60 s on every call before falling back to the JSON API. This root uses the JSON-API class
directly: every object operation it needs (create, conditional create, list, rewrite,
delete) is the same on every bucket kind.

Duplicate is a server-side rewrite. Each file this root writes carries its CRC32C in its
metadata (`CRC32C_KEY`) beside our CRC32 (`CRC32_KEY`): GCS computes the CRC32C of the
bytes it holds, so a copy whose server CRC32C matches the one written with the source, and
whose CRC32 is the one the record expects, is verified with no byte through this process.
A copy without them (a file some other tool wrote) is read back.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from fsspec.asyn import sync

from .base import CHUNK, Written, checksum, format_checksum
from .conditional import ProbedEndpointStorage

CRC32_KEY = "pyrocks-crc32"
CRC32C_KEY = "pyrocks-crc32c"
GOOGLE_ENDPOINT = "https://storage.googleapis.com"


def filesystem(options: dict[str, Any]) -> Any:
    """gcsfs's JSON-API filesystem (see the module docstring for why not its default)."""
    from gcsfs.core import GCSFileSystem

    return GCSFileSystem(**options)


class GcsStorage(ProbedEndpointStorage):
    kind = "gcs"

    service, condition = "GCS", "ifGenerationMatch=0"
    honest = "Google Cloud Storage itself, an emulator that honours the condition"

    def endpoint_url(self) -> str:
        return str(self.options.get("endpoint_url") or GOOGLE_ENDPOINT)

    def _create(self, path: str, data: bytes) -> None:
        self.fs.pipe_file(path, data, mode="create", chunksize=len(data) + 1)

    def write_new(self, rel: str, data: bytes) -> Written:
        path = self.path(rel)
        written = Written(len(data), format_checksum(checksum(data)))
        metadata = _metadata(written, _crc32c().value(data))
        self.retry(f"writing {path}", lambda: self.fs.pipe_file(path, data, metadata=metadata))
        return written

    def upload_new(self, local_path: Path, rel: str) -> Written:
        written, crc32c = _local_checksums(local_path)
        path = self.path(rel)
        metadata = _metadata(written, crc32c)
        self.retry(f"uploading {path}",
                   lambda: self.fs.put_file(str(local_path), path, metadata=metadata))
        return written

    def _get_file(self, path: str, local_path: Path) -> None:
        """gcsfs downloads a file as ranges side by side after a request for its size: two
        round trips one after the other where one GET streams it."""
        self.fs.get_file(path, str(local_path), concurrency=1)

    def _duplicate_native(self, src: str, dst: str, size: int | None = None) -> None:
        self.retry(f"copying {src} to {dst}", lambda: self._rewrite(src, dst))

    def _copy_reported(self, src: str, dst: str) -> Written | None:
        """The copy's size and CRC32 as written, if the CRC32C GCS computed of its bytes is
        the one written with them; else its CRC32C, which no record expects."""
        copy = self._rewrite(src, dst)
        metadata = copy.get("metadata") or {}
        if CRC32C_KEY not in metadata or CRC32_KEY not in metadata:
            return None
        size = int(copy.get("size", -1))
        held = int.from_bytes(base64.b64decode(copy.get("crc32c", "")), "big")
        if f"{held:08x}" != metadata[CRC32C_KEY]:
            return Written(size, f"crc32c:{held:08x}")
        return Written(size, metadata[CRC32_KEY])

    def _rewrite(self, src: str, dst: str) -> dict[str, Any]:
        """Rewrites `src` to `dst` on the server (in rounds, for large objects), returning
        the copy's object resource."""
        return sync(self.fs.loop, self._rewrite_async, src, dst)

    async def _rewrite_async(self, src: str, dst: str) -> dict[str, Any]:
        src_bucket, src_key, _ = self.fs.split_path(src)
        dst_bucket, dst_key, _ = self.fs.split_path(dst)
        token = None
        while True:
            out = await self.fs._call(
                "POST", "b/{}/o/{}/rewriteTo/b/{}/o/{}", src_bucket, src_key, dst_bucket,
                dst_key, headers={"Content-Type": "application/json"}, json_out=True,
                rewriteToken=token)
            if out.get("done") is True:
                self.fs.invalidate_cache(self.fs._parent(dst))
                return out.get("resource") or {}
            token = out["rewriteToken"]


def _metadata(written: Written, crc32c: int) -> dict[str, str]:
    return {CRC32_KEY: written.checksum, CRC32C_KEY: f"{crc32c:08x}"}


def _local_checksums(local_path: Path) -> tuple[Written, int]:
    crc, crc32c, size = 0, 0, 0
    extend = _crc32c().extend
    with open(local_path, "rb") as src:
        while chunk := src.read(CHUNK):
            crc, size = checksum(chunk, crc), size + len(chunk)
            crc32c = extend(crc32c, chunk)
    return Written(size, format_checksum(crc)), crc32c


def _crc32c() -> Any:
    """google-crc32c, installed with gcsfs (imported here: both are an optional extra)."""
    import google_crc32c

    return google_crc32c

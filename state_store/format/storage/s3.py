"""A durable root on S3 (or an S3-compatible endpoint) through s3fs.

Publish is a conditional put (`If-None-Match: *`). Some S3-compatible endpoints accept the
header and ignore it, which would let two attempts both publish a version: before its
first publish (the worker asks when a store opens), each root probes its endpoint once
(create a probe object twice; the second must be refused) and refuses to publish on an
endpoint that ignores the condition.
Duplicate is a server-side copy: no byte of the file passes through this process.
"""

from __future__ import annotations

import base64
import threading
import uuid

from fsspec.asyn import sync

from ...errors import CorruptFileError, UnsupportedStorageError
from .base import Storage, Written, format_checksum
from .conditional import ConditionalPutStorage

_PROBE_DIR = "_pyrocks_probe"
_SINGLE_COPY_LIMIT = 5 << 30  # S3's limit for one CopyObject


class S3Storage(ConditionalPutStorage):
    kind = "s3"

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self._probe_lock = threading.Lock()
        self._condition_checked = False

    def child(self, rel: str) -> S3Storage:
        """A root below this one: same endpoint, so a probe already passed holds for it."""
        child = super().child(rel)
        assert isinstance(child, S3Storage)
        child._condition_checked = self._condition_checked
        return child

    def publish(self, rel: str, data: bytes) -> bool:
        self.verify_publish()
        return super().publish(rel, data)

    def verify_publish(self) -> None:
        """Fails unless the endpoint refuses a second create of the same object."""
        with self._probe_lock:
            if self._condition_checked:
                return
            probe = self.path(f"{_PROBE_DIR}/{uuid.uuid4().hex}")
            self.retry(f"probing {probe}", lambda: self.fs.pipe_file(probe, b"1", mode="create"))
            try:
                self.fs.pipe_file(probe, b"2", mode="create")
                honoured = False
            except FileExistsError:
                honoured = True
            finally:
                self.delete(probe[len(self.root) + 1:])
            if not honoured:
                endpoint = self.options.get("endpoint_url") or "AWS S3"
                raise UnsupportedStorageError(
                    f"the S3 endpoint {endpoint} ignores conditional writes (If-None-Match): a "
                    f"second create of {probe} succeeded. Versions under {self.url} could not be "
                    "published atomically; use an endpoint that honours If-None-Match "
                    "(AWS S3, MinIO, recent Ceph) or a local path.")
            self._condition_checked = True

    def duplicate_verified(self, src_rel: str, dst_rel: str, source: Storage,
                           expected: Written, what: str) -> None:
        """One CopyObject that has S3 compute the copy's CRC32 (the checksum our records
        keep): verified with no byte through this process. Where the endpoint returns no
        checksum, or the copy is too large for one request, the copy is read back."""
        if not self.same_filesystem(source) or expected.size > _SINGLE_COPY_LIMIT:
            return super().duplicate_verified(src_rel, dst_rel, source, expected, what)
        src, dst = source.path(src_rel), self.path(dst_rel)
        result = self.retry(f"copying {src} to {dst}", lambda: self._copy_with_crc32(src, dst))
        crc = result.get("CopyObjectResult", {}).get("ChecksumCRC32")
        if crc is None:
            return super().verify(dst_rel, expected, what)  # the endpoint computed none
        found = format_checksum(int.from_bytes(base64.b64decode(crc), "big"))
        if found != expected.checksum:
            self.delete(dst_rel)
            raise CorruptFileError(f"{what}: file {src} fails its checksum (found {found}, "
                                   f"expected {expected.checksum})")
        return None

    def _copy_with_crc32(self, src: str, dst: str) -> dict:
        src_bucket, _, src_key = src.partition("/")
        dst_bucket, _, dst_key = dst.partition("/")
        return sync(self.fs.loop, self.fs._call_s3, "copy_object", Bucket=dst_bucket,
                    Key=dst_key, CopySource={"Bucket": src_bucket, "Key": src_key},
                    ChecksumAlgorithm="CRC32")

    def _duplicate_native(self, src: str, dst: str, size: int | None = None) -> None:
        """One CopyObject when the size is known to be within its 5 GiB limit; otherwise
        s3fs's copy asks for the size first (and copies in parts beyond the limit)."""
        if size is not None and size <= _SINGLE_COPY_LIMIT:
            def copy() -> None:
                sync(self.fs.loop, self.fs._copy_basic, src, dst)
        else:
            def copy() -> None:
                self.fs.cp_file(src, dst)
        self.retry(f"copying {src} to {dst}", copy)

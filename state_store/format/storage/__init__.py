"""Durable storage: one small interface (`base.Storage`), one file per kind of filesystem.

  local.py        local disks: publish by hard link, uploads and duplicates are hard links
  s3.py           S3 and compatible endpoints: conditional put (checked), server-side copy
  conditional.py  any fsspec filesystem that declares an atomic conditional create

`open_storage` picks the implementation for a URL and refuses any filesystem that cannot
publish atomically, naming it and what is supported.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlparse

import fsspec
from fsspec.implementations.local import LocalFileSystem

from ...errors import UnsupportedStorageError
from .base import Storage, StorageError, Written, checksum, format_checksum
from .conditional import ConditionalPutStorage
from .local import LocalStorage
from .s3 import S3Storage

SUPPORTED = ("local paths (file://), s3:// (AWS S3 or an endpoint honouring If-None-Match), "
             "or an fsspec filesystem declaring atomic_create = True")

__all__ = ["SUPPORTED", "Storage", "StorageError", "Written", "absolute_url", "checksum",
           "format_checksum", "open_storage"]


def absolute_url(url: str) -> str:
    """A location as a user gave it, as every process may open it: a local path made
    absolute (a worker resolves it from another directory), Hadoop's `file:` spelling of a
    local path made plain, any other URL without a trailing slash."""
    if url.startswith("file:"):  # Hadoop's spelling of a local path: file:/x or file:///x
        return os.path.abspath(urlparse(url).path)
    protocol, path = fsspec.core.split_protocol(url)
    if protocol in (None, "local"):
        return os.path.abspath(path)
    return url.rstrip("/")


def open_storage(url: str, options: dict[str, Any] | None = None) -> Storage:
    """The storage of a durable root; refuses filesystems without an atomic publish."""
    options = dict(options or {})
    fs, root = fsspec.core.url_to_fs(url.rstrip("/"), **options)
    if isinstance(fs, LocalFileSystem):
        return LocalStorage(url, fs, root, options)
    if "s3" in _protocols(fs):
        return S3Storage(url, fs, root, options)
    if getattr(fs, "atomic_create", False):
        return ConditionalPutStorage(url, fs, root, options)
    raise UnsupportedStorageError(
        f"cannot keep state at {url}: filesystem {type(fs).__name__} "
        f"({', '.join(_protocols(fs))}) has no atomic put-if-absent, so two attempts of a "
        f"batch could both publish a version. Supported: {SUPPORTED}.")


def _protocols(fs: fsspec.AbstractFileSystem) -> tuple[str, ...]:
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)

"""Durable storage: one small interface (`base.Storage`), one file per kind of filesystem.

  local.py        local disks: publish by hard link, uploads and duplicates are hard links
  s3.py           S3 and compatible endpoints (s3://, s3a://): conditional put, CopyObject
  azure.py        Azure Blob / ADLS Gen2 (abfs://, abfss://, az://): conditional put, Copy Blob
  gcs.py          Google Cloud Storage (gs://, gcs://): ifGenerationMatch=0, rewrite
  conditional.py  publish by conditional create; the endpoint probe the object stores share
  probes.py       which endpoints were probed, so each is probed once per owner
  hadoop.py       Spark's Hadoop filesystem settings as the options of these filesystems

`open_storage` picks the implementation for a URL and refuses any filesystem that cannot
publish atomically, naming it, why, and what is supported.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any
from urllib.parse import urlparse

import fsspec
from fsspec.implementations.local import LocalFileSystem

from ...errors import UnsupportedStorageError
from . import gcs
from .azure import AzureStorage
from .base import Storage, StorageError, Written, checksum, format_checksum
from .conditional import ConditionalPutStorage
from .gcs import GcsStorage
from .local import LocalStorage
from .probes import ConditionProbes
from .s3 import S3Storage

SUPPORTED = ("local paths (file://), s3:// and s3a:// (AWS S3 or an endpoint honouring "
             "If-None-Match), abfs://, abfss://, az:// (Azure Blob Storage, ADLS Gen2), "
             "gs://, gcs:// (Google Cloud Storage), or an fsspec filesystem declaring "
             "atomic_create = True")

# protocol -> (implementation, the package it needs, the extra of ours that installs it)
_OBJECT_STORES: dict[str, tuple[type[Storage], str, str]] = {
    **dict.fromkeys(("s3", "s3a"), (S3Storage, "s3fs", "")),
    **dict.fromkeys(("abfs", "abfss", "az"), (AzureStorage, "adlfs", "azure")),
    **dict.fromkeys(("gs", "gcs"), (GcsStorage, "gcsfs", "gcs")),
}

HDFS_REFUSAL = (
    "HDFS cannot hold this state store's versions: a version is published by an atomic "
    "create-if-absent, which HDFS's own Java client has but the Python clients do not "
    "(pyarrow's HadoopFileSystem and fsspec's webhdfs always overwrite), so two attempts of "
    "a batch could both publish it. Keep the checkpoint on HDFS if you like and set "
    "spark.sql.streaming.stateStore.pyrocks.rootUrl to a local path shared by the "
    "executors, S3, Azure or GCS; or keep this query on Spark's own providers.")

__all__ = ["SUPPORTED", "ConditionProbes", "Storage", "StorageError", "Written",
           "absolute_url", "checksum", "format_checksum", "open_storage", "storage_kind"]


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


def storage_kind(url: str) -> str:
    """The kind of storage `url` opens (`Storage.kind`): one per service, whatever the
    scheme's spelling (s3 and s3a, abfss and az, gs and gcs); a protocol's own name for
    other fsspec filesystems."""
    protocol = fsspec.core.split_protocol(url)[0] or "file"
    if protocol in _OBJECT_STORES:
        return _OBJECT_STORES[protocol][0].kind
    return LocalStorage.kind if protocol in ("file", "local") else protocol


def open_storage(url: str, options: dict[str, Any] | None = None,
                 probes: ConditionProbes | None = None) -> Storage:
    """The storage of a durable root; refuses filesystems without an atomic publish.
    `probes` remembers which endpoints honour a conditional create (one per process that
    opens many roots: see `probes.py`)."""
    options = dict(options or {})
    protocol = fsspec.core.split_protocol(url)[0] or "file"
    if protocol in ("hdfs", "viewfs", "webhdfs", "swebhdfs"):
        raise UnsupportedStorageError(f"cannot keep state at {url}: {HDFS_REFUSAL}")
    if protocol in _OBJECT_STORES:
        implementation, package, extra = _OBJECT_STORES[protocol]
        if importlib.util.find_spec(package) is None:
            raise UnsupportedStorageError(
                f"cannot keep state at {url}: {protocol}:// needs the Python package "
                f"{package}, not installed where this runs; install "
                f"pyrocks-state-store[{extra}] (or {package}) on the driver and executors.")
        fs, root = _filesystem(protocol, url, options)
        return implementation(url, fs, root, options, probes)
    fs, root = fsspec.core.url_to_fs(url.rstrip("/"), **options)
    if isinstance(fs, LocalFileSystem):
        return LocalStorage(url, fs, root, options, probes)
    if getattr(fs, "atomic_create", False):
        return ConditionalPutStorage(url, fs, root, options, probes)
    raise UnsupportedStorageError(
        f"cannot keep state at {url}: filesystem {type(fs).__name__} "
        f"({', '.join(_protocols(fs))}) has no atomic put-if-absent, so two attempts of a "
        f"batch could both publish a version. Supported: {SUPPORTED}.")


def _filesystem(protocol: str, url: str, options: dict[str, Any]) -> tuple[Any, str]:
    if protocol in ("gs", "gcs"):
        fs = gcs.filesystem(options)
        return fs, fs._strip_protocol(url.rstrip("/"))
    return fsspec.core.url_to_fs(url.rstrip("/"), **options)


def _protocols(fs: fsspec.AbstractFileSystem) -> tuple[str, ...]:
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)

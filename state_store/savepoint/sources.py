"""What a savepoint or a restore reads from: a Spark checkpoint or a savepoint.

Both give the same view (`Source`): the query id and batch, the Spark files that batch
needs (relative paths, the same in the source and in what is written from it), and the
root of every store at the batch's version (what Spark needs to resume after a batch:
format/spark_checkpoint.py). Nothing here writes.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import VersionNotFoundError
from ..format.restores import ClaimMarker, read_claim
from ..format.seeding import trusted_roots
from ..format.spark_checkpoint import (
    METADATA,
    STATE,
    SourceError,
    SparkCheckpoint,
    stores_under_root,
)
from ..format.storage import Storage, Written, absolute_url, open_storage
from ..format.store_root import StoreRoot
from .layout import CHECKPOINT_DIR, DESCRIPTOR, NATIVE, STORES_DIR, SavepointDescriptor


@dataclass(frozen=True)
class Source:
    url: str  # absolute, as workers will open it
    storage: Storage  # where the claim marker goes
    kind: str  # "checkpoint" or "savepoint"
    query_id: str
    batch: int
    spark_root: Storage  # Spark's files, at the same relative paths as in a checkpoint
    spark_files: list[str]
    stores: dict[str, Storage]  # store key -> store root holding version batch + 1
    # What each Spark file must read back as (a savepoint records it; a checkpoint does not).
    spark_written: dict[str, Written]
    trusted: dict[str, frozenset[str]]  # store key -> roots its records may name

    @property
    def version(self) -> int:
        return self.batch + 1

    def claim(self) -> ClaimMarker | None:
        return read_claim(self.storage)

    def checkpoint_of(self, key: str) -> StoreRoot:
        return StoreRoot(self.stores[key], f"store {key} of {self.url}",
                          trusted_roots=self.trusted.get(key, frozenset()))

    def read_spark_file(self, rel: str) -> bytes:
        """A Spark file of the batch, checked against the savepoint's record of it."""
        what = f"Spark file {rel} of {self.url}"
        written = self.spark_written.get(rel)
        if written is None:
            return self.spark_root.read(rel, what)
        return self.spark_root.read_verified(rel, written, what)


def open_source(url: str, batch: int | None, storage_options: dict | None = None,
                root_url: str | None = None, root_options: dict | None = None) -> Source:
    """A savepoint (it has a descriptor) or a checkpoint (it has Spark's metadata)."""
    url = absolute_url(url)
    storage = open_storage(url, storage_options)
    descriptor = storage.read_if_exists(DESCRIPTOR)
    if descriptor is not None:
        return _savepoint_source(url, storage, descriptor, batch)
    if storage.read_if_exists(METADATA) is not None:
        return _checkpoint_source(url, storage, batch, root_url, root_options)
    if storage.list_dirs(CHECKPOINT_DIR) or storage.list_dirs(STORES_DIR):
        raise SourceError(f"{url} is an incomplete savepoint (no {DESCRIPTOR}): it was "
                          "interrupted while being written and cannot be used; take it again")
    raise SourceError(f"{url} is neither a savepoint (no {DESCRIPTOR}) nor a Spark checkpoint "
                      f"(no {METADATA})")


def _savepoint_source(url: str, storage: Storage, data: bytes, batch: int | None) -> Source:
    descriptor = SavepointDescriptor.from_json(data, f"{url}/{DESCRIPTOR}")
    if descriptor.format != NATIVE:
        raise SourceError(f"{url} is a {descriptor.format} savepoint: restore it (state-store "
                          "restore), or copy its directory to move it")
    if batch is not None and batch != descriptor.batch:
        raise SourceError(f"savepoint {url} holds batch {descriptor.batch}, not batch {batch}")
    spark_root = storage.child(CHECKPOINT_DIR)
    prefix = f"{CHECKPOINT_DIR}/"
    written = {f.path[len(prefix):]: f.written for f in descriptor.files
               if f.path.startswith(prefix)}
    stores = {key: storage.child(f"{STORES_DIR}/{key}") for key in descriptor.stores}
    return Source(url, storage, "savepoint", descriptor.source_query_id, descriptor.batch,
                  spark_root, list(written), stores, written, {})


def _checkpoint_source(url: str, storage: Storage, batch: int | None, root_url: str | None,
                       root_options: dict | None) -> Source:
    spark = SparkCheckpoint(storage)
    query_id = spark.query_id()
    batch = spark.committed_batch(batch)
    stores = spark.walk_state(query_id)
    if root_url:
        stores = stores_under_root(open_storage(root_url, root_options), query_id)
    if not stores:
        raise SourceError(f"checkpoint {url} holds no state of this provider for query "
                          f"{query_id}" + ("" if root_url else
                                           " (if the query set rootUrl, pass it as root_url)"))
    spark.refuse_missing_stores(stores, batch)
    trusted = {key: trusted_roots(storage.child(f"{STATE}/{key}"), query_id) for key in stores}
    for key, root in stores.items():
        if batch + 1 not in StoreRoot(root, key).versions():
            raise VersionNotFoundError(
                f"store {key} of checkpoint {url} no longer retains version {batch + 1} "
                f"(batch {batch}); choose a later batch")
    files = [METADATA, *spark.batch_logs(batch), *spark.spark_state_metadata()]
    return Source(url, storage, "checkpoint", query_id, batch, storage, files, stores, {},
                  trusted)

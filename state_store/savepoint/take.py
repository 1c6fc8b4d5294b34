"""Taking a savepoint: a self-contained, relocatable copy of one committed batch.

Order (what a crash at any point leaves): Spark's files, then each store's files and
records, then the descriptor, published put-if-absent. Without the descriptor the
directory is an incomplete savepoint that nothing will use; the source is only ever read,
so taking a savepoint never adds or changes a batch of the source query, and never waits
for one: a running query keeps committing while its latest committed batch is copied.
State files are duplicated (hard links, server-side copies): no state byte passes through
this process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import StateStoreError
from ..format.manifest import FileRef, file_path, snapshot_path
from ..format.seeding import copy_version
from ..format.storage import Storage, checksum, format_checksum, open_storage
from ..format.store_root import StoreRoot
from ..tools.progress import Progress
from .layout import (
    CANONICAL,
    CHECKPOINT_DIR,
    DESCRIPTOR,
    FORMATS,
    NATIVE,
    STORES_DIR,
    SavedFile,
    SavepointDescriptor,
    SavepointInfo,
)
from .sources import absolute_url, open_source


class SavepointError(StateStoreError):
    """A savepoint could not be written; the source is untouched."""


def savepoint(checkpoint: str, target: str, batch: int | None = None, *,
              storage_options: dict | None = None, target_options: dict | None = None,
              root_url: str | None = None, root_options: dict | None = None,
              quiet: bool = True, format: str = NATIVE, spark: Any = None) -> SavepointInfo:
    """Writes a savepoint of `checkpoint` (a checkpoint or a savepoint) at committed
    `batch` (default: the latest) to `target`, which must not exist or be empty.

    `format="native"` copies this provider's files (fast, no Spark needed);
    `format="canonical"` writes every store's rows as typed Parquet, of a checkpoint of any
    provider, in a Spark job (`spark`, else the active session, else a local one).
    `storage_options` are fsspec options for the source, `target_options` for the target
    (default: the source's); `root_url`/`root_options` locate the state of a query that
    kept it under a rootUrl. `quiet=False` draws a progress bar on a terminal.
    """
    if format not in FORMATS:
        raise SavepointError(f"unknown savepoint format {format!r}; choose one of "
                             f"{', '.join(FORMATS)}")
    if format == CANONICAL:
        from ..spark import offline_session
        from .canonical import canonical_savepoint

        return canonical_savepoint(offline_session(spark), checkpoint, target, batch,
                                   storage_options=storage_options,
                                   target_options=target_options)
    source = open_source(checkpoint, batch, storage_options, root_url, root_options)
    target = absolute_url(target)
    out = open_storage(target, target_options if target_options is not None
                       else storage_options)
    require_empty(out)
    out.verify_publish()
    # One reader per store: the records read to size the copy serve the copy itself.
    stores = {key: source.checkpoint_of(key) for key in source.stores}
    plans = {key: store.plan_load(source.version) for key, store in stores.items()}
    state_files = sum(len(p.snapshot.files if p.snapshot else []) + max(len(p.changelogs), 1)
                      for p in plans.values())
    state_bytes = sum(f.size for p in plans.values() for f in p.files)
    progress = Progress.for_terminal(f"savepoint {target}", state_bytes,
                                     state_files + len(source.spark_files), quiet)
    files = copy_spark_files(source.read_spark_file, source.spark_files, out, progress)
    for key in sorted(stores):
        files += _copy_store(stores[key], source.version, key, out, progress)
    progress.close()
    from ..spark import PROVIDER_CLASS  # here: spark.py loads pyspark, workers import us

    descriptor = SavepointDescriptor(
        source_query_id=source.query_id, source=source.url, batch=source.batch,
        operators=sorted({int(k.split("/")[0]) for k in source.stores}),
        partitions=_partitions(source.stores), stores=sorted(source.stores),
        provider=PROVIDER_CLASS, files=files)
    return publish_descriptor(out, descriptor)


def publish_descriptor(out: Storage, descriptor: SavepointDescriptor) -> SavepointInfo:
    """Makes the savepoint usable: its descriptor, put-if-absent, last of all."""
    if not out.publish(DESCRIPTOR, descriptor.to_json()):
        raise SavepointError(f"{out.url} received another savepoint at the same time; "
                             "this one was not published")
    return SavepointInfo.of(out.url, descriptor)


def require_empty(out: Storage) -> None:
    if out.read_if_exists(DESCRIPTOR) is not None:
        raise SavepointError(f"{out.url} already holds a savepoint; savepoints are never "
                             "overwritten: choose another target")
    if out.list_names("") or out.list_dirs(""):
        raise SavepointError(f"{out.url} is not empty; a savepoint needs a new directory")


def copy_spark_files(read: Callable[[str], bytes], spark_files: list[str], out: Storage,
                     progress: Progress | None = None) -> list[SavedFile]:
    """Copies Spark's files of the batch (`read` gives each one's bytes, verified where
    the source recorded them) into the savepoint's checkpoint/ directory."""
    saved = []
    for rel in spark_files:
        data = read(rel)
        path = f"{CHECKPOINT_DIR}/{rel}"
        written = out.write_new(path, data)
        saved.append(SavedFile(path, written.size, written.checksum))
        if progress is not None:
            progress.advance(written.size)
    return saved


def _copy_store(store: StoreRoot, version: int, key: str, out: Storage,
                progress: Progress) -> list[SavedFile]:
    prefix = f"{STORES_DIR}/{key}"
    target = StoreRoot(out.child(prefix), f"store {key} of savepoint {out.url}")
    placed: list[FileRef] = []

    def on_file(ref: FileRef) -> None:
        placed.append(ref)
        progress.advance(ref.size)

    manifest = copy_version(store, version, target, claim=False, on_file=on_file,
                            verify=False)
    saved = [SavedFile(f"{prefix}/{file_path(f.name)}", f.size, f.checksum) for f in placed]
    records = [manifest.path]
    if manifest.snapshot_version is not None:
        records.append(snapshot_path(manifest.snapshot_version, manifest.base_lineage))
    for rel in records:
        data = target.storage.read(rel, f"record {rel} of store {key}")
        saved.append(SavedFile(f"{prefix}/{rel}", len(data), format_checksum(checksum(data))))
    return saved


def _partitions(stores: dict[str, Storage]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for key in stores:
        op, part = key.split("/")[:2]
        counts[op] = max(counts.get(op, 0), int(part) + 1)
    return counts

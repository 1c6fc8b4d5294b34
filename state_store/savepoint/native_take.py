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

from ..driver.classes import PROVIDER_CLASS
from ..format.lineage import LoadPlan
from ..format.manifest import FileRef, file_path, snapshot_path
from ..format.seeding import copy_version
from ..format.storage import Storage, checksum, format_checksum
from ..format.store_root import StoreRoot
from ..tools.progress import Progress
from .layout import STORES_DIR, SavedFile, SavepointDescriptor, SavepointInfo
from .sources import open_source
from .target import copy_spark_files, open_savepoint_target, publish_descriptor


def take_native(checkpoint: str, target: str, batch: int | None = None, *,
                storage_options: dict | None = None, target_options: dict | None = None,
                root_url: str | None = None, root_options: dict | None = None,
                quiet: bool = True) -> SavepointInfo:
    """A native savepoint of `checkpoint` (see api.savepoint)."""
    source = open_source(checkpoint, batch, storage_options, root_url, root_options)
    out = open_savepoint_target(target, target_options if target_options is not None
                                else storage_options)
    # One reader per store: the records read to size the copy serve the copy itself.
    stores = {key: source.checkpoint_of(key) for key in source.stores}
    plans = {key: store.plan_load(source.version) for key, store in stores.items()}
    state_files = sum(len(p.copied_files) for p in plans.values())
    state_bytes = sum(f.size for p in plans.values() for f in p.copied_files)
    progress = Progress.for_terminal(f"savepoint {out.url}", state_bytes,
                                     state_files + len(source.spark_files), quiet)
    files = copy_spark_files(source.read_spark_file, source.spark_files, out, progress)
    for key in sorted(stores):
        files += _copy_store(stores[key], plans[key], key, out, progress)
    progress.close()
    descriptor = SavepointDescriptor(
        source_query_id=source.query_id, source=source.url, batch=source.batch,
        operators=sorted({int(k.split("/")[0]) for k in source.stores}),
        partitions=_partitions(source.stores), stores=sorted(source.stores),
        provider=PROVIDER_CLASS, files=files)
    return publish_descriptor(out, descriptor)


def _copy_store(store: StoreRoot, plan: LoadPlan, key: str, out: Storage,
                progress: Progress) -> list[SavedFile]:
    prefix = f"{STORES_DIR}/{key}"
    target = StoreRoot(out.child(prefix), f"store {key} of savepoint {out.url}")
    placed: list[FileRef] = []

    def on_file(ref: FileRef) -> None:
        placed.append(ref)
        progress.advance(ref.size)

    manifest = copy_version(store, plan, target, claim=False, on_file=on_file, verify=False)
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

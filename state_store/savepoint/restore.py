"""Restoring a query from a savepoint or from another query's checkpoint (FLIP-193).

The new checkpoint gets Spark's files of batch N, its stores (or what will make them) and a
NEW query id: a copy that kept the source's id would stop the source's run on the same
cluster, or make a sink keyed by query id and batch (Delta) skip its batches. Every file
read from a savepoint is verified against its descriptor, and every copied state file
against its manifest, before the new checkpoint becomes usable.

  no-claim  the source is only read. Each store's version is copied now (duplicate(): hard
            links, server-side copies, verified) into the new checkpoint, so the new query
            references nothing of the source from the moment the restore returns: the source
            may be deleted, claimed or collected then (`depends_on` is []).
  claim     the new query owns the source's files: each store's first open references them
            (seeding.py) and its GC deletes them once no retained version needs them. A claim
            marker in the source (put-if-absent) refuses a second claim, any restore of a
            claimed source, and keeps the source's own query from running or collecting
            garbage again.

Order (what a crash at any point leaves): the restore record, Spark's files, the stores'
copies and seeds, the claim marker, and last the new `metadata`. Until `metadata` exists the
new checkpoint is incomplete: a rerun of the same restore resumes it (same query id); a
query started on it finds no state for its id and fails with an error naming the missing
version. Before the claim marker nothing of the source is touched.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from ..errors import StateStoreError
from ..format.manifest import file_path
from ..format.seeding import CLAIM, MODES, NO_CLAIM, Seed, claimed_roots, copy_version, staged_path
from ..format.storage import Storage, open_storage
from ..format.store_root import StoreRoot, query_dir
from .layout import (
    CANONICAL,
    CLAIM_MARKER,
    DESCRIPTOR,
    RESTORE_RECORD,
    ClaimMarker,
    RestoreInfo,
    RestoreRecord,
    SavepointDescriptor,
)
from .sources import METADATA, STATE, Source, absolute_url, open_source, store_location_key


class RestoreError(StateStoreError):
    """A restore was refused or could not complete; the error says whether to rerun it."""


def restore(source: str, new_checkpoint: str, mode: str = NO_CLAIM, batch: int | None = None,
            *, storage_options: dict | None = None, target_options: dict | None = None,
            root_url: str | None = None, root_options: dict | None = None,
            target_root_url: str | None = None, target_root_options: dict | None = None,
            partitions: int | None = None, provider: str = "pyrocks",
            spark: Any = None) -> RestoreInfo:
    """Makes `new_checkpoint` a checkpoint that resumes `source` after its batch `batch`
    (a savepoint's batch, or a committed batch of a checkpoint; default: the latest).

    `root_url`/`root_options` locate the source's state if its query kept it under a
    rootUrl; `target_root_url`/`target_root_options` name the rootUrl the restored query
    will run with, so that a no-claim restore copies each store on that filesystem (e.g.
    server-side on S3) rather than into the checkpoint.

    A canonical savepoint is written into stores by a Spark job (`spark`, else the active
    session, else a local one): onto `provider` "pyrocks" (this store) or "rocksdb"
    (Spark's RocksDB provider), with `partitions` to change the partition count; see
    canonical_restore.py for the new batch N + 1 it adds.
    """
    if mode not in MODES:
        raise RestoreError(f"unknown restore mode {mode!r}; choose one of {', '.join(MODES)}")
    canonical = canonical_descriptor(source, storage_options)
    if canonical is not None:
        if mode != NO_CLAIM or batch not in (None, canonical[1].batch):
            raise RestoreError(f"{source} is a canonical savepoint of batch "
                               f"{canonical[1].batch}: it restores only that batch, and only "
                               "no-claim (its rows are copied into the new stores)")
        from ..spark import offline_session
        from .canonical_restore import restore_canonical

        return restore_canonical(offline_session(spark), *canonical, new_checkpoint,
                                 partitions, provider, target_options)
    if partitions is not None or provider != "pyrocks":
        raise RestoreError("changing the partition count or the provider needs a canonical "
                           f"savepoint: take one of {source} with format='canonical' "
                           "(state-store savepoint --format canonical), then restore it")
    src = open_source(source, batch, storage_options, root_url, root_options)
    target = absolute_url(new_checkpoint)
    out = open_storage(target, target_options if target_options is not None
                       else storage_options)
    earlier = _interrupted(out, src, mode)
    _refuse_claimed(src, earlier.query_id if earlier else None, "")
    # Read (and, from a savepoint, verified) before anything is written.
    spark_files = {rel: src.read_spark_file(rel) for rel in src.spark_files if rel != METADATA}
    record = earlier or _start(out, src, mode)
    for rel, data in spark_files.items():
        put(out, rel, data)
    staging = None if target_root_url is None else open_storage(
        absolute_url(target_root_url), target_root_options)
    for key in sorted(src.stores):
        seed = _restore_store(src, key, out, record, staging)
        put(out, store_location_key(key), seed.to_json())
    if mode == CLAIM:
        marker = ClaimMarker(record.query_id, target, src.batch)
        src.storage.publish(CLAIM_MARKER, marker.to_json())
        # A concurrent claim may have won the marker.
        _refuse_claimed(src, record.query_id, f" ({target} is left incomplete: delete it.)")
    put(out, METADATA, json.dumps({"id": record.query_id}).encode() + b"\n")
    return RestoreInfo(target, record.query_id, src.url, src.batch, mode, len(src.stores))


def _restore_store(src: Source, key: str, out: Storage, record: RestoreRecord,
                   staging: Storage | None) -> Seed:
    """What a store of the restored query starts from: under no-claim, its version copied
    now into its root in the new checkpoint (or staged under the restored query's rootUrl,
    seeding.staged_path); under claim, the roots it will reference, whose files are
    verified now."""
    store = src.checkpoint_of(key)
    if record.mode == NO_CLAIM:
        if staging is None:
            root = out.child(f"{STATE}/{key}/{query_dir(record.query_id)}")
        else:
            op, part, *name = key.split("/")
            root = staging.child(staged_path(record.query_id,
                                             f"{op}/{part}/{name[0] if name else 'default'}"))
        target = StoreRoot(root, f"store {key} of {out.url}")
        if not target.versions():  # a rerun finds the stores it copied already
            copy_version(store, src.version, target, claim=False)
        return Seed(record.query_id, src.url, src.version, NO_CLAIM)
    plan = store.plan_load(src.version)
    for ref in plan.files:
        store.storage_of(ref).verify(file_path(ref.name), ref.written,
                                     f"store {key} of {src.url}")
    return Seed(record.query_id, src.url, src.version, CLAIM, source_root=src.stores[key].url,
                roots=claimed_roots(store, src.version))


def canonical_descriptor(source: str, storage_options: dict | None
                         ) -> tuple[Storage, SavepointDescriptor] | None:
    """The savepoint directory and descriptor of `source` if it is a canonical savepoint."""
    storage = open_storage(absolute_url(source), storage_options)
    data = storage.read_if_exists(DESCRIPTOR)
    if data is None:
        return None
    descriptor = SavepointDescriptor.from_json(data, f"{storage.url}/{DESCRIPTOR}")
    return (storage, descriptor) if descriptor.format == CANONICAL else None


def _interrupted(out: Storage, src: Source, mode: str) -> RestoreRecord | None:
    """The record of an interrupted restore of the same source, batch and mode into `out`
    (this run completes it), or None for an empty directory; refuses anything else."""
    if out.read_if_exists(METADATA) is not None:
        raise RestoreError(f"{out.url} is already a checkpoint (it has {METADATA}); restore "
                           "into a new directory")
    data = out.read_if_exists(RESTORE_RECORD)
    if data is None:
        if out.list_names("") or out.list_dirs(""):
            raise RestoreError(f"{out.url} is not empty; restore into a new directory")
        return None
    earlier = RestoreRecord.from_json(data, f"{out.url}/{RESTORE_RECORD}")
    if (earlier.source, earlier.batch, earlier.mode) != (src.url, src.batch, mode):
        raise RestoreError(
            f"{out.url} holds an interrupted restore of {earlier.source} batch "
            f"{earlier.batch} ({earlier.mode}); rerun that restore, or delete {out.url}")
    return earlier


def _start(out: Storage, src: Source, mode: str) -> RestoreRecord:
    record = RestoreRecord(str(uuid.uuid4()), src.url, src.batch, mode)
    if not out.publish(RESTORE_RECORD, record.to_json()):
        raise RestoreError(f"another restore into {out.url} started at the same time")
    return record


def _refuse_claimed(src: Source, query_id: str | None, leftover: str) -> None:
    """Refuses a source claimed by a query other than `query_id` (this restore's)."""
    marker = src.claim()
    if marker is not None and marker.query_id != query_id:
        raise RestoreError(
            f"{src.url} was claimed by query {marker.query_id} (restored into "
            f"{marker.checkpoint} at batch {marker.batch}, {marker.claimed_at}): its files "
            "belong to that query, whose GC deletes them. Restore from a savepoint of that "
            f"query instead.{leftover}")


def put(out: Storage, rel: str, data: bytes) -> None:
    """Writes a file of the new checkpoint; a rerun finds its earlier copy in place."""
    existing = out.read_if_exists(rel)
    if existing == data:
        return
    if existing is not None:
        raise RestoreError(f"{out.url}/{rel} exists with other content; delete {out.url} and "
                           "restore again")
    out.write_new(rel, data)

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

from ..format.manifest import file_path
from ..format.restores import (
    CLAIM_MARKER,
    ClaimMarker,
    RestoreRecord,
    claimed_by_other,
    describe_claim,
)
from ..format.seeding import (
    CLAIM,
    NO_CLAIM,
    SEED_FILE,
    Seed,
    claimed_roots,
    copy_version,
    staged_path,
)
from ..format.spark_checkpoint import METADATA, STATE, store_location
from ..format.storage import Storage, absolute_url, open_storage
from ..format.store_root import StoreRoot, query_dir
from .layout import RestoreInfo
from .sources import Source, open_source
from .target import RestoreError, interrupted_restore, put, start_restore


def restore_native(source: str, new_checkpoint: str, mode: str, batch: int | None, *,
                   storage_options: dict | None = None, target_options: dict | None = None,
                   root_url: str | None = None, root_options: dict | None = None,
                   target_root_url: str | None = None,
                   target_root_options: dict | None = None) -> RestoreInfo:
    """A restore from a native savepoint or a checkpoint (see api.restore)."""
    src = open_source(source, batch, storage_options, root_url, root_options)
    target = absolute_url(new_checkpoint)
    out = open_storage(target, target_options if target_options is not None
                       else storage_options)
    earlier = interrupted_restore(out, src.url, src.batch, mode, written_last=METADATA)
    claim = claimed_by_other(src.storage, earlier.query_id if earlier else None)
    if claim is not None:  # by another query (this restore's own, interrupted, may go on)
        raise RestoreError(f"{describe_claim(src.url, claim)}. Restore from a savepoint of "
                           "that query instead.")
    # Read (and, from a savepoint, verified) before anything is written.
    spark_files = {rel: src.read_spark_file(rel) for rel in src.spark_files if rel != METADATA}
    record = earlier or start_restore(out, src.url, src.batch, mode)
    for rel, data in spark_files.items():
        put(out, rel, data)
    staging = None if target_root_url is None else open_storage(
        absolute_url(target_root_url), target_root_options)
    for key in sorted(src.stores):
        seed = _restore_store(src, key, out, record, staging)
        put(out, f"{store_location(key)}/{SEED_FILE}", seed.to_json())
    if mode == CLAIM:
        src.storage.publish(CLAIM_MARKER, ClaimMarker(record.query_id, target,
                                                      src.batch).to_json())
        won = claimed_by_other(src.storage, record.query_id)  # a concurrent claim may have
        if won is not None:
            raise RestoreError(f"{describe_claim(src.url, won)}. ({target} is left "
                               "incomplete: delete it.)")
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
            copy_version(store, store.plan_load(src.version), target, claim=False)
        return Seed(record.query_id, src.url, src.version, NO_CLAIM)
    plan = store.plan_load(src.version)
    for ref in plan.copied_files:
        store.storage_of(ref).verify(file_path(ref.name), ref.written,
                                     f"store {key} of {src.url}")
    return Seed(record.query_id, src.url, src.version, CLAIM, source_root=src.stores[key].url,
                roots=claimed_roots(store, plan))

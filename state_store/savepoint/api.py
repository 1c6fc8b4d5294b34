"""The public entry points (contract): `savepoint` and `restore`, each choosing the native
or the canonical way (native_take.py / canonical_take.py, native_restore.py /
canonical_restore.py)."""

from __future__ import annotations

from typing import Any

from ..format.seeding import MODES, NO_CLAIM
from ..format.storage import Storage, absolute_url, open_storage
from .layout import (
    CANONICAL,
    DESCRIPTOR,
    FORMATS,
    NATIVE,
    RestoreInfo,
    SavepointDescriptor,
    SavepointInfo,
)
from .native_take import take_native
from .target import RestoreError, SavepointError


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
    if format == NATIVE:
        return take_native(checkpoint, target, batch, storage_options=storage_options,
                           target_options=target_options, root_url=root_url,
                           root_options=root_options, quiet=quiet)
    from ..spark import offline_session  # Spark only for what needs it
    from .canonical_take import canonical_savepoint

    return canonical_savepoint(offline_session(spark), checkpoint, target, batch,
                               storage_options=storage_options, target_options=target_options)


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
    canonical = _canonical_descriptor(source, storage_options)
    if canonical is None:
        if partitions is not None or provider != "pyrocks":
            raise RestoreError("changing the partition count or the provider needs a "
                               f"canonical savepoint: take one of {source} with "
                               "format='canonical' (state-store savepoint --format "
                               "canonical), then restore it")
        from .native_restore import restore_native

        return restore_native(source, new_checkpoint, mode, batch,
                              storage_options=storage_options, target_options=target_options,
                              root_url=root_url, root_options=root_options,
                              target_root_url=target_root_url,
                              target_root_options=target_root_options)
    if mode != NO_CLAIM or batch not in (None, canonical[1].batch):
        raise RestoreError(f"{source} is a canonical savepoint of batch {canonical[1].batch}: "
                           "it restores only that batch, and only no-claim (its rows are "
                           "copied into the new stores)")
    from ..spark import offline_session
    from .canonical_restore import restore_canonical

    return restore_canonical(offline_session(spark), *canonical, new_checkpoint, partitions,
                             provider, target_options)


def _canonical_descriptor(source: str, storage_options: dict | None
                          ) -> tuple[Storage, SavepointDescriptor] | None:
    """The savepoint directory and descriptor of `source` if it is a canonical savepoint."""
    storage = open_storage(absolute_url(source), storage_options)
    data = storage.read_if_exists(DESCRIPTOR)
    if data is None:
        return None
    descriptor = SavepointDescriptor.from_json(data, f"{storage.url}/{DESCRIPTOR}")
    return (storage, descriptor) if descriptor.format == CANONICAL else None

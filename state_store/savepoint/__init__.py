"""Savepoints and restores (contract): FLIP-193's ownership model for Spark queries.

    from state_store.savepoint import savepoint, restore, stop_with_savepoint
    info = savepoint("/ckpt/orders", "s3://bucket/sp/orders-2026-11-23")
    restore(info.path, "/ckpt/orders-v2")              # no-claim (default)
    restore("/ckpt/orders", "/ckpt/orders-v2", mode="claim")

    savepoint("/ckpt/orders", "/sp/orders", format="canonical")   # any provider, as Parquet
    restore("/sp/orders", "/ckpt/orders-8", partitions=8)          # rescaled, onto this store

  layout.py             the savepoint directory and the records of savepoints, claims, restores
  sources.py            reading a Spark checkpoint or a savepoint as the source of either
  take.py               taking a savepoint (native; dispatches canonical)
  restore.py            restoring, with CLAIM / NO_CLAIM (native; dispatches canonical)
  canonical.py          taking a canonical savepoint through Spark's state data source
  canonical_restore.py  restoring one: the new batch N + 1, stores written through a provider
  routing.py            which key columns Spark partitions each operator's state by
  stop.py               stop-with-savepoint
  verify.py             checking a savepoint, and what a restored checkpoint still depends on
"""

from .layout import RestoreInfo, SavepointDescriptor, SavepointInfo
from .restore import RestoreError, restore
from .sources import SourceError
from .stop import StopWithSavepointError, stop_with_savepoint
from .take import SavepointError, savepoint

__all__ = ["RestoreError", "RestoreInfo", "SavepointDescriptor", "SavepointError",
           "SavepointInfo", "SourceError", "StopWithSavepointError", "restore", "savepoint",
           "stop_with_savepoint"]

"""Savepoints and restores (contract): FLIP-193's ownership model for Spark queries.

    from state_store.savepoint import savepoint, restore, stop_with_savepoint
    info = savepoint("/ckpt/orders", "s3://bucket/sp/orders-2026-11-23")
    restore(info.path, "/ckpt/orders-v2")              # no-claim (default)
    restore("/ckpt/orders", "/ckpt/orders-v2", mode="claim")

    savepoint("/ckpt/orders", "/sp/orders", format="canonical")   # any provider, as Parquet
    restore("/sp/orders", "/ckpt/orders-8", partitions=8)          # rescaled, onto this store

  api.py                `savepoint` and `restore`: native or canonical
  layout.py             the savepoint directory and its records (descriptor, SavepointInfo)
  sources.py            reading a Spark checkpoint or a savepoint as the source of either
  target.py             writing a new savepoint directory or a new checkpoint
  native_take.py        taking a native savepoint
  native_restore.py     restoring a native savepoint or a checkpoint, CLAIM or NO_CLAIM
  canonical_take.py     taking a canonical savepoint through Spark's state data source
  canonical_restore.py  restoring one: the new batch N + 1, stores written through a provider
  routing.py            which key columns Spark partitions each operator's state by
  stop.py               stop-with-savepoint of a query of this process
  stop_request.py       stop-with-savepoint of a query running elsewhere (`state-store stop`)
  dispose.py            deleting a savepoint no query owns or needs
  verify.py             checking a savepoint's every file

The records a restore leaves in checkpoints (restore record, claim marker) are the durable
format's (format/restores.py); so is Spark's own layout (format/spark_checkpoint.py).
"""

from ..format.spark_checkpoint import SourceError
from .api import restore, savepoint
from .dispose import DisposeInfo, dispose_savepoint
from .layout import RestoreInfo, SavepointDescriptor, SavepointInfo
from .stop import StopWithSavepointError, stop_with_savepoint
from .stop_request import StopTimeoutError, stop_with_savepoint_remote
from .target import RestoreError, SavepointError

__all__ = ["DisposeInfo", "RestoreError", "RestoreInfo", "SavepointDescriptor",
           "SavepointError", "SavepointInfo", "SourceError", "StopTimeoutError",
           "StopWithSavepointError", "dispose_savepoint", "restore", "savepoint",
           "stop_with_savepoint", "stop_with_savepoint_remote"]

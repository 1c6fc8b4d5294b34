"""Stop-with-savepoint: stop a running query at a batch boundary, finish its providers at
once, and savepoint its last committed batch.

Spark has no graceful stop: `StreamingQuery.stop()` interrupts a batch in progress (which a
restart redoes from its offsets). So we stop when no trigger is active; a batch that starts
in between is interrupted and simply not part of the savepoint, which holds the last
*committed* batch whatever happens. `drain=True` first processes everything available at
the call (`processAllAvailable`), as `Trigger.AvailableNow` would. Neither can flush open
event-time windows: Spark has no end-of-time watermark, so windows still waiting for the
watermark stay open in the savepoint and close after the restore as input arrives.
"""

from __future__ import annotations

import time
from typing import Any

from ..errors import StateStoreError
from .api import savepoint
from .layout import SavepointInfo

_IDLE_POLL_S = 0.05


class StopWithSavepointError(StateStoreError):
    """The query was stopped but its savepoint failed; the checkpoint is intact."""


def stop_with_savepoint(query: Any, target: str, drain: bool = False, *,
                        idle_timeout_s: float = 60.0, **savepoint_options: Any) -> SavepointInfo:
    """Stops `query` (a running `pyspark.sql.streaming.StreamingQuery`) and writes a
    savepoint of its last committed batch to `target` (see `savepoint` for options)."""
    jquery = getattr(query, "_jsq", None)
    if jquery is None:
        raise StateStoreError("stop_with_savepoint needs a classic PySpark StreamingQuery "
                              "(Spark Connect queries do not expose their checkpoint)")
    checkpoint = str(jquery.streamingQuery().resolvedCheckpointRoot())
    if drain and query.isActive:
        query.processAllAvailable()
    _wait_until_idle(query, idle_timeout_s)
    query.stop()
    finished = _finish_providers(query, checkpoint)
    try:
        return savepoint(checkpoint, target, **savepoint_options)
    except Exception as e:
        raise StopWithSavepointError(
            f"query {query.id} is stopped and its checkpoint {checkpoint} is intact "
            f"({finished} stores finished), but the savepoint to {target} failed: "
            f"{type(e).__name__}: {e}. Retry with: state-store savepoint {checkpoint} "
            "<a new empty target>") from e


def _wait_until_idle(query: Any, timeout_s: float) -> None:
    """Waits (up to `timeout_s`) for a moment when no trigger of `query` runs."""
    deadline = time.monotonic() + timeout_s
    while query.isActive and query.status.get("isTriggerActive") and \
            time.monotonic() < deadline:
        time.sleep(_IDLE_POLL_S)


def _finish_providers(query: Any, checkpoint: str) -> int:
    """Finishes the stopped query's providers now (uploads drained, final snapshots) rather
    than at Spark's next maintenance round; 0 where the shim is not loaded."""
    from pyspark import SparkContext

    jvm = SparkContext._jvm
    assert jvm is not None, "a running query has a live SparkContext"
    provider = jvm.io.pyrocks.statestore.PyRocksStateStoreProvider
    return int(provider.finishQueryEverywhere(query._jsq.sparkSession(), checkpoint))

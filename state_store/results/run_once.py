"""`run_once(spark, run_key, start)` (contract): a run key never runs twice.

Flink's JobResultStore keeps a restarted JobManager from running a finished job again. Here
the unit is a run the user names (a scheduler's run id, a date): a driver restarted by
YARN, Kubernetes or a scheduler calls `run_once` with the same key and gets the recorded
result instead of processing the input a second time.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from .record import QueryResult, ResultStoreError, check_run_key
from .recorder import complete
from .settings import RUN_KEY, ResultSettings

_POLL_S = 0.1


def run_once(spark: Any, run_key: str, start: Callable[[], Any], *,
             record_timeout_s: float = 600.0) -> QueryResult:
    """The result of run `run_key`: the recorded one if the session's result store has an
    entry for it (a dirty entry's cleanup is completed first, here), else that of the query
    `start()` starts, once it has ended and the driver has recorded it.

    `spark` must be configured with a result store (`configure(builder, resultStore=URL)`).
    While `start()` runs, the session conf carries the run key, so the driver records the
    query it starts under that key: start one query, from this thread, in `start()`.
    Two drivers calling `run_once` with one key at the same moment may both start the
    query; exactly one records it (as with Flink, a single driver at a time is assumed).
    """
    check_run_key(run_key)
    settings = ResultSettings.of_session(spark)
    store = settings.store()
    entry = store.entry(run_key)
    if entry is not None:
        if not entry.clean:
            complete(store, entry.result, settings.access, settings.backoff)
        return store.get(run_key)
    query = _start_with_run_key(spark, run_key, start)
    with contextlib.suppress(Exception):  # a failed run is recorded as failed, and returned
        query.awaitTermination()
    return _await_record(store, run_key, record_timeout_s)


def _start_with_run_key(spark: Any, run_key: str, start: Callable[[], Any]) -> Any:
    previous = spark.conf.get(RUN_KEY, None)
    spark.conf.set(RUN_KEY, run_key)
    try:
        query = start()
    finally:
        if previous is None:
            spark.conf.unset(RUN_KEY)
        else:
            spark.conf.set(RUN_KEY, previous)
    if query is None or not hasattr(query, "awaitTermination"):
        raise ResultStoreError(f"run {run_key}: start() must return the StreamingQuery it "
                               f"started, not {query!r}")
    return query


def _await_record(store: Any, run_key: str, timeout_s: float) -> QueryResult:
    """The run's entry, once the driver's recorder has written it (it starts when Spark
    reports the query's end)."""
    deadline = time.monotonic() + timeout_s
    while (entry := store.entry(run_key)) is None:
        if time.monotonic() > deadline:
            raise ResultStoreError(
                f"run {run_key} ended but no entry for it appeared in {store.url} within "
                f"{timeout_s:.0f} s: see the driver's log for 'pyrocks result store'")
        time.sleep(_POLL_S)
    return entry.result

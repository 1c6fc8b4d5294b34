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
from dataclasses import replace
from typing import Any

from .cleanup import CleanupFailed
from .record import QueryResult, ResultStoreError, check_run_key
from .recorder import complete
from .settings import RUN_KEY, ResultSettings

_POLL_S = 0.1
_ATTEMPTS_HERE = 5  # attempts of each cleanup step that run_once makes on its caller's thread
_MAX_DELAY_HERE_S = 8.0


def run_once(spark: Any, run_key: str, start: Callable[[], Any], *,
             record_timeout_s: float = 600.0) -> QueryResult:
    """The result of run `run_key`: the recorded one if the session's result store has an
    entry for it (a dirty entry's cleanup is completed first, here, within a few attempts:
    `CleanupFailed` if it cannot be), else that of the query
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
            _complete_here(store, entry.result, settings)
        return store.get(run_key)
    query = _start_with_run_key(spark, run_key, start)
    with contextlib.suppress(Exception):  # a failed run is recorded as failed, and returned
        query.awaitTermination()
    return _await_record(store, run_key, record_timeout_s)


def _complete_here(store: Any, result: QueryResult, settings: ResultSettings) -> None:
    """Completes a dirty entry's cleanup on the caller's thread, within a few attempts: a
    cleanup that keeps failing ends in CleanupFailed (the run stays recorded, dirty), never
    in a wait without end."""
    limit = settings.backoff.max_attempts or _ATTEMPTS_HERE
    backoff = replace(settings.backoff, max_attempts=min(limit, _ATTEMPTS_HERE),
                      max_s=min(settings.backoff.max_s, _MAX_DELAY_HERE_S))
    try:
        complete(store, result, settings.access, backoff)
    except CleanupFailed as e:
        raise CleanupFailed(
            f"run {result.run_key} already ran (outcome {result.outcome}, last batch "
            f"{result.last_batch_id}) and is recorded in {store.url}, but its cleanup failed: "
            f"{e}. It was not run again; complete the cleanup with: state-store results "
            f"{store.url} --cleanup") from e


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

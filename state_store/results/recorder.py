"""Recording a run that ended: dirty entry, cleanup, clean entry; and resuming that.

The driver JVM (`ResultRecorder`, registered by `configure(builder, resultStore=URL)`)
runs these in a process of their own (`python -m state_store.results`, see `__main__.py`)
when a query run ends, and to resume when a session starts: so the recording runs off the
user's thread, and a session resumes what an earlier driver left dirty. Every step is
idempotent, so two recorders of one run (a resume beside a live recording) agree.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from ..format.spark_checkpoint import SparkCheckpoint
from ..format.storage import absolute_url, open_storage
from .cleanup import Backoff, StateAccess, clean_up, with_backoff
from .record import QueryResult
from .store import FileSystemResultStore, RunAlreadyRecordedError

log = logging.getLogger("state_store.results")


def record(store: FileSystemResultStore, result: QueryResult, access: StateAccess,
           backoff: Backoff, crash_at: Callable[[str], None] = lambda point: None) -> None:
    """Records `result` dirty, cleans up after its run, then marks it clean. A run already
    recorded is only completed (if dirty), never recorded twice."""
    try:
        with_backoff(f"recording run {result.run_key}", lambda: store.create_dirty(result),
                     backoff, answers=(RunAlreadyRecordedError,))
    except RunAlreadyRecordedError:
        entry = store.entry(result.run_key)
        if entry is None or entry.clean:
            return
        result = entry.result  # the first recorder's result is the run's
    crash_at("after-dirty")
    complete(store, result, access, backoff, crash_at)


def complete(store: FileSystemResultStore, result: QueryResult, access: StateAccess,
             backoff: Backoff, crash_at: Callable[[str], None] = lambda point: None) -> None:
    """Cleans up after a dirty run and marks it clean (raises CleanupFailed, leaving it
    dirty, once `backoff` gives up)."""
    clean_up(result, access, backoff, between_steps=lambda step: crash_at(f"after-{step}"))
    crash_at("before-clean")
    with_backoff(f"marking run {result.run_key} clean",
                 lambda: store.mark_clean(result.run_key), backoff)
    log.info("run %s is clean", result.run_key)


def resume(store: FileSystemResultStore, access: StateAccess, backoff: Backoff) -> int:
    """Completes every dirty run of `store`; how many."""
    dirty = store.dirty_results()
    for result in dirty:
        complete(store, result, access, backoff)
    return len(dirty)


def with_last_batch(result: QueryResult, access: StateAccess) -> QueryResult:
    """`result` with `last_batch_id` from the checkpoint's commit log, the authority on what
    the run committed (a progress report may describe a batch that never committed)."""
    if not result.checkpoint:
        return result
    try:
        storage = open_storage(absolute_url(result.checkpoint), access.checkpoint_options)
        committed = SparkCheckpoint(storage).committed_batches()
    except Exception as e:  # noqa: BLE001 - the progress report's batch stays
        log.warning("reading the commit log of %s: %s", result.checkpoint, e)
        return result
    return replace(result, last_batch_id=committed[-1] if committed else -1)

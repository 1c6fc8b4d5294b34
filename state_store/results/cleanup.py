"""What cleaning up after an ended query run means, and how it is retried.

When a run ends, the driver JVM has already finished and closed its stores (final
snapshots, uploads drained: `PyRocksCoordinator`; the workers remove the working copies
right behind, runtime/teardown.py). What is left is
durable and done here, in steps that are each idempotent, so a cleanup interrupted at any
point (a crash, a storage fault) is completed by running it again:
  1. `collect_garbage`: every store of the run's query is trimmed to its retention.
  2. `release_claim`: a claimed source that no retained version still needs is released.
Each step is retried with exponential backoff (`Backoff`) until it succeeds, or until an
error that retrying cannot change (a damaged file, a bad record) ends the cleanup: the run
then stays dirty and `CleanupFailed` says why.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from ..errors import ForeignCheckpointError, is_transient
from ..format import gc
from ..format.dependencies import depends_on
from ..format.restores import CLAIM_RELEASE, RESTORE_RECORD, ClaimRelease, RestoreRecord, read_claim
from ..format.seeding import CLAIM, trusted_roots
from ..format.spark_checkpoint import METADATA, STATE, SparkCheckpoint, stores_under_root
from ..format.storage import Storage, absolute_url, open_storage
from ..format.store_root import StoreRoot
from ..options import ORPHAN_MARGIN_MIN_S
from .record import QueryResult

log = logging.getLogger("state_store.results")
T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """Delays between attempts: `initial_s`, doubling up to `max_s`; `max_attempts` = 0
    retries for ever."""

    initial_s: float = 1.0
    max_s: float = 3600.0
    max_attempts: int = 0

    def delays(self) -> Iterator[float]:
        delay, attempt = self.initial_s, 1
        while self.max_attempts == 0 or attempt < self.max_attempts:
            yield delay
            delay, attempt = min(delay * 2, self.max_s), attempt + 1


class CleanupFailed(Exception):
    """A step kept failing for `max_attempts` attempts: the run stays dirty."""


def with_backoff(what: str, step: Callable[[], T], backoff: Backoff,
                 sleep: Callable[[float], None] = time.sleep,
                 answers: tuple[type[Exception], ...] = ()) -> T:
    """Runs `step` until it succeeds, logging every failure; raises CleanupFailed once
    `backoff` allows no more attempts, or at once for an error retrying cannot change (a
    damaged file, a bad record: `errors.is_transient`). `answers` are raised as they are."""
    delays = backoff.delays()
    attempt = 1
    while True:
        try:
            return step()
        except answers:
            raise
        except Exception as e:  # noqa: BLE001 - transient failures are retried, then reported
            if not is_transient(e):
                raise CleanupFailed(f"{what} failed with an error that retrying cannot "
                                    f"change: {type(e).__name__}: {e}") from e
            delay = next(delays, None)
            if delay is None:
                raise CleanupFailed(f"{what} failed {attempt} times; last error: "
                                    f"{type(e).__name__}: {e}") from e
            log.warning("%s failed (attempt %d, retrying in %.1f s): %s: %s",
                        what, attempt, delay, type(e).__name__, e)
            sleep(delay)
            attempt += 1


@dataclass(frozen=True)
class StateAccess:
    """How to reach a run's state: the checkpoint's filesystem options, and the rootUrl
    options (never recorded in a result: they may hold credentials)."""

    checkpoint_options: dict[str, Any] | None = None
    root_options: dict[str, Any] | None = None


def clean_up(result: QueryResult, access: StateAccess, backoff: Backoff,
             sleep: Callable[[float], None] = time.sleep,
             between_steps: Callable[[str], None] = lambda step: None) -> None:
    """Every cleanup step of `result`'s run, each retried with `backoff`."""
    if not result.checkpoint:
        return  # nothing durable to clean (a query without a checkpoint of its own)
    for name, step in (("collect_garbage", collect_garbage), ("release_claim", release_claim)):
        with_backoff(f"cleanup of run {result.run_key}: {name}",
                     lambda step=step: step(result, access), backoff, sleep)
        between_steps(name)


def collect_garbage(result: QueryResult, access: StateAccess) -> int:
    """Trims every store of the run's query to `result.retain` versions; how many files
    were deleted. Nothing, once the checkpoint was claimed: its files are the claimer's."""
    checkpoint = _checkpoint(result, access)
    if read_claim(checkpoint) is not None:
        return 0
    deleted = 0
    query_id, stores = _stores(result, checkpoint, access)
    for key, root in sorted(stores.items()):
        trusted = trusted_roots(checkpoint.child(f"{STATE}/{key}"), query_id)
        store = StoreRoot(root, f"store {key} of {result.checkpoint}", trusted_roots=trusted)
        plan = gc.collect_garbage(store, result.retain,
                                  max(result.orphan_margin_s, ORPHAN_MARGIN_MIN_S))
        deleted += plan.files_deleted
    return deleted


def release_claim(result: QueryResult, access: StateAccess) -> bool:
    """Releases the source this run's checkpoint claimed, once nothing retained needs it;
    True if it is released (now or before)."""
    checkpoint = _checkpoint(result, access)
    data = checkpoint.read_if_exists(RESTORE_RECORD)
    if data is None:
        return False
    record = RestoreRecord.from_json(data, f"{checkpoint.url}/{RESTORE_RECORD}")
    if record.mode != CLAIM:
        return False
    state_root = open_storage(result.state_root, access.root_options) \
        if result.state_root else None
    if record.source in depends_on(checkpoint, state_root):
        return False
    source = open_storage(record.source, access.checkpoint_options)
    source.publish(CLAIM_RELEASE, ClaimRelease(record.query_id, checkpoint.url).to_json())
    return True


def _checkpoint(result: QueryResult, access: StateAccess) -> Storage:
    return open_storage(absolute_url(result.checkpoint), access.checkpoint_options)


def _stores(result: QueryResult, checkpoint: Storage,
            access: StateAccess) -> tuple[str, dict[str, Storage]]:
    """The run's query id and its stores of this provider; none if the run wrote no query
    metadata (it failed at its start) or kept its state in another provider (which cleans
    its own)."""
    spark = SparkCheckpoint(checkpoint)
    if checkpoint.read_if_exists(METADATA) is None:
        return "", {}
    query_id = spark.query_id()
    if result.state_root:
        root = open_storage(result.state_root, access.root_options)
        return query_id, stores_under_root(root, query_id)
    try:
        return query_id, spark.walk_state(query_id)
    except ForeignCheckpointError:
        return query_id, {}

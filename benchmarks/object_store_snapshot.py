"""A store's final snapshot, and a worker's end of its stores, on an object store, with a
round trip added.

    python -m benchmarks.object_store_snapshot            # S3, Azure, GCS; 0 and 20 ms
    python -m benchmarks.object_store_snapshot --quick    # S3 only, 20 ms, fewer stores

The snapshot a store takes where its caller waits: the final one (`snapshot_now`; a
query's end, or an idle store, takes it before the store closes). It uploads the files of
a local RocksDB checkpoint that the snapshot before does not have (here all of them: an
SST file and the small files beside it, CURRENT, MANIFEST, OPTIONS, ...), then publishes
the descriptor. And a run's end in a worker (`END_STORES`): `--ends` stores, each with its
final snapshot owed, ended by one request. Each server is reached through a `DelayedLink`
that adds `--rtt-ms` to every round trip. Two ways, in turn, each on store roots of its
own:

  in line       each upload after the one before, each store's end after the one before:
                a worker without `requests` threads
  side by side  the uploads on the worker's `requests` threads, and the stores' ends at
                once, as a worker takes them

A store commits `--versions` versions of `--changes` new keys each (16-byte keys, 32-byte
values) first. Medians over `--stores-per-way` snapshots and `--repeats` ends each way.
Results: a table on stdout and `benchmarks/results/object_store_snapshot.json`.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks import report
from benchmarks.object_store_commit import (
    compared,
    in_turn,
    medians_of,
    object_store_arguments,
    on_each_store,
)
from benchmarks.object_store_load import new_keys
from state_store.format.storage import open_storage
from state_store.format.store_root import StoreRoot
from state_store.options import StoreOptions
from state_store.runtime.engine import VersionedStore
from state_store.runtime.worker import Session, WorkerShared

RESULTS_JSON = report.RESULTS_DIR / "object_store_snapshot.json"
WAYS = ("in line", "side by side")


def snapshot_ms(url: str, options: dict[str, Any], local: Path, versions: int, count: int,
                requests: Executor | None) -> float:
    """A new store's final snapshot, in ms."""
    root = StoreRoot(open_storage(url, options), "store")
    with ThreadPoolExecutor(1) as uploads:
        store = VersionedStore("store", root, local, StoreOptions(snapshot_interval=100),
                               uploads, requests=requests)
        try:
            for version in range(1, versions + 1):
                store.load(version - 1)
                store.write(new_keys(version, count))
                store.commit(version)
            started = time.perf_counter()
            store.snapshot_now()
            elapsed = (time.perf_counter() - started) * 1000
            assert store.checkpoint.snapshot_versions()[-1] == versions, "not published"
            return elapsed
        finally:
            store.close()


def end_ms(url: str, options: dict[str, Any], local: Path, stores: int, versions: int,
           count: int, requests: Executor | None) -> float:
    """One END_STORES (a query run's end in a worker) of `stores` new stores, each under a
    root of its own below `url` and with its last version owing its final snapshot, in ms."""
    with ThreadPoolExecutor(1) as uploads:
        shared = WorkerShared(local, uploads, requests=requests)
        for session_id in range(1, stores + 1):
            session = Session(None, shared, session_id)  # type: ignore[arg-type]
            root = StoreRoot(open_storage(f"{url}/store-{session_id}", options), "store")
            session.store = VersionedStore("store", root, local / str(session_id),
                                           StoreOptions(snapshot_interval=100), uploads,
                                           requests=requests)
            for version in range(1, versions + 1):
                session.store.load(version - 1)
                session.store.write(new_keys(version, count))
                session.store.commit(version)
            shared.sessions[session_id] = session
        started = time.perf_counter()
        failures = shared.sessions[1].end_stores(list(shared.sessions))
        elapsed = (time.perf_counter() - started) * 1000
        assert not any(failures.values()), failures
        return elapsed


def measure(server: Any, rtt_ms: float, args: argparse.Namespace, scratch: Path) -> dict:
    def one(url: str, options: dict[str, Any], local: Path, pool: Executor | None) -> float:
        return snapshot_ms(url, options, local, args.versions, args.changes, pool)

    def ends(url: str, options: dict[str, Any], local: Path, pool: Executor | None) -> float:
        return end_ms(url, options, local, args.ends, args.versions, args.changes, pool)

    return {"final snapshot": medians_of(
                rtt_ms, WAYS, in_turn(server, rtt_ms, scratch, args.stores_per_way, one)),
            f"end of {args.ends} stores": medians_of(
                rtt_ms, WAYS, in_turn(server, rtt_ms, scratch, args.repeats, ends))}


def main() -> None:
    parser = object_store_arguments(__doc__)
    parser.add_argument("--versions", type=int, default=5)
    parser.add_argument("--changes", type=int, default=1000)
    parser.add_argument("--stores-per-way", type=int, default=7)
    parser.add_argument("--ends", type=int, default=8, help="stores one END_STORES ends")
    parser.add_argument("--repeats", type=int, default=3, help="END_STORES timed each way")
    args = parser.parse_args()
    if args.quick:
        args.stores, args.rtt_ms, args.stores_per_way, args.repeats = "s3", "20", 3, 1

    def line(result: dict) -> str:
        return "; ".join(
            f"{what}: {compared(WAYS, measured)}"
            for what, measured in result.items() if isinstance(measured, dict))

    on_each_store(args, measure, line, RESULTS_JSON)


if __name__ == "__main__":
    main()

"""A restore's time on an object store, with a network's round trip added.

    python -m benchmarks.object_store_load            # S3, Azure, GCS; round trips of 0 and 20 ms
    python -m benchmarks.object_store_load --quick    # S3 only, 20 ms, fewer restores

A store opened where its working copy is not (a restart, a partition moved to another
executor) rebuilds the version it loads: it lists the root's records, reads the version's
manifest and its snapshot's descriptor, downloads the snapshot's files and replays the
changelogs after it. On a real object store each request waits a network round trip; on
loopback those are almost free, so each server is reached through a `DelayedLink` that
adds `--rtt-ms` to every round trip. Two ways of loading, in turn, each into a working
copy of its own:

  in line       each request after the one before: the engine without `requests` threads
  side by side  the snapshot's files downloaded, and the changelogs fetched ahead of the
                replay, on the worker's `requests` threads, as a worker loads

The store is built first: `--versions` commits of `--changes` new keys each (16-byte keys,
32-byte values; snapshots every 10 versions, as by default), so a load of the last version
downloads the snapshot of the last multiple of 10 and replays the versions after it.
Medians over `--restores` loads of each way.
Results: a table on stdout and `benchmarks/results/object_store_load.json`.
"""

from __future__ import annotations

import argparse
import time
import uuid
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
from state_store.format import records
from state_store.format.records import Op
from state_store.format.storage import open_storage
from state_store.format.store_root import StoreRoot
from state_store.options import StoreOptions
from state_store.runtime.engine import VersionedStore

RESULTS_JSON = report.RESULTS_DIR / "object_store_load.json"
WAYS = ("in line", "side by side")


def new_keys(version: int, count: int) -> bytes:
    return b"".join(records.encode(Op.PUT, "default", f"v{version:06d}-{i:09d}".encode(),
                                   version.to_bytes(8, "big") * 4) for i in range(count))


def build(url: str, options: dict[str, Any], local: Path, versions: int, count: int) -> None:
    """A store at `url` with `versions` committed, its snapshots all uploaded."""
    with ThreadPoolExecutor(1) as uploads:
        store = VersionedStore("store", StoreRoot(open_storage(url, options), "store"), local,
                               StoreOptions(), uploads)
        try:
            for version in range(1, versions + 1):
                store.load(version - 1)
                store.write(new_keys(version, count))
                store.commit(version)
            store.snapshots.drain()
        finally:
            store.close()


def load_ms(url: str, options: dict[str, Any], local: Path, version: int,
            requests: Executor | None) -> tuple[float, int]:
    """One rebuild of `version` into the empty `local`: its time and the versions replayed."""
    root = StoreRoot(open_storage(url, options), "store")
    with ThreadPoolExecutor(1) as uploads:
        store = VersionedStore("store", root, local, StoreOptions(), uploads, requests=requests)
        try:
            started = time.perf_counter()
            store.load(version)
            elapsed = (time.perf_counter() - started) * 1000
            return elapsed, store.metrics.replayed_versions
        finally:
            store.close()


def measure(server: Any, rtt_ms: float, args: argparse.Namespace, scratch: Path) -> dict:
    built = server.url(f"load-{uuid.uuid4().hex}")
    build(built, server.options, scratch / f"build-{rtt_ms}", args.versions, args.changes)

    def run(url: str, options: dict[str, Any], local: Path, pool: Executor | None
            ) -> tuple[float, int]:
        return load_ms(built, options, local, args.versions, pool)  # every load of `built`

    runs = in_turn(server, rtt_ms, scratch, args.restores, run)
    result = medians_of(rtt_ms, WAYS, ([ms for ms, _ in runs[0]], [ms for ms, _ in runs[1]]))
    return {**result, "replayed_versions": sorted({n for way in runs for _, n in way})}


def main() -> None:
    parser = object_store_arguments(__doc__)
    parser.add_argument("--versions", type=int, default=39)
    parser.add_argument("--changes", type=int, default=1000)
    parser.add_argument("--restores", type=int, default=7)
    args = parser.parse_args()
    if args.quick:
        args.stores, args.rtt_ms, args.restores = "s3", "20", 3

    def line(result: dict) -> str:
        return f"{compared(WAYS, result)}; versions replayed {result['replayed_versions']}"

    on_each_store(args, measure, line, RESULTS_JSON)


if __name__ == "__main__":
    main()

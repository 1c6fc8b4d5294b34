"""A commit's time on an object store, with a network's round trip added.

    python -m benchmarks.object_store_commit            # S3, Azure, GCS; round trips of 0 and 20 ms
    python -m benchmarks.object_store_commit --quick    # S3 only, 20 ms, fewer commits

A commit uploads its changelog, then publishes its manifest, which names it; before the
manifest it must know that no later run of the query has published (the run-epoch fence,
`engine._refuse_if_superseded`: a listing of the manifests). Each is a request, and on a
real object store each waits a network round trip; on loopback those are almost free, so
each server is reached through a `DelayedLink` that adds `--rtt-ms` to every round trip.
Two ways of committing, in turn, each on a store root of its own:

  one after the other   the listing, then the upload, then the manifest: the engine without
                        `requests` threads (what every commit did before Dec 7)
  overlapped            the listing beside the upload, then the manifest: the engine with
                        them, as a worker runs it

A commit writes `--changes` records (16-byte keys, 32-byte values); snapshots are taken in
the background as configured by default, and the threads switch as a worker's do. The
first commit of a store (a snapshot of nothing first) is left out. Medians of each
repeat's commits, then over the repeats.
Results: a table on stdout and `benchmarks/results/object_store_commit.json`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from benchmarks import report
from benchmarks.emulators import Azurite, DelayedLink, FakeGcs
from benchmarks.s3server import MotoServer
from state_store.format import records
from state_store.format.records import Op
from state_store.format.storage import open_storage
from state_store.format.store_root import StoreRoot
from state_store.options import StoreOptions
from state_store.runtime.engine import VersionedStore
from state_store.runtime.storage_requests import IN_FLIGHT
from state_store.runtime.worker import SWITCH_INTERVAL_S

RESULTS_JSON = report.RESULTS_DIR / "object_store_commit.json"
SERVERS: dict[str, Callable[[], Any]] = {"s3": MotoServer, "azure": Azurite, "gcs": FakeGcs}
WAYS = ("one after the other", "overlapped")
T = TypeVar("T")


def changes(version: int, count: int) -> bytes:
    return b"".join(records.encode(Op.PUT, "default", f"key-{i:012d}".encode()[:16],
                                   version.to_bytes(8, "big") * 4) for i in range(count))


def commit_ms(url: str, options: dict[str, Any], local: Path, requests: Executor | None,
              commits: int, count: int) -> list[float]:
    """Each commit's time, the first left out, on a new store root at `url`."""
    root = StoreRoot(open_storage(url, options), "store")
    with ThreadPoolExecutor(1) as uploads:
        store = VersionedStore("store", root, local, StoreOptions(), uploads, requests=requests)
        times = []
        try:
            for version in range(1, commits + 2):
                store.load(version - 1)
                store.write(changes(version, count))
                started = time.perf_counter()
                store.commit(version)
                times.append((time.perf_counter() - started) * 1000)
        finally:
            store.close()
    return times[1:]


Run = Callable[[str, dict[str, Any], Path, Executor | None], T]


def in_turn(server: Any, rtt_ms: float, scratch: Path, rounds: int, run: Run[T]
            ) -> tuple[list[T], list[T]]:
    """`run(url, options, local, requests)` `rounds` times each way, the ways taking turns
    (so that a drift of the machine reaches both), each time on a new root at `url` and a
    new working copy at `local`, through a link adding `rtt_ms`: without `requests`
    threads (in line), then with a worker's. Each way's results."""
    in_line: list[T] = []
    beside: list[T] = []
    with DelayedLink(server.port, rtt_ms) as link, \
            ThreadPoolExecutor(3 * IN_FLIGHT) as requests:
        options = server.options_at(link.endpoint)
        for _ in range(rounds):
            for results, pool in ((in_line, None), (beside, requests)):
                url = server.url(f"bench-{uuid.uuid4().hex}")
                results.append(run(url, options, scratch / uuid.uuid4().hex, pool))
    return in_line, beside


def medians_of(rtt_ms: float, ways: tuple[str, str], runs: tuple[list[float], list[float]]
               ) -> dict:
    """The result of `in_turn`'s runs: each way's times, median, and their ratio."""
    by_way = dict(zip(ways, runs, strict=True))
    medians = {way: statistics.median(ms) for way, ms in by_way.items()}
    return {"rtt_ms": rtt_ms, "runs_ms": by_way, "median_ms": medians,
            "ratio": report.ratio(medians[ways[1]], medians[ways[0]])}


def measure(server: Any, rtt_ms: float, args: argparse.Namespace, scratch: Path) -> dict:
    def run(url: str, options: dict[str, Any], local: Path, pool: Executor | None) -> float:
        return statistics.median(commit_ms(url, options, local, pool, args.commits,
                                           args.changes))

    return medians_of(rtt_ms, WAYS, in_turn(server, rtt_ms, scratch, args.repeats, run))


def object_store_arguments(doc: str) -> argparse.ArgumentParser:
    """The options of a benchmark on the object stores (this one's and object_store_load's)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--stores", default="s3,azure,gcs")
    parser.add_argument("--rtt-ms", default="0,20", help="round trips added, comma-separated")
    return parser


Measure = Callable[[Any, float, argparse.Namespace, Path], dict]


def compared(ways: tuple[str, str], result: dict) -> str:
    """A `medians_of` result in words: each way's median and their ratio."""
    before, after = (result["median_ms"][way] for way in ways)
    return (f"{ways[0]} {before:7.1f} ms, {ways[1]} {after:7.1f} ms "
            f"({result['ratio']:.2f})")


def on_each_store(args: argparse.Namespace, measure: Measure, line: Callable[[dict], str],
                  results_json: Path) -> None:
    """`measure(server, rtt_ms, args, scratch)` on each store and round trip asked for,
    each result printed as `line` words it, then all saved to `results_json`."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)  # as in a worker, whose threads these are
    results = []
    with tempfile.TemporaryDirectory(prefix="pyrocks-object-store-") as scratch:
        for name in args.stores.split(","):
            with SERVERS[name]() as server:
                for rtt in (float(r) for r in args.rtt_ms.split(",")):
                    result = {"store": name, **measure(server, rtt, args, Path(scratch))}
                    results.append(result)
                    print(f"{name:6} rtt {rtt:5.1f} ms: {line(result)}", flush=True)
    results_json.parent.mkdir(parents=True, exist_ok=True)
    results_json.write_text(json.dumps({"config": vars(args), "results": results},
                                       indent=1) + "\n")
    print(f"wrote {results_json}")


def main() -> None:
    parser = object_store_arguments(__doc__)
    parser.add_argument("--commits", type=int, default=40)
    parser.add_argument("--changes", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.quick:
        args.stores, args.rtt_ms, args.commits, args.repeats = "s3", "20", 15, 2

    on_each_store(args, measure, lambda result: compared(WAYS, result), RESULTS_JSON)


if __name__ == "__main__":
    main()

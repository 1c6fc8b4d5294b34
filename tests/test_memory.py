"""One worker's stores share a bounded RocksDB memory budget (state_store/memory.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pyspark.sql import SparkSession

from pyrocks_support import worker_pids
from state_store.format import records
from state_store.format.records import Op
from state_store.format.storage import open_storage
from state_store.format.store_root import StoreRoot
from state_store.options import PREFIX, StoreOptions
from state_store.runtime.engine import VersionedStore
from state_store.runtime.memory import RocksMemory

STORES = 12
BYTES_PER_STORE = 3 << 20  # fits one store's 16 MiB memtable: alone, nothing would flush


def fill_stores(tmp: Path, memory: RocksMemory | None) -> list[VersionedStore]:
    stores = []
    uploads = ThreadPoolExecutor(1)
    for i in range(STORES):
        name = f"store-{i}"
        store = VersionedStore(name, StoreRoot(open_storage(str(tmp / "root" / name)), name),
                               tmp / "local" / name, StoreOptions(), uploads, memory)
        store.load(0)
        value = bytes(1000)
        batch = b"".join(records.encode(Op.PUT, "default", b"key-%08d" % k, value)
                         for k in range(BYTES_PER_STORE // 1000))
        store.write(batch)
        assert store.commit(1)["published"]
        stores.append(store)
    return stores


def memtable_bytes(stores: list[VersionedStore]) -> int:
    return sum(s.copy.rocksdb().property_int_value("rocksdb.cur-size-all-mem-tables")
               for s in stores)


def settled(stores: list[VersionedStore]) -> None:
    """Waits until no store has a memtable waiting for or in a flush (a real signal from
    RocksDB, not a time): what the bound must hold in that state is deterministic."""
    deadline = time.monotonic() + 120
    while any(s.copy.rocksdb().property_int_value("rocksdb.num-immutable-mem-table")
              or s.copy.rocksdb().property_int_value("rocksdb.num-running-flushes")
              for s in stores):
        assert time.monotonic() < deadline, "RocksDB flushes never completed"
        time.sleep(0.01)


def write_once_more(stores: list[VersionedStore]) -> None:
    for store in stores:
        store.write(records.encode(Op.PUT, "default", b"one-more", b"x"))


def test_stores_together_stay_within_the_bound(tmp_path: Path) -> None:
    memory = RocksMemory.bounded(16)
    assert memory is not None
    bounded = fill_stores(tmp_path / "bounded", memory)
    unbounded = fill_stores(tmp_path / "unbounded", None)
    try:
        # unbounded, every store keeps its whole batch in its memtable: over 2x the bound
        assert memtable_bytes(unbounded) >= STORES * BYTES_PER_STORE
        # bounded, a store flushes when it writes and its own last flush is done (memory.py):
        # once every store has written again with no flush in flight, the memtables fit the
        # write-buffer budget, whatever order the flushes happened to finish in before
        settled(bounded)
        write_once_more(bounded)
        settled(bounded)
        memtables = memtable_bytes(bounded)
        assert memtables <= memory.write_buffers.get_buffer_size() < memory.bound_bytes
        # The cache holds the memtables (they are charged to it), and the bound is soft
        # (memory.py): what is charged but pinned (the memtables' reservations, in 256 KiB
        # steps, and L0 index and filter blocks) is never evicted, so the cache may pass
        # the bound, by less than the one write frame the writing store may hold beyond it.
        assert memtables <= memory.usage_bytes() <= memory.bound_bytes + BYTES_PER_STORE
        for store in bounded:  # and nothing was lost by flushing
            assert store.get("default", b"key-%08d" % 0) == bytes(1000)
            assert sum(1 for _ in store.scan("default", None, None, None)) == 3146
    finally:
        for store in bounded + unbounded:
            store.close()


def test_zero_means_unbounded() -> None:
    assert RocksMemory.bounded(0) is None


def worker_bounds(local_dir: Path) -> list[int]:
    bounds = []
    for pid in worker_pids(local_dir):
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        bounds.append(int(argv[argv.index("--memory-bound-mb") + 1]))
    return bounds


def run_count(spark: SparkSession, work: Path) -> None:
    (work / "in").mkdir(parents=True)
    (work / "in" / "0.json").write_text("\n".join(f'{{"k": {i}}}' for i in range(50)))
    query = (spark.readStream.schema("k long").json(str(work / "in")).groupBy("k").count()
             .writeStream.outputMode("update").format("noop")
             .option("checkpointLocation", str(work / "ckpt")).start())
    try:
        query.processAllAvailable()
    finally:
        query.stop()


def test_executor_bound_is_split_across_workers(pyrocks_spark: SparkSession,
                                                tmp_path: Path) -> None:
    local_dir = Path(pyrocks_spark.conf.get(PREFIX + "localDir"))
    run_count(pyrocks_spark, tmp_path / "default")
    assert worker_bounds(local_dir) == [256, 256]  # 512 MiB over local[2]'s two workers
    pyrocks_spark.conf.set(PREFIX + "memoryBoundMB", "100")
    try:
        run_count(pyrocks_spark, tmp_path / "bounded")  # a new bound starts new workers
        assert sorted(worker_bounds(local_dir)).count(50) == 2  # beside the first pool's
    finally:
        pyrocks_spark.conf.unset(PREFIX + "memoryBoundMB")


# Runs in a fresh interpreter: glibc's threshold is process-wide, and the test process's own
# allocations must not move it. glibc serves a block from the heap's free space when that
# has room, whatever the threshold; the threshold decides only between growing the heap and
# mapping. So the probe takes more blocks than that free space holds, and reports how many
# of them the free space could have served (`from_heap_at_most`).
_BLOCKS = 256
_ARENA_BLOCKS = """
import ctypes, json, sys
from state_store.runtime.memory import ARENA_BLOCK_BYTES, map_arena_blocks_apart

class MallInfo(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks",
                "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
applied = map_arena_blocks_apart() if sys.argv[1] == "apart" else False
before = libc.mallinfo2()
blocks = [libc.malloc(ARENA_BLOCK_BYTES) for _ in range(int(sys.argv[2]))]
mapped = libc.mallinfo2().hblks - before.hblks
for block in blocks:
    libc.free(block)
print(json.dumps({"applied": applied, "mapped": mapped,
                  "from_heap_at_most": before.fordblks // ARENA_BLOCK_BYTES}))
"""


def arena_blocks(mode: str, env: dict[str, str] | None = None) -> dict:
    done = subprocess.run([sys.executable, "-c", _ARENA_BLOCKS, mode, str(_BLOCKS)],
                          check=True, capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    return json.loads(done.stdout)


def test_memtable_arena_blocks_are_mapped_apart_from_the_heap() -> None:
    # glibc's default threshold (128 KiB) keeps 64 KiB blocks in the heap, growing it, where
    # a flush that frees them leaves holes; the worker's setting maps every block the heap's
    # free space cannot hold, so freeing it returns it
    default = arena_blocks("default")
    assert (default["applied"], default["mapped"]) == (False, 0)
    apart = arena_blocks("apart")
    assert apart["applied"] is True
    assert apart["from_heap_at_most"] < _BLOCKS // 2  # the heap's room cannot decide it
    assert apart["mapped"] >= _BLOCKS - apart["from_heap_at_most"]


def test_a_users_mmap_threshold_is_kept() -> None:
    kept = arena_blocks("apart", {"MALLOC_MMAP_THRESHOLD_": str(1 << 20)})
    assert (kept["applied"], kept["mapped"]) == (False, 0)

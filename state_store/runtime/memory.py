"""How a worker's stores share RocksDB memory.

Every store of a worker process uses one block cache and one write-buffer manager, so a
worker holding a hundred stores costs one bounded total instead of a hundred per-store
defaults (an 8 MiB cache and up to two 16 MiB memtables each). The bound, the executor's
`memoryBoundMB` split evenly across its workers by the shim, covers:
  - data blocks read from SST files (the block cache itself);
  - index and filter blocks, charged to the cache instead of living beside it;
  - memtables, charged to the cache by the write-buffer manager, which flushes a store's
    memtable early once all memtables together pass `WRITE_BUFFER_SHARE` of the cache.
The allocator's own overhead is inside the bound too. A full block cache churns: blocks of
a few KiB are evicted and read again all the time, and glibc keeps the holes they leave
(measured at 20M keys, 256 MiB a worker: the heap 14-30% above what the cache held,
`free` in mallinfo, which `malloc_trim` did not return as the holes share pages with live
blocks). So the cache gets `1 - ALLOCATOR_SHARE` of the bound, and memtable arena blocks,
which a flush frees all at once, are mapped apart from the heap instead of growing it
(`map_arena_blocks_apart`; glibc still serves a block from free space the heap already
has): freed, they go back to the system instead of leaving 64 KiB holes.
RocksDB enforces it softly: a write is never refused or stalled, it only flushes sooner,
only the store that writes flushes, and not while its own previous flush is still running.
So memtables stay within half the cache plus, per store, what it wrote since its last
flush began (on a loaded machine, where flushes lag, that can be a whole batch) and one
arena block; each store's next write with no flush in flight brings the total back under
half the cache. Arena blocks are kept small (`ARENA_BLOCK_BYTES`), or every open store
would hold a 1-2 MiB floor of the budget even when idle.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

from rocksdict import BlockBasedOptions, Cache, Options, WriteBufferManager

ALLOCATOR_SHARE = 0.25  # of the bound, left to the allocator's holes; the rest is the cache
WRITE_BUFFER_SHARE = 0.5  # of the cache, for memtables; the rest caches blocks
ARENA_BLOCK_BYTES = 64 << 10
_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)


@dataclass(frozen=True)
class RocksMemory:
    bound_bytes: int
    cache: Cache
    write_buffers: WriteBufferManager

    @classmethod
    def bounded(cls, bound_mb: int) -> RocksMemory | None:
        """A shared budget of `bound_mb` MiB; None (each store on RocksDB's defaults) for 0."""
        if bound_mb <= 0:
            return None
        bound = bound_mb << 20
        capacity = int(bound * (1 - ALLOCATOR_SHARE))
        cache = Cache(capacity)
        buffers = WriteBufferManager.new_write_buffer_manager_with_cache(
            int(capacity * WRITE_BUFFER_SHARE), False, cache)
        return cls(bound, cache, buffers)

    def apply(self, options: Options, table: BlockBasedOptions) -> None:
        """Puts a store's `options` and its `table` (set on `options` after this) in the
        budget."""
        options.set_write_buffer_manager(self.write_buffers)
        options.set_arena_block_size(ARENA_BLOCK_BYTES)
        table.set_block_cache(self.cache)
        table.set_cache_index_and_filter_blocks(True)
        # L0 files are read by every lookup: keep their index and filter from being evicted
        table.set_pin_l0_filter_and_index_blocks_in_cache(True)

    def usage_bytes(self) -> int:
        """What the shared cache holds now, memtable reservations included."""
        return self.cache.get_usage()


def map_arena_blocks_apart() -> bool:
    """Has glibc map every allocation of `ARENA_BLOCK_BYTES` or more apart from the heap, so
    a flushed memtable's blocks return to the system when freed. The fixed threshold also
    stops glibc from raising it (up to 32 MiB) after a large block is freed, which would
    move the scan chunks into the heap. False where malloc is not glibc's, or where the
    process environment already sets the threshold (the user's value is kept)."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    return mallopt is not None and mallopt(_M_MMAP_THRESHOLD, ARENA_BLOCK_BYTES) == 1

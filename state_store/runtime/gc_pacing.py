"""When Spark's maintenance of a store collects its garbage.

Spark asks every loaded store for maintenance every `maintenanceInterval` (60 s by
default), whether its query ran a batch since or not. A collection lists the store root's
directories (six listings on an object store) and reads its retained records: requests a
user pays for, and time the maintenance thread spends. What a collection deletes comes from
two kinds of change:
- records: a commit, a published snapshot, or a lost publish race of this store moves
  retention on and makes earlier files garbage;
- time alone: orphans and earlier queries' roots become garbage once older than the orphan
  margin (format/gc.py).
So a maintenance call collects when the store wrote a record (or tried to) since the last
collection, or asks to retain another number of versions, and otherwise only once a
tenth of the orphan margin has passed since the last one: what time alone makes garbage is
deleted at most that much later than at every call. What other processes write (a losing
attempt's leftovers) is garbage only by time too. Skipping a collection never deletes
anything, so no rule here can lose data; the store's own `collect_garbage` (tools, tests)
always collects.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

# The orphan margin's share after which a collection runs whatever changed.
_TIME_SHARE = 0.1


@dataclass
class GcPacing:
    orphan_margin_s: float
    clock: Callable[[], float] = time.monotonic
    _last: tuple[int, int] | None = field(default=None, init=False)  # (writes, retain)
    _last_at: float = field(default=0.0, init=False)

    def due(self, writes: int, retain: int) -> bool:
        """Whether a collection now could delete anything the last one could not: `writes`
        counts the records the store wrote or tried to write, `retain` the versions kept."""
        return ((writes, retain) != self._last
                or self.clock() - self._last_at >= self.orphan_margin_s * _TIME_SHARE)

    def collected(self, writes: int, retain: int) -> None:
        """A collection ran; `writes` as counted before it started, so that what an upload
        publishes while it runs makes the next call collect again."""
        self._last, self._last_at = (writes, retain), self.clock()

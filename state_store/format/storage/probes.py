"""Which endpoints were seen to honour a conditional create, so each is probed once.

A probe costs three requests (create, create again, delete). Asked per store, a query of
200 stores would send 600 before its first batch; whether an endpoint honours the condition
is a property of the service, not of a bucket or a store. So the owner of a `ConditionProbes`
(a worker process, or one tool run) probes each endpoint once and remembers the answer.
A refusal is remembered too: an endpoint that ignored the condition once is not trusted
on a second try.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ...errors import UnsupportedStorageError


class ConditionProbes:
    def __init__(self) -> None:
        self._lock = threading.Lock()  # also keeps two stores from probing one endpoint at once
        self._honoured: set[str] = set()
        self._refused: dict[str, UnsupportedStorageError] = {}

    def ensure(self, endpoint: str, probe: Callable[[], None]) -> None:
        """Returns if `endpoint` honours the condition (running `probe` the first time it
        is asked about); `probe` raises UnsupportedStorageError if it does not."""
        with self._lock:
            if endpoint in self._honoured:
                return
            if endpoint in self._refused:
                raise self._refused[endpoint]
            try:
                probe()
            except UnsupportedStorageError as refusal:
                self._refused[endpoint] = refusal
                raise
            self._honoured.add(endpoint)

    def probed(self) -> frozenset[str]:
        """The endpoints already known to honour the condition (for diagnostics, tests)."""
        with self._lock:
            return frozenset(self._honoured)

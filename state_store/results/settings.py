"""The result store a session is configured with (`configure(builder, resultStore=URL)`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..options import PREFIX, validate
from .cleanup import Backoff, StateAccess
from .record import ResultStoreError
from .store import FileSystemResultStore

STORE_KEY = PREFIX + "resultStore"
# Set by run_once while `start()` runs: the driver records that query's run under this key.
RUN_KEY = PREFIX + "runKey"
_KEYS = ("resultStore", "resultStoreOptions", "rootOptions", "cleanupBackoffInitialSeconds",
         "cleanupBackoffMaxSeconds", "cleanupMaxAttempts")


@dataclass(frozen=True)
class ResultSettings:
    url: str
    store_options: dict[str, Any]
    access: StateAccess
    backoff: Backoff

    def store(self) -> FileSystemResultStore:
        return FileSystemResultStore(self.url, self.store_options)

    @staticmethod
    def from_conf(get: Callable[[str], str | None]) -> ResultSettings:
        """From a session's conf (`get(key)` is None for an unset key)."""
        raw = {PREFIX + k: v for k in _KEYS if (v := get(PREFIX + k)) is not None}
        parsed = validate(raw)
        if "resultStore" not in parsed:
            raise ResultStoreError(
                f"this session has no result store: build it with "
                f"state_store.spark.configure(builder, resultStore=URL) (Spark conf {STORE_KEY})")
        return ResultSettings(
            url=parsed["resultStore"],
            store_options=parsed.get("resultStoreOptions", {}),
            access=StateAccess(None, parsed.get("rootOptions") or None),
            backoff=Backoff(parsed.get("cleanupBackoffInitialSeconds", 1.0),
                            parsed.get("cleanupBackoffMaxSeconds", 3600.0),
                            parsed.get("cleanupMaxAttempts", 0)))

    @staticmethod
    def of_session(spark: Any) -> ResultSettings:
        return ResultSettings.from_conf(lambda key: spark.conf.get(key, None))

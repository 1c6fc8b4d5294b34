"""`FileSystemResultStore` (contract): Flink's JobResultStore for query runs, on fsspec.

One JSON file per run under the store's URL (a local path or `s3://...`):
`<run_key>_DIRTY.json` is written when the run ends, before its cleanup starts;
`<run_key>.json` once the cleanup is done. Invariants, enforced here:
  * An entry is created put-if-absent: of two processes recording one run key at once,
    exactly one wins, and a run key that has an entry, dirty or clean, is never recorded
    again.
  * The clean entry is published before the dirty one is deleted, so a run is never
    without an entry; a reader that sees both takes the clean one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..format.storage import Storage, open_storage
from .record import (
    QueryResult,
    ResultStoreError,
    check_run_key,
    clean_name,
    dirty_name,
    run_key_of,
)


class RunAlreadyRecordedError(ResultStoreError):
    """`create_dirty` for a run key that already has an entry."""


class UnknownRunError(ResultStoreError, KeyError):
    """The run key has no entry in the store."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


@dataclass(frozen=True)
class Entry:
    """One run's entry: its result, and whether its cleanup is done."""

    result: QueryResult
    clean: bool


class FileSystemResultStore:
    """The result store at `url`. `delete_on_commit=True` deletes an entry when it turns
    clean (as Flink's default does), which gives up the guarantee that a run key never runs
    twice: keep it False with `run_once`."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None,
                 delete_on_commit: bool = False) -> None:
        self.url = url.rstrip("/")
        self.delete_on_commit = delete_on_commit
        self._storage: Storage = open_storage(self.url, storage_options)

    def __repr__(self) -> str:
        return f"FileSystemResultStore({self.url!r})"

    def exists(self) -> bool:
        """Whether anything is at the store's URL (a new store exists once a run is
        recorded)."""
        return bool(self._storage.fs.exists(self._storage.root))

    # ---- writes -------------------------------------------------------------------------

    def create_dirty(self, result: QueryResult) -> None:
        """Records that run `result.run_key` ended and its cleanup has not finished."""
        key = result.run_key
        if self.has_clean(key):
            raise self._recorded(key, clean=True)
        if not self._storage.publish(dirty_name(key), result.to_entry()):
            raise self._recorded(key, clean=False)
        # A concurrent mark_clean may have published the clean entry and deleted its dirty
        # one between our check and our publish: then the run is recorded, not ours.
        if self.has_clean(key):
            self._storage.delete(dirty_name(key))
            raise self._recorded(key, clean=True)

    def mark_clean(self, run_key: str) -> None:
        """The run's cleanup is done. Idempotent: a clean run stays clean."""
        dirty = self._storage.read_if_exists(dirty_name(check_run_key(run_key)))
        if dirty is None:
            if self.has_clean(run_key):
                return
            raise UnknownRunError(f"run {run_key} has no entry in the result store {self.url}")
        if not self.delete_on_commit:
            QueryResult.from_entry(dirty, self._where(dirty_name(run_key)))  # never copy junk
            self._storage.publish(clean_name(run_key), dirty)  # False: clean already
        self._storage.delete(dirty_name(run_key))

    # ---- reads --------------------------------------------------------------------------

    def has_dirty(self, run_key: str) -> bool:
        key = check_run_key(run_key)
        return not self.has_clean(key) and self._exists(dirty_name(key))

    def has_clean(self, run_key: str) -> bool:
        return self._exists(clean_name(check_run_key(run_key)))

    def get(self, run_key: str) -> QueryResult:
        """The recorded result of run `run_key`, dirty or clean."""
        found = self.entry(run_key)
        if found is None:
            raise UnknownRunError(f"run {run_key} has no entry in the result store {self.url}")
        return found.result

    def entry(self, run_key: str) -> Entry | None:
        key = check_run_key(run_key)
        for name, clean in ((clean_name(key), True), (dirty_name(key), False)):
            data = self._storage.read_if_exists(name)
            if data is not None:
                return Entry(QueryResult.from_entry(data, self._where(name)), clean)
        return None

    def dirty_results(self) -> list[QueryResult]:
        """Results of every run whose cleanup is not done, by run key."""
        return [e.result for e in self.entries() if not e.clean]

    def entries(self) -> list[Entry]:
        """Every run's entry, by run key."""
        state: dict[str, bool] = {}
        for name in self._storage.list_names(""):
            parsed = run_key_of(name)
            if parsed is not None:
                key, dirty = parsed
                state[key] = state.get(key, False) or not dirty
        found = (self.entry(key) for key in sorted(state))
        return [e for e in found if e is not None]  # None: deleted since the listing

    # ---- helpers ------------------------------------------------------------------------

    def _exists(self, name: str) -> bool:
        # A read, not fs.exists: listings may be cached (s3fs), entries are small.
        return self._storage.read_if_exists(name) is not None

    def _where(self, name: str) -> str:
        return f"result store entry {self.url}/{name}"

    def _recorded(self, run_key: str, clean: bool) -> RunAlreadyRecordedError:
        state = "clean" if clean else "dirty (its cleanup is not done)"
        return RunAlreadyRecordedError(
            f"run {run_key} is already recorded in the result store {self.url}: its entry "
            f"is {state}; a run key is recorded once")

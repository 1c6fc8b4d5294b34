"""The durable record of one query run (contract): what a result store entry holds.

An entry is one JSON file, `{"version": 1, "result": {...}}`, named by its run key:
`<run_key>_DIRTY.json` while the run's resources are being cleaned up, `<run_key>.json`
once they are (see `store.py`).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ..errors import CorruptFileError, StateStoreError
from ..options import BY_KEY

ENTRY_VERSION = 1
OUTCOMES = ("finished", "stopped", "failed")
# A run key becomes a file name in every filesystem we support, unescaped.
_RUN_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._=+-]{0,199}")
_DIRTY_SUFFIX = "_DIRTY"


class ResultStoreError(StateStoreError):
    """A result store refused an operation: the message names the run key and the entry."""


def check_run_key(run_key: str) -> str:
    """A run key is a file name: letters, digits and `._=+-`, 1 to 200 characters, not
    starting with punctuation and not ending in `_DIRTY` (the dirty entries' suffix)."""
    if not isinstance(run_key, str) or not _RUN_KEY.fullmatch(run_key) \
            or run_key.endswith(_DIRTY_SUFFIX):
        raise ResultStoreError(
            f"invalid run key {run_key!r}: a run key is 1-200 letters, digits or ._=+- "
            f"(starting with a letter or digit, not ending in {_DIRTY_SUFFIX})")
    return run_key


def dirty_name(run_key: str) -> str:
    return f"{run_key}{_DIRTY_SUFFIX}.json"


def clean_name(run_key: str) -> str:
    return f"{run_key}.json"


def run_key_of(name: str) -> tuple[str, bool] | None:
    """(run key, dirty?) of an entry's file name; None for any other file."""
    if not name.endswith(".json"):
        return None
    stem = name[:-len(".json")]
    dirty = stem.endswith(_DIRTY_SUFFIX)
    key = stem[:-len(_DIRTY_SUFFIX)] if dirty else stem
    return (key, dirty) if _RUN_KEY.fullmatch(key) else None


@dataclass(frozen=True)
class QueryResult:
    """How one run of a streaming query ended.

    `outcome` is "finished" (a run-to-completion trigger, AvailableNow or Once, reached its
    end), "stopped" (stop() or the session ended) or "failed" (`error` says why).
    `last_batch_id` is the last batch the run committed (-1: none). Times are epoch
    milliseconds. `metrics` is the run's last progress report, as Spark's JSON. The last
    three fields are what its cleanup needs: the query's rootUrl ("" = state in the
    checkpoint), minBatchesToRetain and orphanMarginSeconds.
    """

    run_key: str
    query_id: str
    run_id: str
    outcome: str
    name: str | None = None
    checkpoint: str = ""
    error: str | None = None
    last_batch_id: int = -1
    started_at_ms: int = 0
    ended_at_ms: int = 0
    metrics: dict[str, Any] = field(default_factory=dict)
    state_root: str = ""
    retain: int = 100  # Spark's default minBatchesToRetain
    orphan_margin_s: float = float(BY_KEY["orphanMarginSeconds"].default)

    def __post_init__(self) -> None:
        check_run_key(self.run_key)
        if self.outcome not in OUTCOMES:
            raise ResultStoreError(f"run {self.run_key}: outcome {self.outcome!r} is not one "
                                   f"of {', '.join(OUTCOMES)}")

    def to_entry(self) -> bytes:
        return json.dumps({"version": ENTRY_VERSION, "result": asdict(self)},
                          indent=1, sort_keys=True).encode()

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> QueryResult:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in known})

    @classmethod
    def from_entry(cls, data: bytes, where: str) -> QueryResult:
        """The result in an entry file, refused (naming `where`) unless it is a version-1
        entry with a valid result."""
        try:
            raw = json.loads(data)
        except ValueError as e:
            raise CorruptFileError(f"{where} is not valid JSON: {e}") from e
        if not isinstance(raw, dict) or not isinstance(raw.get("result"), dict):
            raise CorruptFileError(f"{where} is not a result store entry")
        if raw.get("version") != ENTRY_VERSION:
            raise CorruptFileError(f"{where} has version {raw.get('version')}; this build "
                                   f"reads version {ENTRY_VERSION}")
        try:
            return cls.from_dict(raw["result"])
        except (TypeError, ResultStoreError) as e:
            raise CorruptFileError(f"{where} holds an invalid result: {e}") from e

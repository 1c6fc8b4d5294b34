"""The records this project keeps in a Spark checkpoint directory about restores: each
read and checked in one place (names.py checks every name in them).

  _restore.json          in a restored checkpoint, written first: what it was restored from
                         (a rerun of an interrupted restore resumes it, same query id)
  _claimed.json          in a source a CLAIM restore took over (put-if-absent): its files are
                         the claiming query's; its own query must never run or collect again
  _claim_released.json   in a claimed source, once the claimer needs none of its files
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone

from ..errors import CorruptFileError
from .manifest import checked_record
from .names import file_name, root_url
from .storage import Storage

RESTORE_RECORD = "_restore.json"
CLAIM_MARKER = "_claimed.json"
CLAIM_RELEASE = "_claim_released.json"
FORMAT_VERSION = 1


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class ClaimMarker:
    """Published in a source when a CLAIM restore takes its files over."""

    query_id: str  # the claiming (restored) query
    checkpoint: str  # where it runs
    batch: int
    claimed_at: str = field(default_factory=now_iso)
    format_version: int = FORMAT_VERSION
    kind: str = "pyrocks-claim"

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @staticmethod
    def from_json(data: bytes, where: str) -> ClaimMarker:
        raw = checked_record(data, where, "pyrocks-claim", FORMAT_VERSION)
        try:
            return ClaimMarker(file_name(raw["query_id"], where, "query_id"),
                               root_url(raw["checkpoint"], where, "checkpoint"),
                               int(raw["batch"]), str(raw["claimed_at"]))
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptFileError(f"{where} is not a valid claim marker: {e!r}") from e


@dataclass(frozen=True)
class ClaimRelease:
    """Published in a claimed source once no retained version of the claiming query uses
    any of its files: what remains of the source may be deleted. The claim stays (the
    source's own query must never run again: its claimed files are gone)."""

    query_id: str  # the claiming query
    checkpoint: str
    released_at: str = field(default_factory=now_iso)
    format_version: int = FORMAT_VERSION
    kind: str = "pyrocks-claim-release"

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @staticmethod
    def from_json(data: bytes, where: str) -> ClaimRelease:
        raw = checked_record(data, where, "pyrocks-claim-release", FORMAT_VERSION)
        try:
            return ClaimRelease(file_name(raw["query_id"], where, "query_id"),
                                root_url(raw["checkpoint"], where, "checkpoint"),
                                str(raw["released_at"]))
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptFileError(f"{where} is not a valid claim release: {e!r}") from e


def read_claim(storage: Storage) -> ClaimMarker | None:
    """The claim marker of a savepoint or checkpoint directory, if it was claimed."""
    data = storage.read_if_exists(CLAIM_MARKER)
    return None if data is None else ClaimMarker.from_json(data, f"{storage.url}/{CLAIM_MARKER}")


@dataclass(frozen=True)
class RestoreRecord:
    """Written first into a restored checkpoint: a rerun of an interrupted restore
    resumes it (same query id) instead of starting a second one."""

    query_id: str
    source: str
    batch: int
    mode: str
    created_at: str = field(default_factory=now_iso)
    format_version: int = FORMAT_VERSION
    kind: str = "pyrocks-restore"

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @staticmethod
    def from_json(data: bytes, where: str) -> RestoreRecord:
        raw = checked_record(data, where, "pyrocks-restore", FORMAT_VERSION)
        try:
            return RestoreRecord(file_name(raw["query_id"], where, "query_id"),
                                 root_url(raw["source"], where, "source"), int(raw["batch"]),
                                 str(raw["mode"]), str(raw["created_at"]))
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptFileError(f"{where} is not a valid restore record: {e!r}") from e


def claimed_by_other(checkpoint: Storage, query_id: str | None) -> ClaimMarker | None:
    """The claim marker of `checkpoint` if a restore of a query other than `query_id`
    claimed it (its files then belong to that query)."""
    claim = read_claim(checkpoint)
    return claim if claim is not None and claim.query_id != query_id else None


def describe_claim(checkpoint: str, claim: ClaimMarker) -> str:
    return (f"the state of {checkpoint} was claimed by query {claim.query_id} (restored into "
            f"{claim.checkpoint} at batch {claim.batch}, {claim.claimed_at}): its files "
            "belong to that query now, whose GC deletes them")

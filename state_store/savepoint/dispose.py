"""Disposing of a savepoint (`state-store dispose`, Flink's `flink savepoint --dispose`).

Only a savepoint is ever deleted, and only while no query owns it: a CLAIM restore that has
not released it owns its files (its GC deletes them), so disposing of it is refused. A
NO_CLAIM restore never needs the savepoint after it returns (it linked or copied every file
it uses: native_restore.py), so its restores do not hold a savepoint back.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..format.restores import CLAIM_RELEASE, read_claim
from ..format.storage import open_storage
from .layout import DESCRIPTOR, SavepointDescriptor
from .target import SavepointError


@dataclass(frozen=True)
class DisposeInfo:
    path: str
    batch: int
    files: int
    bytes: int


def dispose_savepoint(path: str, *, storage_options: dict | None = None) -> DisposeInfo:
    storage = open_storage(path, storage_options)
    data = storage.read_if_exists(DESCRIPTOR)
    if data is None:
        raise SavepointError(f"{path} is not a savepoint (no {DESCRIPTOR}): dispose deletes "
                             "savepoints only")
    descriptor = SavepointDescriptor.from_json(data, storage.path(DESCRIPTOR))
    claim = read_claim(storage)
    if claim is not None and storage.read_if_exists(CLAIM_RELEASE) is None:
        raise SavepointError(
            f"savepoint {path} is claimed by query {claim.query_id} (restored into "
            f"{claim.checkpoint} with CLAIM): its files are that query's now, and its own GC "
            "deletes them once no retained version needs them")
    storage.delete_tree("")
    return DisposeInfo(storage.url, descriptor.batch, len(descriptor.files),
                       descriptor.total_bytes)

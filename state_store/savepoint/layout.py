"""The records of savepoints and restores, and where each lives.

A savepoint directory (user-owned; nothing of this project ever deletes it):
  _savepoint.json        the descriptor, published last (put-if-absent): a directory
                         without it is an incomplete savepoint and is never used
  checkpoint/...         Spark's files batch N needs: metadata, offsets/, commits/,
                         sources/ and the operator and schema metadata under state/
  stores/<key>/          one store root per store (manifests/, snapshots/, files/),
                         holding exactly its version N + 1; <key> is the store's place
                         under Spark's state/ directory: <op>/<part>[/<store name>]
  _claimed.json          present once a CLAIM restore took the savepoint's files over

A canonical savepoint has the same descriptor and checkpoint/, and instead of stores/:
  canonical/<op>/<store name>/*.parquet
                         every row of the store at batch N: columns partition_id, key and
                         value, key and value typed (structs) from Spark's state schema

A restored checkpoint additionally holds `_restore.json` (what it was restored from; written
first) and a seed per store (seeding.py); `_claimed.json` in a source checkpoint marks it
claimed.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from ..errors import CorruptFileError
from ..format.manifest import checked_record
from ..format.names import file_name, relative_path, root_url
from ..format.restores import now_iso
from ..format.storage import Written

DESCRIPTOR = "_savepoint.json"
CHECKPOINT_DIR = "checkpoint"
STORES_DIR = "stores"
CANONICAL_DIR = "canonical"
FORMAT_VERSION = 1
NATIVE = "native"
CANONICAL = "canonical"
FORMATS = (NATIVE, CANONICAL)


@dataclass(frozen=True)
class SavedFile:
    path: str  # relative to the savepoint directory
    size: int
    checksum: str

    @property
    def written(self) -> Written:
        return Written(self.size, self.checksum)


@dataclass(frozen=True)
class CanonicalStore:
    """One store of a canonical savepoint: where its rows are and how to write them back."""

    operator: int
    operator_name: str  # as Spark's state-metadata source names it, e.g. symmetricHashJoin
    store_name: str  # "default", or a join's e.g. left-keyToNumValues
    partitions: int
    prefix_key_columns: int  # Spark's numColsPrefixKey: > 0 for prefix-scanned keys
    key_schema: str  # Spark's StructType JSON of the store's key
    value_schema: str
    route_columns: list[str]  # the key fields Spark partitions by (routing.py)
    rows: int

    @property
    def path(self) -> str:
        return f"{CANONICAL_DIR}/{self.operator}/{self.store_name}"

    @staticmethod
    def from_dict(raw: dict, where: str, field: str) -> CanonicalStore:
        return CanonicalStore(
            int(raw["operator"]), str(raw["operator_name"]),
            file_name(raw["store_name"], where, f"{field}.store_name"),
            int(raw["partitions"]), int(raw["prefix_key_columns"]), str(raw["key_schema"]),
            str(raw["value_schema"]), [str(c) for c in raw["route_columns"]], int(raw["rows"]))


@dataclass(frozen=True)
class SavepointDescriptor:
    source_query_id: str
    source: str  # the checkpoint (or savepoint) it was taken of
    batch: int  # the last batch it holds; a restored query resumes at batch + 1
    operators: list[int]
    partitions: dict[str, int]  # operator id -> number of partitions
    stores: list[str]  # store keys (see the module docstring)
    provider: str
    files: list[SavedFile]
    created_at: str = field(default_factory=now_iso)
    format: str = NATIVE
    canonical_stores: list[CanonicalStore] = field(default_factory=list)  # canonical only
    format_version: int = FORMAT_VERSION
    kind: str = "pyrocks-savepoint"

    @property
    def version(self) -> int:
        return self.batch + 1  # Spark's state version after batch N

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True, indent=1).encode()

    @staticmethod
    def from_json(data: bytes, where: str) -> SavepointDescriptor:
        raw = checked_record(data, where, "pyrocks-savepoint", FORMAT_VERSION)
        try:
            return SavepointDescriptor(
                source_query_id=str(raw["source_query_id"]),
                source=root_url(raw["source"], where, "source"),
                batch=int(raw["batch"]), operators=[int(o) for o in raw["operators"]],
                partitions={str(k): int(v) for k, v in raw["partitions"].items()},
                stores=[relative_path(s, where, f"stores[{i}]")
                        for i, s in enumerate(raw["stores"])],
                provider=str(raw["provider"]),
                files=[SavedFile(relative_path(f["path"], where, f"files[{i}].path"),
                                 int(f["size"]), str(f["checksum"]))
                       for i, f in enumerate(raw["files"])],
                created_at=str(raw["created_at"]), format=str(raw["format"]),
                canonical_stores=[CanonicalStore.from_dict(c, where, f"canonical_stores[{i}]")
                                  for i, c in enumerate(raw.get("canonical_stores", []))])
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CorruptFileError(f"{where} is not a valid savepoint descriptor: {e!r}") from e

    def written(self) -> dict[str, Written]:
        """What each file must read back as, by its path in the savepoint."""
        return {f.path: f.written for f in self.files}


@dataclass(frozen=True)
class SavepointInfo:
    """What `savepoint` and `stop_with_savepoint` return (contract)."""

    path: str
    batch: int
    source_query_id: str
    operators: list[int]
    partitions: dict[str, int]
    stores: int
    files: int
    bytes: int
    format: str = NATIVE

    @staticmethod
    def of(path: str, descriptor: SavepointDescriptor) -> SavepointInfo:
        return SavepointInfo(path, descriptor.batch, descriptor.source_query_id,
                             descriptor.operators, descriptor.partitions,
                             len(descriptor.stores), len(descriptor.files),
                             descriptor.total_bytes, descriptor.format)


@dataclass(frozen=True)
class RestoreInfo:
    """What `restore` returns: the new checkpoint and the query id it will run under."""

    checkpoint: str
    query_id: str
    source: str
    batch: int
    mode: str
    stores: int

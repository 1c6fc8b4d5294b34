"""What a savepoint or a restore reads from: a Spark checkpoint or a savepoint.

Both give the same view (`Source`): the query id and batch, the Spark files that batch
needs (relative paths, the same in the source and in what is written from it), and the
root of every store at the batch's version. Nothing here writes.

What Spark needs to resume after batch N (MicroBatchExecution): `metadata` (the query id),
offsets N - 1 and N (N's are the batch's end, N - 1's its start), commit N (N is done), each
source's log up to N (a file source's list of files seen), and the operator and schema
metadata under state/. Spark's state version after batch N is N + 1.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from urllib.parse import urlparse

import fsspec

from ..errors import ForeignCheckpointError, StateStoreError, VersionNotFoundError
from ..format.seeding import SEED_FILE, trusted_roots
from ..format.storage import Storage, Written, open_storage
from ..format.store_root import FOREIGN_SUFFIXES, QUERY_DIR_PREFIX, StoreRoot, query_dir
from .layout import (
    CHECKPOINT_DIR,
    DESCRIPTOR,
    NATIVE,
    STORES_DIR,
    ClaimMarker,
    SavepointDescriptor,
    read_claim,
)

METADATA, OFFSETS, COMMITS, SOURCES, STATE = "metadata", "offsets", "commits", "sources", "state"
DEFAULT_STORE = "default"
OPERATOR_METADATA = "_metadata/metadata"  # state/<op>/_metadata/metadata: Spark's, v1
PARTITIONS_CONF = "spark.sql.shuffle.partitions"


class SourceError(StateStoreError):
    """The source of a savepoint or a restore is missing, incomplete or unusable."""


@dataclass(frozen=True)
class Source:
    url: str  # absolute, as workers will open it
    storage: Storage  # where the claim marker goes
    kind: str  # "checkpoint" or "savepoint"
    query_id: str
    batch: int
    spark_root: Storage  # Spark's files, at the same relative paths as in a checkpoint
    spark_files: list[str]
    stores: dict[str, Storage]  # store key -> store root holding version batch + 1
    # What each Spark file must read back as (a savepoint records it; a checkpoint does not).
    spark_written: dict[str, Written]
    trusted: dict[str, frozenset[str]]  # store key -> roots its records may name

    @property
    def version(self) -> int:
        return self.batch + 1

    def claim(self) -> ClaimMarker | None:
        return read_claim(self.storage)

    def checkpoint_of(self, key: str) -> StoreRoot:
        return StoreRoot(self.stores[key], f"store {key} of {self.url}",
                          trusted_roots=self.trusted.get(key, frozenset()))

    def read_spark_file(self, rel: str) -> bytes:
        """A Spark file of the batch, checked against the savepoint's record of it."""
        what = f"Spark file {rel} of {self.url}"
        written = self.spark_written.get(rel)
        if written is None:
            return self.spark_root.read(rel, what)
        return self.spark_root.read_verified(rel, written, what)


def absolute_url(url: str) -> str:
    """`url` with a local path made absolute: workers resolve it from another directory."""
    if url.startswith("file:"):  # Hadoop's spelling of a local path: file:/x or file:///x
        return os.path.abspath(urlparse(url).path)
    protocol, path = fsspec.core.split_protocol(url)
    if protocol in (None, "local"):
        return os.path.abspath(path)
    return url.rstrip("/")


def open_source(url: str, batch: int | None, storage_options: dict | None = None,
                root_url: str | None = None, root_options: dict | None = None) -> Source:
    """A savepoint (it has a descriptor) or a checkpoint (it has Spark's metadata)."""
    url = absolute_url(url)
    storage = open_storage(url, storage_options)
    descriptor = storage.read_if_exists(DESCRIPTOR)
    if descriptor is not None:
        return _savepoint_source(url, storage, descriptor, batch)
    if storage.read_if_exists(METADATA) is not None:
        return _checkpoint_source(url, storage, batch, root_url, root_options)
    if storage.list_dirs(CHECKPOINT_DIR) or storage.list_dirs(STORES_DIR):
        raise SourceError(f"{url} is an incomplete savepoint (no {DESCRIPTOR}): it was "
                          "interrupted while being written and cannot be used; take it again")
    raise SourceError(f"{url} is neither a savepoint (no {DESCRIPTOR}) nor a Spark checkpoint "
                      f"(no {METADATA})")


def _savepoint_source(url: str, storage: Storage, data: bytes, batch: int | None) -> Source:
    descriptor = SavepointDescriptor.from_json(data, f"{url}/{DESCRIPTOR}")
    if descriptor.format != NATIVE:
        raise SourceError(f"{url} is a {descriptor.format} savepoint: restore it (state-store "
                          "restore), or copy its directory to move it")
    if batch is not None and batch != descriptor.batch:
        raise SourceError(f"savepoint {url} holds batch {descriptor.batch}, not batch {batch}")
    spark_root = storage.child(CHECKPOINT_DIR)
    prefix = f"{CHECKPOINT_DIR}/"
    written = {f.path[len(prefix):]: f.written for f in descriptor.files
               if f.path.startswith(prefix)}
    stores = {key: storage.child(f"{STORES_DIR}/{key}") for key in descriptor.stores}
    return Source(url, storage, "savepoint", descriptor.source_query_id, descriptor.batch,
                  spark_root, list(written), stores, written, {})


def _checkpoint_source(url: str, storage: Storage, batch: int | None, root_url: str | None,
                       root_options: dict | None) -> Source:
    spark = SparkCheckpoint(storage)
    query_id = spark.query_id()
    batch = spark.committed_batch(batch)
    stores = spark.walk_state(query_id)
    if root_url:
        stores = stores_under_root(open_storage(root_url, root_options), query_id)
    if not stores:
        raise SourceError(f"checkpoint {url} holds no state of this provider for query "
                          f"{query_id}" + ("" if root_url else
                                           " (if the query set rootUrl, pass it as root_url)"))
    spark.refuse_missing_stores(stores, batch)
    trusted = {key: trusted_roots(storage.child(f"{STATE}/{key}"), query_id) for key in stores}
    for key, root in stores.items():
        if batch + 1 not in StoreRoot(root, key).versions():
            raise VersionNotFoundError(
                f"store {key} of checkpoint {url} no longer retains version {batch + 1} "
                f"(batch {batch}); choose a later batch")
    files = [METADATA, *spark.batch_logs(batch), *spark.spark_state_metadata()]
    return Source(url, storage, "checkpoint", query_id, batch, storage, files, stores, {},
                  trusted)


class SparkCheckpoint:
    """Reads what Spark keeps in a checkpoint directory."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def query_id(self) -> str:
        data = self.storage.read_if_exists(METADATA)
        try:
            return str(json.loads((data or b"").splitlines()[0])["id"])
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise SourceError(f"{self.storage.url}/{METADATA} does not hold a streaming query id"
                              f" ({e!r})") from e

    def committed_batches(self) -> list[int]:
        return sorted(int(n) for n in self.storage.list_names(COMMITS) if n.isdigit())

    def committed_batch(self, batch: int | None) -> int:
        """`batch` if it is committed, the latest committed batch for None; else refuses."""
        committed = self.committed_batches()
        url = self.storage.url
        if not committed:
            raise SourceError(f"checkpoint {url} has no committed batch (nothing in {COMMITS}/)")
        if batch is None:
            return committed[-1]
        if batch not in committed:
            raise SourceError(f"batch {batch} of checkpoint {url} is not committed (committed "
                              f"batches retained: {committed[0]}..{committed[-1]})")
        return batch

    def batch_conf(self, batch: int) -> dict[str, str]:
        """The SQL conf Spark recorded in offsets `batch` (and reuses on every restart)."""
        where = f"{self.storage.url}/{OFFSETS}/{batch}"
        lines = self.storage.read(f"{OFFSETS}/{batch}", where).decode().splitlines()
        try:
            return {str(k): str(v) for k, v in json.loads(lines[1])["conf"].items()}
        except (ValueError, KeyError, IndexError, AttributeError) as e:
            raise SourceError(f"{where} is not a Spark offset log entry ({e!r})") from e

    def spark_state_metadata(self) -> list[str]:
        """Every file Spark itself keeps under state/, whatever the provider: operator
        metadata (state/<op>/_metadata/) and state schemas (in `_`-named directories below
        it, e.g. state/<op>/0/_metadata/schema)."""
        found = []
        for path in self.storage.find(STATE):
            parts = path.split("/")[2:-1]  # the directories below state/<op>/
            if (not _is_crc(path) and any(p.startswith("_") for p in parts)
                    and not any(p.startswith(QUERY_DIR_PREFIX) for p in parts)):
                found.append(path)
        return found

    def batch_logs(self, batch: int) -> list[str]:
        """Offsets N - 1 and N, commit N, and each source's log entries up to N."""
        offsets = set(self.storage.list_names(OFFSETS))
        if str(batch) not in offsets or (batch > 0 and str(batch - 1) not in offsets):
            raise SourceError(f"{self.storage.url}/{OFFSETS} lacks the offsets of batch {batch}"
                              f"{' or ' + str(batch - 1) if batch > 0 else ''}")
        logs = [f"{OFFSETS}/{b}" for b in (batch - 1, batch) if b >= 0]
        logs.append(f"{COMMITS}/{batch}")
        logs += [p for p in self.storage.find(SOURCES) if _up_to(p, batch)]
        return logs

    def walk_state(self, query_id: str) -> dict[str, Storage]:
        """The root of each store of `query_id` under state/, by key. Refuses state of
        another provider."""
        stores: dict[str, Storage] = {}
        own = query_dir(query_id)
        for op in self.storage.list_dirs(STATE):
            for entry in self.storage.list_dirs(f"{STATE}/{op}"):
                where = f"{STATE}/{op}/{entry}"
                if entry.startswith("_"):
                    continue  # Spark's operator metadata
                self._refuse_foreign(where)
                for key, root in _store_roots(self.storage, where, f"{op}/{entry}", own):
                    stores[key] = root
        return stores

    def expected_stores(self, batch: int, found: dict[str, Storage]) -> dict[str, list[str]]:
        """Every store key each stateful operator has, by operator id: from Spark's operator
        metadata (`state/<op>/_metadata/metadata`, its stores and partition counts), or, for
        an operator without it, every partition of the recorded partition count with every
        store name any of its partitions has."""
        expected: dict[str, list[str]] = {}
        operators = {key.split("/")[0] for key in found} | set(self.storage.list_dirs(STATE))
        for op in sorted(operators, key=lambda o: (len(o), o)):
            stores = self.operator_stores(op)
            if stores is None:
                if not any(key.split("/")[0] == op for key in found):
                    continue  # no state of this operator at all (another provider's dir)
                names = {_store_name(key) for key in found if key.split("/")[0] == op}
                partitions = int(self.batch_conf(batch).get(PARTITIONS_CONF, "0"))
                stores = [(name, partitions) for name in sorted(names)]
            expected[op] = [_store_key(op, p, name) for name, count in stores
                            for p in range(count)]
        return expected

    def operator_stores(self, op: str) -> list[tuple[str, int]] | None:
        """(store name, partition count) of each store Spark's operator metadata lists for
        operator `op`; None where there is none (or it is not the v1 layout)."""
        rel = f"{STATE}/{op}/{OPERATOR_METADATA}"
        data = self.storage.read_if_exists(rel)
        if data is None:
            return None
        version, _, body = data.decode(errors="replace").partition("\n")
        if version.strip() != "v1":
            return None
        try:
            infos = json.loads(body)["stateStoreInfo"]
            return [(str(i["storeName"]), int(i["numPartitions"])) for i in infos]
        except (ValueError, KeyError, TypeError) as e:
            raise SourceError(f"{self.storage.url}/{rel} is not Spark's operator metadata "
                              f"({e!r})") from e

    def refuse_missing_stores(self, found: dict[str, Storage], batch: int) -> None:
        """Refuses a checkpoint in which a store of a stateful operator is missing: a
        savepoint or restore of it would silently start that store empty."""
        missing = [key for keys in self.expected_stores(batch, found).values()
                   for key in keys if key not in found]
        if missing:
            raise SourceError(
                f"checkpoint {self.storage.url} lacks {len(missing)} store(s) its operators "
                f"have (per Spark's operator metadata and {PARTITIONS_CONF}): "
                f"{', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}; their state "
                "would be lost")

    def _refuse_foreign(self, partition_dir: str) -> None:
        foreign = [n for n in self.storage.list_names(partition_dir)
                   if n.endswith(FOREIGN_SUFFIXES)]
        if foreign:
            raise ForeignCheckpointError(
                f"{self.storage.url}/{partition_dir} holds state of another state store "
                f"provider ({', '.join(foreign[:3])}); a native savepoint holds only this "
                "provider's state")


def _store_roots(storage: Storage, partition_dir: str, key: str,
                 own: str) -> list[tuple[str, Storage]]:
    """The stores of one partition: the default store's root sits in the partition's
    directory, a named store's in a directory of its name."""
    found = []
    dirs = storage.list_dirs(partition_dir)
    if own in dirs:
        found.append((key, storage.child(f"{partition_dir}/{own}")))
    for name in dirs:
        if not name.startswith(QUERY_DIR_PREFIX) and own in storage.list_dirs(
                f"{partition_dir}/{name}"):
            found.append((f"{key}/{name}", storage.child(f"{partition_dir}/{name}/{own}")))
    return found


def stores_under_root(root: Storage, query_id: str) -> dict[str, Storage]:
    """Stores of `query_id` under a rootUrl: <root>/<checkpoint hash>/<op>/<part>/<store>/.
    Refuses a query id found under two checkpoint hashes (the checkpoint was moved, or two
    spellings of it were used): which one holds the live state cannot be told."""
    own = query_dir(query_id)
    stores: dict[str, Storage] = {}
    hashes: set[str] = set()
    for path in root.fs.glob(root.path(f"*/*/*/*/{own}")):
        rel = str(path)[len(root.root) + 1:]
        checkpoint, op, part, name, _ = rel.split("/")
        hashes.add(checkpoint)
        stores[_store_key(op, int(part), name)] = root.child(rel)
    if len(hashes) > 1:
        raise SourceError(
            f"the state of query {query_id} under {root.url} sits under {len(hashes)} "
            f"checkpoint locations ({', '.join(sorted(hashes))}): the checkpoint was used under "
            "two paths. Keep the one the query runs with and move the other away")
    return stores


def _store_key(op: str, partition: int, name: str) -> str:
    return f"{op}/{partition}" if name == DEFAULT_STORE else f"{op}/{partition}/{name}"


def _store_name(key: str) -> str:
    parts = key.split("/")
    return parts[2] if len(parts) > 2 else DEFAULT_STORE


def store_location_key(key: str) -> str:
    """Where Spark places a store under state/: the seed of a restored store goes there."""
    return f"{STATE}/{key}/{SEED_FILE}"


def _up_to(path: str, batch: int) -> bool:
    """A source log entry (`N` or `N.compact`) of a batch up to `batch`, or another file."""
    if _is_crc(path):
        return False
    stem = path.rsplit("/", 1)[-1].removesuffix(".compact")
    return not stem.isdigit() or int(stem) <= batch


def _is_crc(path: str) -> bool:
    """Hadoop's checksum side files: stale once their file is rewritten (the metadata)."""
    return path.rsplit("/", 1)[-1].endswith(".crc")

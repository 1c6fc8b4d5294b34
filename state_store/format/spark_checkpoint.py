"""What Spark keeps in a checkpoint directory, read in one place, and where this
provider's stores sit in it.

  metadata                     the query id (the same across restarts)
  offsets/<N>, commits/<N>     batch N planned (its offsets and the conf Spark reuses on
                               every restart), batch N done
  sources/<i>/<N>[.compact]    each source's log (a file source's list of files seen)
  state/<op>/_metadata/...     operator metadata (stores, partition counts, key layouts)
  state/<op>/<part>[/<store>]/_metadata/schema   state schemas
  state/<op>/<part>[/<store>]/ a store's place: its root is query-<query id>/ inside it,
                               unless the query keeps its state under a rootUrl, then
                               <rootUrl>/<checkpoint hash>/<op>/<part>/<store>/query-<id>/

What Spark needs to resume after batch N (MicroBatchExecution): `metadata`, offsets N - 1 and
N (N's are the batch's end, N - 1's its start), commit N, each source's log up to N, and
the operator and schema metadata under state/. Spark's state version after batch N is N + 1.
"""

from __future__ import annotations

import json

from ..errors import ForeignCheckpointError, StateStoreError
from .storage import Storage
from .store_root import FOREIGN_SUFFIXES, QUERY_DIR_PREFIX, query_dir

METADATA, OFFSETS, COMMITS, SOURCES, STATE = "metadata", "offsets", "commits", "sources", "state"
DEFAULT_STORE = "default"
OPERATOR_METADATA = "_metadata/metadata"  # state/<op>/_metadata/metadata: Spark's, v1
PARTITIONS_CONF = "spark.sql.shuffle.partitions"


class SourceError(StateStoreError):
    """A checkpoint (or savepoint) read as the source of a savepoint, a restore or a cleanup
    is missing, incomplete or unusable."""


def query_id_of(storage: Storage) -> str | None:
    """The query id in `<checkpoint>/metadata`; None where `storage` holds no such file."""
    if storage.read_if_exists(METADATA) is None:
        return None
    return SparkCheckpoint(storage).query_id()


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

    def commit_format(self, batch: int) -> int:
        """The format version of commit `batch` (2: it names state store checkpoint ids,
        spark.sql.streaming.stateStore.checkpointFormatVersion=2)."""
        where = f"{self.storage.url}/{COMMITS}/{batch}"
        head = self.storage.read(f"{COMMITS}/{batch}", where).split(b"\n", 1)[0].strip()
        if not (head.startswith(b"v") and head[1:].isdigit() and len(head) < 6):
            raise SourceError(f"{where} is not a Spark commit log entry (first line {head!r})")
        return int(head[1:])

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
    for rel in root.glob(f"*/*/*/*/{own}"):
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


def store_location(key: str) -> str:
    """Where Spark places store `key` (`<op>/<part>[/<store name>]`) under a checkpoint."""
    return f"{STATE}/{key}"


def _up_to(path: str, batch: int) -> bool:
    """A source log entry (`N` or `N.compact`) of a batch up to `batch`, or another file."""
    if _is_crc(path):
        return False
    stem = path.rsplit("/", 1)[-1].removesuffix(".compact")
    return not stem.isdigit() or int(stem) <= batch


def _is_crc(path: str) -> bool:
    """Hadoop's checksum side files: stale once their file is rewritten (the metadata)."""
    return path.rsplit("/", 1)[-1].endswith(".crc")

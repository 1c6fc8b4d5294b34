"""Starting a store root from a version kept in another root (FLIP-193's restore modes).

`copy_version` publishes, in a target root, a snapshot and a manifest that rebuild one
version of a source root, in one of two ways:
  copy   every file the version needs is duplicated into the target (hard link, server-side
         copy): a savepoint is taken this way, and a NO_CLAIM restore forces its first
         snapshot full this way, so from then on the target references nothing of the source.
  claim  the target's records reference the source's files (owner CLAIMED, with their root):
         nothing is copied, and the target's GC deletes them once no retained version needs
         them (checkpoint.plan_garbage).
Either way the records keep the source's lineage strings, so whichever concurrent seeder
publishes the snapshot, any seeder's manifest may start from it.

A restore does not write state: it leaves a seed (`Seed`, `<store location>/_seed.json`)
where Spark will open each store of the restored query, and the store's first open applies
it (`apply_seed`) before loading anything. Seeding is idempotent: it does nothing once the
root holds a version, and a lost publish race discards only the loser's own copies.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace

from .checkpoint import Checkpoint, open_root
from .errors import CorruptFileError
from .manifest import Changelog, FileRef, Manifest, Owner, checked_record, file_path
from .storage import Storage

SEED_FILE = "_seed.json"
SEED_KIND = "pyrocks-restore-seed"
SEED_FORMAT = 1
NO_CLAIM, CLAIM = "no-claim", "claim"
_COPY_THREADS = 8
MODES = (NO_CLAIM, CLAIM)

# Called with each file as it is placed in the target (for progress bars).
OnFile = Callable[[FileRef], None]


@dataclass(frozen=True)
class Seed:
    """What one store of a restored query starts from."""

    query_id: str  # the restored query: only it applies the seed (a reset query does not)
    source: str  # the savepoint or checkpoint restored from, as the user named it
    source_root: str  # URL of this store's root in the source
    version: int  # the store version to start at (Spark's version for batch N is N + 1)
    mode: str  # NO_CLAIM or CLAIM
    format_version: int = SEED_FORMAT
    kind: str = SEED_KIND

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @staticmethod
    def from_json(data: bytes, where: str) -> Seed:
        raw = checked_record(data, where, SEED_KIND, SEED_FORMAT)
        try:
            seed = Seed(str(raw["query_id"]), str(raw["source"]), str(raw["source_root"]),
                        int(raw["version"]), str(raw["mode"]))
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptFileError(f"{where} is not a valid restore seed: {e!r}") from e
        if seed.mode not in MODES:
            raise CorruptFileError(f"{where} has unknown restore mode {seed.mode!r}")
        return seed


def read_seed(location: Storage) -> Seed | None:
    data = location.read_if_exists(SEED_FILE)
    return None if data is None else Seed.from_json(data, f"{location.url}/{SEED_FILE}")


def apply_seed(location: Storage, target: Checkpoint, query_id: str) -> Seed | None:
    """Seeds `target` from the seed at `location` (a store's Spark location) if there is
    one for this query and the root holds no version yet; returns the seed applied."""
    seed = read_seed(location)
    if seed is None or seed.query_id != query_id or target.versions():
        return None
    source = Checkpoint(open_root(seed.source_root, target.storage),
                        f"{target.store_name} (restoring from {seed.source})")
    copy_version(source, seed.version, target, claim=seed.mode == CLAIM)
    return seed


def copy_version(source: Checkpoint, version: int, target: Checkpoint, claim: bool,
                 on_file: OnFile | None = None) -> Manifest:
    """Publishes in `target` what rebuilds `version` of `source`: the snapshot `source`
    would load it from (if any) and a manifest whose chain replays the rest."""
    plan = source.plan_load(version)
    # A version whose base is its own snapshot keeps just its own changelog.
    chain = plan.changelogs or [plan.manifest.changelogs[-1]]
    files = [*(plan.snapshot.files if plan.snapshot else []), *(c.file for c in chain)]
    placed = _place_all(files, _claimer(source) if claim else _copier(source, target), on_file)
    snapshot = plan.snapshot
    if snapshot is not None:
        snapshot = replace(snapshot, files=placed[:len(snapshot.files)])
    manifest = Manifest(
        version, None if snapshot is None else snapshot.version,
        [Changelog(c.version, ref) for c, ref in zip(chain, placed[-len(chain):], strict=True)],
        plan.manifest.num_keys, plan.manifest.column_families,
        base_lineage="" if snapshot is None else snapshot.lineage,
        writer=f"seeded from {source.storage.url}")
    if snapshot is not None and not target.publish_snapshot(snapshot):
        target.discard_unpublished(snapshot.files)  # a concurrent seeder's serves as well
    if not target.publish_manifest(manifest):
        target.discard_unpublished([c.file for c in manifest.changelogs])
    return manifest


def _place_all(files: list[FileRef], place: Callable[[FileRef], FileRef],
               on_file: OnFile | None) -> list[FileRef]:
    """`place` applied to every file, in order. Copies are independent requests (S3 serves
    them concurrently), so they run on a few threads."""
    lock = threading.Lock()

    def one(ref: FileRef) -> FileRef:
        new = place(ref)
        if on_file is not None:
            with lock:
                on_file(new)
        return new

    with ThreadPoolExecutor(max_workers=_COPY_THREADS) as pool:
        return list(pool.map(one, files))


def _copier(source: Checkpoint, target: Checkpoint) -> Callable[[FileRef], FileRef]:
    def copy(ref: FileRef) -> FileRef:
        stem = uuid.uuid4().hex
        name = f"{stem}-{ref.local_name}" if ref.local_name else f"{stem}.changelog"
        target.storage.duplicate(file_path(ref.name), file_path(name), source.storage_of(ref),
                                 ref.size)
        return replace(ref, name=name, owner=Owner.OWNED, root="")

    return copy


def _claimer(source: Checkpoint) -> Callable[[FileRef], FileRef]:
    def claim(ref: FileRef) -> FileRef:
        if ref.owner is Owner.SHARED:
            raise CorruptFileError(
                f"{source.store_name}: file {ref.name} is read-only to its query and cannot "
                "be claimed")
        return replace(ref, owner=Owner.CLAIMED, root=ref.root or source.storage.url)

    return claim

"""Starting a store root from a version kept in another root (FLIP-193's restore modes).

`copy_version` publishes, in a target root, a snapshot and a manifest that rebuild one
version of a source root, in one of two ways:
  copy   every file the version needs is duplicated into the target (hard link, server-side
         copy) and verified against its recorded size and checksum before anything is
         published: a savepoint is taken this way, and a NO_CLAIM restore copies each store
         this way, so from then on the target references nothing of the source.
  claim  the target's records reference the source's files (owner CLAIMED, with their root):
         nothing is copied, and the target's GC deletes them once no retained version needs
         them (checkpoint.plan_garbage). Claimed files are verified by the loads that read
         them, as every durable file is.
Either way the records keep the source's lineage strings, so whichever concurrent seeder
publishes the snapshot, any seeder's manifest may start from it; and the manifest keeps the
source version's commit id, which a restored query's commit log names (format version 2).

A restore leaves a seed (`Seed`, `<store location>/_seed.json`) where Spark will open each
store of the restored query; the store's first open applies it (`apply_seed`) before loading
anything:
  no-claim  the restore already copied the store's version: into `<location>/query-<id>/`,
            which is the store's root unless the query keeps its state under a rootUrl, or,
            given the restored query's rootUrl, into `<rootUrl>/_restored/<id>/<op>/<part>/
            <store>/` (`staged_path`), on the filesystem the state will live on. The first
            open of a store whose root is elsewhere copies the staged version into it (a
            server-side copy where both are on one endpoint) and removes the staged copy.
            The seed names no path: where to look is derived from the store's own location,
            rootUrl and query id.
  claim     the seed names the source root and every root the claimed version's files live
            in (`roots`): the only roots other than its own that the store's records may name
            (checkpoint.StoreRoot.trusted_roots). The claim marker in the source keeps the
            source's query from running (and collecting garbage) again.
Seeding is idempotent: it does nothing once the root holds a version, and a lost publish
race discards only the loser's own copies.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace

from ..errors import CorruptFileError
from .lineage import LoadPlan
from .manifest import Changelog, FileRef, Manifest, Owner, checked_record, file_path
from .names import file_name, root_url
from .storage import Storage
from .store_root import StoreRoot, open_root, query_dir

SEED_FILE = "_seed.json"
RESTORED_DIR = "_restored"  # under a rootUrl: no-claim restores' copies, per query
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
    version: int  # the store version to start at (Spark's version for batch N is N + 1)
    mode: str  # NO_CLAIM or CLAIM
    source_root: str = ""  # CLAIM: URL of this store's root in the source
    roots: tuple[str, ...] = ()  # CLAIM: every root the claimed files live in
    format_version: int = SEED_FORMAT
    kind: str = SEED_KIND

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @staticmethod
    def from_json(data: bytes, where: str) -> Seed:
        raw = checked_record(data, where, SEED_KIND, SEED_FORMAT)
        try:
            mode = str(raw["mode"])
            if mode not in MODES:
                raise CorruptFileError(f"{where} has unknown restore mode {mode!r}")
            claim = mode == CLAIM
            # A no-claim seed names a root only if written before no-claim restores copied
            # at once: its store is copied from there at first open, as then.
            source_root = raw.get("source_root") or ""
            source_root = source_root and root_url(source_root, where, "source_root")
            # Seeds written before `roots` existed name one root: the source's.
            roots = raw.get("roots", [source_root] if claim else [])
            seed = Seed(
                query_id=file_name(raw["query_id"], where, "query_id"),
                source=root_url(raw["source"], where, "source"),
                version=int(raw["version"]), mode=mode, source_root=source_root,
                roots=tuple(root_url(r, where, f"roots[{i}]")
                            for i, r in enumerate(roots)) if claim else ())
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptFileError(f"{where} is not a valid restore seed: {e!r}") from e
        if claim and seed.source_root not in seed.roots:
            raise CorruptFileError(f"{where}: its source_root {seed.source_root!r} is not among "
                                   f"its roots {list(seed.roots)}")
        return seed


def read_seed(location: Storage) -> Seed | None:
    data = location.read_if_exists(SEED_FILE)
    return None if data is None else Seed.from_json(data, f"{location.url}/{SEED_FILE}")


def trusted_roots(location: Storage, query_id: str) -> frozenset[str]:
    """The roots other than its own that records of `query_id`'s store at `location` (its
    place under Spark's state/ directory) may name: those its CLAIM restore recorded."""
    seed = read_seed(location)
    if seed is None or seed.query_id != query_id:
        return frozenset()
    return frozenset(seed.roots)


def staged_path(query_id: str, store_path: str) -> str:
    """Where a no-claim restore stages a store under the restored query's rootUrl:
    `store_path` is `<op>/<part>/<store name>`."""
    return f"{RESTORED_DIR}/{query_id}/{store_path}"


def apply_seed(location: Storage, target: StoreRoot, query_id: str,
               staged: Storage | None = None) -> Seed | None:
    """Seeds `target` from the seed at `location` (a store's Spark location) if there is
    one for this query and the root holds no version yet; returns the seed applied.
    `staged` is where a no-claim restore would have staged the store under the query's
    rootUrl (`staged_path`); otherwise it staged it in the checkpoint."""
    seed = read_seed(location)
    if seed is None or seed.query_id != query_id or target.versions():
        return None
    if seed.mode == CLAIM:
        source = StoreRoot(open_root(seed.source_root, target.storage),
                            f"{target.store_name} (restoring from {seed.source})",
                            trusted_roots=frozenset(seed.roots))
        copy_version(source, source.plan_load(seed.version), target, claim=True)
        return seed
    candidates = [s for s in (staged, location.child(query_dir(query_id))) if s is not None]
    for copy in candidates:
        if copy.url != target.storage.url and seed.version in StoreRoot(copy, "").versions():
            source = StoreRoot(copy, f"{target.store_name} (restored from {seed.source})")
            copy_version(source, source.plan_load(seed.version), target, claim=False)
            copy.delete_tree("")  # the restore's copy: the store's root holds its own now
            return seed
    if seed.source_root:  # a seed of an earlier build: the copy is made now, from the source
        source = StoreRoot(open_root(seed.source_root, target.storage),
                            f"{target.store_name} (restoring from {seed.source})")
        copy_version(source, source.plan_load(seed.version), target, claim=False)
        return seed
    raise CorruptFileError(
        f"the no-claim restore of {seed.source} left version {seed.version} of this store "
        f"in {' or '.join(c.url for c in candidates)}, and it is not there (removed, or "
        "restored for another rootUrl): restore again")


def copy_version(source: StoreRoot, plan: LoadPlan, target: StoreRoot, claim: bool,
                 on_file: OnFile | None = None, verify: bool = True) -> Manifest:
    """Publishes in `target` what rebuilds the version `plan` loads from `source` (its
    `plan_load`, which the caller may have used already: on an object store each plan
    costs two listings): the snapshot it starts from (if any) and a manifest whose chain
    replays the rest. With `verify` (restores and seeding), copies are checked against
    their records before any record is published, and a damaged source file is named; a
    savepoint copies without reading (its records keep every file's checksum, so damage
    shows when it is verified or restored)."""
    chain = plan.own_chain
    files = plan.copied_files
    place = _claimer(source) if claim else _copier(source, target, verify)
    placed = _place_all(files, place, on_file)
    snapshot = plan.snapshot
    if snapshot is not None:
        snapshot = replace(snapshot, files=placed[:len(snapshot.files)])
    manifest = Manifest(
        plan.manifest.version, None if snapshot is None else snapshot.version,
        [Changelog(c.version, ref) for c, ref in zip(chain, placed[-len(chain):], strict=True)],
        plan.manifest.num_keys, plan.manifest.column_families,
        base_lineage="" if snapshot is None else snapshot.lineage,
        writer=f"seeded from {source.storage.url}", checkpoint_id=plan.manifest.commit_id)
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


def _copier(source: StoreRoot, target: StoreRoot,
            verify: bool) -> Callable[[FileRef], FileRef]:
    def copy(ref: FileRef) -> FileRef:
        stem = uuid.uuid4().hex
        name = f"{stem}-{ref.local_name}" if ref.local_name else f"{stem}.changelog"
        origin = source.storage_of(ref)
        if verify:
            target.storage.duplicate_verified(
                file_path(ref.name), file_path(name), origin, ref.written,
                f"{origin.path(file_path(ref.name))} of {source.store_name}, copied")
        else:
            target.storage.duplicate(file_path(ref.name), file_path(name), origin, ref.size)
        return replace(ref, name=name, owner=Owner.OWNED, root="")

    return copy


def _claimer(source: StoreRoot) -> Callable[[FileRef], FileRef]:
    def claim(ref: FileRef) -> FileRef:
        if ref.owner is Owner.SHARED:
            raise CorruptFileError(
                f"{source.store_name}: file {ref.name} is read-only to its query and cannot "
                "be claimed")
        source.storage_of(ref)  # a root the source itself may not name is refused here
        return replace(ref, owner=Owner.CLAIMED, root=ref.root or source.storage.url)

    return claim


def claimed_roots(source: StoreRoot, plan: LoadPlan) -> tuple[str, ...]:
    """Every root a CLAIM of `plan`'s version of `source` references: the source's own and
    those its own records name (a source that itself claimed another)."""
    return tuple(sorted({ref.root or source.storage.url for ref in plan.copied_files}))

"""What a checkpoint's query still needs outside its own state (contract: the `depends_on`
of `state-store inspect --json`): the sources (savepoints, other checkpoints) any retained
version of its stores still references. `[]` means they may be deleted. A claim's release
(results/cleanup.py) asks the same question.

A store depends on a source while its CLAIM seed is not applied yet (its first open has not
run), and while its records name a file of a root its seed recorded. A no-claim restore
copied every store before it returned: it leaves no dependency. Where a store cannot be
seen (state under a rootUrl the caller did not name), its seed still counts: the answer
errs on the side of keeping a source.
"""

from __future__ import annotations

from ..errors import ForeignCheckpointError
from .seeding import CLAIM, SEED_FILE, Seed
from .spark_checkpoint import STATE, SourceError, SparkCheckpoint, query_id_of, stores_under_root
from .storage import Storage
from .store_root import StoreRoot, query_dir


def depends_on(checkpoint: Storage, state_root: Storage | None = None) -> list[str]:
    """The sources the current query of `checkpoint` still depends on (see the module)."""
    query_id = _query_id(checkpoint)
    if query_id is None:
        return []
    seeds = {key: seed for key, seed in store_seeds(checkpoint).items()
             if seed.query_id == query_id}
    roots = _store_roots(checkpoint, query_id, state_root)
    depends: set[str] = set()
    for key, seed in seeds.items():
        root = roots.get(key) or checkpoint.child(f"{STATE}/{key}/{query_dir(query_id)}")
        if seed.mode == CLAIM and not StoreRoot(root, key).versions():
            depends.add(seed.source)  # the claim is applied at the store's first open
    by_root = {root: seed.source for seed in seeds.values() for root in seed.roots}
    for root in roots.values():
        depends.update(by_root.get(ref, ref) for ref in references(StoreRoot(root, "")))
    return sorted(depends)


def references(root: StoreRoot) -> set[str]:
    """The roots other than its own that any record of `root` names a file in."""
    index = root.index()
    found = set()
    for version in index.versions():
        found |= {c.file.root for c in root.read_manifest(version, index).changelogs}
    for path in index.snapshot_paths():
        snapshot = root.snapshot_if_readable(path)
        found |= {f.root for f in snapshot.files} if snapshot else set()
    return found - {""}


def store_seeds(checkpoint: Storage) -> dict[str, Seed]:
    """The restore seeds of a checkpoint, by store key."""
    seeds = {}
    for path in checkpoint.find(STATE):
        if path.endswith(f"/{SEED_FILE}"):
            key = path[len(STATE) + 1:-len(SEED_FILE) - 1]
            seeds[key] = Seed.from_json(checkpoint.read(path, "restore seed"),
                                        f"{checkpoint.url}/{path}")
    return seeds


def _query_id(checkpoint: Storage) -> str | None:
    try:
        return query_id_of(checkpoint)
    except SourceError:
        return None


def _store_roots(checkpoint: Storage, query_id: str,
                 state_root: Storage | None) -> dict[str, Storage]:
    if state_root is not None:
        return stores_under_root(state_root, query_id)
    try:
        return SparkCheckpoint(checkpoint).walk_state(query_id)
    except ForeignCheckpointError:
        return {}

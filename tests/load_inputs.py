"""What a load of one version depends on, for tests that check every retained version after
every step (the many-writers model, the crash properties).

A load is deterministic in its candidate plans (the records as read now), which of their
files exist (data files are immutable and uniquely named) and nothing else; so a load
already checked with the same inputs and the same expected contents need not run again.
Loads were most of those tests' time; any change in records, files or expectation is
loaded anew, so every state a step reaches is still checked by a real load once.
"""

from __future__ import annotations

from state_store.errors import StateStoreError
from state_store.format import gc
from state_store.format.manifest import FILES_DIR
from state_store.format.store_root import RecordIndex, StoreRoot

Inputs = tuple[int, str, tuple[bool, ...], str]


def present_files(checkpoint: StoreRoot) -> set[str]:
    """The data files of `checkpoint`: one listing, not a request per file."""
    return set(checkpoint.storage.names(FILES_DIR))


def missing_files(checkpoint: StoreRoot, index: RecordIndex) -> list[str]:
    """Files that a retained manifest, or a snapshot one of them may start from, names and
    the store no longer has: garbage collection must never have deleted any."""
    manifests = [checkpoint.read_manifest(v, index) for v in index.versions()]
    needed = {c.file.name for manifest in manifests for c in manifest.changelogs}
    kept, _ = gc.sort_snapshots(checkpoint, index, manifests)
    for path in kept:
        needed |= {f.name for f in checkpoint.read_snapshot_at(path).files}
    return sorted(needed - present_files(checkpoint))


def load_inputs(checkpoint: StoreRoot, version: int, want: dict[bytes, bytes],
                present: set[str], index: RecordIndex | None = None) -> Inputs | None:
    """The inputs of loading `version` and the contents it must give; None when there is
    no plan at all, which only a real load reports. `index`: the records as listed now."""
    try:
        plans = checkpoint.load_plans(version, index)
    except StateStoreError:
        return None
    exists = tuple(ref.name in present for plan in plans for ref in plan.files)
    return version, repr(plans), exists, repr(sorted(want.items()))

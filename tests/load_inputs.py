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
from state_store.format.manifest import FILES_DIR
from state_store.format.store_root import StoreRoot

Inputs = tuple[int, str, tuple[bool, ...], str]


def present_files(checkpoint: StoreRoot) -> set[str]:
    """The data files of `checkpoint`: one listing, not a request per file."""
    return set(checkpoint.storage.names(FILES_DIR))


def load_inputs(checkpoint: StoreRoot, version: int, want: dict[bytes, bytes],
                present: set[str]) -> Inputs | None:
    """The inputs of loading `version` and the contents it must give; None when there is
    no plan at all, which only a real load reports."""
    try:
        plans = checkpoint.load_plans(version)
    except StateStoreError:
        return None
    exists = tuple(ref.name in present for plan in plans for ref in plan.files)
    return version, repr(plans), exists, repr(sorted(want.items()))

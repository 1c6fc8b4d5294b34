"""Lineage: which snapshot is the base of a version, and which versions form its chain.

This module owns every decision about a version's history, as LevelDB's VersionSet owns
the current version: the base of the next version, the next manifest, the chain and lineage
rules, the replay bound, a catch-up to another writer's version, the ways to load a version
and the files each reads, which snapshots a retained version may still start from, and what
a copy of a version keeps. The engine, GC, seeding, savepoints and inspect ask it; it reads
and writes nothing (store_root.py does).

The rules, each enforced here:
  chain    A manifest based on snapshot b holds the changelogs of versions b + 1 .. v in
           order, the last being its own; one based on its own snapshot (b = v) holds just
           its own (`chain_gap`, checked before any manifest is published).
  lineage  A snapshot serves a manifest only if it captures a version of that manifest's
           history: its lineage (the changelog of the version it captures, in the manifest
           of the attempt that made it) is the one the manifest names for that version
           (`can_start_from`). Two attempts of one batch write different changelogs, so a
           losing attempt's snapshot never serves the winner.
  replay   A version's changelogs after its newest usable snapshot stay within the replay
           bound; a commit that would exceed it snapshots first (`Lineage.beyond_bound`).
  catch-up A clean working copy at version c may replay a later manifest's changelogs only
           if that manifest's history holds c (same lineage) and its chain reaches back to
           c; its base then becomes that manifest's base unless its own is newer (the
           newer one is in that history too), so the next chain reaches back to its base.
  empty    A version written from nothing (Spark's loadEmpty) is based on its own snapshot.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import CorruptFileError, StateStoreError
from .manifest import Changelog, FileRef, Manifest, Retention, SnapshotDescriptor

# ---- the rules on records ------------------------------------------------------------------


def lineage_of(manifest: Manifest, version: int) -> str | None:
    """The lineage a snapshot of `version` must carry to serve `manifest`."""
    if version == manifest.snapshot_version:
        return manifest.base_lineage
    return next((c.file.name for c in manifest.changelogs if c.version == version), None)


def can_start_from(manifest: Manifest, snapshot: SnapshotDescriptor) -> bool:
    """Whether loading `manifest`'s version may start from `snapshot` (the lineage rule)."""
    base = manifest.snapshot_version or 0
    return (base <= snapshot.version <= manifest.version
            and snapshot.lineage == lineage_of(manifest, snapshot.version))


def chain_gap(manifest: Manifest) -> str | None:
    """What breaks the chain rule in `manifest`, or None when it holds."""
    base = manifest.snapshot_version or 0
    got = [c.version for c in manifest.changelogs]
    want = ([manifest.version] if base == manifest.version
            else list(range(base + 1, manifest.version + 1)))
    if got != want:
        return (f"version {manifest.version} on base {manifest.snapshot_version} needs "
                f"changelogs {want}, has {got}")
    return None


def check_chain(manifest: Manifest, store: str) -> None:
    """Refuses a manifest that breaks the chain rule: published, it would make its version
    (and every later one) unloadable once GC removes what it skipped."""
    gap = chain_gap(manifest)
    if gap is not None:
        raise StateStoreError(f"refusing to publish a broken manifest of {store}: {gap}")


@dataclass(frozen=True)
class LoadPlan:
    """How to rebuild a version: start from `snapshot` (None = empty), replay `changelogs`."""

    manifest: Manifest
    snapshot: SnapshotDescriptor | None
    changelogs: list[Changelog]

    @property
    def files(self) -> list[FileRef]:
        """Every file the plan reads: the snapshot's, then the changelogs'."""
        return [*(self.snapshot.files if self.snapshot else []),
                *(c.file for c in self.changelogs)]

    @property
    def own_chain(self) -> list[Changelog]:
        """The changelogs a copy of the plan's version keeps (the chain rule): those replayed
        after its snapshot, or, for a version based on its own snapshot, just its own."""
        return self.changelogs or [self.manifest.changelogs[-1]]

    @property
    def copied_files(self) -> list[FileRef]:
        """Every file a copy of the plan's version needs: the snapshot's and `own_chain`'s."""
        return [*(self.snapshot.files if self.snapshot else []),
                *(c.file for c in self.own_chain)]


def load_plans(manifest: Manifest, snapshots: Iterable[SnapshotDescriptor],
               store: str, unreadable: Iterable[str] = ()) -> list[LoadPlan]:
    """Every way to rebuild `manifest`'s version, cheapest first: from each snapshot (given
    newest first) that may serve it, then from nothing if its base is the empty store. A
    loader falls back along the list when a snapshot turns out unreadable. `unreadable`
    says why other candidates could not be read, for the error when no plan remains."""
    plans = [LoadPlan(manifest, s, manifest.changelogs_after(s.version))
             for s in snapshots if can_start_from(manifest, s)]
    if manifest.snapshot_version is None:
        plans.append(LoadPlan(manifest, None, manifest.changelogs))
    if not plans:
        raise CorruptFileError(
            f"version {manifest.version} of {store} cannot be loaded: no readable snapshot "
            f"of version {manifest.snapshot_version} of lineage {manifest.base_lineage} (its "
            "base) remains" + "".join(f"; {why}" for why in unreadable))
    return plans


def replay_plan(at_snapshot: Manifest, snapshot: SnapshotDescriptor, target: Manifest,
                own_changelogs: list[Changelog], store: str) -> LoadPlan:
    """Rebuilding `target` from `snapshot` (of `at_snapshot`'s version) and the own
    changelog of every version after it: Spark's replayStateFromSnapshot, for a reader
    that distrusts newer snapshots."""
    if not can_start_from(at_snapshot, snapshot):
        raise CorruptFileError(
            f"the snapshot of version {snapshot.version} of {store} was made by an attempt "
            "whose version was not published: it holds no committed state")
    return LoadPlan(target, snapshot, own_changelogs)


def base_of(manifest: Manifest, snapshots: Iterable[SnapshotDescriptor]
            ) -> SnapshotDescriptor | None:
    """The snapshot `manifest` names as its base among `snapshots` (None: it has none)."""
    return next((s for s in snapshots if s.version == manifest.snapshot_version
                 and s.lineage == manifest.base_lineage), None)


def serves_any(snapshot: SnapshotDescriptor, retained: list[Manifest]) -> bool:
    """Whether GC must keep `snapshot`: a retained version may start from it, or it may be
    the base of a version still being committed (newer than every retained one)."""
    if not retained or snapshot.version > retained[-1].version:
        return True
    return any(can_start_from(m, snapshot) for m in retained)


# ---- the lineage of one working copy -------------------------------------------------------


@dataclass(frozen=True)
class Base:
    """A published snapshot the next version of a working copy may name as its base.

    `files` (by local name) are what an incremental upload may reference instead of
    uploading: files of the base that are byte for byte files of this working copy (the
    snapshot it was rebuilt from, or one it uploaded itself). A base adopted from another
    writer's manifest (a catch-up) was made by another RocksDB instance, whose files may
    carry the same names and sizes with other bytes: it brings no reusable files. The base
    is needed by every version built on it, so GC cannot delete a file an upload references.
    """

    version: int
    lineage: str
    files: dict[str, FileRef]

    @staticmethod
    def reusable(descriptor: SnapshotDescriptor) -> Base:
        return Base(descriptor.version, descriptor.lineage,
                    {f.local_name: f for f in descriptor.files})


class Lineage:
    """The history a working copy stands on: the manifest of its loaded version and the
    base of its next one. Snapshots published by the upload thread advance the base, so
    the base is read and written under a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._base: Base | None = None
        self.manifest: Manifest | None = None  # of the loaded version; None for version 0
        self.empty = False  # loaded empty (Spark's loadEmpty): the next version has no past

    @property
    def base(self) -> Base | None:
        with self._lock:
            return self._base

    @property
    def base_version(self) -> int | None:
        base = self.base
        return None if base is None else base.version

    @property
    def lineage(self) -> str | None:
        """The loaded version's lineage: its own changelog (None for version 0 or empty)."""
        return None if self.manifest is None else self.manifest.lineage

    @property
    def commit_id(self) -> str | None:
        """The loaded version's commit id (Manifest.commit_id; None for version 0 or empty)."""
        return None if self.manifest is None else self.manifest.commit_id

    def rebuilt(self, plan: LoadPlan | None, empty: bool = False) -> None:
        """The working copy was rebuilt along `plan` (None: from nothing)."""
        with self._lock:
            snapshot = plan.snapshot if plan else None
            self._base = None if snapshot is None else Base.reusable(snapshot)
        self.manifest = plan.manifest if plan else None
        self.empty = empty

    def forget(self) -> None:
        """The working copy is no longer any version (an abort, a lost race, a failure)."""
        self.rebuilt(None)

    def catch_up(self, current: int, target: Manifest) -> list[Changelog] | None:
        """The changelogs that take the clean working copy at `current` to `target`'s
        version, or None when it must be rebuilt instead (the catch-up rule)."""
        if self.empty or lineage_of(target, current) != self.lineage:
            return None  # built on another attempt's (or a later run's) `current`
        missing = target.changelogs_after(current)
        return missing if len(missing) == target.version - current else None

    def caught_up(self, target: Manifest, base: SnapshotDescriptor | None) -> None:
        """The working copy replayed up to `target`, whose base is `base`: that becomes the
        base unless ours is newer. Its files are another instance's (see `Base`)."""
        with self._lock:
            if base is not None and (self._base is None or self._base.version < base.version):
                self._base = Base(base.version, base.lineage, files={})
        self.manifest = target

    def published(self, descriptor: SnapshotDescriptor) -> None:
        """A snapshot of this working copy was published: it becomes the base if newer."""
        with self._lock:
            if self._base is None or descriptor.version >= self._base.version:
                self._base = Base.reusable(descriptor)

    def chain(self, changelog: Changelog) -> list[Changelog]:
        """The next version's chain: the loaded version's changelogs after the base, then
        `changelog` (every version keeps the record of its own change)."""
        base = self.base_version
        previous = self.manifest.changelogs_after(base) if self.manifest else []
        return [*previous, changelog]

    def beyond_bound(self, changelog: Changelog, max_versions: int, max_bytes: int) -> bool:
        """Whether the next version's chain would exceed the replay bound."""
        replay = self.chain(changelog)
        return len(replay) > max_versions or sum(c.file.size for c in replay) > max_bytes

    def snapshot_due(self, interval: int) -> bool:
        """Whether the loaded version's chain has grown to the snapshot interval."""
        return self.manifest is not None and \
            len(self.manifest.changelogs_after(self.base_version)) >= interval

    def next_manifest(self, changelog: Changelog, num_keys: int, column_families: list[str],
                      writer: str, epoch: int, retention: Retention | None = None) -> Manifest:
        """The manifest of the next version: its base and chain (checked: the chain rule),
        as this working copy's history has them now."""
        base = self.base
        manifest = Manifest(changelog.version, None if base is None else base.version,
                            self.chain(changelog), num_keys, column_families,
                            base_lineage="" if base is None else base.lineage,
                            writer=writer, epoch=epoch, retention=retention)
        return manifest

    def committed(self, manifest: Manifest) -> None:
        self.manifest = manifest
        self.empty = False

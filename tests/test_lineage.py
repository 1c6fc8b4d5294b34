"""The lineage rules (state_store/format/lineage.py) on records alone: no RocksDB, no files.

Each rule gets the smallest records that keep it and the smallest that break it."""

from __future__ import annotations

import pytest

from state_store.errors import CorruptFileError, StateStoreError
from state_store.format import lineage
from state_store.format.lineage import Lineage, LoadPlan
from state_store.format.manifest import Changelog, FileRef, Manifest, SnapshotDescriptor


def log(version: int, attempt: str = "a", size: int = 10) -> Changelog:
    return Changelog(version, FileRef(f"{attempt}{version}.changelog", size, "crc32:00000000"))


def manifest(version: int, base: int | None, chain: list[Changelog],
             base_lineage: str = "") -> Manifest:
    return Manifest(version, base, chain, num_keys=0, base_lineage=base_lineage)


def snapshot(version: int, lineage_of: Changelog, files: int = 2) -> SnapshotDescriptor:
    refs = [FileRef(f"s{version}-{i}.sst", 100, "crc32:00000000", local_name=f"{i:06d}.sst")
            for i in range(files)]
    return SnapshotDescriptor(version, refs, num_keys=0, lineage=lineage_of.file.name)


# ---- the chain rule ----------------------------------------------------------------------

def test_a_chain_holds_every_version_after_its_base_ending_with_its_own() -> None:
    assert lineage.chain_gap(manifest(3, None, [log(1), log(2), log(3)])) is None
    assert lineage.chain_gap(manifest(3, 1, [log(2), log(3)], "a1.changelog")) is None
    assert lineage.chain_gap(manifest(3, 3, [log(3)], "a3.changelog")) is None  # own base
    assert "needs changelogs [1, 2, 3], has [1, 3]" in lineage.chain_gap(
        manifest(3, None, [log(1), log(3)]))
    assert "needs changelogs [3], has [2, 3]" in lineage.chain_gap(
        manifest(3, 3, [log(2), log(3)]))
    with pytest.raises(StateStoreError, match="refusing to publish a broken manifest of s"):
        lineage.check_chain(manifest(2, None, [log(2)]), "s")


# ---- the lineage rule --------------------------------------------------------------------

def test_a_snapshot_serves_only_the_history_it_captured() -> None:
    winner = manifest(3, None, [log(1), log(2), log(3)])
    assert lineage.can_start_from(winner, snapshot(2, log(2)))
    assert not lineage.can_start_from(winner, snapshot(2, log(2, attempt="b")))  # a loser's
    assert not lineage.can_start_from(winner, snapshot(4, log(4)))  # after the version
    on_base = manifest(3, 2, [log(3)], "a2.changelog")
    assert lineage.can_start_from(on_base, snapshot(2, log(2)))
    assert not lineage.can_start_from(on_base, snapshot(1, log(1)))  # before its base


def test_load_plans_go_newest_first_and_end_with_nothing_only_from_the_empty_store() -> None:
    target = manifest(3, None, [log(1), log(2), log(3)])
    plans = lineage.load_plans(target, [snapshot(2, log(2)), snapshot(1, log(1))], "s")
    assert [(p.snapshot and p.snapshot.version, [c.version for c in p.changelogs])
            for p in plans] == [(2, [3]), (1, [2, 3]), (None, [1, 2, 3])]
    on_base = manifest(3, 2, [log(3)], "a2.changelog")
    with pytest.raises(CorruptFileError, match=r"no readable snapshot of version 2 .*; "
                                               r"snapshot 2 is damaged"):
        lineage.load_plans(on_base, [snapshot(2, log(2, attempt="b"))], "s",
                           ["snapshot 2 is damaged"])


def test_a_copy_keeps_the_chain_rule() -> None:
    own_base = LoadPlan(manifest(3, 3, [log(3)], "a3.changelog"), snapshot(3, log(3)), [])
    assert [c.version for c in own_base.own_chain] == [3]  # it keeps its own changelog
    assert [f.name for f in own_base.copied_files] == ["s3-0.sst", "s3-1.sst", "a3.changelog"]
    replayed = LoadPlan(manifest(3, None, [log(1), log(2), log(3)]), snapshot(1, log(1)),
                        [log(2), log(3)])
    assert [c.version for c in replayed.own_chain] == [2, 3]


def test_gc_keeps_a_snapshot_while_a_retained_version_may_start_from_it() -> None:
    retained = [manifest(4, 2, [log(3), log(4)], "a2.changelog")]
    assert lineage.serves_any(snapshot(2, log(2)), retained)
    assert lineage.serves_any(snapshot(3, log(3)), retained)
    assert not lineage.serves_any(snapshot(3, log(3, attempt="b")), retained)  # a loser's
    assert not lineage.serves_any(snapshot(1, log(1)), retained)  # before every base
    assert lineage.serves_any(snapshot(5, log(5)), retained)  # a version being committed


# ---- one working copy's lineage ----------------------------------------------------------

def test_the_next_manifest_builds_on_the_base_and_the_replay_bound_counts_after_it() -> None:
    copy = Lineage()
    copy.rebuilt(LoadPlan(manifest(2, None, [log(1), log(2)]), None, [log(1), log(2)]))
    assert copy.chain(log(3)) == [log(1), log(2), log(3)]
    assert copy.beyond_bound(log(3), max_versions=2, max_bytes=10**9)
    assert copy.beyond_bound(log(3, size=10**9), max_versions=50, max_bytes=10**9)
    copy.published(snapshot(2, log(2)))  # our own upload: the new base, its files reusable
    assert copy.base_version == 2 and set(copy.base.files) == {"000000.sst", "000001.sst"}
    assert not copy.beyond_bound(log(3), max_versions=2, max_bytes=10**9)
    nxt = copy.next_manifest(log(3), 7, ["default"], "w", epoch=4)
    assert (nxt.snapshot_version, nxt.base_lineage, [c.version for c in nxt.changelogs],
            nxt.epoch) == (2, "a2.changelog", [3], 4)
    assert lineage.chain_gap(nxt) is None
    copy.committed(nxt)
    assert not copy.snapshot_due(2) and copy.snapshot_due(1)


def test_a_catch_up_follows_only_its_own_history_and_adopts_a_newer_base() -> None:
    copy = Lineage()
    own = manifest(2, None, [log(1), log(2)])
    copy.rebuilt(LoadPlan(own, None, own.changelogs))
    # Another writer committed 3 and 4 on a snapshot of our version 2.
    theirs = manifest(4, 2, [log(3, "c"), log(4, "c")], "a2.changelog")
    assert copy.catch_up(2, theirs) == [log(3, "c"), log(4, "c")]
    copy.caught_up(theirs, snapshot(2, log(2)))
    assert copy.base_version == 2 and copy.base.files == {}  # another instance's files
    assert lineage.chain_gap(copy.next_manifest(log(5), 0, [], "w", 0)) is None
    # A later run replaced version 2: its history does not hold our version 2.
    replaced = manifest(3, None, [log(1), log(2, "r"), log(3, "r")])
    fresh = Lineage()
    fresh.rebuilt(LoadPlan(own, None, own.changelogs))
    assert fresh.catch_up(2, replaced) is None
    # A chain that starts after our version cannot be replayed onto it.
    assert fresh.catch_up(2, manifest(5, 3, [log(4), log(5)], "a3.changelog")) is None


def test_a_newer_base_of_our_own_is_kept_over_another_writers_older_one() -> None:
    copy = Lineage()
    copy.rebuilt(LoadPlan(manifest(3, 3, [log(3)], "a3.changelog"), snapshot(3, log(3)), []))
    copy.caught_up(manifest(4, 1, [log(2), log(3), log(4)], "a1.changelog"),
                   snapshot(1, log(1)))
    assert copy.base_version == 3 and copy.base.files  # ours, with its reusable files


def test_a_version_written_from_nothing_has_no_past_to_catch_up_on() -> None:
    copy = Lineage()
    copy.rebuilt(None, empty=True)
    assert copy.empty and copy.catch_up(5, manifest(6, None, [log(v) for v in range(1, 7)])) \
        is None
    copy.published(snapshot(6, log(6)))
    nxt = copy.next_manifest(log(6), 0, [], "w", 0)
    assert (nxt.snapshot_version, [c.version for c in nxt.changelogs]) == (6, [6])
    copy.committed(nxt)
    assert not copy.empty

"""A model of many writers on one store, checked after every step.

Several providers (executors, task attempts, state-data-source readers) work on the same
durable root, as Spark makes them: each loads any retained version, writes, commits or
aborts, finishes (a final snapshot), collects garbage with files aged past the orphan
margin, or dies at any storage mutation. Zombie attempts commit versions that a retry
already committed; two attempts of one batch race, the loser often past its replay bound
(so it publishes a forced snapshot first, and sometimes dies withdrawing it); partitions
move between providers and back; an offline writer fills a version from nothing (Spark's
loadEmpty) and its snapshot upload may fail; a user rewinds the checkpoint and a new run
redoes batches while zombies of the old run still commit; a reset query starts over on the
same checkpoint path. After every step:
  * every retained version loads exactly the contents of its latest run's publish;
  * the current run's newest version is retained (nothing committed is lost);
  * every file a retained version or a snapshot it may start from names still exists;
  * every retained manifest's changelog chain is contiguous from its base.
Uploads run inline (a synchronous executor) so every interleaving is reproducible.

What each rule guards (each was checked by removing it, see the closing note of issue 21;
the catch-up's lineage check keeps a fenced zombie's working copy exact, which no published
state shows, so test_many_writers.py guards it):
  lineage.can_start_from's lineage rule     two_attempts, loser_dies_withdrawing
  the catch-up's adoption of a newer base   moves_away_and_back
  the chain rule, checked at publish        offline_write with a refused snapshot
  run epochs in manifest names              rewind, then run_batch
  the fence of an earlier run's writers     rewind_and_redo (a zombie, clean at a version
                                            the later run replaced, commits on it)
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
import uuid
from collections.abc import Callable
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import faulty_fs
from faulty_fs import FUSE, SimulatedCrash
from load_inputs import Inputs, load_inputs, missing_files, present_files
from state_store.errors import StateStoreError, UnsupportedStorageError
from state_store.format import lineage, records
from state_store.format.records import EXISTED, KNOWN, Op
from state_store.format.storage import open_storage
from state_store.format.store_root import RecordIndex, StoreRoot, query_dir
from state_store.options import StoreOptions
from state_store.runtime.engine import VersionedStore
from test_engine import committed

KEYS = [f"k{i}".encode() for i in range(6)]
PROVIDERS = 3
Contents = dict[bytes, bytes]
# Values of one length: a batch of puts alone is one record shape (records.uniform).
CHANGES = st.dictionaries(st.sampled_from(KEYS), st.none() | st.binary(min_size=3, max_size=3),
                          min_size=1, max_size=4)
CRASH = st.none() | st.integers(0, 8)


class InlineExecutor(Executor):
    """Runs each upload at once on the caller's thread: interleavings are the model's."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as e:
            future.set_exception(e)
        return future


class Provider:
    """One working copy of the store: a task attempt of run `epoch` on some executor."""

    def __init__(self, store: VersionedStore, epoch: int) -> None:
        self.store = store
        self.epoch = epoch
        self.version: int | None = None  # loaded and clean, or carrying `pending`
        self.base: Contents = {}  # the contents of `version` when it was loaded
        self.pending: dict[bytes, bytes | None] = {}


class ManyWriters(RuleBasedStateMachine):
    """Subclasses set `base_url` (where queries' roots live) and `storage_options`."""

    storage_options: dict[str, Any] = {}
    crashes = True
    replay_bound: int | None = None  # fixed, or drawn per example

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="pyrocks-model-"))
        self.local_ids = itertools.count()
        self.providers: dict[int, Provider] = {}
        self.zombies: list[Provider] = []  # providers of earlier runs, still at work
        self.published: dict[tuple[int, int], Contents] = {(0, 0): {}}  # (version, epoch)
        self.latest = 0  # the current run's newest version
        self.epoch = 1
        self.proven: set[Inputs] = set()  # loads checked (load_inputs.py)

    def base_url(self) -> str:
        raise NotImplementedError

    @initialize(interval=st.integers(1, 4), max_replay=st.integers(1, 4))
    def start_query(self, interval: int, max_replay: int) -> None:
        self.options = StoreOptions(snapshot_interval=interval,
                                    max_replay_versions=self.replay_bound or max_replay,
                                    orphan_margin_seconds=0,
                                    defer_min_bytes=0)  # the model's frames are small
        self.base = open_storage(self.base_url(), self.storage_options)
        self.query_id = uuid.uuid4().hex

    def teardown(self) -> None:
        FUSE.disarm()
        for provider in [*self.providers.values(), *self.zombies]:
            provider.store.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # ---- what the model drives ------------------------------------------------------------

    def checkpoint(self) -> StoreRoot:
        return StoreRoot(self.base.child(query_dir(self.query_id)), "model", self.base)

    def new_store(self, epoch: int = 0) -> VersionedStore:
        local = self.tmp / f"local-{next(self.local_ids)}"
        # The fence's listing goes through `requests` on an object store (engine.py):
        # in line here too, so it lists at the point the engine starts it.
        return VersionedStore("model", self.checkpoint(), local, self.options, InlineExecutor(),
                              epoch=epoch, requests=InlineExecutor())

    def provider(self, index: int) -> Provider:
        if index not in self.providers:
            self.providers[index] = Provider(self.new_store(self.epoch), self.epoch)
        return self.providers[index]

    def died(self, provider: Provider) -> None:
        """The provider's process died: its working copy is gone, its files stay."""
        self.providers = {i: p for i, p in self.providers.items() if p is not provider}
        self.zombies = [z for z in self.zombies if z is not provider]

    def crashable(self, provider: Provider, crash_at: int | None,
                  action: Callable[[], Any]) -> bool:
        """Runs `action` with a crash armed at its `crash_at`-th storage mutation."""
        if crash_at is not None and self.crashes:
            FUSE.arm(crash_at)
        try:
            action()
            return False
        except SimulatedCrash:
            self.died(provider)
            return True
        finally:
            FUSE.disarm()

    def index(self) -> RecordIndex:
        """The store's records as they are now: one listing, for every question about them
        until the next step changes them (listings were most of the model's time on S3)."""
        return self.checkpoint().index()

    def retained(self) -> list[int]:
        return self.index().versions()

    @staticmethod
    def epochs_of(version: int, index: RecordIndex) -> set[int]:
        return set(index.manifests.get(version, {}))

    def visible(self, version: int, index: RecordIndex | None = None) -> Contents:
        """What loading `version` must give: its publish by the latest run."""
        epochs = self.epochs_of(version, index or self.index())
        return self.published[(version, max(epochs, default=0))]

    def load(self, provider: Provider, version: int) -> None:
        provider.store.load(version)
        provider.version, provider.base, provider.pending = version, self.visible(version), {}

    def write(self, provider: Provider, changes: dict[bytes, bytes | None]) -> None:
        """Each record says whether its key existed, as the shim's records do when its
        cache knows; so a frame of puts alone (one record shape) is applied behind the session
        (deferred_writes.py), and a crash or a race may strike before RocksDB has it."""
        current = {**provider.base, **provider.pending}

        def known(op: Op, key: bytes) -> int:
            return op | KNOWN | (EXISTED if current.get(key) is not None else 0)

        provider.store.write(b"".join(
            records.encode(known(Op.PUT, k), "default", k, v) if v is not None
            else records.encode(known(Op.DELETE, k), "default", k)
            for k, v in changes.items()))
        provider.pending.update(changes)

    def loadable(self, provider: Provider) -> list[int]:
        """The versions a provider may load: a run never reads past its own newest batch."""
        versions = self.retained() or [0]
        if provider.epoch == self.epoch:
            versions = [v for v in versions if v <= self.latest] or [0]
        return versions

    # ---- rules ------------------------------------------------------------------------------

    @rule(index=st.integers(0, PROVIDERS - 1), changes=CHANGES, crash_at=CRASH)
    def run_batch(self, index: int, changes: dict[bytes, bytes | None],
                  crash_at: int | None) -> None:
        """A task: load the newest version on this provider, write, commit."""
        self.start_attempt(index, 0, changes)
        self.commit(index, crash_at)

    @rule(winner=st.integers(0, PROVIDERS - 1), other=st.integers(1, PROVIDERS - 1),
          first=CHANGES, second=CHANGES, crash_at=CRASH)
    def two_attempts(self, winner: int, other: int, first: dict[bytes, bytes | None],
                     second: dict[bytes, bytes | None], crash_at: int | None) -> None:
        """A task and its speculative copy (or a zombie and its retry) run the same batch
        on two providers; the first to publish wins, the other must lose cleanly."""
        loser = (winner + other) % PROVIDERS
        self.start_attempt(winner, 0, first)
        self.start_attempt(loser, 0, second)
        self.commit(winner, None)
        self.commit(loser, crash_at)

    @rule(winner=st.integers(0, PROVIDERS - 1), other=st.integers(1, PROVIDERS - 1),
          first=CHANGES, second=CHANGES)
    def loser_dies_withdrawing(self, winner: int, other: int, first: dict[bytes, bytes | None],
                               second: dict[bytes, bytes | None]) -> None:
        """As two_attempts, and the loser dies while withdrawing the snapshot it published
        before losing: that snapshot stays, and no load may ever start from it."""
        if not self.crashes:
            return
        loser = (winner + other) % PROVIDERS
        self.start_attempt(winner, 0, first)
        self.start_attempt(loser, 0, second)
        self.commit(winner, None)
        FUSE.arm_when(lambda what: what.startswith("delete") and "/snapshots/" in what)
        self.commit(loser, None)

    @rule(home=st.integers(0, PROVIDERS - 1), other=st.integers(1, PROVIDERS - 1),
          first=CHANGES, second=CHANGES, third=CHANGES)
    def moves_away_and_back(self, home: int, other: int, first: dict[bytes, bytes | None],
                            second: dict[bytes, bytes | None],
                            third: dict[bytes, bytes | None]) -> None:
        """A partition's task runs on executor A, then C, then A again: C rebuilds from a
        snapshot of A's version that a reader (or C's own unload) published, and commits on
        it; A, still clean, catches up to C's version and must build on C's newer base."""
        away = (home + other) % PROVIDERS
        self.run_batch(home, first, None)
        self.read_and_finish(away, None)
        self.run_batch(away, second, None)
        self.run_batch(home, third, None)

    @rule(index=st.integers(0, PROVIDERS - 1), back=st.integers(0, 3), changes=CHANGES)
    def start_attempt(self, index: int, back: int, changes: dict[bytes, bytes | None]) -> None:
        """Loads the newest version, or an older retained one (a zombie attempt's view),
        and writes without committing yet."""
        provider = self.provider(index)
        versions = self.loadable(provider)
        self.load(provider, versions[max(0, len(versions) - 1 - back)])
        self.write(provider, changes)

    @rule(index=st.integers(0, PROVIDERS - 1), crash_at=CRASH)
    def commit(self, index: int, crash_at: int | None) -> None:
        provider = self.providers.get(index)
        if provider is not None:
            self.commit_of(provider, crash_at)

    def commit_of(self, provider: Provider, crash_at: int | None,
                  refused: str | None = None) -> None:
        if provider.version is None:
            return
        version, epoch = provider.version + 1, provider.epoch
        before = self.index()
        if version <= self.latest and version not in before.versions():
            # A zombie so late that its version fell out of retention would publish it
            # again (a known limit, see the README): not part of what is checked here.
            return
        existed = epoch in self.epochs_of(version, before)
        if before.newest_epoch() > epoch:
            refused = "a later run of this query"  # fenced: a later run has published
        answer: dict[str, Any] = {}
        try:
            crashed = self.crashable(provider, crash_at,
                                     lambda: answer.update(committed(provider.store, version)))
        except StateStoreError as e:  # a commit the store refused to publish
            assert refused is not None and refused in str(e), e
            assert epoch not in self.epochs_of(version, self.index()) or existed
            provider.version, provider.pending = None, {}
            return
        after = self.index()
        if refused is not None:
            # Fenced, it uploads its changelog while it lists the run epochs (engine.py), so
            # it may crash before its refusal: then too it published nothing.
            assert crashed, f"expected a refusal ({refused}), got {answer}"
            assert epoch not in self.epochs_of(version, after) or existed
            return
        if existed:  # another attempt of this run published the version: this one loses
            assert crashed or answer["published"] is False, answer
        elif epoch in self.epochs_of(version, after):  # ours (maybe just before a crash)
            state = {**provider.base, **provider.pending}
            self.published[(version, epoch)] = {k: v for k, v in state.items() if v is not None}
            if epoch == self.epoch:
                self.latest = max(self.latest, version)
        if not crashed:
            provider.version = version if answer.get("published") else None
            provider.base = self.visible(version, after) if answer.get("published") else {}
            provider.pending = {}

    @rule(index=st.integers(0, PROVIDERS - 1), changes=CHANGES, refuse=st.booleans())
    def offline_write(self, index: int, changes: dict[bytes, bytes | None],
                      refuse: bool) -> None:
        """An offline writer (Spark's loadEmpty, a canonical restore) fills the next version
        from nothing; its manifest is based on its own snapshot, which must be published
        first: when that upload fails, the version must not be published."""
        provider = self.provider(index)
        provider.store.load_empty(self.latest)
        provider.version, provider.base, provider.pending = self.latest, {}, {}
        self.write(provider, changes)
        refused = None
        if refuse and self.crashes and self.latest > 0:  # version 1 needs no snapshot
            FUSE.refuse_when(lambda what: "/snapshots/" in what)
            refused = "refusing to publish a broken manifest"
        try:
            self.commit_of(provider, None, refused)
        finally:
            FUSE.disarm()

    @rule(index=st.integers(0, PROVIDERS - 1))
    def abort(self, index: int) -> None:
        provider = self.providers.get(index)
        if provider is not None:
            provider.store.abort()
            if provider.pending:
                provider.version = None
            provider.pending = {}

    @rule(index=st.integers(0, PROVIDERS - 1), crash_at=CRASH)
    def read_and_finish(self, index: int, crash_at: int | None) -> None:
        """A reader (the state data source, or a provider Spark unloads) loads the newest
        version and finishes: a final snapshot of a version another provider committed."""
        provider = self.provider(index)
        self.load(provider, self.loadable(provider)[-1])
        self.finish(index, crash_at)

    @rule(index=st.integers(0, PROVIDERS - 1), crash_at=CRASH)
    def finish(self, index: int, crash_at: int | None) -> None:
        """The provider is unloaded: a final snapshot of its committed version."""
        provider = self.providers.get(index)
        if provider is not None:
            self.crashable(provider, crash_at, provider.store.finish)

    @rule(index=st.integers(0, PROVIDERS - 1), retain=st.integers(1, 4), crash_at=CRASH)
    def collect_garbage(self, index: int, retain: int, crash_at: int | None) -> None:
        """Maintenance with every file aged past the orphan margin (the margin is 0). Spark
        retains at least as many batches as a user can rewind (its offset log keeps
        minBatchesToRetain entries), so versions an earlier run left above the current
        run's newest one never push that one out of retention (as with Spark's providers,
        the same retention bounds both)."""
        above = sum(v > self.latest for v in self.retained())
        retain = max(retain, above + 1)
        provider = self.provider(index)
        self.crashable(provider, crash_at, lambda: provider.store.collect_garbage(retain))

    @rule(index=st.integers(0, PROVIDERS - 1))
    def crash(self, index: int) -> None:
        if index in self.providers:
            self.died(self.providers[index])

    @rule(back=st.integers(0, 2))
    def rewind(self, back: int) -> None:
        """The user deletes the last `back` batches' offsets and commits and restarts: a new
        run (epoch) redoes them from an earlier version; the old run's providers live on as
        zombies, whose later commits must never replace the new run's."""
        versions = [v for v in self.retained() if v <= self.latest] or [0]
        self.latest = versions[max(0, len(versions) - 1 - back)]
        self.zombies += self.providers.values()
        self.providers = {}
        self.epoch += 1

    @rule(back=st.integers(1, 2), index=st.integers(0, PROVIDERS - 1),
          batches=st.lists(CHANGES, min_size=2, max_size=3), late=CHANGES)
    def rewind_and_redo(self, back: int, index: int, batches: list[dict[bytes, bytes | None]],
                        late: dict[bytes, bytes | None]) -> None:
        """A rewind whose new run redoes the rewound batches (and one more) while a zombie
        of the old run, clean at a version the new run replaced, catches up to the new
        run's newest version and commits on it."""
        self.rewind(back)
        for changes in batches:
            self.run_batch(index, changes, None)
        for which in range(len(self.zombies)):
            self.zombie_commits(which, True, late, None)

    @rule(which=st.integers(0, 7), reload=st.booleans(), changes=CHANGES, crash_at=CRASH)
    def zombie_commits(self, which: int, reload: bool, changes: dict[bytes, bytes | None],
                       crash_at: int | None) -> None:
        """A zombie of an earlier run commits: on top of what it had loaded, or loading the
        newest version it can see first (catching up, from its own version, to what the
        later run published: it must not build on a history that run replaced)."""
        if not self.zombies:
            return
        zombie = self.zombies[which % len(self.zombies)]
        if reload and zombie.pending:
            zombie.store.abort()
            zombie.version, zombie.pending = None, {}
        if zombie.version is None or reload:
            self.load(zombie, self.loadable(zombie)[-1])
        self.write(zombie, changes)
        self.commit_of(zombie, crash_at)

    @rule()
    def reset_checkpoint(self) -> None:
        """The user deletes the checkpoint and starts again on the same path: a new query."""
        for provider in [*self.providers.values(), *self.zombies]:
            provider.store.close()
        self.providers, self.zombies = {}, []
        self.query_id = uuid.uuid4().hex
        self.published, self.latest, self.epoch = {(0, 0): {}}, 0, 1

    # ---- invariants ---------------------------------------------------------------------------

    @invariant()
    def nothing_committed_is_lost(self) -> None:
        if hasattr(self, "base"):
            assert self.latest == 0 or self.latest in self.retained()

    @invariant()
    def retained_versions_load_exactly(self) -> None:
        if not hasattr(self, "base"):
            return
        checkpoint = self.checkpoint()
        index = checkpoint.index()
        present = present_files(checkpoint)
        for version in index.versions():
            assert lineage.chain_gap(checkpoint.read_manifest(version, index)) is None
            want = self.visible(version, index)
            proof = load_inputs(checkpoint, version, want, present, index)
            if proof is not None and proof in self.proven:
                continue
            reader = self.new_store()
            try:
                reader.load(version)
                got = dict(reader.scan("default", None, None, None))
            finally:
                reader.close()
            assert got == want, f"version {version}"
            if proof is not None:
                self.proven.add(proof)

    @invariant()
    def referenced_files_exist(self) -> None:
        if not hasattr(self, "base"):
            return
        missing = missing_files(self.checkpoint(), self.index())
        assert not missing, f"files still referenced were deleted: {missing}"


class LocalFaultyWriters(ManyWriters):
    """Local files behind the crash-injecting filesystem (tests/faulty_fs.py)."""

    def base_url(self) -> str:
        return f"{faulty_fs.PROTOCOL}://{self.tmp}/root"


class ShortReplayFaultyWriters(LocalFaultyWriters):
    """A replay bound of one version: every commit past a snapshot forces one, so losing
    attempts publish (and withdraw, or die withdrawing) forced snapshots all the time."""

    replay_bound = 1


class PlainLocalWriters(ManyWriters):
    """The local filesystem's own fast paths: hard links, publish by link."""

    crashes = False

    def base_url(self) -> str:
        return str(self.tmp / "root")


# Derandomized: CI meets the same examples every run (a red run is a real bug, reproducible);
# a deep random search is a matter of running it with more examples and derandomize off.
_MODEL = settings(deadline=None, stateful_step_count=25, derandomize=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def test_many_writers_with_crashes_on_local_files() -> None:
    LocalFaultyWriters.TestCase.settings = settings(_MODEL, max_examples=60)
    LocalFaultyWriters.TestCase().runTest()


def test_many_writers_past_a_short_replay_bound() -> None:
    ShortReplayFaultyWriters.TestCase.settings = settings(_MODEL, max_examples=40)
    ShortReplayFaultyWriters.TestCase().runTest()


def test_many_writers_on_local_fast_paths() -> None:
    PlainLocalWriters.TestCase.settings = settings(_MODEL, max_examples=25)
    PlainLocalWriters.TestCase().runTest()


def test_many_writers_on_s3(s3) -> None:  # noqa: ANN001 - the session's moto endpoint
    class S3Writers(ManyWriters):
        crashes = False
        storage_options = s3.options

        def base_url(self) -> str:
            return s3.url(f"model-{uuid.uuid4().hex}")

    S3Writers.TestCase.settings = settings(_MODEL, max_examples=8, stateful_step_count=15)
    S3Writers.TestCase().runTest()


def test_a_filesystem_without_conditional_writes_is_refused() -> None:
    with pytest.raises(UnsupportedStorageError,
                       match=r"memory://model.*MemoryFileSystem.*no atomic put-if-absent.*"
                             r"Supported: local paths"):
        open_storage("memory://model/root")

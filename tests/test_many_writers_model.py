"""A model of many writers on one store, checked after every step.

Several providers (executors, task attempts, state-data-source readers) work on the same
durable root, as Spark makes them: each loads any retained version, writes, commits or
aborts, finishes (a final snapshot), collects garbage with files aged past the orphan
margin, or dies at any storage mutation. Zombie attempts commit versions that a retry
already committed; partitions move between providers and back; a reset query starts over
on the same checkpoint path. After every step:
  * every retained version loads exactly the contents the model committed for it;
  * the newest committed version is retained (nothing committed is lost);
  * every file a retained version or a snapshot it may start from names still exists;
  * every retained manifest's changelog chain is contiguous from its base.
Uploads run inline (a synchronous executor) so every interleaving is reproducible.
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
from state_store import records
from state_store.checkpoint import Checkpoint, query_dir
from state_store.engine import VersionedStore
from state_store.errors import UnsupportedStorageError
from state_store.manifest import file_path
from state_store.options import StoreOptions
from state_store.records import Op
from state_store.storage import Storage, open_storage

KEYS = [f"k{i}".encode() for i in range(6)]
PROVIDERS = 3
Contents = dict[bytes, bytes]
CHANGES = st.dictionaries(st.sampled_from(KEYS), st.none() | st.binary(min_size=1, max_size=4),
                          min_size=1, max_size=4)


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
    """One working copy of the store: a task attempt on some executor."""

    def __init__(self, store: VersionedStore) -> None:
        self.store = store
        self.version: int | None = None  # loaded and clean, or carrying `pending`
        self.pending: dict[bytes, bytes | None] = {}


class ManyWriters(RuleBasedStateMachine):
    """Subclasses set `base_url` (where queries' roots live) and `storage_options`."""

    storage_options: dict[str, Any] = {}
    crashes = True

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="pyrocks-model-"))
        self.local_ids = itertools.count()
        self.providers: dict[int, Provider] = {}
        self.committed: dict[int, Contents] = {0: {}}
        self.latest = 0

    def base_url(self) -> str:
        raise NotImplementedError

    @initialize(interval=st.integers(1, 4), max_replay=st.integers(1, 4))
    def start_query(self, interval: int, max_replay: int) -> None:
        self.options = StoreOptions(snapshot_interval=interval, max_replay_versions=max_replay,
                                    orphan_margin_seconds=0)
        self.base = open_storage(self.base_url(), self.storage_options)
        self.query_id = uuid.uuid4().hex

    def teardown(self) -> None:
        FUSE.disarm()
        for provider in self.providers.values():
            provider.store.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # ---- what the model drives ------------------------------------------------------------

    def checkpoint(self) -> Checkpoint:
        return Checkpoint(self.base.child(query_dir(self.query_id)), "model", self.base)

    def new_store(self) -> VersionedStore:
        local = self.tmp / f"local-{next(self.local_ids)}"
        return VersionedStore("model", self.checkpoint(), local, self.options, InlineExecutor())

    def provider(self, index: int) -> Provider:
        if index not in self.providers:
            self.providers[index] = Provider(self.new_store())
        return self.providers[index]

    def died(self, index: int) -> None:
        """The provider's process died: its working copy is gone, its files stay."""
        self.providers.pop(index)

    def crashable(self, index: int, crash_at: int | None, action: Callable[[], Any]) -> bool:
        """Runs `action` with a crash armed at its `crash_at`-th storage mutation."""
        if crash_at is not None and self.crashes:
            FUSE.arm(crash_at)
        try:
            action()
            return False
        except SimulatedCrash:
            self.died(index)
            return True
        finally:
            FUSE.disarm()

    def retained(self) -> list[int]:
        return self.checkpoint().versions()

    # ---- rules ------------------------------------------------------------------------------

    @rule(index=st.integers(0, PROVIDERS - 1), changes=CHANGES,
          crash_at=st.none() | st.integers(0, 8))
    def run_batch(self, index: int, changes: dict[bytes, bytes | None],
                  crash_at: int | None) -> None:
        """A task: load the newest version on this provider, write, commit."""
        self.start_attempt(index, 0, changes)
        self.commit(index, crash_at)

    @rule(winner=st.integers(0, PROVIDERS - 1), loser=st.integers(0, PROVIDERS - 1),
          first=CHANGES, second=CHANGES, crash_at=st.none() | st.integers(0, 8))
    def two_attempts_of_one_batch(self, winner: int, loser: int,
                                  first: dict[bytes, bytes | None],
                                  second: dict[bytes, bytes | None],
                                  crash_at: int | None) -> None:
        """A task and its speculative copy (or a zombie and its retry) run the same batch
        on two providers; the first to publish wins, the other must lose cleanly."""
        if winner == loser:
            return
        self.start_attempt(winner, 0, first)
        self.start_attempt(loser, 0, second)
        self.commit(winner, None)
        self.commit(loser, crash_at)

    @rule(index=st.integers(0, PROVIDERS - 1), back=st.integers(0, 3), changes=CHANGES)
    def start_attempt(self, index: int, back: int, changes: dict[bytes, bytes | None]) -> None:
        """Loads the newest version, or an older retained one (a zombie attempt's view),
        and writes without committing yet."""
        versions = self.retained() or [0]
        version = versions[max(0, len(versions) - 1 - back)]
        provider = self.provider(index)
        provider.store.load(version)
        provider.version, provider.pending = version, {}
        provider.store.write(b"".join(
            records.encode(Op.PUT, "default", k, v) if v is not None
            else records.encode(Op.DELETE, "default", k) for k, v in changes.items()))
        provider.pending.update(changes)

    @rule(index=st.integers(0, PROVIDERS - 1), crash_at=st.none() | st.integers(0, 8))
    def commit(self, index: int, crash_at: int | None) -> None:
        provider = self.providers.get(index)
        if provider is None or provider.version is None:
            return
        version = provider.version + 1
        retained = self.retained()
        if version <= self.latest and version not in retained:
            # A zombie so late that its version fell out of retention would publish it
            # again (a known limit, see the README): not part of what is checked here.
            return
        zombie = version <= self.latest
        answer: dict[str, Any] = {}
        crashed = self.crashable(index, crash_at,
                                 lambda: answer.update(provider.store.commit(version)))
        if zombie:  # the version is another attempt's already: this one must lose
            assert crashed or answer == {"published": False}, answer
        elif version in self.retained():
            state = {**self.committed[provider.version], **provider.pending}
            self.committed[version] = {k: v for k, v in state.items() if v is not None}
            self.latest = version
        if not crashed:
            provider.version = version if answer.get("published") else None
            provider.pending = {}

    @rule(index=st.integers(0, PROVIDERS - 1))
    def abort(self, index: int) -> None:
        provider = self.providers.get(index)
        if provider is not None:
            provider.store.abort()
            if provider.pending:
                provider.version = None
            provider.pending = {}

    @rule(index=st.integers(0, PROVIDERS - 1), crash_at=st.none() | st.integers(0, 8))
    def read_and_finish(self, index: int, crash_at: int | None) -> None:
        """A reader (the state data source, or a provider Spark unloads) loads the newest
        version and finishes: a final snapshot of a version another provider committed."""
        provider = self.provider(index)
        provider.store.load(self.latest)
        provider.version, provider.pending = self.latest, {}
        self.finish(index, crash_at)

    @rule(index=st.integers(0, PROVIDERS - 1), crash_at=st.none() | st.integers(0, 8))
    def finish(self, index: int, crash_at: int | None) -> None:
        """The provider is unloaded: a final snapshot of its committed version."""
        provider = self.providers.get(index)
        if provider is not None:
            self.crashable(index, crash_at, provider.store.finish)

    @rule(index=st.integers(0, PROVIDERS - 1), retain=st.integers(1, 4),
          crash_at=st.none() | st.integers(0, 8))
    def collect_garbage(self, index: int, retain: int, crash_at: int | None) -> None:
        """Maintenance with every file aged past the orphan margin (the margin is 0)."""
        provider = self.provider(index)
        self.crashable(index, crash_at, lambda: provider.store.collect_garbage(retain))
        kept = set(self.retained())
        self.committed = {v: c for v, c in self.committed.items() if v in kept or v == 0}

    @rule(index=st.integers(0, PROVIDERS - 1))
    def crash(self, index: int) -> None:
        if index in self.providers:
            self.died(index)

    @rule()
    def reset_checkpoint(self) -> None:
        """The user deletes the checkpoint and starts again on the same path: a new query."""
        for provider in self.providers.values():
            provider.store.close()
        self.providers.clear()
        self.query_id = uuid.uuid4().hex
        self.committed, self.latest = {0: {}}, 0

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
        for version in checkpoint.versions():
            assert checkpoint.read_manifest(version).chain_gap() is None
            assert version in self.committed, f"version {version} is not the model's"
            reader = self.new_store()
            try:
                reader.load(version)
                got = dict(reader.scan("default", None, None, None))
            finally:
                reader.close()
            assert got == self.committed[version], f"version {version}"

    @invariant()
    def referenced_files_exist(self) -> None:
        if not hasattr(self, "base"):
            return
        checkpoint = self.checkpoint()
        storage: Storage = checkpoint.storage
        plan = checkpoint.plan_garbage(len(checkpoint.versions()), orphan_margin_s=10**9)
        needed = {c.file.name for v in checkpoint.versions()
                  for c in checkpoint.read_manifest(v).changelogs}
        for s in checkpoint.snapshot_versions():
            if s not in plan.expired_snapshots:
                needed |= {f.name for f in checkpoint.read_snapshot(s).files}
        missing = [n for n in needed if not storage.fs.exists(storage.path(file_path(n)))]
        assert not missing, f"files still referenced were deleted: {missing}"


class LocalFaultyWriters(ManyWriters):
    """Local files behind the crash-injecting filesystem (tests/faulty_fs.py)."""

    def base_url(self) -> str:
        return f"{faulty_fs.PROTOCOL}://{self.tmp}/root"


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

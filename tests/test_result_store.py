"""The query result store's contract, on a local directory and on the S3 endpoint (Flink's
JobResultStoreContractTest is the model), and what recording a run does under crashes and
storage faults. Spark-free: the recorder's functions run here in-process, on the same
storage the driver's recorder process uses."""

from __future__ import annotations

import json
import logging
import multiprocessing
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

import faulty_fs
from faulty_fs import FUSE, dies_during
from pyrocks_support import OBJECT_STORES
from state_store import cli
from state_store.errors import CorruptFileError
from state_store.results import (
    Backoff,
    CleanupFailed,
    FileSystemResultStore,
    QueryResult,
    ResultStoreError,
    RunAlreadyRecordedError,
    UnknownRunError,
    run_once,
)
from state_store.results.cleanup import StateAccess, clean_up, with_backoff
from state_store.results.recorder import complete, record, resume


def result(run_key: str, outcome: str = "finished") -> QueryResult:
    return QueryResult(run_key=run_key, query_id=str(uuid.uuid4()), run_id=str(uuid.uuid4()),
                       outcome=outcome, name="q", last_batch_id=3,
                       metrics={"numInputRows": 7})


@pytest.fixture(params=["local", *OBJECT_STORES])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, dict]]:
    if request.param == "local":
        yield str(tmp_path / "results"), {}
    else:  # an object store's server on loopback (conftest.OBJECT_STORES)
        server = request.getfixturevalue(OBJECT_STORES[request.param])
        yield server.url(f"results-{uuid.uuid4().hex[:8]}"), server.options


def open_store(store_url: tuple[str, dict],
               delete_on_commit: bool = False) -> FileSystemResultStore:
    url, options = store_url
    return FileSystemResultStore(url, options, delete_on_commit=delete_on_commit)


# ---- the contract ----------------------------------------------------------------------


def test_a_dirty_entry_is_written_once(store_url: tuple[str, dict]) -> None:
    store = open_store(store_url)
    first = result("2026-11-23")
    store.create_dirty(first)
    with pytest.raises(RunAlreadyRecordedError, match="2026-11-23.*dirty"):
        store.create_dirty(result("2026-11-23"))
    assert store.get("2026-11-23") == first  # the first result stays


def test_a_clean_run_is_never_recorded_again(store_url: tuple[str, dict]) -> None:
    store = open_store(store_url)
    store.create_dirty(result("run-1"))
    store.mark_clean("run-1")
    with pytest.raises(RunAlreadyRecordedError, match="run-1.*clean"):
        store.create_dirty(result("run-1"))
    assert not store.has_dirty("run-1")


def test_marking_an_unknown_run_clean_fails(store_url: tuple[str, dict]) -> None:
    store = open_store(store_url)
    with pytest.raises(UnknownRunError, match="run nope has no entry"):
        store.mark_clean("nope")
    with pytest.raises(UnknownRunError):
        store.get("nope")


def test_marking_clean_twice_is_fine(store_url: tuple[str, dict]) -> None:
    store = open_store(store_url)
    recorded = result("twice")
    store.create_dirty(recorded)
    store.mark_clean("twice")
    store.mark_clean("twice")
    assert store.has_clean("twice") and not store.has_dirty("twice")
    assert store.get("twice") == recorded


def test_listings_and_has_agree(store_url: tuple[str, dict]) -> None:
    store = open_store(store_url)
    for key in ("a", "b", "c", "d"):
        store.create_dirty(result(key, outcome="stopped" if key == "b" else "finished"))
    store.mark_clean("a")
    store.mark_clean("c")
    assert {r.run_key for r in store.dirty_results()} == {"b", "d"}
    assert {(e.result.run_key, e.clean) for e in store.entries()} == {
        ("a", True), ("b", False), ("c", True), ("d", False)}
    for key in ("a", "b", "c", "d"):
        assert store.has_clean(key) == (key in "ac")
        assert store.has_dirty(key) == (key in "bd")
    assert not store.has_clean("e") and not store.has_dirty("e")
    assert store.get("b").outcome == "stopped"


def test_delete_on_commit_removes_the_entry(store_url: tuple[str, dict]) -> None:
    store = open_store(store_url, delete_on_commit=True)
    store.create_dirty(result("gone"))
    store.mark_clean("gone")
    assert not store.has_clean("gone") and not store.has_dirty("gone")
    assert store.entries() == []
    with pytest.raises(UnknownRunError):
        store.mark_clean("gone")


def test_entry_files_have_the_contract_layout(tmp_path: Path) -> None:
    store = FileSystemResultStore(str(tmp_path))
    recorded = result("layout")
    store.create_dirty(recorded)
    raw = json.loads((tmp_path / "layout_DIRTY.json").read_text())
    assert raw["version"] == 1 and raw["result"]["run_key"] == "layout"
    assert QueryResult.from_dict(raw["result"]) == recorded
    store.mark_clean("layout")
    assert not (tmp_path / "layout_DIRTY.json").exists()
    assert json.loads((tmp_path / "layout.json").read_text()) == raw


def test_bad_run_keys_and_bad_entries_are_named(tmp_path: Path) -> None:
    store = FileSystemResultStore(str(tmp_path))
    for bad in ("", "a/b", "../x", "x_DIRTY", " x"):
        with pytest.raises(ResultStoreError, match="invalid run key"):
            store.has_clean(bad)
    (tmp_path / "junk.json").write_text("{not json")
    with pytest.raises(CorruptFileError, match="junk.json is not valid JSON"):
        store.get("junk")
    (tmp_path / "future.json").write_text(json.dumps({"version": 2, "result": {}}))
    with pytest.raises(CorruptFileError, match="future.json has version 2"):
        store.get("future")


def _race(url: str, options: dict, keys: list[str], barrier: multiprocessing.Barrier,
          wins: multiprocessing.Queue) -> None:
    store = FileSystemResultStore(url, options)
    barrier.wait(120)
    for key in keys:
        try:
            store.create_dirty(result(key))
            wins.put(key)
        except RunAlreadyRecordedError:
            pass


def test_processes_racing_create_dirty_exactly_one_wins(store_url: tuple[str, dict]) -> None:
    url, options = store_url
    keys = [f"race-{i}" for i in range(12)]
    ctx = multiprocessing.get_context("spawn")
    barrier, wins = ctx.Barrier(4), ctx.Queue()
    racers = [ctx.Process(target=_race, args=(url, options, keys, barrier, wins))
              for _ in range(4)]
    for p in racers:
        p.start()
    for p in racers:
        p.join(120)
        assert p.exitcode == 0
    won = [wins.get(timeout=10) for _ in range(len(keys))]
    assert sorted(won) == sorted(keys)  # each key won exactly once (no more in the queue)
    assert wins.empty()
    assert {r.run_key for r in open_store(store_url).dirty_results()} == set(keys)


def test_a_clean_racing_a_create_never_leaves_both(tmp_path: Path) -> None:
    """The clean entry is published before the dirty one goes: a create that slips in
    after the delete sees the clean entry, withdraws its dirty one and fails."""
    store = FileSystemResultStore(str(tmp_path))
    store.create_dirty(result("k"))
    original_has_clean = store.has_clean
    calls = {"n": 0}

    def has_clean_then_finish_cleaning(run_key: str) -> bool:
        calls["n"] += 1
        answer = original_has_clean(run_key)
        if calls["n"] == 1:  # between the check and the publish, the run turns clean
            FileSystemResultStore(str(tmp_path)).mark_clean(run_key)
        return answer

    store.has_clean = has_clean_then_finish_cleaning  # type: ignore[method-assign]
    with pytest.raises(RunAlreadyRecordedError, match="clean"):
        store.create_dirty(result("k"))
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".json") == ["k.json"]


# ---- retries, faults and crashes -------------------------------------------------------


def test_backoff_doubles_up_to_its_cap_and_can_give_up() -> None:
    slept: list[float] = []
    failures = iter(range(6))

    def flaky() -> str:
        if next(failures, None) is not None:
            raise OSError("transient")
        return "done"

    assert with_backoff("step", flaky, Backoff(1.0, 8.0), slept.append) == "done"
    assert slept == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    slept.clear()
    with pytest.raises(CleanupFailed, match="step failed 3 times; last error: OSError: never"):
        with_backoff("step", lambda: (_ for _ in ()).throw(OSError("never")),
                     Backoff(1.0, 8.0, max_attempts=3), slept.append)
    assert slept == [1.0, 2.0]


def _faulty_store(tmp_path: Path) -> FileSystemResultStore:
    return FileSystemResultStore(f"{faulty_fs.PROTOCOL}://{tmp_path}/results")


FAST = Backoff(0.0, 0.0)


def test_transient_storage_failures_are_retried_until_clean(tmp_path: Path) -> None:
    store = _faulty_store(tmp_path)
    # More consecutive failures than one storage call retries on its own (5): the
    # recorder's backoff has to carry the run through.
    FUSE.transient = 13
    try:
        record(store, result("flaky"), StateAccess(), FAST)
    finally:
        FUSE.disarm()
    assert store.has_clean("flaky") and not store.has_dirty("flaky")


def test_a_permanent_failure_leaves_the_run_dirty_and_visible(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    store = _faulty_store(tmp_path)

    def storage_breaks(point: str) -> None:
        if point == "after-dirty":
            FUSE.transient = 10**9

    caplog.set_level(logging.WARNING, logger="state_store.results")
    try:
        with pytest.raises(CleanupFailed, match="marking run broken clean failed 3 times"):
            record(store, result("broken"), StateAccess(), Backoff(0.0, 0.0, max_attempts=3),
                   storage_breaks)
    finally:
        FUSE.disarm()
    assert store.has_dirty("broken")
    assert "marking run broken clean failed (attempt 1" in caplog.text
    assert cli.main(["results", store.url]) == 0
    assert "broken  DIRTY" in capsys.readouterr().out
    # Storage is back: the CLI's --cleanup completes it.
    assert cli.main(["results", store.url, "--cleanup", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(r["run_key"], r["clean"]) for r in listed["runs"]] == [("broken", True)]


def test_a_recording_killed_at_any_point_is_completed_by_a_resume(tmp_path: Path) -> None:
    """The model of a driver dying while it records: the 'process' dies at each of the
    recording's storage mutations in turn; whatever it left, a resume (a new session)
    brings the run to exactly one clean entry holding the run's result, and a second
    recording of the same run never replaces it."""
    recorded = result("crashy")
    mutations = 0
    for crash_at in range(0, 20):
        store = FileSystemResultStore(f"{faulty_fs.PROTOCOL}://{tmp_path}/r{crash_at}")
        FUSE.mutations = 0
        passed: set[str] = set()
        died = dies_during(crash_at, lambda store=store, passed=passed: record(
            store, recorded, StateAccess(), FAST, passed.add))
        if not died:
            mutations = FUSE.mutations
            assert crash_at >= mutations  # it ran past the last mutation
            break
        resume(store, StateAccess(), FAST)
        entry = store.entry("crashy")
        if entry is None:  # died before the dirty entry existed: nothing was recorded
            assert "after-dirty" not in passed, f"crash at {crash_at}: the run's entry is lost"
            record(store, recorded, StateAccess(), FAST)
            entry = store.entry("crashy")
        assert entry is not None and entry.clean and entry.result == recorded
        record(store, result("crashy", outcome="failed"), StateAccess(), FAST)
        assert store.get("crashy") == recorded
    assert mutations > 0, "the recording never got past every crash point"


def test_complete_is_idempotent(tmp_path: Path) -> None:
    store = FileSystemResultStore(str(tmp_path))
    recorded = result("again")
    store.create_dirty(recorded)
    complete(store, recorded, StateAccess(), FAST)
    complete(store, recorded, StateAccess(), FAST)
    assert store.entries()[0].clean


def _broken_checkpoint(tmp_path: Path) -> Path:
    """A checkpoint whose only store has a manifest damaged beyond reading."""
    checkpoint = tmp_path / "ckpt"
    query_id = str(uuid.uuid4())
    root = checkpoint / "state" / "0" / "0" / f"query-{query_id}" / "manifests"
    root.mkdir(parents=True)
    (checkpoint / "metadata").write_text(json.dumps({"id": query_id}) + "\n")
    (root / f"{1:020d}.json").write_text('{"kind": "pyrocks-state-store", "form')
    return checkpoint


def test_a_permanent_error_ends_the_cleanup_at_once_and_leaves_the_run_dirty(
        tmp_path: Path) -> None:
    """A damaged manifest cannot heal: the first failure ends the cleanup (even with no
    limit on attempts), the run stays dirty, and the error names the file."""
    store = FileSystemResultStore(str(tmp_path / "results"))
    broken = replace(result("damaged"), checkpoint=str(_broken_checkpoint(tmp_path)))
    def never_sleeps(delay: float) -> None:
        raise AssertionError(f"a permanent error was retried (after {delay} s)")

    with pytest.raises(CleanupFailed, match=r"retrying cannot change: CorruptFileError: "
                                            r"manifest of version 1 .* not valid JSON"):
        clean_up(broken, StateAccess(), Backoff(1.0, 60.0, max_attempts=0), never_sleeps)
    with pytest.raises(CleanupFailed, match=r"retrying cannot change"):
        record(store, broken, StateAccess(), Backoff(0.0, 0.0, max_attempts=3))
    assert store.has_dirty("damaged")


class _Session:
    """What run_once reads of a SparkSession: its conf (a stand-in for Spark's, not ours)."""

    def __init__(self, conf: dict[str, str]) -> None:
        self.conf = self
        self.values = conf

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)


@pytest.mark.parametrize("fault", ["permanent", "transient"])
def test_run_once_never_hangs_on_a_run_whose_cleanup_keeps_failing(tmp_path: Path,
                                                                   fault: str) -> None:
    """A recorded run is never run again; a dirty one whose cleanup cannot complete ends
    run_once with a clear error after a few attempts, even with no limit configured."""
    prefix = "spark.sql.streaming.stateStore.pyrocks."
    url = f"{faulty_fs.PROTOCOL}://{tmp_path}/results"
    store = FileSystemResultStore(url)
    recorded = replace(result("nightly"), checkpoint=str(_broken_checkpoint(tmp_path))) \
        if fault == "permanent" else result("nightly")
    store.create_dirty(recorded)
    spark = _Session({prefix + "resultStore": url, prefix + "cleanupBackoffInitialSeconds": "0",
                      prefix + "cleanupBackoffMaxSeconds": "0"})
    started: list[str] = []
    if fault == "transient":
        FUSE.transient = 10**9  # the store never answers again
    try:
        with pytest.raises(CleanupFailed, match=r"run nightly already ran .* not run again"):
            run_once(spark, "nightly", lambda: started.append("again"))
    finally:
        FUSE.disarm()
    assert started == [] and store.has_dirty("nightly")

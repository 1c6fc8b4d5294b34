"""The shim's own behaviour, checked in the JVM on its real classes (tests/jvm/, compiled
against the pyspark jars and the shim jar like the shim itself): one JVM per check, with
real worker processes where a check needs them. A failing check prints why."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import state_store
from state_store.driver import bridge

CHECKS_SOURCES = Path(__file__).resolve().parent / "jvm"
CHECKS_CLASS = "io.pyrocks.statestore.ShimChecks"
REPO = Path(state_store.__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def classpath() -> str:
    shim = bridge.jar_path()
    checks = bridge.jar_path(CHECKS_SOURCES, name="pyrocks-shim-checks", classpath=[shim])
    return bridge.java_classpath([shim, checks])


def run_check(name: str, classpath: str, work: Path) -> None:
    done = subprocess.run(
        [bridge.java_executable(), "-cp", classpath, CHECKS_CLASS, name, str(work),
         sys.executable, str(REPO)],
        capture_output=True, text=True, timeout=900,  # a hang guard only
    )
    assert done.returncode == 0 and f"PASS {name}" in done.stdout, (
        f"check {name} failed (exit {done.returncode}):\n{done.stdout[-4000:]}\n"
        f"{done.stderr[-8000:]}"
    )


# ---- read cache and key filter -------------------------------------------------------------


def test_lost_publish_race_invalidates_the_read_cache(classpath: str, tmp_path: Path) -> None:
    run_check("lost-race-invalidates-cache", classpath, tmp_path)


def test_reconnect_invalidates_the_read_cache(classpath: str, tmp_path: Path) -> None:
    run_check("reconnect-invalidates-cache", classpath, tmp_path)


def test_family_and_key_never_collide_in_the_cache(classpath: str, tmp_path: Path) -> None:
    run_check("family-and-key-never-collide", classpath, tmp_path)


def test_reclaim_during_a_scan_keeps_listings_exact(classpath: str, tmp_path: Path) -> None:
    run_check("reclaim-during-scan-keeps-listings-exact", classpath, tmp_path)


def test_key_filter_is_charged_to_the_budget(classpath: str, tmp_path: Path) -> None:
    run_check("key-filter-charged-to-budget", classpath, tmp_path)


def test_key_filter_is_dropped_under_pressure(classpath: str, tmp_path: Path) -> None:
    run_check("key-filter-dropped-under-pressure", classpath, tmp_path)


def test_key_filter_growth_never_overflows(classpath: str, tmp_path: Path) -> None:
    run_check("key-filter-growth-never-overflows", classpath, tmp_path)


# ---- one writer per working copy, abort, interrupts ----------------------------------------


def test_second_writer_waits_then_fails(classpath: str, tmp_path: Path) -> None:
    run_check("second-writer-waits-then-fails", classpath, tmp_path)


def test_second_writer_never_mixes_writes(classpath: str, tmp_path: Path) -> None:
    run_check("second-writer-never-mixes-writes", classpath, tmp_path)


def test_reader_waits_for_the_writer(classpath: str, tmp_path: Path) -> None:
    run_check("reader-waits-for-writer", classpath, tmp_path)


def test_abort_always_leaves_the_store_aborted(classpath: str, tmp_path: Path) -> None:
    run_check("abort-always-leaves-store-aborted", classpath, tmp_path)


def test_interrupt_is_not_a_dead_worker(classpath: str, tmp_path: Path) -> None:
    run_check("interrupt-is-not-a-dead-worker", classpath, tmp_path)


def test_open_spec_names_query_and_writer(classpath: str, tmp_path: Path) -> None:
    run_check("open-spec-names-query-and-writer", classpath, tmp_path)


# ---- deadlines -----------------------------------------------------------------------------


def test_request_deadline_on_a_silent_server(classpath: str, tmp_path: Path) -> None:
    run_check("request-deadline-on-silent-server", classpath, tmp_path)


def test_hung_worker_is_killed_and_replaced(classpath: str, tmp_path: Path) -> None:
    run_check("hung-worker-is-killed-and-replaced", classpath, tmp_path)


def test_maintenance_requests_have_the_deadline(classpath: str, tmp_path: Path) -> None:
    run_check("maintenance-request-has-deadline", classpath, tmp_path)


# ---- finishing the stores of a stopped query (finishQuery) ---------------------------------


def test_finish_query_matches_its_checkpoint_only(classpath: str, tmp_path: Path) -> None:
    run_check("finish-query-matches-its-checkpoint-only", classpath, tmp_path)


def test_finish_query_skips_writers_and_closed_providers(classpath: str, tmp_path: Path) -> None:
    run_check("finish-query-skips-writers-and-closed-providers", classpath, tmp_path)


def test_finish_query_names_every_failed_store(classpath: str, tmp_path: Path) -> None:
    run_check("finish-query-names-every-failed-store", classpath, tmp_path)


# ---- versions from nothing, the change feed, replay from a snapshot ------------------------


def test_load_empty_publishes_a_first_version(classpath: str, tmp_path: Path) -> None:
    run_check("load-empty-publishes-a-first-version", classpath, tmp_path)


def test_change_feed_lists_each_version_in_order(classpath: str, tmp_path: Path) -> None:
    run_check("change-feed-lists-each-version-in-order", classpath, tmp_path)


def test_replay_from_a_snapshot_equals_a_load(classpath: str, tmp_path: Path) -> None:
    run_check("replay-from-a-snapshot-equals-a-load", classpath, tmp_path)

"""Spark's maintenance collects a store's garbage only when a collection could delete
something new (runtime/gc_pacing.py): after the store wrote a record, for another
retention, or once a tenth of the orphan margin has passed. Real worker sessions on real
rocksdict; S3 is moto behind a relay that counts every request; the pacing's clock is the
test's."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

from pyrocks_support import HttpRelay, S3Endpoint
from state_store.format.manifest import FILES_DIR
from state_store.options import StoreOptions
from state_store.runtime.gc_pacing import GcPacing
from state_store.runtime.protocol import I32, Request
from state_store.runtime.worker import Session
from test_idle_snapshots import Clock, commit, session_with_store

MARGIN_S = StoreOptions().orphan_margin_seconds  # the stores' own (the default)


def paced_session(tmp_path: Path, clock: Clock, root: str | None = None,
                  **options: object) -> Session:
    """A worker session with a store open, whose maintenance is paced on `clock`."""
    session = session_with_store(tmp_path, None, root, **options)
    session.gc_pacing = GcPacing(MARGIN_S, clock)
    return session


def maintain(session: Session, retain: int) -> int:
    """One maintenance call as Spark's maintenance thread sends it; files deleted."""
    with session.lock:
        answer = session.dispatch(Request.MAINTAIN, I32.pack(retain))
    assert answer is not None
    return int(json.loads(answer)["gc_files_deleted"])


def test_maintenance_asks_the_store_root_nothing_until_a_record_or_the_retention_changes(
        s3: S3Endpoint, tmp_path: Path) -> None:
    relay = HttpRelay(s3)
    try:
        clock = Clock()
        session = paced_session(tmp_path, clock, s3.url(f"pacing-{uuid.uuid4().hex[:8]}"),
                                storage_options=relay.options)
        for version in (1, 2):
            commit(session, clock, version)

        assert session.store is not None
        root = session.store.checkpoint

        def requests_of(retain: int) -> tuple[int, int]:
            before = len(relay.requests)
            deleted = maintain(session, retain)
            return deleted, len(relay.requests) - before

        assert requests_of(1)[1] > 0 and root.versions() == [2]  # version 1 fell out
        assert requests_of(1) == (0, 0)  # nothing new: no request at all
        assert requests_of(1) == (0, 0)
        commit(session, clock, 3)
        assert requests_of(1)[1] > 0 and root.versions() == [3]  # version 2 fell out
        assert requests_of(1) == (0, 0)
        assert requests_of(2)[1] > 0  # another retention: a collection
        assert requests_of(2) == (0, 0)
        session.store.snapshot_now()  # a snapshot published: a collection
        assert requests_of(2)[1] > 0
        assert requests_of(2) == (0, 0)
        clock.now += MARGIN_S * 0.1
        assert requests_of(2)[1] > 0  # a tenth of the margin later: a collection
        assert requests_of(2) == (0, 0)
    finally:
        relay.stop()


def test_what_time_alone_makes_garbage_is_collected_a_tenth_of_the_margin_later(
        tmp_path: Path) -> None:
    """An orphan (a crashed attempt's file) past the margin while nothing else changes:
    kept by the calls within a tenth of the margin of the last collection, then deleted."""
    clock = Clock()
    root = tmp_path / "root"
    session = paced_session(tmp_path, clock)
    commit(session, clock, 1)
    assert maintain(session, 10) == 0
    store_files = next(root.glob(f"**/{FILES_DIR}"))
    orphan = store_files / f"{uuid.uuid4().hex}.changelog"
    orphan.write_bytes(b"left by a crashed attempt")
    aged = time.time() - 2 * MARGIN_S
    os.utime(orphan, (aged, aged))
    clock.now += MARGIN_S * 0.1 - 1
    assert maintain(session, 10) == 0 and orphan.exists()
    clock.now += 1
    assert maintain(session, 10) == 1 and not orphan.exists()


def test_a_newly_opened_store_collects_at_its_first_maintenance(tmp_path: Path) -> None:
    clock = Clock()
    session = paced_session(tmp_path, clock)
    for version in (1, 2):
        commit(session, clock, version)
    assert session.store is not None
    root = session.store.checkpoint
    maintain(session, 1)
    assert root.versions() == [2]
    session.close_store()
    assert session.gc_pacing is None  # the next store's maintenance starts afresh

"""Savepoints and restores with real Spark, compared with Spark's HDFS provider on the same
input: a restored query (new checkpoint, new query id) gives exactly the output the original
would have given, with the source deleted, in both ownership modes, and as a fork."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException

from harness import (
    Outputs,
    SavedRun,
    assert_same_outputs,
    checkpoint_of,
    make_spark,
    run_queries,
    start_query,
)
from pyrocks_support import pyrocks_conf
from state_store.cli import main
from state_store.format import gc
from state_store.format.manifest import Owner
from state_store.format.seeding import trusted_roots
from state_store.format.storage import open_storage
from state_store.format.store_root import StoreRoot
from state_store.options import StoreOptions
from state_store.runtime.engine import VersionedStore
from state_store.savepoint import (
    RestoreError,
    SourceError,
    restore,
    savepoint,
    stop_with_savepoint,
)
from streaming_queries import BY_NAME, QUERIES, write_batch

AGG = BY_NAME["agg_update"]


def depends_on(checkpoint: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    capsys.readouterr()
    assert main(["inspect", str(checkpoint), "--json"]) == 0
    return json.loads(capsys.readouterr().out)["depends_on"]


def store_roots(checkpoint: Path) -> list[Path]:
    return sorted(p.parent for p in (checkpoint / "state").glob("**/query-*/manifests"))


def durable_of(root: Path) -> StoreRoot:
    """A store root as the worker opens it: trusting the roots its seed recorded."""
    query_id = root.name.removeprefix("query-")
    return StoreRoot(open_storage(str(root)), str(root),
                      trusted_roots=trusted_roots(open_storage(str(root.parent)), query_id))


def load_every_version(checkpoint: Path, scratch: Path) -> int:
    """Loads every retained version of every store of `checkpoint`; how many it loaded."""
    loaded = 0
    for i, root in enumerate(store_roots(checkpoint)):
        durable = durable_of(root)
        store = VersionedStore(str(root), durable, scratch / str(i), StoreOptions(),
                               ThreadPoolExecutor(1))
        for version in durable.versions():
            store.load(version)
            loaded += 1
        store.close()
    return loaded


def files_under(directory: Path) -> dict[str, int]:
    return {str(p.relative_to(directory)): p.stat().st_size
            for p in directory.rglob("*") if p.is_file()}


def test_savepoint_delete_source_restore_no_claim_matches_hdfs(
        hdfs_reference: Outputs, ours_run: SavedRun, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """savepoint -> delete the source checkpoint -> restore no-claim -> delete the savepoint
    at once -> more batches, and a restart: identical to an uninterrupted run. The source
    is the session's run on ours, stopped after its first half (`ours_run`)."""
    ours_run.resume_in(tmp_path, QUERIES)
    query_ids: dict[str, str] = {}
    for spec in QUERIES:
        checkpoint, target = checkpoint_of(tmp_path, spec), tmp_path / "savepoints" / spec.name
        old_id = json.loads((checkpoint / "metadata").read_text())["id"]
        info = savepoint(str(checkpoint), str(target))
        assert (info.batch, info.source_query_id) == (ours_run.before_cut(spec.name), old_id)
        shutil.rmtree(checkpoint)
        restored = restore(str(target), str(checkpoint))
        assert restored.query_id != old_id
        query_ids[spec.name] = restored.query_id
        # Every store was copied (verified) by the restore: the source may go now.
        assert depends_on(checkpoint, capsys) == [], spec.name
        shutil.rmtree(target)

    rest = run_queries(QUERIES, tmp_path, pyrocks_conf(tmp_path / "pool"),
                       first_batch=ours_run.cut, restart_after=6)
    assert_same_outputs(hdfs_reference, ours_run.followed_by(rest))
    for spec in QUERIES:
        checkpoint = checkpoint_of(tmp_path, spec)
        assert json.loads((checkpoint / "metadata").read_text())["id"] == query_ids[spec.name]
        assert load_every_version(checkpoint, tmp_path / "scratch" / spec.name) > 0


def test_no_claim_restore_links_every_store_and_depends_on_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The restore copies each store's version into the new checkpoint, on a local disk as
    hard links (no state byte written), so the new checkpoint depends on nothing: a later
    claim of the source, or the source's own GC, cannot take a file it needs."""
    conf = pyrocks_conf(tmp_path / "pool")
    run_queries([AGG], tmp_path / "a", conf, batches=3, restart_after=[])
    source = checkpoint_of(tmp_path / "a", AGG)
    before = files_under(source)
    info = restore(str(source), str(tmp_path / "b"))
    written = files_under(tmp_path / "b")
    assert files_under(source) == before  # the source is only read
    copied = [tmp_path / "b" / p for p in written if "/query-" in p and "/files/" in p]
    assert copied and all(p.stat().st_nlink >= 2 for p in copied)  # links to the source's
    assert len(store_roots(tmp_path / "b")) == info.stores == len(store_roots(source)) > 0
    spark_side = {p for p in written if "/query-" not in p and not p.endswith("_seed.json")}
    assert spark_side <= {"metadata", "_restore.json", "offsets/1", "offsets/2",
                          "commits/2", *(p for p in before if not p.startswith("state/")
                                         or "/_metadata/" in p)}
    assert depends_on(tmp_path / "b", capsys) == []
    # the source may be claimed (or deleted) now: the restored query still runs on its own
    restore(str(source), str(tmp_path / "c"), mode="claim")
    shutil.rmtree(source)
    assert load_every_version(tmp_path / "b", tmp_path / "scratch") == info.stores


def test_claim_owns_source_files_and_refuses_a_second_claim(
        hdfs_reference: Outputs, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = pyrocks_conf(tmp_path / "pool")
    work, new = tmp_path / "a", tmp_path / "claimed"
    run_queries([AGG], work, conf, batches=4, restart_after=[])
    source = checkpoint_of(work, AGG)
    claimed = restore(str(source), str(new), mode="claim")
    for mode in ("claim", "no-claim"):
        with pytest.raises(RestoreError, match=f"claimed by query {claimed.query_id}"):
            restore(str(source), str(tmp_path / f"again-{mode}"), mode=mode)
    source_files = {p for p in files_under(source) if "/files/" in p}
    outputs: dict[int, list[str]] = {}
    # A snapshot at every commit: each new version's chain subsumes the claimed changelogs.
    spark = make_spark(pyrocks_conf(tmp_path / "pool", maxReplayVersions=1))
    try:
        # The claimed query must not run again: its GC would delete the claimer's files.
        old = start_query(spark, AGG, work, {})
        write_batch(work / AGG.name / "input", 4)
        with pytest.raises(StreamingQueryException, match=f"claimed by query {claimed.query_id}"):
            old.processAllAvailable()
        assert files_under(source).keys() >= source_files
        query = start_query(spark, AGG, work, outputs, checkpoint=new)
        query.processAllAvailable()
        for batch in range(5, 8):
            write_batch(work / AGG.name / "input", batch)
            query.processAllAvailable()
        query.stop()
    finally:
        spark.stop()
    want = {b: rows for b, rows in hdfs_reference[AGG.name].items() if b >= 4}
    assert outputs == want
    assert depends_on(new, capsys) == [str(source)]  # claimed records still retained
    claimed_logs, still_claimed = set(), set()
    for root in store_roots(new):
        durable = durable_of(root)
        for version in durable.versions():
            claimed_logs |= {c.file.name for c in durable.read_manifest(version).changelogs
                             if c.file.owner is Owner.CLAIMED}
        gc.collect_garbage(durable, 1, orphan_margin_s=3600)  # the new query's GC, retaining 1
        for s in durable.snapshot_versions():  # SSTs the live LSM still has stay claimed
            still_claimed |= {f.name for f in durable.read_snapshot(s).files
                              if f.owner is Owner.CLAIMED}
    assert claimed_logs
    gone = {p.rsplit("/", 1)[-1] for p in source_files if not (source / p).exists()}
    assert gone >= claimed_logs
    assert all((source / p).exists() for p in source_files
               if p.rsplit("/", 1)[-1] in still_claimed)
    assert depends_on(new, capsys) == ([str(source)] if still_claimed else [])
    assert load_every_version(new, tmp_path / "scratch") > 0


def test_fork_of_a_running_query_runs_beside_the_original(
        hdfs_reference: Outputs, tmp_path: Path) -> None:
    """A savepoint of a running query (its latest committed batch, taken while it runs),
    restored twice: the two forks and the original run at once and all give the
    reference output; the savepoint added no batch to the original."""
    conf = pyrocks_conf(tmp_path / "pool")
    work = tmp_path / "orig"
    sinks: dict[str, dict[int, list[str]]] = {"orig": {}, "fork-1": {}, "fork-2": {}}
    forks = [tmp_path / "fork-1", tmp_path / "fork-2"]
    spark = make_spark(conf)
    try:
        queries = [start_query(spark, AGG, work, sinks["orig"])]
        for batch in range(4):
            write_batch(work / AGG.name / "input", batch)
            queries[0].processAllAvailable()
        commits = sorted((checkpoint_of(work, AGG) / "commits").iterdir())
        info = savepoint(str(checkpoint_of(work, AGG)), str(tmp_path / "sp"))
        assert sorted((checkpoint_of(work, AGG) / "commits").iterdir()) == commits
        assert info.batch == 3
        for fork in forks:
            restore(info.path, str(fork))
            queries.append(start_query(spark, AGG, work, sinks[fork.name], checkpoint=fork))
        for batch in range(4, 8):
            write_batch(work / AGG.name / "input", batch)
            for query in queries:
                query.processAllAvailable()
        for query in queries:
            query.stop()
    finally:
        spark.stop()
    want = {b: rows for b, rows in hdfs_reference[AGG.name].items() if b >= 4}
    for name, sink in sinks.items():
        got = {b: rows for b, rows in sink.items() if b >= 4}
        assert got == want, name
    assert {b: rows for b, rows in sinks["orig"].items() if b < 4} == {
        b: rows for b, rows in hdfs_reference[AGG.name].items() if b < 4}


def assert_every_store_finished(checkpoint: Path) -> None:
    """A stopped query's stores were finished: each one's last version has its snapshot."""
    for root in store_roots(checkpoint):
        durable = StoreRoot(open_storage(str(root)), str(root))
        assert durable.versions()[-1] in durable.snapshot_versions(), root


def test_stop_with_savepoint_drains_stops_and_resumes_exactly(
        hdfs_reference: Outputs, tmp_path: Path) -> None:
    # No snapshot when idle: only the stop's finish can leave the last versions snapshotted.
    conf = pyrocks_conf(tmp_path / "pool", snapshotWhenIdleSeconds=0)
    work, new = tmp_path / "orig", tmp_path / "restored"
    outputs: dict[int, list[str]] = {}
    spark = make_spark(conf)
    try:
        query = start_query(spark, AGG, work, outputs)
        for batch in range(3):
            write_batch(work / AGG.name / "input", batch)
            query.processAllAvailable()
        write_batch(work / AGG.name / "input", 3)  # not processed yet: drain must take it
        info = stop_with_savepoint(query, str(tmp_path / "sp"), drain=True)
        assert not query.isActive
    finally:
        spark.stop()
    assert info.batch == max(outputs)
    checkpoint = checkpoint_of(work, AGG)
    assert_every_store_finished(checkpoint)
    restore(info.path, str(new))
    resumed: dict[int, list[str]] = {}
    spark = make_spark(conf)
    try:
        query = start_query(spark, AGG, work, resumed, checkpoint=new)
        for batch in range(4, 8):
            write_batch(work / AGG.name / "input", batch)
            query.processAllAvailable()
        query.stop()
    finally:
        spark.stop()
    assert_same_outputs({AGG.name: hdfs_reference[AGG.name]}, {AGG.name: {**outputs, **resumed}})


def test_stop_from_another_process_stops_at_a_batch_boundary_and_savepoints(
        tmp_path: Path) -> None:
    """`state-store stop`, run as a separate process as a person would: the query running
    in this application sees the request at its next event, drains (--drain), stops, and
    the command writes the savepoint of the last batch it committed; no request is left."""
    conf = {**pyrocks_conf(tmp_path / "pool", snapshotWhenIdleSeconds=0),  # finish alone
            "spark.sql.streaming.noDataProgressEventInterval": "100ms"}
    work, outputs = tmp_path / "orig", {}
    spark = make_spark(conf)
    try:
        query = start_query(spark, AGG, work, outputs)
        for batch in range(2):
            write_batch(work / AGG.name / "input", batch)
            query.processAllAvailable()
        write_batch(work / AGG.name / "input", 2)  # not processed yet: --drain must take it
        checkpoint = checkpoint_of(work, AGG)
        done = subprocess.run(
            [sys.executable, "-m", "state_store.cli", "stop", str(checkpoint), "-p",
             str(tmp_path / "sp"), "--drain", "--timeout", "120", "--json"],
            capture_output=True, text=True, timeout=300)
        query.awaitTermination(60)
        assert not query.isActive
    finally:
        spark.stop()
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert info["batch"] == max(outputs) == 2
    assert not [p.name for p in checkpoint.iterdir() if "_pyrocks_stop" in p.name]
    assert_every_store_finished(checkpoint)
    verified = subprocess.run([sys.executable, "-m", "state_store.cli", "inspect",
                               info["path"], "--json"], capture_output=True, text=True)
    assert verified.returncode == 0 and json.loads(verified.stdout)["verified"] is True


def test_inspect_verifies_a_savepoint_and_names_a_damaged_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = pyrocks_conf(tmp_path / "pool")
    run_queries([AGG], tmp_path, conf, batches=2, restart_after=[])
    info = savepoint(str(checkpoint_of(tmp_path, AGG)), str(tmp_path / "sp"))
    capsys.readouterr()
    assert main(["inspect", info.path, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["verified"], report["files"], report["savepoint"]["batch"]) == (
        True, info.files, info.batch)
    victim = sorted((tmp_path / "sp" / "stores").rglob("*.changelog"))[0]
    victim.write_bytes(victim.read_bytes()[:-1] + b"!")
    assert main(["inspect", info.path]) == 1
    out = capsys.readouterr().out
    assert "NOT VALID" in out and victim.name in out


def test_a_query_started_on_an_interrupted_restore_is_refused(tmp_path: Path) -> None:
    """A restore writes `metadata` last: until then Spark refuses the checkpoint (offsets
    without metadata), so no query can run on a half-restored state."""
    conf = pyrocks_conf(tmp_path / "pool")
    run_queries([AGG], tmp_path, conf, batches=2, restart_after=[])
    new = tmp_path / "restored"
    restore(str(checkpoint_of(tmp_path, AGG)), str(new))
    (new / "metadata").unlink()  # as if the restore had died before its last step
    spark = make_spark(conf)
    try:
        with pytest.raises(Exception, match="metadata file is missing"):
            start_query(spark, AGG, tmp_path, {}, checkpoint=new).processAllAvailable()
    finally:
        spark.stop()


def _changed_agg(spark, source):  # noqa: ANN001, ANN202 - AGG with another value schema
    from pyspark.sql import functions as F

    from streaming_queries import read
    return read(spark, source).groupBy("k").agg(F.count("*"), F.sum("v"), F.min("ts"),
                                                 F.max("ts"))


def _schema_error(spark, work: Path, checkpoint: Path) -> str:  # noqa: ANN001
    """The error class Spark gives for AGG restarted on `checkpoint` with a changed state
    value schema."""
    from dataclasses import replace

    changed = replace(AGG, build=_changed_agg)
    query = start_query(spark, changed, work, {}, checkpoint=checkpoint)
    write_batch(work / AGG.name / "input", 9)
    with pytest.raises(StreamingQueryException) as failure:
        query.processAllAvailable()
    query.stop()
    return str(failure.value)


def test_a_changed_schema_after_a_savepoint_is_refused_as_on_the_source(tmp_path: Path) -> None:
    """A native savepoint carries Spark's state schema files, so a restored query whose
    state schema changed is refused with the error Spark gives on the source checkpoint."""
    conf = pyrocks_conf(tmp_path / "pool")
    run_queries([AGG], tmp_path / "a", conf, batches=3, restart_after=[])
    source = checkpoint_of(tmp_path / "a", AGG)
    schemas = sorted(str(p.relative_to(source)) for p in (source / "state").rglob("*")
                     if p.is_file() and "_metadata" in p.parts and not p.name.startswith("."))
    assert any(p.endswith("/schema") or "_stateSchema" in p for p in schemas), schemas
    savepoint(str(source), str(tmp_path / "sp"))
    restore(str(tmp_path / "sp"), str(tmp_path / "b"))
    restored = tmp_path / "b"
    assert all((restored / p).exists() for p in schemas)
    spark = make_spark(conf)
    try:
        on_source = _schema_error(spark, tmp_path / "a", source)
        on_restored = _schema_error(spark, tmp_path / "a", restored)
    finally:
        spark.stop()
    error_class = "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE"
    assert error_class in on_source and error_class in on_restored, (on_source, on_restored)


@pytest.mark.parametrize("mode", ["no-claim", "claim"])
def test_a_damaged_savepoint_is_refused_naming_the_file(tmp_path: Path, mode: str) -> None:
    """A file of a savepoint altered at the same length (a commit's watermark, a state
    file's bytes) fails the restore, which names it, before the new checkpoint is usable."""
    conf = pyrocks_conf(tmp_path / "pool")
    run_queries([AGG], tmp_path / "a", conf, batches=3, restart_after=[])
    sp = tmp_path / "sp"
    info = savepoint(str(checkpoint_of(tmp_path / "a", AGG)), str(sp))
    commit = sp / "checkpoint" / "commits" / str(info.batch)
    state_file = next(p for p in sorted((sp / "stores").rglob("files/*")) if p.stat().st_size)
    for damaged in (commit, state_file):
        good = damaged.read_bytes()
        damaged.write_bytes(bytes([good[0] ^ 0x01]) + good[1:])  # same length, other bytes
        target = tmp_path / f"restored-{damaged.name}"
        with pytest.raises(Exception, match=str(damaged.relative_to(sp))) as refused:
            restore(str(sp), str(target), mode=mode)
        assert "checksum" in str(refused.value) or "corrupt" in str(refused.value)
        assert not (target / "metadata").exists()  # never a usable checkpoint
        damaged.write_bytes(good)
    restored = restore(str(sp), str(tmp_path / "restored"), mode=mode)
    assert (Path(restored.checkpoint) / "metadata").exists()


def test_a_checkpoint_missing_a_store_is_refused_naming_it(tmp_path: Path) -> None:
    """Spark's operator metadata lists every store of every partition: a savepoint or a
    restore of a checkpoint that lacks one would start it empty, so both refuse."""
    conf = pyrocks_conf(tmp_path / "pool")
    run_queries([AGG], tmp_path / "a", conf, batches=2, restart_after=[])
    source = checkpoint_of(tmp_path / "a", AGG)
    (root,) = (source / "state" / "0" / "1").glob("query-*")
    shutil.rmtree(root)
    for attempt in (lambda: savepoint(str(source), str(tmp_path / "sp")),
                    lambda: restore(str(source), str(tmp_path / "new"))):
        with pytest.raises(SourceError, match=r"lacks 1 store\(s\).*: 0/1; their state"):
            attempt()
    assert not (tmp_path / "sp").exists() and not (tmp_path / "new").exists()


def test_state_of_one_query_under_two_checkpoint_paths_is_refused(tmp_path: Path) -> None:
    """Under a rootUrl, state sits below a hash of the checkpoint path: the same query id
    under two hashes (the checkpoint was used under two paths) is ambiguous, never guessed."""
    conf = pyrocks_conf(tmp_path / "pool", rootUrl=str(tmp_path / "root"))
    run_queries([AGG], tmp_path / "a", conf, batches=2, restart_after=[])
    source = checkpoint_of(tmp_path / "a", AGG)
    (first,) = (tmp_path / "root").iterdir()
    shutil.copytree(first, tmp_path / "root" / "0123456789abcdef")
    with pytest.raises(SourceError, match=r"sits under 2 checkpoint locations .*"
                                          r"0123456789abcdef"):
        savepoint(str(source), str(tmp_path / "sp"), root_url=str(tmp_path / "root"))


def test_no_claim_restore_of_a_query_with_a_root_url_stages_on_that_root(
        hdfs_reference: Outputs, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """State under a rootUrl: the restore copies each store's version onto that root (not
    into the checkpoint), each store's first open moves it into place, and the output is
    the uninterrupted run's."""
    root = tmp_path / "state-root"
    conf = pyrocks_conf(tmp_path / "pool", rootUrl=str(root))
    staged: list[Path] = []

    def between(phase: int) -> None:
        checkpoint = checkpoint_of(tmp_path, AGG)
        info = savepoint(str(checkpoint), str(tmp_path / "sp"), root_url=str(root))
        shutil.rmtree(checkpoint)
        restored = restore(info.path, str(checkpoint), target_root_url=str(root))
        staged.extend((root / "_restored" / restored.query_id).glob("*/*/*/manifests"))
        assert len(staged) == restored.stores and not list(checkpoint.glob("state/**/files"))
        assert depends_on(checkpoint, capsys) == []

    ours = run_queries([AGG], tmp_path, conf, restart_after=4, between_phases=between)
    assert_same_outputs({AGG.name: hdfs_reference[AGG.name]}, ours)
    assert staged and not any(p.exists() for p in staged)  # moved into the stores' roots

"""Canonical savepoints with real Spark: taken of Spark's RocksDB and HDFS providers and of
ours through Spark's state data source, restored onto ours, onto Spark's RocksDB provider,
and at another partition count. Every restored query must give exactly the output its
original gives when it simply continues, batch by batch.

A canonical restore adds batch N + 1 (N's offsets with the new provider and partition count,
as Spark's offline repartition does), so the restored query's batch b + 1 is the original's
batch b from there on (`shifted`).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from harness import (
    HDFS,
    PROVIDER_KEY,
    Outputs,
    SavedRun,
    assert_same_outputs,
    checkpoint_of,
    make_spark,
    run_queries,
    saved_run,
    start_query,
)
from pyrocks_support import pyrocks_conf
from state_store.cli import main
from state_store.errors import CorruptFileError
from state_store.format.storage import checksum, format_checksum
from state_store.savepoint import RestoreError, SourceError, restore, savepoint
from state_store.spark import PROVIDER_CLASS
from streaming_queries import BY_NAME, QUERIES, QuerySpec, read, write_batch

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
PARTITIONS_KEY = "spark.sql.shuffle.partitions"
SAVEPOINT_AFTER = 4  # batches 0..3 run before the savepoint, 4..7 after the restore
RESCALED = ("agg_update", "window_append", "dedup_watermark", "join_left_outer",
            "session_window", "apply_in_pandas_with_state", "apply_in_pandas_event_timeout")


def shifted(outputs: Outputs, added: dict[str, int]) -> Outputs:
    """The restored query's outputs renumbered as the original's: the restore added one
    committed batch (added[name], the savepoint's batch + 1), so the restored query's batch
    b + 1 is the original's b after it."""
    return {name: {(b - 1 if b > added[name] else b): rows for b, rows in batches.items()
                   if b != added[name]}
            for name, batches in outputs.items()}


def migrate(work: Path, specs: Sequence[QuerySpec], conf: dict[str, str], *,
            partitions: dict[str, int] | None = None, provider: str = "pyrocks",
            check: Callable[[SparkSession, QuerySpec, Path, int], None] | None = None
            ) -> dict[str, int]:
    """Takes a canonical savepoint of each query's checkpoint under `work` and restores it
    over the checkpoint's place, at the partition count `partitions` names for the query
    (else at its own); `check(spark, spec, savepoint, batch)` looks at each restored
    checkpoint. The batch each restore added, by query."""
    added: dict[str, int] = {}
    spark = make_spark(conf)
    try:
        for spec in specs:
            checkpoint = checkpoint_of(work, spec)
            target = work / spec.name / "canonical"
            info = savepoint(str(checkpoint), str(target), format="canonical", spark=spark)
            assert info.format == "canonical"
            added[spec.name] = info.batch + 1
            checkpoint.rename(work / spec.name / "original")
            restore(str(target), str(checkpoint), partitions=(partitions or {}).get(spec.name),
                    provider=provider, spark=spark)
            if check is not None:
                check(spark, spec, target, info.batch)
    finally:
        spark.stop()
    return added


def run_migrated(work: Path, names: Sequence[str], conf: dict[str, str], source: SavedRun,
                 **how: Any) -> Outputs:
    """All 8 batches of `names`: the first SAVEPOINT_AFTER resumed from `source`'s saved
    run, then migrated (`migrate`) and run on under `conf`; numbered as the original's
    (`shifted`)."""
    specs = [BY_NAME[n] for n in names]
    assert source.cut == SAVEPOINT_AFTER
    source.resume_in(work, specs)
    added = migrate(work, specs, conf, **how)
    return source.followed_by(
        shifted(run_queries(specs, work, conf, first_batch=SAVEPOINT_AFTER), added))


@pytest.fixture(scope="module")
def rocksdb_run(tmp_path_factory: pytest.TempPathFactory) -> SavedRun:
    """Every query's first SAVEPOINT_AFTER batches on Spark's RocksDB provider at 4
    partitions: the source of the migration from RocksDB (to ours, some queries rescaled
    to 7; the migrations off ours resume the session's run on ours, `ours_run`). Its later
    batches are not run: Spark's providers answer alike (the HDFS reference's answers, as
    the first batches show), so the HDFS reference judges the migrated ones."""
    return saved_run(QUERIES, tmp_path_factory.mktemp("rocksdb"),
                     {PROVIDER_KEY: ROCKSDB, PARTITIONS_KEY: "4"}, cut=SAVEPOINT_AFTER,
                     batches=SAVEPOINT_AFTER)


def restored_batch(checkpoint: Path) -> int:
    """The batch a canonical restore added to `checkpoint` (its record names the batch
    it restored; it added the one after)."""
    return json.loads((checkpoint / "_restore.json").read_text())["batch"] + 1


def offsets_conf(checkpoint: Path, batch: int) -> dict[str, str]:
    return json.loads((checkpoint / "offsets" / str(batch)).read_text().splitlines()[1])["conf"]


def test_spark_rocksdb_source_run_answers_as_hdfs(rocksdb_run: SavedRun,
                                                  hdfs_run: SavedRun) -> None:
    """The source run the RocksDB migrations resume gives the HDFS reference's answers up
    to the same cut (its no-data batches included), at its own partition count (outputs
    depend on neither)."""
    assert_same_outputs(hdfs_run.up_to_cut([q.name for q in QUERIES]), rocksdb_run.outputs)


def state_rows(spark: SparkSession, checkpoint: Path, batch: int) -> dict[str, set]:
    """Every row of every store at `batch`, read through Spark's state data source."""
    found = {}
    metadata = spark.read.format("state-metadata").load(str(checkpoint)).collect()
    for op in metadata:
        frame = (spark.read.format("statestore").option("batchId", batch)
                 .option("operatorId", op.operatorId).option("storeName", op.stateStoreName)
                 .load(str(checkpoint)))
        found[f"{op.operatorId}/{op.stateStoreName}"] = {
            (r.partition_id, repr(r.key), repr(r.value)) for r in frame.collect()}
    return found


def misrouted_rows(spark: SparkSession, checkpoint: Path, batch: int, savepoint_dir: Path,
                   partitions: int) -> list[str]:
    """Rows whose partition is not the one Spark's HashPartitioning (Murmur3 of the routing
    columns, pmod the partition count) sends their key to, checked per store."""
    descriptor = json.loads((savepoint_dir / "_savepoint.json").read_text())
    problems = []
    for store in descriptor["canonical_stores"]:
        frame = (spark.read.format("statestore").option("batchId", batch)
                 .option("operatorId", store["operator"])
                 .option("storeName", store["store_name"]).load(str(checkpoint)))
        columns = ", ".join(f"key.`{c}`" for c in store["route_columns"])
        wrong = frame.where(f"partition_id != pmod(hash({columns}), {partitions})").count()
        total = frame.count()
        if wrong or total != store["rows"]:
            problems.append(f"{store['operator']}/{store['store_name']}: {wrong} misrouted, "
                            f"{total} rows against {store['rows']} saved")
    return problems


class RoutingCheck:
    """`migrate`'s check of the queries it rescales from `before` to `after` partitions:
    the partition count of each side of the restore, and every restored row where Spark
    routes its key. `checked` names the queries it looked at, in order."""

    def __init__(self, work: Path, before: int, after: int, names: Sequence[str]) -> None:
        self.work, self.before, self.after = work, before, after
        self.names = set(names)
        self.checked: list[str] = []

    def __call__(self, spark: SparkSession, spec: QuerySpec, target: Path, batch: int) -> None:
        if spec.name not in self.names:
            return
        checkpoint = checkpoint_of(self.work, spec)
        assert offsets_conf(checkpoint, batch)[PARTITIONS_KEY] == str(self.before)
        assert offsets_conf(checkpoint, batch + 1)[PARTITIONS_KEY] == str(self.after)
        assert misrouted_rows(spark, checkpoint, batch + 1, target, self.after) == []
        self.checked.append(spec.name)


@pytest.mark.usefixtures("rocksdb_run")  # asked for by name below (tests/work_units.py)
@pytest.mark.parametrize("source", ["rocksdb_run", "hdfs_run"],
                         ids=["from_rocksdb", "from_hdfs"])
def test_a_query_moves_from_a_spark_provider_onto_ours_with_the_same_answers(
        tmp_path: Path, request: pytest.FixtureRequest, hdfs_reference: Outputs,
        source: str) -> None:
    """Against the same queries running all 8 batches on Spark's providers. From Spark's
    RocksDB provider (at 4 partitions) the RESCALED queries also move to 7 partitions,
    every row where Spark routes its key; the others keep their count, as every query
    from Spark's HDFS provider does."""
    run: SavedRun = request.getfixturevalue(source)
    original = ROCKSDB if source == "rocksdb_run" else HDFS
    conf = {**pyrocks_conf(tmp_path / "pool"), PROVIDER_KEY: original}
    names = [q.name for q in QUERIES]
    rescaled = RESCALED if original == ROCKSDB else ()
    routing = RoutingCheck(tmp_path, 4, 7, rescaled)
    assert_same_outputs(hdfs_reference, run_migrated(
        tmp_path, names, conf, run, partitions={n: 7 for n in rescaled}, check=routing))
    assert routing.checked == list(rescaled)
    for spec in QUERIES:
        checkpoint = checkpoint_of(tmp_path, spec)
        added = restored_batch(checkpoint)
        assert offsets_conf(checkpoint, added - 1)[PROVIDER_KEY] == original
        assert offsets_conf(checkpoint, added)[PROVIDER_KEY] == PROVIDER_CLASS
        stores = list((checkpoint / "state").glob("*/*/**/query-*/manifests"))
        assert stores, f"{spec.name}: no store of ours in the restored checkpoint"


def test_rescaling_ours_routes_every_row_where_spark_does_and_keeps_the_answers(
        tmp_path: Path, ours_run: SavedRun, hdfs_reference: Outputs) -> None:
    """From the 3 partitions of the session's run on ours (`ours_run`) to 2: the rows of
    three stores of ours merged into two."""
    conf = pyrocks_conf(tmp_path / "pool")
    routing = RoutingCheck(tmp_path, 3, 2, RESCALED)
    outputs = run_migrated(tmp_path, RESCALED, conf, ours_run,
                           partitions={n: 2 for n in RESCALED}, check=routing)
    assert routing.checked == list(RESCALED)
    assert_same_outputs({n: hdfs_reference[n] for n in RESCALED}, outputs)


def test_round_trip_ours_canonical_ours_is_lossless(tmp_path: Path) -> None:
    conf = pyrocks_conf(tmp_path / "pool")
    names = ["agg_update", "join_inner", "session_window", "apply_in_pandas_with_state"]
    run_queries([BY_NAME[n] for n in names], tmp_path, conf, batches=3, restart_after=2)
    spark = make_spark(conf)
    try:
        for name in names:
            source = checkpoint_of(tmp_path, BY_NAME[name])
            first, second = tmp_path / name / "sp1", tmp_path / name / "sp2"
            restored = tmp_path / name / "restored"
            batch = savepoint(str(source), str(first), format="canonical", spark=spark).batch
            restore(str(first), str(restored), spark=spark)
            before = state_rows(spark, source, batch)
            after = state_rows(spark, restored, batch + 1)
            assert before == after and sum(map(len, before.values())) > 0, name
            # ... and the restored checkpoint's canonical savepoint holds the same rows
            savepoint(str(restored), str(second), format="canonical", spark=spark)
            for store in before:
                rows = [spark.read.parquet(str(sp / "canonical" / store))
                        .select("partition_id", "key", "value").collect()
                        for sp in (first, second)]
                assert sorted(map(repr, rows[0])) == sorted(map(repr, rows[1])), store
    finally:
        spark.stop()


def test_an_interrupted_canonical_restore_is_completed_by_its_rerun(tmp_path: Path) -> None:
    """A restore interrupted after some stores committed their version N + 2 (here: all of
    them but one, and no final commit) completes when rerun: a store that holds its version
    already loses the publish race cleanly (as a Spark task retry of a committed partition
    does), and leaves no file of its own behind."""
    conf = pyrocks_conf(tmp_path / "pool")
    spec = BY_NAME["join_inner"]
    run_queries([spec], tmp_path, conf, batches=3, restart_after=[])
    spark = make_spark(conf)
    try:
        source = checkpoint_of(tmp_path, spec)
        sp, restored = tmp_path / "sp", tmp_path / "restored"
        batch = savepoint(str(source), str(sp), format="canonical", spark=spark).batch
        restore(str(sp), str(restored), spark=spark)
        complete = state_rows(spark, restored, batch + 1)
        (restored / "commits" / str(batch + 1)).unlink()  # interrupted before its last step
        roots = sorted(p.parent for p in (restored / "state").glob("**/query-*/manifests"))
        shutil.rmtree(roots[0])  # and one store had not committed yet
        before = {p: p.stat().st_ino for r in roots[1:] for p in r.rglob("*") if p.is_file()}
        restore(str(sp), str(restored), spark=spark)  # the rerun completes it
        assert (restored / "commits" / str(batch + 1)).exists()
        assert state_rows(spark, restored, batch + 1) == complete
        after = {p: p.stat().st_ino for r in roots[1:] for p in r.rglob("*") if p.is_file()}
        assert after == before  # the committed stores kept their files, and gained none
    finally:
        spark.stop()


def test_exit_path_restores_onto_spark_rocksdb_with_the_same_answers(
        tmp_path: Path, ours_run: SavedRun, hdfs_reference: Outputs) -> None:
    names = ["agg_update", "join_left_outer", "session_window", "apply_in_pandas_with_state"]
    conf = pyrocks_conf(tmp_path / "pool")
    outputs = run_migrated(tmp_path, names, conf, ours_run, provider="rocksdb")
    assert_same_outputs({n: hdfs_reference[n] for n in names}, outputs)
    for name in names:
        checkpoint = checkpoint_of(tmp_path, BY_NAME[name])
        assert offsets_conf(checkpoint, restored_batch(checkpoint))[PROVIDER_KEY] == ROCKSDB
        assert not list((checkpoint / "state").glob("**/query-*")), name
        assert list((checkpoint / "state").glob("**/*.zip")), name


def test_savepoint_is_readable_with_pyarrow_and_duckdb(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    spec = BY_NAME["agg_update"]
    run_queries([spec], tmp_path, {PROVIDER_KEY: ROCKSDB}, batches=3, restart_after=2)
    target = tmp_path / "sp"
    assert main(["savepoint", str(checkpoint_of(tmp_path, spec)), str(target),
                 "--format", "canonical", "--json"]) == 0
    told = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert told["format"] == "canonical" and told["batch"] == 2
    store = target / "canonical" / "0" / "default"
    table = pq.read_table(store)  # the README's one-liners
    counted = duckdb.sql(f"SELECT sum(value['count']) FROM '{store}/*.parquet'").fetchall()[0]
    keys = sorted(row["k"] for row in table.column("key").to_pylist())
    assert keys == list(range(11))  # every key of the query, typed: k is an int
    assert counted == (sum(v["count"] for v in table.column("value").to_pylist()),)
    assert counted[0] == 3 * 40  # 40 rows of side L per batch, three batches
    # restored through the CLI, rescaled
    restored = tmp_path / "restored"
    assert main(["restore", str(target), str(restored), "--partitions", "5"]) == 0
    assert offsets_conf(restored, restored_batch(restored))[PARTITIONS_KEY] == "5"
    assert sorted(p.name for p in (restored / "state" / "0").iterdir()
                  if not p.name.startswith("_")) == [str(p) for p in range(5)]
    SparkSession.getActiveSession().stop()


# ---- bad input: a clear error, nothing written ------------------------------------------

@pytest.fixture(scope="module")
def agg_savepoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("agg")
    spec = BY_NAME["agg_update"]
    conf = pyrocks_conf(work / "pool")
    run_queries([spec], work, conf, batches=2, restart_after=1)
    spark = make_spark(conf)
    try:
        savepoint(str(checkpoint_of(work, spec)), str(work / "sp"), format="canonical",
                  spark=spark)
    finally:
        spark.stop()
    return work / "sp"


def test_refuses_a_partition_count_that_changes_nothing_or_is_not_positive(
        tmp_path: Path, agg_savepoint: Path) -> None:
    spark = make_spark(pyrocks_conf(tmp_path / "pool"))
    try:
        for count, says in ((3, "already has 3 partitions"), (0, "greater than zero")):
            target = tmp_path / f"to-{count}"
            with pytest.raises(RestoreError, match=says):
                restore(str(agg_savepoint), str(target), partitions=count, spark=spark)
            assert not target.exists() or not any(target.iterdir())
        with pytest.raises(RestoreError, match="needs a canonical savepoint"):
            restore(str(tmp_path / "anything"), str(tmp_path / "x"), partitions=4)
    finally:
        spark.stop()


def relist(savepoint_dir: Path) -> None:
    """Rewrites a canonical savepoint's descriptor to list its Parquet files as they are."""
    descriptor = json.loads((savepoint_dir / "_savepoint.json").read_text())
    files = [f for f in descriptor["files"] if not f["path"].startswith("canonical/")]
    for path in sorted((savepoint_dir / "canonical").rglob("*.parquet")):
        data = path.read_bytes()
        files.append({"path": str(path.relative_to(savepoint_dir)), "size": len(data),
                      "checksum": format_checksum(checksum(data))})
    descriptor["files"] = files
    (savepoint_dir / "_savepoint.json").write_text(json.dumps(descriptor))


def test_refuses_a_savepoint_whose_rows_no_longer_have_the_store_types(
        tmp_path: Path, agg_savepoint: Path) -> None:
    damaged = tmp_path / "damaged"
    shutil.copytree(agg_savepoint, damaged)
    spark = make_spark(pyrocks_conf(tmp_path / "pool"))
    try:
        store = damaged / "canonical" / "0" / "default"
        frame = spark.read.parquet(str(store)).selectExpr(
            "partition_id", "named_struct('k', cast(key.k as string)) as key", "value")
        frame.toPandas()  # read fully before the files are replaced
        rows = frame.collect()
        shutil.rmtree(store)
        spark.createDataFrame(rows, frame.schema).write.parquet(str(store))
        target = tmp_path / "restored"
        # The files the descriptor lists are gone: refused before anything is read.
        with pytest.raises(CorruptFileError, match=r"canonical/0/default/part-.*is missing"):
            restore(str(damaged), str(target), spark=spark)
        # Listed with their new checksums, they are read, and their types do not match.
        relist(damaged)
        with pytest.raises(RestoreError, match=r"operator 0 \(stateStoreSave\) store default"
                                               r".*key column is struct<k:string>.*struct<k:int>"):
            restore(str(damaged), str(target), spark=spark)
        assert not target.exists()
    finally:
        spark.stop()


def _group_by_side(spark: SparkSession, source: Path) -> DataFrame:
    return read(spark, source).groupBy(F.col("side")).agg(F.count("*"))


def _dedup_instead(spark: SparkSession, source: Path) -> DataFrame:
    return read(spark, source).dropDuplicates(["k"]).select("k")


@pytest.mark.parametrize(("build", "says"), [
    (_group_by_side, ["STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE", "StructField(k,IntegerType",
                      "StructField(side,StringType"]),
    (_dedup_instead, ["stateStoreSave", "dedupe"]),
], ids=["changed_key_schema", "other_operator"])
def test_a_query_that_does_not_match_the_savepoint_fails_its_first_batch(
        tmp_path: Path, agg_savepoint: Path, build: Callable[[SparkSession, Path], DataFrame],
        says: list[str]) -> None:
    spark = make_spark(pyrocks_conf(tmp_path / "pool"))
    restored = tmp_path / "restored"
    try:
        restore(str(agg_savepoint), str(restored), spark=spark)
        added = restored_batch(restored)
        for batch in range(3):
            write_batch(tmp_path / "agg_update" / "input", batch)
        query = start_query(spark, QuerySpec("agg_update", "update", build), tmp_path, {},
                            checkpoint=restored)
        with pytest.raises(StreamingQueryException) as failure:
            query.processAllAvailable()
        message = str(failure.value)  # Spark's own checks, before any provider code runs
        assert all(s in message for s in says), message
        assert not (restored / "commits" / str(added + 1)).exists()
    finally:
        spark.stop()


def test_an_uncommitted_last_batch_is_left_out_as_a_native_savepoint_does(
        tmp_path: Path) -> None:
    """A query stopped while a trigger ran leaves offsets of a batch it never committed:
    the canonical savepoint takes the last committed batch (and says which), as a native
    one does, and restores from there."""
    spec = BY_NAME["agg_update"]
    run_queries([spec], tmp_path, {PROVIDER_KEY: ROCKSDB}, batches=2, restart_after=1)
    checkpoint = checkpoint_of(tmp_path, spec)
    (checkpoint / "commits" / "1").unlink()  # batch 1 planned, never committed
    spark = make_spark({**pyrocks_conf(tmp_path / "pool"), PROVIDER_KEY: ROCKSDB})
    try:
        info = savepoint(str(checkpoint), str(tmp_path / "sp"), format="canonical",
                         spark=spark)
        assert info.batch == 0
        restored = restore(str(tmp_path / "sp"), str(tmp_path / "restored"), spark=spark)
        assert restored.batch == 0
    finally:
        spark.stop()


def test_refuses_a_checkpoint_without_a_committed_batch_or_its_offsets(tmp_path: Path) -> None:
    """Spark's own repartition refuses these as NO_COMMITTED_BATCH and NO_BATCH_FOUND."""
    empty, no_offsets = tmp_path / "empty", tmp_path / "no-offsets"
    empty.mkdir()
    (no_offsets / "commits").mkdir(parents=True)
    (no_offsets / "metadata").write_text('{"id":"5f1b2c1e-0000-4000-8000-000000000000"}\n')
    (no_offsets / "commits" / "0").write_text("v1\n{}")
    spark = make_spark({PROVIDER_KEY: ROCKSDB})
    try:
        with pytest.raises(SourceError, match="not a Spark checkpoint"):
            savepoint(str(empty), str(tmp_path / "sp1"), format="canonical", spark=spark)
        with pytest.raises(SourceError, match="lacks the offsets of batch 0"):
            savepoint(str(no_offsets), str(tmp_path / "sp2"), format="canonical", spark=spark)
        assert not (tmp_path / "sp1").exists() and not (tmp_path / "sp2").exists()
    finally:
        spark.stop()


def test_rescaling_twice_up_then_down_keeps_the_answers(tmp_path: Path,
                                                        hdfs_reference: Outputs) -> None:
    """The sequence Spark's own offline repartition tests run (3 partitions, then 6, then
    2) on aggregation, deduplication and applyInPandasWithState, against the same queries
    left at 3 partitions on Spark's HDFS provider (the reference: where a run restarts
    changes no answer, as every test against it shows)."""
    names = ["agg_update", "dedup_watermark", "apply_in_pandas_with_state"]
    specs = [BY_NAME[n] for n in names]
    cuts = [3, 6]
    work = tmp_path / "rescaled"
    conf = {**pyrocks_conf(tmp_path / "pool"), PROVIDER_KEY: ROCKSDB}
    added: dict[str, list[int]] = {n: [] for n in names}

    def rescale(phase: int) -> None:
        spark = make_spark(conf)
        try:
            for spec in specs:
                checkpoint = checkpoint_of(work, spec)
                target = work / spec.name / f"canonical-{phase}"
                batch = savepoint(str(checkpoint), str(target), format="canonical",
                                  spark=spark).batch
                added[spec.name].append(batch + 1)
                checkpoint.rename(work / spec.name / f"before-{phase}")
                restore(str(target), str(checkpoint), partitions={1: 6, 2: 2}[phase],
                        spark=spark)
        finally:
            spark.stop()

    outputs = run_queries(specs, work, conf, restart_after=cuts, between_phases=rescale)
    for index in (1, 0):  # the later added batch first: it is numbered after the earlier
        outputs = shifted(outputs, {n: added[n][index] for n in names})
    assert_same_outputs({n: hdfs_reference[n] for n in names}, outputs)

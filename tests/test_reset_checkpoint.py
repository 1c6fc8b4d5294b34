"""A user resets a query by deleting its checkpoint and starting again on the same path.

With `rootUrl` set, state lives outside the checkpoint, so the old query's records are
still there: the new query must start empty, as with Spark's own providers, and the old
records are reported and collected, never adopted."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from pyspark.sql import SparkSession

from harness import HDFS, PROVIDER_KEY, make_spark
from pyrocks_support import pyrocks_conf
from state_store.cli import main
from state_store.options import PREFIX


def counts_after_reset(conf: dict[str, str], work: Path) -> list[list[tuple[int, int]]]:
    """3 batches of 1,000 rows on 10 keys; delete the checkpoint; 3 batches of 100 rows on
    the same path. Returns each batch's counts of the second query."""
    spark = make_spark(conf)
    try:
        run(spark, work, rows_per_batch=1000)
        shutil.rmtree(work / "checkpoint")
        shutil.rmtree(work / "in")
        return run(spark, work, rows_per_batch=100)
    finally:
        spark.stop()


def run(spark: SparkSession, work: Path, rows_per_batch: int) -> list[list[tuple[int, int]]]:
    source = work / "in"
    source.mkdir(parents=True)
    outputs: list[list[tuple[int, int]]] = []
    query = (spark.readStream.schema("k int").json(str(source)).groupBy("k").count()
             .writeStream.outputMode("complete")
             .foreachBatch(lambda df, _: outputs.append(sorted(map(tuple, df.collect()))))
             .option("checkpointLocation", str(work / "checkpoint")).start())
    try:
        for batch in range(3):
            rows = "\n".join(json.dumps({"k": i % 10}) for i in range(rows_per_batch))
            (source / f"{batch}.json").write_text(rows)
            query.processAllAvailable()
    finally:
        query.stop()
    return outputs


def test_a_reset_query_starts_empty_like_spark_providers(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    reference = counts_after_reset({**pyrocks_conf(tmp_path / "p1"), PROVIDER_KEY: HDFS},
                                   tmp_path / "hdfs")
    assert reference[-1] == [(k, 30) for k in range(10)]
    root = tmp_path / "state-root"
    conf = {**pyrocks_conf(tmp_path / "p2"), PREFIX + "rootUrl": str(root)}
    ours = counts_after_reset(conf, tmp_path / "ours")
    assert ours == reference
    # both queries' roots are there; inspect tells which one is stale
    capsys.readouterr()
    assert main(["inspect", str(root), "--json"]) == 0
    reports = json.loads(capsys.readouterr().out)["stores"]
    current = json.loads((tmp_path / "ours" / "checkpoint" / "metadata").read_text())["id"]
    assert {r["query_id"] for r in reports if not r["stale"]} == {current}
    assert len({r["query_id"] for r in reports if r["stale"]}) == 1

"""`configure()` composes with what a builder already has: a user's extensions (Delta
Lake's, Iceberg's), listeners, query listeners, jars and class paths keep their entries and
ours are appended, once."""

from __future__ import annotations

import json
import os
from pathlib import Path

from pyspark.sql import SparkSession

from state_store.spark import (
    EXTENSIONS_CLASS,
    LISTENER_CLASS,
    PROVIDER_CLASS,
    PROVIDER_KEY,
    RESULT_RECORDER_CLASS,
    configure,
    merge_setting,
)

USER_LISTENER = "org.apache.spark.scheduler.StatsReportListener"  # ships with Spark


def test_list_settings_keep_the_users_entries_and_ours_come_once() -> None:
    builder = (SparkSession.builder
               .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
               .config("spark.extraListeners", "com.example.Audit, com.example.Metrics")
               .config("spark.driver.extraClassPath", "/opt/delta.jar")
               .config("spark.jars", "/opt/delta.jar")
               .config(PROVIDER_KEY, "com.example.OtherProvider"))
    options = configure(configure(builder), resultStore="/tmp/results")._options
    assert options["spark.sql.extensions"] == \
        f"io.delta.sql.DeltaSparkSessionExtension,{EXTENSIONS_CLASS}"
    assert options["spark.extraListeners"] == \
        f"com.example.Audit,com.example.Metrics,{LISTENER_CLASS}"
    jar = options["spark.executor.extraClassPath"]
    assert options["spark.driver.extraClassPath"] == f"/opt/delta.jar{os.pathsep}{jar}"
    assert options["spark.jars"] == f"/opt/delta.jar,{jar}"
    assert options["spark.sql.streaming.streamingQueryListeners"] == RESULT_RECORDER_CLASS
    assert options[PROVIDER_KEY] == PROVIDER_CLASS  # a single value is ours to set


def test_merge_setting_leaves_other_keys_alone() -> None:
    assert merge_setting("spark.sql.shuffle.partitions", "8", "2") == "2"
    assert merge_setting("spark.jars", None, "/a.jar") == "/a.jar"
    assert merge_setting("spark.jars", "  ", "/a.jar") == "/a.jar"
    assert merge_setting("spark.jars", "/a.jar", "/a.jar") == "/a.jar"


def test_a_users_listener_stays_registered_beside_ours(tmp_path: Path) -> None:
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    builder = (SparkSession.builder.master("local[2]").appName("pyrocks-configure")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.extraListeners", USER_LISTENER))
    spark = configure(builder, localDir=str(tmp_path / "pool")).getOrCreate()
    try:
        listeners = spark.sparkContext._jsc.sc().listenerBus().listeners()
        names = [listeners.get(i).getClass().getName() for i in range(listeners.size())]
        assert names.count(USER_LISTENER) == 1 and names.count(LISTENER_CLASS) == 1, names
        source = tmp_path / "in"
        source.mkdir()
        (source / "0.json").write_text("\n".join(json.dumps({"k": i % 3}) for i in range(30)))
        query = (spark.readStream.schema("k int").json(str(source)).groupBy("k").count()
                 .writeStream.outputMode("complete").format("memory").queryName("counts")
                 .option("checkpointLocation", str(tmp_path / "ckpt"))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        assert {r["k"]: r["count"] for r in spark.table("counts").collect()} == \
            {0: 10, 1: 10, 2: 10}
        assert list((tmp_path / "ckpt" / "state").glob("0/*/query-*/manifests"))  # ours
    finally:
        spark.stop()

"""`configure()` composes with what a builder already has: a user's extensions (Delta
Lake's, Iceberg's), listeners, query listeners and jars keep their entries and ours are
appended, once; class paths stay theirs. (A running user extension and listener beside ours:
test_deployment.py.)"""

from __future__ import annotations

from pyspark.sql import SparkSession

from state_store.spark import (
    EXTENSIONS_CLASS,
    LISTENER_CLASS,
    PROVIDER_CLASS,
    PROVIDER_KEY,
    RESULT_RECORDER_CLASS,
    RUN_EPOCH_LISTENER_CLASS,
    cluster_conf,
    configure,
    merge_setting,
)


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
    assert options["spark.driver.extraClassPath"] == "/opt/delta.jar"  # not ours to touch
    jar = cluster_conf()["spark.jars"]
    assert options["spark.jars"] == f"/opt/delta.jar,{jar}"
    assert options["spark.sql.streaming.streamingQueryListeners"] == \
        f"{RUN_EPOCH_LISTENER_CLASS},{RESULT_RECORDER_CLASS}"
    assert options[PROVIDER_KEY] == PROVIDER_CLASS  # a single value is ours to set


def test_merge_setting_leaves_other_keys_alone() -> None:
    assert merge_setting("spark.sql.shuffle.partitions", "8", "2") == "2"
    assert merge_setting("spark.jars", None, "/a.jar") == "/a.jar"
    assert merge_setting("spark.jars", "  ", "/a.jar") == "/a.jar"
    assert merge_setting("spark.jars", "/a.jar", "/a.jar") == "/a.jar"

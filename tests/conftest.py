"""Shared fixtures."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from pyrocks_support import (
    MAINTENANCE_INTERVAL,
    MAINTENANCE_INTERVAL_KEY,
    S3Endpoint,
    pyrocks_conf,
)

# Spark's Python workers (UDFs, applyInPandasWithState) import test helpers by name too.
_TESTS = str(Path(__file__).resolve().parent)
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (_TESTS, os.environ.get("PYTHONPATH")) if p
)


@pytest.fixture(scope="module")
def pyrocks_spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """One local session per module on our provider; tests may set runtime SQL confs."""
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    builder = (SparkSession.builder.master("local[2]").appName("pyrocks-tests")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config(MAINTENANCE_INTERVAL_KEY, MAINTENANCE_INTERVAL))
    for key, value in pyrocks_conf(Path(tmp_path_factory.mktemp("pool"))).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    yield spark
    spark.stop()


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Endpoint]:
    endpoint = S3Endpoint()
    yield endpoint
    endpoint.stop()

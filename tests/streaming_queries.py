"""The catalogue of stateful queries the correctness suite runs under every provider.

Each query reads deterministic JSON files, one file per micro-batch, so every provider sees
the same batches. Event time advances by 10 seconds per batch with some late rows, so
watermarks move, windows close, state is evicted and outer rows are emitted during a run.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

SCHEMA = "k int, v int, ts long, side string"
WATERMARK = "10 seconds"


@dataclass(frozen=True)
class QuerySpec:
    name: str
    mode: str  # output mode
    build: Callable[[SparkSession, Path], DataFrame]


def rows_for(batch: int) -> list[dict[str, object]]:
    """Input batch `batch`: 80 rows (two sides for joins), event times near 10*batch s."""
    rows: list[dict[str, object]] = []
    for side, salt in (("L", 0), ("R", 3)):
        for i in range(40):
            late = 15 if i % 9 == 0 else 0  # some rows arrive behind the watermark
            rows.append({"k": (i * 7 + batch + salt) % 11, "v": i + 100 * batch + salt,
                         "ts": 10 * batch + (i + salt) % 10 - late, "side": side})
    return rows


def write_batch(directory: Path, batch: int) -> None:
    """Publishes one input file atomically: the file source never sees a partial file."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = "\n".join(json.dumps(r) for r in rows_for(batch))
    hidden = directory / f".{batch:04d}.json.tmp"  # names starting with "." are ignored
    hidden.write_text(lines + "\n")
    hidden.rename(directory / f"{batch:04d}.json")


def read(spark: SparkSession, directory: Path, side: str = "L") -> DataFrame:
    """The rows of one side; a query that reads both sides must share one source."""
    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(directory))
    return stream.where(F.col("side") == side).withColumn("t", F.timestamp_seconds("ts"))


def _agg(spark: SparkSession, source: Path) -> DataFrame:
    return read(spark, source).groupBy("k").agg(F.count("*"), F.sum("v"), F.max("ts"))


def _window(spark: SparkSession, source: Path) -> DataFrame:
    events = read(spark, source).withWatermark("t", WATERMARK)
    return events.groupBy(F.window("t", "10 seconds"), (F.col("k") % 3).alias("g")).agg(
        F.count("*"), F.sum("v"))


def _dedup(spark: SparkSession, source: Path) -> DataFrame:
    events = read(spark, source).withWatermark("t", WATERMARK)
    return events.dropDuplicates(["k", "t"]).select("k", "t")


def _dedup_within(spark: SparkSession, source: Path) -> DataFrame:
    events = read(spark, source).withWatermark("t", WATERMARK)
    return events.dropDuplicatesWithinWatermark(["k"]).select("k")


def _join(how: str) -> Callable[[SparkSession, dict[str, Path]], DataFrame]:
    def build(spark: SparkSession, source: Path) -> DataFrame:
        # Both sides come from ONE streaming source, so each micro-batch holds the same
        # input for both sides whatever the timing (two sources are polled separately).
        events = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(
            str(source)).withColumn("t", F.timestamp_seconds("ts"))
        left = events.where(F.col("side") == "L").select(
            F.col("k").alias("lk"), F.col("t").alias("lt"), F.col("v").alias("lv"))
        right = events.where(F.col("side") == "R").select(
            F.col("k").alias("rk"), F.col("t").alias("rt"), F.col("v").alias("rv"))
        condition = F.expr(
            "lk = rk AND rt BETWEEN lt - INTERVAL 5 SECONDS AND lt + INTERVAL 5 SECONDS")
        return left.withWatermark("lt", WATERMARK).join(
            right.withWatermark("rt", WATERMARK), condition, how)

    return build


def _sessions(spark: SparkSession, source: Path) -> DataFrame:
    events = read(spark, source).withWatermark("t", WATERMARK)
    return events.groupBy(F.session_window("t", "3 seconds"), (F.col("k") % 4).alias("g")).agg(
        F.count("*"), F.sum("v"))


def _running_totals(key: tuple, frames: Iterator[pd.DataFrame],
                    state: GroupState) -> Iterator[pd.DataFrame]:
    count, total = state.get if state.exists else (0, 0)
    for frame in frames:
        count, total = count + len(frame), total + int(frame["v"].sum())
    state.update((count, total))
    yield pd.DataFrame({"k": [key[0]], "count": [count], "total": [total]})


def _pandas_state(spark: SparkSession, source: Path) -> DataFrame:
    return read(spark, source).groupBy("k").applyInPandasWithState(
        _running_totals, "k int, count long, total long", "count long, total long",
        "Update", GroupStateTimeout.NoTimeout)


def _totals_until_quiet(key: tuple, frames: Iterator[pd.DataFrame],
                        state: GroupState) -> Iterator[pd.DataFrame]:
    """Running totals per (k, 20-second bucket), emitted with expired=True and dropped once
    the watermark passes 15 s after the newest event seen: event-time timeouts fire."""
    if state.hasTimedOut:
        count, total = state.get
        state.remove()
        yield pd.DataFrame({"k": [key[0]], "bucket": [key[1]], "count": [count],
                            "total": [total], "expired": [True]})
        return
    count, total = state.get if state.exists else (0, 0)
    newest = 0
    for frame in frames:
        count, total = count + len(frame), total + int(frame["v"].sum())
        newest = max(newest, int(frame["ts"].max()))
    state.update((count, total))
    state.setTimeoutTimestamp(max(newest * 1000 + 15_000, state.getCurrentWatermarkMs() + 1))
    yield pd.DataFrame({"k": [key[0]], "bucket": [key[1]], "count": [count], "total": [total],
                        "expired": [False]})


def _pandas_event_timeout(spark: SparkSession, source: Path) -> DataFrame:
    events = read(spark, source).withWatermark("t", WATERMARK).withColumn(
        "bucket", (F.col("ts") / 20).cast("long"))
    return events.groupBy("k", "bucket").applyInPandasWithState(
            _totals_until_quiet, "k int, bucket long, count long, total long, expired boolean",
            "count long, total long", "Update", GroupStateTimeout.EventTimeTimeout)


QUERIES: tuple[QuerySpec, ...] = (
    QuerySpec("agg_update", "update", _agg),
    QuerySpec("agg_complete", "complete", _agg),
    QuerySpec("window_append", "append", _window),
    QuerySpec("dedup_watermark", "append", _dedup),
    QuerySpec("dedup_within_watermark", "append", _dedup_within),
    QuerySpec("join_inner", "append", _join("inner")),
    QuerySpec("join_left_outer", "append", _join("left_outer")),
    QuerySpec("session_window", "append", _sessions),
    QuerySpec("apply_in_pandas_with_state", "update", _pandas_state),
    QuerySpec("apply_in_pandas_event_timeout", "update", _pandas_event_timeout),
)
BY_NAME = {q.name: q for q in QUERIES}

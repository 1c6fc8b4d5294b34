"""transformWithState queries, as catalogue entries (streaming_queries.QuerySpec) that the
harness runs batch by batch under any provider that takes them (ours, Spark's RocksDB).

Between them they use every state kind with and without TTL, both timer kinds, listing and
deleting timers, initial state, PySpark's two APIs (pandas and rows) and Scala's (the same
processors in tests/jvm-tws/, compiled like the shim; sessions need `with_processors`).
Each output row is
a function of the input batches alone, so two providers must answer the same, batch by batch:
  - event time: timers fire when the watermark passes (the harness runs the no-data batch
    a watermark move calls for);
  - processing time: no-data batches are off (`query_conf`), so a batch runs only for an
    input file; a timer set 1 ms ahead fires in the next batch, after that batch's rows, and
    a value with a 1 ms TTL is gone by the next batch (batches are further apart than that).
    Nothing emitted depends on the clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
from py4j.protocol import Py4JJavaError
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.group import GroupedData
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

from state_store.driver import bridge
from streaming_queries import WATERMARK, QuerySpec, read

EVENT_OUTPUT = "k int, kind string, count long, recent long, buckets long, total long"
PROCESSING_OUTPUT = "k int, kind string, count long, fresh long, buckets long"
HOUR_MS = 3_600_000
PROCESSORS = Path(__file__).resolve().parent / "jvm-tws"
SCALA_QUERIES = "com.example.tws.ScalaTws"
NO_DATA_BATCHES_KEY = "spark.sql.streaming.noDataMicroBatches.enabled"
DECOY = 1  # the millisecond of a decoy timer
ROWS_API = hasattr(GroupedData, "transformWithState")  # PySpark 4.1 on


class EventTimeTotals(StatefulProcessor):
    """Per key: a count (value state), the values of rows since the last timer (list state),
    a count per v % 4 bucket (map state). Each batch of rows sets an event-time timer 5 s
    past its newest event, which emits and clears the list once the watermark passes it,
    and a decoy timer a minute later, which the key's next rows delete."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.count = handle.getValueState("count", "n long")
        self.recent = handle.getListState("recent", "v long")
        self.buckets = handle.getMapState("buckets", "b int", "n long")

    def handleInitialState(self, key, initialState: pd.DataFrame, timerValues) -> None:
        self.count.update((int(initialState["start"].sum()),))

    def handleInputRows(self, key, rows: Iterator[pd.DataFrame],
                        timerValues) -> Iterator[pd.DataFrame]:
        count = self.count.get()[0] if self.count.exists() else 0
        newest = 0
        for frame in rows:
            count += len(frame)
            newest = max(newest, int(frame["ts"].max()))
            self.recent.appendList([(int(v),) for v in frame["v"]])
            for b, n in frame.groupby(frame["v"] % 4).size().items():
                old = self.buckets.getValue((int(b),))[0] if self.buckets.containsKey(
                    (int(b),)) else 0
                self.buckets.updateValue((int(b),), (old + int(n),))
        self.count.update((count,))
        for timer in self.handle.listTimers():
            if timer % 1000 == DECOY:
                self.handle.deleteTimer(timer)
        self.handle.registerTimer(newest * 1000 + 5_000)
        self.handle.registerTimer(newest * 1000 + 60_000 + DECOY)
        yield self._row(key, "rows", count)

    def handleExpiredTimer(self, key, timerValues,
                           expiredTimerInfo) -> Iterator[pd.DataFrame]:
        count = self.count.get()[0] if self.count.exists() else 0
        row = self._row(key, "timer", count)
        self.recent.clear()
        yield row

    def _row(self, key, kind: str, count: int) -> pd.DataFrame:
        recent = [v for (v,) in self.recent.get()] if self.recent.exists() else []
        buckets = list(self.buckets.iterator()) if self.buckets.exists() else []
        return pd.DataFrame({"k": [key[0]], "kind": [kind], "count": [count],
                             "recent": [len(recent)], "buckets": [len(buckets)],
                             "total": [sum(recent)]})

    def close(self) -> None:
        pass


class ProcessingTimeCounts(StatefulProcessor):
    """Rows API. Per key: a count (value state), this batch's values (list state with a
    1 ms TTL: what an earlier batch added has expired), buckets seen (map state with an
    hour's TTL). Each batch of rows sets a processing-time timer 1 ms ahead, which emits the
    count in the next batch, and a decoy an hour ahead, which the key's next rows delete."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.count = handle.getValueState("count", "n long")
        self.fresh = handle.getListState("fresh", "v long", ttlDurationMs=1)
        self.buckets = handle.getMapState("buckets", "b int", "seen boolean",
                                          ttlDurationMs=HOUR_MS)

    def handleInputRows(self, key, rows: Iterator[Row], timerValues) -> Iterator[Row]:
        count = self.count.get()[0] if self.count.exists() else 0
        for row in rows:
            count += 1
            self.fresh.appendValue((row.v,))
            self.buckets.updateValue((row.v % 4,), (True,))
        self.count.update((count,))
        now = timerValues.getCurrentProcessingTimeInMs()
        for timer in self.handle.listTimers():
            if timer > now + HOUR_MS // 2:
                self.handle.deleteTimer(timer)
        self.handle.registerTimer(now + 1)
        self.handle.registerTimer(now + HOUR_MS)
        yield self._row(key, "rows", count)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[Row]:
        yield self._row(key, "timer", self.count.get()[0] if self.count.exists() else 0)

    def _row(self, key, kind: str, count: int) -> Row:
        fresh = len(list(self.fresh.get())) if self.fresh.exists() else 0
        buckets = len(list(self.buckets.keys())) if self.buckets.exists() else 0
        return Row(k=key[0], kind=kind, count=count, fresh=fresh, buckets=buckets)

    def close(self) -> None:
        pass


class ProcessingTimeCountsPandas(ProcessingTimeCounts):
    """The same, through the pandas API (PySpark 4.0 has no rows API)."""

    def handleInputRows(self, key, rows: Iterator[pd.DataFrame],
                        timerValues) -> Iterator[pd.DataFrame]:
        each = (Row(v=int(v)) for frame in rows for v in frame["v"])
        yield pd.DataFrame([r.asDict() for r in super().handleInputRows(key, each, timerValues)])

    def handleExpiredTimer(self, key, timerValues,
                           expiredTimerInfo) -> Iterator[pd.DataFrame]:
        yield pd.DataFrame([r.asDict() for r in super().handleExpiredTimer(
            key, timerValues, expiredTimerInfo)])


def _event_time_pandas(spark: SparkSession, source: Path) -> DataFrame:
    events = read(spark, source).withWatermark("t", WATERMARK)
    starts = spark.createDataFrame([(k, 1000 * k) for k in range(0, 11, 2)], "k int, start long")
    return events.groupBy("k").transformWithStateInPandas(
        EventTimeTotals(), EVENT_OUTPUT, "Update", "EventTime",
        initialState=starts.groupBy("k"))


def _processing_time_rows(spark: SparkSession, source: Path) -> DataFrame:
    events = read(spark, source).select((F.col("k") % 5).alias("g"), "v")
    if not ROWS_API:
        return events.groupBy("g").transformWithStateInPandas(
            ProcessingTimeCountsPandas(), PROCESSING_OUTPUT, "Update", "ProcessingTime")
    return events.groupBy("g").transformWithState(
        ProcessingTimeCounts(), PROCESSING_OUTPUT, "Update", "ProcessingTime")


def _scala(builder: str) -> Callable[[SparkSession, Path], DataFrame]:
    def build(spark: SparkSession, source: Path) -> DataFrame:
        events = read(spark, source).withWatermark("t", WATERMARK)
        jvm = spark._jvm
        assert jvm is not None
        # A driver JVM started earlier in this process took spark.jars as they were then:
        # the processors' jar joins its class loader here (as driver/jvm.py does the shim's);
        # tasks get it through spark.jars.
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        try:
            jvm.java.lang.Class.forName(SCALA_QUERIES, False, loader)
        except Py4JJavaError:
            jar = bridge.jar_path(PROCESSORS, name="tws-processors")
            loader.addURL(jvm.java.io.File(str(jar)).toURI().toURL())
        queries = jvm.com.example.tws.ScalaTws
        return DataFrame(getattr(queries, builder)(events._jdf), spark)
    return build


TWS_QUERIES: tuple[QuerySpec, ...] = (
    QuerySpec("tws_event_time_pandas", "update", _event_time_pandas),
    QuerySpec("tws_processing_time_rows", "update", _processing_time_rows),
    QuerySpec("tws_event_time_scala", "update", _scala("eventTime")),
    QuerySpec("tws_processing_time_scala", "update", _scala("processingTime")),
)


def with_processors(conf: dict[str, str]) -> dict[str, str]:
    """`conf` with the Scala processors' jar (built once per pyspark release) on spark.jars."""
    jar = str(bridge.jar_path(PROCESSORS, name="tws-processors"))
    jars = conf.get("spark.jars")
    return {**conf, "spark.jars": f"{jars},{jar}" if jars else jar}


def tws_query_conf(spec: QuerySpec) -> dict[str, str]:
    """Each query's own SQL confs (see the module doc)."""
    return {NO_DATA_BATCHES_KEY: str("processing_time" not in spec.name).lower()}


class Evolving(StatefulProcessor):
    """A value state whose schema a later version of the query changes (`schema`): each
    batch emits what the state held (as its current schema reads it) and counts up."""

    def __init__(self, schema: str) -> None:
        self.schema = schema

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getValueState("state", self.schema)

    def handleInputRows(self, key, rows: Iterator[pd.DataFrame],
                        timerValues) -> Iterator[pd.DataFrame]:
        seen = sum(len(frame) for frame in rows)
        names = [f.split()[0] for f in self.schema.split(",")]
        held = self.state.get() if self.state.exists() else None
        fields = dict(zip(names, held, strict=True)) if held is not None else {}
        yield pd.DataFrame({"k": [key[0]], "held": [repr(sorted(fields.items()))]})
        fields["n"] = (fields.get("n") or 0) + seen
        fields["name"] = f"key-{key[0]}"
        self.state.update(tuple(fields.get(name) for name in names))

    def close(self) -> None:
        pass

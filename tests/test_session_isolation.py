"""A test's sessions do not depend on the tests that ran before it in its process."""

from __future__ import annotations

from pyspark.sql import SparkSession

from harness import start_session
from state_store.options import PREFIX


def test_a_session_does_not_inherit_an_earlier_sessions_settings() -> None:
    """The tests' sessions share one driver JVM per process (conftest's `bare_driver_jvm`):
    a setting of one session must not become a default of the next, or a test's outcome
    would depend on the tests that ran before it in its process."""
    key = PREFIX + "finishWhenQueryEnds"
    first = start_session(SparkSession.builder.master("local[1]")
                          .config("spark.ui.enabled", "false").config(key, "false"))
    first.stop()
    second = start_session(SparkSession.builder.master("local[1]")
                           .config("spark.ui.enabled", "false"))
    try:
        assert second.sparkContext.getConf().get(key, None) is None
        # whichever session started the JVM: every test session sets this one
        assert second._jvm.java.lang.System.getProperty("spark.ui.enabled") is None
    finally:
        second.stop()

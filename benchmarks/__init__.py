"""Benchmarks of this state store against Spark's own providers (`python -m benchmarks.macro`)."""

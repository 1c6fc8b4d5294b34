"""The Spark releases this project supports: the one table every other place reads.

  the shim's build    refuses any other pyspark, and picks each concern's compat variant
                      (driver/bridge.py)
  .ci/spark-matrix    runs the release-specific part of the suite on every release but MAIN
  pyproject.toml      bounds the pyspark dependency to them (tests/test_bridge.py checks)
  README.md           lists them (tests/test_bridge.py checks)
"""

from __future__ import annotations

RELEASES = ("4.0", "4.1", "4.2", "4.3")  # every Spark 4.x minor release on PyPI
MAIN = "4.3"  # the release the whole suite runs on


def release_of(version: str) -> tuple[int, int] | None:
    """(major, minor) of a pyspark version if it is a supported release, else None."""
    try:
        major, minor = (int(part) for part in version.split(".")[:2])
    except ValueError:
        return None
    return (major, minor) if f"{major}.{minor}" in RELEASES else None


def described() -> str:
    return f"{RELEASES[0]} to {RELEASES[-1]}"


def matrix() -> list[str]:
    """The releases .ci/spark-matrix runs: all but the main suite's."""
    return [r for r in RELEASES if r != MAIN]


def pyspark_requirement() -> str:
    """The dependency bound pyproject.toml must declare for pyspark."""
    major, last = RELEASES[-1].split(".")
    return f"pyspark>={RELEASES[0]},<{major}.{int(last) + 1}"

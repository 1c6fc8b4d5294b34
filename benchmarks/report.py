"""The shape every benchmark reports in, so one command can gather them into one table.

Each benchmark module writes its own `benchmarks/results/<name>.json` and offers
`targets(payload) -> list[Target]`, which reads that JSON back into the rows of the issue's
target table. `python -m benchmarks` (see `__main__.py`) runs them all and renders the rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"

# Provider names every benchmark uses for its baselines (see macro.PROVIDERS).
SPARK_ROCKSDB = "spark-rocksdb"
SPARK_ROCKSDB_CHANGELOG = "spark-rocksdb-changelog"
SPARK_HDFS = "spark-hdfs"


@dataclass(frozen=True)
class Target:
    """One row of the target table: our figure, the baselines' figures, and the verdict.

    `ratio` is ours / `compared_to` for times and memory (lower is better) and the
    quotient the target names otherwise (e.g. 2-slot over 1-slot throughput).
    """

    benchmark: str
    name: str
    unit: str
    ours: float | None
    compared_to: str
    ratio: float | None
    target: str
    met: bool | None
    baselines: dict[str, float | None] = field(default_factory=dict)
    note: str = ""


def ratio(ours: float | None, theirs: float | None) -> float | None:
    if ours is None or theirs is None or theirs <= 0:
        return None
    return round(ours / theirs, 3)


def at_most(value: float | None, bound: float) -> bool | None:
    return None if value is None else value <= bound


def load(name: str) -> dict[str, Any] | None:
    path = RESULTS_DIR / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None

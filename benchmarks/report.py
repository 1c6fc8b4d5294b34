"""The shape every benchmark reports in, so one command can gather them into one table.

Each benchmark module writes its own `benchmarks/results/<name>.json` and offers
`targets(payload) -> list[Target]`, which reads that JSON back into the rows of the issue's
target table. `python -m benchmarks` (see `__main__.py`) runs them all and renders the rows.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
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

    `ratio` is ours / `compared_to` for times and memory, where lower is better and the goal
    is a ceiling; with `higher_is_better` (e.g. 2-slot over 1-slot throughput) it is a floor.
    """

    benchmark: str
    name: str
    unit: str
    ours: float | None
    compared_to: str
    ratio: float | None
    goal: float
    higher_is_better: bool = False
    baselines: dict[str, float | None] = field(default_factory=dict)
    note: str = ""

    @property
    def met(self) -> bool | None:
        if self.ratio is None:
            return None
        return self.ratio >= self.goal if self.higher_is_better else self.ratio <= self.goal

    @property
    def goal_text(self) -> str:
        return f"{'>=' if self.higher_is_better else '<='} {self.goal:g}"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "met": self.met, "goal_text": self.goal_text}


def ratio(ours: float | None, theirs: float | None) -> float | None:
    if ours is None or theirs is None or theirs <= 0:
        return None
    return round(ours / theirs, 3)


def load(name: str) -> dict[str, Any] | None:
    path = RESULTS_DIR / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None

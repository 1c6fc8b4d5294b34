"""The shape every benchmark reports in, so one command can gather them into one table.

Each benchmark module writes its own `benchmarks/results/<name>.json` and offers
`targets(payload) -> list[Target]`, which reads that JSON back into the rows of the issue's
target table. `python -m benchmarks` (see `__main__.py`) runs them all and renders the rows.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
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


def render(targets: Sequence[Target]) -> str:
    """The target table as printed by `python -m benchmarks` and by each benchmark alone."""
    lines = [f"{'target':<62}{'ours':>10} {'unit':<5}{'vs':<26}{'ratio':>7}  {'goal':<28}met"]
    for t in targets:
        ours = "n/a" if t.ours is None else f"{t.ours:,.1f}"
        value = "n/a" if t.ratio is None else f"{t.ratio:.2f}"
        met = {True: "yes", False: "NO", None: "?"}[t.met]
        lines.append(f"{t.name[:61]:<62}{ours:>10} {t.unit:<5}{t.compared_to[:25]:<26}"
                     f"{value:>7}  {t.goal_text:<28}{met}")
        others = ", ".join(f"{k} {_num(v)}" for k, v in t.baselines.items())
        if others:
            lines.append(f"    {others}")
        if t.note:
            lines.append(f"    {t.note}")
    return "\n".join(lines)


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.1f}"

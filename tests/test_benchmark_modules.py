"""`python -m benchmarks` runs each benchmark module in a process of its own, by name, and
the modules import their shared pieces from one another (most from `macro`): a piece moved
or renamed breaks a benchmark only when it runs, hours into a full run. Each imports here."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import benchmarks

MODULES = sorted(path.stem for path in Path(benchmarks.__file__).parent.glob("*.py")
                 if path.stem != "__init__")


@pytest.mark.parametrize("module", MODULES)
def test_the_benchmark_module_imports(module: str) -> None:
    importlib.import_module(f"benchmarks.{module}")

"""How the suite's tests are dealt to pytest-xdist's processes (`--dist loadgroup`).

A work unit goes to one process whole. A test that shares a module- or class-scoped fixture
is in its module's unit, so the fixture is built once (as `--dist loadfile` would do); a
test that asks for one by name (`request.getfixturevalue`) must name it in
`pytest.mark.usefixtures` too, or it is dealt apart and builds the fixture again. Every
other test is a unit of its own, and a module may split itself further by marking tests
`xdist_group` (the shim's JVM checks: one unit per JVM). Units are dealt longest first
(their tests' recorded durations, `durations.json`), so no long one is left for the end
while the other processes idle: on n processes the suite's time is then close to an n-th of
its work. The record is refreshed from a run's JUnit report:
    python -m pytest -n 3 --dist loadgroup --junitxml=/tmp/run.xml
    python tests/work_units.py /tmp/run.xml
A test missing from it counts as `UNKNOWN_SECONDS`; a stale record only deals less well.
"""

from __future__ import annotations

import json
import os
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

DURATIONS = Path(__file__).resolve().parent / "durations.json"
UNKNOWN_SECONDS = 5.0
_SHARED_SCOPES = {"module", "class", "package"}


def shares_a_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    return info is not None and any(
        d.scope in _SHARED_SCOPES for defs in info.name2fixturedefs.values() for d in defs)


def unit_of(item: pytest.Item) -> str:
    marks = [m.args[0] if m.args else m.kwargs.get("name", "default")
             for m in item.iter_markers("xdist_group")]
    if marks:
        return "_".join(sorted(map(str, marks)))
    return item.module.__name__ if shares_a_fixture(item) else item.nodeid


def keep_dealt_order(config: pytest.Config) -> None:
    """pytest-xdist would deal units by their number of tests (`--loadscope-reorder`, its
    default), undoing `deal`'s order."""
    if getattr(config.option, "dist", None) == "loadgroup":
        config.option.loadscopereorder = False


def recorded_durations() -> dict[str, float]:
    return json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}


def xdist_processes() -> int:
    """How many processes the tests are dealt to: pytest-xdist tells its own."""
    return int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))


def deal(items: list[pytest.Item], recorded: dict[str, float],
         shared_runs: frozenset[str] = frozenset(), processes: int = 1) -> None:
    """Marks each test with its unit and orders the units longest first, in place (the
    tests of a unit keep their order). `shared_runs` are fixtures one process computes for
    all (harness.saved_run_once): of the units the `processes` start with, one at most needs
    one, or the others idle on its lock meanwhile. Every process collects the same order:
    xdist requires it, and the record is read alike by each."""
    units = {id(item): unit_of(item) for item in items}
    cost: dict[str, float] = {}
    needs_shared: set[str] = set()
    for item in items:
        unit = units[id(item)]
        cost[unit] = cost.get(unit, 0.0) + recorded.get(item.nodeid, UNKNOWN_SECONDS)
        if not shared_runs.isdisjoint(item.fixturenames):
            needs_shared.add(unit)
        if unit != item.nodeid and not any(item.iter_markers("xdist_group")):
            item.add_marker(pytest.mark.xdist_group(unit))
    order = sorted(cost, key=lambda unit: -cost[unit])  # stable: ties keep collection order
    order = _one_shared_run_at_the_start(order, needs_shared, processes)
    position = {unit: index for index, unit in enumerate(order)}
    items.sort(key=lambda item: position[units[id(item)]])


def _one_shared_run_at_the_start(order: list[str], needs_shared: set[str],
                                 processes: int) -> list[str]:
    """`order` with the first `processes` units taken longest first among those that need no
    shared run once one of them does."""
    start, rest = [], list(order)
    while rest and len(start) < processes:
        sharing = not needs_shared.isdisjoint(start)
        unit = next((u for u in rest if not (sharing and u in needs_shared)), rest[0])
        rest.remove(unit)
        start.append(unit)
    return start + rest


def record(junit_report: Path) -> dict[str, float]:
    """Each test's seconds (setup, call and teardown) from a JUnit report, by node id."""
    seconds = {}
    for case in ElementTree.parse(junit_report).iter("testcase"):
        module = case.get("classname", "").replace(".", "/") + ".py"
        name = case.get("name", "").split("@")[0]
        seconds[f"{module}::{name}"] = round(float(case.get("time", 0)), 1)
    return dict(sorted(seconds.items()))


if __name__ == "__main__":
    DURATIONS.write_text(json.dumps(record(Path(sys.argv[1])), indent=0) + "\n")

"""How tests are dealt to pytest-xdist's processes (tests/work_units.py), on a small suite
of its own run by a real pytest: which tests share a unit, and in what order units go."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

CONFTEST = f'''
import json, sys
from pathlib import Path
import pytest
sys.path.insert(0, {str(TESTS)!r})
from work_units import deal, keep_dealt_order, xdist_processes

def pytest_configure(config):
    keep_dealt_order(config)

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    deal(items, json.loads((Path(__file__).parent / "record.json").read_text()),
         shared_runs=frozenset({{"hdfs_run"}}), processes=xdist_processes())

@pytest.fixture(scope="session")
def hdfs_run():
    return "computed once for every process"
'''
SHARED = '''
import pytest

@pytest.fixture(scope="module")
def built_once():
    return 1

def test_uses_it(built_once): pass

@pytest.mark.usefixtures("built_once")  # as a test that asks for it by name must
def test_asks_by_name(request): request.getfixturevalue("built_once")

def test_alone(): pass
'''
OTHERS = '''
def test_long(): pass
def test_needs_the_shared_run(hdfs_run): pass
def test_short(): pass
'''


def run_pytest(suite: Path, *args: str, dealt_to: int = 2) -> list[str]:
    """pytest's output; a run without pytest-xdist (`--collect-only`) deals as `dealt_to`
    processes would (xdist's own processes know their number)."""
    env = {**os.environ, "PYTEST_XDIST_WORKER_COUNT": str(dealt_to)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          cwd=suite, capture_output=True, env=env, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.splitlines()


def make_suite(root: Path, record: dict[str, float]) -> Path:
    root.mkdir()
    (root / "conftest.py").write_text(CONFTEST)
    (root / "test_shared.py").write_text(SHARED)
    (root / "test_others.py").write_text(OTHERS)
    (root / "record.json").write_text(json.dumps(record))
    return root


def test_tests_sharing_a_module_fixture_go_together_and_others_alone(tmp_path: Path) -> None:
    suite = make_suite(tmp_path / "suite", {})
    ran = [line for line in run_pytest(suite, "-n", "2", "--dist", "loadgroup", "-v")
           if "PASSED" in line]
    units = {line.split("::")[1].split()[0] for line in ran}
    assert units == {"test_uses_it@test_shared", "test_asks_by_name@test_shared", "test_alone",
                     "test_long", "test_needs_the_shared_run", "test_short"}, ran


def test_units_go_longest_first_those_starting_apart_from_the_shared_run(tmp_path: Path) -> None:
    record = {"test_others.py::test_long": 90.0, "test_others.py::test_short": 1.0,
              "test_others.py::test_needs_the_shared_run": 80.0,
              "test_shared.py::test_uses_it": 50.0, "test_shared.py::test_alone": 2.0,
              "test_shared.py::test_asks_by_name": 3.0}
    suite = make_suite(tmp_path / "suite", record)
    order = [line.split("::")[1] for line in run_pytest(suite, "-q", "--collect-only")
             if "::" in line]
    # By cost: long 90, the shared run 80, the module's unit 53, alone 2, short 1. Long
    # needs no shared run, so the order stands; once it needs one too, the second unit the
    # processes start with is the longest that needs none: the module's.
    assert order == ["test_long", "test_needs_the_shared_run", "test_uses_it",
                     "test_asks_by_name", "test_alone", "test_short"]
    (suite / "test_others.py").write_text(OTHERS.replace("def test_long():",
                                                         "def test_long(hdfs_run):"))
    order = [line.split("::")[1] for line in run_pytest(suite, "-q", "--collect-only")
             if "::" in line]
    assert order == ["test_long", "test_uses_it", "test_asks_by_name",
                     "test_needs_the_shared_run", "test_alone", "test_short"]
    # On three processes the third to start needs none either: alone, before the shared run
    order = [line.split("::")[1] for line in run_pytest(suite, "-q", "--collect-only",
                                                        dealt_to=3) if "::" in line]
    assert order == ["test_long", "test_uses_it", "test_asks_by_name", "test_alone",
                     "test_needs_the_shared_run", "test_short"]
    # ... and xdist deals them in the order dealt (on one process: the order they run in),
    # not by its own default (most tests first)
    order = [line.split("::")[1] for line in run_pytest(suite, "-q", "--collect-only",
                                                        dealt_to=1) if "::" in line]
    assert order == ["test_long", "test_needs_the_shared_run", "test_uses_it",
                     "test_asks_by_name", "test_alone", "test_short"]
    ran = [line.split("::")[1].split()[0].split("@")[0]
           for line in run_pytest(suite, "-n", "1", "--dist", "loadgroup", "-v")
           if "PASSED" in line]
    assert ran == order

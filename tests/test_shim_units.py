"""The shim's own behaviour, checked in the JVM on its real classes (tests/jvm/, compiled
against the pyspark jars and the shim jar like the shim itself), with real worker processes
where a check needs them. The checks of one group run in one JVM, each in a directory of its
own and with every worker pool stopped after it; each check is still one pytest result, and
a failing one shows its own output."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import state_store
from jvm_options import TEST_JVM_OPTIONS
from state_store import options
from state_store.driver import bridge

CHECKS_SOURCES = Path(__file__).resolve().parent / "jvm"
CHECKS_CLASS = "io.pyrocks.statestore.ShimChecks"
REPO = Path(state_store.__file__).resolve().parent.parent

# The checks of each JVM, as tests/jvm/ groups them.
CACHE = ("lost-race-invalidates-cache", "reconnect-invalidates-cache",
         "family-and-key-never-collide", "reclaim-during-scan-keeps-listings-exact",
         "key-filter-charged-to-budget", "key-filter-dropped-under-pressure",
         "key-filter-growth-never-overflows", "a-key-written-again-does-not-grow-the-filter",
         "a-write-that-clears-the-cache-for-its-filter-stays-exact",
         "a-store-loaded-empty-knows-every-key-absent",
         "a-prefix-listing-answers-for-its-keys",
         "a-complete-cache-answers-full-scans-of-the-default-family",
         "a-complete-cache-answers-full-scans-of-a-prefix-family",
         "a-cache-over-its-budget-keeps-what-it-wrote-last",
         "evictions-count-what-a-cache-pushed-out",
         "an-outgrown-budget-is-said-once-naming-its-setting",
         "reclaim-orders-caches-that-tasks-go-on-using",
         "a-walk-in-key-order-reads-ahead-and-stays-exact",
         "a-read-ahead-window-is-charged-and-kept-exact",
         "a-closed-providers-cache-serves-the-next-provider",
         "a-parked-cache-answers-only-for-its-own-commit",
         "only-a-committed-cache-is-parked-and-it-goes-whole",
         "caches-stay-exact-across-the-providers-of-one-store",
         "grouped-writes-leave-a-cache-as-single-writes-do",
         "held-puts-are-seen-by-whatever-follows-them")
PACKED = ("packed-entries-answer-as-a-map-does", "packed-entries-snapshots-ignore-later-writes",
          "prefix-records-keep-their-keys-in-order",
          "packed-entries-evict-those-written-longest-ago",
          "packed-entries-page-table-follows-the-pages-kept",
          "packed-entries-hold-no-more-pages-than-a-slot-names",
          "packed-entries-rewrite-in-place-only-what-no-reader-holds",
          "int32-reads-back-what-it-wrote-and-refuses-a-bad-offset",
          "word-packing-keeps-every-value-and-only-shortens")
WRITERS = ("second-writer-waits-then-fails", "second-writer-never-mixes-writes",
           "reader-waits-for-writer", "abort-always-leaves-store-aborted",
           "interrupt-is-not-a-dead-worker", "an-interrupted-start-leaves-no-worker",
           "a-slow-start-holds-up-only-its-own-slot",
           "a-local-driver-starts-the-workers-ahead-of-its-tasks",
           "open-spec-names-query-and-writer")
DEADLINES = ("request-deadline-on-silent-server", "hung-worker-is-killed-and-replaced",
             "maintenance-request-has-deadline")
FINISH = ("finish-query-matches-its-checkpoint-only",
          "finish-query-skips-writers-and-closed-providers",
          "finish-query-names-every-failed-store",
          "a-run-end-ends-each-workers-stores-in-one-request",
          "a-new-run-goes-where-its-stores-last-ran",
          "the-coordinator-remembers-the-stores-that-reported-last")
REPLAY = ("load-empty-publishes-a-first-version", "change-feed-lists-each-version-in-order",
          "replay-from-a-snapshot-equals-a-load")
SCANS = ("range-scan-lists-keys-in-value-order",
         "a-chunk-reads-in-both-shapes-and-a-malformed-one-is-refused",
         "full-scans-stream-families-of-one-length-and-of-many-whole")
KEY_LAYOUT = ("fixed-width-prefix-keys-are-sparks-bytes",
              "prefix-scan-keys-trust-their-layout-only-once-it-matched",
              "values-are-row-bytes-and-lists-are-length-framed",
              "a-list-value-whose-lengths-do-not-add-up-is-refused",
              "a-value-too-short-for-its-schema-id-is-refused")
OPTIONS = ("sizes-and-durations-read-as-python-reads-them",
           "spark-memory-and-compaction-settings-read-as-python-reads-them",
           "spark-state-settings-reach-the-worker-and-unknown-ones-are-named",
           "compacting-stores-get-workers-whose-compactions-keep-priority")


@dataclass
class ShimChecks:
    """Runs each group of checks once, in one JVM, when the first of its checks is asked."""

    classpath: str
    work: Path
    outputs: dict[str, str] = field(default_factory=dict)  # check -> its part of stdout
    stderr: dict[tuple[str, ...], str] = field(default_factory=dict)

    def assert_passed(self, group: tuple[str, ...], name: str) -> None:
        if group not in self.stderr:
            self._run(group)
        output = self.outputs.get(name, "(the JVM ended before the check ran)")
        assert output.rstrip().endswith(f"PASS {name}"), (
            f"check {name} failed:\n{output[-4000:]}\n{self.stderr[group][-8000:]}")

    def _run(self, group: tuple[str, ...]) -> None:
        done = subprocess.run(
            [bridge.java_executable(), *TEST_JVM_OPTIONS.split(), "-cp", self.classpath,
             CHECKS_CLASS, str(self.work / f"g{len(self.stderr)}"), sys.executable, str(REPO),
             *group],
            capture_output=True, text=True, timeout=1800,  # a hang guard only
        )
        self.stderr[group] = f"(exit {done.returncode})\n{done.stderr}"
        for part in done.stdout.split("BEGIN ")[1:]:
            name, _, rest = part.partition("\n")
            self.outputs[name] = rest


def checks_classpath() -> str:
    """The shim's jar and its checks' (built if not cached): a `java -cp` value."""
    shim = bridge.jar_path()
    jar = bridge.jar_path(CHECKS_SOURCES, name="pyrocks-shim-checks", classpath=[shim])
    return bridge.java_classpath([shim, jar])


@pytest.fixture(scope="module")
def checks(tmp_path_factory: pytest.TempPathFactory) -> ShimChecks:
    return ShimChecks(checks_classpath(), tmp_path_factory.mktemp("checks"))


GROUPS = {"read cache and key filter": CACHE,
          "the read cache's packed storage": PACKED,
          "one writer per working copy, abort, interrupts": WRITERS,
          "deadlines": DEADLINES,
          "finishing the stores of a stopped query, the next run's locations": FINISH,
          "versions from nothing, the change feed, replay": REPLAY,
          "range scans and scan chunks": SCANS,
          "rows as bytes: prefix-scan keys field by field, values": KEY_LAYOUT,
          "option values and Spark's settings": OPTIONS}


def jvm_unit(group: tuple[str, ...]) -> pytest.MarkDecorator:
    """The checks of one JVM go to one pytest-xdist process (tests/work_units.py), the JVMs
    of this module to either."""
    return pytest.mark.xdist_group(f"shim-checks-{group[0]}")


@pytest.mark.parametrize(("group", "name"),
                         [pytest.param(group, name, marks=jvm_unit(group), id=name)
                          for group in GROUPS.values() for name in group])
def test_jvm_check(checks: ShimChecks, group: tuple[str, ...], name: str) -> None:
    checks.assert_passed(group, name)


def _python_reading(kind: str, text: str) -> str:
    """What the worker's option table makes of `text`, as OptionChecks prints the shim's."""
    if kind == "memory":
        bounded, maximum = text.split(",")
        conf = {key: value for key, value in zip(options.SPARK_MEMORY_KEYS, (bounded, maximum),
                                                  strict=True) if value != "unset"}
        bound = options.spark_memory_bound(conf)
        return "none" if bound is None else str(options.BY_KEY["memoryBoundMB"].parse(bound))
    if kind == "compact":
        keys = (f"{options.PREFIX}compactOnCommit",
                f"{options.SPARK_ROCKSDB_PREFIX}compactOnCommit")
        conf = {key: value.replace("_", " ")
                for key, value in zip(keys, text.split(","), strict=True) if value != "unset"}
        try:
            return str(options.store_options(conf).compact_on_commit).lower()
        except options.OptionError:
            return "refused"
    text = "" if text == "<empty>" else text.replace("_", " ")
    try:
        if kind == "seconds":
            seconds = options._duration(text)
            return str(int(seconds)) if seconds.is_integer() else "none"
        shift = int(kind.removeprefix("units:"))
        return str(options._non_negative_int(text) if shift < 0 and text.isdigit() else
                   options._in_units(shift, 0)(text) if shift >= 0 else "none")
    except ValueError:
        return "none"


@jvm_unit(OPTIONS)
def test_shim_reads_option_values_as_the_worker_does(checks: ShimChecks) -> None:
    """Sizes, durations, Spark's memory settings and compactOnCommit, which the shim reads
    itself (it needs them before a worker exists), mean what they mean to the worker's
    option table."""
    readings = []
    for name in OPTIONS[:2]:
        checks.assert_passed(OPTIONS, name)
        readings += [line.split()[1:] for line in checks.outputs[name].splitlines()
                     if line.startswith("READ ")]
    assert len(readings) > 90
    differ = [(kind, text, got, _python_reading(kind, text))
              for kind, text, _, got in readings if _python_reading(kind, text) != got]
    assert not differ, f"(kind, value, shim, worker): {differ}"


def test_every_check_of_the_jvm_side_runs_here() -> None:
    """A check added in tests/jvm/ must be in a group above, or it would never run."""
    names = set()
    for source in CHECKS_SOURCES.rglob("*Checks.scala"):
        text = source.read_text()
        if "val all:" in text:
            table = text[text.index("val all:"):].split(")\n", 1)[0]
            names |= {line.split('"')[1] for line in table.splitlines() if " -> " in line}
    assert names == {name for group in GROUPS.values() for name in group}

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


def test_query_end_adds_up_the_runs_of_its_child_processes() -> None:
    """Each `query_end` run reports from a process of its own: every figure of every run
    must reach the medians, the CPU by thread kind summed."""
    from dataclasses import asdict

    from benchmarks.query_end import Measure

    runs = []
    for i in (1, 2, 3):
        run = Measure("pyrocks", stop_ms=[i], restart_ms=[10 * i], restart_batch_ms=[5 * i],
                      replayed_versions=[0], stop_after_batch_ms=[2 * i],
                      stop_after_batch_process_cpu_ms={"jvm": [float(i)]})
        run.add_stop_cpu({"worker: rocksdb:high": 1.5})
        runs.append(asdict(run))
    total = Measure("pyrocks")
    for run in runs:
        total.absorb(run)
    assert total.medians() == {"stop_ms": 2, "restart_ms": 20, "restart_batch_ms": 10,
                               "stop_after_batch_ms": 4}
    assert total.replayed_versions == [0, 0, 0]
    assert total.stop_after_batch_cpu_ms == {"worker: rocksdb:high": 4.5}
    assert total.stop_after_batch_process_cpu_ms == {"jvm": [1.0, 2.0, 3.0]}


def test_a_benchmark_child_answers_its_spec_on_its_last_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m benchmarks.<module> --child <spec>` prints its answer as the last line,
    which the parent (`run_module_child`) reads; any other command line is the module's."""
    import json

    from benchmarks.child import answered

    assert answered(["--child", json.dumps({"keys": 3})], lambda spec: {"rows": spec["keys"]})
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == {"rows": 3}
    assert not answered(["--quick"], lambda spec: {"rows": 0})
    assert capsys.readouterr().out == ""


def test_macro_compares_medians_over_rounds_and_each_round_with_itself() -> None:
    """A provider's figure is the median of its rounds' medians, a failed round left out;
    the ratios round by round pair each of ours with the other provider's of that round."""
    from benchmarks.macro import OURS, RunResult, ratios, summaries, targets

    def run(provider: str, index: int, batch_ms: float, error: str | None = None) -> RunResult:
        return RunResult("sessions", provider, "C", False, error=error,
                         median_batch_ms=batch_ms, median_commit_ms=batch_ms / 10,
                         round=index)

    results = [run(OURS, 1, 90.0), run("spark-hdfs", 0, 100.0), run(OURS, 0, 50.0),
               run("spark-hdfs", 1, 120.0), run(OURS, 2, 999.0, error="died"),
               run("spark-hdfs", 2, 80.0)]
    ours, hdfs = summaries(results)
    assert (ours.provider, ours.median_batch_ms, ours.batch_ms_by_round) == (
        OURS, 70.0, [50.0, 90.0, None])
    assert ours.errors == ["died"]
    assert (hdfs.median_batch_ms, hdfs.median_commit_ms) == (100.0, 10.0)
    (against_hdfs,) = ratios(results)
    assert against_hdfs.batch_ratio == 0.7
    assert against_hdfs.batch_ratio_by_round == [0.5, 0.75, None]
    payload = {"results": [{**vars(r), "batches": []} for r in results]}
    assert [t.ours for t in targets(payload)] == [70.0, 7.0]

"""`python -m benchmarks` runs each benchmark module in a process of its own, by name, and
the modules import their shared pieces from one another (most from `macro`): a piece moved
or renamed breaks a benchmark only when it runs, hours into a full run. Each imports here."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

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

    from benchmarks.child import answered

    assert answered(["--child", json.dumps({"keys": 3})], lambda spec: {"rows": spec["keys"]})
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == {"rows": 3}
    assert not answered(["--quick"], lambda spec: {"rows": 0})
    assert capsys.readouterr().out == ""


def test_a_childs_answer_is_read_though_a_leftover_holds_its_output(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run whose Python answered and exited, but whose JVM lingers holding the output pipes
    (one hung in its shutdown), is answered once the leftover is killed: not at the deadline,
    and not lost."""
    from benchmarks import child

    (tmp_path / "lingering_run.py").write_text(
        "import json, subprocess, sys\n"
        "leftover = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3600)'])\n"
        "print('progress')\n"
        "print(json.dumps({'rows': 7, 'leftover': leftover.pid}))\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setattr(child, "LEFTOVER_GRACE_S", 1.0)
    answer, why = child.run_module_child("lingering_run", {}, deadline_s=600.0)
    assert why == "" and answer is not None and answer["rows"] == 7
    # Its pipes closed: the leftover has exited (gone, or a zombie for init to reap).
    stat = Path(f"/proc/{answer['leftover']}/stat")
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")


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


def test_scale_takes_the_median_over_repeats_and_pairs_them(tmp_path: Path) -> None:
    """A (workload, size, provider)'s batch time is the median of its repeats' medians, a
    failed repeat left out; repeat r of ours is set beside repeat r of each Spark provider;
    a sweep run again replaces only the runs it makes."""
    from benchmarks.scale import Config, Run, render, save, targets

    def run(provider: str, repeat: int, batch_ms: float, error: str | None = None) -> Run:
        return Run("aggregation", 1_000_000, provider, median_batch_ms=batch_ms,
                   peak_jvm_mb=100.0 + repeat, peak_workers_mb=50.0, error=error,
                   repeat=repeat)

    runs = [run("pyrocks", 1, 700.0), run("spark-rocksdb", 0, 1_000.0),
            run("spark-rocksdb", 1, 1_200.0), run("pyrocks", 0, 500.0),
            run("pyrocks", 2, 9_999.0, error="died"), run("spark-rocksdb", 2, 1_100.0),
            Run("aggregation", 100_000, "spark-hdfs", median_batch_ms=300.0)]
    cfg = Config((1_000_000,), ("aggregation",), ("pyrocks", "spark-rocksdb"), 100, 100, 1,
                 3, 60.0, repeats=3)
    save(cfg, runs, tmp_path / "scale.json")
    payload = json.loads((tmp_path / "scale.json").read_text())
    (ours_vs_rocksdb,) = [t for t in targets(payload) if t.compared_to == "spark-rocksdb"]
    assert (ours_vs_rocksdb.ours, ours_vs_rocksdb.ratio) == (600.0, 0.545)
    table = render(payload)
    assert "ours/rocksdb by repeat: 0.50 0.58 -" in table
    assert "102.0+50.0" not in table and "101.0+50.0" in table  # the failed run's RSS left out
    assert "pyrocks: died" in table


def test_scale_compares_the_measured_batches_quarter_by_quarter(tmp_path: Path) -> None:
    """With two measured batches a quarter or more, the table sets ours beside Spark's
    RocksDB provider quarter by quarter (each quarter the median of the repeats' batches at
    those places) and shows each provider's CPU a batch by thread group, quarter by quarter,
    averaged over its repeats."""
    from benchmarks.scale import Config, Run, quarters, render, save

    assert quarters(list(range(10))) == [[0, 1], [2, 3, 4], [5, 6], [7, 8, 9]]
    cpu = [{"tasks": 0.4, "workers": 0.2}, {"tasks": 0.3, "workers": 0.2},
           {"tasks": 0.3, "workers": 0.1}, {"tasks": 0.2, "workers": 0.1}]
    runs = [Run("aggregation", 1_000_000, "pyrocks", batch_ms=[900, 900, 800, 800, 700, 700,
                                                                600, 600],
                median_batch_ms=750.0, cpu_s_by_quarter=cpu),
            Run("aggregation", 1_000_000, "pyrocks", batch_ms=[1000, 1000, 800, 800, 700,
                                                                700, 500, 500],
                median_batch_ms=750.0, repeat=1,
                cpu_s_by_quarter=[{**q, "tasks": q["tasks"] + 0.2} for q in cpu]),
            *[Run("aggregation", 1_000_000, "spark-rocksdb", batch_ms=[1500] * 8,
                  median_batch_ms=1500.0, repeat=r) for r in (0, 1)]]
    cfg = Config((1_000_000,), ("aggregation",), ("pyrocks", "spark-rocksdb"), 100, 100, 1,
                 8, 60.0, repeats=2)
    save(cfg, runs, tmp_path / "scale.json")
    table = render(json.loads((tmp_path / "scale.json").read_text()))
    assert "ours/rocksdb by quarter of the measured batches: 0.63 0.53 0.47 0.37" in table
    assert ("pyrocks CPU s a batch by quarter: tasks 0.50 0.40 0.40 0.30; "
            "workers 0.20 0.20 0.10 0.10") in table
    assert "spark-rocksdb CPU s" not in table  # no timeline recorded for it


def test_a_cpu_timeline_says_what_a_window_of_time_cost_each_thread_group() -> None:
    """The samples nearest a window's ends say what it cost; the JVM's threads are grouped
    by what they work for. Live: a process's CPU spent between the timeline's start and its
    stop is seen (its thread is neither Spark's task nor a JVM's own: "jvm other")."""
    from benchmarks.procfs import CpuTimeline, thread_group

    # as /proc names them: 15 characters of the thread's name, digits dropped (thread_kind)
    assert [thread_group(k) for k in ("Executor task l", "C2 CompilerThre", "C1 CompilerThre",
                                       "GC Thread", "G1 Conc", "stream executio",
                                       "dag-scheduler-e")] == [
        "tasks", "compiler", "compiler", "gc", "gc", "driver", "jvm other"]
    timeline = CpuTimeline(0)
    timeline.samples = [(10.0, {"tasks": 1.0, "workers": 0.5}),
                        (10.2, {"tasks": 1.3, "workers": 0.6, "gc": 0.1}),
                        (10.4, {"tasks": 1.7, "workers": 0.9, "gc": 0.1})]
    window = timeline.between(10.05, 10.35)
    assert window == pytest.approx({"tasks": 0.7, "workers": 0.4, "gc": 0.1})
    spinner = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\n"
         "sys.stdin.readline(); begun = time.process_time()\n"
         "while time.process_time() - begun < 0.2: pass\n"
         "print('spun', flush=True); sys.stdin.readline()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert spinner.stdin is not None and spinner.stdout is not None
    try:
        with CpuTimeline(spinner.pid, every_s=0.05) as live:
            while not live.samples:  # a sample before the spin
                time.sleep(0.01)
            spinner.stdin.write("go\n")
            spinner.stdin.flush()
            assert spinner.stdout.readline() == "spun\n"
        assert live.between(0, time.time() + 60)["jvm other"] >= 0.15
    finally:
        spinner.kill()
        spinner.wait()


def test_scale_gives_each_run_the_java_options_and_its_recording(tmp_path: Path) -> None:
    """`--java-option` reaches every run's JVM, beside the recording `--jfr` asks for, in a
    file of each repeat's own."""
    from dataclasses import replace

    from benchmarks.scale import Config, Run, driver_java_options

    run = Run("dedup", 1_000_000, "pyrocks")
    plain = Config((1_000_000,), ("dedup",), ("pyrocks",), 100, 100, 1, 3, 60.0)
    assert driver_java_options(plain, run) == ""
    tuned = replace(plain, java_options=("-Xms4g", "-XX:+AlwaysPreTouch"), jfr_dir=str(tmp_path))
    options = driver_java_options(tuned, run).split(" ")
    assert options[:2] == ["-Xms4g", "-XX:+AlwaysPreTouch"]
    # Samples inside inlined code name their own method (scale.jfr_at_launch).
    assert options[2:4] == ["-XX:+UnlockDiagnosticVMOptions", "-XX:+DebugNonSafepoints"]
    assert options[4].startswith("-XX:StartFlightRecording=")
    assert options[4].endswith(f"filename={tmp_path / 'dedup-1000000-pyrocks.jfr'}")
    # With repeats, each repeat records into a file of its own.
    repeated = replace(tuned, repeats=3)
    second = driver_java_options(repeated, replace(run, repeat=1)).split(" ")[4]
    assert second.endswith(f"filename={tmp_path / 'dedup-1000000-pyrocks-2.jfr'}")


def test_spaced_triggers_counts_the_state_files_and_takes_medians(tmp_path: Path) -> None:
    """Every file under `state/`, at any depth, counts with its bytes; each figure's median
    is over the provider's repeats, and the table shows each provider's."""
    from benchmarks.spaced_triggers import Footprint, Run, render, state_footprint, summary

    (tmp_path / "0" / "default").mkdir(parents=True)
    (tmp_path / "0" / "default" / "1.changelog").write_bytes(b"x" * 300)
    (tmp_path / "0" / ".1.changelog.crc").write_bytes(b"x" * 12)
    (tmp_path / "empty").mkdir()
    assert state_footprint(tmp_path) == (2, 312)
    repeats = ((40, 12.0, 700), (10, 5.0, 1200), (20, 7.0, 800))  # medians not means
    runs = {"pyrocks": [Footprint("pyrocks", files, files * 2**20, cpu, batch)
                        for files, cpu, batch in repeats],
            "spark-hdfs": [Footprint("spark-hdfs", 4, 2**20, 3.0, 600)],
            "spark-rocksdb": []}
    medians = summary(runs)
    assert medians == {"pyrocks": {"files": 20, "bytes": 20 * 2**20, "cpu_s": 7.0,
                                   "batch_ms": 800},
                       "spark-hdfs": {"files": 4, "bytes": 2**20, "cpu_s": 3.0,
                                      "batch_ms": 600}}
    table = render(medians, Run(100_000, 9, 1.5, {"snapshotWhenIdleSeconds": "0.25"})
                   ).splitlines()
    assert table[0] == "9 batches, a trigger every 1.5 s, snapshotWhenIdleSeconds=0.25:"
    assert table[2].split() == ["pyrocks", "20", "20.0", "7.0", "800"]
    assert table[3].split() == ["spark-hdfs", "4", "1.0", "3.0", "600"]


@pytest.mark.parametrize("module", ["macro", "query_end", "spaced_triggers"])
def test_store_options_are_parsed_the_same_by_each_module_that_takes_them(
        module: str, capsys: pytest.CaptureFixture[str]) -> None:
    """--store-option NAME=VALUE becomes `configure`'s keyword argument (a value may hold
    '='); one without '=' is refused by name before anything runs."""
    import argparse

    from benchmarks.macro import add_store_option, store_options

    parser = argparse.ArgumentParser()
    add_store_option(parser)
    given = parser.parse_args(["--store-option", "snapshotWhenIdleSeconds=0.25",
                               "--store-option", "rootOptions={\"a\": \"b=c\"}"]).store_option
    assert store_options(parser, given) == {"snapshotWhenIdleSeconds": "0.25",
                                            "rootOptions": '{"a": "b=c"}'}
    with pytest.raises(SystemExit):
        importlib.import_module(f"benchmarks.{module}").main(
            ["--store-option", "snapshotWhenIdleSeconds"])
    assert "--store-option wants NAME=VALUE, not snapshotWhenIdleSeconds" in capsys.readouterr().err


def test_profile_refuses_to_start_without_its_profilers(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A profile of ours needs py-spy and jcmd: one missing is named before the state is
    filled (that takes minutes), not found when the profilers attach; `noop` needs no
    py-spy (no workers)."""
    from benchmarks import profile

    monkeypatch.setenv("PATH", "")
    with pytest.raises(SystemExit):
        profile.main(["--workload", "join", "--keys", "1k"])
    assert "jcmd and py-spy not found on PATH" in capsys.readouterr().err
    assert profile.missing_profilers("noop") == ["jcmd"]


def test_a_profile_reads_the_jvm_samples_of_the_measured_batches_only() -> None:
    """The JVM records from its launch (a recording started later makes it drop its compiled
    code): the samples of the fill and the warm-up are in the file and must not be counted.
    Timestamps as `jfr print --json` writes them, to the nanosecond."""
    from benchmarks import profile

    def sample(at: str) -> dict[str, Any]:
        return {"values": {"startTime": at}}

    events = [sample("2026-12-06T00:10:59.999999999Z"), sample("2026-12-06T00:11:00.000001Z"),
              sample("2026-12-06T00:11:04.500000000Z"), sample("2026-12-06T00:11:05.000002Z")]
    window = (datetime(2026, 12, 6, 0, 11, 0, tzinfo=timezone.utc).timestamp(),
              datetime(2026, 12, 6, 0, 11, 5, tzinfo=timezone.utc).timestamp())
    assert profile.within(events, window) == events[1:3]

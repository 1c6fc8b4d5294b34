"""Deployed as users deploy Spark packages: an installed wheel with no source checkout, a
cluster whose executors run a Python environment shipped in `spark.archives`, a notebook
whose JVM started without the shim, a builder with a user's own extension and listener,
and `state-store conf` for spark-defaults.conf.

Each case runs `deploy_driver.py` in a process of its own (a fresh JVM), in the Python
under test, with nothing of this checkout on its path unless the case is about the driver.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from harness import Outputs, assert_same_outputs
from state_store.driver import bridge
from state_store.spark import PROVIDER_CLASS, PYTHON_EXEC_KEY, cluster_conf

TESTS = Path(__file__).resolve().parent
CHECKOUT = TESTS.parent
DRIVER = TESTS / "deploy_driver.py"
USER_PLUGINS = TESTS / "jvm-user"


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without anything that points a Python at this checkout."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    return {**env, **extra}


def run_driver(python: str | Path, *args: str, cwd: Path, env: dict[str, str] | None = None,
               timeout: float = 900) -> dict:
    done = subprocess.run([str(python), str(DRIVER), *args], cwd=cwd, env=env or clean_env(),
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"driver {args[0]} failed:\n{done.stderr[-6000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This project built as a wheel, as `python -m build` / `pip wheel` make it."""
    out = tmp_path_factory.mktemp("wheel")
    # From a copy without build products: setuptools' build/ keeps files a checkout dropped.
    source = out / "source"
    shutil.copytree(CHECKOUT, source, ignore=shutil.ignore_patterns(
        "build", "*.egg-info", ".git", "__pycache__", ".hypothesis", "benchmarks"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                           str(out), str(source)], check=True, capture_output=True, text=True,
                          env=clean_env())
    # setuptools deprecates shipping a folder with an importable name as undeclared data:
    # a release that enforces it would leave Scala sources out of the wheel.
    assert "would be ignored" not in done.stdout + done.stderr, done.stderr[-4000:]
    (built,) = out.glob("pyrocks_state_store-*.whl")
    return built


def test_the_wheel_ships_every_scala_source(wheel: Path) -> None:
    """Each Spark release compiles its own selection (`jvm-bridge/compat/`), so a source
    missing from the wheel fails only on the releases that need it."""
    shim = CHECKOUT / "jvm-bridge"
    expected = {f"state_store/jvm_bridge/{p.relative_to(shim).as_posix()}"
                for p in bridge.sources(shim)}
    with zipfile.ZipFile(wheel) as archive:
        shipped = {name for name in archive.namelist() if name.endswith(".scala")}
    assert expected and shipped == expected


def virtualenv(path: Path, *install: str) -> Path:
    """A new virtualenv at `path` with `install` pip-installed; its Python."""
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    python = path / "bin" / "python"
    # --no-compile: byte-compiling pyspark's thousands of modules proves nothing here.
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-compile", *install],
                   check=True, capture_output=True, env=clean_env())
    return python


def same_as_spark(result: dict, hdfs_reference: Outputs) -> None:
    """The driver's outputs (JSON: batches keyed by strings) are the HDFS reference's."""
    ours = {name: {int(b): rows for b, rows in batches.items()}
            for name, batches in result["outputs"].items()}
    assert ours and all(ours.values()), "the driver ran no query"
    assert_same_outputs({name: hdfs_reference[name] for name in ours}, ours)


def test_an_installed_wheel_runs_the_demo_and_matches_spark(wheel: Path, tmp_path: Path,
                                                             hdfs_reference: Outputs) -> None:
    python = virtualenv(tmp_path / "venv", str(wheel))
    # An empty cache: the shim must be compiled from the sources inside the installed wheel.
    env = clean_env(PYROCKS_CACHE_DIR=str(tmp_path / "cache"))
    demo = subprocess.run([str(tmp_path / "venv" / "bin" / "state-store"), "demo",
                           "--batches", "3", "--checkpoint", str(tmp_path / "demo")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert demo.returncode == 0, demo.stderr[-4000:]
    assert f"provider: {PROVIDER_CLASS}" in demo.stdout
    assert "compiling" in demo.stderr and str(tmp_path / "cache") in demo.stderr
    site = tmp_path / "venv" / "lib"
    result = run_driver(python, "correctness", str(tmp_path / "work"), cwd=tmp_path, env=env)
    same_as_spark(result, hdfs_reference)
    assert Path(result["package"]).is_relative_to(site), result["package"]
    assert result["workers"], "no worker of ours was seen running"
    for worker in result["workers"]:
        assert worker["argv0"] == str(python)
        assert worker["rocksdict"] and Path(worker["rocksdict"][0]).is_relative_to(site)


def test_executors_run_the_workers_from_an_archived_environment(
        wheel: Path, tmp_path: Path, hdfs_reference: Outputs) -> None:
    """`spark.archives` ships a packed environment that Spark unpacks beside each executor
    as `environment/`; `spark.executorEnv.PYSPARK_PYTHON` names its Python. Our settings
    are `cluster_conf()`'s (what `state-store conf` prints): no path of this machine."""
    # Lean on purpose (the workers need rocksdict, fsspec and cramjam, not pyspark): a user
    # packs their whole environment with venv-pack or conda-pack.
    packed = tmp_path / "env"
    virtualenv(packed, "rocksdict", "fsspec", "cramjam")
    subprocess.run([str(packed / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile",
                    "--no-deps",
                    str(wheel)], check=True, capture_output=True, env=clean_env())
    archive = tmp_path / "env.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(packed, arcname=".")
    result = run_driver(
        sys.executable, "correctness", str(tmp_path / "work"), "--settings", "cluster",
        "--master", "local-cluster[1,2,1024]",
        "--conf", f"spark.archives={archive}#environment",
        "spark.executorEnv.PYSPARK_PYTHON=./environment/bin/python", cwd=tmp_path)
    same_as_spark(result, hdfs_reference)
    assert result["workers"], "no worker of ours was seen running"
    for worker in result["workers"]:
        unpacked = Path(worker["cwd"]) / "environment"
        assert worker["argv0"] == "./environment/bin/python"
        assert worker["rocksdict"] and Path(worker["rocksdict"][0]).is_relative_to(unpacked)


def test_a_notebook_configures_after_a_plain_session(tmp_path: Path) -> None:
    """One process, one JVM: a plain session, stopped, then a configure()d one."""
    result = run_driver(sys.executable, "notebook", str(tmp_path), cwd=tmp_path)
    assert result["provider"] == PROVIDER_CLASS
    assert result["got"] == result["expected"] == [[k, 10] for k in range(3)]
    assert result["our_stores"], "the configured session's query did not use our provider"


def test_configure_beside_a_running_plain_session_says_what_to_do(tmp_path: Path) -> None:
    result = run_driver(sys.executable, "active", str(tmp_path), cwd=tmp_path)
    assert result["error"] == "ShimNotLoadableError"
    assert "spark.stop()" in result["message"] and "configure(" in result["message"]


def test_a_users_extension_and_listener_keep_working_beside_ours(tmp_path: Path) -> None:
    user_jar = bridge.jar_path(USER_PLUGINS, name="user-plugins")
    result = run_driver(sys.executable, "compose", str(tmp_path),
                        "--conf", f"spark.jars={user_jar}", cwd=tmp_path)
    assert result["got"] == [[k, 10] for k in range(3)]
    assert result["our_stores"] == 2
    assert result["their_extension_applied"] == 1
    assert result["jobs_seen_by_theirs"] > 0  # it still receives events
    assert result["listeners"].count("com.example.user.JobCounter") == 1
    assert result["listeners"].count("io.pyrocks.statestore.PyRocksLifecycleListener") == 1
    assert result["extensions"].split(",") == ["com.example.user.UserExtension",
                                               "io.pyrocks.statestore.PyRocksExtensions"]


def state_store_conf(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "state_store.cli", "conf", *args],
                          capture_output=True, text=True, env=clean_env())


def test_conf_prints_spark_defaults_lines_without_local_paths_but_the_jar() -> None:
    done = state_store_conf("snapshotInterval=20")
    assert done.returncode == 0, done.stderr
    lines = [line.split(None, 1) for line in done.stdout.splitlines()
             if line and not line.startswith("#")]
    assert dict(lines) == cluster_conf(snapshotInterval=20)
    assert PYTHON_EXEC_KEY not in dict(lines)
    local = dict(line.split(None, 1) for line in state_store_conf("--local").stdout.splitlines()
                 if line and not line.startswith("#"))
    assert local[PYTHON_EXEC_KEY] == sys.executable


def test_conf_names_a_bad_option() -> None:
    done = state_store_conf("snapshotIntervall=20")
    assert done.returncode == 2
    assert "snapshotIntervall" in done.stderr

"""Building Scala sources into a jar the way the shim is built: on first use, said aloud,
then from the cache in silence."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from state_store.driver import bridge, releases

REPO = Path(__file__).resolve().parent.parent


def test_a_build_says_what_it_does_and_the_cache_is_silent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PYROCKS_CACHE_DIR", str(tmp_path / "cache"))
    sources = tmp_path / "src"
    sources.mkdir()
    (sources / "Hello.scala").write_text("object Hello { def greeting: String = \"hi\" }\n")

    jar = bridge.jar_path(sources, name="hello")
    assert jar.is_file() and jar.parent == tmp_path / "cache" / "pyrocks-state-store"
    told = capfd.readouterr().err
    assert "state-store: compiling 1 Scala sources into" in told
    assert f"state-store: built {jar} in" in told

    assert bridge.jar_path(sources, name="hello") == jar
    assert capfd.readouterr().err == ""


def test_processes_that_ask_at_once_build_once(tmp_path: Path) -> None:
    """Executors (or test processes) starting together on one machine: one compiles, the
    others wait for its jar."""
    sources = tmp_path / "src"
    sources.mkdir()
    (sources / "Hello.scala").write_text("object Hello { def greeting: String = \"hi\" }\n")
    ask = ("from pathlib import Path; from state_store.driver import bridge; "
           f"print(bridge.jar_path(Path({str(sources)!r}), name='hello'))")
    env = {**os.environ, "PYROCKS_CACHE_DIR": str(tmp_path / "cache")}
    askers = [subprocess.Popen([sys.executable, "-c", ask], cwd=REPO, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
              for _ in range(3)]
    answers = [asker.communicate(timeout=600) for asker in askers]
    assert [asker.returncode for asker in askers] == [0, 0, 0], answers
    assert len({out.strip() for out, _ in answers}) == 1
    assert sum("state-store: compiling" in err for _, err in answers) == 1, answers


def test_a_failed_build_names_the_compiler_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYROCKS_CACHE_DIR", str(tmp_path / "cache"))
    sources = tmp_path / "src"
    sources.mkdir()
    (sources / "Broken.scala").write_text("object Broken { def x: Int = \"no\" }\n")
    with pytest.raises(bridge.ShimBuildError, match="Broken.scala.*type mismatch"):
        bridge.jar_path(sources, name="broken")
    assert not list((tmp_path / "cache").rglob("*.jar"))  # nothing partial is cached


@pytest.mark.parametrize(("version", "since"), [
    ("4.0.5", {"coordinator": "since-4.0", "fine-grained-replay": "since-4.0",
               "range-scan": "since-4.0", "transform-with-state": "since-4.0"}),
    ("4.1.4", {"coordinator": "since-4.1", "fine-grained-replay": "since-4.1",
               "range-scan": "since-4.0", "transform-with-state": "since-4.0"}),
    ("4.2.1", {"coordinator": "since-4.1", "fine-grained-replay": "since-4.1",
               "range-scan": "since-4.2", "transform-with-state": "since-4.2"}),
    ("4.3.0", {"coordinator": "since-4.1", "fine-grained-replay": "since-4.1",
               "range-scan": "since-4.2", "transform-with-state": "since-4.3"}),
])
def test_each_release_compiles_with_its_variant_of_each_concern(version: str,
                                                                since: dict[str, str]) -> None:
    chosen = bridge.compat_sources(version)
    assert {f.parent.parent.name: f.parent.name for f in chosen} == since
    assert len(chosen) == len(since)  # one file per concern


def test_the_matrix_knows_where_our_code_differs_from_the_main_release() -> None:
    """.ci/spark-matrix runs each concern's Spark-level tests where its variant differs."""
    assert bridge.concerns_unlike_main("4.0.5") == ["coordinator", "fine-grained-replay",
                                                    "range-scan", "transform-with-state"]
    assert bridge.concerns_unlike_main("4.1.4") == ["range-scan", "transform-with-state"]
    assert bridge.concerns_unlike_main("4.2.1") == ["transform-with-state"]
    assert bridge.concerns_unlike_main(releases.MAIN) == []
    assert bridge.concerns_to_test("4.0.5") == bridge.concerns_unlike_main("4.0.5")
    assert bridge.concerns_to_test("4.1.4") == []  # its variants are 4.0's
    assert bridge.concerns_to_test("4.2.1") == ["transform-with-state"]
    matrix = (REPO / ".ci" / "spark-matrix").read_text()
    assert all(f"*{concern}*)" in matrix for concern in bridge.concerns_unlike_main("4.0.5"))


@pytest.mark.parametrize("version", ["3.5.3", "4.4.0.dev1", "5.0.0", "dev"])
def test_an_unsupported_pyspark_is_named(version: str) -> None:
    with pytest.raises(bridge.ShimBuildError, match=rf"pyspark {version} is not supported: "
                                                    r"the shim builds for Spark 4\.0 to 4\.3"):
        bridge.compat_sources(version)


def test_one_table_of_releases_feeds_the_dependency_the_matrix_and_the_readme() -> None:
    """releases.py is the table; what cannot be generated from it is checked against it."""
    project = (REPO / "pyproject.toml").read_text()
    assert re.findall(r'"(pyspark[^"]*)"', project) == [releases.pyspark_requirement()]
    matrix = (REPO / ".ci" / "spark-matrix").read_text()
    assert "state_store.driver.releases" in matrix and "matrix()" in matrix
    readme = (REPO / "README.md").read_text()
    listed = re.findall(r"^\| (4\.\d) \|", readme, re.MULTILINE)
    assert listed == list(releases.RELEASES)
    assert releases.RELEASES[-1] == releases.MAIN and releases.MAIN not in releases.matrix()

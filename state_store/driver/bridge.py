"""Builds the Scala shim (`jvm-bridge/`) into a jar, cached by source hash and pyspark
version.

The sources ship inside the package as `state_store.jvm_bridge` (a wheel, an editable
install and a checkout find them the same way: `shim_dir`): `common/` for every Spark
release, plus, for each concern in `compat/` that Spark changed within 4.x, the variant of
the installed pyspark's release (`compat_sources`; the releases: releases.py). The
compiler is the one the pyspark wheel ships (`pyspark/jars/scala-compiler-*.jar`), run on
the JVM already needed for Spark, so building needs neither sbt nor Maven. The build is
automatic: `jar_path()` builds on first use and reuses the cached jar afterwards. Other
Scala sources (benchmark drivers, the shim's own test programs) build the same way, against
the pyspark jars plus any `classpath` entries (e.g. the shim jar), which join the hash.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.resources
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pyspark

from ..errors import StateStoreError
from . import releases


class ShimBuildError(StateStoreError):
    """The shim jar could not be built; the message carries the compiler's output."""


def pyspark_jars() -> Path:
    return Path(pyspark.__file__).resolve().parent / "jars"


def cache_dir() -> Path:
    base = os.environ.get("PYROCKS_CACHE_DIR") or os.environ.get("XDG_CACHE_HOME")
    return Path(base or Path.home() / ".cache") / "pyrocks-state-store"


def shim_dir() -> Path:
    """The shim's sources: the package data `state_store.jvm_bridge` (jvm-bridge/ of the
    project, mapped into the package by pyproject.toml)."""
    return Path(str(importlib.resources.files("state_store.jvm_bridge")))


def compat_variants(version: str = pyspark.__version__) -> list[Path]:
    """For each concern in `compat/` (a directory of `since-X.Y` variants, each written
    for the release where Spark changed it), the newest variant not newer than `version`."""
    release = _release(version)
    chosen = []
    for concern in sorted(p for p in (shim_dir() / "compat").iterdir() if p.is_dir()):
        variants = {_release(v.name.removeprefix("since-")): v for v in concern.glob("since-*")}
        chosen.append(variants[max(r for r in variants if r <= release)])
    return chosen


def compat_sources(version: str = pyspark.__version__) -> list[Path]:
    return [f for variant in compat_variants(version) for f in sources(variant)]


def concerns_unlike_main(version: str = pyspark.__version__) -> list[str]:
    """The compat concerns `version` compiles another variant of than the main release
    (releases.MAIN) does: where our code, not only Spark's classes, differs by release."""
    return [ours.parent.name for ours, main in
            zip(compat_variants(version), compat_variants(releases.MAIN), strict=True)
            if ours != main]


def concerns_to_test(version: str = pyspark.__version__) -> list[str]:
    """The concerns whose Spark-level tests .ci/spark-matrix runs on `version`: those unlike
    the main release's whose variant `version` is the first release to compile (a later
    release compiling the same variant adds no code to test)."""
    release = ".".join(map(str, _release(version)))
    first = {v.parent.name for v in compat_variants(version) if v.name == f"since-{release}"}
    return [c for c in concerns_unlike_main(version) if c in first]


def shim_sources() -> list[Path]:
    return [*sources(shim_dir() / "common"), *compat_sources()]


def _release(version: str) -> tuple[int, int]:
    """(major, minor) of a supported release (releases.py); anything else is named and
    refused."""
    release = releases.release_of(version)
    if release is None:
        raise ShimBuildError(
            f"pyspark {version} is not supported: the shim builds for Spark "
            f"{releases.described()} (Spark 4.x, Scala 2.13). Install one of those releases "
            f"of pyspark ({releases.pyspark_requirement()}).")
    return release


def sources(source_dir: Path) -> list[Path]:
    found = sorted(source_dir.rglob("*.scala"))
    if not found:
        raise ShimBuildError(
            f"no Scala sources under {source_dir}: nothing to build (for the shim: the "
            "package was installed without its package data; reinstall pyrocks-state-store)"
        )
    return found


def source_hash(files: list[Path], classpath: Sequence[Path] = ()) -> str:
    digest = hashlib.sha256(pyspark.__version__.encode())
    for f in files:
        digest.update(f.name.encode())
        digest.update(f.read_bytes())
    for entry in classpath:  # what the sources compile against is part of what they are
        digest.update(b"\0classpath\0" + str(entry).encode())
        for f in sorted(entry.rglob("*")) if entry.is_dir() else [entry]:
            if f.is_file():
                digest.update(f.read_bytes())
    return digest.hexdigest()[:16]


def jar_path(source_dir: Path | None = None, name: str = "pyrocks-shim",
             classpath: Sequence[Path] = ()) -> Path:
    """The jar of `source_dir` (the shim by default) for this pyspark, compiled against the
    pyspark jars and `classpath`, built if not cached."""
    files = shim_sources() if source_dir is None else sources(source_dir)
    target = cache_dir() / f"{name}-{pyspark.__version__}-{source_hash(files, classpath)}.jar"

    def compile_into(staged: Path) -> None:
        began = time.monotonic()
        build(files, staged, classpath)
        print(f"state-store: built {target} in {time.monotonic() - began:.0f} s",
              file=sys.stderr, flush=True)

    return made_once(target, compile_into)


def made_once(target: Path, make: Callable[[Path], None]) -> Path:
    """`target` (a file of the cache), made by `make(staged)` if missing. Processes that
    start together on one machine (executors, test processes) make it once: the others wait
    for the first and find it. `make` writes `staged`, a path beside it that is renamed into
    place, so no process ever sees a partial file; if `make` raises, nothing is left."""
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not target.exists():
                with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
                    staged = Path(tmp) / target.name
                    make(staged)
                    os.replace(staged, target)
    return target


def java_classpath(extra: Sequence[Path] = ()) -> str:
    """The pyspark jars, then `extra`: a `java -cp` value (the compiler's, and a test's)."""
    return os.pathsep.join([f"{pyspark_jars()}/*", *map(str, extra)])


def java_executable() -> str:
    java = shutil.which("java", path=_java_path())
    if java is None:
        raise ShimBuildError("no `java` found (JAVA_HOME or PATH): Java 17 is required")
    return java


def build(files: list[Path], target: Path, classpath: Sequence[Path] = ()) -> None:
    """Compiles `files` into the jar `target` (made_once's staged path)."""
    java = java_executable()
    # The first use on a machine compiles for up to a minute: say so, rather than sit silent.
    print(f"state-store: compiling {len(files)} Scala sources into {target.name} with the "
          f"compiler pyspark {pyspark.__version__} ships (once per version; up to a minute)...",
          file=sys.stderr, flush=True)
    # The compiler's JVM lives for one compile: it stops at the quick JIT (C1). C2 spends more
    # CPU compiling the compiler than it saves in so short a run (the shim: 42-51 s of CPU
    # and 22-27 s wall with C2, 20-25 s and 13-17 s without, on two cores), and the classes
    # it writes are the same byte for byte.
    cmd = [java, "-Xss8m", "-XX:TieredStopAtLevel=1", "-cp", java_classpath(classpath),
           "scala.tools.nsc.Main", "-usejavacp", "-nowarn", "-d", str(target),
           *map(str, files)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0 or not target.exists():
        raise ShimBuildError(
            f"compiling the shim failed (exit {done.returncode}):\n"
            f"{done.stdout[-4000:]}{done.stderr[-4000:]}"
        )


def _java_path() -> str | None:
    home = os.environ.get("JAVA_HOME")
    return f"{home}/bin{os.pathsep}{os.environ.get('PATH', '')}" if home else None

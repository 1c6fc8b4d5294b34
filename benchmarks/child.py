"""One benchmark run in a Python process, JVM and worker pool of its own.

A provider measured in a JVM another provider used first inherits its leftovers: loaded
state in the heap, maintenance threads still snapshotting it, a JIT already warm on the
query's code. In one shared JVM our aggregation batch at 200k keys read 1.09–1.42 of Spark
HDFS's where fresh JVMs give 0.90 (docs/benchmarks.md, "The issue's operations, in one
run"). So each run gets a fresh one, and its own process session: a run past its deadline
goes with its JVM and workers, since a JVM lost in garbage collection answers nothing, its
own timeout included. So does whatever of a run outlives its Python by `LEFTOVER_GRACE_S`:
a JVM still holding the run's output pipes would keep its answer from being read until the
deadline, and then lose it (a Spark RocksDB run's JVM once hung in its shutdown with its
state store maintenance threads waiting, Dec 7).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

# A JVM whose Python has exited ends within a second or two (its stdin closes).
LEFTOVER_GRACE_S = 30.0


def from_json(cls: type[T], fields: dict[str, Any]) -> T:
    """A run's configuration (a dataclass) back from the JSON of its spec, where its tuples
    became lists."""
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()})


def run_module_child(module: str, spec: dict[str, Any],
                     deadline_s: float) -> tuple[dict[str, Any] | None, str]:
    """Runs `python -m module --child <spec as JSON>`, whose last line of output is its
    result as a JSON object. Returns (that object, "") or (None, why there is none); the
    lines before it (progress) are echoed."""
    child = subprocess.Popen([sys.executable, "-m", module, "--child", json.dumps(spec)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    stdout, stderr, timed_out = _communicate(child, deadline_s)
    if timed_out:
        return None, f"no answer within {deadline_s:.0f} s (killed with its JVM)"
    lines = stdout.strip().splitlines()
    last = lines[-1] if lines else ""
    for line in lines[:-1]:
        print(line, flush=True)
    if child.returncode != 0 or not last.startswith("{"):
        return None, f"exit {child.returncode}: {stderr.strip()[-600:]}"
    return json.loads(last), ""


def _communicate(child: subprocess.Popen, deadline_s: float) -> tuple[str, str, bool]:
    """The child's whole output, once its pipes close: at its deadline, or `LEFTOVER_GRACE_S`
    after it exited, its session is killed first. (`communicate` reaps the child only after
    the pipes close, so until then its pid, the session's, cannot be reused.)"""
    started = time.monotonic()
    exited_at: float | None = None
    while True:
        try:
            stdout, stderr = child.communicate(timeout=1.0)
            return stdout, stderr, False
        except subprocess.TimeoutExpired:
            now = time.monotonic()
            if exited_at is None and os.waitid(
                    os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                exited_at = now
            late = now - started > deadline_s
            if late or (exited_at is not None and now - exited_at > LEFTOVER_GRACE_S):
                os.killpg(child.pid, signal.SIGKILL)
                stdout, stderr = child.communicate()
                return stdout, stderr, late


def answered(argv: Sequence[str] | None, run: Callable[[dict[str, Any]], dict[str, Any]]) -> bool:
    """The child's side of `run_module_child`: if `argv` (None: this process's) is `--child
    <spec as JSON>`, prints `run(spec)` as JSON, the last line of output, and answers True;
    otherwise False, and the module's own command line goes on."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] != ["--child"]:
        return False
    print(json.dumps(run(json.loads(args[1]))))
    return True

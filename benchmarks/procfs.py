"""What /proc says about the benchmark's processes: the JVM, its workers, their RSS and CPU."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

WORKER_MODULE = "state_store.runtime.worker"
TICK_SECONDS = 1 / os.sysconf("SC_CLK_TCK")  # /proc counts CPU time in these


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used so far (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) * TICK_SECONDS  # utime, stime


def thread_kind(name: str) -> str:
    """A thread's kind: its name with the digits that number it dropped ("GC Thread#3" and
    "GC Thread#7" are one kind)."""
    return name.rstrip("0123456789#- ").strip() or name


def thread_cpu_seconds(pid: int) -> dict[str, float]:
    """CPU seconds per thread kind of a process (its threads' names, digits dropped: a JVM's
    "Executor task launch worker", "C2 CompilerThread", "GC Thread#", ...)."""
    spent: dict[str, float] = {}
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return spent
    for task in tasks:
        try:
            name, fields = (task / "stat").read_text().split("(", 1)[1].rsplit(")", 1)
        except (OSError, ValueError):
            continue
        kind = thread_kind(name)
        values = fields.split()
        spent[kind] = spent.get(kind, 0.0) + (int(values[11]) + int(values[12])) * TICK_SECONDS
    return spent


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return found


def is_worker(pid: int) -> bool:
    try:
        return WORKER_MODULE.encode() in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False


def workers_of(jvm_pid: int) -> list[int]:
    return [p for p in children(jvm_pid) if is_worker(p)]


def descendants(pid: int) -> list[int]:
    """`pid`'s children, theirs, and so on: a driver JVM, its executors, their workers."""
    found, frontier = [], [pid]
    while frontier:
        frontier = [child for parent in frontier for child in children(parent)]
        found += frontier
    return found


@dataclass(frozen=True)
class ThreadRun:
    """A live thread: its process ("jvm" or "worker"), its name (`thread_kind`: digits
    dropped) and the nanoseconds it has run on a CPU (schedstat: finer than the 10 ms
    ticks of `stat`)."""

    process: str
    name: str
    run_ns: int

    @property
    def kind(self) -> str:
        """As reports name it: "jvm: C2 CompilerThread", "worker: rocksdb:high"."""
        return f"{self.process}: {self.name}"


def thread_run_ns(pids: list[int]) -> dict[tuple[int, str], ThreadRun]:
    """Each live thread of `pids`, keyed by pid and thread id."""
    threads = {}
    for pid in pids:
        process = "worker" if is_worker(pid) else "jvm"
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                name = thread_kind((task / "comm").read_text().strip())
                run_ns = int((task / "schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
            threads[(pid, task.name)] = ThreadRun(process, name, run_ns)
    return threads


def run_ms_by_kind(before: dict[tuple[int, str], ThreadRun],
                   after: dict[tuple[int, str], ThreadRun]) -> dict[str, float]:
    """CPU milliseconds per thread kind between two `thread_run_ns` samples, of the threads
    alive at the second (one that ended between them is not counted)."""
    spent: dict[str, float] = {}
    for key, thread in after.items():
        earlier = before[key].run_ns if key in before else 0
        spent[thread.kind] = spent.get(thread.kind, 0.0) + (thread.run_ns - earlier) / 1e6
    return spent


def thread_group(kind: str) -> str:
    """What a JVM thread of `kind` (`thread_kind`) works for: Spark's tasks, the JIT
    compilers, the garbage collector, the stream's driver thread (its planning and
    commits), or the rest."""
    if kind.startswith("Executor task"):
        return "tasks"
    if kind.startswith(("C1 CompilerThre", "C2 CompilerThre")):
        return "compiler"
    if kind.startswith(("GC Thread", "G1 ")):
        return "gc"
    if kind.startswith("stream exec"):
        return "driver"
    return "jvm other"


S = TypeVar("S", bound="Sampler")


class Sampler:
    """Calls `sample` on a thread of its own from entry to exit: at once, every `every_s`,
    and once more at the exit (so that a window up to the exit has a sample to end at)."""

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self: S) -> S:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        self.sample()
        while not self._stop.wait(self.every_s):
            self.sample()
        self.sample()

    def sample(self) -> None:
        raise NotImplementedError


class CpuTimeline(Sampler):
    """CPU seconds used so far by a JVM's thread groups (`thread_group`) and by its workers,
    sampled every `every_s` until stopped, each sample with its wall time: what a window of
    time (a batch) cost each, to within a sample at either end. A thread or worker that
    ends keeps its last reading in the sums, so they only grow."""

    def __init__(self, jvm_pid: int, every_s: float = 0.2) -> None:
        super().__init__(every_s)
        self.jvm_pid = jvm_pid
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._seen: dict[tuple[int, str], tuple[str, float]] = {}  # (pid, tid): last

    def sample(self) -> None:
        pids = [self.jvm_pid, *workers_of(self.jvm_pid)]
        for key, thread in thread_run_ns(pids).items():
            group = "workers" if thread.process == "worker" else thread_group(thread.name)
            self._seen[key] = (group, thread.run_ns / 1e9)
        spent: dict[str, float] = {"workers": 0.0}
        for group, seconds in self._seen.values():
            spent[group] = spent.get(group, 0.0) + seconds
        self.samples.append((time.time(), spent))

    def between(self, start: float, end: float) -> dict[str, float]:
        """CPU seconds each group used from wall time `start` to `end` (the samples nearest
        to each)."""
        if not self.samples:
            return {}
        first = min(self.samples, key=lambda s: abs(s[0] - start))[1]
        last = min(self.samples, key=lambda s: abs(s[0] - end))[1]
        return {group: last[group] - first.get(group, 0.0) for group in last}

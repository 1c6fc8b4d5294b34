"""What the Spark-level tests of this provider share: its conf and a look at its workers."""

from __future__ import annotations

import http.client
import os
import selectors
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from benchmarks.s3server import MotoServer
from harness import MAINTENANCE_INTERVAL, MAINTENANCE_INTERVAL_KEY, start_session  # noqa: F401 (shared)
from state_store.spark import spark_conf

WORKER_MODULE = "state_store.runtime.worker"
# Each object store on loopback, by name -> the session fixture (conftest.py) serving it
OBJECT_STORES = {"s3": "s3", "azure": "azurite", "gcs": "fake_gcs"}


def wait_until(condition: Callable[[], bool], timeout: float = 120.0) -> bool:
    """Polls `condition` until it holds or `timeout` passes: a hang guard, not a timing
    assumption (callers assert the result)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def failed_tasks(spark: Any, run_id: str) -> tuple[int, int]:
    """(jobs a query run ran, task attempts that failed in them), from Spark's status store:
    a streaming query runs its jobs in a job group named by its run id."""
    tracker = spark.sparkContext.statusTracker()
    jobs = tracker.getJobIdsForGroup(run_id)
    failed = 0
    for job_id in jobs:
        job = tracker.getJobInfo(job_id)
        for stage_id in job.stageIds if job else []:
            stage = tracker.getStageInfo(stage_id)
            failed += stage.numFailedTasks if stage else 0
    return len(jobs), failed


def readline_within(stream: Any, timeout: float = 120.0) -> bytes | str:
    """A line of a child's pipe, or AssertionError once `timeout` passes without one."""
    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        assert selector.select(timeout), f"no line within {timeout} s"
    return stream.readline()


def pyrocks_session(app: str, local_dir: Path, conf: dict[str, str] | None = None,
                    master: str = "local[2]", **options: object) -> Any:
    """A new SparkSession on our provider (the active one is stopped first): two shuffle
    partitions, no UI, the driver on loopback (no lookup of the host's name: local-cluster
    executors connect to it), `conf` on top, `options` as in `pyrocks_conf`."""
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(master).appName(app)
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false"))
    for key, value in {**pyrocks_conf(local_dir, **options), **(conf or {})}.items():
        builder = builder.config(key, value)
    return start_session(builder)


def pyrocks_conf(local_dir: Path, **options: object) -> dict[str, str]:
    """Our provider's Spark conf, with workers' sockets and working copies under `local_dir`."""
    local_dir.mkdir(parents=True, exist_ok=True)
    return spark_conf(localDir=str(local_dir), **options)


def wrapper_python(path: Path, *lines: str) -> Path:
    """A `pythonExec` at `path`: a shell script that runs `lines` and then becomes this
    interpreter with the same arguments, so the worker it starts is the real one."""
    path.write_text("\n".join(("#!/bin/sh", *lines, f'exec "{sys.executable}" "$@"', "")))
    path.chmod(0o755)
    return path


def worker_pids(local_dir: Path) -> list[int]:
    """Live worker processes whose sockets live under `local_dir` (read from /proc)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and WORKER_MODULE.encode() in argv and any(
            a.startswith(str(local_dir).encode()) for a in argv
        ):
            pids.append(int(entry.name))
    return pids


def worker_sockets(pids: list[int]) -> list[Path]:
    """The socket paths the given workers were started with (`--socket PATH`)."""
    sockets = []
    for pid in pids:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        sockets.append(Path(argv[argv.index("--socket") + 1]))
    return sockets


def leftover_files(local_dir: Path) -> list[str]:
    """Anything a pool left behind under `local_dir` (sockets, working copies, logs)."""
    return sorted(str(p.relative_to(local_dir)) for p in local_dir.rglob("*"))


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid:
                found.append(int(entry.name))
    return found


def java_children(pid: int = os.getpid()) -> list[int]:
    return [c for c in children_of(pid)
            if b"java" in Path(f"/proc/{c}/cmdline").read_bytes().split(b"\0")[0]]


class S3Endpoint(MotoServer):
    """A real S3 API on loopback: moto's server mode, as s3fs's own test suite uses."""

    bucket = "pyrocks-test"


# Which requests a relay holds back: (method, path with query, body) -> bool.
Held = Callable[[str, str, bytes], bool]


class HttpRelay:
    """A loopback proxy in front of an object-store server that records every request
    (method, path, headers) and may drop headers or query parameters on the way: with
    `drop=("if-none-match",)` it is an S3 or Azure endpoint that accepts conditional writes
    and ignores them, as some do; with `drop_query=("ifGenerationMatch",)` a GCS one."""

    def __init__(self, upstream: Any, drop: tuple[str, ...] = (),
                 drop_query: tuple[str, ...] = ()) -> None:
        target = ("127.0.0.1", upstream.port)
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self._hold: tuple[Held, Held, float] | None = None
        self._arrived = threading.Event()
        self.held_too_long = False
        dropped = {"host", *drop}
        log = self.requests
        relay = self

        class Forward(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _relay(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                # A URL naming the service (Azure's copy source) names it as the service
                # knows itself, not as the client reached it.
                headers = {k: v.replace(relay.endpoint, upstream.endpoint)
                           for k, v in self.headers.items() if k.lower() not in dropped}
                path = _without_query(self.path, drop_query)
                log.append((self.command, path, {k.lower(): v for k, v in headers.items()}))
                relay._wait_if_held(self.command, path, body or b"")
                conn = http.client.HTTPConnection(*target, timeout=30)
                conn.request(self.command, path, body=body, headers=headers)
                answer = conn.getresponse()
                data = answer.read()
                self.send_response(answer.status, answer.reason)
                head = self.command == "HEAD"  # its Content-Length is the object's size
                for key, value in answer.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection") and (
                            head or key.lower() != "content-length"):
                        self.send_header(key, value)
                if not head:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Forward)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.options = upstream.options_at(self.endpoint)

    def hold(self, held: Held, until: Held, timeout: float = 30.0) -> None:
        """From now on a request `held` matches (method, path with query, body) waits before
        it is forwarded until one `until` matches has arrived. Requests made one after the
        other would wait for ever: after `timeout` (shorter than the clients' read timeouts,
        so none retries) the request goes on, `held_too_long` says so, and the hold ends."""
        self._arrived.clear()
        self._hold = (held, until, timeout)

    def _wait_if_held(self, method: str, path: str, body: bytes) -> None:
        if self._hold is None:
            return
        held, until, timeout = self._hold
        if until(method, path, body):
            self._arrived.set()
        if held(method, path, body) and not self._arrived.wait(timeout):
            self.held_too_long = True
            self._hold = None

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def condition_ignoring_endpoint(upstream: Any) -> HttpRelay:
    """A proxy in front of `upstream` that drops its service's create-if-absent condition."""
    if getattr(upstream, "name", "") == "fake-gcs-server":
        return HttpRelay(upstream, drop_query=("ifGenerationMatch",))
    return HttpRelay(upstream, drop=("if-none-match",))


def _without_query(path: str, names: tuple[str, ...]) -> str:
    if not names or "?" not in path:
        return path
    base, _, query = path.partition("?")
    kept = [p for p in query.split("&") if p.split("=", 1)[0] not in names]
    return f"{base}?{'&'.join(kept)}" if kept else base

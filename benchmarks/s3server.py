"""An S3 API on loopback for benchmarks and tests: moto's server mode in a subprocess on a
free port.

    with MotoServer() as s3:
        s3.url("state")            # s3://pyrocks-bench/state
        s3.options                 # s3fs options: endpoint, dummy credentials

Everything moto stores lives in that process (memory, and temporary files for large
objects); stopping it drops it all. Its copies are "server-side" in the sense S3's are: no
byte passes through the client, but moto on this machine shares the CPUs with the client.
"""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from types import TracebackType
from typing import Any

import fsspec


class MotoServer:
    bucket = "pyrocks-bench"

    def __init__(self, start_timeout_s: float = 30.0) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port: int = probe.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(["moto_server", "-H", "127.0.0.1", "-p", str(self.port)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + start_timeout_s
        while True:
            try:
                urllib.request.urlopen(self.endpoint, timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"moto_server did not start on {self.endpoint}") from None
                time.sleep(0.2)
        self.options: dict[str, Any] = {"endpoint_url": self.endpoint, "key": "bench",
                                        "secret": "bench"}
        self.filesystem().mkdir(self.bucket)

    def url(self, name: str) -> str:
        return f"s3://{self.bucket}/{name}"

    def filesystem(self) -> Any:
        """A fresh s3fs instance (its own listing cache) on this endpoint."""
        return fsspec.filesystem("s3", skip_instance_cache=True, **self.options)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def __enter__(self) -> MotoServer:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()

"""An S3 API on loopback for benchmarks and tests: moto's server mode in a subprocess on a
free port (the other object stores are in `emulators.py`).

    with MotoServer() as s3:
        s3.url("state")            # s3://pyrocks-bench/state
        s3.options                 # s3fs options: endpoint, dummy credentials
        s3.hadoop_url("state")     # s3a://pyrocks-bench/state
        s3.hadoop                  # the same, as Spark's Hadoop (S3A) settings

Everything moto stores lives in that process (memory, and temporary files for large
objects); stopping it drops it all. Its copies are "server-side" in the sense S3's are: no
byte passes through the client, but moto on this machine shares the CPUs with the client.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import fsspec

from benchmarks.emulators import LoopbackServer


class MotoServer(LoopbackServer):
    bucket = "pyrocks-bench"
    name = "moto_server"

    def __init__(self, start_timeout_s: float = 30.0) -> None:
        super().__init__(start_timeout_s)
        self.options: dict[str, Any] = {"endpoint_url": self.endpoint, "key": "bench",
                                        "secret": "bench"}
        self.filesystem().mkdir(self.bucket)

    def command(self) -> list[str]:
        return [sys.executable, "-m", "benchmarks.s3server", "-H", "127.0.0.1",
                "-p", str(self.port)]

    def options_at(self, endpoint: str) -> dict[str, Any]:
        """The options that reach this server through `endpoint` (a proxy in front of it)."""
        return {**self.options, "endpoint_url": endpoint}

    def url(self, name: str) -> str:
        return f"s3://{self.bucket}/{name}"

    def hadoop_url(self, name: str) -> str:
        return f"s3a://{self.bucket}/{name}"

    @property
    def hadoop(self) -> dict[str, str]:
        return {"fs.s3a.endpoint": self.endpoint, "fs.s3a.access.key": "bench",
                "fs.s3a.secret.key": "bench", "fs.s3a.path.style.access": "true"}

    def filesystem(self) -> Any:
        """A fresh s3fs instance (its own listing cache) on this endpoint."""
        return fsspec.filesystem("s3", skip_instance_cache=True, **self.options)


def serve_atomically(argv: list[str]) -> None:
    """moto's server, each object request handled under one lock. moto checks a conditional
    create (`If-None-Match: *`) and then stores the object, on a server thread per request
    with no lock between the two: two creates of one key racing each other can both
    succeed, which S3 never lets happen (a test of processes racing to create one result
    saw it). Under the lock each check and its store are one step, as on S3."""
    from moto.s3.responses import S3Response
    from moto.server import main

    lock = threading.Lock()
    handle = S3Response.key_response

    def key_response(self: S3Response, *args: Any, **kwargs: Any) -> Any:
        with lock:
            return handle(self, *args, **kwargs)

    S3Response.key_response = key_response  # type: ignore[method-assign]
    main(argv)


if __name__ == "__main__":
    serve_atomically(sys.argv[1:])

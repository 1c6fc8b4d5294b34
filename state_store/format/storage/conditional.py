"""Durable roots on object stores with a native conditional create.

Publish is fsspec's `pipe_file(..., mode="create")`, which the filesystem must carry out
as one atomic put-if-absent (S3's `If-None-Match: *`, Azure's `If-None-Match: *`, GCS's
`ifGenerationMatch=0`): a single request, so a crash never leaves a torn record and two
writers never both win.

`ConditionalPutStorage` trusts a filesystem that declares `atomic_create = True`.
`ProbedEndpointStorage` is for services reached at an endpoint that may accept the
condition and ignore it (some S3-compatible servers, emulators, proxies): before its first
publish the endpoint is probed (create a probe object twice; the second must be refused),
once per endpoint per `ConditionProbes` owner, and a root on an endpoint that ignores the
condition never publishes.
"""

from __future__ import annotations

import uuid

from ...errors import CorruptFileError, UnsupportedStorageError
from .base import Storage, Written

_PROBE_DIR = "_pyrocks_probe"


class ConditionalPutStorage(Storage):
    kind = "conditional-put"

    def publish(self, rel: str, data: bytes) -> bool:
        path = self.path(rel)
        try:
            self.retry(f"publishing {path}", lambda: self._create(path, data))
            return True
        except FileExistsError:
            # A retried put whose first attempt landed also reports "exists": it is ours if
            # the bytes are ours (every record names UUID files, so no two attempts match).
            return self.fs.cat_file(path) == data

    def _create(self, path: str, data: bytes) -> None:
        """One request that creates `path`, or raises FileExistsError if it exists."""
        self.fs.pipe_file(path, data, mode="create")


class ProbedEndpointStorage(ConditionalPutStorage):
    """A conditional-put root whose endpoint is probed before anything is published."""

    service = ""  # as users name it, e.g. "S3"
    condition = ""  # the header or parameter of its conditional create
    honest = ""  # where the condition is known to hold, for the refusal's advice

    def endpoint_url(self) -> str:
        """The endpoint this root talks to (the service's own when none is configured)."""
        raise NotImplementedError

    def endpoint(self) -> str:
        """The unit a probe's answer holds for."""
        return f"{self.kind} {self.endpoint_url()}"

    def ignores_condition(self, probe_path: str) -> str:
        """The refusal for a root whose endpoint let a second create of `probe_path` win."""
        return (f"the {self.service} endpoint {self.endpoint_url()} ignores conditional writes "
                f"({self.condition}): a second create of {probe_path} succeeded. Versions "
                f"under {self.url} could not be published atomically; use {self.honest} or "
                "a local path.")

    def publish(self, rel: str, data: bytes) -> bool:
        self.verify_publish()
        return super().publish(rel, data)

    def verify_publish(self) -> None:
        """Fails unless this root's endpoint refuses a second create of the same object."""
        self.probes.ensure(self.endpoint(), self._probe)

    def _probe(self) -> None:
        probe = self.path(f"{_PROBE_DIR}/{uuid.uuid4().hex}")
        self.retry(f"probing {probe}", lambda: self._create(probe, b"1"))
        try:
            self._create(probe, b"2")
            honoured = False
        except FileExistsError:
            honoured = True
        finally:
            self.delete(probe[len(self.root) + 1:])
        if not honoured:
            raise UnsupportedStorageError(self.ignores_condition(probe))

    def duplicate_verified(self, src_rel: str, dst_rel: str, source: Storage,
                           expected: Written, what: str) -> None:
        """A server-side copy judged by what the service reports of it (`_copy_reported`),
        with no byte through this process; a copy the service cannot vouch for is read
        back. A copy that fails is removed and the error names the source file."""
        if not self.same_filesystem(source):
            return super().duplicate_verified(src_rel, dst_rel, source, expected, what)
        src, dst = source.path(src_rel), self.path(dst_rel)
        found = self.retry(f"copying {src} to {dst}", lambda: self._copy_reported(src, dst))
        if found is None:
            return self.verify(dst_rel, expected, what)  # not written by us: read it
        if found != expected:
            self.delete(dst_rel)
            raise CorruptFileError(f"{what}: file {src} is corrupt ({found.size} bytes, "
                                   f"{found.checksum}; expected {expected.size} bytes, "
                                   f"{expected.checksum})")
        return None

    def _copy_reported(self, src: str, dst: str) -> Written | None:
        """Copies on the server; the size and checksum the service vouches for of the
        copy, or None where it cannot (a file some other tool wrote)."""
        raise NotImplementedError

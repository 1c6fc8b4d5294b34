"""A real filesystem that dies on cue: the crash-injection substrate for durability tests.

`FaultyFileSystem` stores files on local disk like fsspec's LocalFileSystem, but it is not
one (so storage takes its conditional-put path, the one S3 takes) and every mutating call counts
down a fuse. When the fuse reaches zero the call raises `SimulatedCrash` before doing
anything: the process "died" at exactly that point, and whatever it wrote before stays.
An optional gate blocks writes until released, to observe work in flight.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable
from typing import Any

from fsspec import AbstractFileSystem, register_implementation
from fsspec.implementations.local import LocalFileSystem

PROTOCOL = "faulty"


class SimulatedCrash(BaseException):
    """Not an Exception: code under test must not be able to swallow a process death."""


class Fuse:
    def __init__(self) -> None:
        self.remaining: int | None = None
        self.when: Callable[[str], bool] | None = None  # crash at the first such mutation
        self.refuse: Callable[[str], bool] | None = None  # fail the first such mutation
        self.fired: list[str] = []  # the mutations a crash struck, in order
        self.transient = 0  # the next N mutations fail with a retryable network error
        self.mutations = 0
        self.gate = threading.Event()
        self.gate.set()
        self._lock = threading.Lock()

    def arm(self, after: int) -> None:
        self.remaining = after

    def arm_when(self, matches: Callable[[str], bool]) -> None:
        """Crash at the first mutation whose description (e.g. 'delete /x/snapshots/..')
        `matches`."""
        self.when = matches

    def refuse_when(self, matches: Callable[[str], bool]) -> None:
        """Fail the first mutation whose description `matches` with an error storage does
        not retry (the process lives on: a failed upload, not a death)."""
        self.refuse = matches

    def disarm(self) -> None:
        self.remaining = None
        self.when = None
        self.refuse = None
        self.transient = 0

    def tick(self, what: str) -> None:
        self.gate.wait()
        with self._lock:
            self.mutations += 1
            if self.transient > 0:
                self.transient -= 1
                raise ConnectionResetError(f"simulated transient failure: {what}")
            if self.refuse is not None and self.refuse(what):
                self.refuse = None
                raise PermissionError(f"simulated refusal: {what}")
            if self.when is not None and self.when(what):
                self.when = None
                self._fire(what)
            if self.remaining is None:
                return
            if self.remaining == 0:
                self.remaining = None
                self._fire(what)
            self.remaining -= 1

    def _fire(self, what: str) -> None:
        self.fired.append(what)
        raise SimulatedCrash(what)


FUSE = Fuse()


def dies_during(crash_at: int | None, action: Callable[[], object]) -> bool:
    """Runs `action` with the fuse armed at `crash_at` (None: no crash); True if the
    'process' died during it."""
    if crash_at is not None:
        FUSE.arm(crash_at)
    try:
        action()
        return False
    except SimulatedCrash:
        return True
    finally:
        FUSE.disarm()


class FaultyFileSystem(AbstractFileSystem):
    protocol = PROTOCOL
    # Its create (`open(path, "xb")` after a crash check) is atomic: storage accepts it.
    atomic_create = True
    root_marker = "/"
    cachable = False

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.local = LocalFileSystem()

    @classmethod
    def _strip_protocol(cls, path: str) -> str:
        path = path[len(PROTOCOL) + 3:] if path.startswith(PROTOCOL + "://") else path
        return "/" + path.lstrip("/")

    # ---- reads delegate unchanged --------------------------------------------------------

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        return self.local.ls(path, detail=detail)

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        return self.local.info(path)

    def cat_file(self, path: str, start: int | None = None, end: int | None = None,
                 **kwargs: Any) -> bytes:
        return self.local.cat_file(path, start=start, end=end)

    # ---- every mutation passes the fuse first ----------------------------------------------

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        if "r" not in mode:
            FUSE.tick(f"open {path} {mode}")
            os.makedirs(os.path.dirname(path), exist_ok=True)
        return open(path, mode)  # noqa: SIM115 - the caller closes it

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        FUSE.tick(f"write {path}")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "xb" if mode == "create" else "wb") as f:
            f.write(value)

    def put_file(self, lpath: str, rpath: str, **kwargs: Any) -> None:
        FUSE.tick(f"upload {rpath}")
        os.makedirs(os.path.dirname(rpath), exist_ok=True)
        shutil.copyfile(lpath, rpath)

    def cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        FUSE.tick(f"copy {path1} {path2}")
        shutil.copyfile(path1, path2)

    def rm_file(self, path: str) -> None:
        FUSE.tick(f"delete {path}")
        os.remove(path)

    def rm(self, path: str, recursive: bool = False, maxdepth: int | None = None) -> None:
        if os.path.isdir(path):
            for name in sorted(os.listdir(path)):
                self.rm(os.path.join(path, name), recursive=recursive)
            os.rmdir(path)
        else:
            self.rm_file(path)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        os.makedirs(path, exist_ok=exist_ok)


register_implementation(PROTOCOL, FaultyFileSystem, clobber=True)

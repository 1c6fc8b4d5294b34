"""Progress of long copies: a bar on a terminal, nothing otherwise (or under `--json`)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

_REDRAW_S = 0.2


class Progress:
    def __init__(self, label: str, total_bytes: int, total_files: int,
                 out: TextIO | None = None) -> None:
        self.label = label
        self.total_bytes = max(total_bytes, 1)
        self.total_files = total_files
        self.out = out  # None: quiet
        self.bytes = 0
        self.files = 0
        self._drawn = 0.0

    @staticmethod
    def for_terminal(label: str, total_bytes: int, total_files: int,
                     quiet: bool = False) -> Progress:
        shown = not quiet and sys.stderr.isatty()
        return Progress(label, total_bytes, total_files, sys.stderr if shown else None)

    def advance(self, nbytes: int) -> None:
        self.bytes += nbytes
        self.files += 1
        now = time.monotonic()
        if self.out is not None and (now - self._drawn >= _REDRAW_S
                                     or self.files == self.total_files):
            self._drawn = now
            self._draw()

    def _draw(self) -> None:
        assert self.out is not None
        done = min(self.bytes / self.total_bytes, 1.0)
        bar = "#" * int(done * 30)
        self.out.write(f"\r{self.label} [{bar:<30}] {done:6.1%}  {self.files}/"
                       f"{self.total_files} files  {self.bytes / 2**20:,.1f} MiB")
        self.out.flush()

    def close(self) -> None:
        if self.out is not None:
            self._draw()
            self.out.write("\n")
            self.out.flush()

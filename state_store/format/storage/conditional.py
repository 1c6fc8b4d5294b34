"""A durable root on an object store with a native conditional create.

Publish is fsspec's `pipe_file(..., mode="create")`, which the filesystem must carry out
as one atomic put-if-absent (S3's `If-None-Match: *`): a single request, so a crash never
leaves a torn record and two writers never both win. Filesystems qualify by being S3
(`s3.py`, which also checks the endpoint) or by declaring `atomic_create = True`.
"""

from __future__ import annotations

from .base import Storage


class ConditionalPutStorage(Storage):
    kind = "conditional-put"

    def publish(self, rel: str, data: bytes) -> bool:
        path = self.path(rel)
        try:
            self.retry(f"publishing {path}", lambda: self.fs.pipe_file(path, data, mode="create"))
            return True
        except FileExistsError:
            # A retried put whose first attempt landed also reports "exists": it is ours if
            # the bytes are ours (every record names UUID files, so no two attempts match).
            return self.fs.cat_file(path) == data

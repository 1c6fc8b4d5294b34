"""Writing what a savepoint or a restore produces: a new savepoint directory, or a new
checkpoint. Native and canonical savepoints and restores share these steps.

A savepoint directory is usable once its descriptor is published (put-if-absent, last of
all); a restored checkpoint once the file its restore writes last exists (`metadata` for a
native restore, the commit of batch N + 1 for a canonical one). Until then, a rerun of the
same restore resumes it (`begin_restore`), and nothing else uses it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from ..errors import StateStoreError
from ..format.restores import RESTORE_RECORD, RestoreRecord
from ..format.storage import Storage, absolute_url, open_storage
from ..tools.progress import Progress
from .layout import CHECKPOINT_DIR, DESCRIPTOR, SavedFile, SavepointDescriptor, SavepointInfo


class SavepointError(StateStoreError):
    """A savepoint could not be written; the source is untouched."""


class RestoreError(StateStoreError):
    """A restore was refused or could not complete; the error says whether to rerun it."""


# ---- savepoint directories ---------------------------------------------------------------

def open_savepoint_target(target: str, options: dict | None) -> Storage:
    """The new savepoint directory: it must not exist or be empty, and must publish
    atomically (its descriptor is published put-if-absent)."""
    out = open_storage(absolute_url(target), options)
    if out.read_if_exists(DESCRIPTOR) is not None:
        raise SavepointError(f"{out.url} already holds a savepoint; savepoints are never "
                             "overwritten: choose another target")
    if out.list_names("") or out.list_dirs(""):
        raise SavepointError(f"{out.url} is not empty; a savepoint needs a new directory")
    out.verify_publish()
    return out


def copy_spark_files(read: Callable[[str], bytes], spark_files: list[str], out: Storage,
                     progress: Progress | None = None) -> list[SavedFile]:
    """Copies Spark's files of the batch (`read` gives each one's bytes, verified where
    the source recorded them) into the savepoint's checkpoint/ directory."""
    saved = []
    for rel in spark_files:
        path = f"{CHECKPOINT_DIR}/{rel}"
        written = out.write_new(path, read(rel))
        saved.append(SavedFile(path, written.size, written.checksum))
        if progress is not None:
            progress.advance(written.size)
    return saved


def publish_descriptor(out: Storage, descriptor: SavepointDescriptor) -> SavepointInfo:
    """Makes the savepoint usable: its descriptor, put-if-absent, last of all."""
    if not out.publish(DESCRIPTOR, descriptor.to_json()):
        raise SavepointError(f"{out.url} received another savepoint at the same time; "
                             "this one was not published")
    return SavepointInfo.of(out.url, descriptor)


# ---- restored checkpoints ----------------------------------------------------------------

def interrupted_restore(out: Storage, source: str, batch: int, mode: str,
                        written_last: str) -> RestoreRecord | None:
    """The record of an interrupted run of the same restore (same source, batch and mode)
    into `out`, which this run completes; None for an empty directory. Reads only. A
    directory holding anything else, or a complete restore (its `written_last` file
    exists), is refused."""
    if out.read_if_exists(written_last) is not None:
        raise RestoreError(f"{out.url} is already a checkpoint (it has {written_last}); "
                           "restore into a new directory")
    data = out.read_if_exists(RESTORE_RECORD)
    if data is None:
        if out.list_names("") or out.list_dirs(""):
            raise RestoreError(f"{out.url} is not empty; restore into a new directory")
        return None
    earlier = RestoreRecord.from_json(data, f"{out.url}/{RESTORE_RECORD}")
    if (earlier.source, earlier.batch, earlier.mode) != (source, batch, mode):
        raise RestoreError(
            f"{out.url} holds an interrupted restore of {earlier.source} batch "
            f"{earlier.batch} ({earlier.mode}); rerun that restore, or delete {out.url}")
    return earlier


def start_restore(out: Storage, source: str, batch: int, mode: str) -> RestoreRecord:
    """A new restore's record, its first write (put-if-absent: one restore per directory)."""
    record = RestoreRecord(str(uuid.uuid4()), source, batch, mode)
    if not out.publish(RESTORE_RECORD, record.to_json()):
        raise RestoreError(f"another restore into {out.url} started at the same time")
    return record


def put(out: Storage, rel: str, data: bytes) -> None:
    """Writes a file of the new checkpoint; a rerun finds its earlier copy in place."""
    existing = out.read_if_exists(rel)
    if existing == data:
        return
    if existing is not None:
        raise RestoreError(f"{out.url}/{rel} exists with other content; delete {out.url} and "
                           "restore again")
    out.write_new(rel, data)

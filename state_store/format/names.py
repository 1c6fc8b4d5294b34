"""Which names a durable record may hold: every name and URL read from a record is checked
here, where the record is parsed, before anything is read, written or deleted because of it.

Records are untrusted input: a manifest, a snapshot descriptor, a seed, a restore record, a
claim marker or a savepoint descriptor may have been damaged, edited by hand or crafted. A
name in them is only ever joined below a root this process chose (a store root, a
savepoint directory, a checkpoint), so it must not be able to leave that root:

  file name      one path segment of letters, digits and `._-`, not `.` or `..`
                 (a data file under `files/`, the local name RocksDB gives a file)
  relative path  one or more such segments joined by `/` (also `=` and `+`, which Spark's
                 and Parquet's file names use): no `..`, no empty segment, no absolute
                 path, no scheme
  root URL       an absolute local path or a `scheme://` URL, with no `.` or `..` segment
                 (a source a restore recorded); whether a store may use it is decided by the
                 store (`checkpoint.StoreRoot.trusted_roots`)

A bad name raises `CorruptFileError` naming the record, the field and the value.
"""

from __future__ import annotations

import re

from ..errors import CorruptFileError

_SEGMENT = re.compile(r"[A-Za-z0-9._=+-]+")
_FILE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*://")


def _refuse(where: str, field: str, value: object, why: str) -> CorruptFileError:
    return CorruptFileError(f"{where}: field {field} holds {value!r}, which is {why}; "
                            "nothing was read, written or deleted because of it")


def file_name(value: object, where: str, field: str) -> str:
    """A single path segment naming a file inside a directory we chose."""
    if not isinstance(value, str) or not _FILE_NAME.fullmatch(value) or value in (".", ".."):
        raise _refuse(where, field, value, "not a plain file name (letters, digits, '._-'; "
                      "no '/', no '..')")
    return value


def relative_path(value: object, where: str, field: str) -> str:
    """Segments below a root we chose: no `..`, no empty segment, no absolute path or URL."""
    if not isinstance(value, str) or not value:
        raise _refuse(where, field, value, "not a relative path")
    for segment in value.split("/"):
        if segment in ("", ".", "..") or not _SEGMENT.fullmatch(segment):
            raise _refuse(where, field, value, "not a plain relative path inside its root "
                          "(a segment is empty, '.', '..', or has characters other than "
                          "letters, digits and '._=+-')")
    return value


def root_url(value: object, where: str, field: str) -> str:
    """An absolute path or a `scheme://` URL without `.` or `..` segments."""
    if not isinstance(value, str) or not value:
        raise _refuse(where, field, value, "not a URL")
    match = _SCHEME.match(value)
    path = value[match.end():] if match else value
    if not match and not value.startswith("/"):
        raise _refuse(where, field, value, "neither an absolute path nor a scheme:// URL")
    if any(segment in (".", "..") for segment in path.split("/")) or "\\" in value \
            or "\x00" in value:
        raise _refuse(where, field, value, "a URL with '.' or '..' segments")
    return value.rstrip("/") or value


def is_within(url: str, root: str) -> bool:
    """Whether `url` is `root` or below it (both already checked by `root_url`)."""
    root = root.rstrip("/")
    return url == root or url.startswith(root + "/")

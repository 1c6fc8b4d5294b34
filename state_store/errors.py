"""Errors raised by the state store. Each names what failed: the store, the version, the file."""


class StateStoreError(Exception):
    """Base class: anything the shim must report to Spark as a failed task."""


class OptionError(StateStoreError, ValueError):
    """A `spark.sql.streaming.stateStore.pyrocks.*` option is unknown or has a bad value."""


class VersionNotFoundError(StateStoreError):
    """The requested version was never committed, or fell out of retention."""


class CorruptFileError(StateStoreError):
    """A durable file is missing, truncated or fails its checksum."""


class ForeignCheckpointError(StateStoreError):
    """The store directory holds state written by another state store provider."""


class ProtocolError(StateStoreError):
    """The shim sent a frame the worker cannot parse."""


class UnsupportedStorageError(StateStoreError):
    """The durable root is on a filesystem that cannot publish a file atomically."""


class ClaimedCheckpointError(StateStoreError):
    """The checkpoint's state was claimed by a restored query: running it would delete
    files that query owns now."""


class StorageError(StateStoreError):
    """A storage operation kept failing after its retries."""


# OS errors that are answers, not accidents: retrying cannot change them.
_ANSWERS = (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError,
            PermissionError)


def is_transient(e: BaseException) -> bool:
    """Whether retrying may succeed where `e` failed: a network or I/O failure, or a
    storage operation that ran out of its own retries. A damaged or missing file, a bad
    record or option, a refusal, a programming error: retrying changes nothing."""
    if isinstance(e, StorageError):
        return True
    return isinstance(e, OSError) and not isinstance(e, _ANSWERS)

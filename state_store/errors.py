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

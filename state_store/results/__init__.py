"""The query result store: FLIP-194's JobResultStore in Spark terms.

    from state_store.results import FileSystemResultStore, run_once

- `record.py`: a run's result and its entry file (contract format).
- `store.py`: `FileSystemResultStore`, the entries on fsspec (contract).
- `cleanup.py`: what cleaning up after a run means; retries with backoff.
- `recorder.py`: the process the driver starts when a run ends (and to resume).
- `settings.py`: a session's result store configuration.
- `once.py`: `run_once`, never run a run key twice (contract).
"""

from .cleanup import Backoff, CleanupFailed
from .once import run_once
from .record import QueryResult, ResultStoreError
from .store import Entry, FileSystemResultStore, RunAlreadyRecordedError, UnknownRunError

__all__ = [
    "Backoff",
    "CleanupFailed",
    "Entry",
    "FileSystemResultStore",
    "QueryResult",
    "ResultStoreError",
    "RunAlreadyRecordedError",
    "UnknownRunError",
    "run_once",
]

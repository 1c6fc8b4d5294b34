"""The query result store (FLIP-194 in Spark terms; DESIGN.md section 10).

    from state_store.results import FileSystemResultStore, run_once

- `record.py`: a run's result and its entry file (contract format).
- `store.py`: `FileSystemResultStore`, the entries on fsspec (contract).
- `cleanup.py`: what cleaning up after a run means; retries with backoff.
- `recorder.py`: the process the driver starts when a run ends (and to resume).
- `settings.py`: a session's result store configuration.
- `run_once.py`: never run a run key twice (contract).
"""

from .cleanup import Backoff, CleanupFailed
from .record import QueryResult, ResultStoreError
from .run_once import run_once
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

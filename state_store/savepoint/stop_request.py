"""Stop-with-savepoint of a query running in another application (`state-store stop`).

The request travels through the query's checkpoint, the one place both sides can reach:
this side publishes `_pyrocks_stop_request` (create-if-absent: one request at a time), the
driver running the query sees it at the query's next progress or idle event, stops the
query at that batch boundary and publishes `_pyrocks_stop_answer` with the last committed
batch (StopRequests.scala), and this side then writes the savepoint of that batch. Both
records are removed at the end, whatever happened. The answer is parsed as untrusted input
and must repeat the request's id.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from ..errors import StateStoreError
from ..format.storage import Storage, open_storage
from .api import savepoint
from .layout import SavepointInfo
from .target import SavepointError

REQUEST = "_pyrocks_stop_request"
ANSWER = "_pyrocks_stop_answer"
_POLL_S = 0.2


class StopTimeoutError(StateStoreError):
    """No running query answered the stop request in time; nothing was stopped."""


@dataclass(frozen=True)
class StopRequest:
    id: str
    drain: bool
    requested_at: float


@dataclass(frozen=True)
class StopAnswer:
    id: str
    query_id: str
    run_id: str
    last_committed_batch: int | None
    error: str | None

    @staticmethod
    def from_json(data: bytes) -> StopAnswer | None:
        """The answer; None while it is not a whole, valid one (it is read until it is)."""
        try:
            raw = json.loads(data)
            batch, error = raw["last_committed_batch"], raw.get("error")
            if batch is not None and (type(batch) is not int or batch < 0):
                return None
            return StopAnswer(str(raw["id"]), str(raw["query_id"]), str(raw["run_id"]), batch,
                              None if error is None else str(error)[:2000])
        except (ValueError, KeyError, TypeError):
            return None


def stop_with_savepoint_remote(checkpoint: str, target: str, *, drain: bool = False,
                               timeout_s: float = 300.0, storage_options: dict | None = None,
                               **savepoint_options: Any) -> SavepointInfo:
    """Asks the query running on `checkpoint` to stop at a batch boundary, waits (up to
    `timeout_s`) until it has, then writes the savepoint of its last committed batch."""
    where = open_storage(checkpoint, storage_options)
    if where.read_if_exists("metadata") is None:
        raise SavepointError(f"{checkpoint} is not a streaming query's checkpoint (no "
                             "metadata file)")
    request = StopRequest(uuid.uuid4().hex, drain, time.time())
    if not where.publish(REQUEST, json.dumps(asdict(request)).encode()):
        pending = where.read_if_exists(REQUEST) or b""
        raise SavepointError(
            f"a stop request is already pending in {checkpoint}: {pending[:200]!r}; if no "
            f"`state-store stop` is waiting on it, delete {where.path(REQUEST)}")
    try:
        answer = _await_answer(where, request, checkpoint, timeout_s)
    finally:
        where.delete(REQUEST)
    where.delete(ANSWER)
    if answer.error is not None:
        raise SavepointError(f"query {answer.query_id} on {checkpoint} failed to stop: "
                             f"{answer.error}")
    if answer.last_committed_batch is None:
        raise SavepointError(f"query {answer.query_id} stopped before committing a batch: "
                             "there is no state to savepoint")
    return savepoint(checkpoint, target, answer.last_committed_batch,
                     storage_options=storage_options, **savepoint_options)


def _await_answer(where: Storage, request: StopRequest, checkpoint: str,
                  timeout_s: float) -> StopAnswer:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        data = where.read_if_exists(ANSWER)
        answer = None if data is None else StopAnswer.from_json(data)
        if answer is not None and answer.id == request.id:
            return answer
        time.sleep(_POLL_S)
    raise StopTimeoutError(
        f"no running query answered the stop request in {checkpoint} within {timeout_s:g} s "
        "(a query sees it at its next progress or idle event; is it running, in a session "
        "configured with this provider?); nothing was stopped")

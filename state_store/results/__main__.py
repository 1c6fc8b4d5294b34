"""The recorder process the driver JVM starts (`ResultRecorder`):

    python -m state_store.results record --url URL [options] < result-entry.json
    python -m state_store.results resume --url URL [options]

It logs to the driver's stderr and ends with its driver: a new session resumes the rest.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time

from .cleanup import Backoff, CleanupFailed, StateAccess
from .record import QueryResult
from .recorder import record, resume, with_last_batch
from .store import FileSystemResultStore

log = logging.getLogger("state_store.results")
# Test hook only: the recorder process kills its driver and itself at this point.
CRASH_AT_ENV = "STATE_STORE_TEST_CRASH_AT"
CRASH_POINTS = ("after-dirty", "after-collect_garbage", "before-clean")



def _crash(point: str) -> None:
    if os.environ.get(CRASH_AT_ENV) == point:
        os.kill(os.getppid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)


def _exit_with_parent() -> None:
    """Ends this process when its driver JVM is gone: the next session resumes."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1)
        os._exit(3)

    threading.Thread(target=watch, daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m state_store.results")
    parser.add_argument("mode", choices=("record", "resume"))
    parser.add_argument("--url", required=True)
    parser.add_argument("--store-options", default="{}", help="JSON: the result store's")
    parser.add_argument("--checkpoint-options", default="{}", help="JSON")
    parser.add_argument("--root-options", default="{}", help="JSON: the rootUrl's")
    parser.add_argument("--backoff-initial", type=float, default=1.0)
    parser.add_argument("--backoff-max", type=float, default=3600.0)
    parser.add_argument("--max-attempts", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s pyrocks result store: %(message)s")
    _exit_with_parent()
    store = FileSystemResultStore(args.url, json.loads(args.store_options))
    access = StateAccess(json.loads(args.checkpoint_options) or None,
                         json.loads(args.root_options) or None)
    backoff = Backoff(args.backoff_initial, args.backoff_max, args.max_attempts)
    try:
        if args.mode == "record":
            data = sys.stdin.buffer.read()
            result = QueryResult.from_entry(data, "the run's result on stdin")
            # The query's own rootOptions (set in its session) come beside the result.
            own_options = json.loads(data).get("root_options")
            if own_options:
                access = StateAccess(access.checkpoint_options, own_options)
            record(store, with_last_batch(result, access), access, backoff, _crash)
        else:
            resumed = resume(store, access, backoff)
            if resumed:
                log.info("resumed the cleanup of %d dirty run(s) in %s", resumed, store.url)
    except CleanupFailed as e:
        log.error("%s; the run stays dirty in %s (resume with: state-store results %s "
                  "--cleanup)", e, store.url, store.url)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

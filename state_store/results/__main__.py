"""The recorder process the driver JVM starts (`ResultRecorder`):

    python -m state_store.results record < settings.json
    python -m state_store.results resume < settings.json

Every setting comes on stdin, never in argv (which every user of the machine can read):
`{"conf": {<the session's result store settings, by Spark key>}, "entry": <the run's entry,
to record>, "run_root_options": <the run's own rootOptions>}`. It logs to the driver's
stderr and ends with its driver: a new session resumes the rest.
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
from typing import Any

from .cleanup import CleanupFailed, StateAccess
from .record import QueryResult
from .recorder import record, resume, with_last_batch
from .settings import ResultSettings

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
    parser = argparse.ArgumentParser(prog="python -m state_store.results",
                                     description="settings come as JSON on stdin")
    parser.add_argument("mode", choices=("record", "resume"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s pyrocks result store: %(message)s")
    _exit_with_parent()
    given: dict[str, Any] = json.loads(sys.stdin.buffer.read() or b"{}")
    conf = given.get("conf") or {}
    settings = ResultSettings.from_conf(conf.get)
    store, access, backoff = settings.store(), settings.access, settings.backoff
    try:
        if args.mode == "record":
            where = "the run's result on stdin"
            result = QueryResult.from_entry(json.dumps(given.get("entry")).encode(), where)
            # The query's own rootOptions (set in its session) come beside the result.
            if given.get("run_root_options"):
                access = StateAccess(access.checkpoint_options, given["run_root_options"])
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

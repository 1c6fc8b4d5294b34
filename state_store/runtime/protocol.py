"""Frames between the shim (jvm-bridge/.../Connection.scala) and a worker. Keep both in step.

Request:  [length u32][type u8][body]   length counts type + body; big-endian throughout.
Response: [length u32][status u8][body] status OK or ERROR (body = UTF-8 message).
WRITES and ITER_CLOSE get no response: the shim never waits for them. An error while
applying WRITES is held and returned by the next request that has a response.
Nothing on the wire is ever unpickled: bodies are fixed binary layouts or UTF-8 JSON.

A chunk (the answer to ITER_OPEN, ITER_NEXT and READ_AHEAD) is `[flags u8]`, then pairs:
- flags & MORE: the scan goes on after this chunk (clear: it ends with it);
- flags & UNIFORM: every pair has the same lengths, given once: `[key_len u32][value_len u32]`
  (UNIFORM_HEAD, their sum never 0), then per pair `[key][value]`;
- otherwise, per pair `[key_len u32][value_len u32][key][value]` (PAIR_HEAD).
chunks.py packs them.
"""

from __future__ import annotations

import struct
from enum import IntEnum


class Request(IntEnum):
    # body: JSON {store_root, store_path, store_name, local_name, query_id, run_epoch,
    #             writer, options} (worker.Session.open)  -> JSON {pid, root, session}
    OPEN = 1
    # body: version i64 [UTF-8 checkpoint id: the commit of it Spark's commit log names]
    LOAD = 2  #                                  -> JSON {num_keys, unchanged, commit_id}
    WRITES = 3  # body: write records (records.py)       -> no response
    GET = 4  # body: [cf_len u16][cf][key]               -> [found u8][value]
    ITER_OPEN = 5  # body: [id u32][mode u8][cf_len u16][cf][a_len u32][a][b_len u32][b] -> chunk
    ITER_NEXT = 6  # body: [id u32]                      -> chunk
    ITER_CLOSE = 7  # body: [id u32]                     -> no response
    COMMIT = 8  # body: new version i64 -> JSON {published, checkpoint_id, ...}
    ABORT = 9  # body: empty                            -> empty
    METRICS = 10  # body: empty                          -> JSON
    MAINTAIN = 11  # body: min versions to retain i32    -> JSON
    CLOSE = 12  # body: empty                            -> empty
    DROP_CF = 13  # body: UTF-8 name                     -> [dropped u8]
    LIST_CF = 14  # body: empty                          -> JSON list
    # body: empty, or CLOSING: drain uploads, snapshot the last committed version; then, if
    # CLOSING, close the store (as CLOSE does; the snapshot is the closed working copy's)
    FINISH = 15  #                                       -> JSON {failures}
    LOAD_EMPTY = 16  # body: version i64: an empty store standing at it -> JSON {num_keys, ...}
    LOAD_FROM_SNAPSHOT = 17  # body: snapshot version i64, version i64 -> JSON {num_keys, ...}
    # body: [limit u32][cf_len u16][cf][key]: the pairs from key on (inclusive), about limit
    # bytes of them -> a chunk (as ITER_OPEN's) whose `more` is 0 if they reach the family's end
    READ_AHEAD = 18
    # body: JSON {sessions: [the session ids OPEN answered]}: FINISH with CLOSING for each
    # named session of this worker (this connection's among them, or not), one after another,
    # in one request: a query run's end at 200 stores is 200 round trips otherwise, each
    # waking a thread of the worker's -> JSON {failures: {session id: [failures]}}
    END_STORES = 19


NO_RESPONSE = frozenset({Request.WRITES, Request.ITER_CLOSE})
CLOSING = b"\x01"  # FINISH's body when the store closes after it


class ScanMode(IntEnum):
    ALL = 0
    PREFIX = 1  # a = prefix
    RANGE = 2  # a = start (inclusive, empty = unbounded), b = stop (exclusive, empty = unbounded)
    # a = start version i64, b = end version i64: the change feed; each pair's key is
    # CHANGE_HEAD (version, op) followed by the key; a delete's value is empty
    CHANGES = 3


class Status(IntEnum):
    OK = 0
    ERROR = 1


HEADER = struct.Struct(">IB")
U32 = struct.Struct(">I")
U16 = struct.Struct(">H")
I64 = struct.Struct(">q")
I32 = struct.Struct(">i")
CHANGE_HEAD = struct.Struct(">qB")
PAIR_HEAD = struct.Struct(">II")
UNIFORM_HEAD = struct.Struct(">II")
MORE = 0x01  # a chunk's flags
UNIFORM = 0x02
SNAPSHOT_AND_VERSION = struct.Struct(">qq")

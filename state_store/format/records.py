"""Write records: the unit of change, identical on the wire and in changelog files.

A record is `[op u8][cf_len u16][cf][key_len u32][key][value_len u32][value]`, big-endian.
The low six bits of `op` are the operation; bit 7 (KNOWN) says the shim knew whether the
key existed before this record, and bit 6 (EXISTED) that it did, so the worker can keep
its exact key count without looking the key up.
The shim batches records into WRITES frames; the worker applies them and appends the very
same bytes to the version's changelog (compressed in chunks of whole frames:
changelog_file.py), so a changelog is replayed by the code that applied the original writes
and nothing re-encodes a record on the commit path.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum
from itertools import chain

from ..errors import ProtocolError

DEFAULT_CF = "default"

_HEAD = struct.Struct(">BH")
_HEAD_AND_KEY_LEN = struct.Struct(">BHI")  # a record with the default column family starts so
OP_MASK = 0x3F
KNOWN = 0x80
EXISTED = 0x40
_LEN = struct.Struct(">I")


class Op(IntEnum):
    PUT = 1
    DELETE = 2
    MERGE = 3  # append the value bytes to the existing value (multi-value column families)
    DELETE_RANGE = 4  # key = inclusive start, value = exclusive end
    CREATE_CF = 5
    DROP_CF = 6


_OPS = frozenset(int(op) for op in Op)
# Every valid op byte: an operation with any of its two flags.
_OP_BYTES = bytes(op | flags for op in _OPS for flags in (0, KNOWN, EXISTED, KNOWN | EXISTED))


def encode(op: Op | int, cf: str, key: bytes = b"", value: bytes = b"") -> bytes:
    cf_bytes = b"" if cf == DEFAULT_CF else cf.encode()
    return b"".join(
        (_HEAD.pack(op, len(cf_bytes)), cf_bytes, _LEN.pack(len(key)), key,
         _LEN.pack(len(value)), value)
    )


def decode(buf: bytes | memoryview) -> Iterator[tuple[int, str, bytes, bytes]]:
    """Yields (op byte with its flags, cf, key, value) of a WRITES payload or changelog
    body; raises on truncation or an unknown operation. This is the worker's hot path, so
    it reads the head and the key length in one unpack when the column family is the
    default (its name is empty), slices bytes directly, and yields plain tuples."""
    data = buf if isinstance(buf, bytes) else bytes(buf)
    pos, end = 0, len(data)
    cf_names: dict[bytes, str] = {}
    head, length = _HEAD_AND_KEY_LEN.unpack_from, _LEN.unpack_from
    try:
        while pos < end:
            op, cf_len, key_len = head(data, pos)
            if cf_len:
                cf_raw = data[pos + 3:pos + 3 + cf_len]
                (key_len,) = length(data, pos + 3 + cf_len)
                cf = cf_names.get(cf_raw) or cf_names.setdefault(cf_raw, cf_raw.decode())
            else:
                cf = DEFAULT_CF
            pos += 7 + cf_len
            key = data[pos:pos + key_len]
            pos += key_len
            (value_len,) = length(data, pos)
            pos += 4
            value = data[pos:pos + value_len]
            pos += value_len
            if pos > end:
                raise ProtocolError(f"write record truncated at byte {pos} of {end}")
            if op & OP_MASK not in _OPS:
                raise ProtocolError(f"unknown write operation {op & OP_MASK} at byte {pos}")
            yield op, cf, key, value
    except (struct.error, ValueError) as e:
        raise ProtocolError(f"malformed write record at byte {pos} of {end}: {e}") from e


@dataclass(frozen=True)
class UniformRun:
    """The records of a payload that `uniform` accepted."""

    cf: str
    ops: bytes  # every record's op byte with its flags, in order
    records: Iterator[tuple[int, bytes, bytes]]  # (op byte, key, value), unpacked lazily


def uniform(buf: bytes | memoryview) -> UniformRun | None:
    """A payload of two or more records that all share one column family, one key length
    and one value length (what a task writing fixed-width rows sends: its puts, or its
    deletes), with its records unpacked by `struct` in one pass instead of record by
    record. None for any other payload, which `decode` then reads.

    Nothing is taken on trust from the first record: every length field of every record
    must repeat the first's (checked a column at a time, as strided slices), the payload
    must be whole records of that size, and every operation must be known. So a payload
    this accepts is exactly what `decode` would yield; one it refuses, `decode` reads, or
    refuses naming the record."""
    data = buf if isinstance(buf, bytes) else bytes(buf)
    end = len(data)
    if end < _HEAD_AND_KEY_LEN.size:
        return None
    _, cf_len = _HEAD.unpack_from(data)
    key_len_at = _HEAD.size + cf_len
    if key_len_at + _LEN.size > end:
        return None
    (key_len,) = _LEN.unpack_from(data, key_len_at)
    value_len_at = key_len_at + _LEN.size + key_len
    if value_len_at + _LEN.size > end:
        return None
    (value_len,) = _LEN.unpack_from(data, value_len_at)
    size = value_len_at + _LEN.size + value_len
    count, partial = divmod(end, size)
    if partial or count < 2:
        return None
    fields = chain(range(1, key_len_at + _LEN.size), range(value_len_at, value_len_at + _LEN.size))
    if any(data[at::size] != data[at:at + 1] * count for at in fields):
        return None
    ops = data[::size]
    if ops.translate(None, _OP_BYTES):
        return None  # an unknown operation
    try:
        cf = data[_HEAD.size:key_len_at].decode() if cf_len else DEFAULT_CF
    except UnicodeDecodeError:
        return None
    record = struct.Struct(f">B{key_len_at + _LEN.size - 1}x{key_len}s{_LEN.size}x{value_len}s")
    return UniformRun(cf, ops, record.iter_unpack(data))

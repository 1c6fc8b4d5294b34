"""The bytes of a changelog file: the write records of one version, compressed in chunks.

A file is either
  bare        the records themselves (records.py), as files were written before compression
              and still are with changelogCompression=none; or
  compressed  MAGIC, a codec byte, then chunks `[kind u8][raw_len u32][stored_len u32][stored]`
              (big-endian): each holds whole write frames, compressed with the file's codec
              (kind COMPRESSED) or, where that would not shrink them, as they are (kind RAW).
No write record starts with MAGIC's first byte (0xFF is no operation: records.OP_MASK leaves
63), so the first byte tells the two apart and no manifest needs to say which a file is.

A chunk is replayed as one write payload: it holds whole frames, so whole records. Its raw
size is bounded where it is read (`MAX_RATIO`, `CHUNK_BYTES`), so a crafted file cannot make
a reader allocate more than a small multiple of the bytes it holds.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import cramjam

from ..errors import CorruptFileError

MAGIC = b"\xffPCL"


@dataclass(frozen=True)
class _Codec:
    byte: int  # a compressed file's codec, after MAGIC
    compress: Callable[[bytes | bytearray], object]  # -> a buffer
    # (stored, output) -> bytes written: never more than the output holds, so a chunk can
    # never make a reader allocate more than the raw size it records (cramjam's `_into`)
    decompress_into: Callable[[bytes, bytearray], int]


# By the names changelogCompression takes (Spark's names for its state store codecs).
# cramjam: small, and it releases the interpreter lock while it compresses.
_CODECS = {
    "lz4": _Codec(1, lambda raw: cramjam.lz4.compress_block(raw, store_size=False),
                  cramjam.lz4.decompress_block_into),
    "zstd": _Codec(2, lambda raw: cramjam.zstd.compress(raw, level=1),
                   cramjam.zstd.decompress_into),
    "snappy": _Codec(3, cramjam.snappy.compress_raw, cramjam.snappy.decompress_raw_into),
}
CODECS = tuple(_CODECS)
NONE = "none"
_BY_BYTE = {codec.byte: codec for codec in _CODECS.values()}
_CHUNK_HEAD = struct.Struct(">BII")
RAW, COMPRESSED = 0, 1
# Frames gather into a chunk until it holds this many raw bytes (a larger frame is a chunk of
# its own): large enough to compress well, small enough to replay a chunk at a time.
CHUNK_BYTES = 1 << 20
# A chunk beyond CHUNK_BYTES is compressed only if this is the most it expands to: the
# writer keeps the rule (storing such a chunk RAW), so the reader may refuse what breaks it.
MAX_RATIO = 64


class ChunkWriter:
    """Encodes chunks of one file for a codec (`NONE`: the bare format)."""

    def __init__(self, codec: str) -> None:
        if codec != NONE and codec not in CODECS:
            raise ValueError(f"unknown changelog codec {codec!r}")
        self._codec = _CODECS.get(codec)

    @property
    def header(self) -> bytes:
        return b"" if self._codec is None else MAGIC + bytes([self._codec.byte])

    def chunk(self, raw: bytes | bytearray) -> bytes:
        """The stored form of `raw` (whole write frames) in this file."""
        if self._codec is None:
            return bytes(raw)
        stored = bytes(self._codec.compress(raw))
        too_dense = len(raw) > CHUNK_BYTES and len(raw) > MAX_RATIO * len(stored)
        if len(stored) >= len(raw) or too_dense:
            return _CHUNK_HEAD.pack(RAW, len(raw), len(raw)) + bytes(raw)
        return _CHUNK_HEAD.pack(COMPRESSED, len(raw), len(stored)) + stored


def payloads(data: bytes, what: str) -> Iterator[bytes]:
    """The write payloads of a changelog file's bytes, to replay one at a time. `what` names
    the file in errors (its version and store)."""
    if not data.startswith(MAGIC):
        if data:
            yield data  # bare records: records.decode checks them
        return
    head = len(MAGIC) + 1
    if len(data) < head or data[len(MAGIC)] not in _BY_BYTE:
        raise CorruptFileError(f"{what}: unknown changelog codec byte "
                               f"{data[len(MAGIC):head].hex() or '(none)'}")
    codec = _BY_BYTE[data[len(MAGIC)]]
    pos = head
    while pos < len(data):
        where = f"{what}: the chunk at byte {pos}"
        kind, raw_len, stored_len, start = _chunk_head(data, pos, where)
        stored = data[start:start + stored_len]
        yield stored if kind == RAW else _decompressed(codec, stored, raw_len, where)
        pos = start + stored_len


def _chunk_head(data: bytes, pos: int, where: str) -> tuple[int, int, int, int]:
    if pos + _CHUNK_HEAD.size > len(data):
        raise CorruptFileError(f"{where} is truncated (the file ends at byte {len(data)})")
    kind, raw_len, stored_len = _CHUNK_HEAD.unpack_from(data, pos)
    start = pos + _CHUNK_HEAD.size
    if start + stored_len > len(data):
        raise CorruptFileError(f"{where} holds {stored_len} bytes but the file ends at byte "
                               f"{len(data)}")
    if kind == RAW and raw_len != stored_len:
        raise CorruptFileError(f"{where} is stored as it is, yet says {raw_len} bytes raw "
                               f"and {stored_len} stored")
    if kind not in (RAW, COMPRESSED):
        raise CorruptFileError(f"{where} has unknown kind {kind}")
    if raw_len > CHUNK_BYTES and raw_len > MAX_RATIO * stored_len:
        raise CorruptFileError(f"{where} claims {raw_len} raw bytes from {stored_len} stored: "
                               f"more than {MAX_RATIO} times, which no writer stores")
    return kind, raw_len, stored_len, start


def _decompressed(codec: _Codec, stored: bytes, raw_len: int, where: str) -> bytes:
    raw = bytearray(raw_len)
    try:
        written = codec.decompress_into(stored, raw)
    except cramjam.DecompressionError as e:
        raise CorruptFileError(f"{where} does not decompress: {e}") from e
    if written != raw_len:
        raise CorruptFileError(f"{where} decompresses to {written} bytes, not the {raw_len} "
                               "it records")
    return bytes(raw)

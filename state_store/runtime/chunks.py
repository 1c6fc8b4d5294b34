"""Chunks: how a scan's (key, value) pairs cross the socket (protocol.py has the layout).

A full scan of a large state streams every pair of it through this loop every batch (the
eviction scan of session windows and joins), so its cost per pair is the worker's floor
there. Appending a pair's key and value costs a third of what packing a head before them
does, and most families' pairs all have one key length and one value length (Spark's rows
of fixed-width columns): such a chunk is UNIFORM and gives the two lengths once.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain

from .protocol import MORE, PAIR_HEAD, UNIFORM, UNIFORM_HEAD

# A uniform chunk meeting a pair of other lengths before this share of its limit is packed
# again with heads and goes on; later, it ends there (MORE) and the next chunk has heads.
REPACK_SHARE = 4

Pairs = Iterator[tuple[bytes, bytes]]


class ScanChunks:
    """The chunks of one scan, each about `limit` bytes; the last one lacks MORE."""

    def __init__(self, pairs: Pairs) -> None:
        self.pairs = pairs
        self.mixed = False  # met pairs of different lengths: every later chunk has heads

    def next(self, limit: int) -> bytearray:
        if self.mixed:
            return _headed(bytearray(b"\x00"), self.pairs, limit)
        first = next(self.pairs, None)
        if first is None:
            return bytearray(b"\x00")
        key, value = first
        key_len, value_len = len(key), len(value)
        if key_len + value_len == 0:  # a uniform chunk could not say how many such pairs
            self.mixed = True
            self.pairs = chain((first,), self.pairs)
            return _headed(bytearray(b"\x00"), self.pairs, limit)
        chunk = bytearray(b"\x00") + UNIFORM_HEAD.pack(key_len, value_len)
        chunk += key
        chunk += value
        for key, value in self.pairs:
            if len(key) != key_len or len(value) != value_len:
                return self._mixed(chunk, (key, value), limit)
            chunk += key
            chunk += value
            if len(chunk) > limit:
                chunk[0] = UNIFORM | MORE
                return chunk
        chunk[0] = UNIFORM
        return chunk

    def _mixed(self, chunk: bytearray, met: tuple[bytes, bytes], limit: int) -> bytearray:
        """`chunk` (uniform) met `met`, a pair of other lengths."""
        self.mixed = True
        self.pairs = chain((met,), self.pairs)
        if len(chunk) > limit // REPACK_SHARE:
            chunk[0] = UNIFORM | MORE
            return chunk
        return _headed(_with_heads(chunk), self.pairs, limit)


def _headed(chunk: bytearray, pairs: Pairs, limit: int) -> bytearray:
    """`chunk` (heads, MORE clear) with pairs appended until it passes `limit`."""
    head = PAIR_HEAD.pack
    for key, value in pairs:
        chunk += head(len(key), len(value))
        chunk += key
        chunk += value
        if len(chunk) > limit:
            chunk[0] = MORE
            return chunk
    return chunk


def _with_heads(uniform: bytearray) -> bytearray:
    """A uniform chunk's pairs in a chunk with heads (MORE clear)."""
    key_len, value_len = UNIFORM_HEAD.unpack_from(uniform, 1)
    head = PAIR_HEAD.pack(key_len, value_len)
    step = key_len + value_len
    pairs = memoryview(uniform)[1 + UNIFORM_HEAD.size:]
    out = bytearray(b"\x00")
    for at in range(0, len(pairs), step):
        out += head
        out += pairs[at:at + step]
    return out


def one_chunk(pairs: Pairs, limit: int) -> bytearray:
    """The first chunk of `pairs` alone (a read-ahead's answer)."""
    return ScanChunks(pairs).next(limit)

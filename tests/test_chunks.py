"""Chunks (state_store/runtime/chunks.py, the layout in protocol.py): every pair of a scan
arrives once, in order, whatever its lengths; a chunk ends once past its limit; a run of
pairs of one key length and one value length travels without heads (UNIFORM)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from state_store.runtime.chunks import REPACK_SHARE, ScanChunks, one_chunk
from state_store.runtime.protocol import MORE, PAIR_HEAD, UNIFORM, UNIFORM_HEAD

Pair = tuple[bytes, bytes]


def pairs_of(chunk: bytes) -> tuple[int, list[Pair]]:
    """A chunk's flags and pairs, read as the shim reads them (Chunk.scala); the worker's
    tests (test_worker_process.py) read its answers with it."""
    flags, found = chunk[0], []
    if flags & UNIFORM:
        key_len, value_len = UNIFORM_HEAD.unpack_from(chunk, 1)
        step = key_len + value_len
        assert step > 0 and (len(chunk) - 1 - UNIFORM_HEAD.size) % step == 0
        for at in range(1 + UNIFORM_HEAD.size, len(chunk), step):
            found.append((chunk[at:at + key_len], chunk[at + key_len:at + step]))
        return flags, found
    at = 1
    while at < len(chunk):
        key_len, value_len = PAIR_HEAD.unpack_from(chunk, at)
        key_at = at + PAIR_HEAD.size
        found.append((chunk[key_at:key_at + key_len],
                      chunk[key_at + key_len:key_at + key_len + value_len]))
        at = key_at + key_len + value_len
    assert at == len(chunk)
    return flags, found


def stream(pairs: list[Pair], limit: int) -> list[tuple[int, list[Pair]]]:
    chunks = ScanChunks(iter(pairs))
    out = [pairs_of(chunks.next(limit))]
    while out[-1][0] & MORE:
        out.append(pairs_of(chunks.next(limit)))
    return out


def test_pairs_of_one_length_travel_without_heads() -> None:
    pairs = [(b"k%07d" % i, b"v" * 20) for i in range(1000)]
    chunks = stream(pairs, 1024)
    assert all(flags & UNIFORM for flags, _ in chunks)
    assert [p for _, found in chunks for p in found] == pairs
    assert len(chunks) > 20
    # every chunk but the last ends with the pair that took it past the limit
    assert all(1 + UNIFORM_HEAD.size + 28 * (len(found) - 1) <= 1024
               < 1 + UNIFORM_HEAD.size + 28 * len(found) for _, found in chunks[:-1])


def test_a_pair_of_other_lengths_late_in_a_chunk_ends_it_and_heads_follow() -> None:
    pairs = [(b"k%07d" % i, b"v" * 20) for i in range(100)] + [(b"odd", b"")] + \
        [(b"z%07d" % i, b"v" * 20) for i in range(100)]
    chunks = stream(pairs, 4096)
    assert chunks[0][0] == UNIFORM | MORE and len(chunks[0][1]) == 100  # ended at `odd`
    assert all(not flags & UNIFORM for flags, _ in chunks[1:])
    assert [p for _, found in chunks for p in found] == pairs


def test_a_pair_of_other_lengths_early_in_a_chunk_repacks_it_with_heads() -> None:
    pairs = [(b"k%07d" % i, b"v" * 20) for i in range(3)] + [(b"odd", b"x")] + \
        [(b"z%d" % i, b"v" * (i % 9)) for i in range(500)]
    assert 4096 // REPACK_SHARE > 3 * 28
    chunks = stream(pairs, 4096)
    assert all(not flags & UNIFORM for flags, _ in chunks)
    assert [p for _, found in chunks for p in found] == pairs


def test_an_empty_scan_and_an_empty_pair() -> None:
    assert one_chunk(iter([]), 100) == b"\x00"
    chunks = stream([(b"", b""), (b"a", b"bb")], 100)
    assert chunks == [(0, [(b"", b""), (b"a", b"bb")])]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0, 1, 8, 9]), st.sampled_from([0, 3, 16])),
                max_size=200),
       st.integers(min_value=1, max_value=600), st.booleans())
def test_every_pair_arrives_once_in_order(shapes: list[tuple[int, int]], limit: int,
                                          runs: bool) -> None:
    """Any mix of lengths, in runs or not, at any limit: the pairs, whole; flags consistent;
    only the last chunk lacks MORE, and none but the last is empty."""
    if runs:
        shapes = sorted(shapes)
    pairs = [(i.to_bytes(2, "big")[:k] + b"k" * max(k - 2, 0), b"v" * v)
             for i, (k, v) in enumerate(shapes)]
    chunks = stream(pairs, limit)
    assert [p for _, found in chunks for p in found] == pairs
    assert all(flags & MORE and found for flags, found in chunks[:-1])
    assert not chunks[-1][0] & MORE
    assert all(flags & ~(MORE | UNIFORM) == 0 for flags, _ in chunks)

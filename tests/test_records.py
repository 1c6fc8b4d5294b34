"""Write records decode exactly what was encoded, and refuse any truncation; a payload of
one record shape unpacks at once (`records.uniform`) to exactly what `decode` reads."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from state_store.errors import ProtocolError
from state_store.format import records
from state_store.format.records import EXISTED, KNOWN, Op


def sample() -> list[tuple[int, str, bytes, bytes]]:
    return [(Op.PUT | (KNOWN if i % 3 else 0), "default" if i % 2 else f"cf{i % 4}",
             bytes([i]) * (i % 7), bytes([255 - i]) * (i % 5)) for i in range(40)]


def test_round_trip() -> None:
    payload = b"".join(records.encode(*r) for r in sample())
    assert list(records.decode(payload)) == sample()
    assert list(records.decode(memoryview(payload))) == sample()


def test_truncated_anywhere_but_a_record_boundary_is_refused() -> None:
    encoded = [records.encode(*r) for r in sample()]
    payload = b"".join(encoded)
    boundaries = {sum(len(e) for e in encoded[:n]) for n in range(len(encoded) + 1)}
    for cut in range(len(payload)):
        if cut in boundaries:
            assert len(list(records.decode(payload[:cut]))) == sorted(boundaries).index(cut)
        else:
            with pytest.raises(ProtocolError):
                list(records.decode(payload[:cut]))


def test_unknown_operation_is_refused() -> None:
    with pytest.raises(ProtocolError, match="unknown write operation 9"):
        list(records.decode(records.encode(9, "default", b"k", b"v")))


def as_run(payload: bytes) -> tuple[str, list[tuple[int, bytes, bytes]]] | None:
    run = records.uniform(payload)
    return None if run is None else (run.cf, list(run.records))


def as_decoded(payload: bytes) -> tuple[str, list[tuple[int, bytes, bytes]]]:
    decoded = list(records.decode(payload))
    assert len({cf for _, cf, _, _ in decoded}) == 1
    return decoded[0][1], [(op, key, value) for op, _, key, value in decoded]


def one_shape(cf: str, ops: list[int], value_length: int) -> bytes:
    return b"".join(records.encode(op, cf, bytes([i, 255 - i]) * 4, bytes([i]) * value_length)
                    for i, op in enumerate(ops))


FLAGGED = [Op.PUT | KNOWN, Op.PUT | KNOWN | EXISTED, Op.PUT, Op.DELETE | KNOWN | EXISTED,
           Op.DELETE, Op.MERGE, Op.DELETE | KNOWN]


@pytest.mark.parametrize("cf", ["default", "keyToNumValues", "é"])
@pytest.mark.parametrize("value_length", [0, 16])
def test_a_payload_of_one_shape_unpacks_as_decode_reads_it(cf: str, value_length: int) -> None:
    payload = one_shape(cf, FLAGGED * 3, value_length)
    assert as_run(payload) == as_decoded(payload)
    assert as_run(memoryview(payload)) == as_decoded(payload)


def test_uniform_refuses_every_payload_it_cannot_vouch_for() -> None:
    base = [records.encode(Op.PUT | KNOWN, "cfa", b"key%d" % i, b"v%d" % i) for i in range(6)]
    refused = {
        "one record": base[0],
        "a longer key": b"".join(base[:3]) + records.encode(Op.PUT, "cfa", b"key10", b"v1"),
        "a longer value": b"".join(base[:3]) + records.encode(Op.PUT, "cfa", b"key1", b"v10"),
        # Same lengths throughout, another family: its name's bytes are checked too.
        "another family": b"".join(base[:3]) + records.encode(Op.PUT, "cfb", b"key1", b"v1"),
        "an unknown operation": b"".join(base[:3]) + records.encode(9, "cfa", b"key1", b"v1"),
        "a family that is not UTF-8": b"".join(
            records.encode(Op.PUT, "x", b"k", b"v").replace(b"x", b"\xff") for _ in range(3)),
        # The same record size, split otherwise: each record's own lengths are checked.
        "another split of the same size": b"".join(base[:3]) + records.encode(
            Op.PUT | KNOWN, "cfa", b"key3v", b"3"),
    }
    for what, payload in refused.items():
        assert records.uniform(payload) is None, what


def test_every_cut_of_a_uniform_payload_is_refused_or_whole_records() -> None:
    payload = one_shape("cfa", FLAGGED, 5)
    size = len(payload) // len(FLAGGED)
    for cut in range(len(payload)):
        run = as_run(payload[:cut])
        if cut % size or cut < 2 * size:
            assert run is None, cut
        else:
            assert run == as_decoded(payload[:cut])


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_damaged_uniform_payload_is_refused_or_read_as_decode_reads_it(
        data: st.DataObject) -> None:
    payload = bytearray(one_shape(data.draw(st.sampled_from(["default", "cf"])),
                                  FLAGGED * 2, data.draw(st.integers(0, 9))))
    for _ in range(data.draw(st.integers(1, 3))):
        payload[data.draw(st.integers(0, len(payload) - 1))] = data.draw(st.integers(0, 255))
    run = as_run(bytes(payload))
    if run is not None:
        assert run == as_decoded(bytes(payload))

"""Write records decode exactly what was encoded, and refuse any truncation."""

from __future__ import annotations

import pytest

from state_store.errors import ProtocolError
from state_store.format import records
from state_store.format.records import KNOWN, Op


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

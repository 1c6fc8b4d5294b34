"""The JSON form of manifests and snapshot descriptors (state_store/format/manifest.py).

A record is written at every commit, so its writer builds the JSON by hand rather than
through `dataclasses.asdict`. These properties hold it to what `asdict` gives (the form
every earlier build wrote and reads) and to a lossless round trip through the parser: a
field added to a record and forgotten by its writer fails both.
"""

from __future__ import annotations

import json
from dataclasses import asdict

from hypothesis import given
from hypothesis import strategies as st

from state_store.format.manifest import (
    Changelog,
    FileRef,
    Manifest,
    Owner,
    Retention,
    SnapshotDescriptor,
)

names = st.text("abcdef0123456789-_.", min_size=1, max_size=12).filter(
    lambda n: n not in (".", "..")).map(lambda n: f"f{n}")
versions = st.integers(0, 2**40)


@st.composite
def file_refs(draw: st.DrawFn) -> FileRef:
    owner = draw(st.sampled_from(Owner))
    root = "" if owner is Owner.OWNED else f"s3://bucket/{draw(names)}/state"
    return FileRef(draw(names), draw(st.integers(0, 2**40)),
                   f"crc32:{draw(st.integers(0, 2**32 - 1)):08x}", owner,
                   draw(st.one_of(st.just(""), names)), root)


snapshot_descriptors = st.builds(
    SnapshotDescriptor, versions, st.lists(file_refs(), max_size=6), st.integers(0, 2**40),
    st.booleans(), st.one_of(st.just(""), names))

manifests = st.builds(
    Manifest, versions, st.one_of(st.none(), versions),
    st.lists(st.builds(Changelog, versions, file_refs()), min_size=1, max_size=6),
    st.integers(0, 2**40), st.lists(names, max_size=3), st.one_of(st.just(""), names),
    st.text(max_size=20), versions,
    st.one_of(st.none(), st.builds(Retention, versions, st.floats(0, 1e6))),
    st.one_of(st.just(""), names))


@given(manifests)
def test_a_manifest_is_written_as_asdict_would_and_reads_back_whole(record: Manifest) -> None:
    written = record.to_json()
    assert written == json.dumps(asdict(record), sort_keys=True).encode()
    assert Manifest.from_json(written, "m.json") == record


@given(snapshot_descriptors)
def test_a_snapshot_descriptor_is_written_as_asdict_would_and_reads_back_whole(
        record: SnapshotDescriptor) -> None:
    written = record.to_json()
    assert written == json.dumps(asdict(record), sort_keys=True).encode()
    assert SnapshotDescriptor.from_json(written, "s.json") == record

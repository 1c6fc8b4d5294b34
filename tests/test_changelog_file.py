"""Changelog files compressed in chunks (state_store/format/changelog_file.py): every codec
replays the very records written, files written bare (before compression, or with
changelogCompression=none) still replay beside compressed ones, and a damaged or crafted
chunk is refused naming the file, never allocating more than the file's bytes allow."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from state_store.errors import CorruptFileError, OptionError
from state_store.format import changelog_file, records
from state_store.format.changelog_file import CHUNK_BYTES, MAGIC, MAX_RATIO, ChunkWriter
from state_store.format.storage import open_storage
from state_store.format.store_root import StoreRoot
from state_store.options import CHANGELOG_CODECS, PREFIX, store_options
from test_engine import contents, open_store, put

CODECS = ["lz4", "zstd", "snappy", "none"]
HEAD = struct.Struct(">BII")


def frames(count: int, per_frame: int = 200) -> list[bytes]:
    return [b"".join(put(f"key-{f}-{i:05}", f"value {i * 7919 % 10007}") for i in range(per_frame))
            for f in range(count)]


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_replays_the_records_written_as_whole_records(codec: str) -> None:
    writer = ChunkWriter(codec)
    sent = frames(3)
    data = writer.header + writer.chunk(b"".join(sent[:2])) + writer.chunk(sent[2])
    payloads = list(changelog_file.payloads(data, "the test file"))
    assert b"".join(payloads) == b"".join(sent)
    for payload in payloads:  # each decodes alone: chunks never split a record
        assert len(list(records.decode(payload))) > 0
    assert data.startswith(MAGIC) == (codec != "none")
    if codec != "none":
        assert len(data) < len(b"".join(sent)) / 2, "the records did not compress"


def test_a_chunk_compressing_beyond_the_ratio_is_stored_raw_and_read_back() -> None:
    dense = put("k", "\0" * (2 * CHUNK_BYTES))
    writer = ChunkWriter("zstd")
    data = writer.header + writer.chunk(dense)
    kind, raw_len, stored_len = HEAD.unpack_from(data, len(writer.header))
    assert (kind, raw_len, stored_len) == (changelog_file.RAW, len(dense), len(dense))
    assert list(changelog_file.payloads(data, "the test file")) == [dense]


def crafted(head: tuple[int, int, int], body: bytes, codec: int = 1) -> bytes:
    return MAGIC + bytes([codec]) + HEAD.pack(*head) + body


@pytest.mark.parametrize(("data", "refusal"), [
    (MAGIC + b"\x09", r"unknown changelog codec byte 09"),
    (MAGIC, r"unknown changelog codec byte \(none\)"),
    (MAGIC + b"\x01" + b"\x01\x00", r"chunk at byte 5 is truncated"),
    (crafted((1, 10, 50), b"x" * 5), r"holds 50 bytes but the file ends"),
    (crafted((0, 10, 4), b"abcd"), r"stored as it is, yet says 10 bytes raw"),
    (crafted((7, 4, 4), b"abcd"), r"unknown kind 7"),
    (crafted((1, CHUNK_BYTES + 1, 8), b"\0" * 8), rf"more than {MAX_RATIO} times"),
    (crafted((1, 1000, 6), b"\xff" * 6), r"does not decompress"),
])
def test_a_damaged_or_crafted_chunk_is_refused_naming_the_file(
        tmp_path: Path, data: bytes, refusal: str) -> None:
    root = StoreRoot(open_storage(str(tmp_path / "root")), "store-7")
    changelog = root.write_changelog(4, data)  # its checksum matches: the format refuses it
    with pytest.raises(CorruptFileError, match=rf"version 4 of store-7 \(files/"
                                               rf"{changelog.file.name}\): .*{refusal}"):
        list(root.changelog_payloads(changelog))


def test_a_wrong_recorded_raw_size_is_refused() -> None:
    raw = b"".join(frames(1))
    writer = ChunkWriter("lz4")
    data = bytearray(writer.header + writer.chunk(raw))
    struct.pack_into(">I", data, len(writer.header) + 1, len(raw) - 1)
    with pytest.raises(CorruptFileError, match=r"the test file: the chunk at byte 5"):
        list(changelog_file.payloads(bytes(data), "the test file"))


def test_bare_and_compressed_changelogs_replay_in_one_chain(tmp_path: Path) -> None:
    """A query that ran before compression (bare files) goes on with it: its versions replay
    across both kinds, and every commit of the default writes a compressed file."""
    expected: dict[bytes, bytes] = {}
    for version, codec in enumerate(["none", "none", "lz4", "zstd", "lz4"]):
        store = open_store(tmp_path / "root", tmp_path / f"local-{version}", interval=100,
                           changelog_compression=codec)
        store.load(version)
        written = b"".join(frames(2, 50)) + put(f"v{version}", codec)
        store.write(written)
        for _, _, key, value in records.decode(written):
            expected[key] = value
        assert store.commit(version + 1)["published"]
        own = store.checkpoint.own_changelog(version + 1)
        stored = (tmp_path / "root" / "files" / own.file.name).read_bytes()
        assert stored.startswith(MAGIC) == (codec != "none")
        assert b"".join(store.checkpoint.changelog_payloads(own)) == written
        store.close()
    replayed = open_store(tmp_path / "root", tmp_path / "replay", interval=100)
    replayed.load(5)
    assert replayed.metrics.replayed_versions == 5
    assert contents(replayed) == expected


def test_every_codec_the_option_accepts_is_one_the_format_writes() -> None:
    assert sorted(CHANGELOG_CODECS) == sorted([*changelog_file.CODECS, changelog_file.NONE])
    for codec in CHANGELOG_CODECS:
        ChunkWriter(codec)
    with pytest.raises(ValueError, match="unknown changelog codec 'lzf'"):
        ChunkWriter("lzf")


def test_sparks_codec_setting_sets_ours_and_ours_wins() -> None:
    codec = "spark.sql.streaming.stateStore.compression.codec"
    assert store_options({}).changelog_compression == "lz4"
    assert store_options({codec: "zstd"}).changelog_compression == "zstd"
    assert store_options({codec: "lzf"}).changelog_compression == "lz4"
    assert store_options({codec: "org.apache.spark.io.SnappyCompressionCodec"}
                         ).changelog_compression == "snappy"
    assert store_options({codec: "zstd", PREFIX + "changelogCompression": "none"}
                         ).changelog_compression == "none"
    with pytest.raises(OptionError, match=rf"'brotli' for {codec} \(Spark's setting, read as "
                                          rf"{PREFIX}changelogCompression\)"):
        store_options({codec: "brotli"})

"""ingest.binlog_compression: MariaDB's compressed events (log_bin_compress=ON) turned back
into the plain events, byte for byte; damaged ones refused with a reason. And
ingest.event_types through the reader: an event type that may carry changes and that
ingest does not read stops it with one line (never skipped).

The compressed events here are built the way MariaDB's ``binlog_buf_compress`` builds them
(a header byte 0x80 | bytes of the length, the length big-endian, zlib's ``compress``
output); the end-to-end test (tests/integration/test_binlog_compression.py) reads the
server's own."""

from __future__ import annotations

import re
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest import binlog
from ingest.binlog_compression import COMPRESSED_EVENT_TYPES, CompressedEventError, uncompressed_event
from ingest.errors import IngestError
from ingest.event_types import READ_TYPES

PLAIN_TYPE = {plain: compressed for compressed, plain in COMPRESSED_EVENT_TYPES.items()}


def compress_part(data: bytes) -> bytes:
    n = len(data)
    lenlen = 1 if n < 1 << 8 else 2 if n < 1 << 16 else 3 if n < 1 << 24 else 4
    return bytes([0x80 | lenlen]) + n.to_bytes(lenlen, "big") + zlib.compress(data)


def event(etype: int, body: bytes, checksum: bool, log_pos: int = 4000) -> bytes:
    size = 19 + len(body) + (4 if checksum else 0)
    out = struct.pack("<IBIIIH", 1_700_000_000, etype, 1, size, log_pos, 0) + body
    return out + (struct.pack("<I", zlib.crc32(out)) if checksum else b"")


def query_head(db: bytes, status: bytes) -> bytes:
    return struct.pack("<IIBHH", 7, 0, len(db), 0, len(status)) + status + db + b"\x00"


def packed(n: int) -> bytes:
    if n < 251:
        return bytes([n])
    if n < 1 << 16:
        return b"\xfc" + n.to_bytes(2, "little")
    return b"\xfd" + n.to_bytes(3, "little")


def rows_head(plain_type: int, width: int, extra: bytes = b"") -> bytes:
    head = (42).to_bytes(6, "little") + b"\x01\x00"
    if plain_type >= 30:
        head += struct.pack("<H", 2 + len(extra)) + extra
    bitmap = b"\xff" * ((width + 7) // 8)
    return head + packed(width) + bitmap + (bitmap if plain_type in (24, 31) else b"")


@pytest.mark.parametrize("checksum", [False, True])
def test_a_compressed_query_is_the_plain_query_event(checksum):
    head = query_head(b"shop", b"\x00\x00\x00\x00\x00")
    query = b"ALTER TABLE orders ADD COLUMN note VARCHAR(200) " + b"x" * 500
    plain = event(2, head + query, checksum)
    compressed = event(165, head + compress_part(query), checksum)
    assert len(compressed) < len(plain)
    assert uncompressed_event(compressed, 13, checksum) == plain
    assert uncompressed_event(compressed, None, checksum) == plain


@settings(max_examples=150, deadline=None)
@given(
    plain_type=st.sampled_from(sorted(t for t in PLAIN_TYPE if t != 2)),
    width=st.one_of(st.integers(1, 250), st.integers(251, 3000)),
    rows=st.binary(min_size=1, max_size=70_000),
    extra=st.sampled_from([b"", b"\x00\x04ab"]),
    checksum=st.booleans(),
)
def test_a_compressed_rows_event_is_the_plain_rows_event(plain_type, width, rows, extra, checksum):
    """Every rows type (v1 and v2, update with its two bitmaps), column counts of the
    1-byte and 3-byte length encodings, v2 extra data, lengths of 1 to 3 bytes."""
    head = rows_head(plain_type, width, extra if plain_type >= 30 else b"")
    plain = event(plain_type, head + rows, checksum)
    compressed = event(PLAIN_TYPE[plain_type], head + compress_part(rows), checksum)
    phl = 10 if plain_type >= 30 else 8
    assert uncompressed_event(compressed, phl, checksum) == plain
    assert uncompressed_event(compressed, None, checksum) == plain


def _rows_pair(checksum=False):
    rows = bytes(range(256)) * 8
    head = rows_head(23, 3)
    return head, rows, event(166, head + compress_part(rows), checksum)


def test_damaged_events_are_refused_with_their_reason():
    head, rows, good = _rows_pair()
    assert uncompressed_event(good)[-len(rows) :] == rows
    cases = {
        "truncated": good[:-20],  # the packet ends before the event's announced length
        "zlib data is corrupt": good[: len(good) - 30] + bytes(b ^ 0x5A for b in good[-30:-10]) + good[-10:],
        "lacks the compression bit": good.replace(head + b"\x82", head + b"\x02", 1),
        "algorithm 1": good.replace(head + b"\x82", head + b"\x92", 1),
        "announces 2049": good.replace(head + b"\x82\x08\x00", head + b"\x82\x08\x01", 1),
        "inflates past": good.replace(head + b"\x82\x08\x00", head + b"\x82\x07\xff", 1),
        "not a compressed one": event(23, head + rows, False),
        "shorter than its header": good[:10],
    }
    for reason, damaged in cases.items():
        with pytest.raises(CompressedEventError, match=reason):
            uncompressed_event(damaged)
    # a zlib stream cut short inside an event whose length is consistent with the cut
    cut_body = head + compress_part(rows)[:-15]
    with pytest.raises(CompressedEventError, match="truncated"):
        uncompressed_event(event(166, cut_body, False))
    # a CRC-bearing binlog: the 4 checksum bytes are not zlib data
    _, _, with_crc = _rows_pair(checksum=True)
    with pytest.raises(CompressedEventError, match="4 bytes after the zlib data"):
        uncompressed_event(with_crc, None, checksum=False)


# ------------------------------------------------------------------ the reader


def _reader():
    return binlog.open_reader(
        {"host": "127.0.0.1", "port": 1, "user": "u", "password": "p"}, 1234, "0-1-1", blocking=False
    )


def test_the_compressed_types_are_mariadbs():
    """sql/log_event.h (MariaDB 10.2+): QUERY_COMPRESSED_EVENT = 165, then the _V1 rows
    types 166-168 (what MariaDB writes), then the v2 ones 169-171, each in the order write,
    update, delete of the plain types 23-25 and 30-32."""
    assert COMPRESSED_EVENT_TYPES == {165: 2, 166: 23, 167: 24, 168: 25, 169: 30, 170: 31, 171: 32}


def test_every_compressed_type_is_one_ingest_reads():
    assert set(COMPRESSED_EVENT_TYPES) <= READ_TYPES


@pytest.mark.parametrize(
    ("etype", "words"),
    [(18, "Execute_load_query (18)"), (26, "Incident (26)"), (39, "Partial_update_rows (39)"), (200, "type 200 (200)")],
)
def test_an_event_type_that_may_carry_changes_stops_the_reader(etype, words):
    reader = _reader()
    reader.log_file = "mariadb-bin.000007"
    data = b"\x00" + event(etype, b"\x00" * 30, False, log_pos=9049)
    expected = rf"{re.escape(words)} at mariadb-bin\.000007:9000 .*ingest stopped before it"
    with pytest.raises(IngestError, match=expected):
        reader._refuse_unhandled(data)


def test_event_types_that_carry_no_change_or_are_flagged_ignorable_pass():
    reader = _reader()
    for etype in (160, 161, 163, 5, 13, 14, 29):
        reader._refuse_unhandled(b"\x00" + event(etype, b"\x00" * 8, False))
    flagged = bytearray(b"\x00" + event(200, b"\x00" * 8, False))
    flagged[18] |= 0x80  # LOG_EVENT_IGNORABLE_F in the header's flags
    reader._refuse_unhandled(bytes(flagged))


def test_a_damaged_compressed_event_stops_the_reader_with_its_position():
    reader = _reader()
    reader.log_file = "mariadb-bin.000003"
    _, _, good = _rows_pair()
    damaged = b"\x00" + good[: len(good) - 30] + bytes(b ^ 0x5A for b in good[-30:-10]) + good[-10:]
    sd = reader.__dict__
    expected = r"Write_rows_compressed_v1 at mariadb-bin\.000003:\d+ cannot be decompressed"
    with pytest.raises(IngestError, match=expected):
        reader._uncompressed(damaged, sd)
    plain, size = reader._uncompressed(b"\x00" + good, sd)
    assert size == len(good) and plain[5] == 23

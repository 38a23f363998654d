"""MariaDB's compressed binlog events (``log_bin_compress=ON``) turned back into the events
they stand for. Pure: bytes in, bytes out.

MariaDB (sql/log_event.cc: ``query_event_uncompress``, ``row_log_event_uncompress``,
``binlog_buf_uncompress``) compresses only the tail of an event:

* QUERY_COMPRESSED_EVENT (165): the statement text. Header, post-header, status variables
  and the database name (with its NUL) stay as they are.
* WRITE/UPDATE/DELETE_ROWS_COMPRESSED_EVENT_V1 (166-168, what MariaDB writes: v1 rows
  events) and WRITE/UPDATE/DELETE_ROWS_COMPRESSED_EVENT (169-171, v2): the row images.
  Table id, flags, the v2 extra data, the column count and the columns-present bitmap(s)
  stay as they are.

The compressed part is one header byte (bit 7 set; bits 4-6 the algorithm, 0 = zlib, the
only one MariaDB writes; bits 0-2 the number of bytes of the uncompressed length), that
length big-endian, then the zlib stream. The uncompressed event is the same head, the
inflated tail, the plain event type (2, 23-25, 30-32), the new event length, and (if the
binlog has checksums) a CRC32 over it all, as the server's replica side rebuilds it.
"""

from __future__ import annotations

import struct
import zlib

__all__ = ["COMPRESSED_EVENT_TYPES", "CompressedEventError", "uncompressed_event", "uncompress_tail"]

QUERY_EVENT = 2
#: compressed event type -> the plain event type it stands for
COMPRESSED_EVENT_TYPES = {165: QUERY_EVENT, 166: 23, 167: 24, 168: 25, 169: 30, 170: 31, 171: 32}
_UPDATE_TYPES = (24, 31)
_HEADER_LEN = 19  # the common event header (timestamp, type, server id, length, log_pos, flags)
_TYPE_AT, _LENGTH_AT = 4, 9
_ROWS_HEADER_V1 = 8  # table id (6) + flags (2)
_ROWS_HEADER_V2 = 10  # + the length of the extra data (2)
_QUERY_POST_HEADER = 13  # thread id, exec time, db length, error code, status vars length
_CHECKSUM_LEN = 4
_ZLIB = 0


class CompressedEventError(ValueError):
    """A compressed event that cannot be turned back into its event (the reason, one line)."""


def uncompress_tail(buf: bytes, start: int, end: int) -> bytes:
    """The bytes that ``buf[start:end]`` (a compressed part: header byte, length, zlib
    stream) stands for."""
    if start >= end:
        raise CompressedEventError("no compressed data")
    head = buf[start]
    if not head & 0x80:
        raise CompressedEventError(f"compressed part's header byte {head:#04x} lacks the compression bit")
    algorithm, lenlen = (head >> 4) & 0x07, head & 0x07
    if algorithm != _ZLIB:
        raise CompressedEventError(f"compression algorithm {algorithm} is not one MariaDB documents (0: zlib)")
    if not 1 <= lenlen <= 4 or start + 1 + lenlen > end:
        raise CompressedEventError(f"compressed part's length field of {lenlen} bytes is malformed")
    length = int.from_bytes(buf[start + 1 : start + 1 + lenlen], "big")
    inflater = zlib.decompressobj()
    try:
        # at most one byte beyond the announced length: a longer stream is an error, not a memory hog
        out = inflater.decompress(buf[start + 1 + lenlen : end], length + 1)
    except zlib.error as exc:
        raise CompressedEventError(f"zlib data is corrupt ({exc})") from None
    if len(out) > length:
        raise CompressedEventError(f"inflates past the announced {length} bytes")
    if not inflater.eof:
        raise CompressedEventError("zlib data is truncated")
    if inflater.unused_data:  # the server writes none: a wrong length or a checksum taken for data
        raise CompressedEventError(f"{len(inflater.unused_data)} bytes after the zlib data")
    if len(out) != length:
        raise CompressedEventError(f"inflates to {len(out)} bytes, the event announces {length}")
    return out


def _packed_int(buf: bytes, at: int, end: int) -> tuple[int, int]:
    """A length-encoded integer (the rows event's column count) and the offset after it."""
    if at >= end:
        raise CompressedEventError("event ends before its column count")
    first = buf[at]
    width = {252: 2, 253: 3, 254: 8}.get(first, 0)
    if first == 251 or first == 255:
        raise CompressedEventError(f"malformed column count byte {first}")
    if at + 1 + width > end:
        raise CompressedEventError("event ends inside its column count")
    if not width:
        return first, at + 1
    return int.from_bytes(buf[at + 1 : at + 1 + width], "little"), at + 1 + width


def _tail_start(event: bytes, etype: int, post_header_len: int | None, end: int) -> int:
    """Where the compressed part of the event begins."""
    if etype == 165:
        phl = _QUERY_POST_HEADER if post_header_len is None else post_header_len
        at = _HEADER_LEN
        if at + phl > end or phl < _QUERY_POST_HEADER:
            raise CompressedEventError("event ends inside its post-header")
        db_len = event[at + 8]
        (status_len,) = struct.unpack_from("<H", event, at + 11)
        return at + phl + status_len + db_len + 1
    v2 = etype >= 169
    phl = (_ROWS_HEADER_V2 if v2 else _ROWS_HEADER_V1) if post_header_len is None else post_header_len
    at = _HEADER_LEN + _ROWS_HEADER_V1
    if phl == _ROWS_HEADER_V2:  # as the server does: the post-header length says whether extra data follows
        if at + 2 > end:
            raise CompressedEventError("event ends inside its post-header")
        (extra,) = struct.unpack_from("<H", event, at)
        if extra < 2:
            raise CompressedEventError(f"extra data length {extra} is below its own 2 bytes")
        at += extra
    width, at = _packed_int(event, at, end)
    bitmaps = 2 if COMPRESSED_EVENT_TYPES[etype] in _UPDATE_TYPES else 1
    return at + bitmaps * ((width + 7) >> 3)


def uncompressed_event(event: bytes, post_header_len: int | None = None, checksum: bool = False) -> bytes:
    """The plain event that the compressed ``event`` (its bytes from the common header on)
    stands for. ``post_header_len`` is the format description's post-header length of the
    compressed type (None: MariaDB's); ``checksum``: the binlog's events end in a CRC32."""
    if len(event) < _HEADER_LEN:
        raise CompressedEventError("event shorter than its header")
    etype = event[_TYPE_AT]
    if etype not in COMPRESSED_EVENT_TYPES:
        raise CompressedEventError(f"event type {etype} is not a compressed one")
    (size,) = struct.unpack_from("<I", event, _LENGTH_AT)
    if size > len(event):
        raise CompressedEventError(f"event is truncated ({len(event)} of its {size} bytes)")
    end = size - (_CHECKSUM_LEN if checksum else 0)
    start = _tail_start(event, etype, post_header_len, end)
    if start >= end:
        raise CompressedEventError("event ends before its compressed part")
    tail = uncompress_tail(event, start, end)
    new_size = start + len(tail) + (_CHECKSUM_LEN if checksum else 0)
    out = bytearray(event[:start])
    out[_TYPE_AT] = COMPRESSED_EVENT_TYPES[etype]
    struct.pack_into("<I", out, _LENGTH_AT, new_size)
    out += tail
    if checksum:
        out += struct.pack("<I", zlib.crc32(out))
    return bytes(out)

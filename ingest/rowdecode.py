"""Fast decoding of binlog rows events into exactly what mysql-replication returns.

mysql-replication decodes every column of every row through a chain of generic calls
(``_read_column_data`` -> ``__read_values_name`` -> type dispatch -> ``packet.read``):
tens of microseconds per row. Here, once per table version (the parsed TABLE_MAP's
``Table``) and columns-present bitmap, Python source is generated that decodes all the
rows of an event in one pass over the event's bytes (``struct`` / ``int.from_bytes`` on
the packet buffer, no per-column dispatch), and compiled.

The values, their types, the ``none_sources`` dicts and the dict layout are those of
mysql-replication 1.0.17 (``RowsEvent._read_column_data`` and helpers), quirks included
(e.g. TIME2's fraction read as a separate signed number, YEAR 0 -> 1900, zero dates ->
None). Correctness never depends on coverage:

* a table with a column type or metadata this module does not handle (MySQL's binary
  JSON, the pre-5.0 DECIMAL, NEWDATE, missing column names, ENUM without its values, ...)
  gets no decoder and its events are decoded by the library;
* a decoder that meets anything unexpected in the data (a value outside what the server
  writes, bytes left over or missing at the end of the event, a decode error) raises,
  and that event is decoded again by the library, so whatever the library returns or
  raises for it is what the caller gets.

``FastWriteRowsEvent`` / ``FastUpdateRowsEvent`` / ``FastDeleteRowsEvent`` are the
library's classes with ``rows`` decoded this way; ingest.binlog builds them (through the
library's packet wrapper or straight from the packet bytes).
"""

from __future__ import annotations

import codecs
import threading

from pymysql.protocol import MysqlPacket
from pymysqlreplication.constants import BINLOG, FIELD_TYPE
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import DeleteRowsEvent, RowsEvent, UpdateRowsEvent, WriteRowsEvent

from ingest.rowcodegen import FSP_BYTES, HANDLED_TYPES, DecoderSource, Unsupported

__all__ = [
    "TableDecoder",
    "decoder_for",
    "FastWriteRowsEvent",
    "FastUpdateRowsEvent",
    "FastDeleteRowsEvent",
    "FAST_ROWS_CLASSES",
    "STOCK_ROWS_CLASSES",
    "STATS",
]


#: counters (events decoded natively / by the library, and why), for tests and benches
STATS = {"native_events": 0, "library_events": 0, "library_tables": 0, "data_fallbacks": 0}

# --------------------------------------------------------------------------- code generation


_MAX_FUNCTIONS = 64  # per table version: one per kind and columns-present bitmap(s)


def _encodings(columns) -> list:
    """Per column, what mysql-replication's ``__read_string`` decodes with: None (no
    charset known: utf-8), a codec name, or b"" (the codec is unknown to Python: bytes)."""
    out = []
    for c in columns:
        name = getattr(c, "character_set_name", None)
        if c.type not in (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING, FIELD_TYPE.BLOB) or name is None:
            out.append(None)
            continue
        enc = RowsEvent.charset_to_encoding(name)
        try:
            codecs.lookup(enc)
        except LookupError:
            out.append(b"")
        else:
            out.append(enc)
    return out


class TableDecoder:
    """Generated row decoders for one table version (one parsed TABLE_MAP)."""

    def __init__(self, columns, ignore_decode_errors: bool = False):
        self.columns = list(columns)
        self.errors = "ignore" if ignore_decode_errors else "strict"
        self.reason = None
        self._functions: dict = {}
        self._sources: dict = {}
        self._lock = threading.Lock()
        try:
            self._check()
            self._encodings = _encodings(self.columns)
            # generate the full-image function now, so an unsupported detail shows here
            self.function("write", _full_bitmap(len(self.columns)), None)
        except Unsupported as e:
            self.reason = str(e)

    @property
    def supported(self) -> bool:
        return self.reason is None

    def _check(self) -> None:
        names = set()
        for c in self.columns:
            if c.type not in HANDLED_TYPES:
                raise Unsupported(f"column type {c.type}")
            if not c.name or not isinstance(c.name, str) or c.name in names:
                raise Unsupported("column names unknown (no binlog_row_metadata=FULL?)")
            names.add(c.name)
            if (
                c.type in (FIELD_TYPE.DATETIME2, FIELD_TYPE.TIME2, FIELD_TYPE.TIMESTAMP2)
                and getattr(c, "fsp", None) not in FSP_BYTES
            ):
                raise Unsupported(f"fsp {getattr(c, 'fsp', None)}")
            if c.type == FIELD_TYPE.ENUM and not c.enum_values:
                raise Unsupported("ENUM values unknown")

    def function(self, kind: str, bitmap1: bytes, bitmap2: bytes | None = None):
        """The decoder ``decode(data, pos, end) -> rows`` for rows events of ``kind``
        ('write', 'delete' or 'update') with these columns-present bitmaps (None once
        the table has _MAX_FUNCTIONS of them: the library decodes other shapes)."""
        key = (kind == "update", bitmap1, bitmap2)
        fn = self._functions.get(key)
        if fn is None:
            with self._lock:
                fn = self._functions.get(key)
                if fn is None:
                    if len(self._functions) >= _MAX_FUNCTIONS:  # partial images of ever new shapes
                        return None
                    gen = DecoderSource(self.columns, self._encodings, self.errors)
                    src = gen.function("update" if kind == "update" else "write", bitmap1, bitmap2)
                    ns = gen.ns
                    exec(compile(src, f"<rowdecode {kind}>", "exec"), ns)
                    fn = ns["decode"]
                    self._sources[key] = src
                    self._functions[key] = fn
        return fn

    def source(self, kind: str, bitmap1: bytes, bitmap2: bytes | None = None) -> str:
        self.function(kind, bitmap1, bitmap2)
        return self._sources[(kind == "update", bitmap1, bitmap2)]


def _full_bitmap(n: int) -> bytes:
    b = bytearray((n + 7) // 8)
    for i in range(n):
        b[i >> 3] |= 1 << (i & 7)
    return bytes(b)


_signature_cache: dict = {}


def _signature(table) -> tuple:
    sig = []
    for c in table.columns:
        d = c.__dict__
        sig.append(
            tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in d.items() if not k.startswith("_")))
        )
    return tuple(sig)


def decoder_for(table, ignore_decode_errors: bool = False) -> TableDecoder | None:
    """The decoder of a parsed table map's ``Table`` (cached on it, and by the columns'
    description for Table objects that are parsed anew), or None if the library must
    decode this table."""
    attr = "_rd_decoder_ign" if ignore_decode_errors else "_rd_decoder"
    dec = table.__dict__.get(attr)
    if dec is None:
        try:
            sig = (ignore_decode_errors, _signature(table))
        except TypeError:  # unhashable metadata: no cache by signature
            sig = None
        dec = _signature_cache.get(sig) if sig is not None else None
        if dec is None:
            dec = TableDecoder(table.columns, ignore_decode_errors)
            if not dec.supported:
                STATS["library_tables"] += 1
            if sig is not None:
                if len(_signature_cache) > 4096:
                    _signature_cache.clear()
                _signature_cache[sig] = dec
        table.__dict__[attr] = dec
    return dec if dec.supported else None


# --------------------------------------------------------------------------- events

STOCK_ROWS_CLASSES = {
    BINLOG.WRITE_ROWS_EVENT_V1: WriteRowsEvent,
    BINLOG.WRITE_ROWS_EVENT_V2: WriteRowsEvent,
    BINLOG.UPDATE_ROWS_EVENT_V1: UpdateRowsEvent,
    BINLOG.UPDATE_ROWS_EVENT_V2: UpdateRowsEvent,
    BINLOG.DELETE_ROWS_EVENT_V1: DeleteRowsEvent,
    BINLOG.DELETE_ROWS_EVENT_V2: DeleteRowsEvent,
}


class _FastRows:
    """Mixin for the library's rows event classes: ``rows`` decoded by a TableDecoder.

    Built either by the library (``__init__`` through a BinLogPacketWrapper: the row data
    is read from the wrapper's packet, which is left untouched, so the library can still
    decode it) or by ingest.binlog straight from the packet bytes (``_rd_data``,
    ``_rd_pos``, ``_rd_end``, ``_rd_fn`` set; no wrapper: ``_rd_library_rows`` rebuilds
    the library's event from the bytes when the library must decode)."""

    _rd_kind = "write"
    _RowsEvent__rows = None
    _rd_data = None
    _rd_fn = None
    _rd_pos = 0
    _rd_end = 0
    _rd_use_checksum = False
    # what BinLogEvent.__init__ sets and the lean construction leaves to the class
    _verify_checksum = False
    _is_event_valid = None
    _processed = True
    complete = True

    @property
    def rows(self):
        rows = self._RowsEvent__rows
        if rows is None:
            fn = self._rd_fn
            if fn is not None and self.complete:
                try:
                    rows = fn(self._rd_data, self._rd_pos, self._rd_end)
                except Exception:  # anything unexpected: the library decides (and raises if it does)
                    STATS["data_fallbacks"] += 1
                    self._fetch_rows()
                    return self._RowsEvent__rows
                STATS["native_events"] += 1
                self._RowsEvent__rows = rows
                return rows
            self._fetch_rows()
            rows = self._RowsEvent__rows
        return rows

    def _fetch_rows(self):
        if not self.complete:
            self._RowsEvent__rows = []
            return
        rows = self._rd_decode() if self._rd_data is None else None
        if rows is not None:
            STATS["native_events"] += 1
            self._RowsEvent__rows = rows
            return
        STATS["library_events"] += 1
        if self._rd_data is not None:
            self._RowsEvent__rows = self._rd_library_rows()
        else:
            RowsEvent._fetch_rows(self)

    def _rd_decode(self):
        """Decode an event built by the library's __init__ (from its packet wrapper)."""
        table = self.table_map.get(self.table_id)
        if table is None:
            return None
        dec = decoder_for(table, self._ignore_decode_errors)
        if dec is None:
            return None
        pk = self.packet
        if getattr(pk, "_BinLogPacketWrapper__data_buffer", b"x"):
            return None
        raw = pk.packet
        data, pos = raw._data, raw._position
        end = pos + self.event_size - pk.read_bytes
        kind = self._rd_kind
        fn = dec.function(kind, self.columns_present_bitmap, self.columns_present_bitmap2 if kind == "update" else None)
        if fn is None:
            return None
        try:
            return fn(data, pos, end)
        except Exception:  # anything unexpected: the library decides (and raises if it does)
            STATS["data_fallbacks"] += 1
            return None

    def _rd_library_rows(self):
        """Decode with the library: rebuild its event from the packet bytes."""
        stock = STOCK_ROWS_CLASSES[self.event_type]
        wrapper = BinLogPacketWrapper(
            MysqlPacket(self._rd_data, "utf8"),
            {self.table_id: self._rd_table},
            self._ctl_connection,
            self.mysql_version,
            self._rd_use_checksum,
            frozenset([stock]),
            None,
            None,
            None,
            None,
            False,
            self._ignore_decode_errors,
            False,
            True,
            False,
            False,
            self._post_header_lengths,
        )
        event = wrapper.event
        if event is None:  # cannot happen: the table is in the map given
            raise RuntimeError("mysql-replication did not build the rows event")
        return event.rows


class FastWriteRowsEvent(_FastRows, WriteRowsEvent):
    _rd_kind = "write"


class FastUpdateRowsEvent(_FastRows, UpdateRowsEvent):
    _rd_kind = "update"


class FastDeleteRowsEvent(_FastRows, DeleteRowsEvent):
    _rd_kind = "delete"


FAST_ROWS_CLASSES = {
    BINLOG.WRITE_ROWS_EVENT_V1: FastWriteRowsEvent,
    BINLOG.WRITE_ROWS_EVENT_V2: FastWriteRowsEvent,
    BINLOG.UPDATE_ROWS_EVENT_V1: FastUpdateRowsEvent,
    BINLOG.UPDATE_ROWS_EVENT_V2: FastUpdateRowsEvent,
    BINLOG.DELETE_ROWS_EVENT_V1: FastDeleteRowsEvent,
    BINLOG.DELETE_ROWS_EVENT_V2: FastDeleteRowsEvent,
}

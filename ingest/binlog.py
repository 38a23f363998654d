"""Binlog reader adapter (mysql-replication), with a cache of parsed table maps, generated
row decoders (ingest.rowdecode) and a lean packet path for the frequent events.

* Table maps: mysql-replication parses every TABLE_MAP event from scratch, and the server
  writes one before every rows event. A table map's body is byte-identical for as long as
  the table (and its table id) does not change, so the parsed state is cached by the
  body's bytes (``CachedTableMapEvent``).
* Rows: ``event.rows`` of WRITE/UPDATE/DELETE rows events is decoded by code generated
  once per table version (ingest.rowdecode), returning exactly what the library returns;
  tables or data it does not handle are decoded by the library.
* Packets: ``IngestBinLogStreamReader.fetchone`` reads the packet bytes off the socket
  itself and builds table-map (cache hits) and rows events straight from them, without
  mysql-replication's per-field ``BinLogPacketWrapper`` reads. Every other event, and
  anything unusual (filters, checksum verification, a table map not seen before, a
  table the decoders do not handle, extra rows-event header data), goes through the
  library's own path. ``event.packet`` of the fast events is a ``PacketHeader`` carrying
  the header fields (timestamp, event_type, server_id, event_size, log_pos, flags).
* Compressed events (MariaDB's ``log_bin_compress=ON``): turned back into the plain event
  (ingest.binlog_compression) before either path; ``event.packet.event_size`` stays the
  compressed size, so that ``log_pos - event_size`` is still the event's start in the binlog.
* Event types: one that ingest does not read and that may carry changes stops ingest with
  one line (ingest.event_types), where the library would drop it silently.

Nothing here patches mysql-replication globally: other readers in the process get the
stock classes.
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from operator import itemgetter

import pymysql
from pymysql import err as pymysql_err
from pymysql.constants import CR
from pymysql.protocol import MysqlPacket
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.binlogstream import MYSQL_EXPECTED_ERROR_CODES
from pymysqlreplication.constants import BINLOG
from pymysqlreplication.event import (
    HeartbeatLogEvent,
    MariadbGtidEvent,
    QueryEvent,
    RotateEvent,
    XAPrepareEvent,
    XidEvent,
)
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import DeleteRowsEvent, TableMapEvent, UpdateRowsEvent, WriteRowsEvent

from ingest.binlog_compression import COMPRESSED_EVENT_TYPES, CompressedEventError, uncompressed_event
from ingest.errors import IngestError
from ingest.event_types import IGNORABLE_FLAG, PASSED_OVER_TYPES, READ_TYPES, event_type_name, unhandled_event_message
from ingest.rowdecode import (
    FAST_ROWS_CLASSES,
    STOCK_ROWS_CLASSES,
    FastDeleteRowsEvent,
    FastUpdateRowsEvent,
    FastWriteRowsEvent,
    decoder_for,
)

_CACHE_SIZE = 20_000
_cache: OrderedDict[bytes, dict] = OrderedDict()


def _cache_key(optional_meta_data, body: bytes):
    return (bool(optional_meta_data), body)


class CachedTableMapEvent(TableMapEvent):
    def __init__(self, from_packet, event_size, table_map, ctl_connection, **kwargs):
        raw = from_packet.packet
        if from_packet._BinLogPacketWrapper__data_buffer:  # cannot peek at the body: no cache
            super().__init__(from_packet, event_size, table_map, ctl_connection, **kwargs)
            return
        # peek, do not read-and-unread: the library finds the optional metadata (column
        # names, charsets, signedness, ENUM/SET values) by the underlying packet's position
        key = _cache_key(kwargs.get("optional_meta_data"), raw._data[raw._position : raw._position + event_size])
        state = _cache.get(key)
        if state is not None:
            from_packet.advance(event_size)
            self.__dict__.update(state)
            self.packet = from_packet
            self.timestamp = from_packet.timestamp
            table_map[self.table_id] = self.table_obj
            return
        super().__init__(from_packet, event_size, table_map, ctl_connection, **kwargs)
        if self._processed:
            state = dict(self.__dict__)
            state.pop("packet", None)
            _cache[key] = state
            if len(_cache) > _CACHE_SIZE:
                _cache.popitem(last=False)


class _PacketWrapper(BinLogPacketWrapper):
    """The library's packet wrapper with ingest's table-map and rows event classes."""

    _BinLogPacketWrapper__event_map = {
        **BinLogPacketWrapper._BinLogPacketWrapper__event_map,
        BINLOG.TABLE_MAP_EVENT: CachedTableMapEvent,
        **FAST_ROWS_CLASSES,
    }


ROW_EVENTS = (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)
EVENTS = [
    MariadbGtidEvent,
    QueryEvent,
    XidEvent,
    XAPrepareEvent,
    RotateEvent,
    HeartbeatLogEvent,
    CachedTableMapEvent,
    FastWriteRowsEvent,
    FastUpdateRowsEvent,
    FastDeleteRowsEvent,
]


class PacketHeader(tuple):
    """``event.packet`` of the events built without a BinLogPacketWrapper: the event
    header's fields (a tuple, built in one call from the header bytes)."""

    __slots__ = ()
    timestamp = property(itemgetter(0))
    event_type = property(itemgetter(1))
    server_id = property(itemgetter(2))
    event_size = property(itemgetter(3))
    log_pos = property(itemgetter(4))
    flags = property(itemgetter(5))
    read_bytes = 0

    def __repr__(self):
        return (
            f"PacketHeader(timestamp={self[0]}, event_type={self[1]}, server_id={self[2]}, "
            f"event_size={self[3]}, log_pos={self[4]}, flags={self[5]})"
        )


# OK byte, then timestamp, event type, server id, event size, log position, flags
_HEADER = struct.Struct("<xIBIIIH").unpack_from
_new_header = tuple.__new__
_LOG_POS = struct.Struct("<14xI").unpack_from  # the event header's log_pos (after the OK byte)
_KNOWN_MAP = object()  # _lean_table_map: the same map as the one the reader already holds


_MAX_PACKET_LEN = 2**24 - 1
_R = "_BinLogStreamReader__"
_CONNECTED_STREAM = _R + "connected_stream"
_CONNECTED_CTL = _R + "connected_ctl"
_USE_CHECKSUM = _R + "use_checksum"
_OPTIONAL_META_DATA = _R + "optional_meta_data"
_POST_HEADER_LENGTHS = _R + "post_header_lengths"
_new_object = object.__new__


def _lost(conn, e=None):
    conn._force_close()
    return pymysql_err.OperationalError(
        CR.CR_SERVER_LOST, "Lost connection to MySQL server during query" + (f" ({e})" if e else "")
    )


def _read_packet_bytes(conn) -> bytes:
    """pymysql's ``Connection._read_packet`` without the MysqlPacket: the payload bytes
    (same checks, same errors)."""
    rfile = getattr(conn, "_rfile", None)
    if rfile is None or not hasattr(conn, "_next_seq_id"):
        return conn._read_packet()._data
    if conn._current_timeout != conn._read_timeout:
        conn._sock.settimeout(conn._read_timeout)
        conn._current_timeout = conn._read_timeout
    read = rfile.read
    buff = []
    while True:
        try:
            header = read(4)
            if len(header) < 4:
                raise _lost(conn)
            n = header[0] | header[1] << 8 | header[2] << 16
            seq = header[3]
            if seq != conn._next_seq_id:
                conn._force_close()
                if seq == 0:
                    raise pymysql_err.OperationalError(
                        CR.CR_SERVER_LOST, "Lost connection to MySQL server during query"
                    )
                raise pymysql_err.InternalError(
                    "Packet sequence number wrong - got %d expected %d" % (seq, conn._next_seq_id)
                )
            conn._next_seq_id = (seq + 1) % 256
            data = read(n)
            if len(data) < n:
                raise _lost(conn)
        except pymysql_err.MySQLError:
            raise
        except OSError as e:
            raise _lost(conn, e)
        except BaseException:
            conn._force_close()
            raise
        if n < _MAX_PACKET_LEN:
            if buff:
                buff.append(data)
                data = b"".join(buff)
            break
        buff.append(data)
    if data[0] == 0xFF:
        packet = MysqlPacket(data, conn.encoding)
        if conn._result is not None and conn._result.unbuffered_active is True:
            conn._result.unbuffered_active = False
        packet.raise_for_error()
    return data


class IngestBinLogStreamReader(BinLogStreamReader):
    """mysql-replication's BinLogStreamReader (1.0.17) with ingest's event classes and a
    lean path for table-map cache hits and rows events (see the module docstring).
    ``fetchone`` follows the library's loop step for step."""

    def __init__(self, *args, on_stream_connect=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._on_stream_connect = on_stream_connect
        allowed = set(getattr(self, _R + "allowed_events"))
        # callers naming the library's rows classes get ingest's (subclasses of them)
        for etype, fast in FAST_ROWS_CLASSES.items():
            if STOCK_ROWS_CLASSES[etype] in allowed:
                allowed.add(fast)
        if TableMapEvent in allowed:
            allowed.add(CachedTableMapEvent)
        setattr(self, _R + "allowed_events", frozenset(allowed))
        in_packet = set(getattr(self, _R + "allowed_events_in_packet")) | allowed | {CachedTableMapEvent}
        setattr(self, _R + "allowed_events_in_packet", frozenset(in_packet))
        self._fast_rows = {etype: cls for etype, cls in FAST_ROWS_CLASSES.items() if cls in allowed}
        self._return_table_maps = CachedTableMapEvent in allowed
        g = lambda name: getattr(self, _R + name)  # noqa: E731
        self._lean = (
            g("only_tables") is None
            and g("ignored_tables") is None
            and g("only_schemas") is None
            and g("ignored_schemas") is None
            and not g("freeze_schema")
            and not g("verify_checksum")
        )
        self._ignore_decode_errors = bool(g("ignore_decode_errors"))
        self._lean_attr = "_rd_lean_ign" if self._ignore_decode_errors else "_rd_lean"
        self._common = None
        self._common_ctl = None

    # MariaDB's COM_BINLOG_DUMP: the library declares a payload one byte shorter than it
    # sends (the 4 bytes of empty file name); a non-blocking dump then ends in a connection
    # reset instead of EOF, which the library answers by reconnecting from the start.
    def _BinLogStreamReader__set_mariadb_settings(self):
        prelude = BinLogStreamReader._BinLogStreamReader__set_mariadb_settings(self)
        return (len(prelude) - 4).to_bytes(4, "little") + prelude[4:]

    def fetchone(self):
        # per event: the packet read and the lean path stay inline (a method call per event
        # costs ~4% of the rate on one-row events); the cold parts are helpers
        sd = self.__dict__
        while True:
            if self.end_log_pos and self.is_past_end_log_pos:
                return None
            if not (sd[_CONNECTED_STREAM] and sd[_CONNECTED_CTL]):
                self._connect(sd)
            try:
                data = _read_packet_bytes(self._stream_connection)
            except pymysql.OperationalError as error:
                self._stream_failed(error, sd)
                raise
            if data[0] == 0xFE and len(data) < 9:  # EOF packet: the stream ended
                self.close()
                return None
            if data[0] != 0 or len(data) < 7:  # not an OK packet
                continue
            compressed_size = 0
            if data[5] not in READ_TYPES:
                self._refuse_unhandled(data)  # or go on: the library passes over it
            elif data[5] in COMPRESSED_EVENT_TYPES:
                data, compressed_size = self._uncompressed(data, sd)
            if self._lean:
                etype = data[5]
                event = None
                if etype == BINLOG.TABLE_MAP_EVENT:
                    event = self._lean_table_map(data, sd)
                    if event is _KNOWN_MAP:
                        log_pos = _LOG_POS(data)[0]
                        if log_pos:
                            self.log_pos = log_pos
                        if self.end_log_pos and self.log_pos >= self.end_log_pos:
                            self.is_past_end_log_pos = True
                        continue
                elif etype in self._fast_rows:
                    event = self._lean_rows(data, etype, sd)
                if event is not None:
                    header = event.packet
                    if header[4]:
                        self.log_pos = header[4]
                    if self.end_log_pos and self.log_pos >= self.end_log_pos:
                        self.is_past_end_log_pos = True
                    if self.skip_to_timestamp and header[0] < self.skip_to_timestamp:
                        continue
                    if etype == BINLOG.TABLE_MAP_EVENT:
                        self.table_map[event.table_id] = event.table_obj
                        if not self._return_table_maps:
                            continue
                    if compressed_size:
                        event.packet = _new_header(PacketHeader, (*header[:3], compressed_size, *header[4:]))
                    return event
            event = self._library_event(data, sd)
            if event is not None:
                if compressed_size:
                    event.packet.event_size = compressed_size
                return event

    def _refuse_unhandled(self, data) -> None:
        """An event type ingest does not read: passed over if it carries no change (or the
        server marks it ignorable), else ingest stops (never skips a change silently)."""
        etype = data[5]
        if etype in PASSED_OVER_TYPES or _HEADER(data)[5] & IGNORABLE_FLAG:
            return
        raise IngestError(unhandled_event_message(etype, self.log_file, self._event_start(data)))

    def _uncompressed(self, data, sd) -> tuple[bytes, int]:
        """A compressed event (log_bin_compress=ON) as the plain event it stands for, and
        the compressed event's size: what the binlog holds, so positions stay the server's."""
        etype, size = data[5], _HEADER(data)[3]
        phls = sd[_POST_HEADER_LENGTHS]
        try:
            plain = uncompressed_event(
                data[1:], phls[etype - 1] if phls and etype <= len(phls) else None, bool(sd[_USE_CHECKSUM])
            )
        except CompressedEventError as exc:
            raise IngestError(
                f"compressed binlog event {event_type_name(etype)} at {self.log_file}:{self._event_start(data)} "
                f"cannot be decompressed: {exc}. Ingest stopped before it; check the binlog with mariadb-binlog "
                f"(a corrupt binlog: re-snapshot the captured tables and start ingest past it)"
            ) from None
        return b"\x00" + plain, size

    @staticmethod
    def _event_start(data) -> int:
        header = _HEADER(data)
        return header[4] - header[3]

    def open(self) -> None:
        """Connects now (else the first ``fetchone`` does): ``on_stream_connect`` has run
        when this returns."""
        self._connect(self.__dict__)

    def _connect(self, sd) -> None:
        if not sd[_CONNECTED_STREAM]:
            if self._on_stream_connect is None:
                getattr(self, _R + "connect_to_stream")()
            else:
                self._connect_checked_stream()
        if not sd[_CONNECTED_CTL]:
            getattr(self, _R + "connect_to_ctl")()

    def _connect_checked_stream(self) -> None:
        """The library's stream connection, with ``on_stream_connect(conn)`` run on it before
        the binlog dump is requested: the check sees the very server the events come from
        (behind a proxy or a virtual IP, a second connection could reach another one)."""
        connect, check = self.pymysql_wrapper, self._on_stream_connect

        def checked(**settings):
            conn = connect(**settings)
            try:
                check(conn)
            except BaseException:
                conn.close()
                raise
            return conn

        self.pymysql_wrapper = checked
        try:
            getattr(self, _R + "connect_to_stream")()
        finally:
            self.pymysql_wrapper = connect

    def _stream_failed(self, error: pymysql.OperationalError, sd) -> None:
        code, message = error.args
        if code in MYSQL_EXPECTED_ERROR_CODES:
            # no silent reconnect (the library's loop does one): it would start again
            # from the GTID state the reader was opened with and replay what ingest
            # already committed; ingest's loop restarts from its committed position
            self._stream_connection.close()
            sd[_CONNECTED_STREAM] = False

    def _library_event(self, data, sd):
        """The event as mysql-replication parses it; None for one not to return."""
        binlog_event = _PacketWrapper(
            MysqlPacket(data, self._stream_connection.encoding),
            self.table_map,
            self._ctl_connection,
            self.mysql_version,
            sd[_R + "use_checksum"],
            sd[_R + "allowed_events_in_packet"],
            sd[_R + "only_tables"],
            sd[_R + "ignored_tables"],
            sd[_R + "only_schemas"],
            sd[_R + "ignored_schemas"],
            sd[_R + "freeze_schema"],
            sd[_R + "ignore_decode_errors"],
            sd[_R + "verify_checksum"],
            sd[_R + "optional_meta_data"],
            sd[_R + "enable_logging"],
            sd[_R + "use_column_name_cache"],
            sd[_R + "post_header_lengths"],
        )
        if binlog_event.event_type == BINLOG.ROTATE_EVENT:
            self.log_pos = binlog_event.event.position
            self.log_file = binlog_event.event.next_binlog
            # table ids are not persistent across server restarts (which rotate)
            if binlog_event.timestamp != 0:
                self.table_map = {}
        elif binlog_event.log_pos:
            self.log_pos = binlog_event.log_pos
        if self.end_log_pos and self.log_pos >= self.end_log_pos:
            self.is_past_end_log_pos = True
        if binlog_event.event_type == BINLOG.FORMAT_DESCRIPTION_EVENT and binlog_event.event is not None:
            self.mysql_version = binlog_event.event.mysql_version
            sd[_R + "post_header_lengths"] = binlog_event.event.post_header_len
        if self.skip_to_timestamp and binlog_event.timestamp < self.skip_to_timestamp:
            return None
        if binlog_event.event_type == BINLOG.TABLE_MAP_EVENT and binlog_event.event is not None:
            self.table_map[binlog_event.event.table_id] = binlog_event.event.get_table()
        if binlog_event.event is None or (binlog_event.event.__class__ not in sd[_R + "allowed_events"]):
            return None
        return binlog_event.event

    # -------------------------------------------------------------- lean event building

    def _lean_table_map(self, data, sd):
        header = _new_header(PacketHeader, _HEADER(data))
        size = header[3] - (23 if sd[_USE_CHECKSUM] else 19)
        if size < 0 or 20 + size > len(data):
            return None
        state = _cache.get((bool(sd[_OPTIONAL_META_DATA]), data[20 : 20 + size]))
        if state is None:
            return None
        if self.table_map.get(state["table_id"]) is state["table_obj"]:
            # the map this reader returned last for the table id (MariaDB writes one before
            # every rows event): nothing new for the consumer, no event built
            return _KNOWN_MAP
        d = state.copy()
        d["packet"] = header
        d["timestamp"] = header[0]
        event = _new_object(CachedTableMapEvent)
        event.__dict__ = d
        return event

    def _lean_table(self, table):
        """What every rows event of ``table`` shares (kept on the table map object), or
        False when its rows cannot be decoded natively (the library decodes them)."""
        dec = decoder_for(table, self._ignore_decode_errors)
        lean = (
            (
                dec,
                table.table_id,
                len(table.columns),
                (len(table.columns) + 7) >> 3,
                table.columns,
                table.primary_key,
                table.schema,
                table.table,
            )
            if dec is not None
            else False
        )
        table.__dict__[self._lean_attr] = lean
        return lean

    def _refresh_common(self, ctl, sd) -> None:
        """The fields of every lean rows event that depend on the control connection."""
        self._common = {
            "_ctl_connection": ctl,
            "dbms": ctl._get_dbms(),
            "_ignore_decode_errors": self._ignore_decode_errors,
            "_rd_use_checksum": sd[_USE_CHECKSUM],
        }
        self._common_ctl = ctl

    def _lean_rows(self, data, etype, sd):
        table = self.table_map.get(int.from_bytes(data[20:26], "little"))
        if table is None:
            return None
        lean = table.__dict__.get(self._lean_attr)
        if lean is None:
            lean = self._lean_table(table)
        if not lean:
            return None
        dec, table_id, ncols, nbytes, columns, primary_key, schema, table_name = lean
        header = _new_header(PacketHeader, _HEADER(data))
        size = header[3] - (23 if sd[_USE_CHECKSUM] else 19)
        end = 20 + size
        if end > len(data):
            return None
        phls = sd[_POST_HEADER_LENGTHS]
        if etype >= BINLOG.WRITE_ROWS_EVENT_V2:
            phl = phls[etype - 1] if phls and etype <= len(phls) else 10
            if phl < 10 or data[28] | data[29] << 8 > 2:  # extra row data (NDB, partition info)
                return None
        else:
            phl = phls[etype - 1] if phls and etype <= len(phls) else 8
            if phl < 8:
                return None
        p = 20 + phl
        if p >= end or data[p] != ncols:  # also: >= 251 (longer length), or a different width
            return None
        p += 1
        q = p + nbytes
        bitmap = data[p:q]
        cls = self._fast_rows[etype]
        if cls is FastUpdateRowsEvent:
            p = q + nbytes
            bitmap2 = data[q:p]
            fn = dec.function("update", bitmap, bitmap2)
        else:
            p = q
            bitmap2 = None
            fn = dec.function("write", bitmap)
        if p > end or fn is None:
            return None
        ctl = self._ctl_connection
        if self._common_ctl is not ctl:
            self._refresh_common(ctl, sd)
        d = self._common.copy()
        d.update(
            packet=header,
            table_map=self.table_map,
            event_type=etype,
            timestamp=header[0],
            event_size=size,
            _post_header_lengths=phls,
            mysql_version=self.mysql_version,
            _RowsEvent__none_sources={},
            table_id=table_id,
            primary_key=primary_key,
            schema=schema,
            table=table_name,
            flags=data[26] | data[27] << 8,
            number_of_columns=ncols,
            columns=columns,
            columns_present_bitmap=bitmap,
            _rd_data=data,
            _rd_pos=p,
            _rd_end=end,
            _rd_table=table,
            _rd_fn=fn,
        )
        if bitmap2 is not None:
            d["columns_present_bitmap2"] = bitmap2
        if etype >= BINLOG.WRITE_ROWS_EVENT_V2:
            d["extra_data_length"] = data[28] | data[29] << 8
        event = _new_object(cls)
        event.__dict__ = d
        return event


def open_reader(
    connect_kwargs: dict,
    server_id: int,
    gtid_state: str,
    heartbeat_s: float = 1.0,
    *,
    silence_s: float = 20.0,
    blocking: bool = True,
    on_connect=None,
) -> BinLogStreamReader:
    """A MariaDB binlog stream starting after ``gtid_state`` (blocking unless told);
    ``on_connect(conn)`` runs on the stream's connection before the dump starts; nothing
    for ``silence_s`` (heartbeats come every ``heartbeat_s``) ends the read with an error."""
    settings = {
        "host": connect_kwargs["host"],
        "port": connect_kwargs["port"],
        "user": connect_kwargs["user"],
        "passwd": connect_kwargs["password"],
        "connect_timeout": connect_kwargs.get("connect_timeout", 10),
        # the server sends a heartbeat every ``heartbeat_s`` while quiet: silence far longer
        # than that is a dead connection (a half-open socket, a dump thread the server ended
        # without closing it), read again instead of waited on for ever
        "read_timeout": silence_s,
    }
    for tls in ("ssl", "ssl_disabled"):  # the TLS settings of MySQLConfig.connect_kwargs
        if tls in connect_kwargs:
            settings[tls] = connect_kwargs[tls]
    return IngestBinLogStreamReader(
        connection_settings=settings,
        server_id=server_id,
        is_mariadb=True,
        auto_position=gtid_state or "",
        blocking=blocking,
        resume_stream=True,
        slave_heartbeat=heartbeat_s,
        only_events=EVENTS,
        on_stream_connect=on_connect,
    )

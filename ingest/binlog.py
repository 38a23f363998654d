"""Binlog reader adapter (mysql-replication), with a cache of parsed table maps.

mysql-replication parses every TABLE_MAP event from scratch, and the server writes one
before every rows event: on one-row-per-statement traffic that parse is most of the
decoding time. A table map's body is byte-identical for as long as the table (and its
table id) does not change, so the parsed state is cached by the body's bytes.
"""

from __future__ import annotations

from collections import OrderedDict

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.constants import BINLOG
from pymysqlreplication.event import (HeartbeatLogEvent, MariadbGtidEvent, QueryEvent, RotateEvent,
                                      XidEvent)
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import (DeleteRowsEvent, TableMapEvent, UpdateRowsEvent,
                                          WriteRowsEvent)

_CACHE_SIZE = 20_000
_cache: OrderedDict[bytes, dict] = OrderedDict()


class CachedTableMapEvent(TableMapEvent):
    def __init__(self, from_packet, event_size, table_map, ctl_connection, **kwargs):
        # peek at the body without consuming it (the parser measures what is left)
        raw = from_packet.packet
        start = raw._position
        body = bytes(raw._data[start:start + event_size])
        state = _cache.get(body)
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
            _cache[body] = state
            if len(_cache) > _CACHE_SIZE:
                _cache.popitem(last=False)


BinLogPacketWrapper._BinLogPacketWrapper__event_map[BINLOG.TABLE_MAP_EVENT] = CachedTableMapEvent

ROW_EVENTS = (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)
EVENTS = [MariadbGtidEvent, QueryEvent, XidEvent, RotateEvent, HeartbeatLogEvent, CachedTableMapEvent,
          *ROW_EVENTS]


def open_reader(connect_kwargs: dict, server_id: int, gtid_state: str,
                heartbeat_s: float = 1.0) -> BinLogStreamReader:
    """A blocking MariaDB binlog stream starting after ``gtid_state``."""
    settings = {"host": connect_kwargs["host"], "port": connect_kwargs["port"],
                "user": connect_kwargs["user"], "passwd": connect_kwargs["password"],
                "connect_timeout": connect_kwargs.get("connect_timeout", 10)}
    if "ssl" in connect_kwargs:
        settings["ssl"] = connect_kwargs["ssl"]
    return BinLogStreamReader(
        connection_settings=settings, server_id=server_id, is_mariadb=True,
        auto_position=gtid_state or "", blocking=True, resume_stream=True,
        slave_heartbeat=heartbeat_s, only_events=EVENTS,
    )

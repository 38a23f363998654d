"""How a snapshot window gets its LOW and HIGH watermarks: one type per ``snapshot.watermarks``.

* ``WatermarkRows`` (``table``, the default): rows written to the watermark table on the
  source, which ingest turns into markers in every partition of the table's topic
  (``merger.dblog``, the marker rule).
* ``merger.snapshot.positional.PositionalWatermarks`` (``positions``): the source's binlog
  positions read around the SELECTs, nothing written (``merger.dblog``, "Watermarks
  without writes").

The runner (``merger.snapshot.runner``) opens a window, asks for ``low`` before its
SELECTs and ``high`` after them (a group of small tables' windows shares each), and
``tick`` when it needs a micro-batch on a quiet source.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import pymysql

from cdc.quoting import quote_ident
from merger import crashpoints
from merger.batch.tables import TableRegistry, TableRuntime

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WindowRef:
    """One open window: its table, runtime, id, and origin (a routed table's server and
    physical table, from the window's chunks; None: the one server's table)."""

    table: str
    rt: TableRuntime | None  # None: a tick's row
    wid: str
    origin: dict | None = None


class WatermarkRows:
    """LOW and HIGH as rows of the watermark table: ``(table_name, window_id, kind)``."""

    writes_to_source = True

    def __init__(
        self,
        watermark_table: str,
        tables: TableRegistry,
        connect: Callable[[str | None], pymysql.Connection],
        prompt: Callable[[], None] | None,
    ):
        self.tables = tables
        self.connect = connect
        self.prompt = prompt  # before each write (min_batch_gap_ms): the records are read at once
        db, name = watermark_table.split(".", 1)
        # REPLACE needs INSERT and DELETE only; INSERT ... ON DUPLICATE KEY UPDATE col =
        # VALUES(col) also needs SELECT on the watermark table (MariaDB checks it per column)
        table = f"{quote_ident(db)}.{quote_ident(name)}"
        self.sql = f"REPLACE INTO {table} (table_name, window_id, kind) VALUES (%s, %s, %s)"
        # per server (a sharded source's shard, None for the one server): one connection
        # kept for the writes; a new one per write cost ~40 ms of CPU (TLS context) and its
        # round trips sat inside every window
        self.conns: dict[str | None, pymysql.Connection] = {}

    def open(self, rt: TableRuntime, wid: str, chunk_ids: list[str], now: float) -> None:
        self.tables.open_window(rt, wid, chunk_ids, now)

    def low(self, windows: list[WindowRef]) -> list[WindowRef]:
        """LOW of each window, one statement per server; returns the windows (all open)."""
        self.write(windows, "LOW")
        return windows

    def high(self, windows: list[WindowRef]) -> None:
        self.write(windows, "HIGH")

    def tick(self, table: str, origin: dict | None) -> None:
        """A TICK row: a marker the reconciler ignores, which brings a micro-batch."""
        self.write([WindowRef(table, None, "tick", origin)], "TICK")

    def write(self, windows: list[WindowRef], kind: str) -> None:
        """The rows of ``windows``, one statement (one transaction) per server. A routed
        table's window names its physical table on its own server (ingest puts the marker in
        the logical table's topic)."""
        per_server: dict[str | None, list[tuple[str, str, str]]] = {}
        for w in windows:
            if w.origin is None:
                per_server.setdefault(None, []).append((w.table, w.wid, kind))
            else:
                name = f"{w.origin['db']}.{w.origin['table']}"
                per_server.setdefault(w.origin["shard"], []).append((name, w.wid, kind))
        for shard, rows in per_server.items():
            self.write_rows(rows, shard)

    def write_rows(self, rows: list[tuple[str, str, str]], shard: str | None = None) -> None:
        """Watermark rows ``(table, window id, kind)`` in one statement: one transaction."""
        if not rows:
            return
        if any(kind == "HIGH" for _t, _w, kind in rows):
            crashpoints.pause("before_high")
        if shard not in self.conns:
            self.conns[shard] = self.connect(shard)
        if self.prompt is not None:
            # the records these rows become are read at the next triggers, not held by the gap
            self.prompt()
        try:
            with self.conns[shard].cursor() as cur:
                cur.execute(self.sql + ", (%s, %s, %s)" * (len(rows) - 1), [v for row in rows for v in row])
        except BaseException:
            conn = self.conns.pop(shard)
            try:
                conn.close()
            except Exception:
                pass
            raise

    def close(self) -> None:
        for conn in self.conns.values():
            try:
                conn.close()
            except Exception:
                pass
        self.conns.clear()

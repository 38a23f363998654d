"""The PostgreSQL sink's connections (one per calling thread) and transactions: each run
is one transaction, its errors mapped to the sink's errors by SQLSTATE."""

from __future__ import annotations

import threading
from typing import Callable

import psycopg

from merger.sinks.base import SinkError, SinkFull, SinkUnavailable, TableFault, TableId
from merger.sinks.postgres.catalog import Catalog
from merger.sinks.postgres.settings import PgSettings

# retried as SinkUnavailable: connection exception (08), transaction rollback such as a
# deadlock (40), insufficient resources (53: out of memory, too many connections) except a
# full disk, operator intervention: shutdown, restart (57)
_TRANSIENT_SQLSTATE_CLASSES = ("08", "40", "53", "57")
DISK_FULL_SQLSTATE = "53100"  # SinkFull: waiting does not free space


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


class Session:
    def __init__(self, settings: PgSettings, catalog: Catalog, prepare: Callable[[psycopg.Connection], None]):
        """``prepare(conn)`` runs once, in a transaction, after the first connection (it
        creates the control table)."""
        self.settings = settings
        self.catalog = catalog
        self.prepare = prepare
        self._local = threading.local()
        self._conns: list[psycopg.Connection] = []
        self._lock = threading.Lock()
        self._prepared = False

    def connection(self) -> psycopg.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is not None and not conn.closed:
            return conn
        s = self.settings
        try:
            conn = psycopg.connect(
                host=s.host,
                port=s.port,
                user=s.user,
                password=s.password,
                dbname=s.dbname,
                connect_timeout=s.connect_timeout,
                application_name=s.application_name,
                autocommit=True,
            )
        except psycopg.OperationalError as exc:
            raise SinkUnavailable(f"{s.where()} is unreachable: {_first_line(exc)}") from None
        self._local.conn = conn
        with self._lock:
            self._conns.append(conn)
        if not self._prepared:
            self.run(self.prepare)
            self._prepared = True
        return conn

    def close(self) -> None:
        with self._lock:
            for c in self._conns:
                try:
                    c.close()
                except Exception:
                    pass
            self._conns.clear()
        self._local = threading.local()

    def run(self, fn, *args, table: TableId | None = None):
        """Run fn(conn, *args) inside one transaction, mapping errors to sink errors (a write
        of ``table`` that its sink table refuses: ``TableFault``, which pauses that table)."""
        conn = self.connection()
        try:
            with conn.transaction():
                return fn(conn, *args)
        except (SinkError, KeyboardInterrupt):
            raise
        except (psycopg.ProgrammingError, psycopg.IntegrityError, psycopg.DataError) as exc:
            if table is None:
                raise SinkError(f"PostgreSQL error: {_first_line(exc)}") from None
            self.catalog.forget(table)  # read the table's definition again on the next write
            schema, name = self.catalog.target_name(table)
            raise TableFault(
                f"table {table}: the PostgreSQL table {schema}.{name} refuses the merger's write "
                f"({exc.sqlstate}: {_first_line(exc)}): was it altered or dropped by someone else? Undo that (or drop "
                f"the table), then `cdc resume {table.database}.{table.table}` (a dropped table is created again and "
                f"snapshotted), or `cdc snapshot {table.database}.{table.table}` rebuilds it"
            ) from None
        except psycopg.OperationalError as exc:
            if conn.closed or conn.broken:
                self._local.conn = None
                raise SinkUnavailable(f"{self.settings.where()}: connection lost: {_first_line(exc)}") from None
            if exc.sqlstate == DISK_FULL_SQLSTATE:
                raise SinkFull(
                    f"{self.settings.where()}: disk full ({_first_line(exc)}): free space on the PostgreSQL "
                    "server (or move the sink's tables to a tablespace with room), then start the merger again; "
                    "nothing is lost, the batch was not committed and is written again"
                ) from None
            if (exc.sqlstate or "")[:2] in _TRANSIENT_SQLSTATE_CLASSES:
                raise SinkUnavailable(f"{self.settings.where()}: {_first_line(exc)}") from None
            raise SinkError(f"PostgreSQL error: {_first_line(exc)}") from None
        except psycopg.Error as exc:
            raise SinkError(f"PostgreSQL error: {_first_line(exc)}") from None

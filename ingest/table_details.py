"""What the source's information_schema says about a table, read on one connection of its
own and cached per table until a DDL names the table.

The connection is shared with the process's idle check of the source (``Ingest``): one
connection to the source besides the binlog stream, whatever asks."""

from __future__ import annotations

import pymysql

from cdc.config import IngestConfig
from cdc.infoschema import load_table_details


class TableDetails:
    """information_schema lookups of the tables ingest meets, on one lazily opened connection."""

    def __init__(self, config: IngestConfig):
        self.config = config
        self._conn: pymysql.Connection | None = None
        self._cache: dict[tuple[str, str], dict] = {}

    def connection(self) -> pymysql.Connection:
        """The lookups' connection, opened again if it was closed (after a source failure)."""
        if self._conn is None or not self._conn.open:
            self._conn = pymysql.connect(**self.config.mysql.connect_kwargs(), autocommit=True)
        return self._conn

    def close(self) -> None:
        """Before a retry: the connection may be broken, the next lookup opens a new one."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

    def get(self, db: str, table: str) -> dict:
        """``load_table_details``' of ``db.table``, read once per table version."""
        details = self._cache.get((db, table))
        if details is None:
            # one connection for every lookup (a database of thousands of tables is met
            # one table at a time); a failure reaches the streaming loop, which retries
            conn = self.connection()
            try:
                details = load_table_details(conn, db, table)
            except BaseException:
                self.close()
                raise
            self._cache[(db, table)] = details
        return details

    def forget(self, db: str, table: str) -> None:
        """A DDL named the table: its details are read again when next needed."""
        self._cache.pop((db, table), None)

    def exists(self, db: str, table: str) -> bool:
        """Whether the source has the table now (not cached)."""
        with self.connection().cursor() as cur:
            cur.execute(
                "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s", (db, table)
            )
            return cur.fetchone() is not None

"""The rows of one origin in a PostgreSQL sink table (``cdc shard remove``): the rows whose
``column`` starts with a shard's name, counted or deleted."""

from __future__ import annotations

from psycopg import sql

from merger.sinks.base import TableId, like_prefix
from merger.sinks.postgres.catalog import Catalog
from merger.sinks.postgres.session import Session


class Origins:
    def __init__(self, session: Session, catalog: Catalog):
        self.session = session
        self.catalog = catalog

    def count(self, table: TableId, column: str, prefix: str) -> int | None:
        def count(conn):
            m = self.catalog.load(conn, table)
            if m is None or column not in m.columns:
                return None
            target = sql.Identifier(m.schema, m.name)
            query = sql.SQL("SELECT count(*) FROM {} WHERE {} LIKE %s ESCAPE '\\'").format(
                target, sql.Identifier(column)
            )
            return conn.execute(query, (like_prefix(prefix),)).fetchone()[0]

        return self.session.run(count)

    def delete(self, table: TableId, column: str, prefix: str) -> int | None:
        """Also the tombstones of those rows when ``column`` is one of the key columns."""

        def delete(conn):
            m = self.catalog.load(conn, table)
            if m is None or column not in m.columns:
                return None
            target, tomb = self.catalog.idents(m)
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (m.qualified,))
            where = sql.SQL("WHERE {} LIKE %s ESCAPE '\\'").format(sql.Identifier(column))
            pattern = (like_prefix(prefix),)
            deleted = conn.execute(sql.SQL("DELETE FROM {} ").format(target) + where, pattern).rowcount
            if column in m.keys:
                conn.execute(sql.SQL("DELETE FROM {} ").format(tomb) + where, pattern)
            return deleted

        result = self.session.run(delete)
        self.catalog.forget(table)
        return result

"""Reading a PostgreSQL sink table back (whole, by key range, by keys): what cdc verify and
the tests compare with the source."""

from __future__ import annotations

from typing import Sequence

import pyarrow as pa
from psycopg import sql

from merger.sinks import types as T
from merger.sinks.base import TableId, as_table_id
from merger.sinks.postgres.catalog import Catalog
from merger.sinks.postgres.meta import TableMeta
from merger.sinks.postgres.session import Session


class PostgresReads:
    def __init__(self, session: Session, catalog: Catalog):
        self.session = session
        self.catalog = catalog

    def rows(self, table) -> pa.Table:
        table = as_table_id(table)
        return self.session.run(self._rows, table)

    def _rows(self, conn, table: TableId, where: sql.Composable | None = None, params=()) -> pa.Table:
        m = self.catalog.meta_for(conn, table)
        names = list(m.columns)
        exprs = [
            sql.SQL("{}::text").format(sql.Identifier(c))
            if T.is_json(m.columns[c]) or m.columns[c] is None
            else sql.Identifier(c)
            for c in names
        ]
        with conn.cursor() as cur:
            cur.execute(
                sql.SQL("SELECT {} FROM {}{} ORDER BY {}").format(
                    sql.SQL(", ").join(exprs),
                    sql.Identifier(m.schema, m.name),
                    sql.SQL(" WHERE ") + where if where is not None else sql.SQL(""),
                    sql.SQL(", ").join(map(sql.Identifier, m.keys)),
                ),
                list(params) or None,
            )
            data = cur.fetchall()
        columns = list(zip(*data)) if data else [[] for _ in names]
        arrays = []
        for c, values in zip(names, columns):
            t = m.columns[c]
            t = pa.string() if t is None or T.is_json(t) else t
            arrays.append(pa.array(list(values), type=t))
        return pa.table(arrays, names=names)

    def count(self, table) -> int:
        table = as_table_id(table)

        def q(conn):
            m = self.catalog.meta_for(conn, table)
            return conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(m.schema, m.name))).fetchone()[
                0
            ]

        return self.session.run(q)

    def rows_in_range(self, table, key_columns: Sequence[str], lo, hi) -> pa.Table:
        table = as_table_id(table)
        cols = list(key_columns)

        def q(conn):
            m = self.catalog.meta_for(conn, table)
            key = self._ordered_key(conn, m, cols)
            conds, params = [], []
            for bound, op in ((lo, ">="), (hi, "<")):
                if bound is not None:
                    conds.append(
                        sql.SQL("{} {} ({})").format(
                            key, sql.SQL(op), sql.SQL(", ").join(sql.Placeholder() * len(cols))
                        )
                    )
                    params += list(bound)
            return self._rows(conn, table, sql.SQL(" AND ").join(conds) if conds else None, params)

        return self.session.run(q)

    def _ordered_key(self, conn, m: TableMeta, cols: list[str]) -> sql.Composable:
        """The key as a row value compared in code point order: text columns whose
        collation is not byte order get COLLATE "C" (correct, but then the primary key
        index is not used for the range)."""
        rows = conn.execute(
            "SELECT a.attname, c.collname, c.collprovider, d.datcollate, d.datlocprovider"
            " FROM pg_attribute a LEFT JOIN pg_collation c ON c.oid = a.attcollation"
            " JOIN pg_database d ON d.datname = current_database()"
            " WHERE a.attrelid = to_regclass(%s) AND a.attname = ANY(%s)",
            (m.qualified, cols),
        ).fetchall()
        byte_order = {"C", "POSIX", "C.UTF-8", "C.utf8"}
        needs = set()
        for name, coll, provider, datcollate, datprovider in rows:
            if coll is None or coll in ("C", "POSIX"):
                continue
            if coll == "default" and datprovider == "c" and datcollate in byte_order:
                continue
            if coll != "default" and provider == "c" and coll in byte_order:
                continue
            needs.add(name)
        parts = [
            sql.SQL('({} COLLATE "C")').format(sql.Identifier(c)) if c in needs else sql.Identifier(c) for c in cols
        ]
        return sql.SQL("({})").format(sql.SQL(", ").join(parts)) if len(parts) > 1 else parts[0]

    def rows_with_keys(self, table, key_columns: Sequence[str], keys) -> pa.Table:
        table = as_table_id(table)
        cols = list(key_columns)
        keys = [tuple(k) for k in keys]

        def q(conn):
            key = sql.SQL("({})").format(sql.SQL(", ").join(map(sql.Identifier, cols)))
            one = sql.SQL("({})").format(sql.SQL(", ").join(sql.Placeholder() * len(cols)))
            parts = []
            for i in range(0, max(len(keys), 1), 500):
                batch = keys[i : i + 500]
                where = (
                    sql.SQL("{} IN ({})").format(key, sql.SQL(", ").join([one] * len(batch)))
                    if batch
                    else sql.SQL("false")
                )
                parts.append(self._rows(conn, table, where, [v for k in batch for v in k]))
            return pa.concat_tables(parts)

        return self.session.run(q)

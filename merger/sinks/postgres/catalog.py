"""The PostgreSQL sink's tables: their names (target table, tombstone table), checked
against PostgreSQL's identifier rules, and their definitions read from PostgreSQL's
catalog, kept until a write or a change of the table makes them doubtful."""

from __future__ import annotations

import hashlib

from psycopg import sql

from cdc.quoting import pg_ident
from merger.sinks import types as T
from merger.sinks.base import SEQ, SinkError, TableId, as_table_id
from merger.sinks.postgres.meta import TableMeta

MAX_IDENT_BYTES = 63


def check_ident(name: str, what: str) -> None:
    if not name:
        raise SinkError(f"empty {what} name")
    if len(name.encode()) > MAX_IDENT_BYTES:
        raise SinkError(f"{what} name {name!r} is longer than PostgreSQL's {MAX_IDENT_BYTES}-byte identifier limit")
    if "\x00" in name:
        raise SinkError(f"{what} name {name!r} contains a NUL character")


def tomb_name(schema: str, name: str) -> str:
    """The name of the tombstone table of ``schema.name`` (in the control schema)."""
    return "tomb_" + hashlib.sha1(f"{schema}\x00{name}".encode()).hexdigest()[:24]


class Catalog:
    def __init__(self, fixed_schema: str | None, control_schema: str):
        self.fixed_schema = fixed_schema
        self.control_schema = control_schema
        self._meta: dict[TableId, TableMeta] = {}

    def target_name(self, table: TableId) -> tuple[str, str]:
        table = as_table_id(table)
        return (self.fixed_schema or table.database, table.table)

    def qualified(self, table: TableId) -> str:
        """The quoted qualified target name, e.g. ``"shop"."order"`` (the key of ``_cdc_applied``)."""
        schema, name = self.target_name(table)
        return pg_ident(schema) + "." + pg_ident(name)

    def tomb(self, schema: str, name: str) -> sql.Identifier:
        return sql.Identifier(self.control_schema, tomb_name(schema, name))

    def idents(self, m: TableMeta) -> tuple[sql.Identifier, sql.Identifier]:
        """The target table and its tombstone table."""
        return sql.Identifier(m.schema, m.name), sql.Identifier(self.control_schema, m.tomb)

    def load(self, conn, table: TableId) -> TableMeta | None:
        schema, name = self.target_name(table)
        qualified = pg_ident(schema) + "." + pg_ident(name)
        oid = conn.execute("SELECT to_regclass(%s)::oid", (qualified,)).fetchone()[0]
        if oid is None:
            return None
        cols = table_columns(conn, oid)
        keys = index_columns(conn, oid, primary=True)
        columns = {n: T.pg_type_to_storage(t) for n, t in cols if n != SEQ}
        if SEQ not in {n for n, _ in cols} or not keys:
            raise SinkError(
                f"table {qualified} exists but was not created by this sink "
                f"(no {SEQ} column or no primary key); drop or rename it"
            )
        return TableMeta(schema, name, keys, columns, tomb_name(schema, name))

    def meta_for(self, conn, table: TableId) -> TableMeta:
        m = self._meta.get(table)
        if m is None:
            m = self.load(conn, table)
            if m is None:
                raise SinkError(f"table {table}: no sink table yet; call ensure_table first")
            self._meta[table] = m
        return m

    def forget(self, table: TableId) -> None:
        """Read the table's definition again on its next use."""
        self._meta.pop(table, None)


def table_columns(conn, oid: int) -> list[tuple[str, str]]:
    """A table's columns in order, with their types as ``format_type`` spells them."""
    return conn.execute(
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute"
        " WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        (oid,),
    ).fetchall()


def index_columns(conn, oid: int, primary: bool = False, index: str | None = None) -> list[str]:
    """The columns, in order, of a table's primary key or of its index named ``index``."""
    which = "i.indisprimary" if primary else "ic.relname = %s"
    rows = conn.execute(
        "SELECT a.attname FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)"
        " JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum"
        " JOIN pg_class ic ON ic.oid = i.indexrelid"
        f" WHERE i.indrelid = %s AND {which} ORDER BY k.n",
        (oid,) if primary else (oid, index),
    ).fetchall()
    return [r[0] for r in rows]

"""The PostgreSQL sink's history tables (modes ``changelog`` and ``scd2``) created,
followed, read back from PostgreSQL's catalog and set aside. What differs between the
two is a ``HistoryLayout``: the columns the mode adds, its indexes, its mark.

A history table's comment marks its mode, so a table created in another mode (or by
someone else) is refused, never written over; a mode never changes silently. A history
is never dropped: set aside (renamed ``<table>__until_<UTC time>``) a new one starts.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Sequence

import pyarrow as pa
from psycopg import sql

from merger.sinks import types as T
from merger.sinks.base import (
    IncompatibleSchemaChange,
    SinkError,
    TableCut,
    TableFault,
    TableId,
    check_keys,
    with_before_fields,
)
from merger.sinks.postgres.catalog import Catalog, index_columns, table_columns
from merger.sinks.postgres.meta import TableMeta
from merger.sinks.postgres.schema import follow_columns, wanted_columns

MIN_SERVER = 150000  # PostgreSQL 15: UNIQUE NULLS NOT DISTINCT


@dataclass(frozen=True)
class HistoryLayout:
    """``columns``: what the mode adds after the user columns, (name, SQL type) each;
    ``key_order``: the column that follows the keys in the table's unique index; the
    index is a primary key when ``keys_not_null`` (every row has its key), else a unique
    index NULLS NOT DISTINCT (a truncate's row has none); ``open_index``: a partial
    unique index on the keys where this condition holds (one open version per key);
    ``variant``: what else the mark names (a change log's image), ``before_prefix``: each
    user column has a twin of its type named so (the row before the change)."""

    mode: str
    what: str
    columns: tuple[tuple[str, str], ...]
    key_order: str
    keys_not_null: bool
    open_index: str | None = None
    variant: str = ""
    before_prefix: str | None = None

    @property
    def mark(self) -> str:
        return f"cdc sink {self.mode}{' ' + self.variant if self.variant else ''} table of "

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.columns)


def index_name(table: str, kind: str) -> str:
    return f"cdc_{kind}_" + hashlib.sha1(table.encode()).hexdigest()[:20]


class HistorySchema:
    def __init__(self, catalog: Catalog, json_as_jsonb: bool, layout: HistoryLayout):
        self.catalog = catalog
        self.json_as_jsonb = json_as_jsonb
        self.layout = layout
        self._meta: dict[TableId, TableMeta] = {}

    def load(self, conn, table: TableId) -> TableMeta | None:
        """The table's definition; None: no table. A table of another mode is refused."""
        schema, name = self.catalog.target_name(table)
        qualified = sql.Identifier(schema, name).as_string(conn)
        row = conn.execute(
            "SELECT to_regclass(%s)::oid, obj_description(to_regclass(%s), 'pg_class')", (qualified, qualified)
        ).fetchone()
        if row[0] is None:
            return None
        if not (row[1] or "").startswith(self.layout.mark):
            raise TableFault(
                f"table {qualified} exists and is not {self.layout.what} (its mode in sinks.postgres.tables "
                f"is {self.layout.mode} now): rename or drop it, then `cdc snapshot {table}`; a mode never "
                "changes silently"
            )
        cols = table_columns(conn, row[0])
        keys = [
            c for c in index_columns(conn, row[0], index=index_name(str(table), "key")) if c != self.layout.key_order
        ]
        columns = {n: T.pg_type_to_storage(t) for n, t in cols if n not in self.layout.names}
        return TableMeta(schema, name, keys, columns, "")

    def meta_for(self, conn, table: TableId) -> TableMeta:
        m = self._meta.get(table)
        if m is None:
            m = self.load(conn, table)
            if m is None:
                raise SinkError(f"table {table}: no sink table yet; call ensure_table first")
            self._meta[table] = m
        return m

    def forget(self, table: TableId) -> None:
        self._meta.pop(table, None)

    def ensure(self, conn, table: TableId, arrow_schema: pa.Schema, key_columns: Sequence[str]) -> list[str]:
        keys = check_keys(table, arrow_schema, key_columns)
        schema, name = self.catalog.target_name(table)
        if self.layout.before_prefix:
            arrow_schema = with_before_fields(table, arrow_schema, self.layout.before_prefix)
        wanted = wanted_columns(table, (schema, name), arrow_schema, self.json_as_jsonb, self.layout.names)
        self.forget(table)
        qualified = sql.Identifier(schema, name)
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (qualified.as_string(conn),))
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        m = self.load(conn, table)
        if m is None:
            self._create(conn, table, qualified, keys, wanted)
            return ["created"]
        if list(m.keys) != list(keys):
            raise IncompatibleSchemaChange(
                f"incompatible schema change for {table}: key columns change from {m.keys} to {keys}"
            )
        done, _ = follow_columns(conn, table, qualified, m.columns, wanted)
        return done

    def _create(self, conn, table: TableId, qualified: sql.Identifier, keys: list[str], wanted: dict) -> None:
        layout = self.layout
        if conn.info.server_version < MIN_SERVER:
            raise SinkError(
                f"table {table}: {layout.what} needs PostgreSQL 15 or later; "
                f"the server is {conn.info.server_version // 10000}"
            )
        not_null = layout.keys_not_null
        cols = [
            sql.SQL("{} {}{}").format(
                sql.Identifier(c), sql.SQL(T.pg_type_name(t)), sql.SQL(" NOT NULL" if not_null and c in keys else "")
            )
            for c, t in wanted.items()
        ]
        cols += [sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(t)) for n, t in layout.columns]
        conn.execute(sql.SQL("CREATE TABLE {} ({})").format(qualified, sql.SQL(", ").join(cols)))
        key_cols = sql.SQL(", ").join(sql.Identifier(c) for c in [*keys, layout.key_order])
        conn.execute(
            sql.SQL("CREATE UNIQUE INDEX {} ON {} ({}){}").format(
                sql.Identifier(index_name(str(table), "key")),
                qualified,
                key_cols,
                sql.SQL("" if not_null else " NULLS NOT DISTINCT"),
            )
        )
        if layout.open_index:
            conn.execute(
                sql.SQL("CREATE UNIQUE INDEX {} ON {} ({}) WHERE {}").format(
                    sql.Identifier(index_name(str(table), "open")),
                    qualified,
                    sql.SQL(", ").join(sql.Identifier(c) for c in keys),
                    sql.SQL(layout.open_index),
                )
            )
        conn.execute(sql.SQL("COMMENT ON TABLE {} IS {}").format(qualified, sql.Literal(layout.mark + str(table))))

    def set_aside(self, conn, table: TableId) -> str | None:
        """The table renamed aside (its history kept); the new name, None if there was none."""
        schema, name = self.catalog.target_name(table)
        qualified = sql.Identifier(schema, name)
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (qualified.as_string(conn),))
        if self.load(conn, table) is None:
            return None
        aside = _aside_name(name)
        conn.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(qualified, sql.Identifier(aside)))
        for kind in ("key", "open"):  # the new table's indexes take these names
            conn.execute(
                sql.SQL("ALTER INDEX IF EXISTS {} RENAME TO {}").format(
                    sql.Identifier(schema, index_name(str(table), kind)),
                    sql.Identifier(index_name(f"{table}@{aside}", kind)),
                )
            )
        # the comment keeps the mark: a table set aside is still a history of its mode
        self.forget(table)
        return f"{schema}.{aside}"


def _aside_name(table: str) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    name = f"{table}__until_{stamp}"
    if len(name.encode()) > 63:
        short = table.encode()[:20].decode(errors="ignore")  # a name of at most 63 bytes
        name = f"{short}_{hashlib.sha1(table.encode()).hexdigest()[:8]}__until_{stamp}"
    return name


def commit_time_sql(us: sql.Composable) -> sql.Composable:
    """Microseconds since the epoch as timestamptz, exactly (no float on the way); NULL stays NULL."""
    return sql.SQL("(timestamptz 'epoch' + {} * interval '1 microsecond')").format(us)


def cut_sql(
    cut: TableCut | None, target: sql.Identifier, sequence_column: str
) -> tuple[sql.Composable, sql.Composable]:
    """A truncate's sequence and time as SQL. Without its own place (a DDL's reset): after
    every change the table holds, at the server's clock."""
    if cut is None:
        seq = sql.SQL("(SELECT COALESCE(max({}), 0) + 1 FROM {})").format(sql.Identifier(sequence_column), target)
        return seq, sql.SQL("now()")
    at = commit_time_sql(sql.Literal(int(cut.time_us))) if cut.time_us is not None else sql.SQL("now()")
    return sql.Literal(int(cut.sequence)), at

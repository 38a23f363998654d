"""The PostgreSQL sink's tables created, followed and dropped: the target table (user
columns, ``_cdc_seq``, primary key = the key columns) and its tombstone table in the
control schema (deleted key -> sequence)."""

from __future__ import annotations

from typing import Sequence

import pyarrow as pa
from psycopg import sql

from cdc.quoting import pg_ident
from merger.sinks import types as T
from merger.sinks.base import SEQ, IncompatibleSchemaChange, SinkError, TableId, check_keys, user_fields
from merger.sinks.postgres.catalog import Catalog, check_ident
from merger.sinks.postgres.control import Control
from merger.sinks.postgres.session import Session


class Schemas:
    def __init__(self, session: Session, catalog: Catalog, control: Control, json_as_jsonb: bool = True):
        self.session = session
        self.catalog = catalog
        self.control = control
        self.json_as_jsonb = json_as_jsonb

    def ensure(self, table: TableId, arrow_schema: pa.Schema, key_columns: Sequence[str]) -> list[str]:
        keys = check_keys(table, arrow_schema, key_columns)
        schema, name = self.catalog.target_name(table)
        wanted = wanted_columns(table, (schema, name), arrow_schema, self.json_as_jsonb)
        self.catalog.forget(table)
        return self.session.run(self._ensure, table, schema, name, keys, wanted)

    def _ensure(self, conn, table, schema, name, keys, wanted) -> list[str]:
        qualified = pg_ident(schema) + "." + pg_ident(name)
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (qualified,))
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        m = self.catalog.load(conn, table)
        tomb = self.catalog.tomb(schema, name)
        if m is None:
            cols = [
                sql.SQL("{} {}{}").format(
                    sql.Identifier(c), sql.SQL(T.pg_type_name(t)), sql.SQL(" NOT NULL") if c in keys else sql.SQL("")
                )
                for c, t in wanted.items()
            ]
            cols.append(sql.SQL("{} bigint NOT NULL").format(sql.Identifier(SEQ)))
            pk = sql.SQL(", ").join(map(sql.Identifier, keys))
            conn.execute(
                sql.SQL("CREATE TABLE {} ({}, PRIMARY KEY ({}))").format(
                    sql.Identifier(schema, name), sql.SQL(", ").join(cols), pk
                )
            )
            # a fresh table starts fresh: no version or tombstones of an earlier one
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(tomb))
            self._create_tomb(conn, tomb, qualified, keys, wanted)
            self.control.forget(conn, qualified)
            return ["created"]
        if set(m.keys) != set(keys):
            raise IncompatibleSchemaChange(
                f"incompatible schema change for {table}: key columns change from {m.keys} to {keys}"
            )
        done, widened = follow_columns(conn, table, sql.Identifier(schema, name), m.columns, wanted)
        for c in widened:
            if c in keys:  # the tombstone table's key columns follow
                conn.execute(
                    sql.SQL("ALTER TABLE {} ALTER COLUMN {} TYPE {}").format(
                        tomb, sql.Identifier(c), sql.SQL(T.pg_type_name(wanted[c]))
                    )
                )
        if (
            conn.execute(
                "SELECT to_regclass(%s)", (pg_ident(self.catalog.control_schema) + "." + pg_ident(m.tomb),)
            ).fetchone()[0]
            is None
        ):
            self._create_tomb(conn, tomb, qualified, keys, {**m.columns, **wanted})
        return done

    def _create_tomb(self, conn, tomb, qualified: str, keys, types) -> None:
        cols = [sql.SQL("{} {} NOT NULL").format(sql.Identifier(k), sql.SQL(T.pg_type_name(types[k]))) for k in keys]
        conn.execute(
            sql.SQL("CREATE TABLE {} ({}, {} bigint NOT NULL, PRIMARY KEY ({}))").format(
                tomb, sql.SQL(", ").join(cols), sql.Identifier(SEQ), sql.SQL(", ").join(map(sql.Identifier, keys))
            )
        )
        conn.execute(
            sql.SQL("COMMENT ON TABLE {} IS {}").format(
                tomb, sql.Literal(f"cdc sink tombstones (deleted key -> sequence) of {qualified}")
            )
        )

    def drop(self, table: TableId) -> None:
        schema, name = self.catalog.target_name(table)
        qualified = pg_ident(schema) + "." + pg_ident(name)

        def drop(conn):
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (qualified,))
            conn.execute(
                sql.SQL("DROP TABLE IF EXISTS {}, {}").format(
                    sql.Identifier(schema, name), self.catalog.tomb(schema, name)
                )
            )
            self.control.forget(conn, qualified)

        self.session.run(drop)
        self.catalog.forget(table)


def wanted_columns(
    table: TableId, target: tuple[str, str], arrow_schema: pa.Schema, json_as_jsonb: bool, reserved: tuple = ()
) -> dict[str, pa.DataType]:
    """The storage type of each user column of ``arrow_schema``, every name checked
    against PostgreSQL's rules (``target``: the table's schema and name); ``reserved``:
    names a history mode's own columns take."""
    check_ident(target[0], "schema")
    check_ident(target[1], "table")
    wanted: dict[str, pa.DataType] = {}
    for f in user_fields(arrow_schema):
        check_ident(f.name, "column")
        if f.name in reserved:
            raise SinkError(f"table {table}: column {f.name!r} is one of the columns the table's mode adds")
        try:
            wanted[f.name] = T.pg_storage_type(f.type, json_as_jsonb)
        except T.UnsupportedType as exc:
            raise SinkError(f"table {table}, column {f.name!r}: {exc}") from None
    return wanted


def follow_columns(conn, table: TableId, target: sql.Identifier, current: dict, wanted: dict) -> tuple[list, list]:
    """Columns added and types widened so that ``target`` (columns ``current``) holds
    ``wanted``; a change it cannot follow raises ``IncompatibleSchemaChange``. Returns
    what was done (lines for the log) and the columns widened."""
    done: list[str] = []
    widened: list[str] = []
    for c, new in wanted.items():
        if c not in current:
            conn.execute(
                sql.SQL("ALTER TABLE {} ADD COLUMN {} {}").format(
                    target, sql.Identifier(c), sql.SQL(T.pg_type_name(new))
                )
            )
            done.append(f"added column {c} {T.pg_type_name(new)}")
            continue
        old = current[c]
        verdict = T.compare(old, new) if old is not None else None
        if verdict == T.SAME:
            continue
        old_name = T.pg_type_name(old) if old is not None else "an unknown type"
        if verdict is None:
            raise IncompatibleSchemaChange(
                f"incompatible schema change for {table}: column {c!r} cannot change from "
                f"{old_name} to {T.pg_type_name(new)}"
            )
        conn.execute(
            sql.SQL("ALTER TABLE {} ALTER COLUMN {} TYPE {}").format(
                target, sql.Identifier(c), sql.SQL(T.pg_type_name(new))
            )
        )
        widened.append(c)
        done.append(f"widened {c} {old_name} -> {T.pg_type_name(new)}")
    return done, widened

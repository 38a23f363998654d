"""Table definitions for the merger: from Debezium's schema-change events (tableChanges)
or, for a table first seen in the stream, from the source's information_schema."""

from __future__ import annotations

import re

import pymysql

from cdc.config import MySQLConfig
from ingest.codec import load_table_details, spec_from_information_schema
from ingest.types import ColumnSpec, TableSpec
from merger.errors import MergerError

_ID = re.compile(r'^"((?:[^"]|"")*)"\."((?:[^"]|"")*)"$')


def parse_table_id(text: str) -> tuple[str, str]:
    m = _ID.match(text)
    if not m:
        db, _, table = text.partition(".")
        return db, table
    return m.group(1).replace('""', '"'), m.group(2).replace('""', '"')


def spec_from_table_change(change: dict) -> TableSpec | None:
    """A TableSpec from one ``tableChanges`` entry of a schema-change event."""
    table = change.get("table")
    if not table:
        return None
    db, name = parse_table_id(change["id"])
    cols = []
    for c in table.get("columns", []):
        type_name = str(c.get("typeName", "")).lower()
        unsigned = "unsigned" in type_name
        base = type_name.replace(" unsigned", "").replace(" zerofill", "").strip()
        t = base
        length, scale, fsp = c.get("length"), c.get("scale"), None
        if t in ("time", "datetime", "timestamp"):
            fsp, length = length or 0, None
        enum_values = None
        if c.get("enumValues") is not None:
            enum_values = tuple(v[1:-1].replace("''", "'") if v.startswith("'") else v for v in c["enumValues"])
        cols.append(ColumnSpec(name=c["name"], type_name=t, position=c.get("position", 0), unsigned=unsigned,
                               length=length, scale=scale, fsp=fsp, charset=c.get("charsetName"),
                               nullable=bool(c.get("optional", True)), enum_values=enum_values,
                               default=c.get("defaultValueExpression"),
                               auto_increment=bool(c.get("autoIncremented"))))
    return TableSpec(db=db, table=name, columns=tuple(cols),
                     primary_key=tuple(table.get("primaryKeyColumnNames") or ()),
                     default_charset=table.get("defaultCharsetName"))


class SourceCatalog:
    """Reads table definitions from the source database."""

    def __init__(self, mysql: MySQLConfig):
        self.mysql = mysql

    def connect(self) -> pymysql.Connection:
        try:
            return pymysql.connect(**self.mysql.connect_kwargs(), autocommit=True)
        except pymysql.err.OperationalError as exc:
            raise MergerError(f"cannot connect to the source MySQL at {self.mysql.host}:{self.mysql.port}: "
                              f"{exc.args[-1]}") from None

    def table_spec(self, db: str, table: str) -> TableSpec | None:
        conn = self.connect()
        try:
            details = load_table_details(conn, db, table)
        finally:
            conn.close()
        if not details.get("columns"):
            return None
        return spec_from_information_schema(db, table, details)

    def list_tables(self) -> list[str]:
        """Base tables of the source outside the system databases, as db.table."""
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE "
                            "TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA NOT IN "
                            "('mysql', 'information_schema', 'performance_schema', 'sys')")
                return [f"{db}.{t}" for db, t in cur.fetchall()]
        finally:
            conn.close()

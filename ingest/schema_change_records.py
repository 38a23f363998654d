"""Schema-change records (Debezium's schema-change topic): the DDL with Debezium's
tableChanges JSON of each table it touched."""

from __future__ import annotations

import time
from typing import Iterable, Mapping

from cdc.tablespec import ColumnSpec, TableSpec
from ingest.envelope import (
    CONNECTOR,
    EnvelopeConfig,
    Record,
    SourceInfo,
    named_field,
    primitive_schema,
    source_json,
    source_schema,
    with_schema,
)
from ingest.jsontext import dumps, json_str

#: java.sql.Types codes Debezium's MySQL DDL parser assigns
_JDBC = {
    "boolean": 16,
    "bit": -7,
    "tinyint": 5,
    "smallint": 5,
    "mediumint": 4,
    "int": 4,
    "bigint": -5,
    "serial": -5,
    "decimal": 3,
    "numeric": 2,
    "float": 6,
    "double": 8,
    "real": 7,
    "char": 1,
    "varchar": 12,
    "tinytext": 12,
    "text": 12,
    "mediumtext": 12,
    "longtext": 12,
    "binary": -2,
    "varbinary": -3,
    "tinyblob": 2004,
    "blob": 2004,
    "mediumblob": 2004,
    "longblob": 2004,
    "date": 91,
    "time": 92,
    "datetime": 93,
    "timestamp": 2014,
    "year": 4,
    "json": 1111,
    "enum": 1,
    "set": 1,
}


def column_change_json(col: ColumnSpec, table_charset: str | None) -> dict:
    """One column of a ``tableChanges[].table.columns`` entry (Debezium's
    io.debezium.connector.schema.Column)."""
    t = col.type_name
    type_name = t.upper()
    if col.unsigned and t in (
        "tinyint",
        "smallint",
        "mediumint",
        "int",
        "bigint",
        "decimal",
        "numeric",
        "float",
        "double",
        "real",
    ):
        type_name += " UNSIGNED"
    if col.zerofill:
        type_name += " ZEROFILL"
    stringy = t in ("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set")
    if t in ("time", "datetime", "timestamp"):
        length = col.fsp or None
    elif t == "enum":
        length = 1
    elif t == "set":
        length = max(0, 2 * len(col.enum_values or ()) - 1)  # the options and their commas
    else:
        length = col.length
    default = col.default
    if default is not None and t == "bit" and default[:2] in ("b'", "B'") and default.endswith("'"):
        default = default[2:-1]  # Debezium's parser keeps the digits of b'101'
    if (
        default is not None
        and t in ("timestamp", "datetime")
        and not col.nullable
        and default.lower().startswith(("current_timestamp", "now", "localtime"))
    ):
        default = "1970-01-01 00:00:00"
    return {
        "name": col.name,
        "jdbcType": _JDBC.get(t, 1111),
        "nativeType": None,
        "typeName": type_name,
        "typeExpression": type_name,
        "charsetName": (col.charset or table_charset) if stringy else None,
        "length": length,
        "scale": col.scale if t in ("decimal", "numeric", "float", "double", "real") else None,
        "position": col.position,
        "optional": col.nullable,
        "autoIncremented": col.auto_increment,
        "generated": col.auto_increment or col.generated,
        "comment": None,  # include.schema.comments=false (Debezium's default) drops comments
        "defaultValueExpression": default,
        "enumValues": ["'" + v.replace("'", "''") + "'" for v in col.enum_values]
        if t in ("enum", "set") and col.enum_values is not None
        else None,
    }


def _double_quoted(part: str) -> str:
    """Debezium's ``TableId.quote(part, '"')``: embedded double quotes doubled, the whole in
    double quotes; left as it is if it already starts or ends with a double quote."""
    if not part:
        return '""'
    if part[0] == '"' or part[-1] == '"':
        return part
    return '"' + part.replace('"', '""') + '"'


def table_change_json(
    change_type: str, spec: TableSpec | None, db: str | None = None, table: str | None = None
) -> dict:
    """A ``tableChanges`` entry: CREATE/ALTER with the table, DROP with table null."""
    db = db if db is not None else spec.db
    table = table if table is not None else spec.table
    tid = _double_quoted(db) + "." + _double_quoted(table)
    if spec is None or change_type == "DROP":
        return {"type": change_type, "id": tid, "table": None}
    charset = spec.default_charset
    return {
        "type": change_type,
        "id": tid,
        "table": {
            "defaultCharsetName": charset,
            "primaryKeyColumnNames": list(spec.primary_key),
            "columns": [column_change_json(c, charset) for c in spec.columns],
            "comment": None,
        },
    }


def schema_change_value_schema(connector: str = CONNECTOR) -> dict:
    column = {
        "type": "struct",
        "fields": [
            named_field(primitive_schema("string", False), "name"),
            named_field(primitive_schema("int32", False), "jdbcType"),
            named_field(primitive_schema("int32", True), "nativeType"),
            named_field(primitive_schema("string", False), "typeName"),
            named_field(primitive_schema("string", True), "typeExpression"),
            named_field(primitive_schema("string", True), "charsetName"),
            named_field(primitive_schema("int32", True), "length"),
            named_field(primitive_schema("int32", True), "scale"),
            named_field(primitive_schema("int32", False), "position"),
            named_field(primitive_schema("boolean", True), "optional"),
            named_field(primitive_schema("boolean", True), "autoIncremented"),
            named_field(primitive_schema("boolean", True), "generated"),
            named_field(primitive_schema("string", True), "comment"),
            named_field(primitive_schema("string", True), "defaultValueExpression"),
            {"type": "array", "items": primitive_schema("string", False), "optional": True, "field": "enumValues"},
        ],
        "optional": False,
        "name": "io.debezium.connector.schema.Column",
        "version": 1,
    }
    table = {
        "type": "struct",
        "fields": [
            named_field(primitive_schema("string", True), "defaultCharsetName"),
            {
                "type": "array",
                "items": primitive_schema("string", False),
                "optional": True,
                "field": "primaryKeyColumnNames",
            },
            {"type": "array", "items": column, "optional": False, "field": "columns"},
            named_field(primitive_schema("string", True), "comment"),
        ],
        "optional": True,
        "name": "io.debezium.connector.schema.Table",
        "version": 1,
    }
    change = {
        "type": "struct",
        "fields": [
            named_field(primitive_schema("string", False), "type"),
            named_field(primitive_schema("string", False), "id"),
            named_field(table, "table"),
        ],
        "optional": False,
        "name": "io.debezium.connector.schema.Change",
        "version": 1,
    }
    return {
        "type": "struct",
        "fields": [
            named_field(source_schema(connector), "source"),
            named_field(primitive_schema("int64", False), "ts_ms"),
            named_field(primitive_schema("string", True), "databaseName"),
            named_field(primitive_schema("string", True), "schemaName"),
            named_field(primitive_schema("string", True), "ddl"),
            {"type": "array", "items": change, "optional": False, "field": "tableChanges"},
        ],
        "optional": False,
        "name": f"io.debezium.connector.{connector}.SchemaChangeValue",
        "version": 1,
    }


def schema_change_key_schema(connector: str = CONNECTOR) -> dict:
    return {
        "type": "struct",
        "fields": [named_field(primitive_schema("string", False), "databaseName")],
        "optional": False,
        "name": f"io.debezium.connector.{connector}.SchemaChangeKey",
        "version": 1,
    }


def schema_change_record(
    cfg: EnvelopeConfig,
    source: SourceInfo,
    ddl: str,
    table_changes: Iterable[Mapping] = (),
    *,
    database: str | None = None,
    ts_ms: int | None = None,
) -> Record:
    """A schema-change event on the ``<prefix>`` topic. ``source.table``: the (first)
    table the DDL touches, None for database-level statements; ``source.pos``: the QUERY
    event's start offset. ``table_changes``: ``table_change_json`` entries (empty for
    DDL that changes no captured table). Debezium rewrites DROP TABLE as one event per
    table with ``DROP TABLE `db`.`t```` (see ``drop_table_ddl``)."""
    if ts_ms is None:
        ts_ms = time.time_ns() // 1_000_000
    db = database if database is not None else source.db
    key = '{"databaseName":' + json_str(db or "") + "}"
    value = (
        '{"source":'
        + source_json(cfg, source)
        + ',"ts_ms":'
        + str(int(ts_ms))
        + ',"databaseName":'
        + json_str(db or "")
        + ',"schemaName":null,"ddl":'
        + json_str(ddl)
        + ',"tableChanges":'
        + dumps(list(table_changes))
        + "}"
    )
    if cfg.key_schemas:
        key = with_schema(dumps(schema_change_key_schema(cfg.connector)), key)
    if cfg.schemas_enable:
        value = with_schema(dumps(schema_change_value_schema(cfg.connector)), value)
    return Record(cfg.topic_prefix, key, value)


def drop_table_ddl(db: str, table: str) -> str:
    """The DDL text Debezium puts in the DROP TABLE event of one table."""
    return f"DROP TABLE `{db}`.`{table}`"

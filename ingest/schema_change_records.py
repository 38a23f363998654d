"""Schema-change records (Debezium's schema-change topic): the DDL with Debezium's
tableChanges JSON of each table it touched."""

from __future__ import annotations

import time
from typing import Iterable, Mapping

from cdc.wire.topics import schema_topic
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
    table with ``DROP TABLE `db`.`t````; ingest keeps the statement as the source wrote it."""
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
    return Record(schema_topic(cfg.topic_prefix), key, value)

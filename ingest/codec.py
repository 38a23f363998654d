"""Glue between the binlog reader and the pure encoding layer (``types``/``envelope``):
builds one ``TableEncoder`` per table version, with the capture filter's column excludes
and masks applied, from the binlog table map plus information_schema details."""

from __future__ import annotations

import dataclasses
from typing import Any

import pymysql

from cdc.config import IngestConfig
from cdc.quoting import quote_ident
from cdc.tablespec import ColumnSpec, TableSpec
from ingest import metrics
from ingest.converter_config import ConverterConfig
from ingest.declared import declared_types_from_ddl, with_declared_types
from ingest.envelope import EnvelopeConfig, PhysicalTable, TableEncoder
from ingest.filters import CaptureFilter
from ingest.infoschema import enrich_table_spec, parse_column_type
from ingest.tablemap import table_spec_from_binlog

MASK = "***"


def envelope_config(config: IngestConfig) -> EnvelopeConfig:
    return EnvelopeConfig(
        topic_prefix=config.topic_prefix,
        schemas_enable=config.schemas_enable,
        converter=ConverterConfig(
            decimal_handling_mode=config.decimal_handling_mode,
            bigint_unsigned_handling_mode=config.bigint_unsigned_handling_mode,
            time_precision_mode=config.time_precision_mode,
            binary_handling_mode=config.binary_handling_mode,
            enable_time_adjuster=config.enable_time_adjuster,
        ),
        tombstones_on_delete=config.tombstones_on_delete,
        provide_transaction_metadata=config.provide_transaction_metadata,
        # the merger needs truncates; Debezium skips them unless told otherwise
        skipped_operations=frozenset(config.skipped_operations),
    )


def load_table_details(conn: pymysql.Connection, db: str, table: str) -> dict[str, Any]:
    """information_schema rows and the CREATE TABLE text of a table (empty if it is gone).

    Read when a table version is first seen; a DDL arriving in between is harmless,
    because the DDL event itself invalidates what we read."""
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(
            "SELECT * FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s "
            "ORDER BY ORDINAL_POSITION",
            (db, table),
        )
        columns = list(cur.fetchall())
        cur.execute(
            "SELECT TABLE_COLLATION FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s", (db, table)
        )
        row = cur.fetchone()
        collation = row["TABLE_COLLATION"] if row else None
        cur.execute(
            "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA=%s "
            "AND TABLE_NAME=%s AND INDEX_NAME='PRIMARY' ORDER BY SEQ_IN_INDEX",
            (db, table),
        )
        primary_key = [r["COLUMN_NAME"] for r in cur.fetchall()]
        create = ""
        if columns:
            try:
                cur.execute(f"SHOW CREATE TABLE {quote_ident(db)}.{quote_ident(table)}")
                create = list(cur.fetchone().values())[1]
            except pymysql.err.MySQLError:
                create = ""
    return {
        "columns": columns,
        "create": create,
        "primary_key": primary_key,
        "charset": collation.split("_", 1)[0] if collation else None,
    }


HIDDEN_TYPES = ("boolean", "json")  # what information_schema cannot show on MariaDB


def spec_from_details(
    db: str, table: str, details: dict, table_map_event=None, declared_in_binlog: dict | None = None
) -> TableSpec | None:
    """A TableSpec from the binlog table map (when given) refined by ``details`` and by
    the types the DDL in the binlog declared (BOOLEAN, JSON)."""
    declared = declared_types_from_ddl(details["create"]) if details.get("create") else {}
    declared.update(declared_in_binlog or {})
    declared = {k: v for k, v in declared.items() if v in HIDDEN_TYPES} or None
    if table_map_event is not None:
        return table_spec_from_binlog(
            table_map_event,
            details.get("columns") or None,
            declared_types=declared,
            default_charset=details.get("charset"),
        )
    if not details.get("columns"):
        return None
    return spec_from_information_schema(db, table, details, declared)


def spec_from_information_schema(db: str, table: str, details: dict, declared: dict | None = None) -> TableSpec:
    """A TableSpec from information_schema alone (for schema-change events, where no
    table map is at hand)."""
    cols = []
    for i, row in enumerate(details["columns"]):
        d = {str(k).upper(): v for k, v in row.items()}
        ctype = d.get("COLUMN_TYPE")
        ctype = ctype.decode() if isinstance(ctype, bytes) else str(ctype)
        parsed = parse_column_type(ctype)
        cols.append(
            ColumnSpec(name=str(d["COLUMN_NAME"]), type_name=parsed.get("type_name", "unknown"), position=i + 1)
        )
    spec = TableSpec(
        db=db,
        table=table,
        columns=tuple(cols),
        primary_key=tuple(details.get("primary_key", ())),
        default_charset=details.get("charset"),
    )
    spec = enrich_table_spec(spec, details["columns"])
    if declared:
        spec = with_declared_types(spec, declared)
    return spec


def apply_column_filters(spec: TableSpec, capture: CaptureFilter) -> tuple[TableSpec, tuple[str, ...]]:
    """Drops excluded columns; returns the spec and the names of masked columns."""
    kept = tuple(
        c
        for c in spec.columns
        if c.name in spec.primary_key or not capture.excluded_column(spec.db, spec.table, c.name)
    )
    masked = tuple(
        c.name for c in kept if c.name not in spec.primary_key and capture.masked_column(spec.db, spec.table, c.name)
    )
    if len(kept) != len(spec.columns):
        spec = dataclasses.replace(spec, columns=kept)
    if masked:
        # masked values are strings of '*' whatever the column type (Debezium masks only
        # string columns; we widen the column to a string so every type can be masked)
        cols = tuple(
            dataclasses.replace(c, type_name="varchar", length=len(MASK), unsigned=False, enum_values=None)
            if c.name in masked
            else c
            for c in kept
        )
        spec = dataclasses.replace(spec, columns=cols)
    return spec, masked


class TableCodec:
    """Everything ingest needs to encode one table version."""

    def __init__(
        self, spec: TableSpec, env: EnvelopeConfig, masked: tuple[str, ...], physical: PhysicalTable | None = None
    ):
        self.spec = spec
        self.encoder = TableEncoder(spec, env, physical)
        self.origin: str | None = None  # the origin column's value, in key mode origin (cdc.routes)
        self.topic = self.encoder.topic
        self.masked = masked
        self.name = f"{spec.db}.{spec.table}"
        self.partitions: int | None = None  # of the table's topic, once known
        self._counters: dict = {}

    def events_counter(self, op: str):
        """The events metric's child for this table and op (a labels() lookup costs more
        than the increment)."""
        counter = self._counters.get(op)
        if counter is None:
            counter = self._counters[op] = metrics.EVENTS.labels(self.name, op)
        return counter

    def mask(self, row: dict | None) -> dict | None:
        if row is None or not self.masked:
            return row
        row = dict(row)
        for name in self.masked:
            if row.get(name) is not None:
                row[name] = MASK
        return row

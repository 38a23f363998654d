"""Glue between the binlog reader and the pure encoding layer (``columncodec``/``envelope``):
builds one ``TableCodec`` (its ``TableEncoder``) per table version, with the capture
filter's column excludes and masks applied, from the binlog table map plus
information_schema details."""

from __future__ import annotations

import dataclasses

from cdc.config import IngestConfig
from cdc.declared import declared_types_from_ddl
from cdc.infoschema import spec_from_information_schema
from cdc.tablespec import TableSpec
from ingest import metrics
from ingest.converter_config import ConverterConfig
from ingest.envelope import EnvelopeConfig, PhysicalTable, TableEncoder
from ingest.filters import CaptureFilter
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

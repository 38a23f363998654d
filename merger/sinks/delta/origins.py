"""The rows of one origin in a Delta sink's latest-state table (``cdc shard remove``),
counted or deleted with their tombstones."""

from __future__ import annotations

import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from cdc.quoting import quote_ident
from merger.sinks.base import TableId
from merger.sinks.delta.arrow import delta_arrow_schema, without_log_statistics
from merger.sinks.delta.handles import DeltaHandles


def in_predicate(column: str, values: list[str]) -> str:
    """``column IN ('a', 'b')`` for a delta-rs predicate."""
    return f"{quote_ident(column)} IN ({', '.join(_string_literal(v) for v in values)})"


def _string_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _origins(dt: DeltaTable, column: str, prefix: str) -> dict[str, int] | None:
    """The values of ``column`` that start with ``prefix``, with their row counts
    (None: no such column)."""
    if column not in delta_arrow_schema(dt).names:
        return None
    values = without_log_statistics(dt.to_pyarrow_dataset()).to_table(columns=[column])[column]
    values = pc.filter(values, pc.fill_null(pc.starts_with(values, pattern=prefix), False))
    counts = pc.value_counts(values)
    return {v.as_py(): n.as_py() for v, n in zip(counts.field("values"), counts.field("counts"))}


class DeltaOrigins:
    """Rows by origin: ``column`` holds each row's origin (``__cdc_origin``), the rows whose
    value starts with ``prefix``; None: no such table or column (nothing to do)."""

    def __init__(self, handles: DeltaHandles):
        self.handles = handles

    def count(self, table: TableId, column: str, prefix: str) -> int | None:
        dt = self.handles.open(self.handles.table_path(table))
        found = None if dt is None else _origins(dt, column, prefix)
        return None if found is None else sum(found.values())

    def delete(self, table: TableId, column: str, prefix: str) -> int | None:
        """The rows by their exact origin values (read first: no LIKE escaping in the
        predicate), then the same origins' tombstones if the tombstones are keyed by it."""
        path = self.handles.table_path(table)
        dt = self.handles.open(path)
        found = None if dt is None else _origins(dt, column, prefix)
        if found is None:
            return None
        try:
            if found:
                dt.delete(in_predicate(column, sorted(found)))
            tomb = self.handles.open(self.handles.tombstone_path(table))
            if tomb is not None:
                held = _origins(tomb, column, prefix)
                if held:
                    tomb.delete(in_predicate(column, sorted(held)))
        except (OSError, DeltaError) as exc:
            raise self.handles.io_error(exc, path) from None
        return sum(found.values())

"""Reading a Delta sink table back (whole, by key range, by keys), with file pruning on the
key: what cdc verify and the tests compare with the source. A history table (change log,
SCD type 2) is read whole, by its mode's writer; it has no latest state to read by key."""

from __future__ import annotations

import logging
from datetime import timedelta as _timedelta
from decimal import Decimal as _Decimal
from typing import Callable, Protocol, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from merger.sinks.base import SinkError, TableId, as_table_id
from merger.sinks.delta.arrow import delta_arrow_schema

log = logging.getLogger(__name__)


class TableHandle(Protocol):
    """What a read needs of a sink table: its loaded table, user columns and whether its
    key statistics may prune files (``DeltaSink``'s table meta)."""

    main: DeltaTable
    columns: dict[str, pa.DataType]

    @property
    def prunable(self) -> bool: ...


class HistoryReads(Protocol):
    """What a history table's writer reads back (``DeltaChangelogs``, ``DeltaSCD2Tables``)."""

    def rows(self, table: TableId) -> pa.Table: ...

    def count(self, table: TableId) -> int: ...


class DeltaReads:
    """Reads of a Delta sink's tables, composed into ``DeltaSink`` (its ``reads``):
    ``meta_for(table)`` gives a latest-state table's handle, ``history_of(table)`` the
    writer of a history table (None: the table keeps the latest state)."""

    def __init__(
        self,
        meta_for: Callable[[TableId], TableHandle],
        history_of: Callable[[TableId], HistoryReads | None] = lambda table: None,
    ):
        self.meta_for = meta_for
        self.history_of = history_of

    def rows(self, table) -> pa.Table:
        """A latest table's rows; a history's rows (every change or version), its own columns included."""
        table = as_table_id(table)
        history = self.history_of(table)
        if history is not None:
            return history.rows(table)
        m = self.meta_for(table)
        t = m.main.to_pyarrow_table(columns=list(m.columns))
        return _plain(t)

    def count(self, table) -> int:
        table = as_table_id(table)
        history = self.history_of(table)
        if history is not None:
            return history.count(table)
        return self.meta_for(table).main.count()

    def _latest_only(self, table: TableId) -> None:
        if self.history_of(table) is not None:
            raise SinkError(f"table {table}: a history table has no latest state to read by key")

    def rows_in_range(self, table, key_columns: Sequence[str], lo, hi) -> pa.Table:
        """Arrow compares strings and bytes bytewise (UTF-8: code point order), as Python
        does. Files are pruned by the Delta log's min/max of the leading key column."""
        table = as_table_id(table)
        self._latest_only(table)
        m = self.meta_for(table)
        cols = list(key_columns)
        schema = self._read_schema(m)
        parts = [_bound_filter(schema, cols, b, lower) for b, lower in ((lo, True), (hi, False)) if b is not None]
        expr = None
        for p in parts:
            expr = p if expr is None else expr & p
        prune = [(cols[0], op, b[0]) for b, op in ((lo, ">="), (hi, "<=")) if b is not None and _prunable(b[0])]
        return self._scan(m, expr, prune)

    def rows_with_keys(self, table, key_columns: Sequence[str], keys) -> pa.Table:
        table = as_table_id(table)
        self._latest_only(table)
        m = self.meta_for(table)
        cols = list(key_columns)
        schema = self._read_schema(m)
        keys = [tuple(k) for k in keys]
        if not keys:
            return schema.empty_table()
        stored = [
            pc.cast(pa.array([_storage_value(k[i]) for k in keys]), schema.field(c).type) for i, c in enumerate(cols)
        ]
        expr = None
        for c, values in zip(cols, stored):
            e = ds.field(c).isin(values)
            expr = e if expr is None else expr & e
        first = stored[0].to_pylist()
        prune = [(cols[0], ">=", min(first)), (cols[0], "<=", max(first))] if all(_prunable(v) for v in first) else []
        t = self._scan(m, expr, prune)
        wanted = set(zip(*(v.to_pylist() for v in stored)))
        got = list(zip(*(t.column(c).to_pylist() for c in cols))) if t.num_rows else []
        return t.filter(pa.array([k in wanted for k in got], pa.bool_())) if got else t

    def _read_schema(self, m: TableHandle) -> pa.Schema:
        return _plain(delta_arrow_schema(m.main).empty_table().select(list(m.columns))).schema

    def _scan(self, m: TableHandle, expr, prune: list) -> pa.Table:
        """The rows matching ``expr``, filtered batch by batch in memory: pyarrow cannot
        push a string filter down into these files (delta-rs writes string_view, and the
        statistics guarantees then fail to bind), so only whole files are pruned."""
        if not m.prunable:
            prune = []  # the log's statistics of this key type are inexact (TableHandle.prunable)
        try:
            dataset = m.main.to_pyarrow_dataset(file_pruning_predicate=prune or None)
        except (DeltaError, ValueError, TypeError) as exc:  # a bound delta-rs cannot parse
            log.debug("no file pruning for %s: %s", prune, exc)
            dataset = m.main.to_pyarrow_dataset()
        schema = self._read_schema(m)
        out = []
        for batch in dataset.to_batches(columns=list(m.columns)):
            t = _plain(pa.Table.from_batches([batch]))
            if expr is not None:
                t = t.filter(expr)
            if t.num_rows:
                out.append(t.cast(schema))
        return pa.concat_tables(out) if out else schema.empty_table()


def _prunable(v) -> bool:
    """Values delta-rs file pruning parses reliably."""
    return isinstance(v, (int, str)) and not isinstance(v, bool)


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _storage_value(v):
    """A canonical key value as Delta stores it (TIME: int64 microseconds). An integer
    outside int64 (a BIGINT UNSIGNED key, stored as decimal(20, 0)) as a Decimal: Arrow
    would infer int64 for it and overflow."""
    if isinstance(v, _timedelta):
        return (v.days * 86400 + v.seconds) * 1_000_000 + v.microseconds
    if isinstance(v, int) and not isinstance(v, bool) and not _INT64_MIN <= v <= _INT64_MAX:
        return _Decimal(v)
    return v


def _bound_filter(schema: pa.Schema, cols: list[str], bound, lower: bool):
    """``key >= bound`` (lower) or ``key < bound`` as a dataset expression, lexicographic
    over the columns; a leading-column term first, for file pruning."""
    values = [pc.cast(pa.scalar(_storage_value(v)), schema.field(c).type) for c, v in zip(cols, bound)]
    last = len(values) - 1

    def level(i: int):
        f, v = ds.field(cols[i]), values[i]
        if i == last:
            return f >= v if lower else f < v
        return (f > v if lower else f < v) | ((f == v) & level(i + 1))

    expr = level(0)
    if last > 0:
        f, v = ds.field(cols[0]), values[0]
        expr = (f >= v if lower else f <= v) & expr
    return expr


def _plain(t: pa.Table) -> pa.Table:
    """View/large types as their plain equivalents (what delta-rs returns varies)."""
    fields = []
    for f in t.schema:
        typ = f.type
        if pa.types.is_string_view(typ) or pa.types.is_large_string(typ):
            typ = pa.string()
        elif pa.types.is_binary_view(typ) or pa.types.is_large_binary(typ):
            typ = pa.binary()
        fields.append(pa.field(f.name, typ, f.nullable))
    schema = pa.schema(fields)
    return t if schema == t.schema else t.cast(schema)

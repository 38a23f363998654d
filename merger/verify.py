"""Compare a sink table with its source table, row for row, in canonical form.

The source is read in key order with the same SQL projection the snapshots use, without
locks (plain consistent reads); the sink through its ``rows()``. Both are cast to the
table's canonical Arrow schema and compared by key: missing keys, extra keys and keys
whose values differ are reported (at most ``limit`` of each).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pymysql

from ingest.types import TableSpec
from merger.schema import arrow_schema, from_snapshot, quote_ident, snapshot_select


@dataclass
class Comparison:
    table: str
    source_rows: int
    sink_rows: int
    missing: list = field(default_factory=list)   # keys in the source, not in the sink
    extra: list = field(default_factory=list)     # keys in the sink, not in the source
    different: list = field(default_factory=list)  # (key, column, source value, sink value)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.extra or self.different) and self.source_rows == self.sink_rows

    def summary(self) -> str:
        if self.ok:
            return f"{self.table}: {self.source_rows} rows, equal"
        return (f"{self.table}: source {self.source_rows} rows, sink {self.sink_rows}; "
                f"missing {self.missing[:3]}, extra {self.extra[:3]}, different {self.different[:3]}")


def source_table(conn: pymysql.Connection, spec: TableSpec, keys: list[str]) -> pa.Table:
    order = ", ".join(quote_ident(k) for k in keys)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(f"SELECT {snapshot_select(spec)} FROM {quote_ident(spec.db)}.{quote_ident(spec.table)} "
                    f"ORDER BY {order}")
        names = [d[0] for d in cur.description]
        rows = cur.fetchall()
    return canonical_source_rows(spec, names, rows)


def canonical_source_rows(spec: TableSpec, names: list[str], rows) -> pa.Table:
    """Rows of a ``snapshot_select`` query (session time zone UTC) in the canonical schema."""
    columns = list(zip(*rows)) if rows else [[] for _ in names]
    raw = pa.table({n: pa.array(list(col)) if rows else pa.nulls(0) for n, col in zip(names, columns)})
    return from_snapshot(spec, arrow_schema(spec), raw)


def canonical_sink_rows(sink_rows: pa.Table, schema: pa.Schema) -> pa.Table:
    arrays = []
    for f in schema:
        if f.name not in sink_rows.column_names:
            arrays.append(pa.nulls(sink_rows.num_rows, f.type))
            continue
        col = sink_rows.column(f.name)
        if col.type != f.type:
            if pa.types.is_duration(f.type) and pa.types.is_integer(col.type):
                col = pc.cast(col, pa.int64()).cast(f.type)
            elif pa.types.is_timestamp(f.type) and pa.types.is_timestamp(col.type):
                col = pc.cast(col, f.type)
            else:
                col = pc.cast(col, f.type)
        arrays.append(col)
    return pa.Table.from_arrays(arrays, schema=schema)


def compare(name: str, source: pa.Table, sink: pa.Table, keys: list[str], limit: int = 20) -> Comparison:
    sink = canonical_sink_rows(sink, source.schema)
    src_rows = {tuple(r[k] for k in keys): r for r in source.to_pylist()}
    dst_rows = {tuple(r[k] for k in keys): r for r in sink.to_pylist()}
    result = Comparison(name, source.num_rows, sink.num_rows)
    for key, row in src_rows.items():
        other = dst_rows.get(key)
        if other is None:
            if len(result.missing) < limit:
                result.missing.append(key)
            continue
        for col, value in row.items():
            if other.get(col) != value and len(result.different) < limit:
                result.different.append((key, col, value, other.get(col)))
    result.extra = [k for k in dst_rows if k not in src_rows][:limit]
    if len(dst_rows) != sink.num_rows and not result.extra:
        result.extra.append(("<duplicate keys in sink>",))
    return result

"""One canonical Arrow schema per table version, and the two ways rows reach it.

Streamed changes arrive as Debezium JSON (``after``/``before`` images); snapshot chunks
arrive from a JDBC SELECT. Both are converted to the same Arrow types, decided here from
the table's ``TableSpec`` (the same spec ingest encodes with):

* ``arrow_schema(spec)``: the canonical types (Debezium's own mapping, as Arrow types);
* ``json_converters(spec, modes)``: per column, Debezium JSON value -> Arrow-ready Python
  value (timestamps as epoch microseconds, dates as epoch days, TIME as microseconds,
  BIT(n>1) as big-endian bytes: Debezium's ``io.debezium.data.Bits`` is little-endian);
* ``snapshot_select(spec)``: per column, a SQL expression that makes MariaDB return a
  plain type JDBC cannot get wrong (temporal values as integers computed in SQL, large
  decimals as text), and ``from_snapshot`` to cast those to the canonical types.

BIT(n>1) is held as the big-endian bytes of its value, ceil(n/8) of them: what MySQL
returns for ``SELECT bitcol`` (b'110001100001' in BIT(12) -> 0C 61). The Arrow field
carries its width in the metadata (``merger.sinks.types.BIT_WIDTH``), so that the Kafka
changelog sink can write Debezium's little-endian form again. BIT(1) is a boolean.

Pure: no Spark, no Kafka, no database.
"""

from __future__ import annotations

import base64
import datetime as dt
import sys
from dataclasses import dataclass
from decimal import Context, Decimal
from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc

from cdc.quoting import quote_ident, text_literal
from cdc.tablespec import GEOMETRY_TYPES, ColumnSpec, TableSpec
from merger.sinks.types import BIT_WIDTH

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


@dataclass(frozen=True)
class SourceModes:
    """How the producer encoded values (ingest's / Debezium's connector options)."""

    decimal_handling_mode: str = "precise"
    time_precision_mode: str = "adaptive_time_microseconds"
    bigint_unsigned_handling_mode: str = "long"
    binary_handling_mode: str = "bytes"


def _int_type(c: ColumnSpec) -> pa.DataType:
    t, u = c.type_name, c.unsigned
    if t == "tinyint":
        return pa.int16()
    if t == "smallint":
        return pa.int32() if u else pa.int16()
    if t in ("mediumint",):
        return pa.int32()
    if t == "int":
        return pa.int64() if u else pa.int32()
    if t == "year":
        return pa.int32()
    return pa.decimal128(20, 0) if u else pa.int64()  # bigint


def _decimal_type(c: ColumnSpec) -> pa.DataType:
    p = c.length or 10
    s = c.scale or 0
    return pa.decimal128(p, s) if p <= 38 else pa.decimal256(p, s)


def column_type(c: ColumnSpec) -> pa.DataType:
    t = c.type_name
    if t in ("tinyint", "smallint", "mediumint", "int", "bigint", "year"):
        return _int_type(c)
    if t == "boolean":
        return pa.bool_()
    if t in ("decimal", "numeric"):
        return _decimal_type(c)
    if t in ("float", "real") and not (t == "float" and c.length and c.scale is not None):
        return pa.float32() if t == "float" else pa.float64()
    if t in ("double", "float", "real"):
        return pa.float64()
    if t in ("date",):
        return pa.date32()
    if t == "datetime":
        return pa.timestamp("us")
    if t == "timestamp":
        return pa.timestamp("us", tz="UTC")
    if t == "time":
        return pa.duration("us")
    if t == "bit":
        return pa.bool_() if (c.length or 1) == 1 else pa.binary()
    if t in ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob") or t in GEOMETRY:
        return pa.binary()
    return pa.string()  # char, varchar, text, enum, set, json, unknown


GEOMETRY = GEOMETRY_TYPES  # the table model's own list


def arrow_schema(spec: TableSpec) -> pa.Schema:
    return pa.schema(
        [
            pa.field(
                c.name,
                column_type(c),
                nullable=c.nullable or c.name not in spec.primary_key,
                metadata=_field_metadata(c),
            )
            for c in spec.columns
        ]
    )


def _field_metadata(c: ColumnSpec) -> dict | None:
    if c.type_name == "bit" and (c.length or 1) > 1:
        return {BIT_WIDTH: str(c.length).encode()}
    return None


# ------------------------------------------------------------------ BIT(n>1)


def bits_from_debezium(n_bits: int) -> Callable[[str], bytes]:
    """Debezium's ``io.debezium.data.Bits`` (base64 of the little-endian bytes, whatever
    ``binary.handling.mode`` says) -> the big-endian bytes of BIT(n), ceil(n/8) of them."""
    width = (n_bits + 7) // 8

    def conv(v) -> bytes:
        value = int.from_bytes(_b64(v) if isinstance(v, str) else bytes(v), "little")
        if value >> n_bits:
            raise ValueError(f"BIT({n_bits}) value {value:#x} has more than {n_bits} bits")
        return value.to_bytes(width, "big")

    return conv


def bits_to_big_endian(values: pa.Array | pa.ChunkedArray, n_bits: int) -> pa.Array:
    """Unsigned integer values of BIT(n) (integers, decimals or digit strings, as the
    snapshot SELECT returns them) -> their big-endian bytes, ceil(n/8) of them. Vectorised:
    the bytes are put in place as an integer whose native 8 bytes start with them."""
    width = (n_bits + 7) // 8
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks else pa.array([], values.type)
    u = pc.cast(values, pa.uint64())
    if n_bits < 64:
        top = pc.max(u).as_py()
        if top is not None and top >> n_bits:
            raise ValueError(f"BIT({n_bits}) value {top:#x} has more than {n_bits} bits")
    if sys.byteorder == "little":
        swapped = None
        for k in range(width):  # byte k (least significant first) goes to offset width-1-k
            byte = pc.bit_wise_and(pc.shift_right(u, pa.scalar(8 * k, pa.uint64())), pa.scalar(0xFF, pa.uint64()))
            part = pc.shift_left(byte, pa.scalar(8 * (width - 1 - k), pa.uint64()))
            swapped = part if swapped is None else pc.bit_wise_or(swapped, part)
        raw, start = swapped, 0
    else:
        raw, start = u, 8 - width
    return pc.cast(pc.binary_slice(raw.view(pa.binary(8)), start, start + width), pa.binary())


# ------------------------------------------------------------------ Debezium JSON -> Arrow values


def _b64(v: str) -> bytes:
    return base64.b64decode(v)


_EXACT = Context(prec=200)  # DECIMAL(65,30) and more, never rounded (the default context keeps 28 digits)


def _decimal_from(modes: SourceModes, scale: int) -> Callable[[Any], Any]:
    if modes.decimal_handling_mode == "precise":

        def conv(v):
            raw = _b64(v) if isinstance(v, str) else v
            return Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-scale, context=_EXACT)

        return conv
    q = Decimal(1).scaleb(-scale)
    return lambda v: Decimal(str(v)).quantize(q, context=_EXACT)


def _timestamp_iso(v: str) -> int:
    text = v.replace("Z", "+00:00")
    value = dt.datetime.fromisoformat(text)
    delta = value - _EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def json_converter(c: ColumnSpec, modes: SourceModes) -> Callable[[Any], Any]:
    """Debezium JSON value of column ``c`` -> the Python value for its canonical Arrow type
    (None stays None; the caller skips the call for None)."""
    t = c.type_name
    typ = column_type(c)
    if t == "bigint" and c.unsigned:
        if modes.bigint_unsigned_handling_mode == "precise":
            return _decimal_from(
                modes if modes.decimal_handling_mode == "precise" else SourceModes(decimal_handling_mode="precise"), 0
            )
        return lambda v: Decimal(v + (1 << 64) if v < 0 else v)
    if t == "year":
        # YEAR holds 1901..2155 and 0000; Debezium (reading the binlog) writes 1900 for 0000
        return lambda v: 0 if v == 1900 else int(v)
    if pa.types.is_integer(typ):
        return int
    if t == "boolean":
        return lambda v: bool(v)
    if t in ("decimal", "numeric"):
        return _decimal_from(modes, c.scale or 0)
    if pa.types.is_floating(typ):
        return float
    if t == "date":
        return int  # io.debezium.time.Date: days since epoch
    if t == "datetime":
        if (c.fsp or 0) <= 3:
            return lambda v: v * 1000  # io.debezium.time.Timestamp: ms
        return int  # MicroTimestamp
    if t == "timestamp":
        return _timestamp_iso
    if t == "time":
        if modes.time_precision_mode == "connect":
            return lambda v: v * 1000
        return int
    if t == "bit":
        if (c.length or 1) == 1:
            return bool
        return bits_from_debezium(c.length)
    if t in GEOMETRY:
        return lambda v: _b64(v["wkb"]) if isinstance(v, dict) else _b64(v)
    if pa.types.is_binary(typ):
        return _binary(modes)
    return str


def _binary(modes: SourceModes) -> Callable[[Any], bytes]:
    mode = modes.binary_handling_mode
    if mode == "hex":
        return bytes.fromhex
    if mode == "base64-url-safe":
        return base64.urlsafe_b64decode
    return _b64


def json_converters(spec: TableSpec, modes: SourceModes) -> dict[str, Callable[[Any], Any]]:
    return {c.name: json_converter(c, modes) for c in spec.columns}


def rows_to_arrow(
    spec: TableSpec,
    schema: pa.Schema,
    converters: dict,
    rows: list[dict | None],
    extra: dict[str, tuple[pa.DataType, list]] | None = None,
) -> pa.Table:
    """Arrow table of canonical columns from Debezium images (None image = all null)."""
    arrays = []
    for f in schema:
        conv = converters[f.name]
        name = f.name
        values = []
        append = values.append
        for r in rows:
            v = None if r is None else r.get(name)
            append(None if v is None else conv(v))
        arrays.append(pa.array(values, type=f.type))
    fields = [pa.field(f.name, f.type, metadata=f.metadata) for f in schema]  # the BIT width
    for name, (typ, values) in (extra or {}).items():
        arrays.append(pa.array(values, type=typ))
        fields.append(pa.field(name, typ))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


# ------------------------------------------------------------------ snapshot SELECT -> Arrow


def snapshot_expression(c: ColumnSpec) -> str:
    """SQL giving column ``c`` as a plain value for JDBC (the session runs in UTC)."""
    q = quote_ident(c.name)
    t = c.type_name
    if t == "date":
        return _zero_date_rule(c, f"(TO_DAYS({q}) - 719528)", "(TO_DAYS({}) - 719528)")
    if t in ("datetime", "timestamp"):
        return _zero_date_rule(
            c,
            f"TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {q})",
            "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {})",
        )
    if t == "time":
        return f"CAST(TIME_TO_SEC({q}) * 1000000 AS SIGNED)"
    if t in ("tinyint", "smallint", "mediumint", "int", "year", "boolean"):
        return f"CAST({q} AS SIGNED)"
    if t == "bigint":
        return f"CAST({q} AS DECIMAL(20,0))" if c.unsigned else q
    if t == "bit":
        return f"CAST({q} AS DECIMAL(20,0))"
    if t in ("decimal", "numeric") and (c.length or 10) > 38:
        return f"CAST({q} AS CHAR)"
    if t in GEOMETRY:
        return f"ST_AsBinary({q})"
    if t in ("enum", "set", "json"):
        return f"CAST({q} AS CHAR)"
    if t in ("float", "double"):
        # exact: the text protocol rounds a FLOAT to 6 digits (16777217 -> 16777200) and
        # a DOUBLE(M,D) to D decimals (-9.999999999998899e-05 -> -0.0001); the binlog (and
        # so the stream) carries the value itself
        return f"CAST({q} AS DOUBLE)"
    if t == "char":
        return f"CAST({q} AS CHAR)"  # Spark JDBC pads CHAR(n) to n; the stream has it trimmed
    return q


def _zero_date_rule(c: ColumnSpec, expression: str, of_literal: str) -> str:
    """A zero or invalid date ('0000-00-00', '2020-00-10') reads as NULL in SQL. The stream
    follows Debezium's rule: NULL in a nullable column; in a NOT NULL one the column's
    DEFAULT if that is a valid date, else the epoch. The snapshot says the same."""
    if c.nullable:
        return expression
    fallbacks = [expression]
    if c.default and c.default[:1].isdigit():
        fallbacks.append(of_literal.format(text_literal(c.default)))
    return f"COALESCE({', '.join(fallbacks)}, 0)"


def snapshot_select(spec: TableSpec, constants: dict[str, str] | None = None) -> str:
    """The SELECT list of a snapshot read; ``constants``: columns the source table does not
    have, read as these literal texts (the origin column of a routed table, cdc.routes)."""
    return ", ".join(
        f"{constant_expression(constants[c.name]) if constants and c.name in constants else snapshot_expression(c)}"
        f" AS {quote_ident(c.name)}"
        for c in spec.columns
    )


def constant_expression(text: str) -> str:
    """A text as a literal of the source's SQL, the same under every sql_mode (``text_literal``)."""
    return text_literal(text)


def from_snapshot(spec: TableSpec, schema: pa.Schema, batch: pa.RecordBatch | pa.Table) -> pa.Table:
    """Cast a staged snapshot batch (columns as ``snapshot_expression`` returned them) to
    the canonical schema."""
    table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
    arrays = []
    for c, f in zip(spec.columns, schema):
        col = table.column(c.name)
        typ = f.type
        if col.type == typ:
            arrays.append(col)
        elif c.type_name == "bit" and pa.types.is_binary(typ):
            arrays.append(bits_to_big_endian(col, c.length or 1))
        elif pa.types.is_boolean(typ):
            arrays.append(pc.not_equal(pc.cast(col, pa.int64()), 0))
        elif pa.types.is_date32(typ):
            arrays.append(pc.cast(pc.cast(col, pa.int32()), typ))
        elif pa.types.is_timestamp(typ) or pa.types.is_duration(typ):
            arrays.append(pc.cast(pc.cast(col, pa.int64()), typ))
        else:
            arrays.append(pc.cast(col, typ))
    return pa.Table.from_arrays(arrays, schema=schema)

"""Arrow -> sink type mapping, and the one rule set that decides whether a column's type
change is the same type, a widening the sink follows, or an incompatible change.

Every sink maps an incoming Arrow type to a *storage type*: the Arrow type that stands
for what the sink really stores (for PostgreSQL each storage type corresponds 1:1 to a
PostgreSQL type). Schema changes are judged on storage types with :func:`compare`, so
e.g. ``uint8 -> int16`` is no change at all for PostgreSQL (both are ``smallint``).

PostgreSQL (``pg_storage_type`` / ``pg_type_name``)::

    int8, int16, uint8          smallint
    int32, uint16               integer
    int64, uint32               bigint
    uint64                      numeric(20,0)
    float16, float32            real
    float64                     double precision
    decimal128/256(p,s)         numeric(p,s)
    string, large_string, view  text          (arrow.json extension: jsonb if enabled)
    binary, large, fixed, view  bytea
    bool                        boolean
    date32, date64              date
    timestamp[*] (no tz)        timestamp      (microseconds; ns truncated)
    timestamp[*, tz=any]        timestamptz    (the instant; read back as tz=UTC)
    time32/time64/duration      interval       (exact microseconds; MySQL TIME may be
                                                negative or exceed 24 h, which interval
                                                holds; read back as duration[us])

Delta Lake (``delta_storage_type``): the same, except
    int8 -> byte, int16 -> short (Delta has both); unsigned as above (no unsigned in Delta);
    time32/time64/duration -> int64 microseconds (Delta has no TIME/interval type;
    this is Debezium's MicroTime); decimal with precision > 38 -> string (Delta's
    maximum is 38); timestamp -> timestamp_ntz, timestamp[tz] -> timestamp (UTC).

Kafka changelog (``kafka_storage_type``): the normalized Arrow type (JSON has no types
to widen; we still refuse narrowing/family changes so all sinks pause alike).

Widening (``compare``): signed int to a wider int; int to decimal(p,s) with
p - s >= the int's digits; decimal(p,s) -> (p2,s2) with s2 >= s and p2 - s2 >= p - s;
float32 -> float64; text <- json (kept as text). Everything else that differs is
incompatible (narrowing, type family change, tz <-> no tz, ...). Strings are stored as
text/string whatever their declared length, so a longer VARCHAR is no change at all.
"""

from __future__ import annotations

import pyarrow as pa

from cdc.errors import CdcError

SAME, WIDEN = "same", "widen"

#: Arrow field metadata of a MySQL BIT(n>1) column (``merger.schema.canonical``): its width n. The
#: values are the big-endian bytes of the bits, ceil(n/8) of them, which Delta and
#: PostgreSQL store as they are (binary / bytea); the Kafka changelog sink writes them in
#: Debezium's little-endian ``io.debezium.data.Bits`` form.
BIT_WIDTH = b"cdc.bit_width"


def bit_width(field: pa.Field) -> int | None:
    """n for a BIT(n>1) field (see ``BIT_WIDTH``), else None."""
    raw = (field.metadata or {}).get(BIT_WIDTH)
    return int(raw) if raw else None


_INT_DIGITS = {8: 3, 16: 5, 32: 10, 64: 19}


class UnsupportedType(CdcError, TypeError):
    """An Arrow type the sink cannot store."""


def is_json(t: pa.DataType) -> bool:
    return isinstance(t, pa.BaseExtensionType) and t.extension_name == "arrow.json"


def _strip(t: pa.DataType) -> pa.DataType:
    """Dictionary -> value type; extension types other than JSON -> storage type."""
    if pa.types.is_dictionary(t):
        return _strip(t.value_type)
    if isinstance(t, pa.BaseExtensionType) and not is_json(t):
        return _strip(t.storage_type)
    return t


def _common(t: pa.DataType) -> pa.DataType | None:
    """Normalisation shared by all sinks; None when the sink-specific part decides."""
    t = _strip(t)
    if pa.types.is_null(t):
        raise UnsupportedType("column type is null (no values to infer a type from); pass a typed schema")
    if is_json(t):
        return t
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_binary_view(t)
    ):
        return pa.binary()
    if pa.types.is_boolean(t):
        return pa.bool_()
    if pa.types.is_date(t):
        return pa.date32()
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz="UTC" if t.tz else None)
    if pa.types.is_float16(t) or pa.types.is_float32(t):
        return pa.float32()
    if pa.types.is_float64(t):
        return pa.float64()
    if pa.types.is_uint64(t):
        return pa.decimal128(20, 0)
    if pa.types.is_decimal(t):
        return pa.decimal128(t.precision, t.scale) if t.precision <= 38 else pa.decimal256(t.precision, t.scale)
    return None


def pg_storage_type(t: pa.DataType, json_as_jsonb: bool = True) -> pa.DataType:
    c = _common(t)
    if c is not None:
        if is_json(c) and not json_as_jsonb:
            return pa.string()
        return c
    t = _strip(t)
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_uint8(t):
        return pa.int16()
    if pa.types.is_int32(t) or pa.types.is_uint16(t):
        return pa.int32()
    if pa.types.is_int64(t) or pa.types.is_uint32(t):
        return pa.int64()
    if pa.types.is_time(t) or pa.types.is_duration(t):
        return pa.duration("us")
    raise UnsupportedType(f"no PostgreSQL mapping for Arrow type {t}")


def delta_storage_type(t: pa.DataType) -> pa.DataType:
    c = _common(t)
    if c is not None:
        if is_json(c):
            return pa.string()
        if pa.types.is_decimal(c) and c.precision > 38:
            return pa.string()
        return c
    t = _strip(t)
    if pa.types.is_int8(t):
        return pa.int8()
    if pa.types.is_int16(t) or pa.types.is_uint8(t):
        return pa.int16()
    if pa.types.is_int32(t) or pa.types.is_uint16(t):
        return pa.int32()
    if pa.types.is_int64(t) or pa.types.is_uint32(t):
        return pa.int64()
    if pa.types.is_time(t) or pa.types.is_duration(t):
        return pa.int64()
    raise UnsupportedType(f"no Delta Lake mapping for Arrow type {t}")


def kafka_storage_type(t: pa.DataType) -> pa.DataType:
    c = _common(t)
    if c is not None:
        return c
    t = _strip(t)
    if pa.types.is_integer(t):
        return t
    if pa.types.is_time(t):
        return pa.time64("us")
    if pa.types.is_duration(t):
        return pa.duration("us")
    raise UnsupportedType(f"no changelog mapping for Arrow type {t}")


# --------------------------------------------------------------------------- PostgreSQL names

_PG_SIMPLE = {
    pa.int16(): "smallint",
    pa.int32(): "integer",
    pa.int64(): "bigint",
    pa.float32(): "real",
    pa.float64(): "double precision",
    pa.string(): "text",
    pa.binary(): "bytea",
    pa.bool_(): "boolean",
    pa.date32(): "date",
    pa.timestamp("us"): "timestamp without time zone",
    pa.timestamp("us", tz="UTC"): "timestamp with time zone",
    pa.duration("us"): "interval",
}
_PG_BACK = {v: k for k, v in _PG_SIMPLE.items()}


def pg_type_name(storage: pa.DataType) -> str:
    """The PostgreSQL type of a storage type (as ``format_type`` spells it)."""
    if is_json(storage):
        return "jsonb"
    if pa.types.is_decimal(storage):
        return f"numeric({storage.precision},{storage.scale})"
    try:
        return _PG_SIMPLE[storage]
    except KeyError:
        raise UnsupportedType(f"no PostgreSQL type for storage type {storage}") from None


def pg_type_to_storage(name: str) -> pa.DataType | None:
    """Inverse of :func:`pg_type_name` for ``format_type`` output; None for a type this
    sink never creates (a column an operator added by hand: left alone)."""
    name = name.strip().lower()
    if name in _PG_BACK:
        return _PG_BACK[name]
    if name == "jsonb" or name == "json":
        return pa.json_()
    if name.startswith("numeric(") and name.endswith(")"):
        p, _, s = name[8:-1].partition(",")
        p, s = int(p), int(s or 0)
        return pa.decimal128(p, s) if p <= 38 else pa.decimal256(p, s)
    if name in ("character varying", "character", '"char"') or name.startswith(("character varying(", "character(")):
        return pa.string()
    return None


# --------------------------------------------------------------------------- widening


def compare(old: pa.DataType, new: pa.DataType) -> str | None:
    """SAME, WIDEN, or None (incompatible) for a column stored as ``old`` whose source
    type now maps to ``new`` (both storage types)."""
    if old == new:
        return SAME
    if pa.types.is_string(old) and is_json(new):
        return SAME  # keep text: every JSON document is text
    ints = pa.types.is_signed_integer
    if ints(old) and ints(new):
        return WIDEN if new.bit_width > old.bit_width else None
    if ints(old) and pa.types.is_decimal(new):
        return WIDEN if new.precision - new.scale >= _INT_DIGITS[old.bit_width] else None
    if pa.types.is_decimal(old) and pa.types.is_decimal(new):
        if new.scale >= old.scale and new.precision - new.scale >= old.precision - old.scale:
            return WIDEN
        return None
    if pa.types.is_float32(old) and pa.types.is_float64(new):
        return WIDEN
    return None

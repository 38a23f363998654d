"""The one canonical form in which `cdc verify` and the tests compare a source value with
a sink value.

Independent of what it checks: this module imports nothing of the pipeline (not
``merger.schema.canonical``, not ``ingest.converters``, no sink code). The source side is a value as a
plain pymysql ``SELECT col`` returns it (session ``time_zone = '+00:00'``), typed by the
column's ``information_schema.COLUMNS`` row; the sink side is a value as the sink's own
client returns it (psycopg for PostgreSQL, deltalake -> pyarrow -> ``to_pylist`` for
Delta). Both become the same canonical value when, and only when, the sink holds the
source's value. Pure: no I/O.

Canonical values are ``None`` (SQL NULL) or a ``str`` written per column type:

==================  ======================================  ==============================
type                canonical                               sink values accepted
==================  ======================================  ==============================
integers, YEAR      decimal digits: ``18446744073709551615``  int; integral Decimal
TINYINT(1) stored   ``true``/``false`` (non-zero is true:     bool (only when the sink
as boolean          what a BOOLEAN column means)              column is boolean)
DECIMAL(p,s)        the exact number, plain notation,         Decimal; str (Delta holds
                    no trailing zeros: ``1.5``, ``-0.000001`` p > 38 as text); int
FLOAT               the float32 value rounded to 6            float (float32 or float64)
                    significant digits, as ``repr``
FLOAT(M,D),         rounded to D decimals (the server         float
DOUBLE(M,D)         prints no more)
DOUBLE              ``repr`` of the double (exact)            float
CHAR                the text without trailing spaces          str
VARCHAR, TEXT,      the text                                  str
ENUM, SET
JSON                parsed, then written with sorted keys,    str (text, parsed here);
                    no spaces, numbers by value (1.0 = 1)     parsed JSON (jsonb)
BINARY, VARBINARY,  ``0x`` + hex of the bytes (BINARY(n)      bytes
BLOB                padded with 0x00 to n)
BIT(n)              ``0x`` + hex of ceil(n/8) big-endian      bytes; bool for BIT(1)
                    bytes (what MySQL returns)
DATE                ``YYYY-MM-DD``                            date
DATETIME            ``YYYY-MM-DD HH:MM:SS.ffffff``            naive datetime
TIMESTAMP           the instant in UTC:                       aware datetime (any zone)
                    ``YYYY-MM-DD HH:MM:SS.ffffffZ``
TIME                ``[-]H:MM:SS.ffffff`` (negative and       timedelta; int microseconds
                    beyond 24 h kept)                         (Delta)
GEOMETRY            ``0x`` + hex of the WKB                   bytes (WKB)
==================  ======================================  ==============================

A sink value of any other Python type canonicalises to a tuple
``("unexpected", type, repr)``, which never equals a source value.

Documented rules (the sinks' contract, applied here explicitly):

* **Zero and invalid dates** (``'0000-00-00'``, ``'2020-00-10'``, a zero TIMESTAMP; any
  DATE/DATETIME/TIMESTAMP with a zero year, month or day, which ``sql_mode=''`` allows):
  NULL in a nullable column; in a NOT NULL column the column's DEFAULT when that is a
  valid date/time literal, else the epoch (``1970-01-01``, ``1970-01-01 00:00:00``, the
  instant 0). This is Debezium's rule, which the stream follows.
* **NUL characters** (U+0000) in strings: Delta holds them unchanged. PostgreSQL text
  cannot hold them; its sink applies ``sinks.postgres.nul_policy``, and so does the
  canonical form of the *source* value for a PostgreSQL sink: ``strip`` removes them,
  ``replace`` writes U+FFFD for each; ``pause`` keeps them (the table is paused, so the
  sink cannot be equal and verify says so). Verify counts the source values the rule
  changed (``nul_rule_changes``) and reports them: equal, except for those.
* **BOOLEAN**: MariaDB shows a BOOLEAN column as ``tinyint(1)``. When the sink column is
  boolean, the source's integer compares as true if non-zero; otherwise as the integer.
* **GEOMETRY**: the source returns the SRID (4 bytes) then the WKB; the sinks hold the WKB
  only, so the SRID is not compared.
* **FLOAT** over the text protocol: the server prints a FLOAT with 6 significant digits
  (16777217 -> 16777200), and a FLOAT(M,D)/DOUBLE(M,D) with D decimals, so those values are
  compared at that precision (a difference beyond it cannot be seen by a plain SELECT).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
import struct
from dataclasses import dataclass
from decimal import Context, Decimal, InvalidOperation
from typing import Any, Callable, Mapping

from cdc.errors import CdcError

INTEGER_TYPES = ("tinyint", "smallint", "mediumint", "int", "integer", "bigint", "year")
STRING_TYPES = ("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set")
BINARY_TYPES = ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob")
GEOMETRY_TYPES = (
    "geometry",
    "point",
    "linestring",
    "polygon",
    "multipoint",
    "multilinestring",
    "multipolygon",
    "geometrycollection",
    "geomcollection",
)
NUL_POLICIES = ("strip", "replace", "pause")

# exact decimal arithmetic: the default context rounds to 28 digits (DECIMAL(65,30) has 65)
_EXACT = Context(prec=2000, Emax=10**6, Emin=-(10**6))
_EPOCH = _dt.datetime(1970, 1, 1)
_UTC = _dt.timezone.utc


class UnsupportedColumn(CdcError, ValueError):
    """A column type this module has no canonical form for (verify reports an error for
    the table rather than skipping the column)."""


@dataclass(frozen=True)
class Column:
    """One source column, as ``information_schema.COLUMNS`` describes it."""

    name: str
    data_type: str  # DATA_TYPE, lower case: 'int', 'bit', 'longtext'
    column_type: str  # COLUMN_TYPE: 'bigint(20) unsigned', 'bit(12)'
    nullable: bool = True
    default: str | None = None  # COLUMN_DEFAULT as shown ("'2000-01-01'", 'NULL', None)
    numeric_scale: int | None = None
    datetime_precision: int | None = None
    character_set: str | None = None
    is_json: bool = False  # DATA_TYPE json, or MariaDB's CHECK (json_valid(col))

    @classmethod
    def from_information_schema(cls, row: Mapping[str, Any], is_json: bool = False) -> "Column":
        def get(key):
            return row.get(key, row.get(key.lower()))

        data_type = str(get("DATA_TYPE")).lower()
        return cls(
            name=get("COLUMN_NAME"),
            data_type=data_type,
            column_type=str(get("COLUMN_TYPE") or data_type).lower(),
            nullable=str(get("IS_NULLABLE") or "YES").upper() == "YES",
            default=get("COLUMN_DEFAULT"),
            numeric_scale=_int_or_none(get("NUMERIC_SCALE")),
            datetime_precision=_int_or_none(get("DATETIME_PRECISION")),
            character_set=get("CHARACTER_SET_NAME"),
            is_json=is_json or data_type == "json",
        )

    @property
    def unsigned(self) -> bool:
        return "unsigned" in self.column_type

    @property
    def bits(self) -> int:
        """n of BIT(n)."""
        m = re.match(r"bit\((\d+)\)", self.column_type)
        return int(m.group(1)) if m else 1

    @property
    def kind(self) -> str:
        """The canonical rule family of the column."""
        t = self.data_type
        if self.is_json or t == "json":
            return "json"
        if t in INTEGER_TYPES:
            return "int"
        if t in ("decimal", "numeric"):
            return "decimal"
        if t in ("float", "double", "real", "double precision"):
            return "float"
        if t in STRING_TYPES:
            return "string"
        if t in BINARY_TYPES:
            return "binary"
        if t == "bit":
            return "bit"
        if t in ("date", "datetime", "timestamp", "time"):
            return t
        if t in GEOMETRY_TYPES:
            return "geometry"
        raise UnsupportedColumn(f"column {self.name!r}: no canonical form for type {self.column_type!r}")


def _int_or_none(v: Any) -> int | None:
    return None if v is None else int(v)


# the SQL dialects a sink's digest queries are written in (merger.verify.sql_digest)
POSTGRESQL, DATAFUSION = "postgresql", "datafusion"


@dataclass(frozen=True)
class SinkRules:
    """What the rules of the canonical form and of the digest texts need to know of a sink;
    each sink's verify reader (``merger.verify.sinks``) carries its own, so nothing here
    tests which sink it is.

    ``dialect``: the SQL of the sink's digest queries (``POSTGRESQL``, or ``DATAFUSION`` over
    a Delta table); ``nul_policy``: what the sink does to NUL characters in text (strip |
    replace | pause), None for a sink that stores them as they are."""

    dialect: str
    nul_policy: str | None = None

    def __post_init__(self):
        if self.dialect not in (POSTGRESQL, DATAFUSION):
            raise ValueError(f"unknown SQL dialect {self.dialect!r}")
        if self.nul_policy is not None and self.nul_policy not in NUL_POLICIES:
            raise ValueError(f"nul_policy must be one of {', '.join(NUL_POLICIES)}, not {self.nul_policy!r}")


def unexpected(v: Any) -> tuple:
    """A sink value of a type the column's rule does not accept: never equal to anything a
    source value becomes."""
    return ("unexpected", type(v).__name__, repr(v)[:200])


# ------------------------------------------------------------------ scalar rules


def integer(v: Any) -> str | tuple:
    if isinstance(v, bool):
        return unexpected(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, Decimal) and v.is_finite() and v == v.to_integral_value():
        return str(int(v))
    if isinstance(v, str) and re.fullmatch(r"-?\d+", v):  # source: a text-protocol value
        return str(int(v))
    return unexpected(v)


def integer_sink(v: Any) -> str | tuple:
    """A sink's integer: an int (or an integral Decimal), never text (a sink that stored
    an integer column as text differs from its source)."""
    if isinstance(v, str):
        return unexpected(v)
    return integer(v)


def boolean_of_int(v: Any) -> str | tuple:
    """A BOOLEAN (tinyint(1)) source value where the sink column is boolean."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return "true" if v != 0 else "false"
    return unexpected(v)


def decimal(v: Any) -> str | tuple:
    if type(v) is Decimal and v.is_finite():
        return _plain_number(v)
    if isinstance(v, bool) or isinstance(v, float):
        return unexpected(v)  # a float is not an exact decimal
    if isinstance(v, int):
        v = Decimal(v)
    elif isinstance(v, str):
        try:
            v = Decimal(v.strip())
        except InvalidOperation:
            return unexpected(v)
    if not isinstance(v, Decimal) or not v.is_finite():
        return unexpected(v)
    return _plain_number(v)


def _plain_number(v: Decimal) -> str:
    """The exact number in plain notation without trailing zeros ('f' never rounds)."""
    s = format(v, "f")
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    return "0" if s in ("-0", "0", "") else s


def _float32(x: float) -> float:
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return x


def float_rule(col: Column) -> Callable[[Any], str | tuple]:
    scale = col.numeric_scale
    single = col.data_type == "float"

    def conv(v):
        if isinstance(v, bool) or not isinstance(v, (float, int, Decimal)):
            return unexpected(v)
        x = float(v)
        if math.isnan(x) or math.isinf(x):
            return repr(x)
        if single:
            x = _float32(x)
        if scale is not None:
            return format(x, f".{scale}f")
        if single:
            return repr(float(format(x, ".6g")))
        return repr(x)

    return conv


def _hex(v: bytes) -> str:
    return "0x" + v.hex()


def binary(v: Any) -> str | tuple:
    if isinstance(v, (bytes, bytearray, memoryview)):
        return _hex(bytes(v))
    return unexpected(v)


def bit_source(col: Column) -> Callable[[Any], str | tuple]:
    width = (col.bits + 7) // 8

    def conv(v):
        if isinstance(v, (bytes, bytearray)):
            n = int.from_bytes(bytes(v), "big")
        elif isinstance(v, int) and not isinstance(v, bool):
            n = v
        else:
            return unexpected(v)
        return _hex(n.to_bytes(width, "big"))

    return conv


def bit_sink(col: Column) -> Callable[[Any], str | tuple]:
    one = col.bits == 1

    def conv(v):
        if isinstance(v, bool):
            return ("0x01" if v else "0x00") if one else unexpected(v)
        return binary(v)

    return conv


def string_source(col: Column, rules: SinkRules) -> Callable[[Any], str | tuple]:
    pad = col.data_type == "char"
    nul = rules.nul_policy

    def conv(v):
        if isinstance(v, (bytes, bytearray)):
            v = bytes(v).decode("utf-8", "surrogateescape")
        if not isinstance(v, str):
            return unexpected(v)
        if pad:
            v = v.rstrip(" ")
        if nul == "strip":
            v = v.replace("\x00", "")
        elif nul == "replace":
            v = v.replace("\x00", "\ufffd")
        return v

    return conv


def nul_rule_applies(rules: SinkRules) -> bool:
    """Whether the sink's NUL rule changes values (PostgreSQL's strip or replace)."""
    return rules.nul_policy in ("strip", "replace")


def has_nul(v: Any) -> bool:
    """A source string value holding a NUL character (what the NUL rule changes)."""
    if isinstance(v, str):
        return "\x00" in v
    return isinstance(v, (bytes, bytearray)) and b"\x00" in v


def string_sink(v: Any) -> str | tuple:
    return v if isinstance(v, str) else unexpected(v)


# JSON: parsed, numbers by value, keys sorted, no spaces


def _json_number(d: Decimal) -> str:
    if not d.is_finite():
        return str(d)
    if d == 0:
        return "0"
    return str(d.normalize(_EXACT))


def json_value(obj: Any) -> str:
    """Parsed JSON (dict/list/str/int/float/Decimal/bool/None) in canonical text."""
    if obj is None:
        return "null"
    if isinstance(obj, bool):
        return "true" if obj else "false"
    if isinstance(obj, int):
        return _json_number(Decimal(obj))
    if isinstance(obj, float):
        return _json_number(Decimal(repr(obj)))
    if isinstance(obj, Decimal):
        return _json_number(obj)
    if isinstance(obj, str):
        return json.dumps(obj, ensure_ascii=False)
    if isinstance(obj, (list, tuple)):
        return "[" + ",".join(json_value(x) for x in obj) + "]"
    if isinstance(obj, dict):
        return (
            "{"
            + ",".join(json.dumps(str(k), ensure_ascii=False) + ":" + json_value(obj[k]) for k in sorted(obj, key=str))
            + "}"
        )
    raise TypeError(f"not a JSON value: {obj!r}")


def json_text(v: Any) -> str | tuple:
    """JSON text (the source, a text sink column): parsed and normalised; text that does
    not parse stays as it is (then it only equals the same text)."""
    if isinstance(v, (bytes, bytearray)):
        v = bytes(v).decode("utf-8", "surrogateescape")
    if not isinstance(v, str):
        return unexpected(v)
    try:
        return json_value(json.loads(v, parse_float=Decimal))
    except ValueError:
        return v


def _map_strings(obj: Any, f: Callable[[str], str]) -> Any:
    if isinstance(obj, str):
        return f(obj)
    if isinstance(obj, list):
        return [_map_strings(x, f) for x in obj]
    if isinstance(obj, dict):
        return {f(k): _map_strings(x, f) for k, x in obj.items()}
    return obj


def json_source(rules: SinkRules) -> Callable[[Any], str | tuple]:
    """JSON text of the source; for PostgreSQL the NUL policy applies to its strings too
    (jsonb cannot hold U+0000 either)."""
    nul = rules.nul_policy
    if nul not in ("strip", "replace"):
        return json_text
    repl = "" if nul == "strip" else "\ufffd"

    def conv(v):
        if isinstance(v, (bytes, bytearray)):
            v = bytes(v).decode("utf-8", "surrogateescape")
        if not isinstance(v, str):
            return unexpected(v)
        try:
            obj = json.loads(v, parse_float=Decimal)
        except ValueError:
            return v
        return json_value(_map_strings(obj, lambda s: s.replace("\x00", repl)))

    return conv


def json_parsed(v: Any) -> str | tuple:
    try:
        return json_value(v)
    except TypeError:
        return unexpected(v)


# temporal


_DATE_RE = re.compile(r"^\s*(\d{1,4})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.(\d{1,6}))?)?\s*$")


def _parse_datetime(text: str) -> _dt.datetime | None:
    """A MySQL date/datetime literal; None for a zero or invalid one."""
    m = _DATE_RE.match(text)
    if not m:
        return None
    y, mo, d = int(m.group(1)), int(m.group(2)), int(m.group(3))
    hh, mm, ss = (int(m.group(i) or 0) for i in (4, 5, 6))
    us = int(((m.group(7) or "") + "000000")[:6])
    try:
        return _dt.datetime(y, mo, d, hh, mm, ss, us)
    except ValueError:
        return None


def _default_literal(col: Column) -> str | None:
    """COLUMN_DEFAULT as the plain literal ("'2000-01-01'" -> 2000-01-01); None for no
    default, NULL or an expression (CURRENT_TIMESTAMP)."""
    d = col.default
    if d is None:
        return None
    d = str(d).strip()
    if len(d) >= 2 and d[0] == d[-1] == "'":
        return d[1:-1].replace("''", "'")
    if d.upper() == "NULL" or not d[:1].isdigit():
        return None
    return d  # MySQL shows literals unquoted


def zero_date_value(col: Column) -> _dt.datetime | None:
    """What a zero/invalid date becomes (module note): None in a nullable column, else the
    column's valid DEFAULT, else the epoch."""
    if col.nullable:
        return None
    text = _default_literal(col)
    parsed = _parse_datetime(text) if text is not None else None
    if col.data_type == "timestamp" and parsed == _EPOCH:
        parsed = None  # '1970-01-01 00:00:00' is TIMESTAMP's zero
    return parsed or _EPOCH


def _date_text(d: _dt.date) -> str:
    if isinstance(d, _dt.datetime):
        d = d.date()
    return d.isoformat()  # YYYY-MM-DD, the year always 4 digits


def _datetime_text(v: _dt.datetime) -> str:
    return v.isoformat(" ", "microseconds")  # naive: YYYY-MM-DD HH:MM:SS.ffffff


def _source_datetime(col: Column, v: Any) -> _dt.datetime | None | tuple:
    """A source DATE/DATETIME/TIMESTAMP as a naive datetime (zero rule applied)."""
    if isinstance(v, _dt.datetime):
        return v.astimezone(_UTC).replace(tzinfo=None) if v.tzinfo else v
    if isinstance(v, _dt.date):
        return _dt.datetime(v.year, v.month, v.day)
    if isinstance(v, (bytes, bytearray)):
        v = bytes(v).decode("ascii", "replace")
    if isinstance(v, str):  # pymysql hands back what Python cannot hold: zero/invalid dates
        return _parse_datetime(v) or zero_date_value(col)
    return unexpected(v)


def date_source(col: Column) -> Callable[[Any], str | None | tuple]:
    def conv(v):
        d = _source_datetime(col, v)
        return d if d is None or isinstance(d, tuple) else _date_text(d)

    return conv


def date_sink(v: Any) -> str | tuple:
    if isinstance(v, _dt.datetime) or not isinstance(v, _dt.date):
        return unexpected(v)
    return _date_text(v)


def datetime_source(col: Column) -> Callable[[Any], str | None | tuple]:
    def conv(v):
        d = _source_datetime(col, v)
        return d if d is None or isinstance(d, tuple) else _datetime_text(d)

    return conv


def datetime_sink(v: Any) -> str | tuple:
    if not isinstance(v, _dt.datetime) or v.tzinfo is not None:
        return unexpected(v)
    return _datetime_text(v)


def timestamp_source(col: Column) -> Callable[[Any], str | None | tuple]:
    """The session runs in UTC, so a naive source value is UTC."""

    def conv(v):
        d = _source_datetime(col, v)
        return d if d is None or isinstance(d, tuple) else _datetime_text(d) + "Z"

    return conv


def timestamp_sink(v: Any) -> str | tuple:
    if not isinstance(v, _dt.datetime) or v.tzinfo is None:
        return unexpected(v)
    return _datetime_text(v.astimezone(_UTC).replace(tzinfo=None)) + "Z"


def time_text(micros: int) -> str:
    sign = "-" if micros < 0 else ""
    secs, us = divmod(abs(micros), 1_000_000)
    return f"{sign}{secs // 3600}:{secs // 60 % 60:02d}:{secs % 60:02d}.{us:06d}"


def _td_micros(v: _dt.timedelta) -> int:
    return (v.days * 86400 + v.seconds) * 1_000_000 + v.microseconds


_TIME_RE = re.compile(r"^\s*(-?)(\d+):(\d{1,2}):(\d{1,2})(?:\.(\d{1,6}))?\s*$")


def time_source(v: Any) -> str | tuple:
    if isinstance(v, _dt.timedelta):
        return time_text(_td_micros(v))
    if isinstance(v, (bytes, bytearray)):
        v = bytes(v).decode("ascii", "replace")
    if isinstance(v, str):
        m = _TIME_RE.match(v)
        if m:
            micros = ((int(m.group(2)) * 60 + int(m.group(3))) * 60 + int(m.group(4))) * 1_000_000 + int(
                ((m.group(5) or "") + "000000")[:6]
            )
            return time_text(-micros if m.group(1) else micros)
    return unexpected(v)


def time_sink(v: Any) -> str | tuple:
    if isinstance(v, _dt.timedelta):
        return time_text(_td_micros(v))
    if isinstance(v, int) and not isinstance(v, bool):  # Delta: int64 microseconds
        return time_text(v)
    return unexpected(v)


def geometry_source(v: Any) -> str | tuple:
    """MySQL's internal geometry: 4 bytes SRID (little-endian), then the WKB."""
    if isinstance(v, (bytes, bytearray)) and len(v) >= 4:
        return _hex(bytes(v[4:]))
    return unexpected(v)


# ------------------------------------------------------------------ per column

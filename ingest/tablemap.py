"""A ``TableSpec`` from what mysql-replication exposes for a TableMapEvent read with
``binlog_row_metadata=FULL`` (names, types, signedness, charsets, ENUM/SET members, primary
key, nullability), optionally refined with ``information_schema.COLUMNS`` rows the caller
fetched (``cdc.infoschema``) and with the types declared in the DDL (``cdc.declared``).
Pure: no I/O."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterable, Mapping

from cdc.declared import with_declared_types
from cdc.infoschema import describes, enrich_table_spec, row_name
from cdc.tablespec import ColumnSpec, TableSpec

# MySQL field type codes (pymysqlreplication.constants.FIELD_TYPE), copied so this module
# imports without the library.
_FT = dict(
    DECIMAL=0,
    TINY=1,
    SHORT=2,
    LONG=3,
    FLOAT=4,
    DOUBLE=5,
    NULL=6,
    TIMESTAMP=7,
    LONGLONG=8,
    INT24=9,
    DATE=10,
    TIME=11,
    DATETIME=12,
    YEAR=13,
    NEWDATE=14,
    VARCHAR=15,
    BIT=16,
    TIMESTAMP2=17,
    DATETIME2=18,
    TIME2=19,
    JSON=245,
    NEWDECIMAL=246,
    ENUM=247,
    SET=248,
    TINY_BLOB=249,
    MEDIUM_BLOB=250,
    LONG_BLOB=251,
    BLOB=252,
    VAR_STRING=253,
    STRING=254,
    GEOMETRY=255,
)
_GEOMETRY_SUBTYPES = {
    0: "geometry",
    1: "point",
    2: "linestring",
    3: "polygon",
    4: "multipoint",
    5: "multilinestring",
    6: "multipolygon",
    7: "geometrycollection",
}
#: bytes per character of the charsets in use (binlog lengths are in bytes)
_MBMAXLEN = {
    "utf8mb4": 4,
    "utf8mb3": 3,
    "utf8": 3,
    "ucs2": 2,
    "utf16": 4,
    "utf16le": 4,
    "utf32": 4,
    "big5": 2,
    "gbk": 2,
    "gb2312": 2,
    "gb18030": 4,
    "sjis": 2,
    "cp932": 2,
    "ujis": 3,
    "eucjpms": 3,
    "euckr": 2,
}


def _charset_of_collation(collation: str | None) -> str | None:
    if not collation:
        return None
    if collation == "binary":
        return "binary"
    return collation.split("_", 1)[0]


def _nullable_bits(null_bitmask: bytes | None, n: int) -> list[bool]:
    if null_bitmask is None:
        return [True] * n
    return [bool(null_bitmask[i // 8] & (1 << (i % 8))) for i in range(n)]


#: field types whose DDL base type follows from the type code alone
_SIMPLE = {
    _FT["TINY"]: "tinyint",
    _FT["SHORT"]: "smallint",
    _FT["INT24"]: "mediumint",
    _FT["LONG"]: "int",
    _FT["LONGLONG"]: "bigint",
    _FT["FLOAT"]: "float",
    _FT["DOUBLE"]: "double",
    _FT["YEAR"]: "year",
    _FT["DATE"]: "date",
    _FT["NEWDATE"]: "date",
    _FT["JSON"]: "json",
}
_TEMPORAL = {
    _FT["TIME"]: "time",
    _FT["TIME2"]: "time",
    _FT["DATETIME"]: "datetime",
    _FT["DATETIME2"]: "datetime",
    _FT["TIMESTAMP"]: "timestamp",
    _FT["TIMESTAMP2"]: "timestamp",
}
_BLOBS = (_FT["BLOB"], _FT["TINY_BLOB"], _FT["MEDIUM_BLOB"], _FT["LONG_BLOB"])


def _type_fields(c, t: int, charset: str | None, collation: str | None, geo_iter) -> dict[str, Any]:
    """type_name and the type-specific ColumnSpec fields of one table-map column."""
    if t in _SIMPLE:
        return {"type_name": _SIMPLE[t]}
    if t in _TEMPORAL:
        return {"type_name": _TEMPORAL[t], "fsp": getattr(c, "fsp", 0) or 0}
    if t in (_FT["NEWDECIMAL"], _FT["DECIMAL"]):
        return dict(type_name="decimal", length=getattr(c, "precision", None), scale=getattr(c, "decimals", None))
    if t == _FT["BIT"]:
        return dict(type_name="bit", length=getattr(c, "bits", 1))
    if t == _FT["ENUM"]:
        vals = getattr(c, "enum_values", None) or []
        return dict(
            type_name="enum",
            enum_values=tuple(vals[1:] if vals and vals[0] == "" else vals),
            charset=charset,
            collation=collation,
            length=1,
        )
    if t == _FT["SET"]:
        vals = tuple(getattr(c, "set_values", None) or ())
        return dict(
            type_name="set", enum_values=vals, charset=charset, collation=collation, length=max(0, 2 * len(vals) - 1)
        )
    if t in (_FT["VARCHAR"], _FT["VAR_STRING"], _FT["STRING"]):
        nbytes = getattr(c, "max_length", None)
        binary = charset == "binary"
        per = 1 if binary else _MBMAXLEN.get(charset or "", 1)
        base = ("varbinary" if binary else "varchar") if t != _FT["STRING"] else ("binary" if binary else "char")
        return dict(
            type_name=base, length=(nbytes // per) if nbytes is not None else None, charset=charset, collation=collation
        )
    if t in _BLOBS:
        size = getattr(c, "length_size", 2)
        binary = charset == "binary" or charset is None
        names = (
            ("tinyblob", "blob", "mediumblob", "longblob") if binary else ("tinytext", "text", "mediumtext", "longtext")
        )
        return dict(type_name=names[max(0, min(3, size - 1))], charset=charset, collation=collation)
    if t == _FT["GEOMETRY"]:
        return {"type_name": _GEOMETRY_SUBTYPES.get(next(geo_iter, 0), "geometry")}
    return {"type_name": f"unknown({t})"}


def _primary_key(opt, columns: list, specs: list[ColumnSpec]) -> list[str]:
    """The primary key's column names, in key order."""
    if opt is not None and getattr(opt, "simple_primary_key_list", None):
        return [specs[i].name for i in opt.simple_primary_key_list]
    if opt is not None and getattr(opt, "primary_keys_with_prefix", None):
        return [specs[i].name for i in opt.primary_keys_with_prefix]
    return [c.name for c in columns if getattr(c, "is_primary", False)]


def table_spec_from_binlog(
    event_or_table,
    extra: Iterable[Mapping[str, Any]] | None = None,
    *,
    json_columns: Iterable[str] = (),
    declared_types: Mapping[str, str] | None = None,
    default_charset: str | None = None,
    db: str | None = None,
    table: str | None = None,
) -> TableSpec:
    """Build a TableSpec from a pymysqlreplication ``TableMapEvent`` (or its ``Table``).

    ``extra``: rows of ``SELECT * FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND
    TABLE_NAME=%s`` as dicts (any key case). They refine the binlog's view: exact DDL type
    (tinyint(1), text vs blob widths, POINT vs GEOMETRY, display widths), defaults,
    auto_increment, generated columns, comments. Columns are matched by name.

    ``json_columns``: columns to treat as JSON (MariaDB stores JSON as LONGTEXT with a
    ``json_valid`` CHECK constraint; the binlog cannot tell). ``declared_types``: per
    column, the type as written in the DDL ('boolean', 'json', 'real', ...) when known.
    """
    ev = event_or_table
    tbl = getattr(ev, "table_obj", None) or ev
    columns = list(getattr(tbl, "columns", None) or getattr(ev, "columns"))
    schema = db or getattr(ev, "schema", None) or getattr(tbl, "schema")
    tname = table or getattr(ev, "table", None) or getattr(tbl, "table")
    if isinstance(tname, bytes):
        tname = tname.decode()
    if isinstance(schema, bytes):
        schema = schema.decode()
    opt = getattr(ev, "optional_metadata", None)
    nullable = _nullable_bits(getattr(ev, "null_bitmask", None), len(columns))
    geo_iter = iter(list(getattr(opt, "geometry_type_list", None) or []) if opt else [])

    specs: list[ColumnSpec] = []
    for i, c in enumerate(columns):
        collation = getattr(c, "collation_name", None)
        kw: dict[str, Any] = dict(
            name=c.name or f"UNKNOWN_COL{i}",
            position=i + 1,
            nullable=nullable[i],
            unsigned=bool(getattr(c, "unsigned", False)),
        )
        kw.update(_type_fields(c, c.type, _charset_of_collation(collation), collation, geo_iter))
        specs.append(ColumnSpec(**kw))

    spec = TableSpec(
        db=schema,
        table=tname,
        columns=tuple(specs),
        primary_key=tuple(_primary_key(opt, columns, specs)),
        default_charset=default_charset,
    )
    if extra:
        # information_schema describes the table as it is now; the table map describes it
        # as it was when the row was written: keep the binlog's nullability, and refine
        # only columns whose types agree with the table map (an ALTER since then, not yet
        # read, may have changed them: DATETIME(3) -> (6) would encode values as micros)
        by_name = {c.name: c for c in specs}
        extra = [r for r in extra if describes(by_name.get(row_name(r)), r)]
        binlog_nullable = {c.name: c.nullable for c in specs}
        spec = enrich_table_spec(spec, extra)
        spec = replace(
            spec, columns=tuple(replace(c, nullable=binlog_nullable.get(c.name, c.nullable)) for c in spec.columns)
        )
    overrides = dict(declared_types or {})
    for name in json_columns:
        overrides.setdefault(name, "json")
    if overrides:
        spec = with_declared_types(spec, overrides)
    return spec

"""The table model: ``ColumnSpec`` and ``TableSpec`` describe a captured table version
(pure data, no I/O). Built by ``ingest.tablemap`` from the binlog's table map; read by the
converters (``ingest.columncodec``) and by the merger (schemas, catalogs, chunk reads)."""

from __future__ import annotations

from dataclasses import dataclass

#: canonical lower-case type names (synonyms map onto these)
TYPE_SYNONYMS = {
    "integer": "int",
    "int4": "int",
    "int1": "tinyint",
    "int2": "smallint",
    "int3": "mediumint",
    "middleint": "mediumint",
    "int8": "bigint",
    "bool": "boolean",
    "dec": "decimal",
    "fixed": "decimal",
    "double precision": "double",
    "float4": "float",
    "float8": "double",
    "character": "char",
    "character varying": "varchar",
    "nchar": "char",
    "nvarchar": "varchar",
    "national char": "char",
    "national varchar": "varchar",
    "long": "mediumtext",
    "long varchar": "mediumtext",
    "long varbinary": "mediumblob",
    "geomcollection": "geometrycollection",
}
INTEGER_TYPES = ("tinyint", "smallint", "mediumint", "int", "bigint")
STRING_TYPES = ("char", "varchar", "tinytext", "text", "mediumtext", "longtext")
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
)
TEMPORAL_FSP_TYPES = ("time", "datetime", "timestamp")


@dataclass(frozen=True)
class ColumnSpec:
    """One column. ``type_name`` is the lower-case DDL base type ('int', 'varchar',
    'decimal', 'datetime', 'enum', 'json', 'boolean', ...). ``length`` is what Debezium
    calls the column length: character length, display width, BIT width, DECIMAL
    precision; ``fsp`` the fractional-seconds precision of TIME/DATETIME/TIMESTAMP.
    ``default`` is the DEFAULT as a plain literal text (quotes removed, e.g. "hello",
    "1.5", "0000-00-00", "b'101'", "CURRENT_TIMESTAMP"); None means no default or DEFAULT
    NULL."""

    name: str
    type_name: str
    position: int = 0
    unsigned: bool = False
    zerofill: bool = False
    length: int | None = None
    scale: int | None = None
    fsp: int | None = None
    charset: str | None = None
    collation: str | None = None
    nullable: bool = True
    enum_values: tuple[str, ...] | None = None
    default: str | None = None
    auto_increment: bool = False
    generated: bool = False
    comment: str | None = None

    @property
    def precision(self) -> int | None:
        return self.length

    @property
    def has_default(self) -> bool:
        return self.default is not None

    @property
    def is_binary_charset(self) -> bool:
        return self.charset == "binary"


@dataclass(frozen=True)
class TableSpec:
    db: str
    table: str
    columns: tuple[ColumnSpec, ...]
    primary_key: tuple[str, ...] = ()
    default_charset: str | None = None
    comment: str | None = None

    def column(self, name: str) -> ColumnSpec:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def pk_columns(self) -> tuple[ColumnSpec, ...]:
        return tuple(self.column(n) for n in self.primary_key)

"""Per column, the Kafka Connect schema field exactly as Debezium 3.6's MySQL connector +
Kafka's ``JsonConverter`` print it, and two converters of the value mysql-replication
decodes: ``to_value`` (a JSON-model Python value) and ``to_json`` (the JSON text, byte for
byte what JsonConverter writes). The envelope module builds rows out of the ``to_json``
closures.

``column_codec`` looks the column's type up in ``ingest.converters.CONVERTERS`` and adds what
every type shares: the schema "default" from the column's DEFAULT (``ingest.defaults``) and
what a NULL becomes (null, or in a NOT NULL column the DEFAULT, else the type's fallback).
Pure, no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from cdc.tablespec import TYPE_SYNONYMS, ColumnSpec, TableSpec
from ingest.converter_config import ConverterConfig
from ingest.converters import CONVERTERS, Converter
from ingest.defaults import JsonDefault, raw_default
from ingest.jsontext import dumps


@dataclass
class ColumnCodec:
    """Schema and converters of one column.

    ``to_value(v)``: JSON-model value (int, str, bool, float/JavaFloat, dict, None) of a
    value as mysql-replication decodes it (None = SQL NULL or a value the library could
    not represent, e.g. a zero date). ``to_json(v)``: the same as JSON text. Both apply
    Debezium's NOT NULL substitution (default or fallback) for None.
    ``empty_set_json``: what a None from an *empty SET* becomes (mysql-replication
    returns None for both NULL and '' in SET columns; check ``none_sources``).
    """

    column: ColumnSpec
    schema: dict
    to_value: Callable[[Any], Any]
    to_json: Callable[[Any], str]
    null_value: Any = None
    null_json: str = "null"
    empty_set_json: str | None = None
    #: the raw converter of a non-None value to JSON text (no NULL handling)
    frag: Callable[[Any], Any] | None = None
    #: ``frag`` may return None (value not representable -> NULL substitution)
    frag_may_return_none: bool = False

    @property
    def name(self) -> str:
        return self.column.name


#: pymysqlreplication none_sources marker for an empty SET value
EMPTY_SET = "empty set"


def column_codec(col: ColumnSpec, config: ConverterConfig | None = None) -> ColumnCodec:
    """The schema field (without its "field" name) and converters of one column."""
    cfg = config or ConverterConfig()
    t = TYPE_SYNONYMS.get(col.type_name, col.type_name)
    build = CONVERTERS.get(t)
    if build is None:
        raise ValueError(f"column {col.name!r}: unsupported type {col.type_name!r}")
    return _with_nulls(col, t, cfg, build(col, t, cfg))


def _default_value(col: ColumnSpec, t: str, cfg: ConverterConfig, conv: Callable[[Any], Any]) -> Any:
    """The column's DEFAULT as a JSON-model value (None: none, or unusable)."""
    raw = raw_default(col, t, cfg) if col.default is not None else None
    if raw is None:
        return None
    try:
        return raw.value if isinstance(raw, JsonDefault) else conv(raw)
    except Exception:  # an unparsable default: Debezium logs and drops it
        return None


def _with_nulls(col: ColumnSpec, t: str, cfg: ConverterConfig, c: Converter) -> ColumnCodec:
    """Debezium's NULL handling, the same for every type: the schema "default", and what a
    NULL (or a value the converter cannot represent) becomes."""
    schema, conv, frag = c.schema, c.conv, c.frag
    default_val = _default_value(col, t, cfg, conv)
    if default_val is not None:
        schema["default"] = default_val
    if col.nullable:
        null_value, null_json = None, "null"
    else:
        if default_val is not None:
            null_value = default_val
        elif c.fallback_raw:
            null_value = conv(c.fallback) if c.fallback is not None else None
        else:
            null_value = c.fallback
        null_json = dumps(null_value)

    def to_value(v, _conv=conv, _null=null_value):
        if v is None:
            return _null
        r = _conv(v)
        return _null if r is None else r

    if c.may_be_none:

        def to_json(v, _frag=frag, _null=null_json):
            if v is None:
                return _null
            r = _frag(v)
            return _null if r is None else r
    else:

        def to_json(v, _frag=frag, _null=null_json):
            return _null if v is None else _frag(v)

    return ColumnCodec(
        column=col,
        schema=schema,
        to_value=to_value,
        to_json=to_json,
        null_value=null_value,
        null_json=null_json,
        empty_set_json=c.empty_set_json,
        frag=frag,
        frag_may_return_none=c.may_be_none,
    )


@dataclass
class TableCodecs:
    """All column codecs of a table, in column order (build once per table version)."""

    spec: TableSpec
    config: ConverterConfig
    columns: list[ColumnCodec] = field(default_factory=list)

    @classmethod
    def build(cls, spec: TableSpec, config: ConverterConfig | None = None) -> "TableCodecs":
        cfg = config or ConverterConfig()
        return cls(spec=spec, config=cfg, columns=[column_codec(c, cfg) for c in spec.columns])

    def by_name(self, name: str) -> ColumnCodec:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    def row_value(self, row: Mapping[str, Any], none_sources: Mapping[str, str] | None = None) -> dict:
        """The JSON-model row (dict in column order)."""
        out = {}
        for c in self.columns:
            v = row.get(c.name)
            if v is None and none_sources and c.empty_set_json is not None and none_sources.get(c.name) == EMPTY_SET:
                out[c.name] = ""
            else:
                out[c.name] = c.to_value(v)
        return out

"""Per column, the pair of rules (source value, sink value) that brings both sides to the
canonical form of merger/verify/canonical.py; row_canons for a table's columns."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from merger.verify.canonical import (
    Column,
    SinkRules,
    UnsupportedColumn,
    binary,
    bit_sink,
    bit_source,
    boolean_of_int,
    date_sink,
    date_source,
    datetime_sink,
    datetime_source,
    decimal,
    float_rule,
    geometry_source,
    has_nul,
    integer,
    integer_sink,
    json_parsed,
    json_source,
    json_text,
    nul_rule_applies,
    string_sink,
    string_source,
    time_sink,
    time_source,
    timestamp_sink,
    timestamp_source,
)


class ColumnCanon:
    """The two sides' canonical functions of one column for one sink.

    ``sink_type``: the sink column's own type name, where a rule depends on it
    (PostgreSQL ``format_type``: 'boolean', 'jsonb'; Delta: the Arrow type, 'bool')."""

    def __init__(self, col: Column, rules: SinkRules, sink_type: str | None = None):
        self.column = col
        self.rules = rules
        st = (sink_type or "").lower()
        kind = col.kind
        if kind == "string" and st in ("jsonb", "json"):
            kind = "json"  # a JSON column the DDL declared (MariaDB shows longtext)
        self.kind = kind
        src: Callable[[Any], Any]
        dst: Callable[[Any], Any]
        if kind == "int":
            if st in ("boolean", "bool") and col.data_type == "tinyint":
                src = dst = boolean_of_int
                self.kind = "bool"
            else:
                src, dst = integer, integer_sink
        elif kind == "decimal":
            src = dst = decimal
        elif kind == "float":
            src = dst = float_rule(col)
        elif kind == "string":
            src, dst = string_source(col, rules), string_sink
        elif kind == "json":
            # only jsonb refuses the escape \u0000: a text column holds the JSON text as it is
            src = json_source(rules) if st in ("jsonb", "json") else json_text
            dst = json_parsed if st in ("jsonb", "json") else json_text
        elif kind == "binary":
            src = dst = binary
        elif kind == "bit":
            src, dst = bit_source(col), bit_sink(col)
        elif kind == "date":
            src, dst = date_source(col), date_sink
        elif kind == "datetime":
            src, dst = datetime_source(col), datetime_sink
        elif kind == "timestamp":
            src, dst = timestamp_source(col), timestamp_sink
        elif kind == "time":
            src, dst = time_source, time_sink
        elif kind == "geometry":
            src, dst = geometry_source, binary
        else:  # pragma: no cover (Column.kind raised already)
            raise UnsupportedColumn(kind)
        self._src, self._dst = src, dst
        # source value -> whether the NUL rule changed its canonical form (None: it cannot)
        self.nul_changed: Callable[[Any], bool] | None = None
        if nul_rule_applies(rules):
            if self.kind == "string":
                self.nul_changed = has_nul
            elif self.kind == "json":
                self.nul_changed = lambda v: src(v) != json_text(v)

    def source(self, v: Any) -> Any:
        return None if v is None else self._src(v)

    def sink(self, v: Any) -> Any:
        return None if v is None else self._dst(v)

    def sources(self, values: Sequence[Any]) -> list:
        f = self._src
        if f is integer:  # the common case without a call per value
            return [str(v) if type(v) is int else None if v is None else f(v) for v in values]
        return [None if v is None else f(v) for v in values]

    def sinks(self, values: Sequence[Any]) -> list:
        f = self._dst
        if f is integer_sink:
            return [str(v) if type(v) is int else None if v is None else f(v) for v in values]
        if f is string_sink:
            return [v if type(v) is str or v is None else f(v) for v in values]
        return [None if v is None else f(v) for v in values]


def row_canons(
    columns: Sequence[Column], rules: SinkRules, sink_types: Mapping[str, str | None] | None = None
) -> list[ColumnCanon]:
    sink_types = sink_types or {}
    return [ColumnCanon(c, rules, sink_types.get(c.name)) for c in columns]

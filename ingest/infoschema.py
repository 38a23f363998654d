"""What ``information_schema.COLUMNS`` tells about a column, on top of the binlog's table map:
the exact DDL type (``parse_column_type``), the DEFAULT as plain text (``info_default``),
and ``enrich_table_spec``, which refines a TableSpec with those rows. Pure: the caller runs
the query."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Iterable, Mapping

from cdc.tablespec import TEMPORAL_FSP_TYPES, TYPE_SYNONYMS, ColumnSpec, TableSpec

_COLTYPE_RE = re.compile(
    r"^\s*([a-z][a-z0-9 ]*?)\s*(?:\((.*)\))?\s*((?:unsigned|signed|zerofill|\s)*)\s*$", re.I | re.S
)


def parse_column_type(column_type: str) -> dict[str, Any]:
    """Parse an information_schema COLUMN_TYPE ('int(10) unsigned', "enum('a','b')",
    'decimal(10,2)', 'datetime(3)') into type_name/length/scale/fsp/unsigned/enum_values."""
    m = _COLTYPE_RE.match(column_type)
    out: dict[str, Any] = {}
    if not m:
        out["type_name"] = column_type.strip().lower()
        return out
    base = TYPE_SYNONYMS.get(m.group(1).strip().lower(), m.group(1).strip().lower())
    args = m.group(2)
    flags = (m.group(3) or "").lower()
    out["type_name"] = base
    out["unsigned"] = "unsigned" in flags
    out["zerofill"] = "zerofill" in flags
    if args is not None:
        if base in ("enum", "set"):
            out["enum_values"] = tuple(_split_quoted_list(args))
        else:
            parts = [p.strip() for p in args.split(",")]
            if base in TEMPORAL_FSP_TYPES:
                out["fsp"] = int(parts[0])
            elif len(parts) == 2:
                out["length"], out["scale"] = int(parts[0]), int(parts[1])
            elif parts and parts[0].isdigit():
                out["length"] = int(parts[0])
    return out


def _split_quoted_list(text: str) -> list[str]:
    vals, i, n = [], 0, len(text)
    while i < n:
        while i < n and text[i] in " ,":
            i += 1
        if i >= n:
            break
        q = text[i]
        if q not in "'\"":
            j = text.find(",", i)
            j = n if j < 0 else j
            vals.append(text[i:j].strip())
            i = j
            continue
        i += 1
        buf = []
        while i < n:
            ch = text[i]
            if ch == q and i + 1 < n and text[i + 1] == q:
                buf.append(q)
                i += 2
            elif ch == "\\" and i + 1 < n:
                buf.append(text[i + 1])
                i += 2
            elif ch == q:
                i += 1
                break
            else:
                buf.append(ch)
                i += 1
        vals.append("".join(buf))
    return vals


def info_default(raw: Any, is_mariadb_quoting: bool = True) -> str | None:
    """information_schema COLUMN_DEFAULT -> plain literal text (None: no default / NULL).
    MariaDB >= 10.2.7 quotes string literals and writes NULL for DEFAULT NULL; MySQL
    writes strings unquoted."""
    if raw is None:
        return None
    if isinstance(raw, bytes):
        raw = raw.decode()
    s = str(raw)
    if s.upper() == "NULL":
        return None
    if len(s) >= 2 and s[0] == "'" and s[-1] == "'":
        return _INFO_ESCAPE.sub(lambda m: _INFO_UNESCAPE[m.group(0)], s[1:-1])
    return s


# how MariaDB quotes a string DEFAULT in information_schema (sql_show.cc append_unescaped):
# NUL, LF, CR and backslash escaped with a backslash, a quote doubled; nothing else
_INFO_UNESCAPE = {"\\0": "\0", "\\n": "\n", "\\r": "\r", "\\\\": "\\", "''": "'"}
_INFO_ESCAPE = re.compile(r"\\[0nr\\]|''")


_INTEGERS = ("tinyint", "smallint", "mediumint", "int", "bigint")
_FAMILIES = [set(_INTEGERS), {"decimal"}, {"float", "double"}, {"date"}, {"year"}, {"bit"}, set(TEMPORAL_FSP_TYPES)]


def row_name(row: Mapping[str, Any]) -> str | None:
    return next((str(v) for k, v in row.items() if str(k).upper() == "COLUMN_NAME"), None)


def describes(column: ColumnSpec | None, row: Mapping[str, Any]) -> bool:
    """Whether an information_schema.COLUMNS row can describe ``column`` as the binlog's
    table map shows it: what the table map knows exactly (integer size and sign, DECIMAL
    precision and scale, temporal type and fractional digits, the type family) agrees."""
    if column is None:
        return True  # nothing to refine
    ctype = next((v for k, v in row.items() if str(k).upper() == "COLUMN_TYPE"), None)
    if isinstance(ctype, bytes):
        ctype = ctype.decode()
    if not ctype:
        return True
    info = parse_column_type(str(ctype))
    base, t = info.get("type_name"), column.type_name
    family = next((f for f in _FAMILIES if t in f), None)
    if family is None:  # strings, blobs, enums, JSON, geometry: the table map tells less
        return not any(base in f for f in _FAMILIES)
    if base not in family:
        return False
    if t in _INTEGERS:
        return base == t and bool(info.get("unsigned")) == bool(column.unsigned)
    if t == "decimal":
        return (info.get("length"), info.get("scale") or 0) == (column.length, column.scale or 0)
    if t in TEMPORAL_FSP_TYPES:
        return base == t and (info.get("fsp") or 0) == (column.fsp or 0)
    return base == t


def enrich_table_spec(spec: TableSpec, rows: Iterable[Mapping[str, Any]]) -> TableSpec:
    """Refine a binlog-derived TableSpec with information_schema.COLUMNS rows."""
    by_name: dict[str, dict[str, Any]] = {}
    for r in rows:
        d = {str(k).upper(): v for k, v in r.items()}
        by_name[str(d.get("COLUMN_NAME"))] = d
    cols = []
    for c in spec.columns:
        d = by_name.get(c.name)
        if d is None:
            cols.append(c)
            continue
        kw: dict[str, Any] = {}
        ctype = d.get("COLUMN_TYPE")
        if isinstance(ctype, bytes):
            ctype = ctype.decode()
        if ctype:
            parsed = parse_column_type(ctype)
            base = parsed.get("type_name", c.type_name)
            # keep what the binlog knows better (charset-derived text/blob split, json hint)
            if c.type_name == "json" and base in ("longtext", "json"):
                base = "json"
            kw["type_name"] = base
            kw["unsigned"] = parsed.get("unsigned", c.unsigned)
            kw["zerofill"] = parsed.get("zerofill", False)
            if base in TEMPORAL_FSP_TYPES:
                kw["fsp"] = parsed.get("fsp", c.fsp or 0)
                kw["length"] = None
            elif base in ("enum", "set"):
                kw["enum_values"] = parsed.get("enum_values", c.enum_values)
                vals = kw["enum_values"] or ()
                kw["length"] = 1 if base == "enum" else max(0, 2 * len(vals) - 1)
            else:
                kw["length"] = parsed.get("length")
                kw["scale"] = parsed.get("scale")
        if d.get("IS_NULLABLE") is not None:
            kw["nullable"] = str(d["IS_NULLABLE"]).upper() == "YES"
        if d.get("CHARACTER_SET_NAME"):
            kw["charset"] = str(d["CHARACTER_SET_NAME"])
        if d.get("COLLATION_NAME"):
            kw["collation"] = str(d["COLLATION_NAME"])
        if "ORDINAL_POSITION" in d and d["ORDINAL_POSITION"] is not None:
            kw["position"] = int(d["ORDINAL_POSITION"])
        extra = str(d.get("EXTRA") or "").lower()
        kw["auto_increment"] = "auto_increment" in extra
        kw["generated"] = (
            "generated" in extra
            or "virtual" in extra
            or "stored" in extra
            or str(d.get("IS_GENERATED") or "NEVER").upper() == "ALWAYS"
        )
        if "on update" in extra:
            # Debezium marks ON UPDATE CURRENT_TIMESTAMP columns as auto-incremented/generated
            kw["auto_increment"] = kw["generated"] = True
        if "COLUMN_DEFAULT" in d:
            kw["default"] = info_default(d.get("COLUMN_DEFAULT"))
        if d.get("COLUMN_COMMENT"):
            kw["comment"] = str(d["COLUMN_COMMENT"])
        cols.append(replace(c, **kw))
    return replace(spec, columns=tuple(cols))

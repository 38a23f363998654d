"""What ``information_schema.COLUMNS`` tells about a column, on top of the binlog's table map:
the exact DDL type (``parse_column_type``), the DEFAULT as plain text (``info_default``),
and ``enrich_table_spec``, which refines a TableSpec with those rows (pure); and the reader
of those rows (``load_table_details``) with a TableSpec from them alone
(``spec_from_information_schema``), which ingest and the merger share."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Iterable, Mapping

import pymysql

from cdc.declared import with_declared_types
from cdc.quoting import quote_ident
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


def load_table_details(conn: pymysql.Connection, db: str, table: str) -> dict[str, Any]:
    """information_schema rows and the CREATE TABLE text of a table (empty if it is gone).

    Read when a table version is first seen; a DDL arriving in between is harmless,
    because the DDL event itself invalidates what we read."""
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(
            "SELECT * FROM information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s "
            "ORDER BY ORDINAL_POSITION",
            (db, table),
        )
        columns = list(cur.fetchall())
        cur.execute(
            "SELECT TABLE_COLLATION FROM information_schema.TABLES WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s", (db, table)
        )
        row = cur.fetchone()
        collation = row["TABLE_COLLATION"] if row else None
        cur.execute(
            "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA=%s "
            "AND TABLE_NAME=%s AND INDEX_NAME='PRIMARY' ORDER BY SEQ_IN_INDEX",
            (db, table),
        )
        primary_key = [r["COLUMN_NAME"] for r in cur.fetchall()]
        create = ""
        if columns:
            try:
                cur.execute(f"SHOW CREATE TABLE {quote_ident(db)}.{quote_ident(table)}")
                create = list(cur.fetchone().values())[1]
            except pymysql.err.MySQLError:
                create = ""
    return {
        "columns": columns,
        "create": create,
        "primary_key": primary_key,
        "charset": collation.split("_", 1)[0] if collation else None,
    }


def spec_from_information_schema(db: str, table: str, details: dict, declared: dict | None = None) -> TableSpec:
    """A TableSpec from information_schema alone (for schema-change events, where no
    table map is at hand)."""
    cols = []
    for i, row in enumerate(details["columns"]):
        d = {str(k).upper(): v for k, v in row.items()}
        ctype = d.get("COLUMN_TYPE")
        ctype = ctype.decode() if isinstance(ctype, bytes) else str(ctype)
        parsed = parse_column_type(ctype)
        cols.append(
            ColumnSpec(name=str(d["COLUMN_NAME"]), type_name=parsed.get("type_name", "unknown"), position=i + 1)
        )
    spec = TableSpec(
        db=db,
        table=table,
        columns=tuple(cols),
        primary_key=tuple(details.get("primary_key", ())),
        default_charset=details.get("charset"),
    )
    spec = enrich_table_spec(spec, details["columns"])
    if declared:
        spec = with_declared_types(spec, declared)
    return spec

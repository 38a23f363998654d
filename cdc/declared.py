"""Column types as declared in the DDL the binlog carried (BOOLEAN, JSON, REAL, ...).

MariaDB's information_schema and SHOW CREATE TABLE cannot tell BOOLEAN from TINYINT(1)
or JSON from LONGTEXT, but Debezium maps them differently, from its DDL history. We keep
the same memory: from every CREATE/ALTER/RENAME/DROP we read in the binlog, and after a
restart from the schema-change topic, which holds those statements in order.

``declared_types_from_ddl`` reads them from a CREATE TABLE; ``with_declared_types`` applies
them to a TableSpec."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Mapping

from cdc.ddl import DDL
from cdc.tablespec import TYPE_SYNONYMS, TableSpec

_IDENT = r"(`(?:[^`]|``)+`|[\w$\u0080-\uffff]+)"
_ALTER_COLUMN = re.compile(
    rf"\b(?:ADD|MODIFY)\s+(?:COLUMN\s+)?(?:IF\s+NOT\s+EXISTS\s+)?{_IDENT}\s+([a-zA-Z]+)"
    rf"|\bCHANGE\s+(?:COLUMN\s+)?(?:IF\s+EXISTS\s+)?{_IDENT}\s+{_IDENT}\s+([a-zA-Z]+)"
    rf"|\bDROP\s+(?:COLUMN\s+)?(?:IF\s+EXISTS\s+)?{_IDENT}",
    re.I,
)
_NOT_COLUMNS = {
    "index",
    "key",
    "primary",
    "unique",
    "constraint",
    "foreign",
    "fulltext",
    "spatial",
    "partition",
    "check",
    "period",
    "system",
}


def _name(ident: str) -> str:
    return ident[1:-1].replace("``", "`") if ident.startswith("`") else ident


_DDL_TYPE_RE = re.compile(r"^\s*(`(?:[^`]|``)+`|[\w$]+)\s+([a-zA-Z][a-zA-Z0-9]*(?:\s+(?:precision|varying))?)", re.S)
_NON_COLUMN = {"primary", "key", "index", "unique", "constraint", "foreign", "fulltext", "spatial", "check", "period"}


def declared_types_from_ddl(create_table_sql: str) -> dict[str, str]:
    """The type keyword of each column as written in a CREATE TABLE statement (lower case,
    synonyms normalised), e.g. {'flag': 'boolean', 'doc': 'json'}. Enough to restore
    Debezium's BOOLEAN/JSON/REAL mapping, which information_schema cannot show on MariaDB."""
    start = create_table_sql.find("(")
    if start < 0:
        return {}
    body, depth, quote, parts, cur = create_table_sql[start + 1 :], 0, None, [], []
    for ch in body:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = None
            continue
        if ch in "'\"`":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            if depth == 0:
                break
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur))
    out = {}
    for p in parts:
        m = _DDL_TYPE_RE.match(p)
        if not m:
            continue
        name = m.group(1)
        if name.lower() in _NON_COLUMN:
            continue
        if name.startswith("`"):
            name = name[1:-1].replace("``", "`")
        t = " ".join(m.group(2).lower().split())
        out[name] = TYPE_SYNONYMS.get(t, t)
    return out


def with_declared_types(spec: TableSpec, declared: Mapping[str, str]) -> TableSpec:
    """Override column types with the type written in the DDL (e.g. {'flag': 'boolean',
    'doc': 'json'})."""
    cols = []
    for c in spec.columns:
        t = declared.get(c.name)
        if t:
            t = TYPE_SYNONYMS.get(t.lower(), t.lower())
            kw: dict[str, Any] = {"type_name": t}
            if t in ("boolean", "json"):
                kw.update(length=None, charset=None if t == "json" else c.charset)
            cols.append(replace(c, **kw))
        else:
            cols.append(c)
    return replace(spec, columns=tuple(cols))


class DeclaredTypes:
    def __init__(self) -> None:
        self.by_table: dict[tuple[str, str], dict[str, str]] = {}

    def get(self, db: str, table: str) -> dict[str, str]:
        return self.by_table.get((db, table), {})

    def observe(self, ddl: DDL, sql: str) -> None:
        if ddl.kind == "CREATE" and ddl.tables:
            if re.search(r"\bLIKE\b", sql[:200], re.I) and "(" not in sql:
                return
            self.by_table[ddl.tables[0]] = declared_types_from_ddl(sql)
        elif ddl.kind == "ALTER" and ddl.tables:
            key = ddl.tables[0]
            cols = dict(self.by_table.get(key, {}))
            for m in _ALTER_COLUMN.finditer(sql):
                if m.group(1) and m.group(1).lower() not in _NOT_COLUMNS:
                    cols[_name(m.group(1))] = TYPE_SYNONYMS.get(m.group(2).lower(), m.group(2).lower())
                elif m.group(3):
                    cols.pop(_name(m.group(3)), None)
                    cols[_name(m.group(4))] = TYPE_SYNONYMS.get(m.group(5).lower(), m.group(5).lower())
                elif m.group(6) and m.group(6).lower() not in _NOT_COLUMNS:
                    cols.pop(_name(m.group(6)), None)
            self.by_table[key] = cols
            if len(ddl.tables) > 1:  # ALTER ... RENAME TO
                self.by_table[ddl.tables[1]] = self.by_table.pop(key)
        elif ddl.kind == "RENAME":
            for old, new in zip(ddl.tables[0::2], ddl.tables[1::2]):
                if old in self.by_table:
                    self.by_table[new] = self.by_table.pop(old)
        elif ddl.kind == "DROP":
            for t in ddl.tables:
                self.by_table.pop(t, None)

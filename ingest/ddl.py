"""What a DDL statement from the binlog touches: just enough parsing to route it.

Column names and types never come from here (they come from the binlog's table-map
metadata and information_schema); this only finds the statement kind and the tables it
names, so ingest knows which table to refresh, truncate or report as created/dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_IDENT = r"(?:`(?:[^`]|``)+`|[\w$\u0080-\uffff]+)"
_NAME = rf"({_IDENT})(?:\s*\.\s*({_IDENT}))?"
_COMMENTS = re.compile(r"/\*(?!!).*?\*/|--[^\n]*|#[^\n]*", re.S)


@dataclass(frozen=True)
class DDL:
    kind: str  # CREATE, ALTER, DROP, RENAME, TRUNCATE, DATABASE, OTHER
    tables: tuple[tuple[str, str], ...]  # (db, table); db filled from the default schema
    database: str | None = None  # for CREATE/DROP/ALTER DATABASE


def _unquote(ident: str | None) -> str | None:
    if ident is None:
        return None
    if ident.startswith("`"):
        return ident[1:-1].replace("``", "`")
    return ident


def _qualified(m: re.Match, default_db: str, g1: int = 1) -> tuple[str, str]:
    first, second = _unquote(m.group(g1)), _unquote(m.group(g1 + 1))
    return (first, second) if second is not None else (default_db, first)


def parse_ddl(sql: str, default_db: str) -> DDL:
    text = _COMMENTS.sub(" ", sql).strip()
    flags = re.I | re.S
    m = re.match(r"(CREATE|DROP|ALTER)\s+(?:DATABASE|SCHEMA)\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?"
                 rf"({_IDENT})", text, flags)
    if m:
        return DDL("DATABASE", (), _unquote(m.group(2)))
    m = re.match(rf"TRUNCATE\s+(?:TABLE\s+)?{_NAME}", text, flags)
    if m:
        return DDL("TRUNCATE", (_qualified(m, default_db),))
    m = re.match(r"CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMPORARY\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?"
                 rf"{_NAME}", text, flags)
    if m:
        return DDL("CREATE", (_qualified(m, default_db),))
    m = re.match(r"ALTER\s+(?:ONLINE\s+)?(?:IGNORE\s+)?TABLE\s+(?:IF\s+EXISTS\s+)?" + _NAME, text, flags)
    if m:
        tables = [_qualified(m, default_db)]
        r = re.search(rf"\bRENAME\s+(?:TO\s+|AS\s+)?{_NAME}", text[m.end():], flags)
        if r:
            tables.append(_qualified(r, default_db))
        return DDL("ALTER", tuple(tables))
    m = re.match(r"DROP\s+(?:TEMPORARY\s+)?TABLE\s+(?:IF\s+EXISTS\s+)?(.*)$", text, flags)
    if m:
        names = re.findall(_NAME, m.group(1).split("/*")[0])
        tables = []
        for first, second in names:
            if first.upper() in ("RESTRICT", "CASCADE"):
                continue
            first, second = _unquote(first), _unquote(second or None)
            tables.append((first, second) if second else (default_db, first))
        return DDL("DROP", tuple(tables))
    m = re.match(r"RENAME\s+TABLE\s+(.*)$", text, flags)
    if m:
        tables = []
        for pair in re.finditer(rf"{_NAME}\s+TO\s+{_NAME}", m.group(1), flags):
            tables.append(_qualified(pair, default_db, 1))
            tables.append(_qualified(pair, default_db, 3))
        return DDL("RENAME", tuple(tables))
    m = re.match(r"CREATE\s+(?:UNIQUE\s+|FULLTEXT\s+|SPATIAL\s+)?INDEX\s+\S+\s+(?:ON\s+)" + _NAME,
                 text, flags)
    if m:
        return DDL("ALTER", (_qualified(m, default_db),))
    m = re.match(r"DROP\s+INDEX\s+\S+\s+ON\s+" + _NAME, text, flags)
    if m:
        return DDL("ALTER", (_qualified(m, default_db),))
    return DDL("OTHER", ())

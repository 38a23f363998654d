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
_COMMENTS = re.compile(r"/\*(?!M?!).*?\*/|--[^\n]*|#[^\n]*", re.S)
# executable comments: MySQL's /*!NNNNN ... */ and MariaDB's /*M!NNNNNN ... */ run on any
# server of that version or later (every MariaDB runs the 5-digit ones); the binlog keeps a
# statement as the client wrote it, so mysqldump's `/*!50100 ALTER TABLE ... */` arrives so
_EXECUTABLE = re.compile(r"/\*M?!\d{0,6}(.*?)\*/", re.S)


def statement_text(sql: str) -> str:
    """The statement as the server ran it: executable comments opened, other comments gone.
    (A MariaDB-only comment for a version newer than the server would not have run; the
    binlog of a server only holds what it ran, so that case does not arise here.)"""
    return _COMMENTS.sub(" ", _EXECUTABLE.sub(lambda m: f" {m.group(1)} ", sql)).strip()


@dataclass(frozen=True)
class DDL:
    kind: str  # CREATE, ALTER, DROP, RENAME, TRUNCATE, DATABASE, OTHER
    tables: tuple[tuple[str, str], ...]  # (db, table); db filled from the default schema
    database: str | None = None  # for CREATE/DROP/ALTER DATABASE
    exchanged: tuple[str, str] | None = None  # ALTER TABLE a EXCHANGE PARTITION p WITH TABLE b: b (also in tables)


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
    text = statement_text(sql)
    flags = re.I | re.S
    m = re.match(
        r"(CREATE|DROP|ALTER)\s+(?:DATABASE|SCHEMA)\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?"
        rf"({_IDENT})",
        text,
        flags,
    )
    if m:
        return DDL("DATABASE", (), _unquote(m.group(2)))
    m = re.match(rf"TRUNCATE\s+(?:TABLE\s+)?{_NAME}", text, flags)
    if m:
        return DDL("TRUNCATE", (_qualified(m, default_db),))
    m = re.match(
        r"CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMPORARY\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?"
        rf"{_NAME}",
        text,
        flags,
    )
    if m:
        return DDL("CREATE", (_qualified(m, default_db),))
    m = re.match(r"ALTER\s+(?:ONLINE\s+)?(?:IGNORE\s+)?TABLE\s+(?:IF\s+EXISTS\s+)?" + _NAME, text, flags)
    if m:
        tables = [_qualified(m, default_db)]
        # RENAME [TO|AS] name renames the table; RENAME COLUMN / INDEX / KEY do not
        r = re.search(rf"\bRENAME\s+(?!(?:COLUMN|INDEX|KEY)\b)(?:TO\s+|AS\s+)?{_NAME}", text[m.end() :], flags)
        if r:
            tables.append(_qualified(r, default_db))
        # the other table of an EXCHANGE PARTITION gets the partition's rows, without row events
        x = re.search(rf"\bEXCHANGE\s+PARTITION\s+{_IDENT}\s+WITH\s+TABLE\s+{_NAME}", text[m.end() :], flags)
        if x:
            other = _qualified(x, default_db, 1)
            if other not in tables:
                return DDL("ALTER", (*tables, other), exchanged=other)
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
    m = re.match(r"CREATE\s+(?:UNIQUE\s+|FULLTEXT\s+|SPATIAL\s+)?INDEX\s+\S+\s+(?:ON\s+)" + _NAME, text, flags)
    if m:
        return DDL("ALTER", (_qualified(m, default_db),))
    m = re.match(r"DROP\s+INDEX\s+\S+\s+ON\s+" + _NAME, text, flags)
    if m:
        return DDL("ALTER", (_qualified(m, default_db),))
    return DDL("OTHER", ())


# the objects a CREATE/ALTER/DROP may be about that hold no table rows
_NOT_TABLES = re.compile(
    r"\b(?:VIEW|PROCEDURE|FUNCTION|TRIGGER|EVENT|USER|ROLE|SERVER|PACKAGE|SEQUENCE|DATABASE|SCHEMA|"
    r"TABLESPACE|LOGFILE|INDEX|SPATIAL\s+REFERENCE\s+SYSTEM|RESOURCE\s+GROUP)\b|\bTABLES?\b",
    re.I,
)


def unclassified_tables(sql: str, default_db: str) -> list[tuple[str, str]]:
    """For a statement ``parse_ddl`` calls OTHER: the names in it that may be tables whose
    definition or rows it changed without row events, when it is a CREATE/ALTER/DROP/
    RENAME/TRUNCATE of a table or of something unknown. Ingest stops
    on such a statement if it names a captured table, rather than let the sinks go stale;
    statements about views, routines, users and the like name no table here."""
    text = statement_text(sql)
    verb = re.match(r"(CREATE|ALTER|DROP|RENAME|TRUNCATE)\b", text, re.I)
    if not verb:
        return []
    what = _NOT_TABLES.search(text, verb.end())
    if what and not re.fullmatch(r"TABLES?", what.group(0), re.I):
        return []
    names = []
    for m in re.finditer(_NAME, text[verb.end() :]):
        name = _qualified(m, default_db)
        if name not in names:
            names.append(name)
    return names


# ---------------------------------------------------------------------- what a DDL did to each table

DROPPED, CREATED, RENAMED, ALTERED = "DROP", "CREATE", "RENAME", "ALTER"


def table_effects(ddl: DDL) -> list[tuple[tuple[str, str], str]]:
    """What the statement did to each table name it names, in order of first mention:

    * DROP: the name no longer holds that table (dropped, or renamed away);
    * CREATE: a new table under the name (CREATE, CREATE ... LIKE / AS SELECT, CREATE OR
      REPLACE), empty or filled by row events of the same statement;
    * RENAME: a table renamed to this name, its rows came without row events;
    * ALTER: the table was altered in place (also the other table of an EXCHANGE PARTITION).

    RENAME TABLE pairs are followed one by one, so a swap ``a TO tmp, b TO a, tmp TO b``
    leaves a and b RENAMEd; tmp existed neither before nor after and is left out."""
    if ddl.kind == "CREATE":
        return [(t, CREATED) for t in ddl.tables]
    if ddl.kind == "DROP":
        return [(t, DROPPED) for t in ddl.tables]
    pairs: list[tuple[tuple[str, str], tuple[str, str]]] = []
    if ddl.kind == "RENAME":
        pairs = list(zip(ddl.tables[0::2], ddl.tables[1::2]))
    elif ddl.kind == "ALTER" and len(ddl.tables) == 2 and ddl.exchanged is None:
        pairs = [(ddl.tables[0], ddl.tables[1])]  # ALTER TABLE a ... RENAME TO b
    if pairs:
        state: dict[tuple[str, str], str] = {}
        existed: dict[tuple[str, str], bool] = {}
        for src, dst in pairs:
            existed.setdefault(src, True)
            existed.setdefault(dst, False)  # a rename target must not exist
            state[src], state[dst] = DROPPED, RENAMED
        return [(t, kind) for t, kind in state.items() if kind != DROPPED or existed[t]]
    if ddl.kind == "ALTER":
        return [(t, ALTERED) for t in ddl.tables]
    return []


# what one clause of an ALTER TABLE does to the rows already in the table
INDEX, OPTIONS, DEFAULT, ADD_COLUMN, ADD_PLAIN_COLUMN, COLUMN, ROWS, RENAME_TABLE, UNKNOWN = (
    "index",
    "options",
    "default",
    "add_column",
    "add_plain_column",
    "column",
    "rows",
    "rename",
    "unknown",
)

_KEYS = r"(?:INDEX|KEY|UNIQUE|FULLTEXT|SPATIAL|PRIMARY|FOREIGN|CONSTRAINT|CHECK|PERIOD)\b"
_OPTIONS = re.compile(
    r"(?:(?:DEFAULT\s+)?(?:CHARSET|CHARACTER\s+SET|COLLATE)\b|ENGINE|COMMENT|AUTO_INCREMENT|ROW_FORMAT|"
    r"KEY_BLOCK_SIZE|ALGORITHM|LOCK|STATS_\w+|PACK_KEYS|CHECKSUM|TABLE_CHECKSUM|DELAY_KEY_WRITE|MAX_ROWS|"
    r"MIN_ROWS|AVG_ROW_LENGTH|PAGE_CHECKSUM|PAGE_COMPRESSED|PAGE_COMPRESSION_LEVEL|TRANSACTIONAL|ENCRYPTED|"
    r"ENCRYPTION_KEY_ID|IETF_QUOTES|SEQUENCE|INSERT_METHOD|UNION|DATA\s+DIRECTORY|INDEX\s+DIRECTORY|FORCE|"
    r"ORDER\s+BY|(?:DISABLE|ENABLE)\s+KEYS|WAIT\b|NOWAIT|"
    r"(?:ADD|REORGANIZE|COALESCE|ANALYZE|CHECK|OPTIMIZE|REBUILD|REPAIR)\s+PARTITION|PARTITION\s+BY|"
    r"REMOVE\s+PARTITIONING)\b",
    re.I,
)
# a column definition that gives existing rows a value other than NULL
_VALUED = re.compile(
    r"\bDEFAULT\b(?!\s+NULL\b)|\bNOT\s+NULL\b|\bAS\b|\bGENERATED\b|\bAUTO_INCREMENT\b|"
    r"\bSERIAL\b|\bTIMESTAMP\b|\bPRIMARY\b",
    re.I,
)


def _split_top_level(text: str) -> list[str]:
    """``text`` cut at commas outside parentheses and quotes."""
    parts, depth, quote, start, i = [], 0, None, 0, 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\" and quote != "`":
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "'\"`":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _clause_kind(clause: str, ignore: bool) -> str:
    c = " ".join(clause.split())
    m = re.match(r"(\w+)\s*(.*)$", c, re.S)
    if not m:
        return UNKNOWN
    verb, rest = m.group(1).upper(), m.group(2)
    if verb == "ADD":
        if re.match(_KEYS, rest, re.I):
            # ALTER IGNORE ... ADD UNIQUE/PRIMARY deletes the duplicate rows, without row events
            return ROWS if ignore and re.match(r"(?:UNIQUE|PRIMARY)\b", rest, re.I) else INDEX
        if re.match(r"PARTITION\b", rest, re.I):
            return OPTIONS
        if re.match(r"SYSTEM\b", rest, re.I):
            return UNKNOWN
        body = re.sub(r"^COLUMN\s+", "", rest, flags=re.I)
        body = re.sub(r"^IF\s+NOT\s+EXISTS\s+", "", body, flags=re.I)
        body = re.sub(r"^(`(?:[^`]|``)+`|\S+)", "", body)  # the column name may be any word
        return ADD_COLUMN if _VALUED.search(body) else ADD_PLAIN_COLUMN
    if verb == "DROP":
        if re.match(_KEYS, rest, re.I):
            return INDEX
        if re.match(r"PARTITION\b", rest, re.I):
            return ROWS  # the partition's rows are gone, without row events
        if re.match(r"SYSTEM\b", rest, re.I):
            return UNKNOWN
        return COLUMN
    if verb in ("MODIFY", "CHANGE", "CONVERT"):
        return COLUMN
    if verb == "ALTER":
        if re.match(r"(?:INDEX|KEY)\b", rest, re.I):
            return INDEX
        if re.search(r"\b(?:SET\s+DEFAULT|DROP\s+DEFAULT)\b", rest, re.I):
            return DEFAULT  # existing rows keep their values
        return COLUMN
    if verb == "RENAME":
        if re.match(r"(?:INDEX|KEY)\b", rest, re.I):
            return INDEX
        if re.match(r"COLUMN\b", rest, re.I):
            return COLUMN
        return RENAME_TABLE
    if verb in ("TRUNCATE", "EXCHANGE") and re.match(r"PARTITION\b", rest, re.I):
        return ROWS
    if verb == "IMPORT":
        return ROWS
    if verb == "DISCARD":
        return OPTIONS
    if _OPTIONS.match(c):
        return OPTIONS
    return UNKNOWN


def alter_clause_kinds(sql: str) -> list[str]:
    """What each clause of an ALTER TABLE (or CREATE/DROP INDEX) statement does to the rows
    already in the table, coarsely: ``index``/``options``/``default`` change no row;
    ``add_plain_column`` adds a column whose existing rows read NULL; ``add_column`` one
    that gives them a value (DEFAULT, NOT NULL, generated, ...); ``column`` changes,
    converts, renames or drops a column; ``rows`` deletes or replaces rows (DROP/TRUNCATE/
    EXCHANGE PARTITION, ALTER IGNORE ... ADD UNIQUE); ``unknown`` anything else."""
    text = statement_text(sql)
    flags = re.I | re.S
    if re.match(r"(?:CREATE\s+(?:UNIQUE\s+|FULLTEXT\s+|SPATIAL\s+)?|DROP\s+)INDEX\b", text, flags):
        return [INDEX]
    m = re.match(r"ALTER\s+(ONLINE\s+)?(IGNORE\s+)?TABLE\s+(?:IF\s+EXISTS\s+)?" + _NAME, text, flags)
    if not m:
        return [UNKNOWN]
    ignore = bool(m.group(2))
    rest = text[m.end() :]
    # partition clauses are not comma separated: `TRUNCATE PARTITION p0, p1`
    head = re.search(
        r"\b(?:(?:ADD|DROP|TRUNCATE|EXCHANGE|REORGANIZE|COALESCE|ANALYZE|CHECK|OPTIMIZE|"
        r"REBUILD|REPAIR)\s+PARTITION|PARTITION\s+BY|REMOVE\s+PARTITIONING)\b",
        rest,
        flags,
    )
    clauses = _split_top_level(rest[: head.start()] if head else rest)
    kinds = [_clause_kind(c, ignore) for c in clauses]
    if head:
        kinds.append(_clause_kind(rest[head.start() :], ignore))
    return kinds or [OPTIONS]


# ---------------------------------------------------------------------- the DDL marker


def ddl_marker(db: str, table: str, kind: str, sql: str, spec) -> dict:
    """The content of a DDL marker (schemas/ddl-marker.schema.json): the table, what the
    statement did to it, the statement, and the table's definition after it (null when
    the table is gone), as the TableSpec's fields."""
    from dataclasses import asdict

    return {
        "table": f"{db}.{table}",
        "kind": kind,
        "ddl": sql,
        "definition": asdict(spec) if spec is not None else None,
    }


def spec_from_marker(marker: dict):
    """The TableSpec of a DDL marker (None when the table is gone)."""
    from cdc.tablespec import ColumnSpec, TableSpec

    d = marker.get("definition")
    if not d:
        return None
    known = set(ColumnSpec.__dataclass_fields__)
    cols = tuple(
        ColumnSpec(**{k: (tuple(v) if k == "enum_values" and v is not None else v) for k, v in c.items() if k in known})
        for c in d["columns"]
    )
    return TableSpec(
        d["db"], d["table"], cols, tuple(d.get("primary_key") or ()), d.get("default_charset"), d.get("comment")
    )

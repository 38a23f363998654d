"""Table definitions for the merger: from Debezium's schema-change events (tableChanges)
or, for a table first seen in the stream, from the source's information_schema."""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass

import pymysql

from cdc.config import MySQLConfig
from cdc.infoschema import load_table_details, spec_from_information_schema
from cdc.quoting import quote_ident
from cdc.routes import Routes, origin_of
from cdc.tablespec import ColumnSpec, TableSpec
from merger.mysql.checks import DENIED
from merger.mysql.source import SourceGuard, connect

LISTING_TTL_S = 2.0  # a sharded catalog's listing of a shard's tables is reused this long

_ID = re.compile(r'^"((?:[^"]|"")*)"\."((?:[^"]|"")*)"$')


def parse_table_id(text: str) -> tuple[str, str]:
    m = _ID.match(text)
    if not m:
        db, _, table = text.partition(".")
        return db, table
    return m.group(1).replace('""', '"'), m.group(2).replace('""', '"')


def spec_from_table_change(change: dict) -> TableSpec | None:
    """A TableSpec from one ``tableChanges`` entry of a schema-change event."""
    table = change.get("table")
    if not table:
        return None
    db, name = parse_table_id(change["id"])
    cols = []
    for c in table.get("columns", []):
        type_name = str(c.get("typeName", "")).lower()
        unsigned = "unsigned" in type_name
        base = type_name.replace(" unsigned", "").replace(" zerofill", "").strip()
        t = base
        length, scale, fsp = c.get("length"), c.get("scale"), None
        if t in ("time", "datetime", "timestamp"):
            fsp, length = length or 0, None
        enum_values = None
        if c.get("enumValues") is not None:
            enum_values = tuple(v[1:-1].replace("''", "'") if v.startswith("'") else v for v in c["enumValues"])
        cols.append(
            ColumnSpec(
                name=c["name"],
                type_name=t,
                position=c.get("position", 0),
                unsigned=unsigned,
                length=length,
                scale=scale,
                fsp=fsp,
                charset=c.get("charsetName"),
                nullable=bool(c.get("optional", True)),
                enum_values=enum_values,
                default=c.get("defaultValueExpression"),
                auto_increment=bool(c.get("autoIncremented")),
            )
        )
    return TableSpec(
        db=db,
        table=name,
        columns=tuple(cols),
        primary_key=tuple(table.get("primaryKeyColumnNames") or ()),
        default_charset=table.get("defaultCharsetName"),
    )


class SourceCatalog:
    """Reads table definitions from the source database, over one connection kept open
    (a database of thousands of tables is read one table at a time as they appear).
    Transient failures are retried by the guard (see merger.mysql.source)."""

    def __init__(self, mysql: MySQLConfig, guard: SourceGuard | None = None):
        self.mysql = mysql
        self.guard = guard or SourceGuard()
        self._conn: pymysql.Connection | None = None
        self._lock = threading.Lock()

    def connect(self) -> pymysql.Connection:
        return connect(self.mysql)

    def _query(self, what: str, fn):
        def attempt():
            with self._lock:
                if self._conn is None or not self._conn.open:
                    self._conn = connect(self.mysql)
                try:
                    return fn(self._conn)
                except BaseException:
                    self.close()  # a fresh connection for the next attempt
                    raise

        return self.guard.call(what, attempt)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

    def table_spec(self, db: str, table: str) -> TableSpec | None:
        details = self._query(
            f"reading the definition of {db}.{table}", lambda conn: load_table_details(conn, db, table)
        )
        if not details.get("columns"):
            return None
        return spec_from_information_schema(db, table, details)

    def select_denied(self, db: str, table: str) -> str | None:
        """Why the merger's user may not read ``db.table`` (with the GRANT that fixes
        it), or None if it may, or if the table does not exist."""

        def query(conn):
            with conn.cursor() as cur:
                try:
                    cur.execute(f"SELECT 1 FROM {quote_ident(db)}.{quote_ident(table)} LIMIT 0")
                    cur.fetchall()
                    return None
                except (pymysql.err.OperationalError, pymysql.err.ProgrammingError) as exc:
                    if not exc.args or exc.args[0] not in DENIED:
                        return None  # 1146: gone
                cur.execute("SELECT CURRENT_USER()")
                user, _, host = cur.fetchone()[0].rpartition("@")
                account = f"'{user}'@'{host}'"
                return (
                    f"user {account} lacks SELECT on it: GRANT SELECT ON "
                    f"{quote_ident(db)}.{quote_ident(table)} TO {account}"
                )

        return self._query(f"checking SELECT on {db}.{table}", query)

    def origins(self, logical: str) -> list["Origin"]:
        """Where the rows of table ``logical`` are read: the table itself."""
        db, table = logical.split(".", 1)
        return [Origin(None, None, self.mysql, db, table)]

    def list_tables(self) -> list[str]:
        """Base tables of the source outside the system databases, as db.table."""

        def query(conn):
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE "
                    "TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA NOT IN "
                    "('mysql', 'information_schema', 'performance_schema', 'sys')"
                )
                return [f"{db}.{t}" for db, t in cur.fetchall()]

        return self._query("listing the source tables", query)


@dataclass(frozen=True)
class Origin:
    """Where rows of a logical table are read: one physical table of one server.
    ``name``: the value of the origin column (None when the table has none); ``shard``:
    the shard's name (None for a one-server source)."""

    name: str | None
    shard: str | None
    mysql: MySQLConfig
    db: str
    table: str

    def describe(self) -> str:
        where = f"shard {self.shard}: " if self.shard else ""
        return f"{where}{self.db}.{self.table}"


class ShardedCatalog:
    """The catalog of a source whose tables are routed into logical ones (several shards,
    or ``routes`` on one server): a logical table's definition is its first origin's, as
    ``cdc.routes.Routes.logical_spec`` makes it (renamed; in key mode ``origin`` with the
    origin column). One ``SourceCatalog`` per server, each with its own connection."""

    def __init__(self, servers: dict[str | None, MySQLConfig], routes: Routes, guard: SourceGuard | None = None):
        self.guard = guard or SourceGuard()
        self.routes = routes
        self.servers = {name: SourceCatalog(mysql, self.guard) for name, mysql in servers.items()}
        self.mysql = {name: mysql for name, mysql in servers.items()}
        self._listed: dict[str | None, tuple[float, list[str]]] = {}  # shard -> (when, its tables)

    def _tables(self, shard: str | None, fresh: bool) -> list[str]:
        """A shard's tables, listed again after ``LISTING_TTL_S`` (a start meets hundreds of
        tables at once: one listing per shard serves them all) or when ``fresh``."""
        listed = self._listed.get(shard)
        now = time.monotonic()
        if fresh or listed is None or now - listed[0] > LISTING_TTL_S:
            listed = (now, sorted(self.servers[shard].list_tables()))
            self._listed[shard] = listed
        return listed[1]

    def origins(self, logical: str) -> list[Origin]:
        """Every physical table of every server that the routes make ``logical``, in shard
        then name order (a table just created is listed: none found lists again)."""
        return self._origins(logical, fresh=False) or self._origins(logical, fresh=True)

    def _origins(self, logical: str, fresh: bool) -> list[Origin]:
        out = []
        for shard in self.servers:
            for physical in self._tables(shard, fresh):
                db, table = physical.split(".", 1)
                if ".".join(self.routes.logical(db, table)) != logical:
                    continue
                name = origin_of(shard, db, table) if self.routes.adds_origin(db, table) else None
                out.append(Origin(name, shard, self.mysql[shard], db, table))
        return out

    def logical_name(self, physical: str) -> str:
        return ".".join(self.routes.logical(*physical.split(".", 1)))

    def table_spec(self, db: str, table: str) -> TableSpec | None:
        for origin in self.origins(f"{db}.{table}"):
            spec = self.servers[origin.shard].table_spec(origin.db, origin.table)
            if spec is not None:
                return self.routes.logical_spec(spec)
        return None

    def select_denied(self, db: str, table: str) -> str | None:
        for origin in self.origins(f"{db}.{table}"):
            denied = self.servers[origin.shard].select_denied(origin.db, origin.table)
            if denied:
                return f"{denied} (on {origin.describe()})"
        return None

    def list_tables(self) -> list[str]:
        """The logical tables, as db.table."""
        return sorted({self.logical_name(t) for shard in self.servers for t in self._tables(shard, fresh=True)})

    def close(self) -> None:
        for catalog in self.servers.values():
            catalog.close()

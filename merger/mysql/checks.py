"""Start-up checks of the merger against the source: credentials and privileges.

The merger needs ``SELECT`` on the tables it captures (snapshots, table definitions) and
``INSERT, UPDATE, DELETE`` on the watermark table; nothing else. Each problem is one
line that says which ``GRANT`` an administrator should run. The checks write nothing:
the statements that probe the watermark table change no row (so nothing reaches the
binlog either).
"""

from __future__ import annotations

from typing import Callable, Iterable

import pymysql

from cdc.config import MergerConfig, routes_of
from cdc.quoting import quote_ident
from merger.errors import MergerError
from merger.mysql.positions import read_binlog_point
from merger.mysql.source import SourceUnavailable, is_transient
from merger.sources import source_kind

#: privilege errors: table access denied (1142), column access denied (1143),
#: database access denied (1044)
DENIED = (1142, 1143, 1044)


def _connect(config: MergerConfig) -> pymysql.Connection:
    m = config.mysql
    try:
        return pymysql.connect(**m.connect_kwargs(), autocommit=True)
    except pymysql.err.OperationalError as exc:
        code = exc.args[0] if exc.args else 0
        if code == 1045:
            raise MergerError(
                f"the source MySQL at {m.host}:{m.port} rejected user '{m.user}': wrong "
                f"credentials (check mysql.user and mysql.password_env/_file)"
            ) from None
        if is_transient(exc):  # retried by the caller's SourceGuard
            raise SourceUnavailable(f"the source MySQL at {m.host}:{m.port} is unreachable: {exc.args[-1]}") from None
        raise MergerError(f"cannot connect to the source MySQL at {m.host}:{m.port}: {exc.args[-1]}") from None


def _account(cur) -> str:
    cur.execute("SELECT CURRENT_USER()")
    user, _, host = cur.fetchone()[0].rpartition("@")
    return f"'{user}'@'{host}'"


def _denied(cur, sql: str) -> bool:
    try:
        cur.execute(sql)
        cur.fetchall()
        return False
    except (pymysql.err.OperationalError, pymysql.err.ProgrammingError) as exc:
        if exc.args and exc.args[0] in DENIED:
            return True
        raise


def watermark_grant(table: str, account: str) -> str:
    db, name = table.split(".", 1)
    return f"GRANT INSERT, UPDATE, DELETE ON {quote_ident(db)}.{quote_ident(name)} TO {account}"


def check_source(config: MergerConfig, captured: Callable[[str], bool]) -> None:
    """Raises MergerError (one line) if the merger's source user cannot do its job.

    ``captured(db.table)``: whether the merger captures that table."""
    conn = _connect(config)
    try:
        with conn.cursor() as cur:
            account = _account(cur)
            cur.execute("SHOW GRANTS")
            grants = " ".join(str(row[0]).upper() for row in cur.fetchall())
            if "SELECT" not in grants and "ALL PRIVILEGES" not in grants:
                raise MergerError(
                    f"user {account} lacks SELECT on the captured tables: GRANT SELECT ON "
                    f"<database>.* TO {account} (for each captured database)"
                )
            # tables the user can see (information_schema shows only those with some privilege)
            cur.execute(
                "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE "
                "TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA NOT IN "
                "('mysql', 'information_schema', 'performance_schema', 'sys')"
            )
            tables = [(db, t) for db, t in cur.fetchall() if captured(f"{db}.{t}")]
            missing = _without_select(cur, tables)
            if missing:
                names = ", ".join(f"{quote_ident(db)}.{quote_ident(t)}" for db, t in missing[:3])
                more = f" (and {len(missing) - 3} more)" if len(missing) > 3 else ""
                raise MergerError(
                    f"user {account} lacks SELECT on {names}{more}: GRANT SELECT ON "
                    f"{quote_ident(missing[0][0])}.* TO {account}"
                )
            if config.snapshot.watermarks == "positions":
                read_binlog_point(conn)  # a binlog position it can read; nothing is written
            elif source_kind(config.source_connector).watermark_windows:  # else no watermark table is written
                _check_watermark_table(cur, config.watermark_table, account)
    finally:
        conn.close()


def _without_select(cur, tables: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(db, t) for db, t in tables if _denied(cur, f"SELECT 1 FROM {quote_ident(db)}.{quote_ident(t)} LIMIT 0")]


def _check_watermark_table(cur, table: str, account: str) -> None:
    db, name = table.split(".", 1)
    q = f"{quote_ident(db)}.{quote_ident(name)}"
    probes = {  # statements that change no row
        "INSERT": f"INSERT INTO {q} (table_name, window_id, kind) SELECT '', '', '' FROM DUAL WHERE 1 = 0",
        "UPDATE": f"UPDATE {q} SET kind = 'LOW' WHERE 1 = 0",
        "DELETE": f"DELETE FROM {q} WHERE 1 = 0",
    }
    try:
        lacking = [priv for priv, sql in probes.items() if _denied(cur, sql)]
    except pymysql.err.ProgrammingError as exc:
        if exc.args and exc.args[0] == 1146:
            return  # missing, and we may write it: created at start (or that step names the DDL)
        raise
    if lacking:
        # without any privilege on it the table is invisible: it may also be missing
        raise MergerError(
            f"user {account} lacks {', '.join(lacking)} on the watermark table {table} "
            f"(an administrator creates it if it is missing, see docs/security.md): "
            f"{watermark_grant(table, account)}"
        )


def source_servers(config: MergerConfig, accepts: Callable[[str], bool]) -> list[tuple[MergerConfig, Callable]]:
    """``(config with that server as mysql, captured)`` per source server: each shard of a
    sharded source (its physical tables captured when their logical table is), or the one."""
    if not config.shards and not config.routes:
        return [(config, accepts)]
    routes = routes_of(config)

    def captured(physical: str) -> bool:
        return accepts(".".join(routes.logical(*physical.split(".", 1))))

    if not config.shards:
        return [(config, captured)]
    return [(config.model_copy(update={"mysql": shard.mysql}), captured) for shard in config.shards]

"""Start-up checks of ingest. Each failure is one line that names the problem and what to
do about it; none of them is a stack trace."""

from __future__ import annotations

import pymysql

from cdc.config import IngestConfig
from cdc.errors import UserError
from ingest.failover import ServerState
from ingest.filters import CaptureFilter


class SourceError(UserError, RuntimeError):
    """A problem with the source server that an operator must fix (user-facing text)."""


REQUIRED_VARIABLES = {
    "log_bin": ("ON", "start the server with --log-bin"),
    "binlog_format": ("ROW", "set binlog_format=ROW"),
    "binlog_row_image": ("FULL", "set binlog_row_image=FULL"),
    "binlog_row_metadata": ("FULL", "set binlog_row_metadata=FULL (MariaDB >= 10.5, MySQL >= 8.0.14)"),
}


def connect(config: IngestConfig, **extra) -> pymysql.Connection:
    m = config.mysql
    try:
        return pymysql.connect(**m.connect_kwargs(), autocommit=True, **extra)
    except pymysql.err.OperationalError as exc:
        code = exc.args[0] if exc.args else 0
        if code == 1045:
            raise SourceError(
                f"MySQL at {m.host}:{m.port} rejected user '{m.user}': wrong "
                f"credentials (check mysql.user and mysql.password_env/_file)"
            ) from None
        if code in (2003, 2013, 2006):
            raise SourceError(
                f"MySQL at {m.host}:{m.port} is unreachable ({exc.args[1] if len(exc.args) > 1 else exc})"
            ) from None
        raise SourceError(f"cannot connect to MySQL at {m.host}:{m.port}: {exc.args[-1]}") from None


def server_flavor(conn: pymysql.Connection) -> str:
    with conn.cursor() as cur:
        cur.execute("SELECT @@version")
        version = cur.fetchone()[0]
    return "mariadb" if "mariadb" in version.lower() else "mysql"


def check_source(config: IngestConfig) -> dict:
    """Checks binlog settings and privileges; returns facts ingest needs (flavor, GTID pos)."""
    conn = connect(config)
    try:
        flavor = server_flavor(conn)
        with conn.cursor() as cur:
            cur.execute(
                "SHOW GLOBAL VARIABLES WHERE Variable_name IN "
                "('log_bin','binlog_format','binlog_row_image','binlog_row_metadata',"
                "'server_id','gtid_binlog_pos','gtid_mode','binlog_annotate_row_events')"
            )
            variables = {name.lower(): str(value) for name, value in cur.fetchall()}
        for name, (wanted, fix) in REQUIRED_VARIABLES.items():
            actual = variables.get(name)
            if actual is None:
                raise SourceError(f"server does not support {name} (need MariaDB >= 10.5 or MySQL >= 8.0.14)")
            if actual.upper() != wanted:
                raise SourceError(f"{name} is {actual}, must be {wanted}: {fix}")
        if flavor != "mariadb":
            raise SourceError(
                "this ingest reads MariaDB GTIDs; MySQL sources are supported "
                "through Debezium's connector (see connect-configs/)"
            )
        with conn.cursor() as cur:
            cur.execute("SHOW GRANTS")
            grants = " ".join(row[0].upper() for row in cur.fetchall())
        missing = []
        if "ALL PRIVILEGES ON *.*" not in grants:
            if "REPLICATION SLAVE" not in grants:
                missing.append("REPLICATION SLAVE")
            if "REPLICATION CLIENT" not in grants and "BINLOG MONITOR" not in grants:
                missing.append("REPLICATION CLIENT (BINLOG MONITOR)")
            if "SELECT" not in grants:
                missing.append("SELECT")
        if missing:
            raise SourceError(
                f"user '{config.mysql.user}' lacks {', '.join(missing)}: "
                f"GRANT {', '.join(m.split(' (')[0] for m in missing)} ON *.* TO "
                f"'{config.mysql.user}'@'%'"
            )
        with conn.cursor() as cur:
            cur.execute("SHOW DATABASES")
            capture = CaptureFilter(config)
            for (db,) in cur.fetchall():
                capture.captures_database(db)  # refuses a captured database with a '.' in its name
        return {
            "flavor": flavor,
            "gtid_binlog_pos": variables.get("gtid_binlog_pos", ""),
            "server_id": int(variables.get("server_id", 0)),
        }
    finally:
        conn.close()


def gtid_for_file_pos(config: IngestConfig, file: str, pos: int) -> str:
    conn = connect(config)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (file, pos))
            row = cur.fetchone()
    finally:
        conn.close()
    if not row or row[0] is None:
        raise SourceError(f"binlog position {file}:{pos} is not in the server's binlogs")
    return row[0]


def read_server_state(conn: pymysql.Connection) -> ServerState:
    """The server's identity and binlog state, read on ``conn`` (the binlog connection
    itself, before its dump starts, so that the facts are of the server it streams from)."""
    with conn.cursor() as cur:
        cur.execute("SELECT @@server_id, @@gtid_binlog_pos, @@gtid_binlog_state, @@gtid_strict_mode")
        server_id, pos, state, strict = cur.fetchone()
        cur.execute("SHOW BINARY LOGS")
        files = tuple(row[0] for row in cur.fetchall())
    return ServerState(int(server_id), pos or "", state or "", bool(int(strict)), files)

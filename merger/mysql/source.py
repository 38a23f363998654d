"""The merger's access to the source database, with retries.

Every source access of the merger (table definitions, snapshot planning, watermark
writes, chunk SELECTs through Spark JDBC) goes through ``SourceGuard.call``. A transient
failure (server down or restarting, connection lost or refused) is retried with
exponential backoff, 1 s doubling to 30 s; each retry is one WARNING line, and while it
lasts ``SourceGuard.status()`` (shown by ``cdc status`` as ``source_unavailable``) says
what waits and since when. Errors an operator must fix (wrong password, missing
privilege, bad SQL) are not retried: they stop the merger with one line.
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
import time
from typing import Callable, TypeVar

import pymysql
import tenacity

from merger.errors import MergerError

log = logging.getLogger(__name__)

T = TypeVar("T")

FIRST_DELAY_S = 1.0
MAX_DELAY_S = 30.0

# pymysql error codes of an unreachable or restarting server: can't connect (2003), gone
# away (2006), lost during a query (2013), lost at handshake (2055), shutdown in progress
# (1053), connection killed (1927), too many connections (1040)
UNAVAILABLE_CODES = frozenset({2003, 2006, 2013, 2055, 1053, 1927, 1040})

# what the MariaDB JDBC driver and Spark say when the server is down or goes away
_JDBC_UNAVAILABLE = (
    "SQLNonTransientConnectionException",
    "SQLTransientConnectionException",
    "FAILED_JDBC.CONNECTION",
    "Communications link failure",
    "Connection refused",
    "socket was closed",
    "Connection reset",
    "Could not connect",
    "Socket fail",
    "Server has closed the connection",
    "Server shutdown in progress",
    "Connection was killed",
    "unexpected end of stream",
    "cdc-source-unavailable",
)  # merger.snapshot.chunk_read's tasks
_JDBC_FATAL = ("Access denied", "SQLInvalidAuthorizationSpecException", "Unknown database", "SQLSyntaxErrorException")


_NETWORK_ERRNOS = frozenset({errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ETIMEDOUT, errno.EHOSTDOWN, errno.ENETDOWN})


class SourceUnavailable(MergerError):
    """The source database cannot be reached right now (retried by ``SourceGuard``)."""


def is_transient(exc: BaseException) -> bool:
    """True for failures that go away when the source is back (retry); False for errors
    an operator must fix."""
    if isinstance(exc, SourceUnavailable):
        return True
    if isinstance(exc, pymysql.err.OperationalError):
        return bool(exc.args) and exc.args[0] in UNAVAILABLE_CODES
    if isinstance(exc, pymysql.err.InterfaceError):
        return True  # the connection is closed/broken
    if isinstance(exc, (ConnectionError, EOFError, socket.timeout)):
        return True
    if isinstance(exc, MergerError):
        return False
    if type(exc).__module__.split(".")[0] in ("py4j", "pyspark"):  # Spark JDBC reads
        text = str(exc)
        if any(s in text for s in _JDBC_FATAL):
            return False
        return any(s in text for s in _JDBC_UNAVAILABLE)
    if isinstance(exc, OSError):  # network trouble only: a full disk is no outage
        return isinstance(exc, (socket.gaierror, socket.herror)) or exc.errno in _NETWORK_ERRNOS
    return False


def connect(mysql) -> pymysql.Connection:
    """An autocommit connection to the source; unreachable -> ``SourceUnavailable``,
    anything else (credentials, TLS) -> ``MergerError``."""
    where = f"{mysql.host}:{mysql.port}"
    try:
        return pymysql.connect(**mysql.connect_kwargs(), autocommit=True)
    except pymysql.err.OperationalError as exc:
        if is_transient(exc):
            raise SourceUnavailable(f"the source MySQL at {where} is unreachable: {exc.args[-1]}") from None
        raise MergerError(f"cannot connect to the source MySQL at {where}: {exc.args[-1]}") from None
    except (OSError, EOFError) as exc:
        raise SourceUnavailable(f"the source MySQL at {where} is unreachable: {exc}") from None


def short_error(exc: BaseException) -> str:
    """One line of an error (Java errors carry pages of stack trace)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for line in lines:
        if "Exception:" in line or "Error:" in line:
            return line[:300]
    return (lines[0] if lines else type(exc).__name__)[:300]


class SourceGuard:
    """Retries source accesses on transient failures, and remembers that it is doing so."""

    def __init__(
        self,
        stop: threading.Event | None = None,
        first_delay_s: float = FIRST_DELAY_S,
        max_delay_s: float = MAX_DELAY_S,
        on_change: Callable[[], None] | None = None,
    ):
        self.stop = stop or threading.Event()
        self.first_delay_s = first_delay_s
        self.max_delay_s = max_delay_s
        self.on_change = on_change
        self._lock = threading.Lock()
        self._down: dict | None = None  # what waits, the last error, since when, retries
        self.total_retries = 0

    def status(self) -> dict | None:
        with self._lock:
            return dict(self._down) if self._down else None

    def call(self, what: str, fn: Callable[..., T], *args, **kwargs) -> T:
        """``fn(*args, **kwargs)``, retried with backoff while it fails transiently. Stops
        retrying (and raises the last error) once the guard's stop event is set."""
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(is_transient),
            wait=tenacity.wait_exponential(multiplier=self.first_delay_s, max=self.max_delay_s),
            stop=lambda _state: self.stop.is_set(),
            sleep=self.stop.wait,
            before_sleep=lambda state: self._failed(what, state),
            reraise=True,
        )
        result = retrying(fn, *args, **kwargs)
        self._ok()
        return result

    def _failed(self, what: str, state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception()
        delay = state.next_action.sleep if state.next_action else 0.0
        now = time.time()
        with self._lock:
            self.total_retries += 1
            down = self._down or {"since": now, "retries": 0}
            down.update(
                what=what,
                error=short_error(exc),
                retries=down["retries"] + 1,
                next_retry_s=round(delay, 1),
                updated_at=now,
            )
            self._down = down
        log.warning("source unavailable (%s: %s); retry %d in %.0fs", what, short_error(exc), down["retries"], delay)
        self._notify()

    def _ok(self) -> None:
        with self._lock:
            down, self._down = self._down, None
        if down:
            log.info("source reachable again after %.0fs (%d retries)", time.time() - down["since"], down["retries"])
            self._notify()

    def _notify(self) -> None:
        if self.on_change is not None:
            try:
                self.on_change()
            except Exception:  # status publishing must never break a retry
                log.debug("status update failed", exc_info=True)


class WatermarkWriter:
    """Writes watermark rows ``(table, window id, kind)`` on one kept connection (its own
    committed transaction each): `cdc verify`'s windows and the background verify's. A
    failed write drops the connection; the next one opens a new one."""

    def __init__(self, mysql, watermark_table: str, before_write: Callable[[], None] | None = None):
        """``before_write``: called before each write (the merger's batches made prompt:
        ``merger.state.store.batch_prompter``)."""
        from cdc.quoting import quote_ident

        self.mysql = mysql
        self.before_write = before_write
        db, name = watermark_table.split(".", 1)
        self.sql = (
            f"REPLACE INTO {quote_ident(db)}.{quote_ident(name)} (table_name, window_id, kind) VALUES (%s, %s, %s)"
        )
        self._conn: pymysql.Connection | None = None

    def write(self, table: str, window_id: str, kind: str) -> None:
        if self.before_write is not None:
            self.before_write()
        if self._conn is None:
            self._conn = connect(self.mysql)
        try:
            with self._conn.cursor() as cur:
                cur.execute(self.sql, (table, window_id, kind))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

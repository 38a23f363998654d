"""merger.mysql.source: which source failures are retried, and how the guard retries and reports."""

from __future__ import annotations

import logging
import threading

import pymysql
import pytest

from merger.errors import MergerError
from merger.mysql.source import SourceGuard, SourceUnavailable, is_transient, short_error


def _java_error(module: str, name: str, text: str) -> Exception:
    cls = type(name, (Exception,), {"__module__": module})
    return cls(text)


# what Spark JDBC raised here when MariaDB was stopped during a read, and when it was down
MID_READ = (
    "An error occurred while calling o55.parquet.\n: org.apache.spark.SparkException: Job aborted due "
    "to stage failure: Task 0 in stage 1.0 failed 1 times, most recent failure: Lost task 0.0 in stage "
    "1.0 (TID 2) (192.0.2.2 executor driver): java.sql.SQLNonTransientConnectionException: Server has "
    "closed the connection.\n\tat org.mariadb.jdbc..."
)
DOWN = (
    "[FAILED_JDBC.CONNECTION] Failed JDBC jdbc:mysql:*********(redacted) on the operation: Couldn't connect "
    "to the database SQLSTATE: HV000"
)
DENIED = (
    "An error occurred while calling o40.jdbc.\n: java.sql.SQLInvalidAuthorizationSpecException: (conn=5) "
    "Access denied for user 'x'@'localhost' (using password: YES)"
)


@pytest.mark.parametrize(
    "exc, transient",
    [
        (pymysql.err.OperationalError(2003, "Can't connect to MySQL server"), True),
        (pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query"), True),
        (pymysql.err.OperationalError(1053, "Server shutdown in progress"), True),
        (pymysql.err.OperationalError(1045, "Access denied for user"), False),
        (pymysql.err.OperationalError(1142, "SELECT command denied"), False),
        (pymysql.err.ProgrammingError(1064, "You have an error in your SQL syntax"), False),
        (pymysql.err.InterfaceError(0, ""), True),
        (ConnectionResetError(), True),
        (OSError(113, "No route to host"), True),
        (OSError(28, "No space left on device"), False),
        (FileNotFoundError(2, "staging"), False),
        (SourceUnavailable("down"), True),
        (MergerError("no primary key"), False),
        (ValueError("bad"), False),
        (_java_error("py4j.protocol", "Py4JJavaError", MID_READ), True),
        (_java_error("pyspark.errors.exceptions.captured", "AnalysisException", DOWN), True),
        (_java_error("py4j.protocol", "Py4JJavaError", DENIED), False),
        (_java_error("py4j.protocol", "Py4JJavaError", "java.lang.OutOfMemoryError: Java heap space"), False),
    ],
)
def test_is_transient(exc, transient):
    assert is_transient(exc) is transient


def test_short_error_keeps_one_line_of_a_java_error():
    assert short_error(_java_error("py4j.protocol", "Py4JJavaError", MID_READ)).startswith(
        ": org.apache.spark.SparkException: Job aborted"
    )
    assert short_error(ValueError("one\ntwo")) == "one"


def test_guard_retries_transient_failures_with_backoff_and_reports_them(caplog):
    changes = []
    guard = SourceGuard(first_delay_s=0.01, max_delay_s=0.04, on_change=lambda: changes.append(guard.status()))
    seen = []

    def flaky():
        seen.append(guard.status())
        if len(seen) <= 4:
            raise pymysql.err.OperationalError(2003, "Can't connect to MySQL server")
        return "rows"

    with caplog.at_level(logging.INFO, logger="merger.mysql.source"):
        assert guard.call("reading x", flaky) == "rows"
    assert seen[0] is None
    assert [s["retries"] for s in seen[1:]] == [1, 2, 3, 4]
    assert [s["next_retry_s"] for s in seen[1:]] == [0.0, 0.0, 0.0, 0.0]  # rounded 0.01 .. 0.04
    assert seen[-1]["what"] == "reading x" and "Can't connect" in seen[-1]["error"]
    assert seen[1]["since"] == seen[-1]["since"]
    assert guard.status() is None and guard.total_retries == 4
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 4 and "source unavailable (reading x" in warnings[0].getMessage()
    assert "source reachable again" in caplog.records[-1].getMessage()
    assert changes[-1] is None and len(changes) == 5  # 4 failures, then back


def test_guard_backoff_doubles_up_to_the_cap():
    guard = SourceGuard(first_delay_s=1.0, max_delay_s=30.0, stop=threading.Event())
    delays = []
    guard.stop.wait = lambda t: delays.append(t) or False  # no real sleeping
    calls = []

    def down():
        calls.append(1)
        if len(calls) < 9:
            raise SourceUnavailable("down")

    guard.call("x", down)
    assert delays == [1, 2, 4, 8, 16, 30, 30, 30]


def test_guard_does_not_retry_what_an_operator_must_fix():
    guard = SourceGuard(first_delay_s=0.01)
    calls = []

    def denied():
        calls.append(1)
        raise pymysql.err.OperationalError(1142, "INSERT command denied")

    with pytest.raises(pymysql.err.OperationalError):
        guard.call("writing a watermark", denied)
    assert len(calls) == 1 and guard.status() is None


def test_guard_gives_up_when_stopping():
    stop = threading.Event()
    guard = SourceGuard(stop=stop, first_delay_s=0.01)
    calls = []

    def down():
        calls.append(1)
        if len(calls) == 3:
            stop.set()
        raise SourceUnavailable("down")

    with pytest.raises(SourceUnavailable):
        guard.call("x", down)
    assert len(calls) == 3

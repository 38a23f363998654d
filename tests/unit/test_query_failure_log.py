"""merger.app: a failed query's report. The batch's own one-line error (processor.fatal)
reaches the user without py4j's Python traceback; any other exception keeps its record,
and an unexpected failure's Java stack trace is logged by the merger (Spark's own log of it
is off)."""

from __future__ import annotations

import logging

from merger.app import _ReportedElsewhere, _with_trace
from merger.errors import MergerError


def _record(exc: BaseException | None) -> logging.LogRecord:
    info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    return logging.LogRecord("py4j.clientserver", logging.ERROR, __file__, 1, "proxy failed", None, info)


def test_only_the_reported_error_loses_its_traceback():
    fatal = MergerError("bad record in topic t partition 0 offset 3")
    other = MergerError("bad record in topic t partition 0 offset 3")  # same text, another error
    f = _ReportedElsewhere(lambda: fatal)
    assert not f.filter(_record(fatal))
    assert f.filter(_record(other))
    assert f.filter(_record(ValueError("a bug")))
    assert f.filter(_record(None))
    assert _ReportedElsewhere(lambda: None).filter(_record(fatal))


def test_an_unexpected_failure_is_logged_with_its_java_trace():
    class Captured(Exception):
        _desc = "[STREAM_FAILED] Query terminated with exception: boom"
        _stackTrace = "\tat org.apache.spark.Thing.run(Thing.scala:1)"

    text = _with_trace(Captured())
    assert text.startswith("[STREAM_FAILED]") and "\tat org.apache.spark.Thing" in text
    assert _with_trace(RuntimeError("plain")) == "plain"


class _Java:
    """A Java exception as py4j shows it: toString (first line its class and message) and getCause."""

    def __init__(self, text: str, cause=None):
        self.text, self.cause = text, cause

    def toString(self) -> str:  # noqa: N802 (Java's name)
        return self.text + "\n\tat org.apache.spark.Thing.run(Thing.scala:1)\n" * 50

    def getCause(self):  # noqa: N802
        return self.cause


# StreamExecution.PROXY_ERROR in Python's syntax: Spark's way to tell a stop from a failure
PROXY_ERROR = r"py4j.protocol.Py4JJavaError: An error occurred while calling((.|\r\n|\r|\n)*)"


def test_a_batch_cancelled_by_a_stop_fails_with_a_short_error_spark_takes_for_a_stop():
    import re

    from merger.app import BatchStopped, stopped_batch_error

    run_id = "3f50b970-960a-44d7-9395-a6fb40381772"
    cancelled = _Java(
        f"org.apache.spark.SparkException: [SPARK_JOB_CANCELLED] Job 1 cancelled Query cdc-merger "
        f"[id = 95607ec0, runId = {run_id}] was stopped SQLSTATE: XXKDA"
    )

    class Py4JJavaError(Exception):
        java_exception = _Java("org.apache.spark.SparkException: Exception thrown in awaitResult: ", cancelled)

        def __str__(self):
            return "An error occurred while calling o121.getResult.\n: " + self.java_exception.toString()

    err = stopped_batch_error(Py4JJavaError())
    assert isinstance(err, BatchStopped)
    text = str(err)
    assert "\n" not in text and len(text) < 1500, text
    # what Spark's isInterruptionException looks for in a Py4JException's message
    assert "org.apache.spark.SparkException" in text and "cancelled" in text and run_id in text
    assert not re.search(PROXY_ERROR, text)
    # a Python error: its type and first line
    assert str(stopped_batch_error(ValueError("boom\nmore"))) == "micro-batch stopped: ValueError: boom"
    # and py4j's record of it (with its traceback) is dropped: a stop is no failure
    assert not _ReportedElsewhere(lambda: None).filter(_record(err))

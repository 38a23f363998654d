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

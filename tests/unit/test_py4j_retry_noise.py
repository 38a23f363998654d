"""py4j's retried-command record is dropped; its final failure and other records stay."""

import logging

from merger.spark.session import Py4jRetryNoise

PY4J = "/x/.venv/lib/python3.11/site-packages/py4j/java_gateway.py"


def _record(level, msg, path=PY4J):
    return logging.LogRecord("root", level, path, 1056, msg, None, None)


def test_the_retried_command_is_dropped_and_the_failure_kept():
    noise = Py4jRetryNoise()
    root = logging.getLogger()
    before = root.level
    root.setLevel(logging.INFO)
    try:
        assert not noise.filter(_record(logging.INFO, "Exception while sending command."))
        assert noise.filter(_record(logging.ERROR, "Exception while sending command."))
        assert noise.filter(_record(logging.INFO, "something else"))
        assert noise.filter(_record(logging.INFO, "Exception while sending command.", "/x/merger/app.py"))
        root.setLevel(logging.DEBUG)  # cdc -v: everything stays
        assert noise.filter(_record(logging.INFO, "Exception while sending command."))
    finally:
        root.setLevel(before)

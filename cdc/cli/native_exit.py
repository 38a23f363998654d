"""Ending a command that read sinks through native libraries (pyarrow's datasets, delta-rs).

Their thread pools can still hold a thread when the interpreter tears down; the C++ runtime
then aborts the process (``terminate called without an active exception``, exit -6) after
the command's work and output are complete (apache/arrow#34314, delta-io/delta-rs#2184): a
`cdc verify` that found a difference exited -6 instead of 1 in CI once. Such a command ends
with its exit code at once, once its output is flushed: nothing is left to do in the
process (sink writes and requests to the merger are complete before it returns)."""

from __future__ import annotations

import logging
import os
import sys


def exit_now(code: int) -> None:
    """Flush the output and the logs, then end the process with ``code``."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or gone (a closed pipe): nothing more to say
            pass
    os._exit(int(code))

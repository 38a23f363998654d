"""Deterministic crash points, for tests of recovery: ``CDC_CRASH_AT=<point>[@<n>]`` makes
the process kill itself (SIGKILL, as the OOM killer would) the n-th time (default: the
first) it reaches the named point. Unset, a point costs one dict lookup.

Points: ``after_write:<SinkClass>`` (one sink has written a change set, the others may be
mid-write), ``before_state_save`` (every sink written, the batch's state not saved),
``mid_emission`` (a snapshot window partly emitted), ``paused_spill`` (a paused table's
changes kept on disk).

Pause points, for tests that act while something runs: ``CDC_PAUSE_AT=<point>:<seconds>``
makes every pass through the named point say so on stderr and sleep. Points:
``kafka_read`` (a micro-batch's Kafka read task, on an executor: the batch's Spark job runs),
``before_high`` (the snapshot runner, a window's rows staged, before it writes HIGH)."""

from __future__ import annotations

import os
import signal
import sys
import time

_SPEC = os.environ.get("CDC_CRASH_AT", "")
_POINT, _, _NTH = _SPEC.partition("@")
_seen = {"n": 0}
_PAUSE_POINT, _, _PAUSE_S = os.environ.get("CDC_PAUSE_AT", "").partition(":")


def reached(point: str) -> None:
    if not _POINT or point != _POINT:
        return
    _seen["n"] += 1
    if _seen["n"] >= int(_NTH or 1):
        os.kill(os.getpid(), signal.SIGKILL)


def pause(point: str) -> None:
    if not _PAUSE_POINT or point != _PAUSE_POINT:
        return
    print(f"cdc pause point {point}: {_PAUSE_S or 30} s", file=sys.stderr, flush=True)
    time.sleep(float(_PAUSE_S or 30))

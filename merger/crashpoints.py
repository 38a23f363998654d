"""Deterministic crash points, for tests of recovery: ``CDC_CRASH_AT=<point>[@<n>]`` makes
the process kill itself (SIGKILL, as the OOM killer would) the n-th time (default: the
first) it reaches the named point. Unset, a point costs one dict lookup.

Points: ``after_write:<SinkClass>`` (one sink has written a change set, the others may be
mid-write), ``before_state_save`` (every sink written, the batch's state not saved),
``mid_emission`` (a snapshot window partly emitted), ``paused_spill`` (a paused table's
changes kept on disk)."""

from __future__ import annotations

import os
import signal

_SPEC = os.environ.get("CDC_CRASH_AT", "")
_POINT, _, _NTH = _SPEC.partition("@")
_seen = {"n": 0}


def reached(point: str) -> None:
    if not _POINT or point != _POINT:
        return
    _seen["n"] += 1
    if _seen["n"] >= int(_NTH or 1):
        os.kill(os.getpid(), signal.SIGKILL)

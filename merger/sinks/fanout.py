"""The same write to every sink, in parallel, each retried while its sink is unavailable.

A table whose sink is unreachable waits (``blocked_on_sink`` says on which) rather than
fail: the write is retried with a growing delay until the sink takes it, or until the
outage has lasted ``sink_outage_max_s`` (when set): then ``SinkStop``, one line naming the
table, the sink and the last error. A full sink (``SinkFull``), or one a newer merger took
over (``SinkStop``), is not waited for: the error goes up, naming the table and the sink.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable

from merger import crashpoints
from merger.sinks.base import SinkStop, SinkUnavailable

log = logging.getLogger(__name__)

MAX_RETRY_DELAY_S = 30.0


@dataclass(frozen=True)
class SinkRetry:
    """How a write waits for an unreachable sink: ``max_delay_s`` between two attempts at
    most (the merger's ``retry_max_s``), the outage ``outage_max_s`` long at most
    (``sink_outage_max_s``; 0: no bound)."""

    max_delay_s: float = MAX_RETRY_DELAY_S
    outage_max_s: float = 0.0


class SinkFanout:
    def __init__(self, sinks: list, on_blocked: Callable[[], None] = lambda: None, retry: SinkRetry = SinkRetry()):
        self.sinks = sinks
        self.retry = retry
        self.on_blocked = on_blocked  # called before each wait (the status shows the blocked sink)
        self._pool = None

    def each(self, rt, call: Callable) -> None:
        """``call(sink)`` for every sink, at the same time (they wait on I/O, not the GIL).
        ``rt``: the table written (its ``name``, and ``blocked_on_sink`` while it waits)."""
        if len(self.sinks) == 1:
            self.with_retry(rt, self.sinks[0], lambda: call(self.sinks[0]))
            return
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(len(self.sinks), thread_name_prefix="sink")
        futures = [self._pool.submit(self.with_retry, rt, s, lambda s=s: call(s)) for s in self.sinks]
        errors = [f.exception() for f in futures]  # every sink done before an error goes up
        for exc in errors:
            if exc is not None:
                raise exc

    def with_retry(self, rt, sink, call: Callable) -> None:
        """``call()`` (a write to ``sink``), again and again while the sink is unavailable."""
        self.read(rt, sink, call, f"after_write:{type(sink).__name__}")

    def read(self, rt, sink, call: Callable, point: str | None = None) -> None:
        """``call()``, again and again while ``sink`` is unavailable; ``point``: the crash
        point reached once it went through (a write's)."""
        delay = min(1.0, self.retry.max_delay_s)
        name = type(sink).__name__
        since = None
        while True:
            try:
                call()
                if point is not None:
                    crashpoints.reached(point)
                # sinks are written in parallel: only the blocked one may clear the flag
                if rt.blocked_on_sink and rt.blocked_on_sink.startswith(name + ":"):
                    log.info("sink %s reachable again", name)
                    rt.blocked_on_sink = None
                return
            except SinkStop as exc:
                raise type(exc)(f"table {rt.name}, sink {name}: {exc}") from None
            except SinkUnavailable as exc:
                now = time.monotonic()
                since = now if since is None else since
                elapsed, bound = now - since, self.retry.outage_max_s
                if bound and elapsed >= bound:
                    raise SinkStop(
                        f"table {rt.name}, sink {name}: unreachable for {elapsed:.0f}s, longer than "
                        f"sink_outage_max_s ({bound:g}s): {exc}. Nothing is lost (the batch is not "
                        "committed): start the merger again once the sink is back"
                    ) from None
                wait = min(delay, bound - elapsed) if bound else delay
                rt.blocked_on_sink = f"{name}: {exc}"
                log.warning("table %s blocked on sink %s: %s; retrying in %.1fs", rt.name, name, exc, wait)
                self.on_blocked()
                time.sleep(wait)
                delay = min(delay * 2, self.retry.max_delay_s)

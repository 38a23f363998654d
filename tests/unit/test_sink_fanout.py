"""merger.sinks.fanout: a write retried while its sink is unavailable, with a growing delay
bounded by the merger's ``retry_max_s``; a stopped sink is not waited for."""

from __future__ import annotations

import types

import pytest

from merger.sinks import fanout
from merger.sinks.base import SinkStop, SinkUnavailable


class FlakySink:
    def __init__(self, failures: int):
        self.failures = failures
        self.calls = 0

    def write(self) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise SinkUnavailable("connection refused")


def run(monkeypatch, failures: int, **kwargs) -> tuple[list[float], types.SimpleNamespace, FlakySink]:
    slept: list[float] = []
    monkeypatch.setattr(fanout.time, "sleep", slept.append)
    sink = FlakySink(failures)
    rt = types.SimpleNamespace(name="db.t", blocked_on_sink=None)
    fanout.SinkFanout([sink], **kwargs).each(rt, lambda s: s.write())
    return slept, rt, sink


def test_the_delay_doubles_up_to_the_default_bound(monkeypatch):
    slept, rt, sink = run(monkeypatch, 7)
    assert slept == [1, 2, 4, 8, 16, 30, 30]
    assert sink.calls == 8 and rt.blocked_on_sink is None


def test_retry_max_s_bounds_the_delay(monkeypatch):
    slept, _, _ = run(monkeypatch, 5, max_delay_s=4)
    assert slept == [1, 2, 4, 4, 4]


def test_a_bound_under_a_second_bounds_the_first_wait_too(monkeypatch):
    slept, _, _ = run(monkeypatch, 2, max_delay_s=0.5)
    assert slept == [0.5, 0.5]


def test_a_stopped_sink_is_not_waited_for(monkeypatch):
    monkeypatch.setattr(fanout.time, "sleep", lambda s: pytest.fail("waited"))

    class Stopped:
        def write(self):
            raise SinkStop("taken over")

    with pytest.raises(SinkStop, match="table db.t, sink Stopped: taken over"):
        fanout.SinkFanout([Stopped()]).each(
            types.SimpleNamespace(name="db.t", blocked_on_sink=None), lambda s: s.write()
        )

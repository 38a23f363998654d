"""merger.sinks.fanout: a write retried while its sink is unavailable, with a growing delay
bounded by the merger's ``retry_max_s``, for at most ``sink_outage_max_s``; a stopped sink
is not waited for."""

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


def run(monkeypatch, failures: int, retry=fanout.SinkRetry()) -> tuple[list[float], types.SimpleNamespace, FlakySink]:
    slept: list[float] = []
    clock = [100.0]

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += seconds

    monkeypatch.setattr(fanout.time, "sleep", sleep)
    monkeypatch.setattr(fanout.time, "monotonic", lambda: clock[0])
    sink = FlakySink(failures)
    rt = types.SimpleNamespace(name="db.t", blocked_on_sink=None)
    fanout.SinkFanout([sink], retry=retry).each(rt, lambda s: s.write())
    return slept, rt, sink


def test_the_delay_doubles_up_to_the_default_bound(monkeypatch):
    slept, rt, sink = run(monkeypatch, 7)
    assert slept == [1, 2, 4, 8, 16, 30, 30]
    assert sink.calls == 8 and rt.blocked_on_sink is None


def test_retry_max_s_bounds_the_delay(monkeypatch):
    slept, _, _ = run(monkeypatch, 5, fanout.SinkRetry(max_delay_s=4))
    assert slept == [1, 2, 4, 4, 4]


def test_a_bound_under_a_second_bounds_the_first_wait_too(monkeypatch):
    slept, _, _ = run(monkeypatch, 2, fanout.SinkRetry(max_delay_s=0.5))
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


def test_an_outage_longer_than_outage_max_s_stops_with_one_line(monkeypatch):
    with pytest.raises(SinkStop) as stopped:
        run(monkeypatch, 100, fanout.SinkRetry(max_delay_s=4, outage_max_s=10))
    assert str(stopped.value) == (
        "table db.t, sink FlakySink: unreachable for 10s, longer than sink_outage_max_s (10s): connection "
        "refused. Nothing is lost (the batch is not committed): start the merger again once the sink is back"
    )


def test_the_last_wait_ends_at_the_bound(monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(fanout.time, "sleep", slept.append)
    clock = iter([0.0, 1.0, 3.0, 7.0, 9.5, 10.0])
    monkeypatch.setattr(fanout.time, "monotonic", lambda: next(clock))
    rt = types.SimpleNamespace(name="db.t", blocked_on_sink=None)
    with pytest.raises(SinkStop):
        fanout.SinkFanout([FlakySink(100)], retry=fanout.SinkRetry(outage_max_s=10)).each(rt, lambda s: s.write())
    assert slept == [1, 2, 4, 3, 0.5]  # the doubling, cut to what is left of the 10 s from the first failure


def test_a_sink_back_within_the_bound_is_written(monkeypatch):
    slept, rt, sink = run(monkeypatch, 3, fanout.SinkRetry(outage_max_s=10))
    assert slept == [1, 2, 4] and sink.calls == 4 and rt.blocked_on_sink is None


def test_every_outage_gets_the_whole_bound(monkeypatch):
    """The bound counts from the first failure of the write, not from an earlier outage."""
    slept: list[float] = []
    clock = [0.0]
    monkeypatch.setattr(fanout.time, "sleep", lambda s: (slept.append(s), clock.__setitem__(0, clock[0] + s)))
    monkeypatch.setattr(fanout.time, "monotonic", lambda: clock[0])
    rt = types.SimpleNamespace(name="db.t", blocked_on_sink=None)
    fan = fanout.SinkFanout([FlakySink(0)], retry=fanout.SinkRetry(outage_max_s=5))
    for _ in range(3):
        sink = FlakySink(2)  # 1 + 2 s of outage each time: 9 s in all, each under the bound
        fan.sinks = [sink]
        fan.each(rt, lambda s: s.write())
        clock[0] += 100
    assert slept == [1, 2] * 3

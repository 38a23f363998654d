"""The read task's stall rule (merger.kafka.reader.read_ranges) with a scripted consumer
in place of librdkafka's: a broker frozen for longer than readTimeoutMs is waited for, and
the range gets readTimeoutMs again from the moment the broker answers (a 300 s freeze
killed the merger right after the broker came back); a broker that answers but does not
serve the range still fails the task after readTimeoutMs."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException

from merger.kafka.offsets import KafkaRange
from merger.kafka.options import KafkaSourceError, SourceOptions
from merger.kafka.reader import read_ranges


class Msg:
    def __init__(self, offset: int):
        self._offset = offset

    def error(self):
        return None

    def topic(self):
        return "t"

    def partition(self):
        return 0

    def offset(self):
        return self._offset

    def key(self):
        return b"k"

    def value(self):
        return b"v"

    def timestamp(self):
        return (1, 1_700_000_000_000)

    def headers(self):
        return []


class ScriptedConsumer:
    """Delivers nothing while ``frozen()`` or ``serving()`` is false, then the range."""

    def __init__(self, frozen, serving):
        self.frozen, self.serving, self.next = frozen, serving, 0

    def incremental_assign(self, tps):
        pass

    def incremental_unassign(self, tps):
        pass

    def close(self):
        pass

    def position(self, tps):
        return []

    def list_topics(self, timeout):
        if self.frozen():
            time.sleep(min(timeout, 0.05))
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        return object()

    def consume(self, num_messages, timeout):
        if self.frozen() or not self.serving() or self.next >= 3:
            time.sleep(min(timeout, 0.02))
            return []
        self.next += 1
        return [Msg(self.next - 1)]


def opts() -> SourceOptions:
    return SourceOptions.parse(
        {"kafka.bootstrap.servers": "x:9092", "subscribe": "t", "readTimeoutMs": "600", "probeTimeoutMs": "100"}
    )


def read(monkeypatch, consumer) -> int:
    monkeypatch.setattr("confluent_kafka.Consumer", lambda conf: consumer)
    return sum(b.num_rows for b in read_ranges(opts(), [KafkaRange("t", 0, 0, 3)]))


def test_a_freeze_longer_than_the_read_timeout_is_ridden_through(monkeypatch):
    thaw = time.monotonic() + 1.5  # 2.5x readTimeoutMs
    consumer = ScriptedConsumer(frozen=lambda: time.monotonic() < thaw, serving=lambda: time.monotonic() > thaw + 0.3)
    assert read(monkeypatch, consumer) == 3


def test_a_broker_that_answers_but_does_not_serve_the_range_fails_the_task(monkeypatch):
    consumer = ScriptedConsumer(frozen=lambda: False, serving=lambda: False)
    started = time.monotonic()
    with pytest.raises(KafkaSourceError, match="no progress for 1s at offset 0.*readTimeoutMs"):
        read(monkeypatch, consumer)
    assert time.monotonic() - started < 5

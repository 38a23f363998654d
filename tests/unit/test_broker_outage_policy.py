"""The bookkeeping of a broker outage in the merger's Kafka source (merger/kafka/outage.py)
and which confluent-kafka errors count as "unreachable" (merger/kafka/probe.py)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from merger.kafka.options import KafkaSourceError, SourceOptions
from merger.kafka.outage import BrokerOutage
from merger.kafka.probe import unreachable


def test_unbounded_outage_says_how_long_and_recovers():
    o = BrokerOutage(0)
    assert o.recovered(5.0) is None  # no outage, nothing to say
    assert "unreachable for 0s (timed out), attempt 1" in o.failed("timed out", 100.0)
    assert "unreachable for 3600s" in o.failed("timed out", 3700.0)  # no bound: never raises
    assert o.recovered(3710.0) == "Kafka broker reachable again after 3610s (2 failed attempts)"
    assert o.since is None and o.attempts == 0


def test_bounded_outage_stops_with_one_line():
    o = BrokerOutage(60)
    o.failed("timed out", 0.0)
    o.failed("timed out", 59.0)
    with pytest.raises(KafkaSourceError) as exc:
        o.failed("timed out", 61.0)
    text = str(exc.value)
    assert "\n" not in text and "kafka.outage_max_s (60s)" in text and "checkpoint" in text


@pytest.mark.parametrize(
    "code, expected",
    [
        (KafkaError._TIMED_OUT, True),
        (KafkaError._TRANSPORT, True),
        (KafkaError._ALL_BROKERS_DOWN, True),
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, False),
        (KafkaError._SSL, False),
    ],
)
def test_only_no_answer_counts_as_unreachable(code, expected):
    assert unreachable(KafkaException(KafkaError(code))) is expected
    assert unreachable(RuntimeError("x")) is False


def test_outage_bound_option():
    base = {"kafka.bootstrap.servers": "b:1", "subscribe": "t"}
    assert SourceOptions.parse(base).outage_max_s == 0
    assert SourceOptions.parse({**base, "brokerOutageMaxS": "0"}).outage_max_s == 0
    assert SourceOptions.parse({**base, "brokerOutageMaxS": "600"}).outage_max_s == 600


def test_outage_counts_from_the_start_of_the_first_failed_attempt():
    o = BrokerOutage(0)
    assert "unreachable for 15s" in o.failed("timed out", 115.0, started=100.0)
    assert "unreachable for 30s" in o.failed("timed out", 130.0, started=116.0)


def test_request_timeout_reaches_the_merger_source_and_ingest(tmp_path):
    """`kafka.request_timeout_s` bounds the merger's probes (probeTimeoutMs) and ingest's
    producer calls; unset, each keeps its own default (15 s, 30 s)."""
    from cdc.config import IngestConfig, MergerConfig
    from ingest.app import KAFKA_TIMEOUT_S
    from merger.app import source_options

    def merger(**kafka):
        cfg = MergerConfig(topic_prefix="p", state_dir=str(tmp_path), kafka={"bootstrap_servers": "b:1", **kafka})
        return SourceOptions.parse(source_options(cfg))

    assert merger().probe_timeout_s == 15.0
    assert merger(request_timeout_s=6).probe_timeout_s == 6.0
    assert merger(request_timeout_s=0.5).probe_timeout_s == 0.5
    mysql = {"host": "h", "user": "u"}
    assert IngestConfig(topic_prefix="p", server_id=1, mysql=mysql).kafka.request_timeout_s is None
    assert KAFKA_TIMEOUT_S == 30.0
    with pytest.raises(ValueError, match="request_timeout_s"):
        IngestConfig(topic_prefix="p", server_id=1, mysql=mysql, kafka={"request_timeout_s": 0})

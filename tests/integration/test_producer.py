"""ingest's transactional producer against the real broker: a record the broker does not
acknowledge fails the commit (nothing is committed past it), although librdkafka calls
back only on failures (``delivery.report.only.error``)."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from ingest.position import ResumePoint
from ingest.producer import BrokerError, TransactionalProducer

pytestmark = pytest.mark.integration


def _create(bootstrap: str, *topics: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        future.result(timeout=30)


@pytest.mark.timeout(120)
def test_a_record_the_broker_refuses_fails_the_commit(stack, unique_name):
    bootstrap = stack.kafka.bootstrap
    producer = TransactionalProducer({"bootstrap.servers": bootstrap}, f"tx-{unique_name}", timeout_s=20)
    # created after the producer started: it knows nothing of the topic when the record
    # is queued, so the unknown partition is found later, in a delivery report
    topic, offsets = f"{unique_name}.t", f"{unique_name}.offsets"
    _create(bootstrap, topic, offsets)
    producer.send(topic, b"k", b"v", 5)
    with pytest.raises(BrokerError, match="events not acknowledged.*[Uu]nknown partition"):
        producer.commit(offsets, b"source", ResumePoint("0-1-1"))


@pytest.mark.timeout(120)
def test_acknowledged_records_commit(stack, unique_name):
    bootstrap = stack.kafka.bootstrap
    topic, offsets = f"{unique_name}.t", f"{unique_name}.offsets"
    _create(bootstrap, topic, offsets)
    producer = TransactionalProducer({"bootstrap.servers": bootstrap}, f"tx-{unique_name}", timeout_s=20)
    for i in range(100):
        producer.send(topic, str(i).encode(), b"v", 0)
    producer.commit(offsets, b"source", ResumePoint("0-1-1"))
    assert not producer.in_transaction

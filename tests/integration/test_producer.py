"""ingest's transactional producer against the real broker: a record the broker does not
acknowledge fails the commit (nothing is committed past it), although librdkafka calls
back only on failures (``delivery.report.only.error``); a keyed record left to librdkafka's
partitioner lands where Kafka's Java default partitioner puts it."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from cdc.errors import BrokerError
from cdc.wire.partitioner import partition_for
from cdc.wire.resume_point import ResumePoint
from ingest.producer import UNASSIGNED_PARTITION, TransactionalProducer
from tests.kafka_util import read_records

pytestmark = pytest.mark.integration


def _create(bootstrap: str, *topics: str, partitions: int = 1, exist_ok: bool = False) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, partitions, 1) for t in topics]).values():
        try:
            future.result(timeout=30)
        except KafkaException as exc:
            if not (exist_ok and exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS):
                raise


def _topics(bootstrap: str, unique_name: str, partitions: int) -> tuple[str, str]:
    """A table topic of ``partitions`` partitions and an offsets topic (one partition)."""
    topic, offsets = f"{unique_name}.t", f"{unique_name}.offsets"
    _create(bootstrap, topic, partitions=partitions)
    _create(bootstrap, offsets)
    return topic, offsets


@pytest.mark.timeout(120)
def test_a_record_the_broker_refuses_fails_the_commit(stack, unique_name):
    bootstrap = stack.kafka.bootstrap
    producer = TransactionalProducer({"bootstrap.servers": bootstrap}, f"tx-{unique_name}", timeout_s=20)
    topic, offsets = f"{unique_name}.t", f"{unique_name}.offsets"
    _create(bootstrap, offsets)
    # queued before its topic exists, so librdkafka cannot refuse it at once (it does when it
    # has already seen the topic's metadata): the unknown partition is found when the topic
    # appears (the broker may create it on the producer's metadata request, with its default
    # partition count) and reaches the commit as a delivery report. Seen once (session 38):
    # librdkafka knew the topic already and refused the record at once, as loudly
    try:
        producer.send(topic, b"k", b"v", 1000)
    except BrokerError as exc:
        assert "nknown partition" in str(exc), exc
        return
    _create(bootstrap, topic, exist_ok=True)
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


@pytest.mark.timeout(120)
def test_keyed_records_land_on_the_java_partitioners_partition(stack, unique_name):
    bootstrap = stack.kafka.bootstrap
    topic, offsets = _topics(bootstrap, unique_name, partitions=7)
    producer = TransactionalProducer({"bootstrap.servers": bootstrap}, f"tx-{unique_name}", timeout_s=20)
    keys = [f'{{"id":{i}}}'.encode() for i in range(300)] + ['{"k":"é😀"}'.encode(), b"", b"x" * 1000]
    for key in keys:
        producer.send(topic, key, b"v", UNASSIGNED_PARTITION, [("cdc.position", b"binlog.000001:4:0")])
    producer.commit(offsets, b"source", ResumePoint("0-1-1"))
    records, _ = read_records(bootstrap, [topic], dedup=False)
    assert sorted(r.key for r in records) == sorted(keys)
    # partition_for: murmur2 checked against the values of Kafka's own Utils test
    assert {r.key: r.partition for r in records} == {k: partition_for(k, 7) for k in keys}
    assert len({r.partition for r in records}) == 7


@pytest.mark.timeout(120)
def test_send_all_waits_when_the_queue_is_full(stack, unique_name):
    bootstrap = stack.kafka.bootstrap
    topic, offsets = _topics(bootstrap, unique_name, partitions=3)
    # a queue of 7 records: send_all meets BufferError many times and must send every record once
    producer = TransactionalProducer(
        {"bootstrap.servers": bootstrap, "queue.buffering.max.messages": 7, "linger.ms": 0},
        f"tx-{unique_name}",
        timeout_s=20,
    )
    held = [
        (topic, str(i).encode(), str(i).encode(), i % 3, [("cdc.position", f"f.000001:4:{i}".encode())])
        for i in range(200)
    ]
    producer.send_all(held)
    producer.commit(offsets, b"source", ResumePoint("0-1-1"))
    records, _ = read_records(bootstrap, [topic], dedup=False)
    assert sorted(int(r.value) for r in records) == list(range(200))


def test_topics_are_created_and_described_one_at_a_time_without_listing_every_topic(stack, unique_name):
    """Issue 23: ingest met each new table's topic with two listings of every topic on the
    broker (half its time with 200 new tables). A new topic is created with the count
    asked for, an existing one keeps its own, and neither needs the listing."""
    from ingest.producer import Topics

    bootstrap = stack.kafka.bootstrap
    existing = f"{unique_name}.db.old"
    _create(bootstrap, existing, partitions=2)
    topics = Topics({"bootstrap.servers": bootstrap})

    def no_listing(*args, **kwargs):
        raise AssertionError("every topic was listed")

    topics._admin.list_topics = no_listing
    assert topics.partitions(existing, create_with=3) == 2
    new = f"{unique_name}.db.new"
    assert topics.partitions(new, create_with=3) == 3
    assert topics.partitions(new, create_with=5) == 3  # remembered
    # the merger asks the same way (cdc.kafka_topics): a topic not created yet stays so
    from cdc.kafka_topics import partition_count

    admin = AdminClient({"bootstrap.servers": bootstrap})
    missing = f"{unique_name}.db.later"
    assert partition_count(admin, missing, 10) is None
    assert partition_count(admin, new, 10) == 3
    listed = admin.list_topics(timeout=10).topics
    assert len(listed[new].partitions) == 3 and len(listed[existing].partitions) == 2
    assert missing not in listed


@pytest.mark.timeout(120)
def test_the_topics_of_a_group_of_watermarks_are_made_sure_of_at_once(stack, unique_name):
    """Issue 23: ingest meets the topics of 16 tables in one group of watermark markers;
    it describes them in one request, creates the missing ones in one, and waits once.
    Existing topics keep their own partition counts."""
    from ingest.producer import Topics

    bootstrap = stack.kafka.bootstrap
    existing = [f"{unique_name}.db.old{i}" for i in range(3)]
    _create(bootstrap, *existing, partitions=2)
    topics = Topics({"bootstrap.servers": bootstrap})
    new = [f"{unique_name}.db.t{i}" for i in range(16)]
    calls = []
    create = topics._admin.create_topics

    def counted(new_topics, **kwargs):
        calls.append(sorted(t.topic for t in new_topics))
        return create(new_topics, **kwargs)

    topics._admin.create_topics = counted
    topics.prepare({**{t: 3 for t in existing}, **{t: 3 for t in new}})
    assert calls == [sorted(new)]
    topics._admin.create_topics = None  # everything is known now: no broker call needed
    assert [topics.partitions(t, create_with=5) for t in existing] == [2, 2, 2]
    assert {topics.partitions(t, create_with=5) for t in new} == {3}
    listed = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    assert all(len(listed[t].partitions) == 3 for t in new)


@pytest.mark.timeout(120)
def test_each_position_record_names_the_topics_its_transaction_wrote(stack, unique_name):
    """What the merger's end check follows (cdc.wire.moved_topics), read back as a consumer
    sees it: the topics of each transaction, the one before not carried over."""
    import json

    bootstrap = stack.kafka.bootstrap
    a, b, offsets = f"{unique_name}.db.a", f"{unique_name}.db.b", f"{unique_name}.offsets"
    _create(bootstrap, a, b, offsets)
    producer = TransactionalProducer({"bootstrap.servers": bootstrap}, f"tx-{unique_name}", timeout_s=20)
    producer.send(a, b"1", b"v", 0)
    producer.send_all([(b, b"2", b"v", 0, None), (a, b"3", b"v", 0, None)])
    producer.commit(offsets, b"source", ResumePoint("0-1-1"))
    producer.send_all([(b, b"4", b"v", 0, None)])
    producer.commit(offsets, b"source", ResumePoint("0-1-2"))
    producer.commit(offsets, b"source", ResumePoint("0-1-3"))  # a position alone
    got, _ = read_records(bootstrap, [offsets], idle_s=1.0, timeout_s=60, dedup=False)
    records = [json.loads(r.value) for r in sorted(got, key=lambda r: r.offset)]
    assert [(r["gtid_state"], r["topics"]) for r in records] == [
        ("0-1-1", sorted([a, b])),
        ("0-1-2", [b]),
        ("0-1-3", []),
    ]

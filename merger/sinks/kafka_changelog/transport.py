"""The changelog sink's Kafka clients: topics (found or created), the transactional
producer and its transactions (changes, then the control records), and reading a topic
back (committed records only)."""

from __future__ import annotations

import time
from typing import Any, Callable

from merger.sinks.base import SinkError, SinkUnavailable
from merger.sinks.kafka_changelog.state import TableState, control_key

try:
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
except ImportError as _exc:  # pragma: no cover
    raise ImportError("the Kafka changelog sink needs confluent-kafka") from _exc


def err_text(exc: BaseException) -> str:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0].str()
    return str(exc)


class Transport:
    """One sink's Kafka clients; ``prefix`` names the consumer group that reads topics back."""

    def __init__(self, client: dict, prefix: str, control_topic: str, transactional_id: str, timeout_s: float):
        self.client = client
        self.prefix = prefix
        self.control_topic = control_topic
        self.transactional_id = transactional_id
        self.timeout = timeout_s
        self._admin: AdminClient | None = None
        self._producer: Producer | None = None
        self._errors: list[str] = []

    def admin_client(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient(dict(self.client))
            try:
                self._admin.list_topics(timeout=min(self.timeout, 10))
            except KafkaException as exc:
                self._admin = None
                raise SinkUnavailable(
                    f"Kafka broker {self.client.get('bootstrap.servers')} is unreachable: {err_text(exc)}"
                ) from None
        return self._admin

    def topic_partitions(self, topic: str, create: int, compact: bool) -> int:
        admin = self.admin_client()
        try:
            # never ask the broker about one topic by name: that auto-creates it (Tansu; Kafka
            # with auto.create.topics.enable) with the broker's default partition count
            meta = admin.list_topics(timeout=self.timeout).topics.get(topic)
            if meta is None or meta.error is not None or not meta.partitions:
                config = {"cleanup.policy": "compact"} if compact else {}
                fut = admin.create_topics(
                    [NewTopic(topic, num_partitions=create, replication_factor=1, config=config)],
                    operation_timeout=self.timeout,
                )
                try:
                    fut[topic].result(self.timeout)
                except KafkaException as exc:
                    if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                        raise
                deadline = time.monotonic() + self.timeout
                while True:
                    meta = admin.list_topics(timeout=self.timeout).topics.get(topic)
                    if meta is not None and meta.error is None and meta.partitions:
                        break
                    if time.monotonic() > deadline:
                        raise SinkUnavailable(f"topic {topic} did not appear after creation")
                    time.sleep(0.1)
            return len(meta.partitions)
        except KafkaException as exc:
            raise SinkUnavailable(f"Kafka: cannot use topic {topic}: {err_text(exc)}") from None

    def producer(self) -> Producer:
        if self._producer is None:
            conf = dict(self.client)
            conf.update(
                {
                    "transactional.id": self.transactional_id,
                    "enable.idempotence": True,
                    "linger.ms": 5,
                    "batch.num.messages": 10000,
                    "queue.buffering.max.messages": 1000000,
                    "queue.buffering.max.kbytes": 1048576,
                    "transaction.timeout.ms": 120000,
                }
            )
            p = Producer(conf)
            try:
                p.init_transactions(self.timeout)  # fences an earlier instance with the same id
            except KafkaException as exc:
                raise SinkUnavailable(f"Kafka: cannot initialise transactions: {err_text(exc)}") from None
            self._producer = p
        return self._producer

    def _on_delivery(self, err, _msg) -> None:
        if err is not None:
            self._errors.append(err.str())

    def read_topic(self, topic: str, handle: Callable[[Any], None], quiet_s: float = 0.5) -> None:
        """Every committed record of ``topic`` in partition order. The end is where every
        partition reached its high watermark and nothing more arrived for ``quiet_s`` (the
        local broker may under-report the high watermark)."""
        conf = dict(self.client)
        conf.update(
            {
                "group.id": f"cdc-changelog-reader-{self.prefix}",
                "enable.auto.commit": False,
                "allow.auto.create.topics": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": False,
            }
        )
        consumer = Consumer(conf)
        try:
            meta = consumer.list_topics(timeout=self.timeout).topics.get(topic)
            if meta is None or meta.error is not None or not meta.partitions:
                return
            ends = {}
            for p in meta.partitions:
                lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=self.timeout)
                if hi > lo:
                    ends[p] = hi
            if not ends:
                return
            consumer.assign([TopicPartition(topic, p, 0) for p in ends])
            quiet = None
            deadline = time.monotonic() + max(self.timeout, 60)
            while True:
                msgs = consumer.consume(10000, 0.2)
                if not msgs:
                    positions = consumer.position([TopicPartition(topic, p) for p in ends])
                    if all(tp.offset >= ends[tp.partition] for tp in positions):
                        quiet = quiet or time.monotonic()
                        if time.monotonic() - quiet >= quiet_s:
                            return
                    if time.monotonic() > deadline:
                        raise SinkUnavailable(f"Kafka: reading {topic} timed out")
                    continue
                quiet = None
                for msg in msgs:
                    if msg.error():
                        if msg.error().code() == KafkaError._PARTITION_EOF:
                            continue
                        raise SinkUnavailable(f"Kafka: cannot read {topic}: {msg.error().str()}")
                    handle(msg)
        except KafkaException as exc:
            raise SinkUnavailable(f"Kafka: cannot read {topic}: {err_text(exc)}") from None
        finally:
            consumer.close()

    def transaction(self, produce: Callable[[Producer], None], states: list[TableState]) -> None:
        """Run produce() and the control records of ``states`` in one Kafka transaction."""
        p = self.producer()
        self._errors = []
        try:
            p.begin_transaction()
            produce(p)
            remaining = p.flush(self.timeout)
            if remaining or self._errors:
                raise SinkUnavailable(f"Kafka: changes not acknowledged: {self._errors[:1] or remaining}")
            for st in states:
                self.send(p, self.control_topic, control_key(st.table), st.control_value(), 0)
            p.commit_transaction(self.timeout)
            if self._errors:
                raise SinkUnavailable(f"Kafka: control record not acknowledged: {self._errors[0]}")
        except (KafkaException, SinkError) as exc:
            fatal = isinstance(exc, KafkaException) and exc.args and exc.args[0].fatal()
            try:
                if not fatal:
                    p.abort_transaction(self.timeout)
            except KafkaException:
                fatal = True
            if fatal:
                self._producer = None  # a fenced or broken producer is not reusable
            if isinstance(exc, SinkError):
                raise
            if fatal:
                raise SinkError(
                    f"Kafka transactional producer failed (fenced by another instance "
                    f"with transactional.id {self.transactional_id!r}?): {err_text(exc)}"
                ) from None
            raise SinkUnavailable(f"Kafka transaction failed: {err_text(exc)}") from None

    def send(
        self,
        p: Producer,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int,
        headers: list | None = None,
    ) -> None:
        while True:
            try:
                p.produce(
                    topic, value=value, key=key, partition=partition, headers=headers, on_delivery=self._on_delivery
                )
                return
            except BufferError:
                p.poll(0.05)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(5)
            self._producer = None

"""Kafka adapter of ingest: topics, a transactional producer, and the offsets topic.

Every Kafka transaction holds a run of change events followed by ingest's position
(``ResumePoint``) on ``<prefix>.offsets``. The position is produced only after every
event before it was acknowledged (``flush``), so no broker can ever show a position
ahead of the events it covers, even one that shows records of aborted transactions.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Iterable

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from cdc.errors import BrokerError, CdcError
from cdc.kafka_topics import partition_count, partition_counts
from cdc.offsets_topic import kafka_error_text
from cdc.wire.moved_topics import with_topics
from cdc.wire.resume_point import PositionVector, ResumePoint

log = logging.getLogger(__name__)


class ProducerFenced(CdcError, RuntimeError):
    """A newer producer with the same transactional.id took over: this one must stop, never
    start again (a new producer would fence the newer one back, and so on forever)."""


# another producer initialised our transactional.id (KIP-588: PRODUCER_FENCED is only that;
# INVALID_PRODUCER_EPOCH may also be a transaction timed out, which a new producer recovers)
FENCED_CODES = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED})


def _fenced(exc: KafkaException) -> bool:
    return bool(exc.args) and isinstance(exc.args[0], KafkaError) and exc.args[0].code() in FENCED_CODES


DEFAULT_MAX_MESSAGE_BYTES = 100 * 1024 * 1024  # when neither the config nor the broker says
UNASSIGNED_PARTITION = -1  # send(): librdkafka places the record by its key (murmur2, Kafka's default)


class RecordTooLarge(CdcError, RuntimeError):
    """A record larger than the producer or the broker accepts: retrying cannot help."""

    def __init__(self, topic: str, key: bytes | None, size: int, limit: int, position: bytes | None, by_broker: bool):
        self.topic, self.key, self.size, self.limit, self.position = topic, key, size, limit, position
        self.by_broker = by_broker
        super().__init__(
            f"record of {size:,} bytes for {topic} refused by the "
            f"{'broker' if by_broker else 'producer'} (limit {limit:,})"
        )


def _size(key: bytes | None, value: bytes | None, headers) -> int:
    return len(key or b"") + len(value or b"") + sum(len(k) + len(v or b"") for k, v in headers or ())


class Topics:
    """Creates topics on first use and remembers their partition counts."""

    def __init__(self, client_config: dict, timeout_s: float = 15.0):
        self._admin = AdminClient(client_config)
        self._partitions: dict[str, int] = {}
        self._timeout = timeout_s

    def broker_max_message_bytes(self) -> int | None:
        """The broker's ``message.max.bytes``, if it answers DescribeConfigs (Apache Kafka
        does; the local Tansu broker does not, and accepts records of any size)."""
        from confluent_kafka.admin import ConfigResource, ResourceType

        try:
            brokers = self._admin.list_topics(timeout=self._timeout).brokers
            if not brokers:
                return None
            resource = ConfigResource(ResourceType.BROKER, str(min(brokers)))
            configs = self._admin.describe_configs([resource])[resource].result(self._timeout)
            entry = configs.get("message.max.bytes")
            return int(entry.value) if entry is not None and entry.value else None
        except Exception:  # not supported or not allowed: the caller falls back
            return None

    def check_reachable(self) -> None:
        try:
            self._admin.list_topics(timeout=self._timeout)
        except KafkaException as exc:
            raise BrokerError(f"Kafka broker unreachable: {kafka_error_text(exc)}") from None

    def partitions(self, topic: str, create_with: int, compact: bool = False) -> int:
        known = self._partitions.get(topic)
        if known:
            return known
        count = self._described(topic)
        if count is None:
            config = {"cleanup.policy": "compact"} if compact else {}
            futures = self._admin.create_topics(
                [NewTopic(topic, num_partitions=create_with, replication_factor=1, config=config)],
                operation_timeout=self._timeout,
            )
            try:
                futures[topic].result(self._timeout)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise BrokerError(f"cannot create topic {topic}: {kafka_error_text(exc)}") from None
            deadline = time.monotonic() + self._timeout
            while True:
                count = self._described(topic)
                if count:
                    break
                if time.monotonic() > deadline:
                    raise BrokerError(f"topic {topic} did not appear after creation")
                time.sleep(0.1)
        self._partitions[topic] = count
        return count

    def prepare(self, wanted: dict[str, int]) -> None:
        """Make sure the topics (name -> partitions to create it with) exist, in one
        DescribeTopics, one CreateTopics and one wait for all of them: the first snapshot of
        hundreds of tables meets their topics 16 at a time (a group of watermark markers),
        and one topic after the other cost ingest ~0.14 s a table (issue 23)."""
        unknown = [t for t in wanted if t not in self._partitions]
        if len(unknown) < 2:
            return  # partitions() does it
        counts = partition_counts(self._admin, unknown, self._timeout)
        self._partitions.update({t: n for t, n in counts.items() if n})
        missing = sorted(t for t in unknown if not counts.get(t))
        if not missing:
            return
        futures = self._admin.create_topics(
            [NewTopic(t, num_partitions=wanted[t], replication_factor=1) for t in missing],
            operation_timeout=self._timeout,
        )
        for topic, fut in futures.items():
            try:
                fut.result(self._timeout)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise BrokerError(f"cannot create topic {topic}: {kafka_error_text(exc)}") from None
        deadline = time.monotonic() + self._timeout
        while missing:
            counts = partition_counts(self._admin, missing, self._timeout)
            self._partitions.update({t: n for t, n in counts.items() if n})
            missing = [t for t in missing if not counts.get(t)]
            if missing and time.monotonic() > deadline:
                raise BrokerError(f"topic {missing[0]} did not appear after creation")
            if missing:
                time.sleep(0.1)

    def _described(self, topic: str) -> int | None:
        return partition_count(self._admin, topic, self._timeout)


def broker_call(method):
    """A producer call fails with this module's errors only. Once fenced, confluent-kafka
    may fail a call in other ways (a ``SystemError`` out of a callback that met librdkafka's
    fatal error): that is the fencing if librdkafka named one, else a broker error."""

    @functools.wraps(method)
    def call(self: "TransactionalProducer", *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except (BrokerError, ProducerFenced, RecordTooLarge, CdcError):
            raise
        except Exception as exc:  # noqa: BLE001 - mapped, with its text
            if self._fenced is None and isinstance(exc, KafkaException):
                self._fenced_by(exc)
            if self._fenced is not None:
                raise ProducerFenced(self._fenced) from None
            raise BrokerError(f"the producer failed: {type(exc).__name__}: {exc}") from None

    return call


class TransactionalProducer:
    def __init__(
        self,
        client_config: dict,
        transactional_id: str,
        timeout_s: float = 30.0,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ):
        conf = dict(client_config)
        self.max_message_bytes = max_message_bytes
        conf.update(
            {
                # librdkafka's own default (1 MB) would refuse large rows the broker accepts
                "message.max.bytes": max_message_bytes,
                "transactional.id": transactional_id,
                "enable.idempotence": True,
                # nothing is visible before the commit, which sends at once (flush): waiting
                # longer fills fewer, larger produce requests. At 1,000 changes/s the local
                # broker spent 19% of a core at 5 ms, 4% at 50 ms, 2% at 200 ms
                "linger.ms": conf.get("linger.ms", 100),
                # a backlog fills 1,000 records in ~25 ms: sent then, while the next ones are
                # encoded, not all at the commit's flush (10,000: one-row backlog 36.8k ->
                # 38k events/s); a batch at 1,000 changes/s is still sent by linger.ms
                "batch.num.messages": conf.get("batch.num.messages", 1000),
                "queue.buffering.max.messages": conf.get("queue.buffering.max.messages", 500000),
                "queue.buffering.max.kbytes": 1048576,
                "compression.type": conf.get("compression.type", "none"),
                "transaction.timeout.ms": 60000,
                # a record sent to UNASSIGNED_PARTITION is placed by librdkafka (in C) with
                # Kafka's Java default partitioner for keyed records (murmur2, as
                # cdc/wire/partitioner.py): the same partition as Debezium's and partition_for's
                "partitioner": "murmur2_random",
                # a Python callback per record cost ~1 us each; only failures need one
                "delivery.report.only.error": True,
                "on_delivery": self._on_delivery,
                "error_cb": self._on_error,
            }
        )
        self._timeout = timeout_s
        self._producer = Producer(conf)
        self._open = False
        self._errors: list[str] = []
        self._too_large: RecordTooLarge | None = None
        self._fenced: str | None = None
        self._topics: set[str] = set()  # written in the open transaction (cdc.wire.moved_topics)
        try:
            # fences any earlier instance with the same transactional.id
            self._producer.init_transactions(timeout_s)
        except KafkaException as exc:
            raise BrokerError(f"cannot initialise Kafka transactions: {kafka_error_text(exc)}") from None

    def _on_error(self, err) -> None:
        if err.code() in FENCED_CODES:
            self._fenced = err.str()

    def _fenced_by(self, exc: KafkaException) -> str | None:
        """Why ``exc`` means a newer producer took over, or None."""
        err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        if err is not None and err.code() in FENCED_CODES:
            self._fenced = err.str()
        elif err is not None and (err.fatal() or err.code() == KafkaError._FATAL) and not self._fenced:
            # librdkafka names a fatal error once, to the error callback; later calls say _FATAL
            try:
                self._producer.poll(0)
            except KafkaException as named:
                if _fenced(named):
                    self._fenced = kafka_error_text(named)
        return self._fenced

    def _on_delivery(self, err, msg) -> None:
        if err is None:
            return
        if err.code() in FENCED_CODES:
            self._fenced = err.str()
        if err.code() == KafkaError.MSG_SIZE_TOO_LARGE and self._too_large is None:
            headers = dict(msg.headers() or [])
            self._too_large = RecordTooLarge(
                msg.topic(),
                msg.key(),
                _size(msg.key(), msg.value(), msg.headers()),
                self.max_message_bytes,
                headers.get("cdc.position"),
                True,
            )
        self._errors.append(err.str())

    @broker_call
    def begin(self) -> None:
        if not self._open:
            try:
                self._producer.begin_transaction()
            except KafkaException as exc:
                if self._fenced_by(exc):
                    raise ProducerFenced(self._fenced) from None
                raise BrokerError(f"cannot begin a Kafka transaction: {kafka_error_text(exc)}") from None
            self._open = True

    @property
    def fenced(self) -> bool:
        """A newer producer with our transactional.id took over (its start aborted our transaction)."""
        return self._fenced is not None

    @property
    def in_transaction(self) -> bool:
        return self._open

    @broker_call
    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        if not self._open:
            self.begin()
        self._topics.add(topic)
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, partition=partition, headers=headers)
                return
            except BufferError:
                self._producer.poll(0.05)
            except KafkaException as exc:  # e.g. the transaction failed: retried with a new producer
                if self._fenced_by(exc):
                    raise ProducerFenced(self._fenced) from None
                if (
                    exc.args
                    and isinstance(exc.args[0], KafkaError)
                    and exc.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
                ):
                    raise RecordTooLarge(
                        topic,
                        key,
                        _size(key, value, headers),
                        self.max_message_bytes,
                        dict(headers or []).get("cdc.position"),
                        False,
                    ) from None
                raise BrokerError(f"cannot produce: {kafka_error_text(exc)}") from None

    @broker_call
    def send_all(self, records: list[tuple]) -> None:
        """``send(*args)`` for each of ``records``, with one Python call per record fewer."""
        if not self._open:
            self.begin()
        produce = self._producer.produce
        topics = self._topics
        for i, (topic, key, value, partition, headers) in enumerate(records):
            topics.add(topic)
            try:
                produce(topic, value, key, partition, headers=headers)
            except (BufferError, KafkaException) as exc:  # queue full, or an error: send() handles it
                # librdkafka names a fencing once (_FENCED), then says only _FATAL
                if isinstance(exc, KafkaException) and self._fenced_by(exc):
                    raise ProducerFenced(self._fenced) from None
                self.send(topic, key, value, partition, headers)
                for rest in records[i + 1 :]:
                    self.send(*rest)
                return

    def commit(self, offsets_topic: str, source_key: bytes, point: ResumePoint | PositionVector) -> None:
        """Flush the events, then write the position and commit all of it at once. The
        position record names the topics the transaction wrote (cdc.wire.moved_topics)."""
        self.commit_with(offsets_topic, source_key, with_topics(point.to_json(), self._topics))

    @broker_call
    def commit_with(self, topic: str, key: bytes, value: bytes) -> None:
        """Flush the events, then write ``value`` (partition 0) and commit all of it at once."""
        self.begin()  # a position alone (no events since the last commit) is a transaction too
        remaining = self._producer.flush(self._timeout)
        if self._fenced:
            raise ProducerFenced(self._fenced)
        if self._too_large is not None:
            raise self._too_large
        if remaining or self._errors:
            raise BrokerError(f"events not acknowledged: {self._errors[:1] or remaining}")
        try:
            self._producer.produce(topic, value=value, key=key, partition=0)
            self._producer.commit_transaction(self._timeout)
        except KafkaException as exc:
            if self._fenced_by(exc):
                raise ProducerFenced(self._fenced) from None
            raise BrokerError(f"cannot commit the Kafka transaction: {kafka_error_text(exc)}") from None
        if self._errors:
            raise BrokerError(f"position not acknowledged: {self._errors[0]}")
        self._open = False
        self._topics = set()

    def abort(self) -> None:
        if self._open:
            try:
                # deliver what is in flight first, then abort it: an abort purges undelivered
                # events, which leaves the idempotent producer with a gap in its sequence
                # numbers that fails the next transaction (OUT_OF_ORDER_SEQUENCE_NUMBER)
                self._producer.flush(self._timeout)
                self._producer.abort_transaction(self._timeout)
            except KafkaException:
                pass
            self._errors.clear()  # reports of the aborted events do not count any more
            self._too_large = None
            self._open = False
            self._topics = set()

    def poll(self) -> None:
        self._producer.poll(0)

    def discard(self) -> None:
        """Thrown away after a broker error, without an abort: the next producer of this
        transactional.id aborts the open transaction when it starts (Kafka's fencing; the
        local broker does that too). An abort after a timed-out request needs an epoch bump,
        which the local broker refuses ("Unknown broker error"): librdkafka retried it every
        0.5 s in the background, in close() for ever, and racing the next producer if the old
        one was merely left to the garbage collector (seen after a 60 s freeze)."""
        try:
            self._producer.purge(blocking=False)
        except Exception as exc:  # noqa: BLE001 - it is being thrown away
            log.debug("purging a failed producer: %s", exc)
        # the last reference: librdkafka's handle is destroyed now, not at some later collection
        self._producer = None
        self._open = False


def _until_quiet(consumer, topic: str, timeout_s: float):
    """The records of the assigned partition until nothing new came for 0.6 s (the local
    broker may under-report a partition's end, so EOF alone is not trusted)."""
    deadline = time.monotonic() + timeout_s
    quiet_since = None
    while time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None or (msg.error() and msg.error().code() == KafkaError._PARTITION_EOF):
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since > 0.6:
                return
            continue
        quiet_since = None
        if msg.error():
            raise BrokerError(f"cannot read {topic}: {msg.error().str()}")
        yield msg


def read_all_values(client_config: dict, topic: str, timeout_s: float = 60.0) -> Iterable[dict]:
    """Every JSON value of a single-partition topic, in order (payload unwrapped)."""
    import json

    from confluent_kafka import Consumer

    conf = dict(client_config)
    conf.update(
        {
            "group.id": "cdc-ingest-history-reader",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    consumer = Consumer(conf)
    try:
        try:
            lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        except KafkaException:
            return
        if hi <= lo:
            return
        consumer.assign([TopicPartition(topic, 0, lo)])
        for msg in _until_quiet(consumer, topic, timeout_s):
            if not msg.value():
                continue
            value = json.loads(msg.value())
            if isinstance(value, dict) and "payload" in value and "schema" in value:
                value = value["payload"]
            yield value
    finally:
        consumer.close()

"""Ingest's offsets topic read back: its last committed position and lease.

``<prefix>.offsets`` holds, per source, the position record ingest commits with each Kafka
transaction (``cdc.wire.resume_point``) and the lease of the instance that writes. Ingest reads
it to resume and to take over; the merger reads it to know how far ingest has committed
(positional snapshot windows, merger.snapshot.positions).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from cdc.errors import BrokerError, CdcError
from cdc.wire.resume_point import PositionVector, ResumePoint, position_record


def source_key(prefix: str, shard: str | None = None) -> bytes:
    """The key of a source's position records: the one-server source's or a sharded source's
    (one process, every shard), or that of one shard followed by a process of its own."""
    source = {"server": prefix} if shard is None else {"server": prefix, "shard": shard}
    return json.dumps(source, separators=(",", ":")).encode()


def kafka_error_text(exc: BaseException) -> str:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0].str()
    return str(exc)


class OffsetsBlocked(CdcError, RuntimeError):
    """A transaction stays open on the offsets partition: the committed positions behind it
    cannot be read (read_committed stops at it; the local broker hides them all)."""

    def __init__(self, topic: str, waited_s: float):
        self.topic, self.waited_s = topic, waited_s
        super().__init__(f"a transaction stayed open on {topic} for {waited_s:.0f}s")


@dataclass(frozen=True)
class OffsetsRead:
    """What the offsets topic holds for one source: its last committed position (None if
    none was ever committed) and the last instance lease (raw JSON, None if none)."""

    point: ResumePoint | PositionVector | None
    lease: bytes | None = None


def read_offsets(
    client_config: dict,
    topic: str,
    source_key: bytes,
    lease_key: bytes | None = None,
    timeout_s: float = 10.0,
    wait_s: float = 5.0,
    tail: int = 500,
    missing_ok: bool = True,
) -> OffsetsRead:
    """The offsets topic read up to its end, read_committed.

    Records there but a transaction open on the partition (its stable end below its end)
    is waited for up to ``wait_s``, then ``OffsetsBlocked``: the positions behind it are
    not readable, and "nothing readable" must never read as "nothing committed". A read
    that does not reach the end is a ``BrokerError``, never an empty answer."""
    from confluent_kafka import Consumer

    conf = dict(client_config)
    conf.update(
        {
            "group.id": "cdc-ingest-offsets-reader",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    consumer = Consumer(conf)
    probe = Consumer(dict(conf, **{"isolation.level": "read_uncommitted"}))
    tp = TopicPartition(topic, 0)
    started = time.monotonic()
    try:
        while True:
            # the end whatever is committed, and the end of what is committed (Kafka's last
            # stable offset; the local broker says 0 while a transaction is open)
            lo, hi = probe.get_watermark_offsets(tp, timeout=timeout_s, cached=False)
            if hi <= lo:
                return OffsetsRead(None)
            stable = consumer.get_watermark_offsets(tp, timeout=timeout_s, cached=False)[1]
            if stable >= hi:
                found = _read_committed(consumer, topic, max(lo, hi - tail), hi, source_key, lease_key, timeout_s)
                if found is not None and found.point is None and hi - tail > lo:
                    found = _read_committed(consumer, topic, lo, hi, source_key, lease_key, timeout_s)
                if found is not None:
                    return found
                # a transaction opened since: its records stopped the read before the end
            waited = time.monotonic() - started
            if waited >= wait_s:
                if stable >= hi:
                    raise BrokerError(f"cannot read {topic} to its end (offset {hi}) within {timeout_s:.0f}s")
                raise OffsetsBlocked(topic, waited)
            time.sleep(0.5)
    except KafkaException as exc:
        text = kafka_error_text(exc).upper()
        if missing_ok and ("UNKNOWN_TOPIC" in text or "UNKNOWN PARTITION" in text):
            return OffsetsRead(None)
        raise BrokerError(f"cannot read {topic}: {kafka_error_text(exc)}") from None
    finally:
        consumer.close()
        probe.close()


def _read_committed(
    consumer, topic: str, start: int, end: int, source_key: bytes, lease_key: bytes | None, timeout_s: float
) -> OffsetsRead | None:
    """The last position and lease in offsets ``start`` to ``end``, or None if the read did
    not get there within ``timeout_s`` (a transaction open: read_committed stops at it)."""
    consumer.assign([TopicPartition(topic, 0, start)])
    point = lease = None
    position = start
    deadline = time.monotonic() + timeout_s
    try:
        # the local broker may report an end below its last batch's records: position passes it
        while position < end:
            if time.monotonic() > deadline:
                return None
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    raise BrokerError(f"cannot read {topic}: {msg.error().str()}")
                position = max(position, msg.offset())
                continue
            position = msg.offset() + 1
            if msg.key() == source_key and msg.value():
                point = msg.value()
            elif lease_key is not None and msg.key() == lease_key and msg.value():
                lease = msg.value()
    finally:
        consumer.unassign()
    return OffsetsRead(position_record(point) if point else None, lease)

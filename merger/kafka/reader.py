"""The executor side of the ``cdc_kafka`` source: one Spark task reads its offset ranges
with one consumer (``assign()`` with explicit offsets, never a group, never a commit) and
yields pyarrow RecordBatches of the output schema.

A range ``[start, end)`` is done when offset ``end-1`` was delivered or the consumer
position reached ``end``: offsets taken by transaction commit/abort markers are never
delivered, so the reader never waits for an offset; every wait has a timeout."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from cdc.wire.headers import header_map
from merger.kafka.limits import TP
from merger.kafka.offsets import KafkaRange, range_size
from merger.kafka.options import KafkaSourceError, SourceOptions
from merger.kafka.outage import BrokerOutage
from merger.kafka.probe import unreachable

log = logging.getLogger(__name__)

# the columns of Spark's own Kafka source with includeHeaders=true
HEADER_TYPE = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
        StructField("headers", ArrayType(HEADER_TYPE)),
    ]
)


class ReadCancelled(KafkaSourceError):
    """A read given up because its reader stops (never a failure to report)."""


def fetch_max_bytes(ranges: Sequence[KafkaRange]) -> int:
    """A task's fetch size: about 1 KB per offset it reads, between 1 MB and librdkafka's
    50 MB default. The local broker answers every fetch with up to fetch.max.bytes (it
    ignores max.partition.fetch.bytes): 5 MB for a range of 400 records took it 60 ms,
    1 MB 35 ms. A record larger than this is still delivered (KIP-74)."""
    offsets = sum(range_size(r) for r in ranges)
    return max(1 << 20, min(50 << 20, offsets * 1024))


def read_ranges(
    opts: SourceOptions,
    ranges: Sequence[KafkaRange],
    schema: StructType = SCHEMA,
    cancelled: Callable[[], bool] | None = None,
    convert: Callable[[Sequence[Any]], Any] | None = None,
) -> Iterator[Any]:
    """Yield pyarrow RecordBatches with the records of ranges ``[r.start, r.end)`` (at most
    one per topic partition), all assigned to one consumer (or what ``convert`` makes of
    each run of confluent_kafka Messages: the driver's read takes them as rows). A range is done when offset
    ``end-1`` was delivered or the consumer position reached ``end`` (transaction markers
    occupy offsets that are never delivered); it is then unassigned. Fails after
    ``read_timeout_s`` without progress on any unfinished range. ``cancelled``: asked on
    every poll (a read in the driver, which no job cancellation reaches); true raises
    :class:`ReadCancelled`."""
    from confluent_kafka import Consumer
    from pyspark.sql.pandas.types import to_arrow_schema

    ranges = [r for r in ranges if not (r.start >= 0 and r.start >= r.end)]
    if not ranges:
        return
    if convert is None:
        arrow_schema = to_arrow_schema(schema, timezone="UTC")

        def convert(messages: Sequence[Any]) -> Any:
            return messages_to_batch(messages, arrow_schema)

    kept: list[Any] = []  # confluent_kafka Messages of the current Arrow batch
    consumer = Consumer(opts.consumer_conf(**{"fetch.max.bytes": fetch_max_bytes(ranges)}))
    try:
        reads = _RangeReads(consumer, opts, ranges)
        if not reads.unfinished:
            return
        last_progress = next_check = time.monotonic()
        outage = BrokerOutage(opts.outage_max_s, what="the read task waits for it")
        batch_size = opts.arrow_batch_size
        while reads.unfinished:
            if cancelled is not None and cancelled():
                raise ReadCancelled("the Kafka read was cancelled: the merger stops")
            # drain what is queued without waiting; block briefly only on an empty queue
            # (consume() waits for num_messages or the timeout, whichever comes first)
            msgs = consumer.consume(num_messages=batch_size, timeout=0)
            if not msgs:
                msgs = consumer.consume(num_messages=1, timeout=0.2)
            moved = reads.take(msgs, kept.append)
            if reads.unfinished:
                moved = reads.follow_positions() or moved
            if len(kept) >= batch_size or (not reads.unfinished and kept):
                yield convert(kept)
                kept.clear()
            now = time.monotonic()
            if moved:
                last_progress = next_check = now
                back = outage.recovered(now)
                if back:
                    log.warning(back)
            elif reads.unfinished and now - next_check > min(opts.probe_timeout_s, opts.read_timeout_s):
                # stalled: a broker that does not answer at all is waited for (kafka.outage_max_s),
                # with a line per check; one that answers but does not serve the range fails the task
                next_check = now
                if _broker_away(consumer, opts, outage, last_progress):
                    continue
                back = outage.recovered(now)
                if back:
                    # the broker answers again: the range gets readTimeoutMs from now (right
                    # after a long freeze the stall was mostly the outage's)
                    log.warning(back)
                    last_progress = now
                elif now - last_progress > opts.read_timeout_s:
                    reads.fail_stalled()
    finally:
        consumer.close()


def _broker_away(consumer: Any, opts: SourceOptions, outage: BrokerOutage, stalled_since: float) -> bool:
    """Whether the broker is unreachable (said in the log; KafkaSourceError once that has
    lasted kafka.outage_max_s since the last progress)."""
    from confluent_kafka import KafkaException

    try:
        consumer.list_topics(timeout=opts.probe_timeout_s)
        return False
    except KafkaException as exc:
        if not unreachable(exc):
            return False
        log.warning(outage.failed(exc.args[0].str(), time.monotonic(), stalled_since))
        return True


def messages_to_batch(messages: Sequence[Any], arrow_schema: Any) -> Any:
    """confluent_kafka Messages as a pyarrow RecordBatch of the output schema."""
    import pyarrow as pa
    import pyarrow.compute as pc

    stamps = [m.timestamp() for m in messages]  # (type, ms); type 0 = not available
    ts_ms = pa.array([ts if tt else None for tt, ts in stamps], pa.int64())
    cols = {
        "key": pa.array([m.key() for m in messages], pa.binary()),
        "value": pa.array([m.value() for m in messages], pa.binary()),
        "topic": pa.array([m.topic() for m in messages], pa.string()),
        "partition": pa.array([m.partition() for m in messages], pa.int32()),
        "offset": pa.array([m.offset() for m in messages], pa.int64()),
        "timestamp": pc.multiply(ts_ms, 1000).cast(arrow_schema.field("timestamp").type),
        # librdkafka's 1 (CreateTime) / 2 (LogAppendTime) -> Kafka's ids 0 / 1
        "timestampType": pa.array([tt - 1 if tt else None for tt, _ in stamps], pa.int32()),
        "headers": pa.array([m.headers() for m in messages], arrow_schema.field("headers").type),
    }
    return pa.RecordBatch.from_arrays([cols[name] for name in arrow_schema.names], schema=arrow_schema)


def messages_to_rows(messages: Sequence[Any]) -> list[dict]:
    """confluent_kafka Messages as the rows ``merger.batch.records.kafka_rows`` makes of
    their Arrow batch (its columns but the two timestamps, which nothing reads; headers by
    ``header_map``), in the order they came: one pass over the messages, where the Arrow
    batch and the rows made of it took two (docs/performance.md)."""
    rows = []
    append = rows.append
    for m in messages:
        pairs = m.headers()
        append(
            {
                "key": m.key(),
                "value": m.value(),
                "topic": m.topic(),
                "partition": m.partition(),
                "offset": m.offset(),
                "headers": None if pairs is None else header_map(pairs),
            }
        )
    return rows


class _RangeReads:
    """The ranges one consumer reads: where each stands, which are not done yet."""

    def __init__(self, consumer: Any, opts: SourceOptions, ranges: Sequence[KafkaRange]) -> None:
        from confluent_kafka import TopicPartition

        self.consumer = consumer
        self.opts = opts
        self.by_tp: dict[TP, KafkaRange] = {}
        self.position: dict[TP, int] = {}
        for r in ranges:
            start = r.start
            if start < 0:
                # a partition new in this batch: its earliest offset, asked for directly
                # (assigning OFFSET_EARLIEST cost every such read 500 ms in librdkafka)
                start, _ = consumer.get_watermark_offsets(
                    TopicPartition(r.topic, r.partition), timeout=opts.probe_timeout_s, cached=False
                )
            if start < r.end:
                self.by_tp[(r.topic, r.partition)] = r
                self.position[(r.topic, r.partition)] = start
        self.unfinished = set(self.by_tp)
        if self.by_tp:
            consumer.incremental_assign([TopicPartition(t, p, self.position[(t, p)]) for t, p in self.by_tp])

    def finish(self, tp: TP) -> None:
        from confluent_kafka import TopicPartition

        self.unfinished.discard(tp)
        if self.unfinished:  # stop fetching past its end while the others go on
            self.consumer.incremental_unassign([TopicPartition(*tp)])

    def take(self, msgs: Sequence[Any], keep: Callable[[Any], None]) -> bool:
        """Keep the records of ``msgs`` that are inside their unfinished range; whether any
        range moved."""
        from confluent_kafka import KafkaError

        eof_code = KafkaError._PARTITION_EOF
        by_tp, position, unfinished = self.by_tp, self.position, self.unfinished
        moved = False
        for m in msgs:
            err = m.error()
            if err is not None:
                if err.code() != eof_code:
                    self._on_error(m, err)
                continue
            tp = (m.topic(), m.partition())
            if tp not in unfinished:
                continue  # fetched before its range was done and unassigned
            off = m.offset()
            if off >= by_tp[tp].end:
                self.finish(tp)
                continue
            keep(m)
            position[tp] = off + 1
            moved = True
            if off + 1 >= by_tp[tp].end:
                self.finish(tp)
        return moved

    def _on_error(self, m: Any, err: Any) -> None:
        from confluent_kafka import KafkaError

        where = self.by_tp.get((m.topic(), m.partition()), f"{m.topic()}[{m.partition()}]")
        if err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            at = self.position.get((m.topic(), m.partition()), "?")
            raise KafkaSourceError(
                f"{where}: offset {at} is no longer available ({err}); records "
                f"were deleted before they were read (set failOnDataLoss=false to "
                f"continue from the earliest offset)"
            )
        if err.fatal():
            raise KafkaSourceError(f"{where}: {err}")
        log.warning("%s: %s", where, err)

    def follow_positions(self) -> bool:
        """Move the unfinished ranges to their consumer position (it steps over transaction
        markers, which are never delivered); whether any moved."""
        from confluent_kafka import TopicPartition

        moved = False
        for tpo in self.consumer.position([TopicPartition(t, p) for t, p in self.unfinished]):
            tp = (tpo.topic, tpo.partition)
            if tpo.offset > self.position[tp]:
                self.position[tp] = tpo.offset
                moved = True
                if tpo.offset >= self.by_tp[tp].end:
                    self.finish(tp)
        return moved

    def fail_stalled(self) -> None:
        tp = min(self.unfinished)
        raise KafkaSourceError(
            f"{self.by_tp[tp]}: no progress for {self.opts.read_timeout_s:.0f}s at offset {self.position[tp]}; "
            f"the broker does not serve the offsets up to {self.by_tp[tp].end} (readTimeoutMs)"
        )

"""Watermarks without writes, for the snapshot runner (``snapshot.watermarks: positions``).

LOW and HIGH of a window are binlog positions read from the source
(``merger.mysql.positions``), as sequences in ingest's epoch. After HIGH the runner needs,
for each partition of the table's topic, the Kafka offset below which every record under
HIGH lies: it waits until ingest's committed position (``<prefix>.offsets``) reaches HIGH,
then takes each partition's end. Ingest writes a position record in the same Kafka
transaction as the records before it, so once that record is readable every record below
HIGH has been written to its partition, below the partition's end then (its commit
marker may land a moment later: a read_committed reader passes that end only after it).
The processor then waits for its reader to pass those ends (``merger.batch.read_through``).
The runner uses it as it uses ``merger.snapshot.watermarks.WatermarkRows``.

Every wait is bounded (``timeout_s``) and says what it waits for; a window that cannot get
its positions is abandoned and read again by the caller, never emitted on a guess.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from cdc.kafka_topics import partition_count
from cdc.offsets_topic import OffsetsBlocked, read_offsets, source_key
from cdc.wire.topics import offsets_topic
from merger import crashpoints
from merger.batch.tables import TableRegistry
from merger.errors import MergerError
from merger.mysql.positions import BinlogPoint, Committed, committed_of, other_server, read_binlog_point

log = logging.getLogger(__name__)

POLL_S = 0.2


class PositionsUnavailable(MergerError):
    """A window's positions could not be read or reached in time: the window is abandoned
    and its chunks read again later (the message says what was waited for)."""


@dataclass(frozen=True)
class Watermark:
    """A position read for a window: its sequence in ingest's epoch, and the source's time."""

    point: BinlogPoint
    sequence: int
    time_us: int


class PositionalWatermarks:
    """LOW and HIGH of windows as positions read from the source; where each partition is
    read through HIGH, for the processor."""

    writes_to_source = False

    def __init__(
        self,
        kafka_conf: dict,
        prefix: str,
        stop: threading.Event,
        timeout_s: float,
        tables: TableRegistry,
        connection: Callable[[], object],
        topic_of: Callable[[str], str],
        raise_tick: Callable[[], None],
    ):
        self.kafka_conf = kafka_conf
        self.topic = offsets_topic(prefix)
        self.key = source_key(prefix)
        self.stop = stop
        self.timeout_s = timeout_s
        self.tables = tables
        self.connection = connection  # the runner's kept connection to the source
        self.topic_of = topic_of
        self.raise_tick = raise_tick  # a micro-batch even on a quiet source
        self.admin = None  # made at the first window

    def open(self, rt, wid: str, chunk_ids: list[str], now: float) -> None:
        self.tables.open_positional_window(rt, wid, chunk_ids, now)

    def low(self, windows: list) -> list:
        """One position read now is the LOW of every window; returns those still open."""
        low = self.read(self.connection())
        log.info(
            "snapshot windows %s: LOW at sequence %d (%s:%d)",
            [w.wid for w in windows],
            low.sequence,
            low.point.file,
            low.point.pos,
        )
        return [w for w in windows if self.tables.set_position(w.rt, w.wid, "LOW", low.sequence)]

    def high(self, windows: list) -> None:
        """HIGH of staged windows (one position read now; a window restored after a restart
        keeps the HIGH it has: any position read after its SELECTs ended will do), then each
        table's read-through target, then a micro-batch to see the reader pass them."""
        read: Watermark | None = None
        targets = []
        for w in windows:
            positions = self.tables.window_positions(w.rt, w.wid)
            if positions is None:
                continue  # expired or dropped meanwhile
            if positions.high is not None:
                targets.append((w, positions.high, None))
                continue
            if read is None:
                read = self.read(self.connection())
            if self.tables.set_position(w.rt, w.wid, "HIGH", read.sequence, read.time_us):
                targets.append((w, read.sequence, read.point.server_id))
        if not targets:
            return
        crashpoints.pause("before_high")
        for w, high, server_id in targets:
            ends = self.read_through(high, server_id, self.topic_of(w.table), w.rt.partitions)
            self.tables.expect_read_through(w.rt, high - 1, ends)
            log.info(
                "snapshot window %s of %s: HIGH at sequence %d (%s), read through once the reader passes %s",
                w.wid,
                w.table,
                high,
                f"{read.point.file}:{read.point.pos}" if read is not None else "restored",
                ends,
            )
        self.raise_tick()

    def tick(self, table: str, origin: dict | None) -> None:
        self.raise_tick()

    def close(self) -> None:
        pass

    def committed(self) -> Committed | None:
        """Ingest's committed position now (None: nothing committed yet, or the offsets
        topic blocked by an open transaction for a while: the caller waits on)."""
        try:
            point = read_offsets(self.kafka_conf, self.topic, self.key, wait_s=2.0).point
        except OffsetsBlocked:
            return None
        return committed_of(point)  # type: ignore[arg-type]  # one server (config refuses shards)

    def read(self, conn) -> Watermark:
        """A position read now from ``conn``'s server, as a sequence in ingest's epoch."""
        point = read_binlog_point(conn)
        committed = self._wait(lambda: self.committed(), "ingest's first committed position")
        why = other_server(point, committed)
        if why is not None:
            raise MergerError(why)
        return Watermark(point, point.sequence(committed.epoch), int(time.time() * 1_000_000))

    def read_through(self, sequence: int, server_id: int | None, topic: str, partitions: int) -> dict[int, int]:
        """Each partition's end once ingest has committed through ``sequence`` (a HIGH read
        from ``server_id``; None: not known any more, a window restored after a restart):
        the reader that passes it there has read every record below ``sequence``."""

        def reached() -> Committed | None:
            committed = self.committed()
            if committed is None or committed.sequence < sequence:
                return None
            return committed

        committed = self._wait(reached, f"ingest to commit through the window's HIGH (sequence {sequence})")
        if server_id is not None and committed.server_id not in (None, server_id):
            raise PositionsUnavailable(
                f"ingest now follows server_id {committed.server_id}, not {server_id} where the window's HIGH "
                "was read; the window is read again"
            )
        return self.partition_ends(topic, partitions)

    def partition_ends(self, topic: str, partitions: int) -> dict[int, int]:
        """Each partition's end offset (records of open transactions included), for every
        partition the broker says the topic has (at least ``partitions``, what the merger
        knows; a topic not created yet holds nothing: 0)."""
        from confluent_kafka import Consumer, KafkaException, TopicPartition
        from confluent_kafka.admin import AdminClient

        if self.admin is None:
            self.admin = AdminClient(self.kafka_conf)
        try:
            count = partition_count(self.admin, topic, 10.0) or 0
        except KafkaException as exc:
            raise PositionsUnavailable(f"cannot ask the broker about {topic}: {exc}") from None
        # read_uncommitted: the log's end, records of open transactions included (a
        # read_committed consumer is told the last stable offset, which the local broker
        # gives as 0 while a transaction is open on the partition)
        conf = {
            "group.id": "cdc-merger-read-through",
            "enable.auto.commit": False,
            "isolation.level": "read_uncommitted",
        }
        consumer = Consumer(dict(self.kafka_conf, **conf))
        try:
            ends = {p: 0 for p in range(max(count, partitions))}
            for p in range(count):
                try:
                    _, ends[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
                except KafkaException as exc:
                    raise PositionsUnavailable(f"cannot read the end of {topic} [{p}]: {exc}") from None
            return ends
        finally:
            consumer.close()

    def _wait(self, attempt, what: str):
        deadline = time.monotonic() + self.timeout_s
        while True:
            found = attempt()
            if found is not None:
                return found
            if self.stop.is_set():
                raise PositionsUnavailable(f"the merger stops while waiting for {what}")
            if time.monotonic() >= deadline:
                raise PositionsUnavailable(
                    f"waited {self.timeout_s:.0f}s for {what} (is ingest running?); the window is read again"
                )
            time.sleep(POLL_S)

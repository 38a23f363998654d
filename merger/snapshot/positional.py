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
COMMITTED_FRESH_S = 5.0  # how long ingest's epoch and server read from its commit are reused


class PositionsUnavailable(MergerError):
    """A window's positions could not be read or reached in time: the window is abandoned
    and its chunks read again later (the message says what was waited for)."""


@dataclass(frozen=True)
class Watermark:
    """A position read for a window: its sequence in ingest's epoch, and the source's time."""

    point: BinlogPoint
    sequence: int
    time_us: int


@dataclass(eq=False)
class Pending:
    """A window whose HIGH is read, waiting for ingest to commit through it."""

    window: object  # merger.snapshot.watermarks.WindowRef
    high: int
    server_id: int | None  # where HIGH was read (None: a window restored with its HIGH)
    since: float  # time.monotonic()
    where: str  # for the log: binlog file:position, or "restored"


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
        self.lock = threading.Lock()
        self.pending: list[Pending] = []
        self.resolver: threading.Thread | None = None
        self.last_committed: tuple[float, Committed] | None = None  # (time.monotonic(), what was read)

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
        keeps the HIGH it has: any position read after its SELECTs ended will do). Each
        table's read-through target follows once ingest has committed through HIGH, found
        by a thread of its own (``resolve_pending``), so the runner reads the next window
        meanwhile."""
        read: Watermark | None = None
        for w in windows:
            positions = self.tables.window_positions(w.rt, w.wid)
            if positions is None:
                continue  # expired or dropped meanwhile
            if positions.high is not None:
                self._expect(Pending(w, positions.high, None, time.monotonic(), "restored"))
                continue
            if read is None:
                read = self.read(self.connection())
                crashpoints.pause("before_high")
            if self.tables.set_position(w.rt, w.wid, "HIGH", read.sequence, read.time_us):
                where = f"{read.point.file}:{read.point.pos}"
                self._expect(Pending(w, read.sequence, read.point.server_id, time.monotonic(), where))

    def _expect(self, pending: "Pending") -> None:
        with self.lock:
            self.pending.append(pending)
            if self.resolver is None:
                self.resolver = threading.Thread(target=self._resolve, name="read-through", daemon=True)
                self.resolver.start()

    def _resolve(self) -> None:
        warned = 0.0
        while not self.stop.is_set():
            try:
                waiting = self.resolve_pending()
            except Exception as exc:  # the broker, for a while: each window's wait stays bounded
                if time.monotonic() - warned > 30.0:  # once per 30 s, not per poll
                    warned = time.monotonic()
                    log.warning("positional snapshot windows wait: %s", exc)
                self.stop.wait(2.0)
                continue
            self.stop.wait(POLL_S if waiting else 0.05)

    def resolve_pending(self) -> bool:
        """One pass over the windows waiting for ingest to commit through their HIGH: each
        that it has reached gets its read-through target (and a micro-batch is asked for);
        one that waited ``timeout_s`` becomes a problem (read again with new positions).
        Returns whether any still waits."""
        with self.lock:
            pending = list(self.pending)
        if not pending:
            return False
        committed = self.committed()
        done = []
        for p in pending:
            w = p.window
            why = None
            if committed is not None and committed.sequence >= p.high:
                if p.server_id is not None and committed.server_id not in (None, p.server_id):
                    why = (
                        f"ingest now follows server_id {committed.server_id}, not {p.server_id} where the "
                        "window's HIGH was read"
                    )
                else:
                    ends = self.partition_ends(self.topic_of(w.table), w.rt.partitions)
                    self.tables.expect_read_through(w.rt, p.high - 1, ends)
                    log.info(
                        "snapshot window %s of %s: HIGH at sequence %d (%s), read through once the reader passes %s",
                        w.wid,
                        w.table,
                        p.high,
                        p.where,
                        ends,
                    )
            elif time.monotonic() - p.since < self.timeout_s:
                continue
            else:
                why = (
                    f"ingest did not commit through the window's HIGH (sequence {p.high}) within "
                    f"{self.timeout_s:.0f}s (is ingest running?)"
                )
            if why is not None:
                log.warning("snapshot window %s of %s: %s; it is read again", w.wid, w.table, why)
                self.tables.fail_window(w.rt, w.wid, why)
            done.append(p)
        with self.lock:
            self.pending = [p for p in self.pending if p not in done]
            waiting = bool(self.pending)
        if done:
            self.raise_tick()  # a micro-batch to see the reader pass the targets (or expire)
        return waiting

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
        committed = committed_of(point)  # type: ignore[arg-type]  # one server (config refuses shards)
        if committed is not None:
            self.last_committed = (time.monotonic(), committed)
        return committed

    def read(self, conn) -> Watermark:
        """A position read now from ``conn``'s server, as a sequence in ingest's epoch."""
        # the epoch and server of ingest's last commit: read again unless the resolver read
        # them moments ago (each read of the offsets topic is two consumers' round trips);
        # an epoch behind only makes the sequences lower: rows emitted lower, never stale
        recent = self.last_committed
        fresh = recent is not None and time.monotonic() - recent[0] < COMMITTED_FRESH_S
        committed = recent[1] if fresh else self._wait(self.committed, "ingest's first committed position")
        point = read_binlog_point(conn)
        why = other_server(point, committed)
        if why is not None and fresh:
            committed = self._wait(self.committed, "ingest's committed position")
            why = other_server(point, committed)
        if why is not None:
            raise MergerError(why)
        return Watermark(point, point.sequence(committed.epoch), int(time.time() * 1_000_000))

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

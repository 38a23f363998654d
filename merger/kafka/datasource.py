"""``spark.readStream.format("cdc_kafka")``: Kafka topics as a Spark Structured Streaming
source, written as a PySpark Python data source over confluent-kafka (librdkafka), because
the JVM ``spark-sql-kafka`` jars are not available without Maven. Its output has the
columns of Spark's own Kafka source with ``includeHeaders=true``, so the merger could
switch to the native connector by configuration.

Options, output schema and how it reads: docs/configuration.md, section "The `cdc_kafka`
stream source". Spark's Python workers unpickle these classes by module path, so
``merger`` must be importable there (``merger.app`` puts the project root on
``PYTHONPATH`` before the JVM starts)."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from merger import crashpoints
from merger.kafka.admission import record_cost
from merger.kafka.end_check import EndCheck
from merger.kafka.offsets import (
    METADATA_EVERY_S,
    OFFSET_LATEST,
    TICK_TP,
    TP,
    KafkaRanges,
    format_offsets,
    pack_ranges,
    parse_offsets,
    plan_end,
    plan_ranges,
    read_prompt_until,
    read_record_sizes,
    read_tick,
)
from merger.kafka.options import KafkaSourceError, SourceOptions
from merger.kafka.outage import BrokerOutage
from merger.kafka.pacing import BatchPacing
from merger.kafka.phase_times import TIMING_ENV, PhaseTimes
from merger.kafka.probe import Broker, BrokerUnreachable, MovedTopicsFeed
from merger.kafka.reader import SCHEMA, read_ranges
from merger.kafka.topic_identity import TopicIdentities

log = logging.getLogger(__name__)

FORMAT_NAME = "cdc_kafka"


class CdcKafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Mapping[str, Any], schema: StructType) -> None:
        self.opts = SourceOptions.parse(options)
        self.schema = schema
        self._broker: Broker | None = None
        self._available_now = False
        self._target: dict[TP, int] | None = None
        self._last_latest: dict | None = None  # what reportLatestOffset says: the last trigger's latest
        self._answer: dict | None = None  # the last answer, when it left nothing unread (_why_asked)
        self._answer_tick = 0  # the tick in it
        self._identities: TopicIdentities | None = None  # created where planning runs
        self._outage = BrokerOutage(self.opts.outage_max_s)
        self._metadata: tuple[float, list[TP], set[str]] | None = None  # (when, matching partitions, their topics)
        self._moved: MovedTopicsFeed | None = None
        self._end_check = EndCheck(self.opts.end_check_all_s if self.opts.moved_topics_from else None)
        self._ends: dict[TP, int] = {}  # each partition's end, as the broker last answered
        self._timing = PhaseTimes(os.environ.get(TIMING_ENV))
        self._pacing = BatchPacing(self.opts.min_batch_gap_s)

    # the reader is pickled into the read function: never ship driver clients
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_broker"] = None
        state["_metadata"] = None
        state["_moved"] = None
        state["_ends"] = {}
        state["_answer"] = None
        state["_timing"] = PhaseTimes(None)
        return state

    @property
    def broker(self) -> Broker:
        if self._broker is None:
            self._broker = Broker(self.opts)
        return self._broker

    # ------------------------------------------------------------ planning (driver)

    def _snapshot(
        self,
        known: Mapping[TP, int],
        scan_cap: int | None,
        moved: frozenset[str] | None = None,
        probe_end: bool = True,
    ) -> tuple[dict[TP, int], dict[TP, int]]:
        """``(base, latest)`` for every known or currently matching partition: ``base`` is
        where the next batch starts (the known offset, or the earliest offset of a new
        partition), ``latest`` the end of what is readable now (never below ``base``).
        ``moved``: the topics the feed named since the last trigger (``_ends_of`` picks the
        partitions to ask the end of); None: ask for every partition's end."""
        b = self.broker
        lap = self._timing.start()
        now = time.monotonic()
        current = self._partitions(now, moved)
        lap("metadata")
        new = [tp for tp in current if tp not in known]
        base = dict(known)
        base.update(b.list_offsets(new, earliest=True))
        current = [tp for tp in current if tp in base]
        lap("earliest")
        if not probe_end:
            return base, dict(base)
        his, answered, before = self._ends_of(current, moved, now)
        lap("ends")
        self._check_topic_identity(known, answered)
        lap("topic_ids")
        latest = {tp: max(base[tp], his.get(tp, base[tp])) for tp in base}
        if self.opts.end_probe == "scan" and current:
            scanned = self._end_check.followed(time.monotonic(), current, before, answered)
            froms = {tp: max(base[tp], his.get(tp, base[tp]) - 1) for tp in scanned}
            for tp, end in b.scan(froms, scan_cap, his).items():
                latest[tp] = max(latest[tp], end)
            lap("scan", scanned=len(froms), asked=len(answered), followed=sorted(froms) if len(froms) <= 3 else None)
        self._timing.write()
        return base, latest

    def _take_moved(self, now: float) -> frozenset[str] | None:
        """The topics ingest's transactions named since the last trigger (None: unknown, or
        no feed)."""
        if not self.opts.moved_topics_from:
            return None
        if self._moved is None:
            self._moved = MovedTopicsFeed(self.opts, self.opts.moved_topics_from)
        moved = self._moved.take(now)
        # ingest's heartbeats and other topics this source does not read are no news here
        return None if moved is None else frozenset(t for t in moved if self.opts.matches(t))

    def _ends_of(
        self, current: list[TP], moved: frozenset[str] | None, now: float
    ) -> tuple[dict[TP, int], dict[TP, int], dict[TP, int]]:
        """Each current partition's end (ListOffsets): asked of the broker for the
        partitions ``EndCheck`` names (all of them when ``moved`` is None: unknown), the
        others as last answered; the broker's answers of this call; and what was known of
        the answered partitions before it."""
        b = self.broker
        ask, complete = self._end_check.plan(now, current, moved, self._ends, b.unsettled)
        try:
            answers = b.list_offsets(ask, earliest=False)
        except BrokerUnreachable:
            self._end_check.failed()
            raise
        self._end_check.answered(now, complete)
        before = {tp: self._ends[tp] for tp in answers if tp in self._ends}
        if complete:
            self._ends = answers
        else:
            self._ends.update(answers)
        return {tp: self._ends[tp] for tp in current if tp in self._ends}, answers, before

    def _partitions(self, now: float, moved: frozenset[str] | None = None) -> list[TP]:
        """The matching partitions, from metadata at most METADATA_EVERY_S old: listing every
        topic on each trigger (5 a second) cost the idle merger CPU in proportion to the
        number of tables (issue 23); a new table's topic is found within that time. With
        the moved-topics feed, at most ``endCheckAllMs`` old, and listed at once when the
        feed names a matching topic the listing lacks (a new table's first transaction
        names its topic)."""
        every = METADATA_EVERY_S if moved is None else max(METADATA_EVERY_S, self.opts.end_check_all_s)
        # with the feed, listed with each check of every end: one slow trigger, not two
        if self._metadata is not None and now - self._metadata[0] < every and not self._end_check.all_due(now):
            when, parts, topics = self._metadata
            if not moved or all(t in topics or not self.opts.matches(t) for t in moved):
                return parts
        parts = self.broker.partitions()
        self._metadata = (now, parts, {t for t, _ in parts})
        return parts

    def _check_topic_identity(self, known: Mapping[TP, int], answered: Mapping[TP, int]) -> None:
        """Stop if a topic read before was deleted and created again (merger.kafka.topic_identity).
        ``answered``: the ends the broker gave on this trigger."""
        if self._identities is None:
            self._identities = TopicIdentities(self.opts.topic_ids_file)
        topics = {t for t, _ in known}
        below = {tp[0] for tp, end in answered.items() if end < known.get(tp, end)}
        now = time.monotonic()
        ask, everything = self._identities.due(now, topics, below)
        if ask:
            self._identities.check(now, self.broker.topic_ids(ask), everything)

    def initialOffset(self) -> dict:
        spec = self.opts.starting_offsets
        if spec.lower() == "earliest":
            base, _ = self._snapshot({}, None, probe_end=False)
            return format_offsets(base)
        if spec.lower() == "latest":
            _, latest = self._snapshot({}, None)
            return format_offsets(latest)
        try:
            wanted = parse_offsets(json.loads(spec))
        except (ValueError, AttributeError, TypeError) as exc:
            raise KafkaSourceError(f"startingOffsets is not earliest, latest or JSON: {exc}") from None
        earliest, latest = self._snapshot({}, None)
        out = dict(earliest)
        for tp, o in wanted.items():
            if o >= 0:
                out[tp] = o
            elif o == OFFSET_LATEST and tp in latest:
                out[tp] = latest[tp]
        return format_offsets(out)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        # The target is fixed on the first latestOffset call that follows, when the start
        # offsets are known (so the tail scan starts where the query stands).
        self._available_now = True
        self._target = None

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        started = time.monotonic()
        moved = self._take_moved(started)
        why = self._why_asked(start, moved, started)
        if why is None:
            self._timing.start()("quiet")
            self._timing.write()
            return start
        self._timing.note(why=why)
        self._answer = None
        known = parse_offsets(start)
        tick = known.pop(TICK_TP, None)
        try:
            out, drained = self._latest(known, limit, moved)
        except BrokerUnreachable as exc:
            # no new batch (the start again) instead of failing the query: Spark asks again at
            # the next trigger, each attempt bounded by probeTimeoutMs
            log.warning(self._outage.failed(str(exc), time.monotonic(), started))
            return start
        back = self._outage.recovered(time.monotonic())
        if back:
            log.warning(back)
        # the consumer asks for a micro-batch without new records (tickFile holds a number
        # it raises): a higher offset of the pseudo-partition makes Spark run one
        wanted = read_tick(self.opts.tick_file)
        if tick is not None or wanted:
            out = parse_offsets(out)
            out[TICK_TP] = max(tick or 0, wanted)
            out = format_offsets(out)
        if out != start:
            now = time.monotonic()
            asked = self._available_now or wanted > (tick or 0)
            if self._pacing.hold(now, asked=asked) and read_prompt_until(self.opts.prompt_file) < time.time():
                # the changes wait for a later trigger (merger.kafka.pacing); asked again then
                self._timing.note(held=True)
                return start
            self._pacing.started(now)
        if drained:
            self._answer, self._answer_tick = out, max(tick or 0, wanted)
        return out

    def _why_asked(self, start: dict, moved: frozenset[str] | None, now: float) -> str | None:
        """Why this trigger goes the whole way (None: ``start`` is its answer, and the
        broker is asked nothing). It is quiet when the last answer was ``start`` and left
        nothing unread, and nothing can have moved since: the feed names no topic, the end
        check has nothing due (``EndCheck.quiet``), the scan probe settled every
        partition, the metadata and the topic ids are not due, no tick is asked for. At
        500 idle tables, going through the offsets of 1,500 partitions 5 times a second
        was most of the idle merger's CPU (issue 23); the check of every partition every
        ``endCheckAllMs`` still goes the whole way."""
        if moved is None:
            return "feed"
        if moved:
            return "moved"
        if self._answer is None or self._broker is None:
            return "unread"
        every = max(METADATA_EVERY_S, self.opts.end_check_all_s)
        if self._metadata is None or now - self._metadata[0] >= every or self._end_check.all_due(now):
            return "metadata"
        if not self._end_check.quiet(now):
            return "end_check"
        if self._broker.unsettled:
            return "unsettled"
        if self._identities is None or self._identities.all_due(now):
            return "topic_ids"
        if start != self._answer:
            return "start"
        if read_tick(self.opts.tick_file) > self._answer_tick:
            return "tick"
        return None

    def _latest(self, known: dict[TP, int], limit: ReadLimit, moved: frozenset[str] | None) -> tuple[dict, bool]:
        """The next batch's end offsets, and whether they leave nothing unread."""
        if self._available_now and self._target is None:
            base, latest = self._snapshot(known, None)
            self._target = dict(latest)
            log.info("Trigger.AvailableNow target: %s", format_offsets(self._target))
        else:
            base, latest = self._snapshot(known, self.opts.scan_max_records, moved)
        self._last_latest = format_offsets(latest)
        if self._target is not None:
            latest = {tp: max(base[tp], min(latest[tp], self._target.get(tp, base[tp]))) for tp in base}
        if isinstance(limit, ReadMaxRows):
            max_rows = limit.max_rows
        elif isinstance(limit, ReadAllAvailable):
            max_rows = None
        else:
            raise KafkaSourceError(f"read limit {limit!r} is not supported by {FORMAT_NAME}")
        budget = self.opts.batch_memory_bytes
        if budget:
            sizes = read_record_sizes(self.opts.record_sizes_file)
            costs = {tp: record_cost(sizes.get(tp[0]), budget) for tp, b in base.items() if latest[tp] > b}
            end = plan_end(base, latest, max_rows, costs, budget)
        else:
            end = plan_end(base, latest, max_rows)
        # a new partition enters the offsets once data of it is admitted
        out = {tp: o for tp, o in end.items() if tp in known or o > base[tp]}
        drained = self._target is None and all(end[tp] >= o for tp, o in latest.items())
        return format_offsets(out), drained

    def reportLatestOffset(self) -> dict | None:
        return self._last_latest

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, stop = parse_offsets(start), parse_offsets(end)
        begin.pop(TICK_TP, None)
        stop.pop(TICK_TP, None)
        return pack_ranges(
            plan_ranges(begin, stop, self.opts.max_records_per_partition),
            self.opts.records_per_task,
            self.opts.min_partitions,
        )

    def commit(self, end: dict) -> None:
        # the Spark checkpoint is the position; nothing is committed to Kafka
        pass

    def stop(self) -> None:
        if self._broker is not None:
            self._broker.close()
            self._broker = None
        if self._moved is not None:
            self._moved.close()
            self._moved = None

    # ------------------------------------------------------------ reading (executors)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, KafkaRanges)
        crashpoints.pause("kafka_read")
        return read_ranges(self.opts, partition.ranges, self.schema)


class CdcKafkaDataSource(DataSource):
    """``spark.readStream.format("cdc_kafka")``: Kafka topics as a stream (options and schema:
    docs/configuration.md)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return CdcKafkaStreamReader(self.options, schema)

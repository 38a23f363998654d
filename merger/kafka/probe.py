"""The driver side of the ``cdc_kafka`` source: the topic partitions that match, their
earliest and end offsets (ListOffsets), and the tail scan of the ``scan`` end probe.

Why a scan: the local Tansu broker reports the high watermark as "base offset of the last
record batch + 1", so the tail of the last producer batch stays invisible until more data
arrives, and while a transaction is open on a partition it reports its read_committed end
as 0. The scan reads each partition's tail with a read_committed consumer and takes the
highest offset seen + 1 or the consumer position (which steps over transaction markers).
More in docs/configuration.md ("End of a partition")."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from cdc.wire.moved_topics import topics_of
from merger.kafka.limits import TP
from merger.kafka.offsets import partitions_to_scan, settle_scan
from merger.kafka.options import KafkaSourceError, SourceOptions

log = logging.getLogger(__name__)

LATEST_TIMESTAMP = -1  # ListOffsets' timestamp for "the end" (OffsetSpec.latest)


PROBE_FETCH_WAIT_MS = 10  # the end probe's fetch.wait.max.ms: an idle partition's EOF comes this late
# the moved-topics feed's: the broker answers a waiting fetch as soon as a record comes
# (measured on Tansu, read_committed: 0-9 ms with 250 as with 10), so the wait only bounds how
# often the idle feed asks: one idle consumer at 10 ms cost the broker ~8 % of a core, at 250 <1 %
FEED_FETCH_WAIT_MS = 250
# a partition no scan wanted this long stops fetching until one does (Broker.scan)
REST_AFTER_S = 3.0


class BrokerUnreachable(KafkaSourceError):
    """The broker did not answer a metadata request in time (down, frozen, network): waiting
    may fix it, unlike the other KafkaSourceErrors."""


def unreachable(exc: BaseException) -> bool:
    """``exc`` (from confluent-kafka) means the broker did not answer, not that it refused."""
    from confluent_kafka import KafkaError, KafkaException

    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    if not isinstance(err, KafkaError):
        return False
    return err.code() in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)


class Broker:
    """Driver-side clients (metadata, ListOffsets, tail scans). Lives in Spark's long-lived
    Python planner process for the source and is never pickled."""

    def __init__(self, opts: SourceOptions) -> None:
        from confluent_kafka import Consumer
        from confluent_kafka.admin import AdminClient

        self.opts = opts
        admin_conf = {k: v for k, v in opts.kafka_conf.items()}
        self.admin = AdminClient(admin_conf)
        # the end probe stays assigned and prefetches (see scan): a small queue is enough.
        # Its short fetch wait is what a scan waits for a partition's EOF (measured with 100
        # ms: latestOffset 28 -> 104 ms a trigger); a consumer fetching at 10 ms costs the
        # broker ~8 % of a core, so a partition left unwanted for a while rests (scan)
        self._consumer_conf = opts.consumer_conf(
            **{"fetch.wait.max.ms": PROBE_FETCH_WAIT_MS, "queued.max.messages.kbytes": 16384}
        )
        self._consumer_conf["group.id"] = "cdc-kafka-source-probe-" + uuid.uuid4().hex[:8]
        self.consumer = Consumer(self._consumer_conf)
        self._scan_next: dict[TP, int] = {}  # partitions assigned to the end probe: next offset
        self._unsettled: set[TP] = set()  # read last time without reaching their end
        self._quiet: dict[TP, int] = {}  # scans in a row that found nothing just below the end
        self._eof_at: dict[TP, int] = {}  # where the probe last met a partition's end (EOF)
        self._resting: set[TP] = set()  # assigned and paused until a scan wants them (see scan)
        self._wanted_at: dict[TP, float] = {}  # when a scan last wanted the partition

    def close(self) -> None:
        try:
            self.consumer.close()
        except Exception:  # noqa: BLE001 - best effort on shutdown
            pass

    @property
    def unsettled(self) -> set[TP]:
        """Partitions the scan read last time without reaching their end."""
        return self._unsettled

    def _raise_if_unreachable(self, exc: BaseException, what: str) -> None:
        """BrokerUnreachable for an ``exc`` that means the broker did not answer."""
        if unreachable(exc):
            why = exc.args[0].str()
            raise BrokerUnreachable(f"no {what} within {self.opts.probe_timeout_s:.0f}s: {why}") from None

    def partitions(self) -> list[TP]:
        try:
            md = self.admin.list_topics(timeout=self.opts.probe_timeout_s)
        except Exception as exc:
            self._raise_if_unreachable(exc, "metadata")
            raise
        out = []
        for name, topic in md.topics.items():
            if topic.error is not None or not self.opts.matches(name):
                continue
            out.extend((name, p) for p in topic.partitions)
        return sorted(out)

    def topic_ids(self, topics: Sequence[str]) -> dict[str, str]:
        """Each topic's id (empty for a topic the broker did not describe this time)."""
        if not topics:
            return {}
        from confluent_kafka import TopicCollection

        out = {}
        futures = self.admin.describe_topics(TopicCollection(list(topics)), request_timeout=self.opts.probe_timeout_s)
        for name, fut in futures.items():
            try:
                out[name] = str(fut.result(timeout=self.opts.probe_timeout_s + 5).topic_id or "")
            except Exception as exc:  # noqa: BLE001 - e.g. a topic being created: asked again next time
                log.warning("DescribeTopics %s: %s", name, exc)
        return out

    def list_offsets(self, tps: Sequence[TP], earliest: bool) -> dict[TP, int]:
        if not tps:
            return {}
        if not earliest:
            return self._ends(tps)
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        spec = OffsetSpec.earliest() if earliest else OffsetSpec.latest()
        iso = (
            IsolationLevel.READ_UNCOMMITTED
            if self._consumer_conf.get("isolation.level") == "read_uncommitted"
            else IsolationLevel.READ_COMMITTED
        )
        futures = self.admin.list_offsets(
            {TopicPartition(t, p): spec for t, p in tps}, isolation_level=iso, request_timeout=self.opts.probe_timeout_s
        )
        out = {}
        for tp, fut in futures.items():
            try:
                out[(tp.topic, tp.partition)] = fut.result(timeout=self.opts.probe_timeout_s + 5).offset
            except Exception as exc:  # noqa: BLE001 - e.g. a topic still being created
                # skipped for this trigger: a new partition is found again next time, a
                # known one keeps its offset (no progress) until the broker answers
                log.warning("ListOffsets %s[%d]: %s", tp.topic, tp.partition, exc)
        return out

    def _ends(self, tps: Sequence[TP]) -> dict[TP, int]:
        """Each partition's end (ListOffsets, latest, with the consumer's isolation level) in
        one call of the probe's consumer: the admin client's future per partition cost twice
        the CPU, ~25 ms per trigger for 1,500 partitions (issue 23). A partition the broker
        did not answer for is left out this time (a known one keeps its offset)."""
        from confluent_kafka import KafkaException, TopicPartition

        try:
            answers = self.consumer.offsets_for_times(
                [TopicPartition(t, p, LATEST_TIMESTAMP) for t, p in tps], timeout=self.opts.probe_timeout_s
            )
        except KafkaException as exc:
            self._raise_if_unreachable(exc, "offsets")
            log.warning("ListOffsets of %d partitions: %s", len(tps), exc)
            return {}
        out = {}
        for a in answers:
            if a.error is None and a.offset >= 0:
                out[(a.topic, a.partition)] = a.offset
            else:
                log.warning("ListOffsets %s[%d]: %s", a.topic, a.partition, a.error or f"offset {a.offset}")
        return out

    def scan(self, froms: Mapping[TP, int], cap: int | None, ends: Mapping[TP, int] | None = None) -> dict[TP, int]:
        """Read each partition from ``froms[tp]`` to its end (partition EOF, at most ``cap``
        records, bounded by the probe timeout); the next offset after what was seen: the
        highest offset seen + 1 or the consumer position, which also steps over
        transaction markers. A partition where nothing was seen keeps ``froms[tp]``.
        ``ends``: the broker's ends (ListOffsets); only the partitions that
        ``partitions_to_scan`` names are read, the others keep what was seen before.

        The consumer stays assigned between calls (assigning afresh on every call left a
        partition with an open transaction unanswered for seconds at a time on Tansu,
        measured: one of three partitions of a table under 1,000 changes/s stalled for 2-4 s
        while the others moved on), but a partition no scan wanted for REST_AFTER_S rests
        (paused) until one does, and is then resumed from where the scan starts (``_wake``).
        Left fetching, an idle consumer asked the broker every PROBE_FETCH_WAIT_MS for every
        partition: ~9 % of a core of Tansu for an idle merger (session 40)."""
        from confluent_kafka import TopicPartition

        self._unassign_gone(froms)
        if not froms:
            return {}
        fresh = self._assign(froms)
        out = {tp: max(o, self._scan_next[tp]) for tp, o in froms.items()}
        followed = {tp: out[tp] for tp in froms if tp not in fresh}
        wanted = (
            list(froms)
            if ends is None
            else partitions_to_scan(list(froms), ends, followed, self._unsettled, self._eof_at)
        )
        paused: list[Any] = []
        try:
            resumed = self._wake([tp for tp in wanted if tp in self._resting], out)
            eof = self._read_tails(wanted, out, cap, bool(fresh) or bool(resumed), paused)
            for pos in self.consumer.position([TopicPartition(t, p) for t, p in wanted]):
                tp = (pos.topic, pos.partition)
                if pos.offset >= 0 and pos.error is None:
                    out[tp] = max(out[tp], pos.offset)
        except BaseException:
            # the consumer's state is unknown: the next call assigns afresh
            self._reset_scan()
            raise
        if paused:
            # capped: the rest is read by the next calls (the position is not advanced
            # past what was counted, so a resumed partition goes on from there)
            self.consumer.resume(paused)
        self._rest(wanted)
        capped = {(p.topic, p.partition) for p in paused}
        self._unsettled = settle_scan(wanted, ends or {}, out, eof, capped, self._quiet, self._eof_at)
        self._scan_next.update({tp: out[tp] for tp in froms})
        return out

    def _wake(self, tps: Sequence[TP], out: Mapping[TP, int]) -> list[TP]:
        """Resume resting partitions from ``out`` (by a seek, after which the partition's EOF
        is said again where nothing came). librdkafka (2.16) wakes its fetcher neither for a
        resume nor for a seek: the first fetch came ~0.8 s later (measured). A request
        through the same consumer to each partition's broker (ListOffsets) wakes it: a scan
        of resumed partitions then takes ~12 ms, against ~10 ms prefetched."""
        from confluent_kafka import TopicPartition

        if not tps:
            return []
        self.consumer.resume([TopicPartition(t, p) for t, p in tps])
        self._resting.difference_update(tps)
        for t, p in tps:
            try:
                self.consumer.seek(TopicPartition(t, p, out[(t, p)]))
            except Exception as exc:  # noqa: BLE001 - fetched anyway, only later: read again if unsettled
                log.debug("end probe: seek %s[%d] to %d: %s", t, p, out[(t, p)], exc)
        try:
            # a request to each partition's broker wakes that broker's fetcher
            self.consumer.offsets_for_times(
                [TopicPartition(t, p, LATEST_TIMESTAMP) for t, p in tps], timeout=self.opts.probe_timeout_s
            )
        except Exception as exc:  # noqa: BLE001 - as above: only later
            log.debug("end probe: wake-up request: %s", exc)
        return list(tps)

    def _rest(self, wanted: Sequence[TP]) -> None:
        """Pause the partitions no scan wanted for REST_AFTER_S: a busy partition stays
        fetching (a pause and resume on every trigger of a steady load let partitions with
        an open transaction stall: p99 0.56 -> 3.8 s at 1,000 changes/s)."""
        from confluent_kafka import TopicPartition

        now = time.monotonic()
        for tp in wanted:
            self._wanted_at[tp] = now
        awake = [
            tp
            for tp in self._scan_next
            if tp not in self._resting and now - self._wanted_at.get(tp, 0.0) >= REST_AFTER_S
        ]
        if awake:
            self.consumer.pause([TopicPartition(t, p) for t, p in awake])
            self._resting.update(awake)

    def _unassign_gone(self, froms: Mapping[TP, int]) -> None:
        from confluent_kafka import TopicPartition

        gone = [tp for tp in self._scan_next if tp not in froms]
        if gone:
            self.consumer.incremental_unassign([TopicPartition(t, p) for t, p in gone])
            for tp in gone:
                self._scan_next.pop(tp)
                self._eof_at.pop(tp, None)
                self._resting.discard(tp)
                self._wanted_at.pop(tp, None)

    def _assign(self, froms: Mapping[TP, int]) -> list[TP]:
        """Assign the partitions new to the probe at ``froms``, move the others forward to
        ``froms`` where they are behind; the newly assigned ones."""
        from confluent_kafka import TopicPartition

        c = self.consumer
        fresh = [tp for tp in froms if tp not in self._scan_next]
        if fresh:
            c.incremental_assign([TopicPartition(tp[0], tp[1], froms[tp]) for tp in fresh])
            for tp in fresh:
                self._scan_next[tp] = froms[tp]
        for tp, o in froms.items():
            if tp not in fresh and self._scan_next[tp] < o:
                # behind where the scan must start (a backlog, or the query's offsets
                # moved on): skip ahead instead of reading what the readers will read
                try:
                    c.seek(TopicPartition(tp[0], tp[1], o))
                    self._scan_next[tp] = o
                except Exception as exc:  # noqa: BLE001 - not fetching yet: read on from where it is
                    log.debug("end probe: seek %s to %d: %s", tp, o, exc)
        return fresh

    def _read_tails(
        self, wanted: Sequence[TP], out: dict[TP, int], cap: int | None, fresh: bool, paused: list[Any]
    ) -> set[TP]:
        """Consume until every ``wanted`` partition reached EOF or ``cap`` records (those are
        paused and added to ``paused``), the probe timeout passed or nothing came for a
        moment; raise ``out[tp]`` to the highest offset seen + 1 (for the records of the
        other partitions in ``out`` that come meanwhile too). The partitions that reached
        EOF. With nothing wanted, only what is queued already is taken."""
        from confluent_kafka import KafkaError, TopicPartition

        c = self.consumer
        wanted_set = set(wanted)
        counts = {tp: 0 for tp in wanted}
        done: set = set()
        eof: set = set()
        deadline = time.monotonic() + self.opts.probe_timeout_s
        # A partition with an open transaction never reaches EOF for a read_committed
        # consumer (Tansu): what is committed has arrived once nothing came for a moment.
        # After the first answer (a record or an EOF) a short pause means the end
        # (fetch.wait.max.ms is PROBE_FETCH_WAIT_MS); before it, allow for the first fetch. Stopping early
        # only leaves records for the next trigger.
        idle_first_s, idle_after_s = 0.3, 0.06
        idle_s = idle_first_s if fresh else idle_after_s
        last_activity = time.monotonic()
        drain = not wanted  # only take what is queued (the other partitions' records)
        while drain or (
            len(done) < len(wanted) and time.monotonic() < deadline and time.monotonic() - last_activity < idle_s
        ):
            msgs = c.consume(num_messages=5000, timeout=0)
            if drain:
                drain = bool(msgs)
            elif not msgs:
                msgs = c.consume(num_messages=1, timeout=0.02)
            if msgs:
                last_activity = time.monotonic()
                idle_s = idle_after_s
            for m in msgs:
                tp = (m.topic(), m.partition())
                if tp not in out or tp in done:
                    continue
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        self._eof_at[tp] = max(out[tp], m.offset())  # said once per end reached
                    if tp not in wanted_set:
                        continue
                    if err.code() == KafkaError._PARTITION_EOF:
                        done.add(tp)
                        eof.add(tp)
                    elif err.fatal():
                        raise KafkaSourceError(f"end probe of {tp}: {err}")
                    else:
                        log.warning("end probe of %s: %s", tp, err)
                        if err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                            done.add(tp)
                    continue
                out[tp] = max(out[tp], m.offset() + 1)
                if tp not in wanted_set:
                    continue
                counts[tp] += 1
                if cap is not None and counts[tp] >= cap:
                    paused.append(TopicPartition(*tp))
                    c.pause([paused[-1]])
                    done.add(tp)
        if len(done) < len(wanted) and time.monotonic() >= deadline:
            log.warning(
                "end probe: no partition EOF within %.1fs for %s", self.opts.probe_timeout_s, sorted(wanted_set - done)
            )
        return eof

    def _reset_scan(self) -> None:
        try:
            self.consumer.unassign()
        except Exception:  # noqa: BLE001
            pass
        self._scan_next.clear()
        self._resting.clear()
        self._wanted_at.clear()
        self._unsettled.clear()
        self._quiet.clear()
        self._eof_at.clear()


class MovedTopicsFeed:
    """Follows partition 0 of ingest's offsets topic (read_committed) from its end: each
    committed transaction's position record names the topics it wrote
    (``cdc.wire.moved_topics``). Lives beside the ``Broker`` in the planner process."""

    RESTART_S = 10.0  # no position on the topic this long (e.g. not created yet): assign again

    def __init__(self, opts: SourceOptions, topic: str) -> None:
        self.opts = opts
        self.topic = topic
        self._consumer: Any = None
        self._since = 0.0
        self._follows = False  # the consumer has a position: what it reads is complete

    def close(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.close()
            except Exception:  # noqa: BLE001 - best effort on shutdown
                pass
            self._consumer = None

    def _start(self, now: float) -> None:
        from confluent_kafka import OFFSET_END, Consumer, TopicPartition

        self.close()
        # only what is queued is taken (take): the wait bounds how often the idle feed is asked
        conf = self.opts.consumer_conf(**{"fetch.wait.max.ms": FEED_FETCH_WAIT_MS})
        conf["group.id"] = "cdc-kafka-source-moved-" + uuid.uuid4().hex[:8]
        conf["enable.partition.eof"] = False
        conf["auto.offset.reset"] = "latest"
        self._consumer = Consumer(conf)
        self._consumer.assign([TopicPartition(self.topic, 0, OFFSET_END)])
        self._since, self._follows = now, False

    def take(self, now: float) -> frozenset[str] | None:
        """The topics named since the last call; None when that is not known (the feed is
        starting, a record does not name them, an error)."""
        from confluent_kafka import TopicPartition

        if self._consumer is None or (not self._follows and now - self._since >= self.RESTART_S):
            self._start(now)
        known = self._follows
        topics: set[str] = set()
        while True:
            msgs = self._consumer.consume(num_messages=10_000, timeout=0)
            for m in msgs:
                if m.error() is not None:
                    log.debug("moved-topics feed %s: %s", self.topic, m.error())
                    known = False
                    continue
                named = topics_of(m.value())
                if named is None:
                    known = False
                else:
                    topics |= named
            if len(msgs) < 10_000:
                break
        if not self._follows:
            try:
                pos = self._consumer.position([TopicPartition(self.topic, 0)])[0]
                self._follows = pos.error is None and pos.offset >= 0
            except Exception as exc:  # noqa: BLE001 - asked again next trigger
                log.debug("moved-topics feed %s: position: %s", self.topic, exc)
        return frozenset(topics) if known else None

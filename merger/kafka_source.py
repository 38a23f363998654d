"""A Spark Structured Streaming source for Kafka written as a PySpark Python data source.

Maven is not reachable on the development machines, so the JVM ``spark-sql-kafka`` jars are
not available; this source reads Kafka through confluent-kafka (librdkafka) instead. Its output
has the same columns as Spark's own Kafka source with ``includeHeaders=true``, so the merger
can switch to the native connector by configuration without touching the rest of the plan.

Usage::

    from merger.kafka_source import CdcKafkaDataSource
    spark.dataSource.register(CdcKafkaDataSource)
    df = (spark.readStream.format("cdc_kafka")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribePattern", r"^cdc\\.[^.]+\\.[^.]+$")
          .option("maxOffsetsPerTrigger", 100000)
          .load())

Importability: Spark runs ``read()`` (and the driver-side planning) in Python worker
processes that unpickle this module's classes by name, so ``merger`` must be importable
there. Either set ``PYTHONPATH`` to include the project root *before* the JVM starts (in
the environment of ``spark-submit`` or of the process that creates the SparkSession), or
ship the package with ``--py-files`` / ``spark.sparkContext.addPyFile``. The workers must
also run an interpreter that has pyarrow and confluent-kafka: set ``PYSPARK_PYTHON`` (e.g.
to ``sys.executable`` of the project's virtualenv) before the session starts.

Options (Spark hands them to Python with lower-cased keys; they are matched
case-insensitively here):

``subscribePattern``      regex; every topic whose whole name matches it is read (Java's
                          ``Pattern.matches`` semantics, as in Spark's Kafka source). Topics
                          created later are picked up on a later trigger without a restart and
                          start at their earliest offset. Example: ``^cdc\\.[^.]+\\.[^.]+$``
                          (all table topics of prefix ``cdc``, not ``cdc.offsets`` etc.).
``subscribe``             alternatively, a comma-separated list of topic names.
``kafka.<property>``      any librdkafka property, passed through (``kafka.bootstrap.servers``
                          is required; TLS/SASL: ``kafka.security.protocol``,
                          ``kafka.sasl.mechanism``, ``kafka.ssl.ca.location`` ...).
``kafkaConfigFile``       optional path to a ``key=value`` file of librdkafka properties (keeps
                          secrets out of option strings and query plans); ``kafka.`` options
                          win over the file.
``kafkaSecretEnv.<p>``    librdkafka property ``<p>`` (e.g. ``sasl.password``) from this
                          environment variable; ``kafkaSecretFile.<p>``: from this file (first
                          line). Read by the driver and the workers themselves, so the secret
                          is in no option string, plan or checkpoint.
``startingOffsets``       ``earliest`` (default), ``latest``, or JSON
                          ``{"topic": {"0": 42, "1": -2}}`` (-2 earliest, -1 latest; partitions
                          not named start at earliest). Only for a query without checkpoint.
``maxOffsetsPerTrigger``  optional cap on the offsets admitted per micro-batch across all
                          partitions, split max-min fairly (see :func:`allocate_limit`).
                          Offsets taken by transaction markers count, so rows <= the cap.
``endProbe``              ``scan`` (default) or ``watermark``, see "End of a partition" below.
``scanMaxRecords``        per-partition cap of records the ``scan`` probe reads per trigger
                          (default 50000).
``maxRecordsPerPartition`` optional: split an offset range into Spark input partitions of at
                          most this many offsets (default: one input partition per range).
``recordsPerTask``        ranges are packed into Spark tasks of about this many offsets
                          (default 100000): a micro-batch of a few thousand records over many
                          partitions is one task with one consumer, not one task per
                          partition (each task costs a broker round trip and a task slot).
                          ``1``: one task per range.
``failOnDataLoss``        ``true`` (default): fail when a planned start offset no longer
                          exists (retention); ``false``: continue from the earliest offset.
``readTimeoutMs``         a reader task fails if it makes no progress towards the end of its
                          range for this long (default 120000).
``probeTimeoutMs``        timeout of the driver-side metadata/offset/scan requests (default
                          15000).
``arrowBatchSize``        rows per Arrow record batch yielded by a reader (default 10000).

Output schema (identical to Spark's Kafka source with ``includeHeaders=true``)::

    key binary, value binary, topic string, partition int, offset bigint,
    timestamp timestamp, timestampType int,
    headers array<struct<key: string, value: binary>>

``value`` is null for tombstones, ``key`` is null for records without a key, ``headers`` is
null for a record without headers, otherwise the headers in record order (a list, not a map,
because Kafka allows repeated header keys). ``timestampType`` is 0 for CreateTime, 1 for
LogAppendTime (Kafka's ids); ``timestamp`` is null if the record has none. Readers yield
pyarrow RecordBatches.

Offsets (in the checkpoint) are JSON ``{"topic": {"partition": next_offset}}``, topics and
partitions in a canonical order.

How it reads. Consumers use ``assign()`` with explicit offsets only (never a consumer-group
subscription: a group join takes ~20 s on the local broker) and never commit offsets; the
Spark checkpoint is the only position. ``isolation.level=read_committed`` by default.
Each micro-batch is planned as (topic, partition, start, end) ranges, packed into Spark
input partitions of about ``recordsPerTask`` offsets; one consumer reads a task's ranges
together (one fetch request covers all of them).
Planning in the driver (``latestOffset``) lists the topics (metadata request), asks
ListOffsets (read_committed) for the partitions' ends and earliest offsets of new
partitions, optionally scans the partitions' tails, then applies Trigger.AvailableNow's
target and the rate limit.

End of a partition. ``watermark`` takes the end offset the broker reports (ListOffsets
latest, which is the last stable offset under read_committed). That is exact on Apache
Kafka. The local Tansu broker reports the high watermark as "base offset of the last
record batch + 1", so the tail of the last producer batch stays invisible until more data
arrives; measured here: a plain (idempotent) producer that writes 4 records in one batch
leaves the watermark at 1. A committed transaction ends with a one-record commit-marker
batch, so after a commit the watermark is exact again; but while a transaction is open on
a partition Tansu reports its read_committed end as 0 (not the first open offset).
``scan`` therefore reads each partition from ``max(start, end-1)`` with a read_committed
consumer to the partition's end (partition EOF) and takes ``max(reported end, highest
offset seen + 1, consumer position)``; the consumer position also steps over trailing
transaction markers. It never returns less than the previous end. On Apache Kafka it costs
one short fetch per partition and gives the same answer as ``watermark``. While a
transaction is open on a Tansu partition the scan starts at ``start`` and reads the
committed records up to the open transaction (at most ``scanMaxRecords`` per trigger; for
Trigger.AvailableNow's target without that cap, bounded by ``probeTimeoutMs``).

Transaction markers. Offsets occupied by commit/abort markers are never delivered; a reader
is done with its range ``[start, end)`` when it has delivered offset ``end-1`` or its
consumer position reaches ``end`` (the position moves past markers), never by waiting for
an offset; every wait has a timeout. Records of a transaction that is still open are
hidden (read_committed). The local broker does NOT hide records of *aborted* transactions
from read_committed consumers (Apache Kafka does); consumers downstream drop replays by the
source position the events carry (see DESIGN.md), this source delivers what the broker
gives.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
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

log = logging.getLogger("cdc.merger.kafka_source")

FORMAT_NAME = "cdc_kafka"

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

OFFSET_EARLIEST = -2  # as in Kafka/Spark JSON offsets
OFFSET_LATEST = -1

TP = Tuple[str, int]


class KafkaSourceError(RuntimeError):
    """A problem reading Kafka that a user must look at (bad option, data loss, timeout)."""


# --------------------------------------------------------------------------- options


@dataclass(frozen=True)
class SourceOptions:
    kafka_conf: Dict[str, str] = field(repr=False)  # may hold secrets
    pattern: Optional[str] = None
    topics: Tuple[str, ...] = ()
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: Optional[int] = None
    end_probe: str = "scan"
    scan_max_records: int = 50_000
    max_records_per_partition: Optional[int] = None
    records_per_task: int = 100_000
    fail_on_data_loss: bool = True
    read_timeout_s: float = 120.0
    probe_timeout_s: float = 15.0
    arrow_batch_size: int = 10_000
    tick_file: Optional[str] = None

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> "SourceOptions":
        opts = {str(k).lower(): ("" if v is None else str(v)) for k, v in dict(options).items()}
        conf: Dict[str, str] = {}
        path = opts.get("kafkaconfigfile")
        if path:
            conf.update(_read_properties(path))
        conf.update({k[len("kafka.") :]: v for k, v in opts.items() if k.startswith("kafka.")})
        conf.update(_secret_options(opts))
        if not conf.get("bootstrap.servers"):
            raise KafkaSourceError("option kafka.bootstrap.servers is required")
        pattern = opts.get("subscribepattern") or None
        topics = tuple(t.strip() for t in opts.get("subscribe", "").split(",") if t.strip())
        if bool(pattern) == bool(topics):
            raise KafkaSourceError("give exactly one of the options subscribePattern, subscribe")
        if pattern:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise KafkaSourceError(f"subscribePattern is not a valid regex: {exc}") from None
        probe = opts.get("endprobe", "scan").lower()
        if probe not in ("scan", "watermark"):
            raise KafkaSourceError(f"endProbe must be scan or watermark, not {probe!r}")

        def pos_int(name: str, default: Optional[int]) -> Optional[int]:
            raw = opts.get(name.lower())
            if raw in (None, ""):
                return default
            try:
                value = int(raw)
            except ValueError:
                raise KafkaSourceError(f"option {name} must be an integer, not {raw!r}") from None
            if value <= 0:
                raise KafkaSourceError(f"option {name} must be > 0, not {value}")
            return value

        return cls(
            kafka_conf=conf,
            pattern=pattern,
            topics=topics,
            starting_offsets=opts.get("startingoffsets", "earliest").strip() or "earliest",
            max_offsets_per_trigger=pos_int("maxOffsetsPerTrigger", None),
            end_probe=probe,
            scan_max_records=pos_int("scanMaxRecords", 50_000),
            max_records_per_partition=pos_int("maxRecordsPerPartition", None),
            records_per_task=pos_int("recordsPerTask", 100_000),
            fail_on_data_loss=opts.get("failondataloss", "true").lower() != "false",
            read_timeout_s=pos_int("readTimeoutMs", 120_000) / 1000.0,
            probe_timeout_s=pos_int("probeTimeoutMs", 15_000) / 1000.0,
            arrow_batch_size=pos_int("arrowBatchSize", 10_000),
            tick_file=opts.get("tickfile") or None,
        )

    def matches(self, topic: str) -> bool:
        if self.pattern:
            return re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics

    def consumer_conf(self, **defaults: Any) -> Dict[str, Any]:
        """librdkafka settings: ours as defaults, the user's passthrough on top, then the
        few settings this source depends on."""
        conf: Dict[str, Any] = {
            "group.id": "cdc-kafka-source",  # required by the client; never joined
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 50,
            "socket.nagle.disable": True,
            **defaults,
        }
        conf.update(self.kafka_conf)
        conf.update(
            {
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "error" if self.fail_on_data_loss else "earliest",
            }
        )
        return conf


def _secret_options(opts: Mapping[str, str]) -> Dict[str, str]:
    """``kafkaSecretEnv.<property>`` (an environment variable) and ``kafkaSecretFile.<property>``
    (a file holding the value): secrets read where the client is built, so that neither
    the options, the query plan nor the checkpoint ever holds them."""
    out: Dict[str, str] = {}
    for key, ref in opts.items():
        if key.startswith("kafkasecretenv."):
            prop = key[len("kafkasecretenv.") :]
            if ref not in os.environ:
                raise KafkaSourceError(f"option {key}: environment variable {ref} is not set")
            out[prop] = os.environ[ref]
        elif key.startswith("kafkasecretfile."):
            prop = key[len("kafkasecretfile.") :]
            try:
                with open(ref, encoding="utf-8") as f:
                    out[prop] = f.read().rstrip("\n")
            except OSError as exc:
                raise KafkaSourceError(f"option {key}: cannot read {ref}: {exc.strerror}") from None
    return out


def _read_properties(path: str) -> Dict[str, str]:
    out: Dict[str, str] = {}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line or line.startswith(("#", "!")):
                    continue
                key, sep, value = line.partition("=")
                if sep:
                    out[key.strip()] = value.strip()
    except OSError as exc:
        raise KafkaSourceError(f"cannot read kafkaConfigFile {path}: {exc}") from None
    return out


# --------------------------------------------------------------------------- offsets


# a pseudo-partition in the offsets, never read from Kafka: see ``latestOffset``
TICK_TP: TP = ("__cdc_tick__", 0)


def read_tick(path: Optional[str]) -> int:
    """The number in the tick file (0: no file, or not written completely). Written by
    ``merger.state.StateStore.raise_tick``; this module reads it without importing the
    merger."""
    if not path:
        return 0
    try:
        with open(path) as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0


def parse_offsets(offsets: Optional[Mapping[str, Mapping[str, Any]]]) -> Dict[TP, int]:
    """``{"topic": {"0": 5}}`` -> ``{("topic", 0): 5}``."""
    out: Dict[TP, int] = {}
    for topic, parts in (offsets or {}).items():
        for part, off in parts.items():
            out[(topic, int(part))] = int(off)
    return out


def format_offsets(tps: Mapping[TP, int]) -> Dict[str, Dict[str, int]]:
    """The inverse of :func:`parse_offsets`, topics and partitions in a canonical order (Spark
    compares offsets by their JSON text)."""
    out: Dict[str, Dict[str, int]] = {}
    for topic, part in sorted(tps):
        out.setdefault(topic, {})[str(part)] = int(tps[(topic, part)])
    return out


def allocate_limit(available: Mapping[TP, int], max_rows: int, rotate: int = 0) -> Dict[TP, int]:
    """Split ``max_rows`` over partitions max-min fairly (water-filling): every partition with
    data gets an equal share, a partition that needs less than its share gives the rest to
    the others. When fewer rows than partitions remain, single rows go round-robin starting
    at ``rotate`` (so no partition is starved across triggers). Never gives a partition more
    than it has available; the sum is ``min(max_rows, sum(available))``."""
    alloc = {tp: 0 for tp in available}
    pending = sorted(tp for tp, n in available.items() if n > 0)
    remaining = max(0, int(max_rows))
    while remaining > 0 and pending:
        share = remaining // len(pending)
        if share == 0:
            k = rotate % len(pending)
            for tp in (pending[k:] + pending[:k])[:remaining]:
                alloc[tp] += 1
            remaining = 0
            break
        still = []
        for tp in pending:
            give = min(share, available[tp] - alloc[tp])
            alloc[tp] += give
            remaining -= give
            if alloc[tp] < available[tp]:
                still.append(tp)
        pending = still
    return alloc


def plan_end(base: Mapping[TP, int], latest: Mapping[TP, int], max_rows: Optional[int]) -> Dict[TP, int]:
    """End offsets of the next micro-batch: ``latest`` (never below ``base``), cut to
    ``max_rows`` offsets in total by :func:`allocate_limit` if given."""
    avail = {tp: max(0, latest.get(tp, b) - b) for tp, b in base.items()}
    if max_rows is None:
        return {tp: base[tp] + n for tp, n in avail.items()}
    rotate = sum(base.values())
    alloc = allocate_limit(avail, max_rows, rotate)
    return {tp: base[tp] + alloc[tp] for tp in base}


class KafkaRange(InputPartition):
    """One Spark input partition: offsets ``[start, end)`` of one topic partition. ``start``
    is ``OFFSET_EARLIEST`` for a partition discovered in this micro-batch."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        self.topic, self.partition, self.start, self.end = topic, partition, start, end

    def __repr__(self) -> str:
        return f"KafkaRange({self.topic}[{self.partition}] {self.start}..{self.end})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KafkaRange) and vars(self) == vars(other)

    def __hash__(self) -> int:
        return hash((self.topic, self.partition, self.start, self.end))


def plan_ranges(
    start: Mapping[TP, int], end: Mapping[TP, int], max_records_per_partition: Optional[int] = None
) -> List[KafkaRange]:
    """Input partitions for the offsets between two checkpointed offsets. Partitions absent
    from ``start`` are new: read from their earliest offset. Partitions absent from ``end``
    (cannot happen with offsets of this source) are not read."""
    out: List[KafkaRange] = []
    for tp in sorted(end):
        topic, part = tp
        e = end[tp]
        s = start.get(tp)
        if s is None:
            if e > 0:
                out.append(KafkaRange(topic, part, OFFSET_EARLIEST, e))
            continue
        if e <= s:
            continue
        step = max_records_per_partition or (e - s)
        for lo in range(s, e, step):
            out.append(KafkaRange(topic, part, lo, min(e, lo + step)))
    return out


class KafkaRanges(InputPartition):
    """One Spark input partition: several ranges (at most one per topic partition), read
    together by one consumer."""

    def __init__(self, ranges: Sequence[KafkaRange]) -> None:
        self.ranges = tuple(ranges)

    def __repr__(self) -> str:
        return f"KafkaRanges({', '.join(map(repr, self.ranges))})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KafkaRanges) and self.ranges == other.ranges

    def __hash__(self) -> int:
        return hash(self.ranges)


def _size(r: KafkaRange) -> int:
    # a new partition's start is unknown here: its end bounds the count
    return r.end - max(r.start, 0)


def pack_ranges(ranges: Sequence[KafkaRange], records_per_task: int) -> List[KafkaRanges]:
    """Ranges into about ``ceil(total / records_per_task)`` tasks (never more than there are
    ranges), balanced by offsets, largest range first. Slices of one topic partition
    (``maxRecordsPerPartition``) go to different tasks: a consumer holds a partition once."""
    if not ranges:
        return []
    total = sum(_size(r) for r in ranges)
    count = max(1, min(len(ranges), -(-total // max(records_per_task, 1))))
    groups: List[List[KafkaRange]] = [[] for _ in range(count)]
    loads = [0] * count
    for r in sorted(ranges, key=lambda r: (-_size(r), r.topic, r.partition, r.start)):
        free = [
            i for i in range(len(groups)) if all((g.topic, g.partition) != (r.topic, r.partition) for g in groups[i])
        ]
        if not free:
            groups.append([])
            loads.append(0)
            free = [len(groups) - 1]
        i = min(free, key=lambda i: (loads[i], i))
        groups[i].append(r)
        loads[i] += _size(r)
    return [KafkaRanges(sorted(g, key=lambda r: (r.topic, r.partition, r.start))) for g in groups if g]


# --------------------------------------------------------------------------- driver side


class _Broker:
    """Driver-side clients (metadata, ListOffsets, tail scans). Lives in Spark's long-lived
    Python planner process for the source and is never pickled."""

    def __init__(self, opts: SourceOptions) -> None:
        from confluent_kafka import Consumer
        from confluent_kafka.admin import AdminClient

        self.opts = opts
        admin_conf = {k: v for k, v in opts.kafka_conf.items()}
        self.admin = AdminClient(admin_conf)
        # the end probe stays assigned and prefetches (see scan): a small queue is enough
        self._consumer_conf = opts.consumer_conf(**{"fetch.wait.max.ms": 10, "queued.max.messages.kbytes": 16384})
        self._consumer_conf["group.id"] = "cdc-kafka-source-probe-" + uuid.uuid4().hex[:8]
        self.consumer = Consumer(self._consumer_conf)
        self._scan_next: Dict[TP, int] = {}  # partitions assigned to the end probe: next offset

    def close(self) -> None:
        try:
            self.consumer.close()
        except Exception:  # noqa: BLE001 - best effort on shutdown
            pass

    def partitions(self) -> List[TP]:
        md = self.admin.list_topics(timeout=self.opts.probe_timeout_s)
        out = []
        for name, topic in md.topics.items():
            if topic.error is not None or not self.opts.matches(name):
                continue
            out.extend((name, p) for p in topic.partitions)
        return sorted(out)

    def list_offsets(self, tps: Sequence[TP], earliest: bool) -> Dict[TP, int]:
        if not tps:
            return {}
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

    def scan(self, froms: Mapping[TP, int], cap: Optional[int]) -> Dict[TP, int]:
        """Read each partition from ``froms[tp]`` to its end (partition EOF, at most ``cap``
        records, bounded by the probe timeout); the next offset after what was seen: the
        highest offset seen + 1 or the consumer position, which also steps over
        transaction markers. A partition where nothing was seen keeps ``froms[tp]``.

        The consumer stays assigned between calls and keeps fetching in the background:
        what was committed since the last call is mostly in its queue already. Assigning
        afresh on every call left a partition with an open transaction unanswered for
        seconds at a time on Tansu (measured: one of three partitions of a table under
        1,000 changes/s stalled for 2-4 s while the others moved on)."""
        from confluent_kafka import KafkaError, TopicPartition

        c = self.consumer
        gone = [tp for tp in self._scan_next if tp not in froms]
        if gone:
            c.incremental_unassign([TopicPartition(t, p) for t, p in gone])
            for tp in gone:
                self._scan_next.pop(tp)
        if not froms:
            return {}
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
        out = {tp: max(o, self._scan_next[tp]) for tp, o in froms.items()}
        counts = {tp: 0 for tp in froms}
        done: set = set()
        deadline = time.monotonic() + self.opts.probe_timeout_s
        # A partition with an open transaction never reaches EOF for a read_committed
        # consumer (Tansu): what is committed has arrived once nothing came for a moment.
        # After the first answer (a record or an EOF) a short pause means the end
        # (fetch.wait.max.ms is 10); before it, allow for the first fetch. Stopping early
        # only leaves records for the next trigger.
        idle_first_s, idle_after_s = 0.3, 0.06
        idle_s = idle_first_s if fresh else idle_after_s
        last_activity = time.monotonic()
        paused: List[Any] = []
        try:
            while len(done) < len(froms) and time.monotonic() < deadline and time.monotonic() - last_activity < idle_s:
                msgs = c.consume(num_messages=5000, timeout=0)
                if not msgs:
                    msgs = c.consume(num_messages=1, timeout=0.02)
                if msgs:
                    last_activity = time.monotonic()
                    idle_s = idle_after_s
                for m in msgs:
                    tp = (m.topic(), m.partition())
                    if tp not in froms or tp in done:
                        continue
                    err = m.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            done.add(tp)
                        elif err.fatal():
                            raise KafkaSourceError(f"end probe of {tp}: {err}")
                        else:
                            log.warning("end probe of %s: %s", tp, err)
                            if err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                                done.add(tp)
                        continue
                    out[tp] = max(out[tp], m.offset() + 1)
                    counts[tp] += 1
                    if cap is not None and counts[tp] >= cap:
                        paused.append(TopicPartition(*tp))
                        c.pause([paused[-1]])
                        done.add(tp)
            if len(done) < len(froms) and time.monotonic() >= deadline:
                log.warning(
                    "end probe: no partition EOF within %.1fs for %s",
                    self.opts.probe_timeout_s,
                    sorted(set(froms) - done),
                )
            for pos in c.position([TopicPartition(t, p) for t, p in froms]):
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
            c.resume(paused)
        self._scan_next.update({tp: out[tp] for tp in froms})
        return out

    def _reset_scan(self) -> None:
        try:
            self.consumer.unassign()
        except Exception:  # noqa: BLE001
            pass
        self._scan_next.clear()


# --------------------------------------------------------------------------- the source


class CdcKafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Mapping[str, Any], schema: StructType) -> None:
        self.opts = SourceOptions.parse(options)
        self.schema = schema
        self._broker: Optional[_Broker] = None
        self._available_now = False
        self._target: Optional[Dict[TP, int]] = None
        self._last_latest: Optional[Dict[TP, int]] = None

    # the reader is pickled into the read function: never ship driver clients
    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_broker"] = None
        return state

    @property
    def broker(self) -> _Broker:
        if self._broker is None:
            self._broker = _Broker(self.opts)
        return self._broker

    # ------------------------------------------------------------ planning (driver)

    def _snapshot(
        self, known: Mapping[TP, int], scan_cap: Optional[int], probe_end: bool = True
    ) -> Tuple[Dict[TP, int], Dict[TP, int]]:
        """``(base, latest)`` for every known or currently matching partition: ``base`` is
        where the next batch starts (the known offset, or the earliest offset of a new
        partition), ``latest`` the end of what is readable now (never below ``base``)."""
        b = self.broker
        current = b.partitions()
        new = [tp for tp in current if tp not in known]
        base = dict(known)
        base.update(b.list_offsets(new, earliest=True))
        current = [tp for tp in current if tp in base]
        if not probe_end:
            return base, dict(base)
        his = b.list_offsets(current, earliest=False)
        latest = {tp: max(base[tp], his.get(tp, base[tp])) for tp in base}
        if self.opts.end_probe == "scan" and current:
            froms = {tp: max(base[tp], his.get(tp, base[tp]) - 1) for tp in current}
            for tp, end in b.scan(froms, scan_cap).items():
                latest[tp] = max(latest[tp], end)
        return base, latest

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
        known = parse_offsets(start)
        tick = known.pop(TICK_TP, None)
        out = self._latest(known, limit)
        # the consumer asks for a micro-batch without new records (tickFile holds a number
        # it raises): a higher offset of the pseudo-partition makes Spark run one
        wanted = read_tick(self.opts.tick_file)
        if tick is not None or wanted:
            out = parse_offsets(out)
            out[TICK_TP] = max(tick or 0, wanted)
            out = format_offsets(out)
        return out

    def _latest(self, known: Dict[TP, int], limit: ReadLimit) -> dict:
        if self._available_now and self._target is None:
            base, latest = self._snapshot(known, None)
            self._target = dict(latest)
            log.info("Trigger.AvailableNow target: %s", format_offsets(self._target))
        else:
            base, latest = self._snapshot(known, self.opts.scan_max_records)
        self._last_latest = dict(latest)
        if self._target is not None:
            latest = {tp: max(base[tp], min(latest[tp], self._target.get(tp, base[tp]))) for tp in base}
        if isinstance(limit, ReadMaxRows):
            end = plan_end(base, latest, limit.max_rows)
        elif isinstance(limit, ReadAllAvailable):
            end = plan_end(base, latest, None)
        else:
            raise KafkaSourceError(f"read limit {limit!r} is not supported by {FORMAT_NAME}")
        # a new partition enters the offsets once data of it is admitted
        out = {tp: o for tp, o in end.items() if tp in known or o > base[tp]}
        return format_offsets(out)

    def reportLatestOffset(self) -> Optional[dict]:
        return None if self._last_latest is None else format_offsets(self._last_latest)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, stop = parse_offsets(start), parse_offsets(end)
        begin.pop(TICK_TP, None)
        stop.pop(TICK_TP, None)
        return pack_ranges(plan_ranges(begin, stop, self.opts.max_records_per_partition), self.opts.records_per_task)

    def commit(self, end: dict) -> None:
        # the Spark checkpoint is the position; nothing is committed to Kafka
        pass

    def stop(self) -> None:
        if self._broker is not None:
            self._broker.close()
            self._broker = None

    # ------------------------------------------------------------ reading (executors)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, KafkaRanges)
        return read_ranges(self.opts, partition.ranges, self.schema)


def fetch_max_bytes(ranges: Sequence[KafkaRange]) -> int:
    """A task's fetch size: about 1 KB per offset it reads, between 1 MB and librdkafka's
    50 MB default. The local broker answers every fetch with up to fetch.max.bytes (it
    ignores max.partition.fetch.bytes): 5 MB for a range of 400 records took it 60 ms,
    1 MB 35 ms. A record larger than this is still delivered (KIP-74)."""
    offsets = sum(_size(r) for r in ranges)
    return max(1 << 20, min(50 << 20, offsets * 1024))


def read_range(opts: SourceOptions, r: KafkaRange, schema: StructType = SCHEMA) -> Iterator[Any]:
    """The records of one range (``read_ranges`` of one)."""
    return read_ranges(opts, [r], schema)


def read_ranges(opts: SourceOptions, ranges: Sequence[KafkaRange], schema: StructType = SCHEMA) -> Iterator[Any]:
    """Yield pyarrow RecordBatches with the records of ranges ``[r.start, r.end)`` (at most
    one per topic partition), all assigned to one consumer. A range is done when offset
    ``end-1`` was delivered or the consumer position reached ``end`` (transaction markers
    occupy offsets that are never delivered); it is then unassigned. Fails after
    ``read_timeout_s`` without progress on any unfinished range."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from confluent_kafka import Consumer, KafkaError, TopicPartition
    from pyspark.sql.pandas.types import to_arrow_schema

    ranges = [r for r in ranges if not (r.start >= 0 and r.start >= r.end)]
    if not ranges:
        return
    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    ts_type = arrow_schema.field("timestamp").type
    headers_type = arrow_schema.field("headers").type
    names = [f.name for f in schema.fields]

    kept: List[Any] = []  # confluent_kafka Messages of the current Arrow batch

    def flush() -> "pa.RecordBatch":
        stamps = [m.timestamp() for m in kept]  # (type, ms); type 0 = not available
        ts_ms = pa.array([ts if tt else None for tt, ts in stamps], pa.int64())
        cols = {
            "key": pa.array([m.key() for m in kept], pa.binary()),
            "value": pa.array([m.value() for m in kept], pa.binary()),
            "topic": pa.array([m.topic() for m in kept], pa.string()),
            "partition": pa.array([m.partition() for m in kept], pa.int32()),
            "offset": pa.array([m.offset() for m in kept], pa.int64()),
            "timestamp": pc.multiply(ts_ms, 1000).cast(ts_type),
            # librdkafka's 1 (CreateTime) / 2 (LogAppendTime) -> Kafka's ids 0 / 1
            "timestampType": pa.array([tt - 1 if tt else None for tt, _ in stamps], pa.int32()),
            "headers": pa.array([m.headers() for m in kept], headers_type),
        }
        kept.clear()
        return pa.RecordBatch.from_arrays([cols[name] for name in names], schema=arrow_schema)

    consumer = Consumer(opts.consumer_conf(**{"fetch.max.bytes": fetch_max_bytes(ranges)}))
    try:
        by_tp: Dict[TP, KafkaRange] = {}
        position: Dict[TP, int] = {}
        for r in ranges:
            start = r.start
            if start < 0:
                # a partition new in this batch: its earliest offset, asked for directly
                # (assigning OFFSET_EARLIEST cost every such read 500 ms in librdkafka)
                start, _ = consumer.get_watermark_offsets(
                    TopicPartition(r.topic, r.partition), timeout=opts.probe_timeout_s, cached=False
                )
            if start < r.end:
                by_tp[(r.topic, r.partition)] = r
                position[(r.topic, r.partition)] = start
        if not by_tp:
            return
        consumer.incremental_assign([TopicPartition(t, p, position[(t, p)]) for t, p in by_tp])
        unfinished = set(by_tp)

        def finish(tp: TP) -> None:
            unfinished.discard(tp)
            if unfinished:  # stop fetching past its end while the others go on
                consumer.incremental_unassign([TopicPartition(*tp)])

        last_progress = time.monotonic()
        batch_size = opts.arrow_batch_size
        eof_code = KafkaError._PARTITION_EOF
        keep = kept.append
        while unfinished:
            # drain what is queued without waiting; block briefly only on an empty queue
            # (consume() waits for num_messages or the timeout, whichever comes first)
            msgs = consumer.consume(num_messages=batch_size, timeout=0)
            if not msgs:
                msgs = consumer.consume(num_messages=1, timeout=0.2)
            moved = False
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == eof_code:
                        continue
                    where = by_tp.get((m.topic(), m.partition()), f"{m.topic()}[{m.partition()}]")
                    if err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                        at = position.get((m.topic(), m.partition()), "?")
                        raise KafkaSourceError(
                            f"{where}: offset {at} is no longer available ({err}); records "
                            f"were deleted before they were read (set failOnDataLoss=false to "
                            f"continue from the earliest offset)"
                        )
                    if err.fatal():
                        raise KafkaSourceError(f"{where}: {err}")
                    log.warning("%s: %s", where, err)
                    continue
                tp = (m.topic(), m.partition())
                if tp not in unfinished:
                    continue  # fetched before its range was done and unassigned
                off = m.offset()
                if off >= by_tp[tp].end:
                    finish(tp)
                    continue
                keep(m)
                position[tp] = off + 1
                moved = True
                if off + 1 >= by_tp[tp].end:
                    finish(tp)
            if unfinished:
                for tpo in consumer.position([TopicPartition(t, p) for t, p in unfinished]):
                    tp = (tpo.topic, tpo.partition)
                    if tpo.offset > position[tp]:
                        position[tp] = tpo.offset
                        moved = True
                        if tpo.offset >= by_tp[tp].end:
                            finish(tp)
            if len(kept) >= batch_size or (not unfinished and kept):
                yield flush()
            if moved:
                last_progress = time.monotonic()
            elif unfinished and time.monotonic() - last_progress > opts.read_timeout_s:
                tp = min(unfinished)
                raise KafkaSourceError(
                    f"{by_tp[tp]}: no progress for {opts.read_timeout_s:.0f}s at offset {position[tp]}; "
                    f"the broker does not serve the offsets up to {by_tp[tp].end} (readTimeoutMs)"
                )
    finally:
        consumer.close()


class CdcKafkaDataSource(DataSource):
    """``spark.readStream.format("cdc_kafka")``: Kafka topics as a stream (see the module
    docstring for options and schema)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return CdcKafkaStreamReader(self.options, schema)

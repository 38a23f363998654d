"""Offset planning of the ``cdc_kafka`` source, pure (no broker): the checkpointed offsets
JSON, the rate limit spread over partitions, and the ranges each micro-batch reads, packed
into Spark tasks.

Offsets (in the checkpoint) are ``{"offsets": "topic@0=5,1=7 other@0=3"}``: each topic's
partitions and next offsets in one string, topics and partitions in a canonical order
(Spark compares offsets by their JSON text). Kafka's JSON form ``{"topic": {"0": 5}}``
(checkpoints of earlier versions, the ``startingOffsets`` option) is read too."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql.datasource import InputPartition

from merger.kafka.admission import admit
from merger.kafka.limits import TP, allocate_limit

OFFSET_EARLIEST = -2  # as in Kafka/Spark JSON offsets
OFFSET_LATEST = -1


# a pseudo-partition in the offsets, never read from Kafka: see ``CdcKafkaStreamReader.latestOffset``
TICK_TP: TP = ("__cdc_tick__", 0)


def _read_number(path: str | None, kind: type) -> Any:
    """The number in a file the merger writes (``kind``'s 0: no path, no file, or not written
    completely). This module reads them without importing the merger."""
    if not path:
        return kind(0)
    try:
        with open(path) as f:
            return kind(f.read().strip() or 0)
    except (OSError, ValueError):
        return kind(0)


def read_prompt_until(path: str | None) -> float:
    """The wall-clock time until which batches are not held; written by
    ``merger.state.store.batch_prompter``."""
    return _read_number(path, float)


def read_tick(path: str | None) -> int:
    """The number in the tick file; written by ``merger.state.store.StateStore.raise_tick``."""
    return _read_number(path, int)


def read_record_sizes(path: str | None) -> dict[str, float]:
    """Bytes per record per topic, as the merger learned them (``merger.kafka.admission.learn``,
    written by ``merger.state.store.StateStore.save_record_sizes``); empty without a file or when
    it cannot be read (every topic is then new to the admission)."""
    if not path:
        return {}
    try:
        with open(path) as f:
            data = json.load(f)
        return {str(t): float(b) for t, b in data.items() if isinstance(b, (int, float)) and b >= 0}
    except (OSError, ValueError, AttributeError):
        return {}


# the one field of the checkpoint's offsets (see the module's doc)
OFFSETS_FIELD = "offsets"


def parse_offsets(offsets: Mapping[str, Any] | None) -> dict[TP, int]:
    """``{"offsets": "topic@0=5"}`` or Kafka's ``{"topic": {"0": 5}}`` -> ``{("topic", 0): 5}``
    (a topic named "offsets" in Kafka's form maps to an object, never to a string)."""
    out: dict[TP, int] = {}
    compact = (offsets or {}).get(OFFSETS_FIELD)
    if isinstance(compact, str):
        for item in compact.split():
            topic, _, parts = item.rpartition("@")
            for part in parts.split(","):
                p, _, o = part.partition("=")
                out[(topic, int(p))] = int(o)
        return out
    for topic, parts in (offsets or {}).items():
        for part, off in parts.items():
            out[(topic, int(part))] = int(off)
    return out


def format_offsets(tps: Mapping[TP, int]) -> dict[str, str]:
    """The checkpoint's form of ``tps`` (the module's doc): topics and partitions in a canonical
    order. One string, because Spark's planner process decodes and encodes the offsets as
    JSON on every trigger (five a second): 1,500 partitions as objects in objects were a
    fifth of the idle merger's CPU at 500 tables (issue 23). Kafka's topic names never hold
    ``@ = ,`` or a space."""
    by_topic: dict[str, list[str]] = {}
    for topic, part in sorted(tps):
        by_topic.setdefault(topic, []).append(f"{part}={int(tps[(topic, part)])}")
    return {OFFSETS_FIELD: " ".join(f"{t}@{','.join(parts)}" for t, parts in by_topic.items())}


def lagging_partitions(end: Any, latest: Any) -> set[TP]:
    """The partitions where a micro-batch's ``end`` offsets stop short of the ``latest``
    ones its planning saw (both as in Spark's query progress: JSON text or already parsed;
    None or unreadable: none): the reader is behind there, records wait unread."""

    def parsed(value: Any) -> dict[TP, int] | None:
        try:
            value = json.loads(value) if isinstance(value, str) else value
            return None if value is None else parse_offsets(value)
        except (ValueError, TypeError, AttributeError):
            return None

    ends, latests = parsed(end), parsed(latest)
    if ends is None or latests is None:
        return set()
    # a partition not in the end offsets was never admitted (new in the query): it is behind
    # if it holds anything (its earliest offset is unknown here: > 0 errs towards waiting)
    return {tp for tp, o in latests.items() if tp != TICK_TP and o > ends.get(tp, 0)}


def plan_end(
    base: Mapping[TP, int],
    latest: Mapping[TP, int],
    max_rows: int | None,
    costs: Mapping[TP, float] | None = None,
    budget: float | None = None,
) -> dict[TP, int]:
    """End offsets of the next micro-batch: ``latest`` (never below ``base``), cut to
    ``max_rows`` offsets in total by :func:`allocate_limit` if given, and to the records
    whose ``costs`` fit ``budget`` if given (``merger.kafka.admission.admit``)."""
    # only the partitions with new records take part (the same result: a partition with none
    # gets none): hundreds of idle ones cost each trigger their share of the work (issue 23)
    avail = {tp: n for tp, b in base.items() if (n := latest.get(tp, b) - b) > 0}
    rotate = sum(base.values())
    if costs is not None and budget is not None:
        alloc = admit(avail, costs, budget, max_rows, rotate)
    elif max_rows is None:
        alloc = avail
    else:
        alloc = allocate_limit(avail, max_rows, rotate)
    return {tp: b + alloc.get(tp, 0) for tp, b in base.items()}


# how old the planner's view of the matching partitions may be (a new topic waits that long)
METADATA_EVERY_S = 1.0


def partitions_to_scan(
    tps: Sequence[TP],
    ends: Mapping[TP, int],
    scanned: Mapping[TP, int],
    unsettled: set[TP],
    eof_at: Mapping[TP, int] | None = None,
) -> list[TP]:
    """The partitions whose tail the ``scan`` end probe must read on this trigger: those it
    does not follow yet, those whose end it did not settle last time, and those where the
    broker's end (ListOffsets) is past what the probe has seen or tells nothing (none, or
    0: the local broker's read_committed end while a transaction is open). The broker's
    end is never above the true one, and a new record batch starts at or after what was
    seen, so its end (its last batch's base offset + 1, on the local broker) is then
    higher. Reading the tails of 1,500 idle partitions on each trigger cost every
    micro-batch ~60-90 ms at 500 tables (issue 23). An end of 0 tells nothing, except
    where the probe met the partition's end (EOF, ``eof_at``) at what it has seen and
    nothing came since: an empty partition (the consumer says EOF once, so reading it on
    every trigger waited out the probe's idle pause each time, ~60 ms)."""
    eof_at = eof_at or {}
    out = []
    for tp in tps:
        end, seen = ends.get(tp), scanned.get(tp)
        if seen is None or tp in unsettled or end is None or end > seen:
            out.append(tp)
        elif end <= 0 and eof_at.get(tp) != seen:
            out.append(tp)
    return out


def settle_scan(
    wanted: Sequence[TP],
    ends: Mapping[TP, int],
    seen: dict[TP, int],
    eof: set[TP],
    capped: set[TP],
    quiet: dict[TP, int],
    eof_at: Mapping[TP, int] | None = None,
) -> set[TP]:
    """After the scan probe read ``wanted``: the partitions it did not read to their end,
    to read again next time whatever their broker end says. Settled: EOF, or what was seen
    (``seen``, the next offset) at the broker's end ``ends`` once the queue was taken (the
    local broker does not say EOF again for hundreds of idle partitions at a time; a
    fetched record batch is queued whole). Read from just below the broker's end with
    nothing coming, twice in a row (``quiet`` counts, changed here): what is there is a
    transaction marker, never delivered, and ``seen`` moves to the end. Met at its end
    (EOF, ``eof_at``) at what was seen, on this or an earlier read: settled. Capped
    partitions are never settled."""
    eof_at = eof_at or {}
    unsettled = set()
    for tp in wanted:
        end = ends.get(tp, 0)
        if tp not in capped and end > 0 and seen[tp] == end - 1:
            quiet[tp] = quiet.get(tp, 0) + 1
            if quiet[tp] >= 2:
                seen[tp] = end
        else:
            quiet.pop(tp, None)
        if tp in capped or not (tp in eof or (end > 0 and seen[tp] >= end) or eof_at.get(tp) == seen[tp]):
            unsettled.add(tp)
    return unsettled


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
    start: Mapping[TP, int], end: Mapping[TP, int], max_records_per_partition: int | None = None
) -> list[KafkaRange]:
    """Input partitions for the offsets between two checkpointed offsets. Partitions absent
    from ``start`` are new: read from their earliest offset. Partitions absent from ``end``
    (cannot happen with offsets of this source) are not read."""
    out: list[KafkaRange] = []
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


def range_size(r: KafkaRange) -> int:
    # a new partition's start is unknown here: its end bounds the count
    return r.end - max(r.start, 0)


# a read task's fixed cost (scheduling, a Python worker's round trip, a consumer and its
# first fetch) is tens of ms; below this many offsets a task of its own does not pay for it
MIN_RECORDS_PER_TASK = 10_000


def task_count(total: int, ranges: int, records_per_task: int, min_tasks: int = 1) -> int:
    """How many tasks read ``total`` offsets in ``ranges`` ranges: about ``total /
    records_per_task``, but at least ``min_tasks`` (the task slots) as long as each gets
    ``MIN_RECORDS_PER_TASK`` offsets; never more than there are ranges, at least 1."""
    count = -(-total // max(records_per_task, 1))
    count = max(count, min(min_tasks, total // MIN_RECORDS_PER_TASK))
    return max(1, min(ranges, count))


def pack_ranges(ranges: Sequence[KafkaRange], records_per_task: int, min_tasks: int = 1) -> list[KafkaRanges]:
    """Ranges into :func:`task_count` tasks, balanced by offsets, largest range first. A
    range is never split: each is read whole, in offset order, by one task. Slices of one
    topic partition (``maxRecordsPerPartition``) go to different tasks: a consumer holds a
    partition once. The order of a key's changes does not depend on the packing: a key
    lives in one partition, and the processor orders a batch's records by partition and
    offset, then each table's changes by binlog sequence."""
    if not ranges:
        return []
    total = sum(range_size(r) for r in ranges)
    count = task_count(total, len(ranges), records_per_task, min_tasks)
    groups: list[list[KafkaRange]] = [[] for _ in range(count)]
    loads = [0] * count
    for r in sorted(ranges, key=lambda r: (-range_size(r), r.topic, r.partition, r.start)):
        free = [
            i for i in range(len(groups)) if all((g.topic, g.partition) != (r.topic, r.partition) for g in groups[i])
        ]
        if not free:
            groups.append([])
            loads.append(0)
            free = [len(groups) - 1]
        i = min(free, key=lambda i: (loads[i], i))
        groups[i].append(r)
        loads[i] += range_size(r)
    return [KafkaRanges(sorted(g, key=lambda r: (r.topic, r.partition, r.start))) for g in groups if g]

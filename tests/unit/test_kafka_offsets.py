"""Unit tests of the ``cdc_kafka`` source's offset planning (merger/kafka/offsets.py), pure:
the offsets JSON, fair spreading of the rate limit, input partitions and their packing into
tasks, the tick file. No broker, no Spark session."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from merger.kafka.limits import allocate_limit
from merger.kafka.offsets import (
    MIN_RECORDS_PER_TASK,
    OFFSET_EARLIEST,
    TICK_TP,
    KafkaRange,
    KafkaRanges,
    format_offsets,
    lagging_partitions,
    pack_ranges,
    parse_offsets,
    partitions_to_scan,
    plan_end,
    plan_ranges,
    range_size,
    read_tick,
    settle_scan,
    task_count,
)


def test_offsets_json_roundtrip_is_canonical():
    tps = {("b", 10): 5, ("a", 2): 7, ("a", 10): 1, ("b", 0): 0}
    js = format_offsets(tps)
    assert js == {"offsets": "a@2=7,10=1 b@0=0,10=5"}  # numeric partition order
    assert format_offsets(dict(reversed(list(tps.items())))) == js
    assert parse_offsets(js) == tps
    assert parse_offsets(json.loads(json.dumps(js))) == tps
    assert parse_offsets({}) == {} and parse_offsets(None) == {}
    assert format_offsets({}) == {"offsets": ""} and parse_offsets(format_offsets({})) == {}
    # Kafka's JSON form: checkpoints of earlier versions, the startingOffsets option (a
    # topic named "offsets" there maps to an object)
    assert parse_offsets({"a": {"2": 7, "10": 1}, "b": {"0": 0, "10": 5}}) == tps
    assert parse_offsets({"offsets": {"0": 4}}) == {("offsets", 0): 4}


@given(
    st.dictionaries(
        st.tuples(st.from_regex(r"[a-zA-Z0-9._-]{1,20}", fullmatch=True), st.integers(0, 1000)),
        st.integers(0, 2**62),
        max_size=40,
    )
)
def test_offsets_roundtrip_any_topic_names(tps):
    assert parse_offsets(json.loads(json.dumps(format_offsets(tps)))) == tps


def test_allocate_limit_water_filling():
    a, b, c = ("t", 0), ("t", 1), ("t", 2)
    # equal shares; a small partition gives its unused share to the others
    assert allocate_limit({a: 100, b: 100, c: 100}, 30) == {a: 10, b: 10, c: 10}
    assert allocate_limit({a: 100, b: 2, c: 100}, 30) == {a: 14, b: 2, c: 14}
    # everything fits
    assert allocate_limit({a: 3, b: 0, c: 4}, 100) == {a: 3, b: 0, c: 4}
    # fewer rows than partitions with data: round robin from ``rotate``
    assert allocate_limit({a: 5, b: 5, c: 5}, 2, rotate=0) == {a: 1, b: 1, c: 0}
    assert allocate_limit({a: 5, b: 5, c: 5}, 2, rotate=1) == {a: 0, b: 1, c: 1}
    assert allocate_limit({a: 5, b: 5, c: 5}, 2, rotate=2) == {a: 1, b: 0, c: 1}
    assert allocate_limit({}, 10) == {}
    assert allocate_limit({a: 5}, 0) == {a: 0}


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.tuples(st.sampled_from("xyz"), st.integers(0, 5)), st.integers(0, 1000), max_size=12),
    st.integers(0, 3000),
    st.integers(0, 50),
)
def test_allocate_limit_properties(available, max_rows, rotate):
    alloc = allocate_limit(available, max_rows, rotate)
    assert set(alloc) == set(available)
    assert sum(alloc.values()) == min(max_rows, sum(available.values()))
    for tp, n in alloc.items():
        assert 0 <= n <= available[tp]
    # max-min fair: a partition left with data never got more than one row less than any other
    for tp, n in alloc.items():
        if n < available[tp]:
            assert all(m <= n + 1 for m in alloc.values())


def test_plan_end_with_and_without_limit():
    a, b, new = ("t", 0), ("t", 1), ("u", 0)
    base = {a: 10, b: 50, new: 0}
    latest = {a: 40, b: 50, new: 6}
    assert plan_end(base, latest, None) == latest
    end = plan_end(base, latest, 10)
    assert sum(end[tp] - base[tp] for tp in base) == 10
    assert end == {a: 15, b: 50, new: 5}  # equal shares of 10 over the two with data
    # never below base, even if the broker reports less (Tansu: open transaction -> 0)
    assert plan_end({a: 10}, {a: 0}, None) == {a: 10}


def test_plan_ranges():
    start = {("t", 0): 5, ("t", 1): 9, ("t", 2): 3}
    end = {("t", 0): 12, ("t", 1): 9, ("t", 2): 3, ("u", 0): 4, ("u", 1): 0}
    assert plan_ranges(start, end) == [
        KafkaRange("t", 0, 5, 12),
        KafkaRange("u", 0, OFFSET_EARLIEST, 4),  # new partition: from its earliest offset
    ]
    assert plan_ranges(start, end, max_records_per_partition=3) == [
        KafkaRange("t", 0, 5, 8),
        KafkaRange("t", 0, 8, 11),
        KafkaRange("t", 0, 11, 12),
        KafkaRange("u", 0, OFFSET_EARLIEST, 4),
    ]
    assert plan_ranges(end, end) == []


def test_pack_ranges_makes_few_tasks_of_a_small_batch():
    ranges = [KafkaRange("t", p, 100, 400) for p in range(3)] + [KafkaRange("u", 0, OFFSET_EARLIEST, 50)]
    assert pack_ranges(ranges, 100_000) == [KafkaRanges(sorted(ranges, key=lambda r: (r.topic, r.partition)))]
    # a backlog: about total / records_per_task tasks, balanced
    big = [KafkaRange("t", p, 0, 1000) for p in range(4)]
    tasks = pack_ranges(big, 2000)
    assert sorted(sum(r.end - r.start for r in t.ranges) for t in tasks) == [2000, 2000]
    # one task per range, as before packing
    assert len(pack_ranges(big, 1)) == 4
    assert pack_ranges([], 10) == []


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from("xy"), st.integers(0, 3), st.integers(-2, 500), st.integers(1, 800)), max_size=14
    ),
    st.integers(1, 3000),
)
def test_pack_ranges_properties(raw, records_per_task):
    ranges = []
    for topic, part, start, size in raw:
        start = OFFSET_EARLIEST if start < 0 else start
        ranges.append(KafkaRange(topic, part, start, max(start, 0) + size))
    tasks = pack_ranges(ranges, records_per_task)
    packed = [r for t in tasks for r in t.ranges]
    assert sorted(packed, key=repr) == sorted(ranges, key=repr)  # each range once
    for t in tasks:
        tps = [(r.topic, r.partition) for r in t.ranges]
        assert len(tps) == len(set(tps)), "a consumer holds a partition once"
    if ranges:
        total = sum(r.end - max(r.start, 0) for r in ranges)
        most_per_tp = max(sum(1 for q in ranges if (q.topic, q.partition) == (r.topic, r.partition)) for r in ranges)
        assert 1 <= len(tasks) <= max(min(len(ranges), -(-total // records_per_task)), most_per_tp)


def test_a_backlog_is_spread_over_the_task_slots_and_a_small_batch_stays_one_task():
    backlog = [KafkaRange("t", p, 1000, 2400) for p in range(32)]  # 44,800 offsets in 32 partitions
    tasks = pack_ranges(backlog, 100_000, min_tasks=2)
    assert sorted(sum(range_size(r) for r in t.ranges) for t in tasks) == [22_400, 22_400]
    assert len(pack_ranges(backlog, 100_000, min_tasks=4)) == 4  # 11,200 offsets each
    assert len(pack_ranges(backlog, 100_000, min_tasks=8)) == 4  # not below MIN_RECORDS_PER_TASK each
    assert len(pack_ranges(backlog, 100_000)) == 1  # no slots given: the rule before
    # steady streaming, a few hundred records a batch: one task whatever the slots
    assert len(pack_ranges([KafkaRange("t", p, 0, 30) for p in range(32)], 100_000, min_tasks=4)) == 1
    # never more tasks than ranges: a partition is read whole by one task
    huge = [KafkaRange("t", p, 0, 500_000) for p in range(3)]
    assert len(pack_ranges(huge, 100_000, min_tasks=64)) == 3
    assert task_count(0, 0, 100_000, 8) == 1 and task_count(2 * MIN_RECORDS_PER_TASK - 1, 32, 100_000, 8) == 1


@settings(max_examples=400, deadline=None)
@given(
    st.dictionaries(
        st.tuples(st.sampled_from("xy"), st.integers(0, 40)),
        st.tuples(st.integers(-1, 50_000), st.integers(0, 60_000)),
        max_size=40,
    ),
    st.integers(1, 200_000),
    st.integers(1, 64),
    st.one_of(st.none(), st.integers(6_000, 30_000)),  # at most 10 slices of a partition
)
def test_pack_ranges_with_task_slots_reads_each_range_whole_once(parts, records_per_task, min_tasks, per_partition):
    """Every planned range in exactly one task, whole (its offsets read in order by one
    consumer); slices of a partition (maxRecordsPerPartition) in different tasks, together
    exactly the partition's offsets; the task count as :func:`task_count` says, bounded."""
    start = {tp: s for tp, (s, _) in parts.items() if s >= 0}  # -1: a partition new in this batch
    end = {tp: max(s, 0) + n for tp, (s, n) in parts.items()}
    ranges = plan_ranges(start, end, per_partition)
    tasks = pack_ranges(ranges, records_per_task, min_tasks)
    packed = [r for t in tasks for r in t.ranges]
    assert sorted(packed, key=repr) == sorted(ranges, key=repr)
    for t in tasks:
        tps = [(r.topic, r.partition) for r in t.ranges]
        assert len(tps) == len(set(tps)), "a consumer holds a partition once"
    for tp in end:
        slices = sorted((r for r in packed if (r.topic, r.partition) == tp), key=lambda r: r.start)
        for a, b in zip(slices, slices[1:]):
            assert a.end == b.start  # no gap, no overlap: the processor's sort by offset restores the order
    if not ranges:
        assert tasks == []
        return
    total = sum(range_size(r) for r in ranges)
    most_per_tp = max(sum(1 for q in ranges if (q.topic, q.partition) == (r.topic, r.partition)) for r in ranges)
    assert len(tasks) == max(task_count(total, len(ranges), records_per_task, min_tasks), most_per_tp)
    assert len(tasks) >= min(min_tasks, len(ranges), total // MIN_RECORDS_PER_TASK)
    assert len(tasks) <= max(
        most_per_tp, min(len(ranges), max(-(-total // records_per_task), min(min_tasks, total // MIN_RECORDS_PER_TASK)))
    )
    if most_per_tp == 1 and total <= records_per_task and total < 2 * MIN_RECORDS_PER_TASK:
        assert len(tasks) == 1  # a small batch: one task, one consumer


def test_read_tick(tmp_path):
    f = tmp_path / "emission.tick"
    assert read_tick(None) == 0 and read_tick(str(f)) == 0  # no file
    f.write_text("")
    assert read_tick(str(f)) == 0  # not written completely
    f.write_text("7\n")
    assert read_tick(str(f)) == 7
    assert TICK_TP not in parse_offsets(format_offsets({("t", 0): 1}))


def test_lagging_partitions_from_the_query_progress():
    """Where a micro-batch stopped short of the end its planning saw (issue 23: snapshot
    windows wait there instead of expiring); Spark's progress gives JSON text."""
    end = json.dumps({"t": {"0": 5, "1": 9}, "u": {"0": 3}, "__cdc_tick__": {"0": 1}})
    latest = {"t": {"0": 5, "1": 12}, "u": {"0": 4}, "__cdc_tick__": {"0": 7}, "new": {"0": 2}, "empty": {"0": 0}}
    # "new" was never admitted (a topic new to the query, its markers held back by the
    # admission): behind too, so its snapshot windows wait instead of expiring
    assert lagging_partitions(end, latest) == {("t", 1), ("u", 0), ("new", 0)}
    assert lagging_partitions(end, json.dumps(latest)) == {("t", 1), ("u", 0), ("new", 0)}
    assert lagging_partitions(end, end) == set()
    assert lagging_partitions(json.dumps(format_offsets(parse_offsets(json.loads(end)))), latest) == {
        ("t", 1),
        ("u", 0),
        ("new", 0),
    }
    for unknown in (None, "null", "not json", 5):
        assert lagging_partitions(end, unknown) == set()
        assert lagging_partitions(unknown, latest) == set()


def test_the_end_probe_reads_only_partitions_whose_end_may_have_moved():
    """Issue 23: of 1,500 idle partitions none is read again; one the probe does not follow
    yet, one it did not read to its end, one whose broker end is past what it saw, and one
    whose end the broker does not tell (0 while a transaction is open) are."""
    tps = [(f"t{i}", p) for i in range(500) for p in range(3)]
    seen = {tp: 10 for tp in tps}
    ends = {tp: 10 for tp in tps}
    assert partitions_to_scan(tps, ends, seen, set()) == []
    ends[("t1", 0)] = 11  # a new record batch at offset 10 (the local broker: its base + 1)
    ends[("t2", 1)] = 0  # an open transaction
    del ends[("t3", 2)]  # not answered
    del seen[("t4", 0)]  # new to the probe
    unsettled = {("t5", 1)}
    assert partitions_to_scan(tps, ends, seen, unsettled) == [("t1", 0), ("t2", 1), ("t3", 2), ("t4", 0), ("t5", 1)]
    ends[("t6", 0)] = 9  # the broker's end lags what the probe saw: nothing new
    assert ("t6", 0) not in partitions_to_scan(tps, ends, seen, set())


def test_the_end_probe_settles_a_partition_at_its_end():
    """A partition read to EOF, or seen up to the broker's end, is settled; one read from
    just below the end where nothing came (a transaction marker) settles at the end on the
    second scan in a row; a capped one or one short of its end is read again."""
    a, b, c, d, e = [("t", p) for p in range(5)]
    ends = {a: 10, b: 10, c: 10, d: 10, e: 0}
    seen = {a: 7, b: 10, c: 9, d: 10, e: 3}
    quiet: dict = {}
    assert settle_scan([a, b, c, d, e], ends, seen, {a}, {d}, quiet) == {c, d, e}
    assert seen[c] == 9 and quiet == {c: 1}
    assert settle_scan([c], ends, seen, set(), set(), quiet) == set()
    assert seen[c] == 10
    # something came after one quiet scan: settled by what was seen, the count forgotten
    seen[c], quiet = 10, {c: 1}
    assert settle_scan([c], ends, seen, set(), set(), quiet) == set() and quiet == {}


def test_an_empty_partition_met_at_its_end_is_not_read_on_every_trigger():
    """Issue 23: an end of 0 tells nothing (an open transaction on the local broker), but a
    partition the probe met at its end (EOF) where it stands, with nothing since, is left
    alone and settled: the consumer says EOF once, so reading it on every trigger waited
    out the probe's idle pause each time."""
    empty, open_txn, moved_on = ("p", 0), ("t", 0), ("t", 1)
    tps = [empty, open_txn, moved_on]
    ends = {empty: 0, open_txn: 0, moved_on: 0}
    seen = {empty: 0, open_txn: 5, moved_on: 8}
    eof_at = {empty: 0, moved_on: 6}  # moved_on: records came after its EOF
    assert partitions_to_scan(tps, ends, seen, set(), eof_at) == [open_txn, moved_on]
    assert partitions_to_scan(tps, ends, seen, {empty}, eof_at) == tps  # unsettled: read anyway
    assert settle_scan(tps, ends, dict(seen), set(), set(), {}, eof_at) == {open_txn, moved_on}

"""merger.batch.order: a batch's records of a sharded source in an order that keeps every
partition's offsets and every shard's binlog order, checked against a model of the one
producer that wrote them (any interleaving of the shards' sends, any partitioning)."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from merger.batch.order import CUT, DATA, WINDOW, OrderConflict, Placed, shards_merged


@st.composite
def sends(draw):
    """What one producer sent: each shard's records in its binlog order (some with equal
    sequences, as a marker in every partition), interleaved any way, each to a partition."""
    shards = draw(st.integers(1, 4))
    partitions = draw(st.integers(1, 4))
    per_shard = [
        draw(st.lists(st.tuples(st.integers(0, 2), st.integers(0, partitions - 1)), max_size=12)) for _ in range(shards)
    ]
    queues = []
    for s, steps in enumerate(per_shard):
        seq, out = 0, []
        for step, partition in steps:
            seq += step  # 0: the same sequence again
            out.append((f"s{s}", seq, partition))
        queues.append(out)
    rnd = random.Random(draw(st.integers(0, 10**6)))
    sent = []
    while any(queues):
        q = rnd.choice([q for q in queues if q])
        sent.append(q.pop(0))
    offsets = [0] * partitions
    placed = []
    for shard, seq, partition in sent:
        placed.append(Placed(partition, offsets[partition], shard, seq))
        offsets[partition] += 1
    return placed


def respects(records, order) -> bool:
    last_offset, last_seq = {}, {}
    for i in order:
        r = records[i]
        if r.offset <= last_offset.get(r.partition, -1) or r.sequence < last_seq.get(r.shard, -1):
            return False
        last_offset[r.partition], last_seq[r.shard] = r.offset, r.sequence
    return True


@given(sends(), st.randoms())
def test_any_batch_of_one_producer_gets_an_order_of_its_partitions_and_shards(records, rnd):
    shuffled = list(records)
    rnd.shuffle(shuffled)  # as the batch hands them over: the order given does not matter
    order = shards_merged(shuffled)
    assert sorted(order) == list(range(len(shuffled)))
    assert respects(shuffled, order)


@given(sends())
def test_one_shard_is_binlog_order(records):
    one = [r._replace(shard="s") for r in records if r.shard == "s0"]
    order = shards_merged(one)
    assert [one[i].sequence for i in order] == sorted(r.sequence for r in one)


def test_the_order_of_sequences_alone_breaks_the_partitions():
    """What the one-server rule (sort by sequence) does to two shards: shard2's lower
    sequences go before shard1's records at lower offsets of the same partition."""
    records = [Placed(0, 0, "shard1", 900), Placed(0, 1, "shard2", 100), Placed(0, 2, "shard1", 950)]
    by_sequence = sorted(range(3), key=lambda i: records[i].sequence)
    assert not respects(records, by_sequence)
    assert shards_merged(records) == [0, 1, 2]


def test_a_crash_hole_gets_an_order_of_its_partitions():
    """Ingest's last transaction before a crash showed in partition 0 only (a2, then b1),
    the next run sent the lost ones again in another interleaving (b2, then a1): no order
    keeps both partitions and both shards. Data records give way, in partition order."""
    records = [
        Placed(0, 0, "a", 2),
        Placed(0, 1, "b", 1),
        Placed(1, 0, "b", 2),
        Placed(1, 1, "a", 1),
    ]
    order = shards_merged(records)
    assert sorted(order) == [0, 1, 2, 3]
    assert order.index(0) < order.index(1) and order.index(2) < order.index(3)


def test_markers_that_no_order_can_place_get_one_data_first_cuts_last():
    """Two crashes' worth of interleavings where only markers wait: one goes first anyway,
    a watermark marker before a truncate or DDL marker, and a data record before both."""
    records = [
        Placed(0, 0, "a", 2, CUT),
        Placed(0, 1, "b", 1),
        Placed(1, 0, "b", 2, WINDOW),
        Placed(1, 1, "a", 1),
    ]
    order = shards_merged(records)
    assert order == [2, 3, 0, 1]  # b's watermark marker first, then a1, a's cut, b1
    records[2] = records[2]._replace(spread=DATA)
    assert shards_merged(records) == [2, 3, 0, 1]
    records[0] = records[0]._replace(spread=DATA)
    records[2] = records[2]._replace(spread=CUT)
    assert shards_merged(records) == [0, 1, 2, 3]  # the data record a2 goes first


def test_a_replay_left_in_is_refused():
    """A partition's records of one shard that go down: a replay the filter let through."""
    records = [Placed(0, 0, "a", 5), Placed(0, 1, "a", 3), Placed(1, 0, "a", 4)]
    with pytest.raises(OrderConflict, match="replay left in"):
        shards_merged(records)


# -- an ingest crash on a broker that shows aborted records ---------------------------------


@st.composite
def crashed_sends(draw):
    """What the merger reads after ingest crashed once: run 1 sent each shard's records
    (data records to one partition, markers and truncates to every partition) in some
    interleaving; its committed transactions, a prefix of the sends, are delivered, and
    of the aborted rest each partition shows a prefix (the broker shows aborted records,
    a kill loses what was in flight). Run 2 resumes every shard after its committed
    records, in another interleaving. The replay filter (per partition and shard, at or
    below the highest taken) then drops what was shown twice."""
    shards = [f"s{s}" for s in range(draw(st.integers(1, 3)))]
    partitions = draw(st.integers(1, 3))
    per_shard = {}
    for shard in shards:
        seq, out = 0, []
        for _ in range(draw(st.integers(0, 8))):
            seq += 1
            spread = draw(st.sampled_from([DATA, DATA, DATA, WINDOW, CUT]))
            out.append((shard, seq, spread, None if spread != DATA else draw(st.integers(0, partitions - 1))))
        per_shard[shard] = out
    rnd = random.Random(draw(st.integers(0, 10**6)))

    def interleave(queues):
        queues = [list(q) for q in queues if q]
        sent = []
        while queues:
            q = rnd.choice(queues)
            sent.append(q.pop(0))
            queues = [q for q in queues if q]
        return sent

    def copies(sent):  # (partition, shard, seq, spread) in send order
        out = []
        for shard, seq, spread, partition in sent:
            targets = range(partitions) if partition is None else [partition]
            out.extend((p, shard, seq, spread) for p in targets)
        return out

    run1 = interleave(per_shard.values())
    committed = draw(st.integers(0, len(run1)))
    run1_copies = copies(run1)
    done = len(copies(run1[:committed]))
    shown = list(run1_copies[:done])
    for p in range(partitions):  # per partition, a prefix of the aborted rest
        rest = [c for c in run1_copies[done:] if c[0] == p]
        shown.extend(rest[: draw(st.integers(0, len(rest)))])
    resumed = {s: [r for r in per_shard[s] if r not in run1[:committed]] for s in shards}
    run2_copies = copies(interleave(resumed.values()))
    logs = {p: [c for c in shown if c[0] == p] + [c for c in run2_copies if c[0] == p] for p in range(partitions)}
    records, highest = [], {}
    for p, log in logs.items():
        for offset, (_, shard, seq, spread) in enumerate(log):
            if seq <= highest.get((p, shard), 0):
                continue  # the replay filter
            highest[(p, shard)] = seq
            records.append(Placed(p, offset, shard, seq, spread))
    return records


def keeps_what_the_merger_needs(records, order) -> bool:
    """Every partition's offsets, and every shard's sequences within a partition."""
    last_offset, last_seq = {}, {}
    for i in order:
        r = records[i]
        if r.offset <= last_offset.get(r.partition, -1) or r.sequence < last_seq.get((r.partition, r.shard), -1):
            return False
        last_offset[r.partition], last_seq[(r.partition, r.shard)] = r.offset, r.sequence
    return True


def shard_order_given_way(records, order) -> list:
    """Where the order puts a record before a lower one of its shard: (its spread, whether
    every partition's next record waited at that point, as it must for any to give way)."""
    out, taken = [], set()
    for at, i in enumerate(order):
        r = records[i]
        lower = [j for j, o in enumerate(records) if o.shard == r.shard and o.sequence < r.sequence and j not in taken]
        if lower:
            heads = {}
            for j, o in enumerate(records):
                if j not in taken and (o.partition not in heads or o.offset < records[heads[o.partition]].offset):
                    heads[o.partition] = j
            lowest = {}
            for j, o in enumerate(records):
                if j not in taken:
                    lowest[o.shard] = min(lowest.get(o.shard, o.sequence), o.sequence)
            all_wait = all(records[j].sequence != lowest[records[j].shard] for j in heads.values())
            waiting_spreads = sorted(records[j].spread for j in heads.values())
            out.append((r.spread, all_wait, r.spread == waiting_spreads[0]))
        taken.add(i)
    return out


@given(crashed_sends(), st.randoms())
def test_a_crash_with_aborted_records_shown_gets_an_order(records, rnd):
    shuffled = list(records)
    rnd.shuffle(shuffled)
    order = shards_merged(shuffled)
    assert sorted(order) == list(range(len(shuffled)))
    assert keeps_what_the_merger_needs(shuffled, order)
    # a shard's order gives way only where every partition waits, and then the least spread first
    assert all(all_wait and least for _, all_wait, least in shard_order_given_way(shuffled, order))


def test_the_strict_order_is_refused_by_such_a_crash():
    """The model above makes the case the strict rule (every shard's order between all its
    records) refuses: run 1's a2 shown in partition 0 only, with b1 after it; run 2 sends
    b2 then a1 to partition 1."""
    records = [Placed(0, 0, "a", 2), Placed(0, 1, "b", 1), Placed(1, 0, "b", 2), Placed(1, 1, "a", 1)]
    assert not any(respects(records, list(order)) for order in itertools.permutations(range(4)))
    order = shards_merged(records)
    assert keeps_what_the_merger_needs(records, order)
    assert [spread for spread, _, _ in shard_order_given_way(records, order)] == [DATA]


def test_a_marker_never_goes_before_a_lower_change_of_its_shard():
    """A marker of shard a (sequence 3) in both partitions; a's change 2 waits in partition
    1 behind b's change, which waits for b's change in partition 0 behind the marker."""
    records = [
        Placed(0, 0, "a", 3, CUT),
        Placed(0, 1, "b", 1),
        Placed(1, 0, "b", 2),
        Placed(1, 1, "a", 2),
        Placed(1, 2, "a", 3, CUT),
    ]
    order = shards_merged(records)
    assert keeps_what_the_merger_needs(records, order)
    assert order.index(3) < order.index(0)  # b2 gives way, not a's truncate


def test_where_each_record_acts():
    from cdc.wire.headers import DDL_HEADER, WATERMARK_HEADER
    from merger.batch.records import ParsedRecord
    from merger.sources.sharded_topics import spread_of

    def rec(headers, payload):
        return ParsedRecord({"partition": 0, "offset": 0}, headers, payload, None)

    assert spread_of(rec({WATERMARK_HEADER: b"{}"}, {"op": "c"})) == WINDOW
    assert spread_of(rec({}, {"op": "m"})) == WINDOW
    assert spread_of(rec({DDL_HEADER: b"{}"}, {})) == CUT
    assert spread_of(rec({}, {"op": "t"})) == CUT
    assert all(spread_of(rec({}, {"op": op})) == DATA for op in "cudr")


# -- one server: binlog order (``binlog_order``, ``by_sequence``) --------------------------


def _parsed(partition, offset, position=None):
    from merger.batch.records import ParsedRecord

    return ParsedRecord({"partition": partition, "offset": offset}, {}, {"op": "c"}, position)


def test_one_servers_records_go_by_sequence_then_partition():
    from cdc.wire.position import EventPosition
    from merger.batch.order import binlog_order, by_sequence

    later = _parsed(0, 0, EventPosition("b.000002", 4))
    early_p1 = _parsed(1, 5, EventPosition("b.000001", 900))
    early_p0 = _parsed(0, 1, EventPosition("b.000001", 900))
    bare = _parsed(2, 7)  # no position: first, and its place in its binlog is its offset
    assert binlog_order(later) == EventPosition("b.000002", 4).sequence()
    assert binlog_order(bare) == 7
    assert by_sequence([later, early_p1, bare, early_p0]) == [bare, early_p0, early_p1, later]
    assert by_sequence([]) == []

"""merger.batch_order: a batch's records of a sharded source in an order that keeps every
partition's offsets and every shard's binlog order, checked against a model of the one
producer that wrote them (any interleaving of the shards' sends, any partitioning)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from merger.batch_order import OrderConflict, Placed, shards_merged


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


def test_records_no_one_producer_could_write_are_refused():
    """A replay left in (a shard's record again, after the other shard's): no order exists."""
    records = [
        Placed(0, 0, "a", 2),
        Placed(0, 1, "b", 1),
        Placed(1, 0, "b", 2),
        Placed(1, 1, "a", 1),
    ]
    with pytest.raises(OrderConflict):
        shards_merged(records)

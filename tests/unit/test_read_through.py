"""Positional windows' read-through targets (merger.batch.read_through) and the positions
they are made of (merger.mysql.positions): pure rules, checked against a direct model."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc.wire.position import EventPosition
from cdc.wire.resume_point import ResumePoint
from merger.batch.read_through import ReadThroughTargets
from merger.mysql.positions import BinlogPoint, committed_of, other_server

ends_st = st.dictionaries(st.integers(0, 3), st.integers(0, 50), min_size=1, max_size=4)


@settings(max_examples=300, deadline=None)
@given(
    targets=st.lists(st.tuples(st.integers(0, 10**6), ends_st), min_size=1, max_size=5),
    reads=st.lists(st.dictionaries(st.integers(0, 3), st.integers(0, 60), max_size=4), min_size=1, max_size=6),
)
def test_a_partition_is_read_through_once_the_reader_passed_the_targets_end(targets, reads):
    """Each (target, partition) is reported exactly once, at the first read whose offset in
    that partition is at or past the target's end (a partition not read yet: offset 0);
    a target reached everywhere is dropped. The reader's offsets only grow."""
    tracked = ReadThroughTargets()
    for sequence, ends in targets:
        tracked.add(sequence, ends)
    consumed: dict[int, int] = {}
    reported: list[tuple[int, int]] = []
    expected: list[tuple[int, int]] = []
    done: set[tuple[int, int]] = set()
    for read in reads:
        for p, o in read.items():
            consumed[p] = max(consumed.get(p, 0), o)
        reported += tracked.passed(dict(consumed))
        for i, (sequence, ends) in enumerate(targets):
            for p, end in ends.items():
                if (i, p) not in done and consumed.get(p, 0) >= end:
                    done.add((i, p))
                    expected.append((p, sequence))
    assert sorted(reported) == sorted(expected)
    assert len(tracked) == sum(1 for i, (_, ends) in enumerate(targets) if any((i, p) not in done for p in ends))


def test_a_target_needs_ints():
    with pytest.raises(ValueError):
        ReadThroughTargets().add("5", {0: 1})
    with pytest.raises(ValueError):
        ReadThroughTargets().add(5, {0: -1})


def test_a_point_orders_with_the_events_around_it():
    """LOW or HIGH at (file, pos): every row of an event that ended at or before pos sorts
    below it (a rows event's rows lie inside it: pos + row < its end), every event that
    starts at or after pos sorts at or above it; across files and epochs too."""
    point = BinlogPoint(1, "binlog.000007", 5000)
    seq = point.sequence(epoch=2)
    before = EventPosition("binlog.000007", 4000, row=900, epoch=2)  # a 1000-byte event ending at 5000
    assert before.sequence() < seq
    assert EventPosition("binlog.000007", 5000, epoch=2).sequence() == seq
    assert EventPosition("binlog.000006", 10**9, epoch=2).sequence() < seq
    assert EventPosition("binlog.000008", 4, epoch=2).sequence() > seq
    assert EventPosition("binlog.000001", 4, epoch=3).sequence() > seq
    # HIGH - 1 sorts below an event at HIGH and above every event before it
    assert EventPosition("binlog.000007", 4999, epoch=2).sequence() <= seq - 1 < seq


def test_ingests_committed_position_as_a_sequence():
    assert committed_of(None) is None
    assert committed_of(ResumePoint("0-1-5")) is None  # no binlog position yet
    c = committed_of(ResumePoint("0-1-5", "binlog.000007", 5000, server_id=1, epoch=2))
    assert (c.server_id, c.epoch) == (1, 2)
    assert c.sequence == BinlogPoint(1, "binlog.000007", 5000).sequence(2)
    # an older commit without an epoch is epoch 0
    assert committed_of(ResumePoint("0-1-5", "binlog.000007", 5000, epoch=None)).epoch == 0


def test_positions_of_another_server_do_not_compare():
    c = committed_of(ResumePoint("0-1-5", "binlog.000007", 5000, server_id=1))
    assert other_server(BinlogPoint(1, "binlog.000001", 4), c) is None
    why = other_server(BinlogPoint(2, "binlog.000001", 4), c)
    assert why is not None and "server_id 2" in why and "server_id 1" in why
    # an ingest that did not stamp its server (older commits): nothing to compare
    assert other_server(BinlogPoint(2, "b.000001", 4), committed_of(ResumePoint("", "b.000001", 9))) is None


def test_positions_need_our_ingests_topics_and_one_server():
    from pydantic import ValidationError

    from cdc.config import MergerConfig

    assert MergerConfig(snapshot={"watermarks": "positions"}).snapshot.watermarks == "positions"
    with pytest.raises(ValidationError, match="needs the topics of our ingest"):
        MergerConfig(snapshot={"watermarks": "positions"}, source_connector="debezium", signal_table="a.b")
    with pytest.raises(ValidationError, match="sharded source"):
        MergerConfig(
            snapshot={"watermarks": "positions"},
            shards=[{"name": "s1", "mysql": {"port": 1}}, {"name": "s2", "mysql": {"port": 2}}],
        )
    with pytest.raises(ValidationError, match="verify.continuous writes"):
        MergerConfig(snapshot={"watermarks": "positions"}, verify={"continuous": {"chunks_per_minute": 6}})
    with pytest.raises(ValidationError):
        MergerConfig(snapshot={"watermarks": "markers"})

"""The position every record carries and the replay rule (``cdc.wire.position``): exact
edges a mutation run (scripts/mutation.sh) found open, against a plain model of the rule."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdc.wire.position import (
    EPOCH_SHIFT,
    FILE_SHIFT,
    MAX_EPOCH,
    MAX_FILE_NUMBER,
    POSITION_LIMIT,
    EventPosition,
    ReplayFilter,
    position_bytes,
)

# -- the replay filter against its model -------------------------------------------------


def _model(records):
    """Accept a record whose (position, tombstone) is above the highest taken in its
    (topic, partition, shard): a tombstone sorts just after its own delete."""
    highest, out = {}, []
    for topic, partition, pos, tomb in records:
        if pos is None:
            out.append(True)
            continue
        key = (topic, partition, pos.shard)
        new = key not in highest or (pos, tomb) > highest[key]
        out.append(new)
        if new:
            highest[key] = (pos, tomb)
    return out


RECORDS = st.lists(
    st.tuples(
        st.sampled_from(["t", "u"]),
        st.integers(0, 1),
        st.one_of(
            st.none(),
            st.builds(
                EventPosition,
                st.sampled_from(["b.000001", "b.000002"]),
                st.integers(4, 6),
                st.integers(0, 1),
                st.integers(0, 1),
                st.integers(0, 1),
                st.sampled_from(["", "s1"]),
            ),
        ),
        st.booleans(),
    ),
    max_size=40,
)


@given(RECORDS)
def test_the_filter_is_its_model(records):
    f = ReplayFilter()
    assert [f.accept(t, p, pos, tomb) for t, p, pos, tomb in records] == _model(records)


def test_a_tombstone_is_taken_once_after_its_delete_never_before_it():
    d = EventPosition("b.000001", 100)
    f = ReplayFilter()
    assert f.accept("t", 0, d, True)  # a tombstone first: its delete is a replay after it
    assert not f.accept("t", 0, d, False)
    assert not f.accept("t", 0, d, True)
    g = ReplayFilter()
    assert g.accept_record("t", 0, d, {"op": "d"})
    assert g.highest[("t", 0, "")] == (d, False)
    assert g.accept_record("t", 0, d, None)
    assert g.highest[("t", 0, "")] == (d, True)
    assert not g.accept_record("t", 0, d, {"op": "d"})
    assert g.accept_record("t", 0, EventPosition("b.000001", 101), {"op": "c"})
    assert g.highest[("t", 0, "")] == (EventPosition("b.000001", 101), False)


def test_records_without_a_position_are_taken_and_change_nothing():
    f = ReplayFilter()
    assert f.accept("t", 0, None, False) and f.accept_record("t", 0, None, None)
    assert f.highest == {}


# -- the position ------------------------------------------------------------------------


def test_the_sequence_layout():
    assert (FILE_SHIFT, EPOCH_SHIFT) == (33, 53)
    assert EventPosition("b.000001", 0).sequence() == 1 << FILE_SHIFT
    assert EventPosition("b.000003", 10, 2, 1, 5).sequence() == (5 << 53) | (3 << 33) | (12 << 1) | 1
    assert EventPosition("no-number", 4).sequence() == 8  # a file without a number counts as 0
    no_number = EventPosition("no-number", 4)
    assert no_number.checked() is no_number
    assert EventPosition("b.000001", 4, 0, 0, 0, "s1").sequence() == EventPosition("b.000001", 4).sequence()


def test_the_edges_of_what_the_sequence_orders():
    top = EventPosition(f"b.{MAX_FILE_NUMBER}", POSITION_LIMIT - 2, 1, 1, MAX_EPOCH)
    assert top.checked() is top and 0 < top.sequence() < 2**63
    assert EventPosition("b.000001", 0, 0, 0, 0).checked().sequence() > 0
    for bad, message in [
        (EventPosition(f"b.{MAX_FILE_NUMBER + 1}", 4), f"^binlog position b.{MAX_FILE_NUMBER + 1}: file number beyond"),
        (EventPosition("b.000001", 4, epoch=MAX_EPOCH + 1), f"^position epoch {MAX_EPOCH + 1} outside 0..{MAX_EPOCH}$"),
        (EventPosition("b.000001", 4, epoch=-1), "^position epoch -1 outside"),
        (EventPosition("b.000001", POSITION_LIMIT - 1, 1), r"^binlog position b.000001:4294967295:1:0 out of range"),
        (EventPosition("b.000001", 4, 0, -1), "out of range"),
    ]:
        with pytest.raises(ValueError, match=message):
            bad.sequence()
        with pytest.raises(ValueError, match=message):
            bad.checked()


def test_positions_order_by_epoch_then_file_number_then_place():
    assert EventPosition("b.000009", 900) < EventPosition("b.000010", 4)  # by number, not by text
    assert EventPosition("b.000010", 4, epoch=0) < EventPosition("b.000001", 4, epoch=1)
    assert EventPosition("b.000001", 4, 0, 0) < EventPosition("b.000001", 4, 0, 1)
    assert EventPosition("zzz", 900) < EventPosition("b.000001", 4)  # no number sorts first
    assert EventPosition("b.000001", 4).key() == ("", 0, 1, "b.000001", 4, 0, 0)
    assert EventPosition("x", 4, shard="s").key() == ("s", 0, -1, "x", 4, 0, 0)


@pytest.mark.parametrize(
    "text, position",
    [
        ("b.000001:4", EventPosition("b.000001", 4)),
        ("b.000001:4:2", EventPosition("b.000001", 4, 2)),
        ("b.000001:4:2:1", EventPosition("b.000001", 4, 2, 1)),
        ("b.000001:4:2:0:7", EventPosition("b.000001", 4, 2, 0, 7)),
        ("b.000001:4:2:0:7@a@b", EventPosition("b.000001:4:2:0:7@a", 0) if False else None),
        (b"b.000001:4:0@s-1", EventPosition("b.000001", 4, shard="s-1")),
    ],
)
def test_header_texts_decode(text, position):
    if position is None:  # the shard is what follows the last "@"
        with pytest.raises(ValueError, match="not a binlog position"):
            EventPosition.decode(text)
        return
    assert EventPosition.decode(text) == position


@pytest.mark.parametrize(
    "text",
    ["b.000001", "b.000001:", "b.000001:4:2:0:7:9", ":4", "b.000001:4:x", "b.000001:4@", "b.000001:4:0:2"],
)
def test_what_is_not_a_header_is_refused(text):
    with pytest.raises(ValueError, match="not a binlog position|out of range"):
        EventPosition.decode(text)


def test_a_refusal_quotes_at_most_100_characters():
    with pytest.raises(ValueError) as refused:
        EventPosition.decode("x" * 300)
    assert str(refused.value).endswith(repr("x" * 100))


def test_header_forms():
    assert position_bytes("b.000001", 4, 2, 0, 7) == b"b.000001:4:2:0:7"
    assert position_bytes("b.000001", 4, 2, 1, 0) == b"b.000001:4:2:1"
    assert position_bytes("b.000001", 4, 2, 1, 0, "s") == b"b.000001:4:2:1@s"
    assert EventPosition("b.000001", 4, 2, 1, 7, "s").encode() == b"b.000001:4:2:1:7@s"

"""The append-only change log (``merger.history.changelog``): one row per change, replays
dropped by sequence per key."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from merger.history.change import Change
from merger.history.changelog import AFTER, BEFORE_AFTER, LogRow, appended_rows


def test_one_row_per_change_with_before_and_after():
    changes = [
        Change((1,), "c", 10, 100, {"id": 1, "v": "a"}),
        Change((1,), "u", 20, 200, {"id": 1, "v": "b"}, before={"id": 1, "v": "a"}),
        Change((1,), "d", 30, 300, None, before={"id": 1, "v": "b"}),
    ]
    out = appended_rows({}, changes)
    assert out.rows == [
        LogRow((1,), "c", 10, 100, {"id": 1, "v": "a"}, None),
        LogRow((1,), "u", 20, 200, {"id": 1, "v": "b"}, {"id": 1, "v": "a"}),
        LogRow((1,), "d", 30, 300, None, {"id": 1, "v": "b"}),
    ]
    assert out.last == {(1,): 30}


def test_mode_after_leaves_the_before_image_out():
    change = Change((1,), "u", 20, 200, {"id": 1, "v": "b"}, before={"id": 1, "v": "a"})
    (row,) = appended_rows({}, [change], AFTER).rows
    assert row.before is None and row.after == {"id": 1, "v": "b"}


def test_replays_are_dropped_per_key():
    changes = [Change((1,), "c", 10, 0, {"id": 1}), Change((2,), "c", 15, 0, {"id": 2})]
    first = appended_rows({}, changes)
    assert appended_rows(first.last, changes).rows == []
    # key 1's change at 10 was appended, key 2's at 12 was not (the sequence is per key)
    again = appended_rows({(1,): 10}, [Change((1,), "u", 10, 0, {"id": 1}), Change((2,), "c", 12, 0, {"id": 2})])
    assert [(r.key, r.sequence) for r in again.rows] == [((2,), 12)]


def test_a_batch_is_appended_in_sequence_order_and_a_repeat_in_it_once():
    c = Change((1,), "c", 10, 0, {"id": 1})
    u = Change((1,), "u", 20, 0, {"id": 1})
    out = appended_rows({}, [u, c, u])
    assert [r.sequence for r in out.rows] == [10, 20]


def test_a_truncate_is_one_row_and_a_replay_of_it_is_dropped():
    t = Change((), "t", 50, 500)
    out = appended_rows({}, [t])
    assert out.rows == [LogRow((), "t", 50, 500, None, None)]
    assert appended_rows(out.last, [t]).rows == []


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="before_after, after"):
        appended_rows({}, [], "both")


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.lists(st.tuples(st.integers(0, 3), st.sampled_from("cudr")), max_size=30),
    st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), max_size=8),
)
def test_every_change_appears_once_in_order_whatever_the_replays(history, replays):
    changes = [Change((k,), op, 10 * (i + 1), i, None if op == "d" else {"id": k}) for i, (k, op) in enumerate(history)]
    last: dict = {}
    log: list[LogRow] = []
    delivered = 0
    for a, b in replays:  # each batch: an earlier range again, then new changes
        end = min(len(changes), delivered + b)
        out = appended_rows(last, changes[min(a, delivered) : end], BEFORE_AFTER)
        log += out.rows
        last, delivered = out.last, end
    log += appended_rows(last, changes[delivered:]).rows
    assert [(r.key, r.sequence) for r in log] == [(c.key, c.sequence) for c in changes]


def test_a_change_at_sequence_0_is_appended():
    """A Kafka offset (topics Debezium wrote) starts at 0: the first change is not a replay."""
    first = appended_rows({}, [Change((1,), "c", 0, 0, {"id": 1})])
    assert [r.sequence for r in first.rows] == [0] and first.last == {(1,): 0}
    assert appended_rows(first.last, [Change((1,), "c", 0, 0, {"id": 1})]).rows == []

"""The key ranges a Delta MERGE filters its target with: every key of the batch inside
them (else a match would be lost and an update become a second row), few of them, split
where the keys are furthest apart."""

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from merger.sinks.key_ranges import key_ranges, range_filter

INT64 = st.integers(-(2**63), 2**63 - 1)


@given(values=st.lists(INT64, min_size=1, max_size=200), max_ranges=st.integers(1, 20))
def test_ranges_hold_every_key_ascending_disjoint_and_few(values, max_ranges):
    ranges = key_ranges(pa.array(values, pa.int64()), max_ranges)
    assert 1 <= len(ranges) <= max_ranges
    for v in values:
        assert any(lo <= v <= hi for lo, hi in ranges), v
    distinct = set(values)
    for lo, hi in ranges:
        assert lo <= hi and lo in distinct and hi in distinct
    for (_, hi), (lo, _) in zip(ranges, ranges[1:]):
        assert lo - hi > 1  # ascending, disjoint, never split between consecutive keys


@given(values=st.lists(st.integers(0, 10**6), min_size=2, max_size=100, unique=True))
def test_split_at_the_widest_gap(values):
    ranges = key_ranges(pa.array(values, pa.int64()), 2)
    ordered = sorted(values)
    gaps = [b - a for a, b in zip(ordered, ordered[1:])]
    if max(gaps) <= 1:
        assert ranges == [(ordered[0], ordered[-1])]
    else:
        (_, hi), (lo, _) = ranges
        assert lo - hi == max(gaps)


def test_clusters_of_an_update_and_insert_batch():
    keys = pa.chunked_array([list(range(100, 350)), list(range(20_001, 20_251))])
    assert key_ranges(keys) == [(100, 349), (20_001, 20_250)]
    expected = "((t.`id` >= 100 AND t.`id` <= 349) OR (t.`id` >= 20001 AND t.`id` <= 20250))"
    assert range_filter(keys, "t.`id`") == expected


def test_unsigned_and_extreme_keys():
    assert key_ranges(pa.array([0, 2**64 - 1, 1], pa.uint64())) == [(0, 1), (2**64 - 1, 2**64 - 1)]
    assert key_ranges(pa.array([2**63 - 1, -(2**63)], pa.int64())) == [(-(2**63), -(2**63)), (2**63 - 1, 2**63 - 1)]


def test_no_filter_for_other_key_types_or_nulls():
    assert range_filter(pa.array(["a", "b"]), "t.k") is None
    assert range_filter(pa.array([1, None]), "t.k") is None
    assert range_filter(pa.array([], pa.int32()), "t.k") is None

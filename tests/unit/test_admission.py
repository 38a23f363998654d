"""The micro-batch admission by memory (merger/kafka/admission.py), against its plain rules."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from merger.kafka.admission import (
    BYTES_FACTOR,
    FALL,
    RECORD_OVERHEAD,
    UNKNOWN_SHARE,
    admit,
    batch_cost,
    learn,
    observed_sizes,
    record_bytes,
    record_cost,
)
from merger.kafka.limits import allocate_limit
from merger.kafka.offsets import plan_end, read_record_sizes

MB = 1024 * 1024

partitions = st.dictionaries(
    st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 3)),
    st.integers(0, 2_000),
    min_size=1,
    max_size=8,
)


@settings(max_examples=300, deadline=None)
@given(
    partitions,
    st.data(),
    st.integers(1, 400 * MB),
    st.one_of(st.none(), st.integers(1, 5_000)),
    st.integers(0, 50),
)
def test_admit_fits_the_budget_never_exceeds_what_is_there_and_always_moves(available, data, budget, max_rows, rotate):
    costs = {tp: data.draw(st.floats(RECORD_OVERHEAD, 64 * MB)) for tp in available}
    got = admit(available, costs, budget, max_rows, rotate)
    assert set(got) == set(available)
    assert all(0 <= got[tp] <= available[tp] for tp in available)
    total = sum(got.values())
    if max_rows is not None:
        assert total <= max_rows
    if sum(available.values()) > 0:
        assert total >= 1  # progress, even when one record is over the budget
    assert batch_cost(got, costs) <= budget or total == 1
    wanted = allocate_limit(available, max_rows if max_rows is not None else 10**9, rotate)
    assert all(got[tp] <= wanted[tp] for tp in available)  # max_rows's split, cut
    if batch_cost(wanted, costs) <= budget:
        assert got == wanted  # the budget cuts only when it must
    else:
        # max-min fair in memory, to one record: one more record of a partition cut short
        # would take it over the memory of every other partition less one of its records
        # (unless only the progress rule moved)
        forced = total == 1
        for tp in (tp for tp in available if got[tp] < wanted[tp] and not forced):
            assert all((got[tp] + 1) * costs[tp] > (got[o] - 1) * costs[o] for o in available)
        # the level's rounding leaves no partition without a record the budget's rest pays for
        if not forced:
            for tp in (tp for tp in available if got[tp] == 0 and wanted[tp] > 0):
                assert batch_cost(got, costs) + costs[tp] > budget


def test_admit_shares_the_budget_so_wide_rows_do_not_hold_back_narrow_ones():
    small, wide = ("small", 0), ("wide", 0)
    costs = {small: 10_000.0, wide: 1_000_000.0}
    # 5 wide (5 MB) + 100 small (1 MB) > 4 MB: the small ones all fit in their share (2 MB),
    # the wide ones get the rest (3 MB)
    got = admit({small: 100, wide: 5}, costs, 4_000_000, None)
    assert got == {small: 100, wide: 3}
    assert admit({small: 100, wide: 5}, costs, 4_000_000, None) == got  # the same plan again (replays)
    # both over their share: each gets what half the budget pays for
    assert admit({small: 1000, wide: 50}, costs, 4_000_000, None) == {small: 200, wide: 2}
    assert admit({wide: 5}, costs, 10, None) == {wide: 1}  # one record over the budget goes alone
    two = {**costs, ("wide", 1): 1_000_000.0}
    assert admit({wide: 5, ("wide", 1): 5}, two, 10, None, rotate=1) == {wide: 0, ("wide", 1): 1}
    assert admit({wide: 0}, costs, 10, None) == {wide: 0}
    assert admit({small: 100, wide: 5}, costs, 4_000_000, 10) == {small: 5, wide: 3}  # max_rows first


def test_hundreds_of_new_topics_get_as_many_records_as_the_budget_pays_for():
    """Issue 23: 600 partitions of new topics (200 tables, 3 partitions each, holding only
    watermark markers) at budget / UNKNOWN_SHARE per record. The level gives each 0 records;
    a batch must still take UNKNOWN_SHARE of them (it took one), round-robin over batches."""
    budget = 512 * MB
    available = {(f"t{i:03d}", p): 2 for i in range(200) for p in range(3)}
    costs = {tp: record_cost(None, budget) for tp in available}
    taken: dict = {}
    for batch in range(2 * len(available) // UNKNOWN_SHARE + 2):
        rotate = sum(taken.values())
        got = admit({tp: available[tp] - taken.get(tp, 0) for tp in available}, costs, budget, None, rotate)
        if sum(available.values()) - sum(taken.values()) >= UNKNOWN_SHARE:
            assert sum(got.values()) == UNKNOWN_SHARE, batch
        assert batch_cost(got, costs) <= budget
        for tp, n in got.items():
            taken[tp] = taken.get(tp, 0) + n
    assert taken == available  # every marker read within 2 * 600 / 64 + 2 batches


def test_record_cost_of_a_known_and_a_new_topic():
    assert record_cost(1000, 512 * MB) == RECORD_OVERHEAD + BYTES_FACTOR * 1000
    assert record_cost(None, 512 * MB) == 512 * MB / UNKNOWN_SHARE  # a new topic: a few records first
    assert record_cost(None, 16 * MB) == max(16 * MB / UNKNOWN_SHARE, RECORD_OVERHEAD)


def test_learn_rises_at_once_and_falls_slowly():
    est = learn({}, {"t": (10, 10_000)})
    assert est == {"t": 1000}
    assert learn(est, {"t": (2, 200_000)})["t"] == 100_000  # wider rows: at once
    narrower = learn(est, {"t": (10, 1_000)})["t"]
    assert narrower == 1000 - FALL * (1000 - 100)  # narrower: a quarter of the way
    assert learn(est, {"u": (0, 0)}) == est  # nothing seen, nothing learned
    assert learn(est, {"u": (4, 40)}) == {"t": 1000, "u": 10}


def test_observed_sizes_counts_keys_and_values_per_topic():
    records = [
        {"key": b"k1", "value": b"x" * 100, "topic": "a", "headers": {"pos": b"1"}},
        {"key": b"k22", "value": None, "topic": "a", "headers": {}},
        {"key": None, "value": b"y" * 10, "topic": "b", "headers": {"pos": b"2", "wm": b"x"}},
        {"key": b"k", "value": b"z", "topic": "b", "headers": None},
    ]
    assert observed_sizes(records) == {"a": (2, 2 + 100 + 3), "b": (2, 10 + 1 + 1)}
    assert observed_sizes([]) == {}
    assert observed_sizes(records, skip_headers=("wm",)) == {"a": (2, 2 + 100 + 3), "b": (1, 1 + 1)}
    assert observed_sizes(records[2:3], skip_headers=("wm",)) == {}  # only a marker: nothing learned
    # headers with a repeated name come as the list of pairs
    repeated = [{"key": b"k", "value": b"v", "topic": "c", "headers": [{"key": "wm", "value": b"1"}] * 2}]
    assert observed_sizes(repeated, skip_headers=("wm",)) == {}
    assert observed_sizes(repeated, skip_headers=("other",)) == {"c": (1, 2)}
    assert sum(map(record_bytes, records)) == 2 + 100 + 3 + 10 + 1 + 1


def test_plan_end_with_costs_admits_from_base(tmp_path):
    base = {("a", 0): 10, ("b", 0): 0}
    latest = {("a", 0): 110, ("b", 0): 50}
    costs = {("a", 0): 1.0, ("b", 0): 1.0}
    assert plan_end(base, latest, None, costs, 1_000) == latest  # all fits
    end = plan_end(base, latest, None, costs, 20)
    assert end == {("a", 0): 20, ("b", 0): 10}  # 20 records, split fairly
    assert plan_end(base, latest, 8, costs, 1_000) == {("a", 0): 14, ("b", 0): 4}


def test_read_record_sizes(tmp_path):
    path = tmp_path / "record-sizes.json"
    assert read_record_sizes(str(path)) == {}
    path.write_text(json.dumps({"t": 120.5, "u": 3, "bad": "x", "neg": -1}))
    assert read_record_sizes(str(path)) == {"t": 120.5, "u": 3.0}
    path.write_text("{trunc")
    assert read_record_sizes(str(path)) == {}
    assert read_record_sizes(None) == {}

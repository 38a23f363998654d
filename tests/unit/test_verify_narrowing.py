"""merger/verify/narrowing.py: a differing chunk narrowed by sub-range digests, against a
model table pair (the source's and the sink's rows, by key) with random differences."""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from merger.verify.narrowing import decide, narrow, parts, step_for


@dataclass(frozen=True)
class D:
    rows: int
    total: int


def in_range(keys, rng):
    lo, hi = rng
    return [k for k in keys if (lo is None or k >= lo) and (hi is None or k < hi)]


class Model:
    """Two tables, key -> value; digests and cuts computed the way the SQL does."""

    def __init__(self, source: dict, sink: dict):
        self.source, self.sink = source, sink
        self.source_keys = sorted(source)
        self.measured = 0
        self.cut_calls = 0

    def digest(self, table: dict, rng) -> D:
        keys = in_range(table, rng)
        return D(len(keys), sum(hash((k, table[k])) for k in keys) & (2**64 - 1))

    def measure(self, ranges):
        self.measured += len(ranges)
        return [(self.digest(self.source, r), self.digest(self.sink, r)) for r in ranges]

    def cut(self, items):
        self.cut_calls += 1
        out = []
        for (lo, hi), step in items:
            a = 0 if lo is None else bisect.bisect_left(self.source_keys, lo)
            b = len(self.source_keys) if hi is None else bisect.bisect_left(self.source_keys, hi)
            ranges = parts((lo, hi), self.source_keys[a:b][step::step])
            out.append([(r, *d) for r, d in zip(ranges, self.measure(ranges))])
        return out

    def differing(self) -> set:
        keys = set(self.source) | set(self.sink)
        return {k for k in keys if self.source.get(k, object()) != self.sink.get(k, object())}


@st.composite
def table_pairs(draw):
    keys = draw(st.lists(st.integers(-500, 5000), unique=True, max_size=600))
    source = {k: k * 7 % 13 for k in keys}
    sink = dict(source)
    for k in draw(st.lists(st.sampled_from(keys), max_size=8)) if keys else []:
        op = draw(st.sampled_from(["change", "drop"]))
        if op == "change":
            sink[k] = -1 - sink.get(k, 0)
        else:
            sink.pop(k, None)
    for k in draw(st.lists(st.integers(-600, 5100), max_size=5)):
        sink.setdefault(k, 99)  # extra in the sink (or unchanged when the source holds it)
    return source, sink


def run(model: Model, root, leaf_rows, fanout, max_depth=6):
    src, dst = model.measure([root])[0]
    return narrow([(root, src, dst)], model.cut, leaf_rows=leaf_rows, fanout=fanout, max_depth=max_depth)


@settings(max_examples=300, deadline=None)
@given(
    table_pairs(),
    st.sampled_from([(None, None), (0, None), (None, 2500), (100, 3000)]),
    st.integers(1, 40),
    st.integers(2, 9),
)
def test_the_leaves_hold_exactly_the_differing_keys_and_the_settled_parts_none(pair, root, leaf_rows, fanout):
    model = Model(*pair)
    found = run(model, root, leaf_rows, fanout, max_depth=64)
    want = {k for k in model.differing() if in_range([k], root)}
    in_leaves = set()
    for leaf in found.leaves:
        in_leaves |= {k for k in model.differing() if in_range([k], leaf)}
    assert in_leaves == want  # every differing key is compared by rows
    for rng, d in found.settled:
        assert not {k for k in model.differing() if in_range([k], rng)}
        assert d == model.digest(model.source, rng)
    # the settled parts and the leaves partition the root: every source row counted once
    covered = [k for rng in [*found.leaves, *(r for r, _ in found.settled)] for k in in_range(model.source_keys, rng)]
    assert sorted(covered) == in_range(model.source_keys, root)
    # a leaf is small, or holds one source row (no key to cut it at)
    for leaf in found.leaves:
        rows = len(in_range(model.source_keys, leaf))
        assert rows <= 1 or max(rows, len(in_range(model.sink, leaf))) <= leaf_rows


@settings(max_examples=100, deadline=None)
@given(table_pairs(), st.integers(1, 40), st.integers(2, 9), st.integers(0, 3))
def test_a_depth_limit_only_makes_leaves_larger(pair, leaf_rows, fanout, max_depth):
    model = Model(*pair)
    found = run(model, (None, None), leaf_rows, fanout, max_depth=max_depth)
    in_leaves = set()
    for leaf in found.leaves:
        in_leaves |= {k for k in model.differing() if in_range([k], leaf)}
    assert in_leaves == model.differing()


def test_an_equal_chunk_is_settled_without_a_query():
    model = Model({1: 1, 2: 2}, {1: 1, 2: 2})
    found = run(model, (None, None), 1, 4)
    assert found.leaves == [] and [r for r, _ in found.settled] == [(None, None)]
    assert model.cut_calls == 0 and found.measured == 0


def test_one_changed_row_in_many_costs_few_rows_and_digests():
    source = {k: 0 for k in range(50_000)}
    sink = dict(source, **{})
    sink[31_337] = 1
    model = Model(source, sink)
    found = run(model, (None, None), 256, 16)
    assert len(found.leaves) == 1
    (lo, hi) = found.leaves[0]
    assert lo <= 31_337 < hi and hi - lo <= 256
    assert found.measured <= 16 * 3  # three levels of 16 at most


def test_keys_that_do_not_cut_make_a_leaf():
    # a key held by every row (a chunk key that is not unique): cuts equal the start
    assert parts((5, 9), [5, 5, 5]) == [(5, 9)]
    assert parts((None, None), [3, 3, 7]) == [(None, 3), (3, 7), (7, None)]
    assert parts((1, 9), [9]) == [(1, 9)]


def test_decide_and_step():
    assert decide(D(3, 1), D(3, 1), 1, 0, 6) == "equal"
    assert decide(D(300, 1), D(300, 2), 256, 0, 6) == "split"
    assert decide(D(300, 1), D(300, 2), 256, 6, 6) == "rows"
    assert decide(D(1, 1), D(900, 2), 256, 0, 6) == "rows"  # one source row: nothing to cut at
    assert decide(D(200, 1), D(250, 2), 256, 0, 6) == "rows"
    assert step_for(50_000, 16) == 3125 and step_for(1, 16) == 1
    with pytest.raises(ValueError):
        step_for(10, 1)

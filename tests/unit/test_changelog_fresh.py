"""merger.history.changelog_fresh against the model (merger.history.changelog.appended_rows):
the changes it marks are exactly the ones the model's walk appends, on random batches and
logs (repeated keys and sequences, replays below the log's last sequence, truncate rows
without a key); a batch it leaves to the walk is one the walk may judge differently (a
float key) or refuses (a negative sequence)."""

from __future__ import annotations

import datetime
import decimal

import pyarrow as pa
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from merger.history.change import Change
from merger.history.changelog import AFTER, appended_rows
from merger.history.changelog_fresh import fresh_mask

KEY_KINDS = {
    "int": (pa.int64(), st.integers(-3, 3)),
    "string": (pa.string(), st.sampled_from(["a", "b", "A", "é", ""])),
    "decimal": (pa.decimal128(10, 2), st.sampled_from([decimal.Decimal(x) for x in ("0.00", "1.50", "-2.25")])),
    "binary": (pa.binary(), st.sampled_from([b"", b"\x00", b"a"])),
    "date": (pa.date32(), st.sampled_from([datetime.date(2020, 1, d) for d in (1, 2, 3)])),
    "bool": (pa.bool_(), st.booleans()),
    "float": (pa.float64(), st.sampled_from([0.0, -0.0, 1.5])),  # left to the walk: 0.0 == -0.0 in Python
}
HELD_SEQ = "__seq"  # the log's column, fresh_mask's default


@st.composite
def batches(draw):
    kinds = draw(st.lists(st.sampled_from(sorted(KEY_KINDS)), min_size=1, max_size=2, unique=True))
    names = [f"k_{k}" for k in kinds]
    schema = pa.schema([(f"k_{k}", KEY_KINDS[k][0]) for k in kinds])

    def keys(n):
        return [{f"k_{k}": draw(KEY_KINDS[k][1]) for k in kinds} for _ in range(n)]

    n = draw(st.integers(0, 12))
    batch = pa.Table.from_pylist(keys(n), schema=schema)
    seqs = draw(st.lists(st.sampled_from([-1] + list(range(8)) * 20), min_size=n, max_size=n))
    ops = draw(st.lists(st.sampled_from(["c", "u", "d", "r"]), min_size=n, max_size=n))
    held = None
    if draw(st.booleans()):
        m = draw(st.integers(0, 8))
        rows = keys(m)
        for row in rows:  # a truncate row: no key
            if draw(st.integers(0, 5)) == 0:
                row.update(dict.fromkeys(names))
        held = pa.Table.from_pylist(rows, schema=schema).append_column(
            HELD_SEQ, pa.array(draw(st.lists(st.integers(0, 8), min_size=m, max_size=m)), pa.int64())
        )
    return names, batch, seqs, ops, held


def model(names, batch: pa.Table, seqs, ops, held) -> list[bool]:
    """The rows the model's walk appends: for each appended (key, sequence), the first row of
    the batch with it (ValueError where the model refuses a change)."""
    last: dict[tuple, int] = {}
    for row in held.to_pylist() if held is not None else ():
        key = tuple(row[k] for k in names)
        if None not in key:
            last[key] = max(last.get(key, -1), row[HELD_SEQ])
    keys = [tuple(row[k] for k in names) for row in batch.to_pylist()]
    changes = [Change(k, op, s, None, None if op == "d" else {}) for k, op, s in zip(keys, ops, seqs)]
    appended = {(r.key, r.sequence) for r in appended_rows(last, changes, AFTER).rows}
    keep, seen = [], set()
    for k, s in zip(keys, seqs):
        keep.append((k, s) in appended and (k, s) not in seen)
        seen.add((k, s))
    return keep


@given(batches())
def test_the_changes_it_marks_are_the_ones_the_model_appends(case):
    names, batch, seqs, ops, held = case
    mask = fresh_mask(batch, pa.array(seqs, pa.int64()), held, HELD_SEQ)
    if mask is None:
        # left to the walk only where the walk may judge otherwise or refuses
        assert any(n.startswith("k_float") for n in names) or min(seqs) < 0
        event("left to the walk")
        return
    event("marked over columns" + (" against a log" if held is not None and held.num_rows else ""))
    assert isinstance(mask, pa.Array) and mask.type == pa.bool_() and mask.null_count == 0
    assert mask.to_pylist() == model(names, batch, seqs, ops, held)


def test_a_replay_below_the_log_and_a_repeat_in_the_batch_are_not_appended():
    batch = pa.table({"id": pa.array([1, 1, 2, 3, 2], pa.int64())})
    held = pa.table({"id": pa.array([1, 2, None, 3], pa.int64()), HELD_SEQ: pa.array([4, 6, 9, 1], pa.int64())})
    seqs = pa.array([5, 5, 6, 1, 7], pa.int64())
    assert fresh_mask(batch, seqs).to_pylist() == [True, False, True, True, True]
    # key 1 above its 4 once; key 2 at its 6 a replay, 7 above; key 3 at its 1 a replay;
    # the truncate row (null key, 9) counts for no key
    assert fresh_mask(batch, seqs, held).to_pylist() == [True, False, False, False, True]
    renamed = held.rename_columns(["id", "s"])
    assert fresh_mask(batch, seqs, renamed, "s").to_pylist() == [True, False, False, False, True]
    assert fresh_mask(batch.slice(0, 0), seqs.slice(0, 0), held).to_pylist() == []


def test_a_sequence_per_change_or_an_error():
    with pytest.raises(ValueError, match="2 sequences for 1 changes"):
        fresh_mask(pa.table({"id": pa.array([1], pa.int64())}), pa.array([1, 2], pa.int64()))


@pytest.mark.parametrize(
    "keys, seqs",
    [
        (pa.table({"f": pa.array([0.0, -0.0], pa.float64())}), pa.array([1, 2], pa.int64())),
        (pa.table({"id": pa.array([1], pa.int64())}), pa.array([-1], pa.int64())),
        (pa.table({"id": pa.array([1], pa.int64())}), pa.array([None], pa.int64())),
        (pa.table({"id": pa.array([1], pa.int64())}), pa.array(["1"], pa.string())),
        (pa.table({"t": pa.array([0], pa.timestamp("us"))}), pa.array([1], pa.int64())),
    ],
    ids=["float key", "negative sequence", "null sequence", "text sequence", "timestamp key"],
)
def test_what_it_cannot_judge_as_the_walk_does_is_left_to_the_walk(keys, seqs):
    assert fresh_mask(keys, seqs) is None

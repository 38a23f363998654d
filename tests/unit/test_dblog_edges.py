"""Edges of the DBLog reconciliation (``merger.dblog``) that its main tests left open and a
mutation run (scripts/mutation.sh, docs/testing.md) found: the expiry clock of a window
opened at a time other than 0, the saved form of a window's HIGH commit time and cutover,
boundaries of the emission rule, and the key codec's less common types."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pyarrow as pa
import pytest

from merger.dblog import (
    DELETED,
    HIGH,
    LOW,
    STATE_VERSION,
    Reconciler,
    decode_key,
    emitted_rows,
    encode_key,
    high_sequence,
    swept_keys,
    unseen_mask,
    window_survives,
)
from tests.support.dict_sink import apply_change, apply_truncate, live_rows


def _round_trip(rec: Reconciler) -> Reconciler:
    return Reconciler.from_dict(json.loads(json.dumps(rec.to_dict(), allow_nan=False)))


def _ready(rec: Reconciler, wid: str, low: int = 0, high: int = 1) -> None:
    for p in range(rec.num_partitions):
        rec.on_marker(p, low, wid, LOW)
    for p in range(rec.num_partitions):
        rec.on_marker(p, high, wid, HIGH)
    rec.mark_staged(wid)


# -- expiry ------------------------------------------------------------------------------


def test_a_window_expires_timeout_after_its_own_opening_time():
    """The age is ``now - opened_at``: a window opened at 1000 is not due at 1005 with a
    timeout of 30 (``now + opened_at`` would say it is), and is due just past 1030."""
    rec = Reconciler(1)
    rec.open_window("w", [], opened_at=1000)
    rec.on_marker(0, 0, "w", LOW)
    assert rec.expired(now=1005, timeout=30) == []
    assert rec.expired(now=1030, timeout=30) == []  # exactly the timeout: not yet
    assert rec.expired(now=1030.5, timeout=30) == ["w"]


def test_expired_windows_come_oldest_first_then_by_id():
    rec = Reconciler(1)
    for wid, at in (("c", 5), ("b", 1), ("a", 5)):
        rec.open_window(wid, [], opened_at=at)
    assert rec.expired(now=100, timeout=10) == ["b", "a", "c"]


def test_a_window_with_every_high_does_not_expire_however_old():
    rec = Reconciler(2)
    rec.open_window("w", [], opened_at=0)
    _ready(rec, "w")
    assert rec.expired(now=10**6, timeout=1) == []


def test_only_a_behind_partition_that_lacks_high_holds_expiry_back():
    rec = Reconciler(2)
    rec.open_window("w", [], opened_at=0)
    rec.on_marker(0, 0, "w", LOW)
    rec.on_marker(1, 0, "w", LOW)
    rec.on_marker(1, 1, "w", HIGH)
    assert rec.expired(now=100, timeout=10, behind=[1]) == ["w"]  # partition 1 has its HIGH
    assert rec.expired(now=100, timeout=10, behind=[0]) == []
    assert rec.expired(now=100, timeout=10, behind=[5]) == ["w"]  # not a partition of the topic


# -- markers -----------------------------------------------------------------------------


def test_the_first_high_copy_gives_the_window_its_time_and_the_first_copies_their_cutover():
    rec = Reconciler(2)
    rec.open_window("w", ["t:0"], opened_at=0)
    assert rec.on_marker(0, 0, "w", "low", cutover={"moves": [1]})  # the kind in any case
    rec.on_marker(1, 0, "w", LOW, cutover={"moves": [9]})
    rec.on_marker(0, 5, "w", HIGH, sequence=77, time_us=None)
    assert rec.window("w").high_time_us is None  # a copy without a time gives none
    rec.on_marker(1, 6, "w", HIGH, sequence=77, time_us=1_700_000_000_000_000, cutover={"moves": [1, 2]})
    rec.on_marker(1, 7, "w", HIGH, time_us=5)  # a later duplicate changes nothing
    w = rec.window("w")
    assert w.high == {0: 77, 1: 77} and high_sequence(w) == 77
    assert w.high_time_us == 1_700_000_000_000_000
    assert w.cutover == {LOW: {"moves": [1]}, HIGH: {"moves": [1, 2]}}
    rec.on_marker(0, 8, "w", HIGH, time_us=6)
    assert rec.window("w").high_time_us == 1_700_000_000_000_000


def test_a_high_marker_without_its_sequence_takes_its_offset():
    rec = Reconciler(1)
    rec.open_window("w", [], opened_at=0)
    rec.on_marker(0, 3, "w", LOW)
    rec.on_marker(0, 9, "w", HIGH)
    assert rec.window("w").high == {0: 9}


def test_a_high_without_low_is_a_problem_that_forgets_seen_keys_and_later_markers():
    rec = Reconciler(2)
    rec.open_window("w", [], opened_at=0)
    rec.on_marker(0, 0, "w", LOW)
    rec.on_event(0, 1, ("k",), "u")
    assert rec.on_marker(1, 0, "w", HIGH, cutover={"x": 1})
    w = rec.window("w")
    assert w.problem == "HIGH marker at offset 0 of partition 1 without a LOW marker before it"
    assert w.seen == set() and w.high == {} and w.cutover == {}
    assert rec.on_marker(0, 2, "w", HIGH) and rec.on_marker(1, 1, "w", LOW)  # taken, ignored
    assert w.high == {} and w.low == {0: 0}
    rec.on_event(0, 3, ("k2",), "u")
    assert w.seen == set()
    rec.mark_staged("w")
    assert not rec.is_ready("w") and rec.expired(now=0, timeout=100) == ["w"]


def test_offsets_are_checked():
    rec = Reconciler(2)
    for bad in (-1, 1.0, "1", None):
        with pytest.raises(ValueError, match=r"^offset must be a non-negative int, got"):
            rec.on_event(0, bad, ("k",), "c")
    for bad in (-1, 2, 1.0, "0"):
        with pytest.raises(ValueError, match=r"^partition .* is outside 0\.\.1$"):
            rec.on_event(bad, 0, ("k",), "c")
    assert rec.on_event(0, 0, ("k",), "c") and rec.on_event(1, 0, ("k",), "c")
    assert rec.last_offsets == {0: 0, 1: 0}


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", None])
def test_a_reconciler_needs_a_positive_int_of_partitions(bad):
    with pytest.raises(ValueError, match=f"^num_partitions must be a positive int, got {bad!r}$"):
        Reconciler(bad)


def test_window_ids_are_non_empty_strings():
    rec = Reconciler(1)
    for bad in ("", None, 5):
        with pytest.raises(ValueError, match=f"^window id must be a non-empty string, got {bad!r}$"):
            rec.open_window(bad, [], 0)
    w = rec.open_window("w", iter(["t:0", "t:1"]), 3.5)
    assert (w.window_id, w.chunk_ids, w.opened_at) == ("w", ("t:0", "t:1"), 3.5)
    with pytest.raises(ValueError, match="^window 'w' is already open$"):
        rec.open_window("w", [], 0)
    with pytest.raises(KeyError, match="window 'nope' is not open"):
        rec.window("nope")


def test_an_unknown_op_is_refused_and_a_marker_kind_names_itself():
    rec = Reconciler(1)
    with pytest.raises(ValueError, match=r"^op must be one of c/u/d/r/t, got 'x'$"):
        rec.on_event(0, 0, ("k",), "x")
    with pytest.raises(ValueError, match=r"^marker kind must be LOW or HIGH, got 'MID'$"):
        rec.on_marker(0, 0, "w", "mid")
    assert rec.last_offsets == {}  # refused before taking the offset


def test_every_op_but_a_truncate_marks_its_key_seen():
    rec = Reconciler(1)
    rec.open_window("w", [], 0)
    rec.on_marker(0, 0, "w", LOW)
    for i, op in enumerate("cudr"):
        rec.on_event(0, i + 1, (op,), op)
    assert rec.window("w").seen == {("c",), ("u",), ("d",), ("r",)}


# -- truncates ---------------------------------------------------------------------------


def test_a_truncate_empties_the_windows_its_test_names_only():
    rec = Reconciler(1)
    for wid in ("a", "b", "late"):
        rec.open_window(wid, [wid], 0)
    rec.on_marker(0, 0, "a", LOW)
    rec.on_marker(0, 1, "b", LOW)
    rec.on_event(0, 2, ("k",), "u")
    asked = []

    def emptied(window):
        asked.append(window.window_id)
        return window.chunk_ids == ("a",)

    assert rec.on_event(0, 3, None, "t", emptied)
    assert sorted(asked) == ["a", "b"]  # "late" has no LOW yet: not asked
    assert (rec.window("a").truncated, rec.window("a").seen) == (True, set())
    assert (rec.window("b").truncated, rec.window("b").seen) == (False, {("k",)})
    rec.on_event(0, 4, ("k2",), "u")
    assert rec.window("a").seen == set()  # a truncated window records nothing more
    assert rec.window("late").seen == set()


def test_empty_windows_marks_the_named_open_windows_only():
    rec = Reconciler(1)
    for wid in ("a", "b", "broken"):
        rec.open_window(wid, [], 0)
    rec.on_marker(0, 0, "a", LOW)
    rec.on_event(0, 1, ("k",), "u")
    rec.on_marker(0, 2, "broken", HIGH)  # a problem
    asked = []

    def emptied(window):
        asked.append(window.window_id)
        return window.window_id != "b"

    rec.empty_windows(emptied)
    assert sorted(asked) == ["a", "b"]
    assert (rec.window("a").truncated, rec.window("a").seen) == (True, set())
    assert not rec.window("b").truncated and not rec.window("broken").truncated
    asked.clear()
    rec.empty_windows(emptied)
    assert asked == ["b"]  # an emptied window is not asked again


# -- persistence -------------------------------------------------------------------------


def test_the_saved_form_keeps_a_windows_high_time_and_cutover():
    rec = Reconciler(2)
    rec.open_window("w", ["t:0"], opened_at=7.25)
    rec.on_marker(0, 0, "w", LOW, cutover={"moves": [3]})
    rec.on_marker(0, 4, "w", HIGH, sequence=40, time_us=123_456, cutover={"moves": [3, 4]})
    data = json.loads(json.dumps(rec.to_dict()))
    (saved,) = data["windows"]
    assert saved["high_time_us"] == 123_456 and saved["cutover"] == {LOW: {"moves": [3]}, HIGH: {"moves": [3, 4]}}
    back = Reconciler.from_dict(data).window("w")
    assert back.high_time_us == 123_456 and back.cutover == {LOW: {"moves": [3]}, HIGH: {"moves": [3, 4]}}
    assert (back.high, back.low, back.opened_at, back.chunk_ids) == ({0: 40}, {0: 0}, 7.25, ("t:0",))


def test_the_saved_form_of_a_window_without_time_or_cutover_is_the_old_one():
    """Windows of the other key modes keep the form they had before these fields."""
    rec = Reconciler(1)
    rec.open_window("w", [], opened_at=0)
    rec.on_marker(0, 0, "w", LOW)
    rec.on_marker(0, 1, "w", HIGH, time_us=0)  # a time of 0 is a time
    rec.open_window("v", [], opened_at=0)
    data = rec.to_dict()
    assert data["version"] == STATE_VERSION == 1 and data["num_partitions"] == 1
    w, v = data["windows"]
    assert w["high_time_us"] == 0 and "cutover" not in w
    assert set(v) == {"id", "chunk_ids", "opened_at", "low", "high", "seen", "truncated", "staged", "problem"}
    back = Reconciler.from_dict(json.loads(json.dumps(data)))
    assert back.window("w").high_time_us == 0 and back.window("v").high_time_us is None
    assert back.window("v").cutover == {}


def test_a_restored_state_goes_on_like_the_saved_one():
    rec = Reconciler(2)
    rec.open_window("w", [], opened_at=0)
    rec.on_marker(0, 3, "w", LOW)
    rec.on_marker(1, 2, "w", LOW)
    rec.on_event(0, 4, ("a",), "u")
    rec.on_event(1, 3, None, "t", lambda w: False)
    back = _round_trip(rec)
    assert back.num_partitions == 2 and back.last_offsets == {0: 4, 1: 3}
    assert not back.on_event(0, 4, ("b",), "u")  # a replay, after the restart too
    assert back.on_event(1, 4, ("c",), "u")
    assert back.window("w").seen == {("a",), ("c",)}
    back.mark_staged("w")
    back.window("w").truncated = True
    again = _round_trip(back)
    assert again.window("w").truncated is True and again.window("w").staged is True


def test_the_state_version_is_checked():
    data = Reconciler(1).to_dict()
    assert Reconciler.from_dict(dict(data)).num_partitions == 1
    with pytest.raises(ValueError, match="^unsupported reconciler state version None$"):
        Reconciler.from_dict({k: v for k, v in data.items() if k != "version"})
    with pytest.raises(ValueError, match="^unsupported reconciler state version 2$"):
        Reconciler.from_dict({**data, "version": 2})


# -- the emission rule -------------------------------------------------------------------


def test_a_window_survives_a_cut_at_or_below_its_high_sequence():
    rec = Reconciler(1)
    rec.open_window("w", [], 0)
    _ready(rec, "w", low=2, high=5)
    w = rec.window("w")
    assert window_survives(w, 0) and window_survives(w, 5) and not window_survives(w, 6)
    w.truncated = True
    assert not window_survives(w, 0)


def test_the_unseen_mask_of_one_key_column_and_of_several():
    rows = pa.table({"a": pa.array([1, 2, 3], pa.int32()), "b": ["x", "y", "z"]})
    assert unseen_mask(rows, ["a"], set()).to_pylist() == [True, True, True]
    assert unseen_mask(rows, ["a"], {(2,), (9,)}).to_pylist() == [True, False, True]
    assert unseen_mask(rows, ["a", "b"], {(2, "y"), (3, "x")}).to_pylist() == [True, False, True]


def test_the_seen_keys_take_the_key_columns_type():
    """A BIGINT UNSIGNED key above 2**63 - 1: as the column's uint64 it is found, a type
    inferred from the Python ints (int64) could not even hold it."""
    rows = pa.table({"k": pa.array([1, 2**64 - 1], pa.uint64())})
    assert unseen_mask(rows, ["k"], {(2**64 - 1,)}).to_pylist() == [True, False]
    rec = Reconciler(1)
    rec.open_window("w", [], 0)
    rec.on_marker(0, 0, "w", LOW)
    rec.on_event(0, 1, (2**64 - 1,), "u")
    rec.on_marker(0, 2, "w", HIGH)
    rec.mark_staged("w")
    assert emitted_rows(rec.window("w"), rows, ["k"]).column("k").to_pylist() == [1]


def test_emitted_rows_are_snapshot_rows_at_the_high_sequence():
    rec = Reconciler(1)
    rec.open_window("w", [], 0)
    rec.on_marker(0, 0, "w", LOW)
    rec.on_event(0, 1, (2,), "u")
    rec.on_marker(0, 2, "w", HIGH, sequence=2**40)
    rec.mark_staged("w")
    rows = pa.table({"k": [1, 2, 3], "v": ["a", "b", "c"]})
    out = emitted_rows(rec.window("w"), rows, ["k"])
    assert out.schema.field("_cdc_seq").type == pa.int64()
    assert out.to_pylist() == [
        {"k": 1, "v": "a", "_cdc_op": "r", "_cdc_seq": 2**40},
        {"k": 3, "v": "c", "_cdc_op": "r", "_cdc_seq": 2**40},
    ]
    none = emitted_rows(rec.window("w"), rows, ["k"], truncated_through=2**40 + 1)
    assert none.num_rows == 0 and none.column_names == ["k", "v", "_cdc_op", "_cdc_seq"]


def test_swept_keys_delete_the_asked_keys_neither_read_nor_seen():
    rec = Reconciler(1)
    rec.open_window("w", [], 0)
    rec.on_marker(0, 0, "w", LOW)
    rec.on_event(0, 1, (3,), "d")
    rec.on_marker(0, 9, "w", HIGH)
    rec.mark_staged("w")
    w = rec.window("w")
    asked = pa.table({"k": pa.array([1, 2, 3, 4], pa.int64())})
    read = pa.table({"k": pa.array([2], pa.int32())})  # the staged rows' type may differ
    out = swept_keys(w, asked, read, ["k"])
    assert out.to_pylist() == [{"k": k, "_cdc_op": "d", "_cdc_seq": 9} for k in (1, 4)]
    assert swept_keys(w, asked, read.slice(0, 0), ["k"]).column("k").to_pylist() == [1, 2, 4]
    assert swept_keys(w, asked.slice(0, 0), read, ["k"]).num_rows == 0
    assert swept_keys(w, asked, read, ["k"], truncated_through=10).num_rows == 0
    assert swept_keys(w, asked, read, ["k"], truncated_through=9).num_rows == 2


def test_swept_keys_of_composite_keys_compare_whole_keys():
    rec = Reconciler(1)
    rec.open_window("w", [], 0)
    _ready(rec, "w", low=0, high=3)
    asked = pa.table({"a": [1, 1, 2], "b": ["x", "y", "x"]})
    read = pa.table({"a": [1, 2], "b": ["y", "y"]})
    out = swept_keys(rec.window("w"), asked, read, ["a", "b"])
    assert [(r["a"], r["b"]) for r in out.to_pylist()] == [(1, "x"), (2, "x")]


# -- the key codec and the reference sink --------------------------------------------------


@pytest.mark.parametrize(
    "value, encoded",
    [
        (None, ["n", None]),
        (True, ["?", True]),
        (False, ["?", False]),
        (5, ["i", "5"]),
        (-(2**70), ["i", str(-(2**70))]),
        (0.5, ["f", "0x1.0000000000000p-1"]),
        (Decimal("1.10"), ["d", "1.10"]),
        ("é", ["s", "é"]),
        (b"\x00\xff", ["b", "00ff"]),
        (bytearray(b"\x01"), ["b", "01"]),
        (memoryview(b"\x02"), ["b", "02"]),
        ((1, ("a",)), ["t", [["i", "1"], ["t", [["s", "a"]]]]]),
        (dt.datetime(2024, 1, 2, 3, 4, 5, 6), ["dt", "2024-01-02T03:04:05.000006"]),
        (dt.date(2024, 1, 2), ["da", "2024-01-02"]),
        (dt.time(3, 4, 5), ["ti", "03:04:05"]),
        (dt.timedelta(days=-1, seconds=5, microseconds=7), ["td", [-1, 5, 7]]),
    ],
)
def test_key_values_encode_to_tagged_json(value, encoded):
    assert encode_key(value) == encoded
    back = decode_key(encoded)
    assert back == (bytes(value) if isinstance(value, (bytearray, memoryview)) else value)
    assert type(back) is (bytes if isinstance(value, (bytearray, memoryview)) else type(value))


def test_the_key_codec_refuses_what_it_does_not_know():
    with pytest.raises(TypeError, match=r"^can't encode a key value of type list: \[1\]$"):
        encode_key([1])
    with pytest.raises(ValueError, match="^unknown key tag 'x'$"):
        decode_key(["x", 1])


def test_the_reference_sink_counts_live_rows_a_truncate_deletes():
    sink = {}
    part = {"a": 0, "a2": 0, "b": 0, "c": 1, "gone": 0}.get
    assert apply_change(sink, "a", 1, "A")
    assert apply_change(sink, "a2", 2, "A2")
    assert apply_change(sink, "b", 4, "B")
    assert apply_change(sink, "c", 1, "C")
    assert apply_change(sink, "gone", 1, DELETED)
    assert apply_truncate(sink, 0, 4, part) == 2  # a and a2 (b is not older; gone was no row)
    assert sink == {"a": (4, DELETED), "a2": (4, DELETED), "b": (4, "B"), "c": (1, "C"), "gone": (4, DELETED)}
    assert live_rows(sink) == {"b": "B", "c": "C"}
    assert apply_change(sink, "a", 5, "A5") and live_rows(sink)["a"] == "A5"

"""The cutover rules' edges (cdc.shard_cutover), each shown by a mutant of mutmut that the
model tests of test_shard_cutover.py let live: an empty range whose bounds are equal, a
text against a number, exact bounds as written, which switch rows count, a move of one
table deciding only that table's window rows, and a delete of a key with no live row."""

from __future__ import annotations

from decimal import Decimal

import pytest

from cdc.shard_cutover import (
    BEGIN,
    SWITCH,
    CutoverFilter,
    KeyRange,
    Move,
    WindowOwnership,
    bound_text,
    bound_to_json,
    bounds_refusal,
    compare_keys,
    owner_conflicts,
    passed_from_json,
)


def test_equal_bounds_are_an_empty_range_and_open_ends_are_not():
    assert "the range is empty" in bounds_refusal("s1", "k", "int", None, 5, 5)
    assert "the range is empty" in bounds_refusal("s1", "k", "varchar", "utf8mb4_bin", "a", "a ")  # PAD SPACE
    assert "(int)" in bounds_refusal("s1", "k", "int", None, 5, 5)
    assert bounds_refusal("s1", "k", "int", None, 5, 6) is None
    assert (
        bounds_refusal("s1", "k", "int", None, None, 5) is None
        and bounds_refusal("s1", "k", "int", None, 5, None) is None
    )
    assert bounds_refusal("s1", "k", "varchar", None, "a", "b").startswith("s1: key column k")  # no collation: refused


def test_a_text_never_compares_with_a_number_either_way():
    for a, b in (("1", 1), (1, "1"), ("1", Decimal(1)), (1.5, "a")):
        with pytest.raises(TypeError, match="do not compare"):
            compare_keys(a, b)
    assert compare_keys(1, 1.5) == -1 and compare_keys(Decimal("1.5"), 1.5) == 0 and compare_keys(2, 1.5) == 1


def test_bounds_keep_their_exact_digits():
    assert bound_text(Decimal("1E+3")) == "1000" and bound_text(Decimal("0.10")) == "0.10"
    assert bound_to_json(Decimal("1E+3")) == {"decimal": "1000"}
    r = KeyRange(1.1, 2.5)  # floats of an older reading become the Decimal of their text
    assert (r.low, r.high) == (Decimal("1.1"), Decimal("2.5")) and r.holds(Decimal("1.1"))


def test_a_control_row_of_another_kind_is_refused_with_what_it_was():
    with pytest.raises(ValueError, match="not a control row of a move: 'copy'"):
        passed_from_json([[[1, None, 0, 10, "s1", "s2"], "copy"]])


def test_only_the_targets_own_switch_rows_count_as_switched():
    one = Move(1, KeyRange(0, 10), "s1", "s2")
    two = Move(2, KeyRange(10, 20), "s1", "s2")
    f = CutoverFilter({"s2": [(one, BEGIN), (two, SWITCH)], "s1": [(one, SWITCH)]})
    assert f.switched("s2", 2) and not f.switched("s2", 1) and f.switched("s1", 1)
    assert f.moves_switched() == [two]  # s1 passed move 1's switch as its source, not its target


def test_a_move_of_one_table_decides_only_that_tables_window_rows():
    move = Move(1, KeyRange(0, 10), "s1", "s2", "db.orders")
    # s1 passed the switch of a move of db.orders: its window of db.items keeps key 5
    items = WindowOwnership("s1", "db.items", [], [(move, SWITCH)])
    assert items.decide(5) == (True, None)
    orders = WindowOwnership("s1", "db.orders", [], [(move, SWITCH)])
    assert orders.decide(5) == (False, "s2")


def test_a_delete_of_a_key_without_a_live_row_is_no_conflict():
    assert owner_conflicts({}, [("k", "s1/db.t", (), True), ("k", "s2/db.t", (), False)]) == []
    assert owner_conflicts({"k": "s1/db.t"}, [("k", "s2/db.t", (), False)]) == [("k", "s1/db.t", "s2/db.t")]


def test_the_refusals_an_operator_reads():
    assert bounds_refusal("s1", "k", "int", None, "a", "b") == (
        "s1: key column k is INT: give its bounds as numbers (--low 1000), not 'a', 'b'"
    )
    assert bounds_refusal("s1", "k", "varchar", "utf8mb4_bin", 1, 2) == (
        "s1: key column k is VARCHAR: give its bounds as texts (--low eu-7, or --low '\"1000\"' for digits), not 1, 2"
    )
    assert bounds_refusal("s1", "k", "varchar", "utf8mb4_general_ci", "a", "b") == (
        "s1: key column k has collation utf8mb4_general_ci, whose order ingest and the merger cannot reproduce "
        "(case and accents: 'B' and 'é' are inside ['a', 'm') there): text bounds need a key of collation "
        "ascii_bin, utf8_bin, utf8mb3_bin, utf8mb4_bin (ALTER TABLE ... MODIFY k ... COLLATE utf8mb4_bin on every "
        "shard), or move by an integer or DECIMAL key (docs/sharding.md)"
    )
    assert bounds_refusal("s1", "k", "double", None, 1, 2) == (
        "s1: key column k is DOUBLE: a move's range is on an integer, DECIMAL or binary-collated CHAR/VARCHAR key "
        "(docs/sharding.md)"
    )


def test_a_float_key_meets_a_decimal_bound_as_the_server_compares_them_as_doubles():
    assert compare_keys(Decimal("1.1"), 1.1) == 0 and compare_keys(1.1, Decimal("1.1")) == 0
    r = KeyRange(Decimal("0"), 2.2)
    assert r.high == Decimal("2.2") and isinstance(r.high, Decimal)


def test_a_window_row_is_sent_to_the_target_of_its_own_tables_move():
    items = Move(1, KeyRange(0, 10), "s1", "s2", "db.items")
    orders = Move(2, KeyRange(0, 10), "s2", "s1", "db.orders")
    window = WindowOwnership("s1", "db.items", [], [(items, SWITCH), (orders, BEGIN)])
    assert window.decide(5) == (False, "s2")  # db.orders' later BEGIN does not decide db.items' key

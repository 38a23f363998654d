"""Edges of the SCD type 2 core (``merger.history.scd2``) that test_history_scd2.py left
open and a mutation run (scripts/mutation.sh, docs/testing.md) found: the truncate's
"below it", a latest-version lookup restricted to some keys, the notes' fields and texts,
what a plan is worth writing, and the options' messages."""

from __future__ import annotations

import dataclasses

import pytest

from merger.history.change import Change
from merger.history.scd2 import (
    SNAPSHOT_OPENED,
    SNAPSHOT_UPDATED,
    HistoryOptionsError,
    Note,
    Plan,
    SCD2Options,
    Version,
    apply_change,
    apply_changes,
    differing_columns,
    truncate,
)
from tests.unit.test_history_scd2 import latest_versions

OPTIONS = SCD2Options(keys=("id",), track_history=("name",))


def _version(key=1, start=10, last=None, end=None, **values):
    row = {"id": key, "name": "a", "visits": 0, **values}
    return Version((key,), row, start, start * 100, start if last is None else last, end, None if end is None else 0)


def test_a_truncate_closes_the_versions_applied_below_it_only():
    below = _version(1, start=5, last=9)
    at = _version(2, start=5, last=10)
    closed_before = _version(3, start=1, last=2, end=4)
    plan = truncate([below, at, closed_before], 10, 50)
    assert [(v.key, v.end_sequence, v.end_time) for v in plan.updated] == [((1,), 10, 500)]  # not before its start
    assert plan.inserted == [] and plan.notes == []


def test_the_latest_version_of_the_keys_asked_only():
    table = {((k,), s): _version(k, start=s) for k in (1, 2) for s in (10, 30, 20)}
    everything = latest_versions(table)
    assert {k: v.start_sequence for k, v in everything.items()} == {(1,): 30, (2,): 30}
    assert {k: v.start_sequence for k, v in latest_versions(table, {(2,)}).items()} == {(2,): 30}
    assert latest_versions(table, set()) == {}


def test_differing_columns_name_each_non_key_column_once():
    assert differing_columns({"id": 1, "name": "a"}, {"id": 1, "name": "b"}, OPTIONS) == ["name"]
    assert differing_columns({"id": 1}, {"id": 2, "x": 1}, OPTIONS) == ["x"]  # keys never count
    assert differing_columns({"name": "a", "gone": 1}, {"name": "a", "new": 2}, OPTIONS) == ["gone", "new"]
    assert differing_columns({"name": None}, {}, OPTIONS) == []  # missing is None


def test_a_plan_is_worth_writing_when_it_writes_a_version():
    v = _version()
    note = Note((1,), 1, SNAPSHOT_OPENED, "x")
    assert not Plan() and not Plan(notes=[note])
    assert Plan(inserted=[v]) and Plan(updated=[v]) and Plan(inserted=[v], updated=[v])
    assert Plan(inserted=[v], updated=[v]).upserts == [v, v]


def test_a_re_snapshot_of_a_deleted_key_says_so_with_its_key_and_sequence():
    deleted = _version(7, start=10, last=10, end=20)
    step = apply_change(deleted, Change((7,), "r", 30, 3000, {"id": 7, "name": "a", "visits": 0}), OPTIONS)
    assert step.rewritten is None and step.opened.start_sequence == 30
    assert step.note == Note(
        (7,),
        30,
        SNAPSHOT_OPENED,
        "re-snapshot found a row for key (7,) that the history holds as deleted "
        "(at sequence 20): new version opened at sequence 30",
    )


def test_a_re_snapshot_that_differs_says_which_columns():
    current = _version(7, start=10, name="a", visits=0)
    opened = apply_change(current, Change((7,), "r", 30, 3000, {"id": 7, "name": "b", "visits": 1}), OPTIONS)
    assert opened.note == Note(
        (7,),
        30,
        SNAPSHOT_OPENED,
        "re-snapshot found a different value for key (7,) (column(s) name, visits): new version opened at sequence 30",
    )
    updated = apply_change(current, Change((7,), "r", 30, 3000, {"id": 7, "name": "a", "visits": 1, "x": 2}), OPTIONS)
    assert updated.note == Note(
        (7,),
        30,
        SNAPSHOT_UPDATED,
        "re-snapshot found a different value for key (7,) in untracked column(s) visits, x: "
        "current version updated in place at sequence 30",
    )


def test_a_change_of_another_key_or_a_truncate_is_refused_saying_why():
    with pytest.raises(ValueError, match=r"^latest version of key \(1,\) given for a change of key \(2,\)$"):
        apply_change(_version(1), Change((2,), "u", 30, 0, {"id": 2}), OPTIONS)
    with pytest.raises(ValueError, match="^a truncate is applied with scd2.truncate, not as a change of one key$"):
        apply_change(None, Change((), "t", 30, 0), OPTIONS)


def test_an_op_that_slipped_past_the_change_check_is_an_error():
    odd = Change((1,), "u", 30, 0, {"id": 1})
    object.__setattr__(odd, "op", "x")  # a change made some other way than its constructor
    with pytest.raises(ValueError, match=r"^unknown op 'x' of a change of key \(1,\)$"):
        apply_change(_version(1), odd, OPTIONS)
    with pytest.raises(ValueError, match="^unknown op 'x'"):
        apply_changes({}, [odd], OPTIONS)


def test_the_options_messages():
    with pytest.raises(HistoryOptionsError, match="^history options: keys lists no column$"):
        SCD2Options(keys=())
    with pytest.raises(
        HistoryOptionsError, match="^history options: give track_history or track_history_except, not both$"
    ):
        SCD2Options(keys=("id",), track_history=("a",), track_history_except=("b",))
    with pytest.raises(HistoryOptionsError) as unknown:
        SCD2Options(keys=("id",), track_history_except=("x", "y")).validate(["id", "name", "z"])
    assert str(unknown.value) == (
        "history options: track_history_except names unknown column(s) x, y (the table has id, name, z)"
    )
    assert dataclasses.replace(OPTIONS).keys == ("id",)


def test_changes_that_are_not_snapshot_rows_carry_no_note():
    current = _version(7, start=10, name="a", visits=0)
    for values in ({"name": "b"}, {"visits": 3}):
        row = {"id": 7, "name": "a", "visits": 0, **values}
        step = apply_change(current, Change((7,), "u", 30, 3000, row), OPTIONS)
        assert step.note is None and step.rewritten is not None
    plan = apply_changes({(7,): current}, [Change((7,), "u", 30, 3000, {"id": 7, "name": "a", "visits": 3})], OPTIONS)
    assert plan.notes == [] and [v.last_sequence for v in plan.updated] == [30]


def test_options_that_track_key_columns_name_them():
    with pytest.raises(HistoryOptionsError, match="^history options: track_history lists key column.s. a, b$"):
        SCD2Options(keys=("a", "b"), track_history=("a", "v", "b"))

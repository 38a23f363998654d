"""One change as the history tables take it (``merger.history.change.Change``): what it
refuses, each with the message that names the fault, and the edges it accepts."""

from __future__ import annotations

import pytest

from merger.history.change import DELETE, INSERT, OPS, SNAPSHOT, TRUNCATE, UPDATE, UPSERTS, Change


def test_the_ops():
    assert UPSERTS == {INSERT, UPDATE, SNAPSHOT} == {"c", "u", "r"}
    assert OPS == {"c", "u", "r", "d", "t"} and (DELETE, TRUNCATE) == ("d", "t")


@pytest.mark.parametrize("op", ["c", "u", "r"])
def test_an_upsert_carries_the_row_after_it(op):
    change = Change((1,), op, 0, 5, {"id": 1}, before={"id": 0})
    assert (change.key, change.op, change.sequence, change.time) == ((1,), op, 0, 5)
    assert change.values == {"id": 1} and change.before == {"id": 0}
    assert Change((1,), op, 7, 5, {}).before is None  # an empty row is a row


def test_a_delete_and_a_truncate_carry_no_row():
    assert Change((1,), "d", 3, 0, before={"id": 1}).values is None
    assert Change((), "t", 3, 0).key == ()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"key": (1,), "op": "x", "sequence": 1, "values": {}}, r"op must be one of \[(.[cdrtu]., ){4}.u.\], got 'x'"),
        ({"key": (1,), "op": "C", "sequence": 1, "values": {}}, "got 'C'"),
        ({"key": (1,), "op": "c", "sequence": -1, "values": {}}, "sequence must be an int >= 0, got -1"),
        ({"key": (1,), "op": "c", "sequence": True, "values": {}}, "sequence must be an int >= 0, got True"),
        ({"key": (1,), "op": "c", "sequence": False, "values": {}}, "got False"),
        ({"key": (1,), "op": "c", "sequence": 1.0, "values": {}}, "got 1.0"),
        ({"key": (1,), "op": "c", "sequence": "1", "values": {}}, "got '1'"),
        ({"key": [1], "op": "c", "sequence": 1, "values": {}}, r"key must be a tuple, got \[1\]"),
        ({"key": (1,), "op": "t", "sequence": 1}, r"a truncate has the empty key \(\), got \(1,\)"),
        ({"key": (1,), "op": "c", "sequence": 1, "values": None}, "a 'c' change must carry values"),
        ({"key": (1,), "op": "r", "sequence": 1, "values": None}, "a 'r' change must carry values"),
        ({"key": (1,), "op": "d", "sequence": 1, "values": {}}, "a 'd' change must not carry values"),
        ({"key": (), "op": "t", "sequence": 1, "values": {}}, "a 't' change must not carry values"),
    ],
)
def test_a_malformed_change_is_refused_saying_why(kwargs, message):
    anchored = message.startswith(("op", "sequence", "key"))
    with pytest.raises(ValueError, match=f"^change {message}$" if anchored else message):
        Change(time=0, **kwargs)

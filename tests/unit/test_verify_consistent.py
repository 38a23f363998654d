"""Position-consistent verify, pure parts (merger.verify.consistent): the settle rule and
the window protocol, with fake callbacks."""

from __future__ import annotations

import pytest

from merger.verify.consistent import Confirmer, NotConfirmed, settle
from merger.verify.digest import encode_row

COLUMNS = ["id", "v"]


def positions(**by_key):
    return {encode_row((k,)): p for k, p in by_key.items()}


def test_a_key_changed_after_low_is_changing_not_different():
    out = settle(
        [("1",), ("2",)],
        COLUMNS,
        [0],
        [("1", "a"), ("2", "b")],
        [("1", "x"), ("2", "y")],
        positions(**{"1": 101, "2": 100}),
        low=100,
    )
    assert out.changing == [("1",)]
    assert out.diff.different == [(("2",), ("v",))]


def test_missing_extra_and_equal_keys():
    out = settle(
        [("1",), ("2",), ("3",), ("4",)],
        COLUMNS,
        [0],
        [("1", "a"), ("3", "c")],
        [("2", "b"), ("3", "c")],
        positions(**{"1": 5, "2": 7}),
        low=100,
    )
    assert out.diff.missing == [("1",)] and out.diff.extra == [("2",)] and out.diff.different == []
    assert out.changing == []  # 3 equal, 4 absent on both sides


def test_a_tombstone_after_low_makes_a_missing_key_changing():
    # deleted at the source after LOW (the read saw the row): the sink's tombstone says so
    out = settle([("1",)], COLUMNS, [0], [("1", "a")], [], positions(**{"1": 150}), low=100)
    assert out.changing == [("1",)] and out.diff.empty


def test_the_window_is_low_read_high_then_the_merger_report():
    calls = []
    status = {"n": 0}

    def write(table, wid, kind):
        calls.append((kind, wid))

    def report(table, wid):
        status["n"] += 1
        if status["n"] < 3:
            return None if status["n"] == 1 else {"low": 7, "high_partitions": 1, "truncated": False, "partitions": 2}
        return {"low": 7, "high_partitions": 2, "truncated": False, "partitions": 2}

    c = Confirmer(write, report, timeout=10, sleep=lambda s: None)
    rows, rep = c.window("db.t", lambda: calls.append(("read", None)) or ["row"])
    assert [k for k, _ in calls] == ["LOW", "read", "HIGH"]
    assert calls[0][1] == calls[2][1] and calls[0][1].startswith("verify-")
    assert rows == ["row"] and rep.low == 7 and not rep.truncated


def test_a_merger_that_never_reports_is_a_clear_error():
    clock = iter(range(0, 1000, 5))
    c = Confirmer(lambda *a: None, lambda *a: None, timeout=30, sleep=lambda s: None, clock=lambda: next(clock))
    with pytest.raises(NotConfirmed, match="cdc status"):
        c.window("db.t", lambda: [])

"""Repair's key rule (``merger.snapshot.repair``, its pure part): which keys a repair asks
for, how they are cut into windows and named, and the keys and deletes it hands the sinks.
Edges a mutation run (scripts/mutation.sh) found open in test_repair_plan.py."""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal

import pyarrow as pa
import pytest

from merger.dblog import encode_key
from merger.snapshot.repair import (
    KEYS_PER_WINDOW,
    RepairError,
    asked_table,
    chunk_keys,
    deletes_table,
    differing_keys,
    is_key_list,
    repair_plan,
)
from merger.verify.chunked import TableResult


def test_a_plan_keeps_the_first_occurrence_order_and_names_chunks_by_their_keys():
    keys = [(3, "b"), [1, "a"], (3, "b"), (2, "c")]
    plan = repair_plan("db.t", "r9", keys, per_window=2)
    assert {k: plan[k] for k in ("table", "where", "rows", "deleted", "done", "repair_id")} == {
        "table": "db.t",
        "where": None,
        "rows": 0,
        "deleted": 0,
        "done": [],
        "repair_id": "r9",
    }
    assert isinstance(plan["created_at"], float) and plan["created_at"] > 1.6e9
    first, second = plan["chunks"]
    assert chunk_keys(first) == [(3, "b"), (1, "a")] and chunk_keys(second) == [(2, "c")]
    part = [encode_key((3, "b")), encode_key((1, "a"))]
    assert first["keys"] == part
    assert first["id"] == "db.t:repair:" + hashlib.sha256(json.dumps(part).encode()).hexdigest()[:16]
    assert first["lo"] == first["hi"] == ["n", None]


def test_a_window_holds_at_most_the_given_number_of_keys():
    keys = [(i,) for i in range(KEYS_PER_WINDOW + 1)]
    assert [len(c["keys"]) for c in repair_plan("t", "r", keys)["chunks"]] == [KEYS_PER_WINDOW, 1]
    assert KEYS_PER_WINDOW == 500
    assert [len(c["keys"]) for c in repair_plan("t", "r", keys[:4], per_window=4)["chunks"]] == [4]
    assert [len(c["keys"]) for c in repair_plan("t", "r", keys[:4], per_window=1)["chunks"]] == [1, 1, 1, 1]


def test_every_kind_of_key_repair_can_name_is_planned():
    keys = [(1, "s", b"\x00", Decimal("1.50"))]
    (chunk,) = repair_plan("t", "r", keys)["chunks"]
    assert chunk_keys(chunk) == keys


@pytest.mark.parametrize("value", [True, False, 1.0, None, (1,)])
def test_a_key_value_repair_cannot_name_is_refused_saying_which(value):
    with pytest.raises(RepairError) as refused:
        repair_plan("db.t", "r", [(1,), (2, value)])
    assert str(refused.value) == (
        f"repair of db.t: key value {value!r} is of a type repair cannot name exactly "
        "(integer, decimal, string and binary keys only); `cdc snapshot` reads the table again"
    )


def test_no_keys_is_refused_naming_the_table():
    with pytest.raises(RepairError, match="^repair of db.t: no keys to repair$"):
        repair_plan("db.t", "r", [])


def test_a_chunk_is_a_key_list_when_it_carries_keys():
    assert is_key_list({"keys": []}) and not is_key_list({"lo": 1, "hi": 2})
    assert chunk_keys({"id": "c", "lo": ["n", None]}) == []


def test_asked_keys_as_the_sinks_text_columns_hold_them():
    schema = pa.schema([("s", pa.large_string()), ("n", pa.int64()), ("b", pa.binary())])
    t = asked_table(schema, ["s", "n", "b"], [(Decimal("1E+3"), 5, b"\x01"), (7, 6, b""), ("x", 7, b"\xff")])
    assert t.schema == schema
    assert t.column("s").to_pylist() == ["1000", "7", "x"]
    assert t.to_pylist()[1] == {"s": "7", "n": 6, "b": b""}
    plain = asked_table(pa.schema([("s", pa.string())]), ["s"], [(Decimal("0.10"),)])
    assert plain.column("s").to_pylist() == ["0.10"]


def test_deletes_follow_the_schemas_column_order():
    schema = pa.schema([("v", pa.string()), ("id", pa.int64()), ("w", pa.float64())])
    gone = pa.table({"id": [3, 4], "_cdc_op": ["d", "d"], "_cdc_seq": pa.array([9, 9], pa.int64())})
    out = deletes_table(schema, gone)
    assert out.column_names == ["v", "id", "w", "_cdc_op", "_cdc_seq"]
    assert out.schema.field("w").type == pa.float64() and out.schema.field("v").type == pa.string()
    assert out.to_pylist()[1] == {"v": None, "id": 4, "w": None, "_cdc_op": "d", "_cdc_seq": 9}


def _result(kinds, missing=(), extra=(), different=()):
    r = TableResult("db.t", "postgres")
    r.key_kinds = list(kinds)
    r.missing, r.extra, r.different = list(missing), list(extra), list(different)
    return r


def test_the_differing_keys_are_missing_then_extra_then_different():
    r = _result(["int", "string"], missing=[("1", "a")], extra=[(2, "b")], different=[(("3", "c"), ["v"])])
    assert differing_keys(r) == [(1, "a"), (2, "b"), (3, "c")]


def test_values_a_side_returned_are_taken_as_they_are():
    r = _result(["binary", "decimal", "int"], missing=[(memoryview(b"\x01"), Decimal("2.5"), 7)])
    (key,) = differing_keys(r)
    assert key == (b"\x01", Decimal("2.5"), 7) and type(key[0]) is bytes
    assert differing_keys(_result(["binary"], missing=[(bytearray(b"\x02"),)])) == [(b"\x02",)]


def test_no_differing_keys_need_no_kinds():
    assert differing_keys(_result([])) == []
    assert differing_keys(_result(["datetime"])) == []


@pytest.mark.parametrize(
    "kinds, message",
    [
        (["int", "datetime", "float"], "keys of kind datetime, float: repair names"),
        ([], "keys of kind unknown: repair names"),
    ],
)
def test_key_kinds_repair_cannot_name_are_an_error_with_the_way_out(kinds, message):
    with pytest.raises(RepairError) as refused:
        differing_keys(_result(kinds, missing=[("1",)]))
    assert str(refused.value).startswith(message)
    assert str(refused.value).endswith(
        "integer, decimal, string and binary keys only; `cdc snapshot db.t` reads the table again"
    )


@pytest.mark.parametrize("value", [True, 1.5, None])
def test_a_value_without_a_source_form_is_a_repair_error(value):
    with pytest.raises(RepairError, match=f"^a key verify reported cannot be named: key value {value!r} has no source"):
        differing_keys(_result(["int"], missing=[(value,)]))


def test_a_canonical_text_that_is_not_of_its_kind_is_a_repair_error():
    with pytest.raises(RepairError, match="^a key verify reported cannot be named: "):
        differing_keys(_result(["int"], missing=[("x",)]))

"""Repair plans and the `cdc repair` key hand-over, pure parts."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest

from cdc.cli.repair import plan_repairs
from merger.dblog import decode_key
from merger.snapshot.repair import (
    RepairError,
    asked_table,
    chunk_keys,
    deletes_table,
    is_key_list,
    key_list_where,
    repair_plan,
    window_where,
)
from merger.verify.chunked import TableResult
from tests.unit.test_chunking import mariadb_strings


def test_a_plan_cuts_the_keys_into_windows_of_at_most_n_keys_without_repeats():
    keys = [(i,) for i in range(7)] + [(3,)]
    plan = repair_plan("db.t", "r1", keys, per_window=3)
    assert plan["repair_id"] == "r1" and plan["deleted"] == 0 and plan["done"] == []
    assert [len(c["keys"]) for c in plan["chunks"]] == [3, 3, 1]
    assert [k for c in plan["chunks"] for k in chunk_keys(c)] == [(i,) for i in range(7)]
    assert all(is_key_list(c) and decode_key(c["lo"]) is None and decode_key(c["hi"]) is None for c in plan["chunks"])
    assert len({c["id"] for c in plan["chunks"]}) == 3
    # the same keys give the same chunk ids (a restarted merger finds its chunks done)
    assert [c["id"] for c in repair_plan("db.t", "r2", keys, per_window=3)["chunks"]] == [
        c["id"] for c in plan["chunks"]
    ]


@pytest.mark.parametrize("value", [1.5, None, True, object()])
def test_keys_repair_cannot_name_exactly_are_refused_with_what_to_do(value):
    with pytest.raises(RepairError, match="cdc snapshot"):
        repair_plan("db.t", "r", [(value,)])


def test_no_keys_is_refused():
    with pytest.raises(RepairError, match="no keys"):
        repair_plan("db.t", "r", [])


def test_the_select_condition_names_exactly_the_keys():
    assert key_list_where(["id"], [(1,), (-2,)]) == ("`id` IN (%s, %s)", [1, -2])
    assert key_list_where(["a", "b"], [("x'y", b"\x00"), ("z", bytearray(b""))]) == (
        "(`a`, `b`) IN ((%s, %s), (%s, %s))",
        ["x'y", b"\x00", "z", b""],
    )
    assert key_list_where(["d"], [(Decimal("1E+3"),)]) == ("`d` IN (%s)", [Decimal("1E+3")])
    assert key_list_where(["100%"], [(1,)]) == ("`100%%` IN (%s)", [1])
    assert key_list_where(["id"], []) == ("FALSE", [])


def _rendered(sql: str, params: list, no_backslash_escapes: bool) -> str:
    """The SQL pymysql sends for ``cursor.execute(sql, params)`` on a session whose server
    status says NO_BACKSLASH_ESCAPES or not (the flag pymysql's quoting follows)."""
    from pymysql.connections import Connection
    from pymysql.constants import SERVER_STATUS

    conn = Connection(defer_connect=True)  # its quoting only, no server
    conn.server_status = SERVER_STATUS.SERVER_STATUS_NO_BACKSLASH_ESCAPES if no_backslash_escapes else 0
    return sql % tuple(conn.escape(p) for p in params)


@pytest.mark.parametrize("no_backslash_escapes", [False, True])
def test_a_key_list_reads_its_keys_under_either_sql_mode(no_backslash_escapes):
    keys = [("a\\b",), ("\\\\",), ("O'Brien",), ("x' OR '1'='1",), ('say "hi"\\',)]
    sql, params = key_list_where(["k"], keys)
    text = _rendered(sql, params, no_backslash_escapes)
    assert mariadb_strings(text, no_backslash_escapes) == [k for (k,) in keys]
    assert _rendered("SELECT 1 FROM t WHERE " + sql, [Decimal("1E+3")] * 5, no_backslash_escapes).endswith(
        "IN (1000, 1000, 1000, 1000, 1000)"
    )  # pymysql writes a Decimal in plain notation


def test_a_window_of_a_key_list_reads_its_keys_a_range_window_its_plan_condition():
    plan = repair_plan("db.t", "r", [(5,), ("it's",)])
    assert window_where(None, plan["chunks"], ["id"]) == ("`id` IN (%s, %s)", [5, "it's"])
    assert window_where("x LIKE 'a%'", plan["chunks"], ["id"]) == (
        "(x LIKE 'a%%') AND `id` IN (%s, %s)",
        [5, "it's"],
    )
    range_chunk = {"id": "c", "lo": ["n", None], "hi": ["n", None]}
    assert window_where("x LIKE 'a%'", [range_chunk], ["id"]) == ("x LIKE 'a%'", [])


def test_asked_keys_take_the_sinks_key_types():
    schema = pa.schema([("id", pa.int32()), ("d", pa.string()), ("v", pa.float64())])
    t = asked_table(schema, ["id", "d"], [(1, Decimal("1.50")), (2, "x")])
    assert t.schema == pa.schema([("id", pa.int32()), ("d", pa.string())])
    assert t.to_pylist() == [{"id": 1, "d": "1.50"}, {"id": 2, "d": "x"}]
    with pytest.raises((pa.ArrowInvalid, pa.ArrowTypeError, TypeError)):
        asked_table(schema, ["id"], [("not a number",)])


def test_deletes_carry_every_column_nulls_beside_the_key():
    schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
    gone = pa.table({"id": [3], "_cdc_op": ["d"], "_cdc_seq": pa.array([9], pa.int64())})
    out = deletes_table(schema, gone)
    assert out.to_pylist() == [{"id": 3, "v": None, "_cdc_op": "d", "_cdc_seq": 9}]


def _result(sink, **kw):
    r = TableResult("db.t", sink)
    r.mismatched_chunks = 1
    r.key_kinds = kw.pop("kinds", ["int"])
    for k, v in kw.items():
        setattr(r, k, v)
    return r


def test_the_repair_asks_for_the_union_of_every_sinks_differing_keys_as_source_values():
    results = [
        _result("postgres", missing=[("1",)], extra=[(-1,)], different=[(("2",), ["v"])]),
        _result("delta", missing=[("2",)], extra=[], different=[], unlisted=4),
        TableResult("db.equal", "postgres"),
    ]
    (rep,) = plan_repairs(results)
    assert rep.table == "db.t" and rep.error is None
    assert rep.keys == [(1,), (-1,), (2,)]
    assert rep.found == {
        "postgres": {"inserted": 1, "updated": 1, "deleted": 1},
        "delta": {"inserted": 1, "updated": 0, "deleted": 0},
    }
    assert rep.unlisted == 4


def test_binary_and_decimal_keys_come_back_as_the_source_holds_them():
    (rep,) = plan_repairs([_result("postgres", kinds=["binary", "decimal"], missing=[("0x00ff", "1.5")])])
    assert rep.keys == [(b"\x00\xff", Decimal("1.5"))]


def test_a_key_kind_repair_cannot_name_is_an_error_naming_the_way_out():
    (rep,) = plan_repairs([_result("postgres", kinds=["datetime"], missing=[("2024-01-01 00:00:00",)])])
    assert rep.keys == [] and "cdc snapshot db.t" in rep.error

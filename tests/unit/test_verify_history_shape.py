"""Verify of SCD type 2 tables, the pure parts: the shape query's text, its rows read as
faults, how a result with faults reads (verdict, text, JSON), and which reader a table's
mode gets. The query itself runs against PostgreSQL in
tests/integration/test_verify_scd2.py."""

from __future__ import annotations

from rich.console import Console

from cdc.cli.repair import plan_repairs
from cdc.cli.verify import exit_code, render
from merger.verify.chunked import TableResult
from merger.verify.current_versions import CurrentVersions, reader_for_mode
from merger.verify.history_shape import FAULT_KINDS, ShapeFault, faults_of, shape_query
from merger.verify.sinks import DeltaReader, PostgresReader


def test_the_shape_query_partitions_by_every_key_column_and_quotes_them():
    q = shape_query('"db"."t"', ["a", 'we"ird'])
    assert 'PARTITION BY "a", "we""ird" ORDER BY "__start_seq"' in q
    assert 'jsonb_build_array("a", "we""ird")' in q
    assert 'FROM "db"."t" WHERE "__end_seq" IS NULL GROUP BY "a", "we""ird" HAVING count(*) > 1' in q
    for kind in FAULT_KINDS:
        assert f"'{kind}'" in q
    assert "n <= 5" in q


def test_the_shape_query_of_one_origin_limits_both_scans():
    q = shape_query('"db"."t"', ["id"], where="\"__origin\" = 's1'")
    assert q.count("WHERE \"__origin\" = 's1'") == 2
    assert 'WHERE "__origin" = \'s1\' AND "__end_seq" IS NULL GROUP BY' in q


def test_rows_become_faults_in_the_documented_order():
    rows = [("torn", 1, [[3]]), ("several_current", 2, [[1], [2]]), ("reversed", 0, [])]
    found = faults_of(rows)
    assert [f.kind for f in found] == ["several_current", "torn"]
    assert found[0] == ShapeFault("several_current", 2, ((1,), (2,)))
    assert faults_of([]) == []


def test_a_fault_reads_with_its_count_and_keys():
    f = ShapeFault("overlapping", 7, ((1,), (2, "x")))
    assert f.line() == "history: 7 versions that overlap the next version of their key (keys 1, (2, x), ...)"
    assert (
        ShapeFault("several_current", 1, ((5,),)).line()
        == "history: 1 keys with more than one current version (keys 5)"
    )
    assert f.to_json() == {
        "kind": "overlapping",
        "what": FAULT_KINDS["overlapping"],
        "count": 7,
        "examples": [[1], [2, "x"]],
    }


def test_shape_faults_make_the_table_differ_and_show_in_text_and_json():
    r = TableResult("db.h", "postgres", chunks=1, source_rows=3, sink_rows=3)
    assert r.verdict == "equal" and r.to_json()["history_faults"] == []
    r.history_faults = [ShapeFault("reversed", 1, ((4,),))]
    assert r.verdict == "different"
    assert exit_code([r]) == 1
    assert r.to_json()["history_faults"] == [
        {"kind": "reversed", "what": FAULT_KINDS["reversed"], "count": 1, "examples": [[4]]}
    ]
    console = Console(width=200, record=True)
    render([r], console)
    assert "history: 1 versions that end before they start" in console.export_text()


def test_shape_faults_alone_are_not_repaired_and_say_why():
    r = TableResult("db.h", "postgres", key_kinds=["int"])
    r.history_faults = [ShapeFault("several_current", 2, ((1,), (2,)))]
    (rep,) = plan_repairs([r])
    assert rep.keys == []
    assert "shape is faulty (2 faults" in rep.error and "does not rewrite versions" in rep.error


def test_each_mode_gets_its_reader():
    pg = PostgresReader({"host": "nowhere"})
    assert reader_for_mode(pg, "latest") is pg
    current = reader_for_mode(pg, "scd2")
    assert isinstance(current, CurrentVersions) and current.reader is pg and current.name == "postgres"
    assert reader_for_mode(pg, "changelog") is None
    assert reader_for_mode(DeltaReader("/nowhere"), "scd2") is None  # the Delta modes are not built


def test_current_versions_leave_the_history_columns_out():
    class Fake:
        rules = None

        def columns(self, db, table):
            cols = ["id", "v", "__start_at", "__end_at", "__start_seq", "__end_seq", "__last_seq", "__current"]
            return {c: "bigint" for c in cols} if table == "h" else None

    view = CurrentVersions(Fake())
    assert view.columns("db", "h") == {"id": "bigint", "v": "bigint"}
    assert view.columns("db", "gone") is None


def test_the_status_names_history_faults_of_a_background_pass():
    from cdc.cli.app import verified_cell

    now = 1000.0
    assert verified_cell({"at": now, "verdict": "different", "differing_keys": 3}, now) == "different (3 keys) 0s ago"
    shape_only = {"at": now, "verdict": "different", "differing_keys": 0, "history_faults": 2}
    assert verified_cell(shape_only, now) == "different (2 history faults) 0s ago"
    both = {"at": now, "verdict": "different", "differing_keys": 1, "history_faults": 2}
    assert verified_cell(both, now) == "different (1 keys, 2 history faults) 0s ago"


def test_an_origins_faults_name_their_keys_with_the_origin():
    from merger.verify.sharded import merge_results

    a = TableResult("db.h", "postgres", history_faults=[ShapeFault("torn", 1, ((3,),))])
    b = TableResult("db.h", "postgres", history_faults=[ShapeFault("torn", 2, ((4,), (5,)))])
    merged = merge_results("db.h", "postgres", [("s1/db.h_0", a), ("s2/db.h_1", b)], limit=20)
    assert merged.history_faults == [
        ShapeFault("torn", 1, ((3, "s1/db.h_0"),)),
        ShapeFault("torn", 2, ((4, "s2/db.h_1"), (5, "s2/db.h_1"))),
    ]
    assert merged.verdict == "different"

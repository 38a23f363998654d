"""Verify of SCD type 2 tables, the pure parts: the shape query's text, its rows read as
faults, how a result with faults reads (verdict, text, JSON), and which reader a table's
mode gets. The query itself runs against PostgreSQL in
tests/integration/test_verify_scd2.py and against Delta in
tests/integration/test_verify_delta_scd2.py; its DataFusion dialect runs here too, on a
small Delta table written by the test."""

from __future__ import annotations

from rich.console import Console

from cdc.cli.repair import plan_repairs
from cdc.cli.verify import exit_code, render
from merger.verify.chunked import TableResult
from merger.verify.current_versions import CurrentVersions, reader_for_mode
from merger.verify.history_shape import FAULT_KINDS, ShapeFault, faults_of, shape_query
from merger.verify.sinks.delta import DeltaReader
from merger.verify.sinks.postgres import PostgresReader


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
    delta = DeltaReader("/nowhere")
    assert reader_for_mode(delta, "latest") is delta
    current = reader_for_mode(delta, "scd2")
    assert isinstance(current, CurrentVersions) and current.reader is delta and current.name == "delta"
    assert current.only == {"only_null": "__end_seq"}
    assert reader_for_mode(delta, "changelog") is None


def test_current_versions_leave_the_history_columns_out():
    class Fake:
        rules = None
        name = "postgres"

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


def test_the_datafusion_shape_query_names_the_key_columns_and_has_no_json():
    q = shape_query('"t"', ["a", 'we"ird'], dialect="datafusion")
    assert "jsonb" not in q and "WINDOW" not in q
    assert 'OVER (PARTITION BY "a", "we""ird" ORDER BY "__start_seq")' in q
    assert '"a" AS k0, "we""ird" AS k1' in q
    assert "WHERE n <= 5 ORDER BY kind, n" in q
    for kind in FAULT_KINDS:
        assert f"'{kind}'" in q


def test_datafusion_rows_become_faults_with_their_keys():
    rows = [("torn", 3, 1, "x"), ("several_current", 2, 4, "y"), ("torn", 3, 2, "z")]
    found = faults_of(rows, keyed=2)
    assert found == [ShapeFault("several_current", 2, ((4, "y"),)), ShapeFault("torn", 3, ((1, "x"), (2, "z")))]
    assert faults_of([], keyed=1) == []


def _versions(path, rows):
    """A Delta table of versions ``(a, b, start_seq, end_seq, last_seq, start_at, end_at)``,
    times in hours since 2025-01-01 (None: open)."""
    import datetime as dt

    import pyarrow as pa
    from deltalake import write_deltalake

    t0 = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)

    def at(h):
        return None if h is None else t0 + dt.timedelta(hours=h)

    ts = pa.timestamp("us", tz="UTC")
    cols = list(zip(*rows))
    table = pa.table(
        {
            "a": pa.array(cols[0], pa.int32()),
            "b": pa.array(cols[1], pa.string()),
            "__start_at": pa.array([at(h) for h in cols[5]], ts),
            "__end_at": pa.array([at(h) for h in cols[6]], ts),
            "__start_seq": pa.array(cols[2], pa.int64()),
            "__end_seq": pa.array(cols[3], pa.int64()),
            "__last_seq": pa.array(cols[4], pa.int64()),
        }
    )
    write_deltalake(str(path), table)


def test_the_datafusion_shape_query_finds_each_fault_on_a_delta_table(tmp_path):
    """Versions written here, each key with one fault the test names (or none), the key of
    two columns; the query runs in DataFusion as verify runs it."""
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    _versions(
        tmp_path / "h",
        [
            (1, "ok", 10, 20, 15, 0, 1),  # sound: closed by a change, then open
            (1, "ok", 20, None, 20, 1, None),
            (1, "gap", 10, 20, 10, 0, 1),  # sound: deleted at 20, back at 30
            (1, "gap", 30, None, 30, 2, None),
            (2, "two", 10, None, 10, 0, None),  # several_current and overlapping
            (2, "two", 20, None, 20, 1, None),
            (3, "over", 10, 30, 10, 0, 2),  # overlapping: ends after the next starts
            (3, "over", 20, None, 20, 1, None),
            (4, "torn", 10, 20, 10, 0, 1),  # torn: ends at the next's sequence, an hour before it
            (4, "torn", 20, None, 20, 2, None),
            (5, "rev", 10, 20, 10, 3, 1),  # reversed: ends before it starts
            (6, "half", 10, 20, 10, 0, None),  # reversed: an end sequence without an end time
            (7, "last", 10, 20, 20, 0, 1),  # last_seq_outside: at its end
        ],
    )
    q = shape_query('"t"', ["a", "b"], dialect="datafusion")
    result = QueryBuilder().register("t", DeltaTable(str(tmp_path / "h"))).execute(q).read_all()
    t = pa.table(result)
    rows = list(zip(*(c.to_pylist() for c in t.columns)))
    assert faults_of(rows, keyed=2) == [
        ShapeFault("several_current", 1, ((2, "two"),)),
        ShapeFault("overlapping", 2, ((2, "two"), (3, "over"))),
        ShapeFault("torn", 1, ((4, "torn"),)),
        ShapeFault("reversed", 2, ((5, "rev"), (6, "half"))),
        ShapeFault("last_seq_outside", 1, ((7, "last"),)),
    ]
    # one origin's rows: the condition limits both scans
    only = shape_query('"t"', ["a", "b"], where='"a" = 2', dialect="datafusion")
    result = QueryBuilder().register("t", DeltaTable(str(tmp_path / "h"))).execute(only).read_all()
    t = pa.table(result)
    rows = list(zip(*(c.to_pylist() for c in t.columns)))
    assert [f.kind for f in faults_of(rows, keyed=2)] == ["several_current", "overlapping"]

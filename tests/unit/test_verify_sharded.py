"""Unit tests of `cdc verify`'s sharded pieces: merging the origins' results
(merger.verify.sharded), the sink rows of no origin, and the fixed-column filter of the
Delta reader and of the digest queries."""

from __future__ import annotations

import pyarrow as pa
import pytest

from merger.verify.chunked import TableResult
from merger.verify.sharded import add_strays, logical_key, merge_results, stray_note, stray_origins
from merger.verify.sinks.delta import DeltaReader
from merger.verify.sql_digest import fixed_predicate


def test_logical_key_appends_the_origin():
    assert logical_key((3,), "s1/db.t_0") == (3, "s1/db.t_0")
    assert logical_key((3, "a"), None) == (3, "a")


def test_merge_sums_and_names_the_origins():
    a = TableResult("db.t_0", "postgres", chunks=2, source_rows=10, sink_rows=9, mismatched_chunks=1, digest_chunks=1)
    a.missing = [(3,)]
    a.row_path = "row comparison asked for (--compare rows)"
    b = TableResult("db.t_1", "postgres", chunks=1, source_rows=5, sink_rows=5, mismatched_chunks=1)
    b.different = [((5,), ("v",))]
    b.extra = [(9,)]
    out = merge_results("db.t", "postgres", [("s1/db.t_0", a), ("s2/db.t_1", b)], limit=20)
    assert (out.table, out.sink) == ("db.t", "postgres")
    assert (out.chunks, out.source_rows, out.sink_rows, out.mismatched_chunks, out.digest_chunks) == (3, 15, 14, 2, 1)
    assert out.missing == [(3, "s1/db.t_0")]
    assert out.extra == [(9, "s2/db.t_1")]
    assert out.different == [((5, "s2/db.t_1"), ("v",))]
    assert out.row_path == "s1/db.t_0: row comparison asked for (--compare rows)"
    assert out.verdict == "different" and out.error is None and out.note is None


def test_merge_keeps_the_limit_and_counts_the_rest():
    parts = []
    for n in range(3):
        r = TableResult(f"db.t_{n}", "delta", mismatched_chunks=1, unlisted=1)
        r.missing = [(1,), (2,)]
        parts.append((f"s/db.t_{n}", r))
    out = merge_results("db.t", "delta", parts, limit=4)
    assert len(out.missing) == 4 and out.unlisted == 3 + 2


def test_merge_of_equal_origins_is_equal_and_errors_name_their_origin():
    ok = [("s1/db.t_0", TableResult("db.t_0", "delta", chunks=1, source_rows=4, sink_rows=4))]
    assert merge_results("db.t", "delta", ok, 20).verdict == "equal"
    bad = TableResult("db.t_1", "delta", error="the table disappeared from the source")
    out = merge_results("db.t", "delta", [*ok, ("s2/db.t_1", bad)], 20)
    assert out.verdict == "error" and out.error == "s2/db.t_1: the table disappeared from the source"
    skipped = [(None, TableResult("db.t", "delta", skipped=True))]
    assert merge_results("db.t", "delta", skipped, 20).verdict == "skipped"


def test_rows_of_no_origin_make_the_table_different():
    counts = {"s1/db.t_0": 10, "s9/db.t_0": 2, None: 1}
    strays = stray_origins(counts, ["s1/db.t_0", "s2/db.t_0"])
    assert strays == {"s9/db.t_0": 2, None: 1}
    assert stray_note("__cdc_origin", {}) is None
    r = add_strays(TableResult("db.t", "postgres", sink_rows=10), "__cdc_origin", strays)
    assert r.verdict == "different" and r.sink_rows == 13
    assert "'s9/db.t_0' (2 rows)" in r.note and "None (1 rows)" in r.note
    assert add_strays(TableResult("db.t", "postgres"), "__cdc_origin", {}).verdict == "equal"


def test_fixed_predicate_quotes():
    assert fixed_predicate("datafusion", "__cdc_origin", "s1/db.o'x") == "\"__cdc_origin\" = 's1/db.o''x'"
    assert fixed_predicate("postgresql", "o", "v") == "\"o\" = 'v'"
    with pytest.raises(ValueError):
        fixed_predicate("mariadb", "o", "v")


def test_delta_reader_reads_one_origin(tmp_path):
    from deltalake import write_deltalake

    ids = [1, 2, 3, 1, 2]
    origins = ["a/db.t", "a/db.t", "a/db.t", "b/db.t", "b/db.t"]
    table = pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "v": [f"v{i}" for i in range(5)],
            "__cdc_origin": origins,
            "_cdc_seq": pa.array([1] * 5, pa.int64()),
        }
    )
    write_deltalake(str(tmp_path / "db" / "t"), table)
    reader = DeltaReader(str(tmp_path))
    cols = reader.columns("db", "t")
    fixed = ("__cdc_origin", "b/db.t")
    rows = reader.rows_in_range("db", "t", ["id", "v"], cols, ["id"], ["int"], None, None, fixed=fixed)
    assert sorted(rows) == [(1, "v3"), (2, "v4")]
    rows = reader.rows_in_range(
        "db", "t", ["id", "v"], cols, ["id"], ["int"], ("2",), None, fixed=("__cdc_origin", "a/db.t")
    )
    assert sorted(rows) == [(2, "v1"), (3, "v2")]
    assert reader.value_counts("db", "t", "__cdc_origin") == {"a/db.t": 3, "b/db.t": 2}


def test_a_shards_owned_keys_as_sql():
    """The first range holding a key decides (latest control row first); none: owned."""
    from cdc.shard_cutover import KeyRange
    from merger.verify.union_source import owned_sql

    class Literal:
        def literal(self, v):
            return repr(v)

    assert owned_sql(Literal(), "id", []) is None
    ranges = [(KeyRange(10, 15), False), (KeyRange(None, 12), True), (KeyRange(None, None), False)]
    assert owned_sql(Literal(), "id", ranges) == (
        "CASE WHEN `id` >= 10 AND `id` < 15 THEN 0 WHEN `id` < 12 THEN 1 WHEN TRUE THEN 0 ELSE 1 END = 1"
    )


def test_the_text_report_says_how_many_chunks_were_narrowed():
    from io import StringIO

    from rich.console import Console

    from cdc.cli.verify import render
    from merger.verify.chunked import TableResult

    r = TableResult("db.t", "postgres", chunks=20, source_rows=1000, sink_rows=1000, mismatched_chunks=2)
    r.narrowed_chunks, r.different = 2, [((7,), ["v"])]
    out = StringIO()
    render([r], Console(file=out, width=200))
    assert "2 chunk(s) whose digests differed were narrowed by sub-range digests" in out.getvalue()
    merged = merge_results("db.t", "postgres", [(None, r), (None, r)], 20)
    assert merged.narrowed_chunks == 4

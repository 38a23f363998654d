"""The Delta reader's digests of a range's parts (the narrowing's sub-range digests):
each part's digest as ``digest_in_range`` gives it, from one load of the table."""

from __future__ import annotations

import pyarrow as pa

from merger.verify.sinks.delta import DeltaReader

ROW_SQL = 'CAST("v" AS VARCHAR)'


def test_parts_digests_are_the_ranges_digests_from_one_load(tmp_path):
    from deltalake import write_deltalake

    table = pa.table(
        {"id": pa.array(range(1, 11), pa.int64()), "v": [f"v{i}" for i in range(1, 11)], "_cdc_seq": [1] * 10}
    )
    write_deltalake(str(tmp_path / "db" / "t"), table)
    reader = DeltaReader(str(tmp_path))
    cols = reader.columns("db", "t")
    args = ("db", "t", cols, ["id"], ["int"])
    cuts = [("3",), ("7",)]
    edges = [("2",), *cuts, None]
    each = [reader.digest_in_range(*args, a, b, ROW_SQL) for a, b in zip(edges, edges[1:])]
    loads = []
    opened = reader._open
    reader._open = lambda db, t: loads.append(t) or opened(db, t)
    parts = reader.digests_in_parts(*args, ("2",), None, cuts, ROW_SQL)
    assert parts == each
    assert [d.rows for d in parts] == [1, 4, 4]
    assert parts[1] != parts[2]  # the values hashed differ
    assert loads == ["t"]
